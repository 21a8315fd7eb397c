/*
 * make_badinput - write the bad-input corpus: malformed messages as files,
 * each with a sidecar that states what the daemon must do with it.
 *
 *   cmake --build build --target make_badinput
 *   build/tests/make_badinput tests/badinput
 *
 * For each case NAME it writes DIR/NAME.msg (the bytes, sent as they are on
 * one connection) and DIR/NAME.expect, lines of:
 *   attach layout|none  before sending: a HELLO with the replay layout
 *                       (th_layout("badinput", 16)), or nothing
 *   reply OPCODE STATUS one reply, in order: its opcode and status (an
 *                       error reply has no payload)
 *   then open|close|eof open: the connection still answers a STATS;
 *                       close: the daemon closes it by itself;
 *                       eof: it waits for the rest of the message, and
 *                       closes without a reply when the sender shuts down
 *   count KIND N        errors.KIND grows by N (errors.total by the sum)
 * tests/integration/server/test_badinput_corpus.c replays them. The output is
 * committed; run this again when the wire format changes. Exit 0, or 1.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_wire.h"

static const char *dir;
static int failed;
static uint8_t buf[KVS_WIRE_HDR_SIZE + (8 + (KVS_MAX_HASHES + 1) * 16)];
static size_t len;

static void hdr(uint32_t magic, uint16_t version, uint16_t op, uint32_t plen,
		uint64_t id)
{
	kvs_wire_hdr h = { .magic = magic, .version = version, .opcode = op,
			   .len = plen, .req_id = id };

	kvs_wire_hdr_encode(&h, buf + len);
	len += KVS_WIRE_HDR_SIZE;
}

static void bytes(const void *p, size_t n)
{
	memcpy(buf + len, p, n);
	len += n;
}

/* A whole message: a good header of the current version and @n bytes. */
static void msg(uint16_t op, uint64_t id, const void *p, size_t n)
{
	hdr(KVS_WIRE_MAGIC, KVS_WIRE_VERSION, op, (uint32_t)n, id);
	bytes(p, n);
}

static size_t hashes(uint8_t *p, uint32_t count, uint32_t flags)
{
	kvs_hash h[4];

	for (uint32_t i = 0; i < 4; i++)
		h[i] = (kvs_hash){ 0xbad0000000000000ull + i, 0x1234 };
	return (size_t)kvs_wire_hashes_encode(h, count, flags, p, 8 + 4 * 16);
}

static size_t hello(uint8_t *p, const kvs_layout *l)
{
	int n = kvs_wire_hello_encode(l, p, 1024);

	if (n < 0) {
		fprintf(stderr, "make_badinput: hello encode: %d\n", n);
		failed = 1;
		return 0;
	}
	return (size_t)n;
}

/* Write the current buffer as NAME.msg and the expectation lines. */
static void out(const char *name, const char *expect, ...)
{
	char path[4096];
	FILE *f;
	va_list ap;

	snprintf(path, sizeof(path), "%s/%s.msg", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0)
		goto err;
	snprintf(path, sizeof(path), "%s/%s.expect", dir, name);
	f = fopen(path, "w");
	if (!f)
		goto err;
	va_start(ap, expect);
	vfprintf(f, expect, ap);
	va_end(ap);
	if (fclose(f) != 0)
		goto err;
	len = 0;
	return;
err:
	fprintf(stderr, "make_badinput: %s: %s\n", path, strerror(errno));
	failed = 1;
	len = 0;
}

static kvs_layout layout(void)
{
	return (kvs_layout){ .model = "badinput", .layers = 2, .kv_heads = 2,
			     .head_dim = 64, .block_tokens = 16, .tp_rank = 0,
			     .tp_size = 1, .dtype = KVS_DTYPE_FP16 };
}

