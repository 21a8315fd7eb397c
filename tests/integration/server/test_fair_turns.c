/*
 * test_fair_turns - one client cannot make the daemon's other clients wait
 * behind more than one turn of its work (docs/reliability.md, "Hostile
 * clients": bounded work per request and per turn). Counted in work, never
 * timed. A worker publishes one chain of 20,000 one-KiB blocks (more records
 * than one LIST page visits), then:
 *  list:     kvs_list() follows the cursor over every page: the namespace has
 *            its 20,000 blocks, one root, a longest chain of 20,000 and that
 *            chain's leaf as its top prefix; the form without a cursor is
 *            refused (KVS_E_TOOMANY) instead of walking every record, and a
 *            paged request by hand gets a next cursor, the last page 0.
 *  inspect:  the leaf's depth is 20,000, a middle block's its position,
 *            without a walk up the chain.
 *  flood:    an attacker pipelines 3,000 LIST requests (each a page of
 *            records) without reading; a worker's lookup meanwhile is
 *            answered while most of the flood is still unanswered, and no
 *            turn of a connection took more than TURN_WORK units plus one
 *            request (server.loop_turn_max_work), the flood yielded
 *            (server.loop_yields). Every LIST of the flood is answered, in
 *            order, none failed.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_raw.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvs_wire_admin.h"
#include "kvshare_admin.h"

#define N 20000      /* blocks in the chain */
#define WINDOW 1000  /* blocks per reserve */
#define FLOOD 3000   /* LIST requests the attacker pipelines */
/* server_int.h: a turn is at most 63 units and one request more; a page's
 * LIST is 1 + 16384 / 1024 units. */
#define TURN_MAX (63 + 1 + 16)

static th_daemon d;
static kvs_hash H[N];
static kvs_block B[WINDOW + 1];

static void publish_chain(kvs_client *c)
{
	kvs_lease lease;
	int n;

	CHECK_RC(th_publish(c, H, WINDOW, NULL), WINDOW);
	for (size_t at = WINDOW; at < N; at += WINDOW) {
		/* H[at - 1] is the parent: the chain goes on from it. */
		n = kvs_reserve_after(c, H + at - 1, WINDOW + 1, &lease, B);
		if (!CHECK_EQ(n, WINDOW))
			th_fatal("reserve_after at %zu: %d", at, n);
		CHECK_RC(kvs_commit(c, lease), WINDOW);
	}
}

static void check_list(kvs_client *ctl)
{
	kvs_ns_summary *v = NULL;
	int n = kvs_list(ctl, 0, 4, &v);

	if (!CHECK_EQ(n, 1))
		goto out;
	CHECK_EQ(v[0].blocks, N);
	CHECK_EQ(v[0].roots, 1);
	CHECK_EQ(v[0].longest, N);
	CHECK_EQ(v[0].ntop, 1);
	CHECK_EQ(v[0].top[0].depth, N);
	CHECK(!memcmp(&v[0].top[0].hash, &H[N - 1], sizeof(kvs_hash)));
out:
	free(v);
}

/* The wire by hand: the old form is refused, pages chain to the end. */
static void check_pages(void)
{
	int fd = th_raw_connect(&d);
	uint8_t req[16], rep[4096];
	kvs_wire_list_req rq = { .ns = 0, .top = 0 };
	kvs_wire_hdr h;
	uint64_t next = 0, prev;
	uint32_t count;
	int pages = 0, len;

	CHECK_GE(fd, 0);
	kvs_wire_list_req_encode(&rq, req, sizeof(req));
	CHECK_RC(th_raw_request(fd, KVS_OP_LIST, 1, req, 8), 0);
	th_raw_recv(fd, &h, rep, sizeof(rep), TH_WAIT_MS);
	CHECK_RC(h.status, KVS_E_TOOMANY);
	rq.paged = 1;
	do {
		prev = next;
		rq.cursor = next;
		kvs_wire_list_req_encode(&rq, req, sizeof(req));
		CHECK_RC(th_raw_request(fd, KVS_OP_LIST, 2, req, 16), 0);
		len = th_raw_recv(fd, &h, rep, sizeof(rep), TH_WAIT_MS);
		if (!CHECK_EQ(h.status, 0) || !CHECK_GE(len, 16) ||
		    !CHECK_RC(kvs_wire_list_page_decode(rep, (size_t)len, &count,
							&next), 0))
			break;
		CHECK_EQ(count, 1);
		pages++;
	} while (next && CHECK_GT(next, prev));
	CHECK_GE(pages, 2);
	close(fd);
}

