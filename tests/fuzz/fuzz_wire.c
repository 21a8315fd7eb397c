/*
 * fuzz_wire - libFuzzer target for the wire codec (proto/wire.c).
 *
 * The input is read as a message: a 24-byte header, then a payload. Every
 * decoder of kvs_wire.h runs on it: the header decoder on the first bytes,
 * and each payload decoder on the bytes after the header, on the header's own
 * `len` bytes of them, and on the whole input. Whatever decodes is encoded
 * again, and the bytes must come back the same: the decoders accept nothing
 * the encoders cannot say, and the encoders write nothing the decoders read
 * differently. A mismatch aborts (this is a fuzz target, not library code).
 *
 * Build and run: tests/fuzz/run.sh. Without clang, tests/fuzz/replay.c turns
 * this file into a program that replays the seed corpus.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void mismatch(const char *what, const uint8_t *a, const uint8_t *b,
		     size_t n)
{
	size_t i = 0;

	while (i < n && a[i] == b[i])
		i++;
	fprintf(stderr, "fuzz_wire: %s: re-encoding gives other bytes "
		"(first difference at byte %zu of %zu)\n", what, i, n);
	abort();
}

/* The encoder answered @rc for a payload that decoded from @n bytes. */
static void same_len(const char *what, int rc, size_t n)
{
	if (rc < 0 || (size_t)rc != n) {
		fprintf(stderr, "fuzz_wire: %s: decoded, but the encoder answers "
			"%d for %zu bytes\n", what, rc, n);
		abort();
	}
}

static void same(const char *what, int rc, const uint8_t *in, size_t n,
		 const uint8_t *out)
{
	same_len(what, rc, n);
	if (n && memcmp(in, out, n) != 0)
		mismatch(what, in, out, n);
}

static void check_hdr(const uint8_t *p, size_t n, kvs_wire_hdr *h)
{
	uint8_t out[KVS_WIRE_HDR_SIZE];
	int rc = kvs_wire_hdr_decode(p, n, KVS_WIRE_MAX_PAYLOAD, h);

	if (rc == -EAGAIN) {
		if (n >= KVS_WIRE_HDR_SIZE)
			abort();
		return;
	}
	/* Filled on every answer but -EAGAIN (the reply needs the req_id). */
	kvs_wire_hdr_encode(h, out);
	same("header", KVS_WIRE_HDR_SIZE, p, KVS_WIRE_HDR_SIZE, out);
	(void)kvs_wire_opcode_name(h->opcode);
	if (rc == 0 && (h->magic != KVS_WIRE_MAGIC ||
			h->version != KVS_WIRE_VERSION ||
			h->len > KVS_WIRE_MAX_PAYLOAD))
		abort();
}

static int has_nul(const char *s, size_t n)
{
	return n && memchr(s, '\0', n) != NULL;
}

