/*
 * badinput.h - what test_badinput and test_badinput_attach share: the
 * daemon and a good client that must still be served after every case (a
 * full lookup/reserve/commit round trip on the long-lived connection and on
 * a new one), the accounting of each case's errors, raw connections and
 * requests, and the check that errors.total is the sum of the per-kind
 * counters. Static inline: each test takes what it uses.
 */
#ifndef KVS_BADINPUT_H
#define KVS_BADINPUT_H

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

static inline void round_trip(kvs_client *c, const char *after)
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

static inline void still_serving(const char *after)
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

static inline void case_begin(bad_case *bc, const char *name)
{
	bc->name = name;
	th_stats_take(&d, &bc->before);
}

/* The case produced @n errors of @kind (and no other), the daemon lives. */
static inline void case_end(bad_case *bc, const char *kind, int n)
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
static inline int raw_attached(void)
{
	int fd = th_raw_connect(&d);

	if (fd < 0)
		th_fatal("raw connect: %s", kvs_strerror(fd));
	if (!CHECK_RC(th_raw_hello(fd, &L, 1), 0))
		th_note("raw HELLO with a good layout failed");
	return fd;
}

static inline int raw_plain(void)
{
	int fd = th_raw_connect(&d);

	if (fd < 0)
		th_fatal("raw connect: %s", kvs_strerror(fd));
	return fd;
}

/* Read one reply and check its opcode, id and status; an error reply has no
 * payload. Returns the payload length, or -1. */
static inline int expect_reply(int fd, uint16_t op, uint64_t id, int status,
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

static inline int send_hashes(int fd, uint16_t op, uint64_t id, const kvs_hash *h,
		       uint32_t n)
{
	size_t cap = 8 + (size_t)n * KVS_WIRE_HASH_SIZE;
	uint8_t *buf = malloc(cap);
	int len = kvs_wire_hashes_encode(h, n, 0, buf, cap), rc;

	rc = len < 0 ? len : th_raw_request(fd, op, id, buf, (size_t)len);
	free(buf);
	return rc;
}

static inline int send_lease(int fd, uint16_t op, uint64_t id, uint64_t lease)
{
	uint8_t buf[8];

	kvs_wire_u64_encode(lease, buf, sizeof(buf));
	return th_raw_request(fd, op, id, buf, sizeof(buf));
}

/* A lookup of an unknown hash on @fd answers 0 hits: the connection works. */
static inline void raw_usable(int fd, uint64_t id, const char *after)
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

static inline void expect_closed(int fd, const char *what)
{
	if (!CHECK(th_raw_wait_closed(fd, TH_WAIT_MS)))
		th_note("%s: the daemon kept the connection open", what);
}

static inline void check_error_sum(void)
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

/* badinput_begin - the daemon (16 MiB, MAX_LEASES leases, socket leases only)
 * and the good client. */
static inline void badinput_begin(const char *name)
{
	char leases[16];

	th_init(name);
	/* Bad leases are the daemon's to refuse and count: socket leases
	 * (test_fastpath covers the fast path's own answers). */
	setenv("KVS_NO_FASTPATH", "1", 1);
	L = th_layout("bad-model", BT);
	snprintf(leases, sizeof(leases), "%d", MAX_LEASES);
	th_daemon_up(&d, TH_ARGS("--host-size", "16M", "--max-leases", leases));
	good = th_connect(&d, &L);
	still_serving("start");
}

/* badinput_end - the daemon still serves after every case. */
static inline int badinput_end(void)
{
	still_serving("everything");
	kvs_close(good);
	return th_finish();
}

#endif
