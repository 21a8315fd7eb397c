/*
 * test_remote_query - the scheduler's question (kvs_query): how much of a
 * chain is cached, pinning and moving nothing. A private 3-master cluster;
 * A publishes at commit, B has --remote-timeout 3000 and
 * --remote-query-timeout 50.
 *  counts:   a 160-block chain published through A: B's local query is 0,
 *            its remote query 160, with no GET on any node (INFO
 *            commandstats), nothing fetched, pinned or leased in B; after
 *            B looks up the first 64, the local query says 64.
 *  stopped:  a node SIGSTOPped that owns blocks past B's 64: each remote
 *            query answers 64 within the bound (50 ms; checked under
 *            1000 ms, a third of --remote-timeout), counted as
 *            blocks.query_bounded; after SIGCONT the remote count is 160
 *            again.
 *  flags:    an unknown query flag is refused (-EINVAL) by the library.
 * Skips (77) without redis-server.
 */
#include "remote_tier_util.h"

#include <inttypes.h>
#include <signal.h>

#define BLOCK_TOKENS 16 /* 16 KiB blocks */
#define LEN 160
#define HALF 64
#define TIMEOUT_MS 3000
#define QUERY_MS 50

static th_daemon A, B;
static kvs_layout L;
static int8_t owner[KVS_SLOTS];
static kvs_hash H[LEN];

static void counts(rc_cluster *c, kvs_client *cb)
{
	long long gets = rt_get_calls(c, -1);
	size_t bad = 0;

	CHECK_RC(kvs_query(cb, H, LEN, 0), 0);
	CHECK_RC(kvs_query(cb, H, LEN, KVS_QUERY_REMOTE), LEN);
	CHECK_RC(kvs_query(cb, H, 10, KVS_QUERY_REMOTE), 10);
	th_note("counts: local 0, remote %d, GETs %lld", LEN, rt_get_calls(c, -1) - gets);
	CHECK_EQ(rt_get_calls(c, -1) - gets, 0);
	CHECK_EQ(th_stat_get(&B, "tier_remote.hits"), 0);
	CHECK_EQ(th_stat_get(&B, "tier_host.slots_used"), 0);
	CHECK_EQ(th_stat_get(&B, "leases.active"), 0);
	CHECK_EQ(th_stat_get(&B, "blocks.lookup_hit"), 0);
	CHECK_EQ(th_stat_get(&B, "blocks.query_asked"), 2 * LEN + 10);
	/* the first 64 fetched by a lookup: local now */
	CHECK_EQ(th_verify(cb, H, HALF, &bad), HALF);
	CHECK_EQ(bad, 0);
	CHECK_RC(kvs_query(cb, H, LEN, 0), HALF);
	CHECK_RC(kvs_query(cb, H, LEN, KVS_QUERY_REMOTE), LEN);
	CHECK_EQ(th_stat_get(&B, "tier_remote.hits"), HALF);
}

static void stopped(rc_cluster *c, kvs_client *cb)
{
	int node = owner[rt_slot(&L, H[HALF])];
	int64_t t0, ms, worst = 0;

	CHECK_EQ(kill(rc_pid(c, node), SIGSTOP), 0);
	for (int i = 0; i < 5; i++) {
		int n;

		t0 = th_now_ms();
		n = kvs_query(cb, H, LEN, KVS_QUERY_REMOTE);
		ms = th_now_ms() - t0;
		worst = ms > worst ? ms : worst;
		CHECK_RC(n, HALF);
	}
	CHECK_EQ(kill(rc_pid(c, node), SIGCONT), 0);
	th_note("stopped: node %d stopped, 5 remote queries answered %d, the "
		"slowest in %" PRId64 " ms (bound %d ms, --remote-timeout %d ms), "
		"query_bounded %" PRId64, node, HALF, worst, QUERY_MS, TIMEOUT_MS,
		th_stat_get(&B, "blocks.query_bounded"));
	CHECK_GE(th_stat_get(&B, "blocks.query_bounded"), 1);
	CHECK_LT(worst, TIMEOUT_MS / 3);
	/* the node answers again (after its backoff): the whole count */
	for (int64_t end = th_now_ms() + 30000; th_now_ms() < end;) {
		if (kvs_query(cb, H, LEN, KVS_QUERY_REMOTE) == LEN)
			break;
		th_poll_pause();
	}
	CHECK_RC(kvs_query(cb, H, LEN, KVS_QUERY_REMOTE), LEN);
}

int main(void)
{
	rc_cluster *c;
	kvs_client *ca, *cb;
	int64_t ends;
	int ret;

	setenv("TH_TIMEOUT", "240", 0);
	th_init("test_remote_query");
	c = rt_cluster(&(rc_opts){ .masters = 3 });
	th_daemon_up(&A, TH_ARGS("--host-size", "32M", "--page-size", "16K",
				 "--remote", rc_seeds(c), "--remote-write", "through"));
	th_daemon_up(&B, TH_ARGS("--host-size", "32M", "--page-size", "16K",
				 "--remote", rc_seeds(c), "--remote-timeout", "3000",
				 "--remote-query-timeout", "50"));
	L = th_layout("remote-query", BLOCK_TOKENS);
	ca = th_connect(&A, &L);
	cb = th_connect(&B, &L);
	if (rt_owners(c, 0, owner) < 0)
		th_fatal("no slot map");
	ends = rt_publish_ends(&A);
	th_chain(&L, 31, LEN, 0, 0, H);
	CHECK_RC(th_publish(ca, H, LEN, NULL), LEN);
	CHECK(rt_wait_publish_ends(&A, ends + LEN, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&A, "tier_remote.published"), LEN);

	counts(c, cb);
	stopped(c, cb);
	CHECK_RC(kvs_query(cb, H, LEN, 0x80), -EINVAL);

	CHECK(th_wait_stat(&B, "leases.active", 0, TH_WAIT_MS));
	kvs_close(ca);
	kvs_close(cb);
	ret = th_finish();
	rc_stop(c);
	return ret;
}