static void check_inspect(kvs_client *ctl)
{
	kvs_block_info bi;

	CHECK_RC(kvs_inspect(ctl, 0, H[N - 1], &bi), 0);
	CHECK_EQ(bi.depth, N);
	CHECK_RC(kvs_inspect(ctl, 0, H[N / 2 - 1], &bi), 0);
	CHECK_EQ(bi.depth, N / 2);
}

static void flood(kvs_client *w)
{
	kvs_wire_list_req rq = { .ns = 0, .top = 0, .paged = 1 };
	size_t one = KVS_WIRE_HDR_SIZE + 16;
	uint8_t *msgs = malloc(FLOOD * one), rep[4096];
	int fd = th_raw_connect(&d), bad = 0;
	int64_t before = th_stat_get(&d, "ops.list"), at_answer;
	kvs_lease lease;
	kvs_wire_hdr h;

	if (!CHECK(msgs) || !CHECK_GE(fd, 0))
		return;
	for (uint32_t i = 0; i < FLOOD; i++) {
		kvs_wire_hdr q = { .magic = KVS_WIRE_MAGIC,
				   .version = KVS_WIRE_VERSION,
				   .opcode = KVS_OP_LIST, .len = 16,
				   .req_id = i + 1 };

		kvs_wire_hdr_encode(&q, msgs + i * one);
		kvs_wire_list_req_encode(&rq, msgs + i * one + KVS_WIRE_HDR_SIZE, 16);
	}
	CHECK_RC(th_raw_send(fd, msgs, FLOOD * one), 0);
	/* Behind at most a turn of the flood, not behind the flood. */
	CHECK_RC(kvs_lookup(w, H, 1, &lease, B), 1);
	CHECK_RC(kvs_release(w, lease), 0);
	at_answer = th_stat_get(&d, "ops.list") - before;
	th_note("the lookup was answered after %lld of %d LISTs",
		(long long)at_answer, FLOOD);
	CHECK_LT(at_answer, FLOOD / 2);
	for (uint32_t i = 0; i < FLOOD; i++) {
		int len = th_raw_recv(fd, &h, rep, sizeof(rep), 60000);

		bad += len < 16 || h.status != 0 || h.req_id != i + 1;
		if (len < 0)
			break;
	}
	CHECK_EQ(bad, 0);
	th_note("server.loop_turn_max_work %lld, server.loop_yields %lld",
		(long long)th_stat_get(&d, "server.loop_turn_max_work"),
		(long long)th_stat_get(&d, "server.loop_yields"));
	CHECK_LE(th_stat_get(&d, "server.loop_turn_max_work"), TURN_MAX);
	CHECK_GT(th_stat_get(&d, "server.loop_yields"), 0);
	close(fd);
	free(msgs);
}

int main(void)
{
	kvs_layout l = th_layout("fair-turns", 1);
	kvs_client *w, *ctl;

	th_init("test_fair_turns");
	th_daemon_up(&d, TH_ARGS("--host-size", "64M"));
	th_chain(&l, 1, N, 0, 0, H);
	w = th_connect(&d, &l);
	ctl = th_connect(&d, NULL);
	publish_chain(w);
	check_list(ctl);
	check_pages();
	check_inspect(ctl);
	flood(w);
	kvs_close(ctl);
	kvs_close(w);
	return th_finish();
}
