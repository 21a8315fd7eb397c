/*
 * test_limits - per-client limits and timeouts, each refusal a clear error:
 *
 *  - --max-clients 2: a third kvs_connect answers KVS_E_LIMIT (its HELLO is
 *    answered, then the connection closes), counted in clients.refused; once
 *    a client leaves, a new one is served; a refused peer that never sends
 *    its HELLO is closed after --client-timeout;
 *  - --max-pinned-blocks 8: a lookup or reserve that would pin more answers
 *    KVS_E_LIMIT (nothing pinned or reserved), counted in errors.limit;
 *    releasing makes room;
 *  - --client-timeout 1: a connection holding half a header, or a header and
 *    half its payload, is closed and counted (clients.timeout_partial); one
 *    that pipelines stats requests and never reads the replies is closed and
 *    counted (clients.timeout_unread); an idle attached connection outlives
 *    them all and still answers; a good client is served all along.
 *
 * Every wait polls a condition against a deadline.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_raw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BT 16

static kvs_layout L;

static void round_trip(kvs_client *c, uint64_t seed)
{
	kvs_hash h[3];
	size_t bad = 1;

	th_chain(&L, seed, 3, 0, 0, h);
	CHECK_RC(th_publish(c, h, 3, NULL), 3);
	CHECK_RC(th_verify(c, h, 3, &bad), 3);
	CHECK_EQ(bad, 0);
}

static void test_max_clients(void)
{
	static th_daemon d;
	kvs_client *a, *b = NULL, *x = NULL;
	int fd;

	/* The stats client is one of the two. */
	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--max-clients", "2",
				 "--client-timeout", "1"));
	CHECK_EQ(th_stat_get(&d, "clients.connected"), 1);
	a = th_connect(&d, &L);
	CHECK_RC(kvs_connect(d.socket, &L, &x), KVS_E_LIMIT);
	CHECK(x == NULL);
	CHECK_RC(kvs_connect(d.socket, NULL, &x), KVS_E_LIMIT);
	CHECK_EQ(th_stat_get(&d, "clients.refused"), 2);
	CHECK_EQ(th_stat_get(&d, "clients.connected"), 2);
	CHECK_EQ(th_stat_get(&d, "errors.total"), 0);
	round_trip(a, 1);
	/* A refused peer that says nothing is not kept. */
	fd = th_raw_connect(&d);
	CHECK_GE(fd, 0);
	CHECK(th_raw_wait_closed(fd, 4000));
	close(fd);
	CHECK_EQ(th_stat_get(&d, "clients.refused"), 3);
	CHECK_EQ(th_stat_get(&d, "clients.timeout_partial"), 1);
	/* Room again once a client leaves. */
	kvs_close(a);
	CHECK(th_wait_stat(&d, "clients.connected", 1, TH_WAIT_MS));
	CHECK_RC(kvs_connect(d.socket, &L, &b), 0);
	if (b)
		round_trip(b, 2);
	kvs_close(b);
}

static void test_max_pinned(void)
{
	static th_daemon d;
	kvs_client *c;
	kvs_hash h[6], g[4];
	kvs_block b[8];
	kvs_lease l1, l2, l3;

	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--max-pinned-blocks", "8"));
	c = th_connect(&d, &L);
	th_chain(&L, 10, 6, 0, 0, h);
	th_chain(&L, 11, 4, 0, 0, g);
	CHECK_RC(th_publish(c, h, 6, NULL), 6);
	CHECK_RC(kvs_lookup(c, h, 6, &l1, b), 6);           /* 6 pinned */
	CHECK_RC(kvs_lookup(c, h, 3, &l2, b), KVS_E_LIMIT); /* would be 9 */
	CHECK_RC(kvs_reserve(c, g, 4, &l2, b), KVS_E_LIMIT);
	CHECK_EQ(th_stat_get(&d, "errors.limit"), 2);
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), 6);
	CHECK_EQ(th_stat_get(&d, "tier_host.blocks_writing"), 0);
	CHECK_RC(kvs_lookup(c, h, 2, &l2, b), 2);           /* exactly 8 */
	CHECK_RC(kvs_release(c, l2), 0);
	CHECK_RC(kvs_release(c, l1), 0);
	CHECK_RC(kvs_reserve(c, g, 4, &l3, b), 4);
	CHECK_RC(kvs_commit(c, l3), 4);
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), 0);
	/* Another connection has its own budget. */
	{
		kvs_client *o = th_connect(&d, &L);

		CHECK_RC(kvs_lookup(c, h, 6, &l1, b), 6);
		CHECK_RC(kvs_lookup(o, h, 6, &l2, b), 6);
		kvs_close(o);
		CHECK_RC(kvs_release(c, l1), 0);
	}
	CHECK(th_wait_stat(&d, "leases.pinned_blocks", 0, TH_WAIT_MS));
	kvs_close(c);
}

