/*
 * test_badinput - every kind of bad input, sent on raw sockets: the daemon
 * answers the documented error (or closes the connection where the stream
 * cannot be trusted), counts it in errors.total and errors.<kind>, keeps the
 * connection usable where the contract says so, and keeps serving a good
 * client, checked after every case with a full lookup/reserve/commit round
 * trip (on a long-lived connection and on a new one).
 *
 *  stream:   bad magic (closed), garbage (closed), length over the limit
 *            (TOOBIG, then closed), wrong version (VERSION, payload skipped),
 *            unknown opcode (OPCODE, payload skipped), pipelined requests
 *            answered in order, truncated message / half a header / a
 *            request whose reply nobody reads, then a close.
 *  payloads: truncated, trailing bytes, count/length mismatch, unknown flags
 *            (PROTO), hash count over KVS_MAX_HASHES (TOOMANY) and exactly at
 *            it (fine).
 *  attach:   operations before HELLO or on a control-only connection
 *            (NOTATTACHED), a second HELLO with another layout (ATTACHED),
 *            invalid layouts (LAYOUT).
 *  leases:   another connection's lease (NOTOWNER), unknown or ended leases
 *            (NOLEASE), commit/abort of a read lease (LEASEKIND), too many
 *            leases (LIMIT).
 *  fuzz:     random well-framed messages; every one is answered or closes
 *            the connection.
 * Finally errors.total equals the sum of the per-kind counters.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_raw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BT 16
#define MAX_LEASES 8
#define CASE_WAIT_MS 1000

static th_daemon d;
static kvs_layout L;
static kvs_client *good;
static uint64_t next_seed = 5000;

static const char *const error_kinds[] = {
	"proto", "version", "opcode", "toobig", "toomany", "layout",
	"notattached", "lease", "full", "limit",
};

/* ---- after every case: the daemon still serves a good client ------------- */

static void round_trip(kvs_client *c, const char *after)
{
	kvs_hash h[3];
	size_t bad = 1;
	bool ok;

	th_chain(&L, next_seed++, 3, 0, 0, h);
	ok = CHECK_RC(th_probe(c, h, 3), 0) && CHECK_RC(th_publish(c, h, 3, NULL), 3) &&
	     CHECK_RC(th_verify(c, h, 3, &bad), 3) && CHECK_EQ(bad, 0);
	if (!ok)
		th_note("a good client failed after: %s", after);
}

static void still_serving(const char *after)
{
	kvs_client *fresh = th_connect(&d, &L);

	round_trip(good, after);
	round_trip(fresh, after);
	kvs_close(fresh);
}

/* ---- error accounting ------------------------------------------------------ */

typedef struct bad_case {
	const char *name;
	th_stats before;
} bad_case;

static void case_begin(bad_case *bc, const char *name)
{
	bc->name = name;
	th_stats_take(&d, &bc->before);
}

/* The case produced @n errors of @kind (and no other), the daemon lives. */
static void case_end(bad_case *bc, const char *kind, int n)
{
	char name[64];
	bool ok;

	/* Counted before the reply is sent (or the connection closed): the
	 * wait only covers the daemon noticing a close. */
	snprintf(name, sizeof(name), "errors.%s", kind);
	ok = CHECK(th_wait_stat(&d, name, th_stats_val(&bc->before, name) + n, CASE_WAIT_MS));
	ok &= CHECK(th_wait_stat(&d, "errors.total",
				 th_stats_val(&bc->before, "errors.total") + n, CASE_WAIT_MS));
	if (!ok)
		th_note("case '%s': expected %d more errors.%s", bc->name, n, kind);
	th_stats_free(&bc->before);
	still_serving(bc->name);
}

/* ---- raw requests ---------------------------------------------------------- */

/* A raw connection, attached with the test layout. */
static int raw_attached(void)
{
	int fd = th_raw_connect(&d);

	if (fd < 0)
		th_fatal("raw connect: %s", kvs_strerror(fd));
	if (!CHECK_RC(th_raw_hello(fd, &L, 1), 0))
		th_note("raw HELLO with a good layout failed");
	return fd;
}

static int raw_plain(void)
{
	int fd = th_raw_connect(&d);

	if (fd < 0)
		th_fatal("raw connect: %s", kvs_strerror(fd));
	return fd;
}

