/*
 * test_remote_tier_failover - a master killed in a cluster with replicas
 * (3 masters + 3 replicas on loopback, cluster-node-timeout 500 ms): once
 * the cluster has promoted its replica, B's lookups of a chain A published
 * before the kill are whole hits again (bytes verified), through the
 * promoted replica; A publishes to it; B never serves wrong bytes
 * meanwhile.
 * Skips (77) without redis-server.
 */
#include "remote_tier_util.h"

#include <inttypes.h>

#define BLOCK_TOKENS 64 /* 64 KiB blocks */
#define LEN 16

static th_daemon A, B;

static long long dbsize(rc_cluster *c, int i)
{
	char out[64];

	return rc_cli(c, i, out, sizeof(out), "DBSIZE", NULL) == 0 ? atoll(out) : -1;
}

/* Every replica holds what its master holds (replication is async). */
static bool replicas_caught_up(rc_cluster *c, int masters)
{
	int64_t end = th_now_ms() + TH_WAIT_MS;

	for (int i = 0; i < masters; i++)
		while (dbsize(c, rc_replica_of(c, i)) != dbsize(c, i)) {
			if (th_now_ms() > end) {
				th_note("master %d: %lld keys, its replica %d: %lld", i,
					dbsize(c, i), rc_replica_of(c, i),
					dbsize(c, rc_replica_of(c, i)));
				return false;
			}
			th_poll_pause();
		}
	return true;
}

/* Look @h up through @cl until every block hits (bytes checked on every
 * try), for @ms; the hits of the last try. */
static int verify_until_whole(kvs_client *cl, const kvs_hash *h, int ms, int *tries)
{
	int64_t end = th_now_ms() + ms;
	size_t bad;
	int hits;

	for (*tries = 1;; ++*tries) {
		hits = th_verify(cl, h, LEN, &bad);
		CHECK_EQ(bad, 0);
		if (hits == LEN || th_now_ms() > end)
			return hits;
		th_poll_pause();
	}
}

int main(void)
{
	static int8_t owner[KVS_SLOTS];
	rc_cluster *c;
	kvs_client *ca, *cb;
	kvs_layout L;
	kvs_hash W[LEN], H[LEN], H2[LEN];
	int64_t t0;
	int dead, tries, hits, on_dead = 0;
	size_t bad;

	setenv("TH_TIMEOUT", "240", 0);
	th_init("test_remote_tier_failover");
	c = rt_cluster(&(rc_opts){ .masters = 3, .replicas = 1, .node_timeout_ms = 500 });
	th_note("cluster %s", rc_seeds(c));
	th_daemon_up(&A, TH_ARGS("--host-size", "16M", "--page-size", "64K",
				 "--remote", rc_seeds(c), "--remote-write", "through",
				 "--remote-timeout", "300"));
	th_daemon_up(&B, TH_ARGS("--host-size", "16M", "--page-size", "64K",
				 "--remote", rc_seeds(c), "--remote-timeout", "300"));
	CHECK_EQ(th_stat_get(&B, "tier_remote.nodes"), 6); /* the seeds: all six */
	L = th_layout("remote-model", BLOCK_TOKENS);
	ca = th_connect(&A, &L);
	cb = th_connect(&B, &L);

	/* B talks to every master first (a warm chain), then A publishes H */
	th_chain(&L, 31, LEN, 0, 0, W);
	CHECK_RC(th_publish(ca, W, LEN, NULL), LEN);
	th_chain(&L, 32, LEN, 0, 0, H);
	CHECK_RC(th_publish(ca, H, LEN, NULL), LEN);
	CHECK(rt_wait_ge(&A, "tier_remote.published", 2 * LEN, TH_WAIT_MS));
	CHECK_EQ(th_verify(cb, W, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	CHECK(replicas_caught_up(c, 3));

	/* kill the master of H's first block: the whole chain hangs on it */
	if (rt_owners(c, 0, owner) < 0)
		th_fatal("CLUSTER NODES failed");
	dead = owner[rt_slot(&L, H[0])];
	for (int i = 0; i < LEN; i++)
		on_dead += owner[rt_slot(&L, H[i])] == dead;
	th_note("killing master %d (port %d): %d of %d blocks of H", dead,
		rc_port(c, dead), on_dead, LEN);
	CHECK_EQ(rc_kill(c, dead), 0);
	t0 = th_now_ms();
	/* meanwhile: misses (the chain is cut at its first block), never
	 * wrong bytes */
	CHECK_EQ(th_verify(cb, H, LEN, &bad), 0);
	CHECK_EQ(bad, 0);
	CHECK_EQ(rc_wait_failover(c, dead, 60), 0);
	th_note("failover to node %d after %" PRId64 " ms", rc_replica_of(c, dead),
		th_now_ms() - t0);

	/* B: whole hits through the promoted replica */
	hits = verify_until_whole(cb, H, 20000, &tries);
	th_note("B hits %d of %d, %d lookups, %" PRId64 " ms after the kill", hits,
		LEN, tries, th_now_ms() - t0);
	CHECK_EQ(hits, LEN);
	CHECK_EQ(th_stat_get(&B, "tier_remote.corrupt"), 0);

	/* A publishes to the promoted replica; B hits it */
	th_chain(&L, 33, LEN, 0, 0, H2);
	for (int64_t end = th_now_ms() + 20000;;) {
		int64_t pub = th_stat_get(&A, "tier_remote.published"),
			ends = rt_publish_ends(&A);

		CHECK_RC(th_publish(ca, H2, LEN, NULL), LEN);
		CHECK(rt_wait_publish_ends(&A, ends + LEN, TH_WAIT_MS));
		if (th_stat_get(&A, "tier_remote.published") - pub == LEN ||
		    !CHECK_LT(th_now_ms(), end))
			break;
		/* some blocks were cut: a fresh chain (the same one is local) */
		th_chain(&L, 34 + (uint64_t)(end - th_now_ms()), LEN, 0, 0, H2);
	}
	hits = verify_until_whole(cb, H2, 20000, &tries);
	CHECK_EQ(hits, LEN);

	kvs_close(ca);
	kvs_close(cb);
	return th_finish();
}
