/*
 * fuzz_remote - libFuzzer target for the remote engine's decoders: the
 * RESP2 reply parser (storage/remote/resp.c), the CLUSTER SLOTS decoder
 * (storage/remote/remote_cluster_slots.c) and the value header (storage/remote/remote_value.c).
 *
 * The input is a stream of replies as a node would send them. It is parsed
 * three ways: whole, split into chunks whose sizes come from the input's
 * own bytes, and one byte at a time; each way once plain and once with an
 * expected bulk of (first byte % 64) bytes before every reply. The ways must
 * agree exactly: the same replies (type, flags, length, kept bytes, for
 * every value of the tree), the same expected-buffer contents, and an error
 * after the same number of replies. Every complete array reply goes through
 * the slot map decoder, whose ranges must be valid when it accepts them.
 * Then the same three ways under reply limits taken from bytes 1-3 (a byte
 * budget, a value count, an array depth, as the engine sets them per
 * command): the ways must agree again, and every reply the parser accepts
 * must fit them (its bytes on the wire, its values, its nesting); after
 * the input, one small reply must find the parser shrunk to its keep
 * sizes, however large the replies before it.
 * The first 64 bytes also go through the value header decoder, which must
 * re-encode what it accepts to the same bytes. A mismatch aborts (this is a
 * fuzz target, not library code).
 *
 * Build and run: tests/fuzz/run.sh. Without clang, tests/fuzz/replay.c turns
 * this file into a program that replays the seed corpus.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_remote_cluster_slots.h"
#include "kvs_remote_value.h"
#include "kvs_resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_REPLIES 64

struct outcome {
	uint64_t sum[MAX_REPLIES]; /* a digest of each reply */
	int nreplies;
	int error;                 /* after nreplies */
	uint8_t dest[MAX_REPLIES][64];
};

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

static uint64_t digest(const kvs_resp_parser *p, const kvs_resp_val *v, int depth)
{
	uint64_t h = mix(mix(mix(0, (uint64_t)v->type), v->flags), (uint64_t)v->n);

	if (depth > KVS_RESP_DEPTH_MAX + 1)
		abort();
	if (v->str && !(v->flags & KVS_RESP_DIRECT)) {
		for (int64_t i = 0; i < v->n; i++)
			h = mix(h, (uint8_t)v->str[i]);
		if (v->str[v->n] != '\0')
			abort(); /* kept strings are NUL-terminated */
	}
	if (v->type == KVS_RESP_ARRAY)
		for (int64_t i = 0; i < v->n; i++)
			h = mix(h, digest(p, kvs_resp_elem(p, v, (size_t)i), depth + 1));
	if (kvs_resp_elem(p, v, (size_t)(v->type == KVS_RESP_ARRAY ? v->n : 0)))
		abort(); /* past the end */
	return h;
}