/* Read one reply and check its opcode, id and status; an error reply has no
 * payload. Returns the payload length, or -1. */
static int expect_reply(int fd, uint16_t op, uint64_t id, int status,
			uint8_t *payload, size_t cap, const char *what)
{
	uint8_t scratch[64];
	kvs_wire_hdr h;
	int n = th_raw_recv(fd, &h, payload ? payload : scratch,
			    payload ? cap : sizeof(scratch), TH_WAIT_MS);
	bool ok;

	ok = CHECK_GE(n, 0);
	if (ok) {
		ok &= CHECK_EQ(h.opcode, op);
		ok &= CHECK_EQ(h.req_id, id);
		ok &= CHECK_RC(h.status, status);
		if (status != 0)
			ok &= CHECK_EQ(n, 0);
	} else {
		th_note("%s: %s", what, n == TH_CLOSED ? "the daemon closed the connection"
							: kvs_strerror(n));
	}
	if (!ok)
		th_note("%s: not the expected reply", what);
	return ok ? n : -1;
}

static int send_hashes(int fd, uint16_t op, uint64_t id, const kvs_hash *h,
		       uint32_t n)
{
	size_t cap = 8 + (size_t)n * KVS_WIRE_HASH_SIZE;
	uint8_t *buf = malloc(cap);
	int len = kvs_wire_hashes_encode(h, n, 0, buf, cap), rc;

	rc = len < 0 ? len : th_raw_request(fd, op, id, buf, (size_t)len);
	free(buf);
	return rc;
}

static int send_lease(int fd, uint16_t op, uint64_t id, uint64_t lease)
{
	uint8_t buf[8];

	kvs_wire_u64_encode(lease, buf, sizeof(buf));
	return th_raw_request(fd, op, id, buf, sizeof(buf));
}

/* A lookup of an unknown hash on @fd answers 0 hits: the connection works. */
static void raw_usable(int fd, uint64_t id, const char *after)
{
	uint8_t reply[64];
	kvs_wire_blocks wb;
	kvs_hash h;
	int n;

	th_chain(&L, next_seed++, 1, 0, 0, &h);
	CHECK_RC(send_hashes(fd, KVS_OP_LOOKUP, id, &h, 1), 0);
	n = expect_reply(fd, KVS_OP_LOOKUP, id, 0, reply, sizeof(reply), after);
	if (n >= 0 && CHECK_RC(kvs_wire_blocks_decode(reply, (size_t)n, &wb), 0)) {
		CHECK_EQ(wb.count, 0);
		CHECK_EQ(wb.lease, 0);
	}
}

static void expect_closed(int fd, const char *what)
{
	if (!CHECK(th_raw_wait_closed(fd, TH_WAIT_MS)))
		th_note("%s: the daemon kept the connection open", what);
}

/* ---- the stream ------------------------------------------------------------ */

static void bad_magic(void)
{
	bad_case bc;
	uint8_t hdr[KVS_WIRE_HDR_SIZE], junk[256];
	kvs_wire_hdr h = { .magic = 0x4b565330, .version = KVS_WIRE_VERSION,
			   .opcode = KVS_OP_LOOKUP, .len = 0, .req_id = 2 };
	int fd;

	case_begin(&bc, "bad magic");
	fd = raw_attached();
	kvs_wire_hdr_encode(&h, hdr);
	CHECK_RC(th_raw_send(fd, hdr, sizeof(hdr)), 0);
	expect_closed(fd, bc.name);
	close(fd);
	case_end(&bc, "proto", 1);

	case_begin(&bc, "garbage before HELLO");
	fd = raw_plain();
	th_tokens((uint32_t *)junk, sizeof(junk) / 4, 99);
	CHECK_RC(th_raw_send(fd, junk, sizeof(junk)), 0);
	expect_closed(fd, bc.name);
	close(fd);
	case_end(&bc, "proto", 1);
}

static void too_big(void)
{
	static const uint32_t lens[] = { KVS_WIRE_MAX_PAYLOAD + 1, UINT32_MAX };

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		bad_case bc;
		int fd;

		case_begin(&bc, i ? "length 4 GiB" : "length over the limit by one");
		fd = raw_attached();
		CHECK_RC(th_raw_send_msg(fd, KVS_WIRE_VERSION, KVS_OP_LOOKUP, lens[i], 3,
					 NULL, 0), 0);
		expect_reply(fd, KVS_OP_LOOKUP, 3, KVS_E_TOOBIG, NULL, 0, bc.name);
		expect_closed(fd, bc.name);
		close(fd);
		case_end(&bc, "toobig", 1);
	}
}

