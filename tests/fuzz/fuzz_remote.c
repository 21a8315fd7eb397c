/*
 * fuzz_remote - libFuzzer target for the remote engine's decoders: the
 * RESP2 reply parser (storage/resp.c), the CLUSTER SLOTS decoder
 * (storage/remote_slots.c) and the value header (storage/remote_value.c).
 *
 * The input is a stream of replies as a node would send them. It is parsed
 * three ways: whole, split into chunks whose sizes come from the input's
 * own bytes, and one byte at a time; each way once plain and once with an
 * expected bulk of (first byte % 64) bytes before every reply. The ways must
 * agree exactly: the same replies (type, flags, length, kept bytes, for
 * every value of the tree), the same expected-buffer contents, and an error
 * after the same number of replies. Every complete array reply goes through
 * the slot map decoder, whose ranges must be valid when it accepts them.
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

#include "kvs_remote_slots.h"
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

/* Parse @data in chunks (@mode 0: whole, 1: input-chosen sizes, 2: bytes). */
static void run(kvs_resp_parser *p, const uint8_t *data, size_t size, int mode,
		size_t expect, struct outcome *o)
{
	uint8_t dest[64];
	struct iovec iov[2] = { { dest, expect / 2 }, { dest + expect / 2, expect - expect / 2 } };
	size_t pos = 0, k = 0;

	memset(o, 0, sizeof(*o));
	kvs_resp_reset(p);
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

	if (!p && kvs_resp_parser_create(256, &p) != 0)
		abort();
	for (int e = 0; e < 2; e++) {
		size_t expect = e && size ? data[0] % 64 : 0;

		run(p, data, size, 0, expect, &whole);
		for (int mode = 1; mode <= 2; mode++) {
			run(p, data, size, mode, expect, &split);
			same(&whole, &split, mode);
		}
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
			 * exactly the one seal() makes of it */
			rc = kvs_rval_verify(mac, data, payload, plen, &info, NULL);
			if (rc != 0 && rc != -EBADMSG && rc != -EKEYREJECTED)
				abort();
			if (rc == 0 && (kvs_rval_seal(mac, &info, payload, again) != 0 ||
					memcmp(again, data, KVS_RVAL_HDR_BYTES) != 0))
				abort();
		}
	}
	return 0;
}