static void check_hello(const uint8_t *p, size_t n)
{
	char model[KVS_NAME_MAX + 1], adapter[KVS_NAME_MAX + 1], salt[KVS_NAME_MAX + 1];
	kvs_wire_hello h;
	kvs_layout l;
	uint8_t *out;
	int rc;

	if (kvs_wire_hello_decode(p, n, &h) != 0)
		return;
	if (h.model_len > KVS_NAME_MAX || h.adapter_len > KVS_NAME_MAX ||
	    h.salt_len > KVS_NAME_MAX ||
	    h.flags & ~(KVS_HELLO_CONTROL | KVS_HELLO_GPU))
		abort();
	/* The strings lie inside the payload, back to back after 40 bytes. */
	if (h.model != (const char *)p + 40 ||
	    h.salt + h.salt_len != (const char *)p + n)
		abort();
	/* The decoder refuses NUL inside names (they are C strings to the
	 * encoder and the daemon): one that got through is a bug. */
	if (has_nul(h.model, h.model_len) || has_nul(h.adapter, h.adapter_len) ||
	    has_nul(h.salt, h.salt_len))
		abort();
	memcpy(model, h.model, h.model_len);
	model[h.model_len] = '\0';
	memcpy(adapter, h.adapter, h.adapter_len);
	adapter[h.adapter_len] = '\0';
	memcpy(salt, h.salt, h.salt_len);
	salt[h.salt_len] = '\0';
	out = malloc(n + 1);
	if (!out)
		abort();
	if (h.flags & KVS_HELLO_CONTROL) {
		/* A control hello says nothing else; one that does is accepted
		 * and its layout ignored, so only the empty one round-trips. */
		static const uint8_t zero[40 - 4];

		if (n != 40 || memcmp(p + 4, zero, sizeof(zero)) != 0) {
			free(out);
			return;
		}
		rc = kvs_wire_hello_encode(NULL, out, n);
	} else {
		l = (kvs_layout){
			.model = model,
			.adapter = h.adapter_len ? adapter : NULL,
			.salt = h.salt_len ? salt : NULL,
			.layers = h.layers,
			.kv_heads = h.kv_heads,
			.head_dim = h.head_dim,
			.block_tokens = h.block_tokens,
			.tp_rank = h.tp_rank,
			.tp_size = h.tp_size,
			.dtype = (kvs_dtype)h.dtype,
		};
		rc = kvs_wire_hello_encode_flags(&l, h.flags, out, n);
		/* One byte short must be refused, never overrun. */
		if (n && kvs_wire_hello_encode_flags(&l, h.flags, out, n - 1) != -ENOBUFS)
			abort();
	}
	same("hello", rc, p, n, out);
	free(out);
}

static void check_hello_reply(const uint8_t *p, size_t n)
{
	kvs_wire_hello_reply r;
	uint8_t out[64];

	if (kvs_wire_hello_reply_decode(p, n, &r) != 0)
		return;
	same("hello reply", kvs_wire_hello_reply_encode(&r, out, sizeof(out)), p,
	     n, out);
}

static void check_hashes(const uint8_t *p, size_t n)
{
	kvs_wire_hashes w;
	kvs_hash *hs;
	uint8_t *out;

	if (kvs_wire_hashes_decode(p, n, &w) != 0)
		return;
	if (w.count > KVS_MAX_HASHES || w.hashes != p + 8 ||
	    n != 8 + (size_t)w.count * KVS_WIRE_HASH_SIZE)
		abort();
	hs = malloc((w.count ? w.count : 1) * sizeof(*hs));
	out = malloc(n);
	if (!hs || !out)
		abort();
	for (uint32_t i = 0; i < w.count; i++)
		hs[i] = kvs_wire_hash_at(w.hashes, i);
	same("hashes", kvs_wire_hashes_encode(hs, w.count, w.flags, out, n), p, n,
	     out);
	if (kvs_wire_hashes_encode(hs, w.count, w.flags, out, n - 1) != -ENOBUFS)
		abort();
	free(hs);
	free(out);
}

static void check_blocks(const uint8_t *p, size_t n)
{
	kvs_wire_blocks w;
	kvs_block *bs;
	uint8_t *out;

	if (kvs_wire_blocks_decode(p, n, &w) != 0)
		return;
	if (w.count > KVS_MAX_HASHES || w.blocks != p + 16 ||
	    n != 16 + (size_t)w.count * KVS_WIRE_BLOCK_SIZE)
		abort();
	bs = malloc((w.count ? w.count : 1) * sizeof(*bs));
	out = malloc(n);
	if (!bs || !out)
		abort();
	for (uint32_t i = 0; i < w.count; i++)
		bs[i] = kvs_wire_block_at(w.blocks, i);
	same_len("blocks", kvs_wire_blocks_encode(w.lease, bs, w.count, out, n), n);
	if (memcmp(p, out, 16) != 0)
		mismatch("blocks (head)", p, out, 16);
	for (uint32_t i = 0; i < w.count; i++) {
		const uint8_t *a = p + 16 + (size_t)i * KVS_WIRE_BLOCK_SIZE;
		const uint8_t *b = out + 16 + (size_t)i * KVS_WIRE_BLOCK_SIZE;

		if (memcmp(a, b, KVS_WIRE_BLOCK_SIZE) != 0)
			mismatch("blocks (entry)", a, b, KVS_WIRE_BLOCK_SIZE);
	}
	if (kvs_wire_blocks_encode(w.lease, bs, w.count, out, n - 1) != -ENOBUFS)
		abort();
	free(bs);
	free(out);
}