static void wrong_version(void)
{
	static const uint16_t versions[] = { 0, KVS_WIRE_VERSION + 1, 0xffff };

	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		uint8_t p[8 + KVS_WIRE_HASH_SIZE];
		bad_case bc;
		kvs_hash h;
		int fd;

		case_begin(&bc, "wrong version");
		fd = raw_attached();
		/* With a payload: the daemon must skip it to stay in step. */
		th_chain(&L, next_seed++, 1, 0, 0, &h);
		kvs_wire_hashes_encode(&h, 1, 0, p, sizeof(p));
		CHECK_RC(th_raw_send_msg(fd, versions[i], KVS_OP_LOOKUP, sizeof(p), 4, p,
					 sizeof(p)), 0);
		expect_reply(fd, KVS_OP_LOOKUP, 4, KVS_E_VERSION, NULL, 0, bc.name);
		raw_usable(fd, 5, bc.name);
		close(fd);
		case_end(&bc, "version", 1);
	}
}

static void unknown_opcode(void)
{
	static const uint16_t ops[] = { 0, KVS_OP__COUNT, 99, 0xffff };

	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		uint8_t p[40] = { 1, 2, 3 };
		bad_case bc;
		int fd;

		case_begin(&bc, "unknown opcode");
		fd = raw_attached();
		CHECK_RC(th_raw_request(fd, ops[i], 6, p, i % 2 ? sizeof(p) : 0), 0);
		expect_reply(fd, ops[i], 6, KVS_E_OPCODE, NULL, 0, bc.name);
		raw_usable(fd, 7, bc.name);
		close(fd);
		case_end(&bc, "opcode", 1);
	}
}

static void pipelined(void)
{
	uint8_t buf[3 * (KVS_WIRE_HDR_SIZE + 8 + KVS_WIRE_HASH_SIZE)], *p = buf;
	kvs_wire_hdr h = { .magic = KVS_WIRE_MAGIC, .version = KVS_WIRE_VERSION };
	bad_case bc;
	kvs_hash hash;
	int fd, len;

	/* Three requests in one write: lookup, unknown opcode, lookup. */
	case_begin(&bc, "pipelined requests");
	fd = raw_attached();
	th_chain(&L, next_seed++, 1, 0, 0, &hash);
	for (int i = 0; i < 3; i++) {
		h.opcode = i == 1 ? 77 : KVS_OP_LOOKUP;
		h.req_id = 100 + (uint64_t)i;
		len = i == 1 ? 0 : kvs_wire_hashes_encode(&hash, 1, 0, p + KVS_WIRE_HDR_SIZE,
							 8 + KVS_WIRE_HASH_SIZE);
		h.len = (uint32_t)len;
		kvs_wire_hdr_encode(&h, p);
		p += KVS_WIRE_HDR_SIZE + len;
	}
	CHECK_RC(th_raw_send(fd, buf, (size_t)(p - buf)), 0);
	expect_reply(fd, KVS_OP_LOOKUP, 100, 0, NULL, 0, bc.name);
	expect_reply(fd, 77, 101, KVS_E_OPCODE, NULL, 0, bc.name);
	expect_reply(fd, KVS_OP_LOOKUP, 102, 0, NULL, 0, bc.name);
	close(fd);
	case_end(&bc, "opcode", 1);
}

