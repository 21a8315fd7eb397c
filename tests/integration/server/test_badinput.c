/*
 * test_badinput - bad input on the stream and in payloads, sent on raw
 * sockets: the daemon answers the documented error (or closes the
 * connection where the stream cannot be trusted), counts it in errors.total
 * and errors.<kind>, keeps the connection usable where the contract says so,
 * and keeps serving a good client, checked after every case with a full
 * lookup/reserve/commit round trip (on a long-lived connection and on a new
 * one).
 *
 *  stream:   bad magic (closed), garbage (closed), length over the limit
 *            (TOOBIG, then closed), wrong version (VERSION, payload skipped),
 *            unknown opcode (OPCODE, payload skipped), pipelined requests
 *            answered in order, truncated message / half a header / a
 *            request whose reply nobody reads, then a close.
 *  payloads: truncated, trailing bytes, count/length mismatch, unknown flags
 *            (PROTO), hash count over KVS_MAX_HASHES (TOOMANY) and exactly at
 *            it (fine).
 *  fuzz:     random well-framed messages; every one is answered or closes
 *            the connection.
 * Finally errors.total equals the sum of the per-kind counters.
 * Attach and lease errors: test_badinput_attach.
 */
#include "badinput.h"

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

int main(void)
{
	badinput_begin("test_badinput");
	bad_magic();
	too_big();
	wrong_version();
	unknown_opcode();
	pipelined();
	cut_short();
	bad_payloads();
	too_many_hashes();
	check_error_sum();
	fuzz();
	return badinput_end();
}