static void check_slots(const kvs_resp_parser *p, const kvs_resp_val *v)
{
	static kvs_slot_range r[64];
	size_t n;

	if (kvs_slot_map_decode(p, v, r, 64, &n) != 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (r[i].first > r[i].last || r[i].last >= KVS_SLOTS ||
		    r[i].port == 0 || strlen(r[i].host) >= KVS_SLOT_HOST_MAX)
			abort();
}

/* The values of @v (itself included) into *@n, its array depth into
 * *@depth (0: not an array). */
static void shape(const kvs_resp_parser *p, const kvs_resp_val *v, uint64_t *n,
		  unsigned level, unsigned *depth)
{
	++*n;
	if (v->type != KVS_RESP_ARRAY)
		return;
	if (level + 1 > *depth)
		*depth = level + 1;
	for (int64_t i = 0; i < v->n; i++)
		shape(p, kvs_resp_elem(p, v, (size_t)i), n, level + 1, depth);
}

/* A reply of @bytes on the wire accepted under @lim must fit it. */
static void check_fits(const kvs_resp_parser *p, const kvs_resp_val *v,
		       size_t bytes, const kvs_resp_limits *lim)
{
	uint64_t n = 0;
	unsigned depth = 0;

	if (!lim)
		return;
	shape(p, v, &n, 0, &depth);
	if ((lim->bytes && bytes > lim->bytes) || (lim->elems && n > lim->elems) ||
	    depth > lim->depth)
		abort();
}

/* Parse @data in chunks (@mode 0: whole, 1: input-chosen sizes, 2: bytes),
 * under @lim (NULL: the fixed limits). */
static void run(kvs_resp_parser *p, const uint8_t *data, size_t size, int mode,
		size_t expect, const kvs_resp_limits *lim, struct outcome *o)
{
	uint8_t dest[64];
	struct iovec iov[2] = { { dest, expect / 2 }, { dest + expect / 2, expect - expect / 2 } };
	size_t pos = 0, k = 0, start = 0;

	memset(o, 0, sizeof(*o));
	kvs_resp_reset(p);
	if (kvs_resp_limit(p, lim) != 0)
		abort();
	memset(dest, 0xa5, sizeof(dest));
	if (expect)
		kvs_resp_expect(p, iov, 2);
	while (pos < size && o->nreplies < MAX_REPLIES) {
		size_t chunk = size - pos, used;
		int rc;

		if (mode == 1)
			chunk = 1 + data[k++ % size] % 17;
		else if (mode == 2)
			chunk = 1;
		if (chunk > size - pos)
			chunk = size - pos;
		rc = kvs_resp_parse(p, data + pos, chunk, &used);
		if (used > chunk)
			abort();
		pos += used;
		if (rc < 0) {
			o->error = rc;
			return;
		}
		if (rc == 1) {
			const kvs_resp_val *v = kvs_resp_reply(p);

			o->sum[o->nreplies] = digest(p, v, 0);
			check_fits(p, v, pos - start, lim);
			start = pos;
			if (v->flags & KVS_RESP_DIRECT)
				memcpy(o->dest[o->nreplies], dest, sizeof(dest));
			o->nreplies++;
			check_slots(p, v);
			memset(dest, 0xa5, sizeof(dest));
			if (expect && kvs_resp_expect(p, iov, 2) != 0)
				abort();
		} else if (used != chunk) {
			abort(); /* partial replies consume everything */
		}
	}
}

static void same(const struct outcome *a, const struct outcome *b, int mode)
{
	if (a->nreplies != b->nreplies || a->error != b->error ||
	    memcmp(a->sum, b->sum, sizeof(a->sum)) != 0 ||
	    memcmp(a->dest, b->dest, sizeof(a->dest)) != 0) {
		fprintf(stderr, "fuzz_remote: split mode %d disagrees: %d replies "
			"(error %d) vs %d (error %d)\n", mode, b->nreplies, b->error,
			a->nreplies, a->error);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static kvs_resp_parser *p;
	static struct outcome whole, split;

	static size_t keep_max;

	if (!p && kvs_resp_parser_create(256, &p) != 0)
		abort();
	if (!keep_max) /* a new parser's size and what it may keep */
		keep_max = kvs_resp_parser_mem(p) + KVS_RESP_KEEP_ARENA +
			   KVS_RESP_KEEP_VALS * (sizeof(kvs_resp_val) + sizeof(size_t));
	for (int e = 0; e < 2; e++) {
		size_t expect = e && size ? data[0] % 64 : 0;

		run(p, data, size, 0, expect, NULL, &whole);
		for (int mode = 1; mode <= 2; mode++) {
			run(p, data, size, mode, expect, NULL, &split);
			same(&whole, &split, mode);
		}
	}
	if (size >= 4) {
		kvs_resp_limits lim = { .bytes = (uint64_t)data[1] * 16,
					.elems = data[2] % 32,
					.depth = data[3] % (KVS_RESP_DEPTH_MAX + 1) };
		size_t used;

		run(p, data, size, 0, 0, &lim, &whole);
		for (int mode = 1; mode <= 2; mode++) {
			run(p, data, size, mode, 0, &lim, &split);
			same(&whole, &split, mode);
		}
		/* given back: one small reply after whatever came */
		kvs_resp_reset(p);
		if (kvs_resp_parse(p, (const uint8_t *)":1\r\n", 4, &used) != 1 ||
		    kvs_resp_parser_mem(p) > keep_max)
			abort();
	}
	if (size >= KVS_RVAL_HDR_BYTES) {
		kvs_rval_info info;
		uint8_t again[KVS_RVAL_HDR_BYTES];

		static kvs_rval_mac *mac;
		const uint8_t *payload = data + KVS_RVAL_HDR_BYTES;
		size_t plen = size - KVS_RVAL_HDR_BYTES;
		int rc;

		if (!mac && kvs_rval_mac_create(NULL, 0, &mac) != 0)
			abort();
		if (kvs_rval_decode(data, &info) == 0) {
			kvs_rval_encode(again, &info);
			if (memcmp(again, data, KVS_RVAL_HDR_BYTES) != 0)
				abort();
			/* the rest is the payload: a value that verifies is
			 * the one seal() makes of it in its version (version
			 * 3 but for its nonce and tag: seal draws a new nonce,
			 * and that value verifies too) */
			rc = kvs_rval_verify(mac, data, payload, plen, &info, NULL);
			if (rc != 0 && rc != -EBADMSG && rc != -EKEYREJECTED)
				abort();
			if (rc == 0 && (kvs_rval_mac_set_version(mac, info.version) != 0 ||
					kvs_rval_seal(mac, &info, payload, again) != 0 ||
					memcmp(again, data, info.version == KVS_RVAL_V_HMAC
						? KVS_RVAL_HDR_BYTES : KVS_RVAL_SIGNED_BYTES) != 0 ||
					kvs_rval_verify(mac, again, payload, plen, &info, NULL) != 0))
				abort();
		}
	}
	return 0;
}