static void cut_short(void)
{
	uint8_t hdr[KVS_WIRE_HDR_SIZE], p[8 + 4 * KVS_WIRE_HASH_SIZE];
	kvs_wire_hdr h = { .magic = KVS_WIRE_MAGIC, .version = KVS_WIRE_VERSION,
			   .opcode = KVS_OP_LOOKUP, .len = 100, .req_id = 8 };
	kvs_hash hs[4];
	bad_case bc;
	int fd;

	case_begin(&bc, "half a header, then close");
	fd = raw_attached();
	kvs_wire_hdr_encode(&h, hdr);
	CHECK_RC(th_raw_send(fd, hdr, KVS_WIRE_HDR_SIZE / 2), 0);
	close(fd);
	th_stats_free(&bc.before);
	still_serving(bc.name);

	case_begin(&bc, "truncated payload, then close");
	fd = raw_attached();
	th_chain(&L, next_seed++, 4, 0, 0, hs);
	kvs_wire_hashes_encode(hs, 4, 0, p, sizeof(p));
	CHECK_RC(th_raw_send_msg(fd, KVS_WIRE_VERSION, KVS_OP_RESERVE, sizeof(p), 9, p,
				 sizeof(p) / 2), 0);
	close(fd);
	th_stats_free(&bc.before);
	still_serving(bc.name);
	/* A reserve cut short reserved nothing. */
	CHECK(th_wait_stat(&d, "tier_host.blocks_writing", 0, TH_WAIT_MS));

	case_begin(&bc, "request, then close without reading the reply");
	fd = raw_attached();
	CHECK_RC(th_raw_request(fd, KVS_OP_STATS, 10, NULL, 0), 0);
	CHECK_RC(send_hashes(fd, KVS_OP_RESERVE, 11, hs, 4), 0);
	close(fd);
	th_stats_free(&bc.before);
	still_serving(bc.name);
	CHECK(th_wait_stat(&d, "tier_host.blocks_writing", 0, TH_WAIT_MS));
	CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS));
}

/* ---- payloads --------------------------------------------------------------- */

static void bad_payloads(void)
{
	uint8_t p[8 + 2 * KVS_WIRE_HASH_SIZE + 1];
	kvs_hash hs[2];
	int fd = raw_attached();
	struct {
		const char *name;
		uint16_t op;
		size_t len;
		void (*tweak)(uint8_t *p);
	} cases[] = {
		{ "lookup payload of 5 bytes", KVS_OP_LOOKUP, 5, NULL },
		{ "lookup without payload", KVS_OP_LOOKUP, 0, NULL },
		{ "lookup count 2, one hash", KVS_OP_LOOKUP, 8 + KVS_WIRE_HASH_SIZE, NULL },
		{ "reserve with a trailing byte", KVS_OP_RESERVE, sizeof(p), NULL },
		{ "commit lease of 4 bytes", KVS_OP_COMMIT, 4, NULL },
		{ "release lease of 9 bytes", KVS_OP_RELEASE, 9, NULL },
		{ "abort without payload", KVS_OP_ABORT, 0, NULL },
	};

	th_chain(&L, next_seed++, 2, 0, 0, hs);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bad_case bc;

		memset(p, 0, sizeof(p));
		kvs_wire_hashes_encode(hs, 2, 0, p, sizeof(p));
		case_begin(&bc, cases[i].name);
		CHECK_RC(th_raw_request(fd, cases[i].op, 20 + i, p, cases[i].len), 0);
		expect_reply(fd, cases[i].op, 20 + i, KVS_E_PROTO, NULL, 0, bc.name);
		raw_usable(fd, 40 + i, bc.name);
		case_end(&bc, "proto", 1);
	}

	{
		bad_case bc;

		/* Unknown flags in a lookup. */
		case_begin(&bc, "lookup with unknown flags");
		kvs_wire_hashes_encode(hs, 2, 0, p, sizeof(p));
		p[4] = 0x80;
		CHECK_RC(th_raw_request(fd, KVS_OP_LOOKUP, 50, p, 8 + 2 * KVS_WIRE_HASH_SIZE), 0);
		expect_reply(fd, KVS_OP_LOOKUP, 50, KVS_E_PROTO, NULL, 0, bc.name);
		raw_usable(fd, 51, bc.name);
		case_end(&bc, "proto", 1);
	}
	close(fd);
}