/* A raw connection attached with the test layout. */
static int raw_attached(th_daemon *d)
{
	int fd = th_raw_connect(d);

	if (fd < 0)
		th_fatal("raw connect: %s", kvs_strerror(fd));
	CHECK_RC(th_raw_hello(fd, &L, 1), 0);
	return fd;
}

/* Pipeline stats requests on @fd, for 2 s at most, reading none of the
 * replies. */
static void send_stats_unread(int fd)
{
	/* One buffer, one send: 2000 tiny sends would each cost a socket
	 * buffer's worth of overhead. */
	enum { NREQ = 2000 };
	uint8_t *req = malloc((size_t)NREQ * KVS_WIRE_HDR_SIZE);
	kvs_wire_hdr s = { .magic = KVS_WIRE_MAGIC,
			   .version = KVS_WIRE_VERSION,
			   .opcode = KVS_OP_STATS };
	size_t len = (size_t)NREQ * KVS_WIRE_HDR_SIZE, off = 0;
	int64_t deadline = th_now_ms() + 2000;

	if (!req)
		th_fatal("out of memory");
	for (int i = 0; i < NREQ; i++) {
		s.req_id = (uint64_t)i + 1;
		kvs_wire_hdr_encode(&s, req + (size_t)i * KVS_WIRE_HDR_SIZE);
	}
	/* Until all is sent or the daemon stops reading. */
	while (off < len && th_now_ms() < deadline) {
		ssize_t n = send(fd, req + off, len - off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n > 0)
			off += (size_t)n;
		else
			th_poll_pause();
	}
	th_note("sent %zu of %zu stats requests, reading none of the "
		"replies", off / KVS_WIRE_HDR_SIZE, (size_t)NREQ);
	free(req);
}

static void test_timeouts(void)
{
	static th_daemon d;
	uint8_t hdr[KVS_WIRE_HDR_SIZE], buf[256];
	kvs_wire_hdr h = { .magic = KVS_WIRE_MAGIC, .version = KVS_WIRE_VERSION,
			   .opcode = KVS_OP_RELEASE, .len = 8, .req_id = 9 };
	kvs_client *good;
	int idle, half, part, deaf;
	int64_t t0;

	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--client-timeout", "1"));
	good = th_connect(&d, &L);
	idle = raw_attached(&d);
	t0 = th_now_ms();

	/* Half a header. */
	kvs_wire_hdr_encode(&h, hdr);
	half = th_raw_connect(&d);
	CHECK_RC(th_raw_send(half, hdr, 10), 0);
	/* A whole header and half its payload. */
	part = raw_attached(&d);
	CHECK_RC(th_raw_send(part, hdr, sizeof(hdr)), 0);
	CHECK_RC(th_raw_send(part, "\1\2\3\4", 4), 0);
	round_trip(good, 20);
	CHECK(th_wait_stat(&d, "clients.timeout_partial", 2, 5000));
	CHECK(th_raw_wait_closed(half, TH_WAIT_MS));
	CHECK(th_raw_wait_closed(part, TH_WAIT_MS));
	CHECK_GE(th_now_ms() - t0, 1000);
	close(half);
	close(part);

	/* Pipelined stats requests whose replies are never read: reading
	 * pauses at 1 MiB of replies, and a second later it is closed. */
	deaf = th_raw_connect(&d);
	send_stats_unread(deaf);
	round_trip(good, 21);
	CHECK(th_wait_stat(&d, "clients.timeout_unread", 1, 5000));
	CHECK(th_raw_wait_closed(deaf, TH_WAIT_MS));
	close(deaf);
	CHECK_EQ(th_stat_get(&d, "clients.timeout_partial"), 2);

	/* The idle connection outlived the timeout several times over. */
	CHECK_GE(th_now_ms() - t0, 2000);
	CHECK_RC(th_raw_request(idle, KVS_OP_STATS, 77, NULL, 0), 0);
	{
		int n = th_raw_recv(idle, &h, buf, sizeof(buf), TH_WAIT_MS);

		CHECK_GT(n, 0);
		CHECK_EQ(h.req_id, 77);
		CHECK_EQ(h.status, 0);
	}
	close(idle);
	round_trip(good, 22);
	CHECK_EQ(th_stat_get(&d, "errors.total"), 0);
	kvs_close(good);
}

int main(void)
{
	th_init("test_limits");
	/* The daemon's limits are on the socket's leases; the fast path's pins
	 * have their own bound (the pin area: test_fastpath). */
	setenv("KVS_NO_FASTPATH", "1", 1);
	L = th_layout("limits-model", BT);
	test_max_clients();
	test_max_pinned();
	test_timeouts();
	return th_finish();
}