static void check_u64(const uint8_t *p, size_t n)
{
	uint64_t v;
	uint8_t out[8];

	if (kvs_wire_u64_decode(p, n, &v) != 0)
		return;
	same("u64", kvs_wire_u64_encode(v, out, sizeof(out)), p, n, out);
}

static void check_report(const uint8_t *p, size_t n)
{
	kvs_engine_report r;
	uint8_t out[KVS_WIRE_REPORT_SIZE];

	if (kvs_wire_report_decode(p, n, &r) != 0)
		return;
	same("report", kvs_wire_report_encode(&r, out, sizeof(out)), p, n, out);
	if (kvs_wire_report_encode(&r, out, sizeof(out) - 1) != -ENOBUFS)
		abort();
}

static void check_fast(const uint8_t *p, size_t n)
{
	kvs_wire_fast_reply r;
	uint8_t out[KVS_WIRE_FAST_REPLY_SIZE];
	uint32_t flags;

	if (kvs_wire_fast_req_decode(p, n, &flags) == 0) {
		same("fastattach", kvs_wire_fast_req_encode(flags, out, sizeof(out)),
		     p, n, out);
	}
	if (kvs_wire_fast_reply_decode(p, n, &r) != 0)
		return;
	if (r.entries == 0 || (r.entries & (r.entries - 1)) || r.pin_cap == 0)
		abort();
	same("fastattach-reply", kvs_wire_fast_reply_encode(&r, out, sizeof(out)),
	     p, n, out);
	if (kvs_wire_fast_reply_encode(&r, out, sizeof(out) - 1) != -ENOBUFS)
		abort();
}

/* DESCRIBE: what decodes re-encodes to the same bytes (tokens copied out
 * of the payload, where they may be unaligned). */
static void check_describe(const uint8_t *p, size_t n)
{
	static kvs_block_desc d[KVS_WIRE_DESC_MAX];
	static uint32_t toks[KVS_WIRE_MAX_PAYLOAD / 4];
	kvs_wire_describe w;
	const uint8_t *q;
	uint8_t *out;
	size_t nt = 0;

	if (kvs_wire_describe_decode(p, n, &w) != 0)
		return;
	q = w.recs;
	for (uint32_t i = 0; i < w.count; i++) {
		kvs_wire_desc_next(&q, &d[i]);
		memcpy(toks + nt, (const void *)d[i].tokens, 4 * (size_t)d[i].ntokens);
		d[i].tokens = toks + nt;
		nt += d[i].ntokens;
	}
	if (q != p + n || !(out = malloc(n)))
		abort();
	same("describe", kvs_wire_describe_encode(d, w.count, out, n), p, n, out);
	if (kvs_wire_describe_encode(d, w.count, out, n - 1) != -ENOBUFS)
		abort();
	free(out);
}

/* Each decoder on exactly these @n bytes, in a buffer of their own, so that
 * AddressSanitizer sees any read past the end. */
static void check_payload(const uint8_t *src, size_t n)
{
	uint8_t *p = malloc(n ? n : 1);

	if (!p)
		abort();
	if (n)
		memcpy(p, src, n);
	check_hello(p, n);
	check_hello_reply(p, n);
	check_hashes(p, n);
	check_blocks(p, n);
	check_u64(p, n);
	check_report(p, n);
	check_fast(p, n);
	check_describe(p, n);
	free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kvs_wire_hdr h;

	check_hdr(data, size, &h);
	check_payload(data, size);
	if (size >= KVS_WIRE_HDR_SIZE) {
		size_t rest = size - KVS_WIRE_HDR_SIZE;

		check_payload(data + KVS_WIRE_HDR_SIZE, rest);
		if (h.len < rest)
			check_payload(data + KVS_WIRE_HDR_SIZE, h.len);
	}
	return 0;
}