static void too_many_hashes(void)
{
	uint32_t n = KVS_MAX_HASHES + 1;
	kvs_hash *hs = calloc(n, sizeof(*hs));
	kvs_block *b = calloc(n, sizeof(*b));
	kvs_lease lease = 0;
	int fd = raw_attached();
	bad_case bc;

	for (uint32_t i = 0; i < n; i++)
		hs[i] = (kvs_hash){ .lo = i + 1, .hi = 0x70000000u };
	for (int op = KVS_OP_LOOKUP; op <= KVS_OP_RESERVE; op++) {
		case_begin(&bc, op == KVS_OP_LOOKUP ? "lookup of too many hashes"
						    : "reserve of too many hashes");
		CHECK_RC(send_hashes(fd, (uint16_t)op, 60, hs, n), KVS_E_TOOMANY);
		/* The codec refuses to build it: write the count by hand. */
		{
			size_t len = 8 + (size_t)n * KVS_WIRE_HASH_SIZE;
			uint8_t *p = calloc(1, len);

			p[0] = (uint8_t)n;
			p[1] = (uint8_t)(n >> 8);
			p[2] = (uint8_t)(n >> 16);
			CHECK_RC(th_raw_request(fd, (uint16_t)op, 61, p, len), 0);
			free(p);
		}
		expect_reply(fd, (uint16_t)op, 61, KVS_E_TOOMANY, NULL, 0, bc.name);
		raw_usable(fd, 62, bc.name);
		case_end(&bc, "toomany", 1);
	}
	/* Exactly the limit is fine (and all misses). */
	CHECK_RC(kvs_lookup(good, hs, KVS_MAX_HASHES, &lease, b), 0);
	CHECK_EQ(lease, 0);
	/* The client library refuses one more on its own. */
	CHECK_RC(kvs_lookup(good, hs, n, &lease, b), KVS_E_TOOMANY);
	close(fd);
	free(hs);
	free(b);
}

/* ---- attach ---------------------------------------------------------------- */

static void not_attached(void)
{
	static const uint16_t ops[] = { KVS_OP_LOOKUP, KVS_OP_RESERVE, KVS_OP_COMMIT,
					KVS_OP_ABORT, KVS_OP_RELEASE };
	kvs_client *ctl;
	kvs_hash h[2];
	kvs_lease lease = 0;
	kvs_block b[2];

	th_chain(&L, next_seed++, 2, 0, 0, h);
	for (int control = 0; control <= 1; control++)
		for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
			bad_case bc;
			char name[80];
			int fd = raw_plain();

			snprintf(name, sizeof(name), "%s %s", kvs_wire_opcode_name(ops[i]),
				 control ? "on a control-only connection" : "before HELLO");
			case_begin(&bc, name);
			if (control)
				CHECK_RC(th_raw_hello(fd, NULL, 1), 0);
			if (ops[i] == KVS_OP_LOOKUP || ops[i] == KVS_OP_RESERVE)
				CHECK_RC(send_hashes(fd, ops[i], 70, h, 2), 0);
			else
				CHECK_RC(send_lease(fd, ops[i], 70, 12345), 0);
			expect_reply(fd, ops[i], 70, KVS_E_NOTATTACHED, NULL, 0, bc.name);
			if (!control) {
				/* The connection stays: attach now and work. */
				CHECK_RC(th_raw_hello(fd, &L, 71), 0);
				raw_usable(fd, 72, bc.name);
			}
			close(fd);
			case_end(&bc, "notattached", 1);
		}
	/* Through the library: a control-only client cannot look up. */
	ctl = th_connect(&d, NULL);
	CHECK_RC(kvs_lookup(ctl, h, 2, &lease, b), KVS_E_NOTATTACHED);
	CHECK_RC(kvs_hash_tokens(ctl, (const uint32_t *)h, 0, h, 2), KVS_E_NOTATTACHED);
	kvs_close(ctl);
}

static void second_hello(void)
{
	kvs_layout other = L;
	bad_case bc;
	int fd;

	other.layers = 3;
	case_begin(&bc, "second HELLO with another layout");
	fd = raw_attached();
	CHECK_RC(th_raw_hello(fd, &other, 80), KVS_E_ATTACHED);
	raw_usable(fd, 81, bc.name); /* still attached with the first layout */
	close(fd);
	case_end(&bc, "layout", 1);
}