static void stream(void)
{
	uint8_t p[1024], h[KVS_WIRE_HDR_SIZE];
	size_t n;

	/* Truncated: the daemon waits for the rest; a shutdown closes it. */
	hdr(KVS_WIRE_MAGIC, KVS_WIRE_VERSION, KVS_OP_LOOKUP, 40, 1);
	memcpy(h, buf, sizeof(h));
	len = 1;
	out("hdr-trunc-1", "attach layout\nthen eof\n");
	bytes(h, 23);
	out("hdr-trunc-23", "attach layout\nthen eof\n");
	n = hashes(p, 2, 0);
	hdr(KVS_WIRE_MAGIC, KVS_WIRE_VERSION, KVS_OP_LOOKUP, (uint32_t)n, 2);
	bytes(p, n - 5);
	out("payload-trunc", "attach layout\nthen eof\n");

	hdr(0x4b565330, KVS_WIRE_VERSION, KVS_OP_LOOKUP, 0, 3);
	out("bad-magic", "attach layout\nthen close\ncount proto 1\n");
	hdr(0, 0, 0, 0, 0);
	out("zero-header", "attach layout\nthen close\ncount proto 1\n");
	hdr(KVS_WIRE_MAGIC, KVS_WIRE_VERSION, KVS_OP_LOOKUP, KVS_WIRE_MAX_PAYLOAD + 1, 4);
	out("len-over-limit", "attach layout\nreply %d %d\nthen close\ncount toobig 1\n",
	    KVS_OP_LOOKUP, KVS_E_TOOBIG);
	hdr(KVS_WIRE_MAGIC, KVS_WIRE_VERSION, KVS_OP_RESERVE, UINT32_MAX, 5);
	out("len-4gib", "attach layout\nreply %d %d\nthen close\ncount toobig 1\n",
	    KVS_OP_RESERVE, KVS_E_TOOBIG);

	static const uint16_t versions[] = { 0, KVS_WIRE_VERSION + 1, 0xffff };
	for (size_t i = 0; i < 3; i++) {
		char name[32];

		n = hashes(p, 1, 0);
		hdr(KVS_WIRE_MAGIC, versions[i], KVS_OP_LOOKUP, (uint32_t)n, 6);
		bytes(p, n);
		snprintf(name, sizeof(name), "version-%u", versions[i]);
		out(name, "attach layout\nreply %d %d\nthen open\ncount version 1\n",
		    KVS_OP_LOOKUP, KVS_E_VERSION);
	}
	static const uint16_t ops[] = { 0, KVS_OP__COUNT, 99, 0xffff };
	for (size_t i = 0; i < 4; i++) {
		char name[32];

		memset(p, 0xa5, 40);
		msg(ops[i], 7, p, i % 2 ? 40 : 0);
		snprintf(name, sizeof(name), "opcode-%u", ops[i]);
		out(name, "attach layout\nreply %d %d\nthen open\ncount opcode 1\n",
		    ops[i], KVS_E_OPCODE);
	}
	/* lookup, unknown opcode, lookup in one write: answered in order. */
	n = hashes(p, 1, 0);
	msg(KVS_OP_LOOKUP, 8, p, n);
	msg(77, 9, NULL, 0);
	msg(KVS_OP_LOOKUP, 10, p, n);
	out("pipelined-bad-opcode",
	    "attach layout\nreply %d 0\nreply 77 %d\nreply %d 0\nthen open\ncount opcode 1\n",
	    KVS_OP_LOOKUP, KVS_E_OPCODE, KVS_OP_LOOKUP);
}

