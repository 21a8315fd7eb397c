/*
 * test_remote_tier_start - kvshared started while its cluster does not
 * answer (every node SIGSTOPped: connects complete, nothing replies, the
 * case that blocks longest) starts anyway, says so in its log and in
 * tier_remote.attached, serves its local tiers, and attaches in the
 * background once the cluster answers: then A's publishes reach the
 * cluster and B's lookups hit them, bytes verified.
 * Skips (77) without redis-server.
 */
#include "remote_tier_util.h"

#include <inttypes.h>
#include <signal.h>

#define BLOCK_TOKENS 64 /* 64 KiB blocks */
#define LEN 8

static th_daemon A, B;

static void signal_all(rc_cluster *c, int sig)
{
	for (int i = 0; i < rc_nodes(c); i++)
		CHECK_EQ(kill(rc_pid(c, i), sig), 0);
}

/* Attached, they share: A publishes at commit, B hits with the same
 * bytes. The nodes that did not answer while stopped are in their backoff
 * (at most 2 s) until a request finds them again: a chain may be cut
 * there, so chains are published until one goes out whole. */
static void share_after_attach(kvs_client *ca, kvs_client *cb, const kvs_layout *L)
{
	kvs_hash H2[LEN];
	size_t bad;
	int64_t t0;

	t0 = th_now_ms();
	for (uint64_t k = 22;; k++) {
		int64_t before = rt_publish_ends(&A), pub = th_stat_get(&A, "tier_remote.published");

		th_chain(L, k, LEN, 0, 0, H2);
		CHECK_RC(th_publish(ca, H2, LEN, NULL), LEN);
		CHECK(rt_wait_publish_ends(&A, before + LEN, TH_WAIT_MS));
		if (th_stat_get(&A, "tier_remote.published") - pub == LEN)
			break;
		if (!CHECK_LT(th_now_ms() - t0, 20000))
			break;
		th_poll_pause();
	}
	th_note("a chain went out whole %" PRId64 " ms after the attach",
		th_now_ms() - t0);
	/* B's nodes may be in their backoff too: looked up until whole */
	for (int hits = 0; hits < LEN;) {
		hits = th_verify(cb, H2, LEN, &bad);
		CHECK_EQ(bad, 0);
		if (!CHECK_LT(th_now_ms() - t0, 20000))
			break;
		if (hits < LEN)
			th_poll_pause();
	}
	CHECK_GE(th_stat_get(&B, "tier_remote.hits"), LEN);
}

int main(void)
{
	rc_cluster *c;
	kvs_client *ca, *cb;
	kvs_layout L;
	kvs_hash H[LEN];
	size_t bad;
	int64_t t0, ms;

	setenv("TH_TIMEOUT", "240", 0);
	th_init("test_remote_tier_start");
	c = rt_cluster(&(rc_opts){ .masters = 3 });
	signal_all(c, SIGSTOP);

	t0 = th_now_ms();
	th_daemon_up(&A, TH_ARGS("--host-size", "16M", "--page-size", "64K",
				 "--remote", rc_seeds(c), "--remote-write", "through",
				 "--remote-timeout", "300"));
	th_daemon_up(&B, TH_ARGS("--host-size", "16M", "--page-size", "64K",
				 "--remote", rc_seeds(c), "--remote-timeout", "300"));
	ms = th_now_ms() - t0;
	th_note("two daemons up against a stopped cluster in %" PRId64 " ms", ms);
	CHECK(th_log_contains(&A, "attaching in the background"));
	CHECK_EQ(th_stat_get(&A, "tier_remote.enabled"), 1);
	CHECK_EQ(th_stat_get(&A, "tier_remote.attached"), 0);
	CHECK_EQ(th_stat_get(&B, "tier_remote.attached"), 0);

	/* local tiers serve meanwhile; lookups do not wait for the cluster */
	L = th_layout("remote-model", BLOCK_TOKENS);
	ca = th_connect(&A, &L);
	cb = th_connect(&B, &L);
	th_chain(&L, 21, LEN, 0, 0, H);
	CHECK_RC(th_publish(ca, H, LEN, NULL), LEN);
	CHECK_EQ(th_verify(ca, H, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	t0 = th_now_ms();
	CHECK_EQ(th_verify(cb, H, LEN, &bad), 0);
	ms = th_now_ms() - t0;
	th_note("B's lookup while detached: %" PRId64 " ms", ms);
	CHECK_LT(ms, 2000); /* generous: no request waits for a stopped node */
	CHECK_EQ(th_stat_get(&A, "tier_remote.published"), 0);

	/* the cluster answers: both attach, without a call from anyone */
	signal_all(c, SIGCONT);
	CHECK_EQ(rc_wait_ok(c, 30), 0);
	CHECK(rt_wait_ge(&A, "tier_remote.attached", 1, 20000));
	CHECK(rt_wait_ge(&B, "tier_remote.attached", 1, 20000));
	CHECK(th_log_contains(&A, "remote tier: attached"));
	CHECK_EQ(th_stat_get(&A, "tier_remote.cluster"), 1);

	share_after_attach(ca, cb, &L);

	kvs_close(ca);
	kvs_close(cb);
	return th_finish();
}