static void bad_layouts(void)
{
	struct {
		const char *name;
		kvs_layout l;
	} cases[8];
	int n = 0;
	kvs_client *c = NULL;

#define BAD_LAYOUT(what, field, value)                  \
	do {                                            \
		cases[n].name = what;                   \
		cases[n].l = L;                         \
		cases[n].l.field = value;               \
		n++;                                    \
	} while (0)
	BAD_LAYOUT("layout with 0 layers", layers, 0);
	BAD_LAYOUT("layout with 0 KV heads", kv_heads, 0);
	BAD_LAYOUT("layout with head_dim 0", head_dim, 0);
	BAD_LAYOUT("layout with 0 tokens per block", block_tokens, 0);
	BAD_LAYOUT("layout with tp_size 0", tp_size, 0);
	BAD_LAYOUT("layout with an unknown dtype", dtype, (kvs_dtype)99);
	/* 2 x 2 x 2 x 4M x 16 x 2 bytes: a block far bigger than the arena. */
	BAD_LAYOUT("layout with a block bigger than the arena", head_dim, 4u << 20);
	BAD_LAYOUT("layout whose block size overflows", layers, UINT32_MAX);
#undef BAD_LAYOUT
	for (int i = 0; i < n; i++) {
		bad_case bc;
		int fd = raw_plain();

		case_begin(&bc, cases[i].name);
		CHECK_RC(th_raw_hello(fd, &cases[i].l, 90), KVS_E_LAYOUT);
		close(fd);
		case_end(&bc, "layout", 1);
	}
	/* The library refuses a zero layout by itself. */
	CHECK_RC(kvs_connect(d.socket, &cases[0].l, &c), KVS_E_LAYOUT);
	CHECK(c == NULL);
}

/* ---- leases ---------------------------------------------------------------- */

static void lease_errors(void)
{
	kvs_client *other = th_connect(&d, &L);
	kvs_hash h[2], pub[2];
	kvs_block b[2];
	kvs_lease wl = 0, rl = 0;
	bad_case bc;
	int fd;

	th_chain(&L, next_seed++, 2, 0, 0, h);
	th_chain(&L, next_seed++, 2, 0, 0, pub);
	CHECK_RC(th_publish(good, pub, 2, NULL), 2);
	CHECK_RC(kvs_reserve(good, h, 2, &wl, b), 2);
	CHECK_RC(kvs_lookup(good, pub, 2, &rl, b), 2);

	/* Another connection's leases: through the library and raw. */
	case_begin(&bc, "another connection's lease");
	CHECK_RC(kvs_commit(other, wl), KVS_E_NOTOWNER);
	CHECK_RC(kvs_abort(other, wl), KVS_E_NOTOWNER);
	CHECK_RC(kvs_release(other, wl), KVS_E_NOTOWNER);
	CHECK_RC(kvs_release(other, rl), KVS_E_NOTOWNER);
	fd = raw_attached();
	CHECK_RC(send_lease(fd, KVS_OP_COMMIT, 100, wl), 0);
	expect_reply(fd, KVS_OP_COMMIT, 100, KVS_E_NOTOWNER, NULL, 0, bc.name);
	raw_usable(fd, 101, bc.name);
	close(fd);
	case_end(&bc, "lease", 5);

	case_begin(&bc, "commit of a read lease");
	CHECK_RC(kvs_commit(good, rl), KVS_E_LEASEKIND);
	CHECK_RC(kvs_abort(good, rl), KVS_E_LEASEKIND);
	case_end(&bc, "lease", 2);

	/* The owner's leases were not disturbed by any of it. */
	CHECK_RC(kvs_release(good, rl), 0);
	CHECK_RC(kvs_commit(good, wl), 2);
	CHECK_RC(th_probe(other, h, 2), 2);

	case_begin(&bc, "unknown and ended leases");
	CHECK_RC(kvs_commit(good, wl), KVS_E_NOLEASE); /* ended by its commit */
	CHECK_RC(kvs_release(good, rl), KVS_E_NOLEASE); /* ended by its release */
	CHECK_RC(kvs_abort(good, 0x5eed0000beefull), KVS_E_NOLEASE);
	CHECK_RC(kvs_release(good, 0x5eed0000beefull), KVS_E_NOLEASE);
	case_end(&bc, "lease", 4);
	kvs_close(other);
}