/* LOOKUP or RESERVE @op: hash lists wrong each way the decoder refuses. */
static void hash_list_faults(uint8_t *p, int op)
{
	const char *name = op == KVS_OP_LOOKUP ? "lookup" : "reserve";
	uint32_t over = KVS_MAX_HASHES + 1;
	char file[64];
	size_t n;

	/* Count past the limit, with every hash there. */
	hdr(KVS_WIRE_MAGIC, KVS_WIRE_VERSION, (uint16_t)op,
	    8 + over * KVS_WIRE_HASH_SIZE, 11);
	memset(buf + len, 0, 8 + (size_t)over * KVS_WIRE_HASH_SIZE);
	memcpy(buf + len, &over, 4); /* little-endian, as the format */
	for (uint32_t i = 0; i < over; i++)
		buf[len + 8 + 16 * (size_t)i] = (uint8_t)(i + 1);
	len += 8 + (size_t)over * KVS_WIRE_HASH_SIZE;
	snprintf(file, sizeof(file), "%s-count-over-limit", name);
	out(file, "attach layout\nreply %d %d\nthen open\ncount toomany 1\n",
	    op, KVS_E_TOOMANY);
	/* Count past the limit in a short payload: the count is refused. */
	memset(p, 0, 8);
	memcpy(p, &over, 4);
	msg((uint16_t)op, 12, p, 8);
	snprintf(file, sizeof(file), "%s-count-over-short", name);
	out(file, "attach layout\nreply %d %d\nthen open\ncount toomany 1\n",
	    op, KVS_E_TOOMANY);
	/* Count 4, two hashes there. */
	n = hashes(p, 2, 0);
	p[0] = 4;
	msg((uint16_t)op, 13, p, n);
	snprintf(file, sizeof(file), "%s-count-mismatch", name);
	out(file, "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    op, KVS_E_PROTO);
	/* Trailing bytes after the hashes. */
	n = hashes(p, 2, 0);
	memset(p + n, 0x77, 3);
	msg((uint16_t)op, 14, p, n + 3);
	snprintf(file, sizeof(file), "%s-trailing-bytes", name);
	out(file, "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    op, KVS_E_PROTO);
	/* Nonzero flags (reserved, must be zero). */
	n = hashes(p, 1, 0x80);
	msg((uint16_t)op, 15, p, n);
	snprintf(file, sizeof(file), "%s-nonzero-flags", name);
	out(file, "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    op, KVS_E_PROTO);
	/* A flag out of place: LOOKUP's REMOTE without QUERY (a
	 * query's part alone), or a LOOKUP flag on RESERVE (REMOTE:
	 * QUERY's bit is RESERVE's AFTER). */
	n = hashes(p, 1, KVS_LOOKUP_REMOTE);
	msg((uint16_t)op, 15, p, n);
	snprintf(file, sizeof(file), "%s-flag-misplaced", name);
	out(file, "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    op, KVS_E_PROTO);
}

/* RESERVE after nothing; COMMIT, RELEASE, ABORT, REPORT of the wrong size. */
static void fixed_size_faults(uint8_t *p)
{
	size_t n;

	/* RESERVE after a parent with no hash at all: no parent to name. */
	n = hashes(p, 0, KVS_RESERVE_AFTER);
	msg(KVS_OP_RESERVE, 15, p, n);
	out("reserve-after-empty", "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_RESERVE, KVS_E_PROTO);
	memset(p, 0, 16);
	msg(KVS_OP_COMMIT, 16, p, 9);
	out("commit-trailing-byte", "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_COMMIT, KVS_E_PROTO);
	msg(KVS_OP_RELEASE, 17, p, 4);
	out("release-short", "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_RELEASE, KVS_E_PROTO);
	msg(KVS_OP_ABORT, 18, p, 0);
	out("abort-empty", "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_ABORT, KVS_E_PROTO);
	memset(p, 0, 72);
	msg(KVS_OP_REPORT, 19, p, KVS_WIRE_REPORT_SIZE - 1);
	out("report-short", "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_REPORT, KVS_E_PROTO);
	msg(KVS_OP_REPORT, 20, p, KVS_WIRE_REPORT_SIZE + 8);
	out("report-long", "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_REPORT, KVS_E_PROTO);
}

/* FASTATTACH: 8 bytes, all zero, on an attached connection. */
static void fastattach_faults(uint8_t *p)
{
	memset(p, 0, 16);
	msg(KVS_OP_FASTATTACH, 21, p, KVS_WIRE_FAST_REQ_SIZE - 1);
	out("fastattach-short", "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_FASTATTACH, KVS_E_PROTO);
	msg(KVS_OP_FASTATTACH, 22, p, KVS_WIRE_FAST_REQ_SIZE + 1);
	out("fastattach-long", "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_FASTATTACH, KVS_E_PROTO);
	p[0] = 1;
	msg(KVS_OP_FASTATTACH, 23, p, KVS_WIRE_FAST_REQ_SIZE);
	out("fastattach-unknown-flag", "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_FASTATTACH, KVS_E_PROTO);
	p[0] = 0;
	p[5] = 1;
	msg(KVS_OP_FASTATTACH, 24, p, KVS_WIRE_FAST_REQ_SIZE);
	out("fastattach-nonzero-reserved", "attach layout\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_FASTATTACH, KVS_E_PROTO);
	p[5] = 0;
	msg(KVS_OP_FASTATTACH, 25, p, KVS_WIRE_FAST_REQ_SIZE);
	out("fastattach-before-hello", "attach none\nreply %d %d\nthen open\ncount notattached 1\n",
	    KVS_OP_FASTATTACH, KVS_E_NOTATTACHED);
}

/* HANDOVER: format and flags, 8 bytes (a well-formed one would hand the
 * daemon over: not here). */
static void handover_faults(uint8_t *p)
{
	memset(p, 0, 16);
	msg(KVS_OP_HANDOVER, 26, p, 7);
	out("handover-short", "attach none\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_HANDOVER, KVS_E_PROTO);
	msg(KVS_OP_HANDOVER, 27, p, 9);
	out("handover-long", "attach none\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_HANDOVER, KVS_E_PROTO);
}

/* Payloads that are wrong after a good header, one family at a time. */
static void payloads(void)
{
	uint8_t p[1024];

	for (int op = KVS_OP_LOOKUP; op <= KVS_OP_RESERVE; op++)
		hash_list_faults(p, op);
	fixed_size_faults(p);
	fastattach_faults(p);
	handover_faults(p);
}

/* HELLO payload faults: PROTO, the connection stays unattached and open. */
static void hello_payload_faults(uint8_t *p, const kvs_layout *l)
{
	kvs_layout o;
	size_t n;

	n = hello(p, l);
	msg(KVS_OP_HELLO, 20, p, 20);
	out("hello-truncated", "attach none\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_HELLO, KVS_E_PROTO);
	p[n] = 'x';
	msg(KVS_OP_HELLO, 21, p, n + 1);
	out("hello-trailing-byte", "attach none\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_HELLO, KVS_E_PROTO);
	n = hello(p, l);
	p[38] = 1; /* padding after the three name lengths */
	msg(KVS_OP_HELLO, 22, p, n);
	out("hello-nonzero-padding", "attach none\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_HELLO, KVS_E_PROTO);
	n = hello(p, l);
	p[0] = 0x80; /* a flag bit no version defines */
	msg(KVS_OP_HELLO, 23, p, n);
	out("hello-unknown-flag", "attach none\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_HELLO, KVS_E_PROTO);
	o = *l;
	o.model = "bad\x01input"; /* the byte at 3 becomes NUL below */
	n = hello(p, &o);
	p[40 + 3] = 0;
	msg(KVS_OP_HELLO, 24, p, n);
	out("hello-nul-in-model", "attach none\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_HELLO, KVS_E_PROTO);
	o = *l;
	o.salt = "tenant\x01" "42";
	n = hello(p, &o);
	p[n - 3] = 0;
	msg(KVS_OP_HELLO, 25, p, n);
	out("hello-nul-in-salt", "attach none\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_HELLO, KVS_E_PROTO);
	n = hello(p, l);
	p[32] = 0; /* model_len 256: past KVS_NAME_MAX */
	p[33] = 1;
	msg(KVS_OP_HELLO, 26, p, n);
	out("hello-name-too-long", "attach none\nreply %d %d\nthen open\ncount proto 1\n",
	    KVS_OP_HELLO, KVS_E_PROTO);
}

/* HELLO layout faults: LAYOUT. */
static void hello_layout_faults(uint8_t *p, const kvs_layout *l)
{
	static const struct { const char *name; int field; uint32_t v; } bad[] = {
		{ "layout-zero-layers", 0, 0 }, { "layout-zero-heads", 1, 0 },
		{ "layout-zero-tokens", 2, 0 }, { "layout-tp-size-0", 3, 0 },
		{ "layout-unknown-dtype", 4, 99 }, { "layout-huge-block", 5, 4u << 20 },
		{ "layout-size-overflow", 0, UINT32_MAX },
	};
	kvs_layout o;
	size_t n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o = *l;
		switch (bad[i].field) {
		case 0: o.layers = bad[i].v; break;
		case 1: o.kv_heads = bad[i].v; break;
		case 2: o.block_tokens = bad[i].v; break;
		case 3: o.tp_size = bad[i].v; break;
		case 4: o.dtype = (kvs_dtype)bad[i].v; break;
		case 5: o.head_dim = bad[i].v; break;
		}
		n = hello(p, &o);
		msg(KVS_OP_HELLO, 30 + i, p, n);
		out(bad[i].name, "attach none\nreply %d %d\nthen open\ncount layout 1\n",
		    KVS_OP_HELLO, KVS_E_LAYOUT);
	}
}

/* Sizes whose products overflow (kvs_kv_format_init checks each):
 * heads x dim = 2^32 overflows 32 bits (the block, 40 GiB, fits no
 * arena); K's parameters, 8 x heads x dim, wrap 64 bits to 0. */
static void hello_overflow_faults(uint8_t *p, const kvs_layout *l)
{
	static const struct {
		const char *name;
		uint32_t heads, dim;
		kvs_dtype dtype;
	} big[] = {
		{ "layout-overflow-32", 1u << 16, 1u << 16, KVS_DTYPE_INT8 },
		{ "layout-overflow-64", 1u << 30, 1u << 31, KVS_DTYPE_INT8 },
		{ "layout-overflow-64-int4", 1u << 31, 1u << 30, KVS_DTYPE_INT4 },
	};
	kvs_layout o;
	size_t n;

	for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
		o = *l;
		o.layers = 1;
		o.block_tokens = 1;
		o.kv_heads = big[i].heads;
		o.head_dim = big[i].dim;
		o.dtype = big[i].dtype;
		n = hello(p, &o);
		msg(KVS_OP_HELLO, 50 + i, p, n);
		out(big[i].name, "attach none\nreply %d %d\nthen open\ncount layout 1\n",
		    KVS_OP_HELLO, KVS_E_LAYOUT);
	}
}

static void hellos(void)
{
	uint8_t p[1024];
	kvs_layout l = layout(), o;
	size_t n;

	hello_payload_faults(p, &l);
	hello_layout_faults(p, &l);
	hello_overflow_faults(p, &l);
	/* A second HELLO with another layout: ATTACHED, still attached. */
	o = l;
	o.layers = 3;
	n = hello(p, &o);
	msg(KVS_OP_HELLO, 40, p, n);
	out("hello-second-other-layout",
	    "attach layout\nreply %d %d\nthen open\ncount layout 1\n",
	    KVS_OP_HELLO, KVS_E_ATTACHED);
	/* Work before any HELLO. */
	n = hashes(p, 1, 0);
	msg(KVS_OP_LOOKUP, 41, p, n);
	out("lookup-before-hello", "attach none\nreply %d %d\nthen open\ncount notattached 1\n",
	    KVS_OP_LOOKUP, KVS_E_NOTATTACHED);
}

/* DESCRIBE: side records, malformed each way the decoder refuses. */
static void describes(void)
{
	static uint32_t toks[KVS_DESC_TOKENS_MAX + 1];
	static uint8_t p[8 + 32 + 8 + 4 * (KVS_DESC_TOKENS_MAX + 1) + 8];
	uint8_t h[8] = "engine-h";
	kvs_block_desc d = { .hash_lo = 0xbad, .hash_hi = 0x1234,
			     .hash_kind = KVS_DESC_HASH_BYTES, .hash_len = 8,
			     .engine_hash = h, .block_size = 16, .ntokens = 16,
			     .tokens = toks };
	int n = kvs_wire_describe_encode(&d, 1, p, sizeof(p));
	static const char *const attached =
		"attach layout\nreply %d %d\nthen open\ncount %s 1\n";

	if (n < 0) {
		fprintf(stderr, "make_badinput: describe encode: %d\n", n);
		failed = 1;
		return;
	}
	msg(KVS_OP_DESCRIBE, 60, p, (size_t)n);
	out("describe-unknown-block", "attach layout\nreply %d 0\nthen open\n",
	    KVS_OP_DESCRIBE);
	msg(KVS_OP_DESCRIBE, 61, p, (size_t)n);
	out("describe-before-hello", "attach none\nreply %d %d\nthen open\ncount notattached 1\n",
	    KVS_OP_DESCRIBE, KVS_E_NOTATTACHED);
	msg(KVS_OP_DESCRIBE, 62, p, (size_t)n - 1);
	out("describe-truncated", attached, KVS_OP_DESCRIBE, KVS_E_PROTO, "proto");
	p[n] = 0;
	msg(KVS_OP_DESCRIBE, 63, p, (size_t)n + 1);
	out("describe-trailing-byte", attached, KVS_OP_DESCRIBE, KVS_E_PROTO, "proto");
	p[0] = 2; /* the payload's version */
	msg(KVS_OP_DESCRIBE, 64, p, (size_t)n);
	out("describe-version-2", attached, KVS_OP_DESCRIBE, KVS_E_VERSION, "version");
	p[0] = 1;
	p[8 + 16] = KVS_DESC_HASH_NONE; /* hash_kind */
	msg(KVS_OP_DESCRIBE, 65, p, (size_t)n);
	out("describe-no-hash", attached, KVS_OP_DESCRIBE, KVS_E_PROTO, "proto");
	p[8 + 16] = KVS_DESC_HASH_INT; /* an int hash of 8 bytes only */
	p[8 + 17] = 4;
	msg(KVS_OP_DESCRIBE, 66, p, (size_t)n - 4);
	out("describe-int-hash-4-bytes", attached, KVS_OP_DESCRIBE, KVS_E_PROTO, "proto");
	p[4] = 0x01; /* count 1025 */
	p[5] = 0x04;
	msg(KVS_OP_DESCRIBE, 67, p, (size_t)n);
	out("describe-too-many", attached, KVS_OP_DESCRIBE, KVS_E_TOOMANY, "toomany");
	p[4] = 0;
	p[5] = 0;
	msg(KVS_OP_DESCRIBE, 68, p, (size_t)n);
	out("describe-count-0", attached, KVS_OP_DESCRIBE, KVS_E_PROTO, "proto");
	d.ntokens = KVS_DESC_TOKENS_MAX;
	n = kvs_wire_describe_encode(&d, 1, p, sizeof(p));
	p[8 + 24] = (KVS_DESC_TOKENS_MAX + 1) & 0xff; /* one token past the bound */
	p[8 + 25] = (KVS_DESC_TOKENS_MAX + 1) >> 8;
	msg(KVS_OP_DESCRIBE, 69, p, (size_t)n + 4);
	out("describe-tokens-over", attached, KVS_OP_DESCRIBE, KVS_E_TOOBIG, "toobig");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: make_badinput DIR (e.g. tests/badinput)\n");
		return 1;
	}
	dir = argv[1];
	stream();
	payloads();
	hellos();
	describes();
	return failed;
}