static void lease_limit(void)
{
	kvs_client *c = th_connect(&d, &L);
	kvs_lease leases[MAX_LEASES + 1];
	kvs_hash h[1];
	kvs_block b[1];
	bad_case bc;

	th_chain(&L, next_seed++, 1, 0, 0, h);
	CHECK_RC(th_publish(c, h, 1, NULL), 1);
	for (int i = 0; i < MAX_LEASES; i++)
		CHECK_RC(kvs_lookup(c, h, 1, &leases[i], b), 1);
	case_begin(&bc, "one lease more than --max-leases");
	CHECK_RC(kvs_lookup(c, h, 1, &leases[MAX_LEASES], b), KVS_E_LIMIT);
	case_end(&bc, "limit", 1);
	for (int i = 0; i < MAX_LEASES; i++)
		CHECK_RC(kvs_release(c, leases[i]), 0);
	CHECK_RC(kvs_lookup(c, h, 1, &leases[0], b), 1);
	CHECK_RC(kvs_release(c, leases[0]), 0);
	kvs_close(c);
}

/* ---- fuzz ------------------------------------------------------------------ */

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void fuzz(void)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;
	int fd = raw_attached(), answered = 0, closed = 0;

	for (uint64_t i = 0; i < 300; i++) {
		uint8_t p[96], reply[512];
		size_t len = rnd(&x) % sizeof(p);
		uint16_t op = (uint16_t)(rnd(&x) % (KVS_OP__COUNT + 2));
		kvs_wire_hdr h;
		int n;

		for (size_t k = 0; k < len; k++)
			p[k] = (uint8_t)rnd(&x);
		/* Sometimes a plausible count, to get past the first check. */
		if (len >= 8 && rnd(&x) % 2) {
			uint32_t cnt = (uint32_t)((len - 8) / KVS_WIRE_HASH_SIZE);

			memcpy(p, &cnt, 4);
			memset(p + 4, 0, 4);
		}
		CHECK_RC(th_raw_request(fd, op, 1000 + i, p, len), 0);
		n = th_raw_recv(fd, &h, reply, sizeof(reply), TH_WAIT_MS);
		if (n == TH_CLOSED) {
			closed++;
			close(fd);
			fd = raw_attached();
			continue;
		}
		if (!CHECK_GE(n, 0) || !CHECK_EQ(h.req_id, 1000 + i))
			break;
		answered++;
		/* A reserve that worked holds slots: hand them back. */
		if (h.status == 0 && (op == KVS_OP_RESERVE || op == KVS_OP_LOOKUP)) {
			kvs_wire_blocks wb;

			if (kvs_wire_blocks_decode(reply, (size_t)n, &wb) == 0 && wb.lease) {
				CHECK_RC(send_lease(fd, op == KVS_OP_RESERVE ? KVS_OP_ABORT
									     : KVS_OP_RELEASE,
						    5000 + i, wb.lease), 0);
				expect_reply(fd, op == KVS_OP_RESERVE ? KVS_OP_ABORT : KVS_OP_RELEASE,
					     5000 + i, 0, reply, sizeof(reply), "fuzz cleanup");
			}
		}
	}
	th_note("fuzz: %d answered, %d closed", answered, closed);
	close(fd);
	still_serving("fuzz");
}

static void check_error_sum(void)
{
	th_stats s;
	int64_t sum = 0;

	th_stats_take(&d, &s);
	for (size_t i = 0; i < sizeof(error_kinds) / sizeof(error_kinds[0]); i++) {
		char name[64];

		snprintf(name, sizeof(name), "errors.%s", error_kinds[i]);
		sum += th_stats_val(&s, name);
	}
	CHECK_EQ(th_stats_val(&s, "errors.total"), sum);
	th_stats_free(&s);
}

int main(void)
{
	char leases[16];

	th_init("test_badinput");
	/* Bad leases are the daemon's to refuse and count: socket leases
	 * (test_fastpath covers the fast path's own answers). */
	setenv("KVS_NO_FASTPATH", "1", 1);
	L = th_layout("bad-model", BT);
	snprintf(leases, sizeof(leases), "%d", MAX_LEASES);
	th_daemon_up(&d, TH_ARGS("--host-size", "16M", "--max-leases", leases));
	good = th_connect(&d, &L);
	still_serving("start");

	bad_magic();
	too_big();
	wrong_version();
	unknown_opcode();
	pipelined();
	cut_short();
	bad_payloads();
	too_many_hashes();
	not_attached();
	second_hello();
	bad_layouts();
	lease_errors();
	lease_limit();
	check_error_sum();
	fuzz();
	still_serving("everything");
	kvs_close(good);
	return th_finish();
}
