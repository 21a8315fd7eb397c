/*
 * test_counters - one count of hits and misses, whatever path served them
 * (docs/operations.md, "Stats"), and every surface reads it.
 *
 *  - fast daemon (no SSD tier: the fast path's index answers misses too):
 *    a socket-only client (KVS_CONNECT_NO_FASTPATH) looks up a published
 *    chain past its end and an absent one; a fast-path client does the same
 *    without a request (ops.lookup does not move, fast.lookups does);
 *  - ssd daemon: a chain demoted to the SSD tier is promoted by a lookup,
 *    a host chain is hit on the fast path, an absent chain asked on the fast
 *    path falls back to the socket (a store tier could hold it);
 *  - each daemon: blocks.lookup_hit / lookup_miss and namespace.1.* are the
 *    sums of the hits and misses driven, and counters_check.py reads the
 *    same numbers from kvsctl stats (text and --json, derived.hit_ratio),
 *    /metrics and kvsctl top --batch (hit ratio, blocks, the namespace's
 *    HITS).
 * Before the fast path's hits were counted in blocks.*, the fast hits read 0
 * there (and top's HITS, a sum over cached blocks, disagreed with its ratio).
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static th_daemon fastd, ssdd;
static char ssd_dir[160];

/* One lookup of @n hashes that must find @want of them; released. */
static void look(kvs_client *c, const kvs_hash *h, size_t n, int want)
{
	kvs_block b[16];
	kvs_lease lease = 0;
	int rc = kvs_lookup(c, h, n, &lease, b);

	CHECK_RC(rc, want);
	if (lease)
		CHECK_GE(kvs_release(c, lease), 0);
}

/* The daemon's own counters, then every other surface (counters_check.py):
 * @hit and @miss blocks in all, all of namespace 1. */
static void check_surfaces(th_daemon *d, int64_t hit, int64_t miss)
{
	const char *ctl = getenv("KVSCTL"), *src = getenv("KVS_SOURCE_DIR");
	char cmd[2048];
	int st;

	CHECK_EQ(th_stat_get(d, "blocks.lookup_hit"), hit);
	CHECK_EQ(th_stat_get(d, "blocks.lookup_miss"), miss);
	CHECK_EQ(th_stat_get(d, "namespace.1.lookup_hit"), hit);
	CHECK_EQ(th_stat_get(d, "namespace.1.lookup_miss"), miss);
	if (!ctl || !src) {
		th_skip_part("$KVSCTL or $KVS_SOURCE_DIR unset (ctest sets them): "
			     "kvsctl, /metrics and top not checked");
		return;
	}
	snprintf(cmd, sizeof(cmd),
		 "python3 '%s/tests/integration/server/counters_check.py' '%s' '%s' %lld %lld %lld",
		 src, ctl, d->socket,
		 (long long)th_stat_get(d, "server.metrics_port"),
		 (long long)hit, (long long)miss);
	st = system(cmd);
	CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Socket and fast path, hits and misses, on a daemon without a store tier. */
static void fast_daemon(void)
{
	kvs_layout L = th_layout("counters-model", 16);
	kvs_hash p[12], absent[5];
	kvs_client *sock, *fast;
	th_stats s1, s2;

	th_daemon_up(&fastd, TH_ARGS("--host-size", "16M", "--metrics-addr",
				     "127.0.0.1:0"));
	if (!CHECK_RC(kvs_connect_flags(fastd.socket, &L, KVS_CONNECT_NO_FASTPATH,
					&sock), 0))
		return;
	fast = th_connect(&fastd, &L);
	CHECK_EQ(th_stat_get(&fastd, "fast.clients"), 1);
	th_chain(&L, 7, 8, 8, 4, p); /* 8 published, 4 never */
	th_chain(&L, 9, 5, 0, 0, absent);
	CHECK_RC(th_publish(sock, p, 8, NULL), 8);

	th_stats_take(&fastd, &s1);
	look(sock, p, 12, 8);     /* socket: 8 hits, 4 misses */
	look(sock, absent, 5, 0); /* socket: 5 misses */
	th_stats_take(&fastd, &s2);
	CHECK_EQ(th_stats_delta(&s1, &s2, "ops.lookup"), 2);
	CHECK_EQ(th_stats_delta(&s1, &s2, "fast.lookups"), 0);
	th_stats_free(&s1);

	look(fast, p, 12, 8);     /* fast path: 8 hits, 4 misses */
	look(fast, p, 3, 3);      /* fast path: 3 hits */
	look(fast, absent, 5, 0); /* fast path: 5 misses */
	th_stats_take(&fastd, &s1);
	CHECK_EQ(th_stats_delta(&s2, &s1, "ops.lookup"), 0);
	CHECK_EQ(th_stats_delta(&s2, &s1, "fast.lookups"), 3);
	CHECK_EQ(th_stats_delta(&s2, &s1, "fast.replayed"), 11);
	CHECK_EQ(th_stats_val(&s1, "fast.touches_lost"), 0);
	th_stats_free(&s1);
	th_stats_free(&s2);
	check_surfaces(&fastd, 8 + 11, 4 + 5 + 4 + 5);
	kvs_close(fast);
	kvs_close(sock);
}

/* A promotion from the SSD tier, a fast hit and a fast miss that the socket
 * answers, on a daemon with an SSD tier. */
static void ssd_daemon(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", "--metrics-addr",
				      "127.0.0.1:0", NULL };
	kvs_layout L = th_layout("counters-model", 64);
	kvs_hash h[16][6], absent[3];
	kvs_client *sock, *fast;
	th_stats s1, s2;

	th_daemon_up_ssd(&ssdd, args, ssd_dir, sizeof(ssd_dir));
	if (!CHECK_RC(kvs_connect_flags(ssdd.socket, &L, KVS_CONNECT_NO_FASTPATH,
					&sock), 0))
		return;
	fast = th_connect(&ssdd, &L);
	/* 64 blocks through a 32-block host tier: the first chains go to SSD. */
	for (int i = 0; i < 16; i++) {
		th_chain(&L, 100 + (uint64_t)i, 4, 200 + (uint64_t)i, 2, h[i]);
		CHECK_RC(th_publish(sock, h[i], 4, NULL), 4);
	}
	th_chain(&L, 300, 3, 0, 0, absent);
	CHECK(th_wait_stat(&ssdd, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK_GT(th_stat_get(&ssdd, "tier_ssd.blocks_ssd_only"), 4);

	th_stats_take(&ssdd, &s1);
	look(sock, h[0], 6, 4);     /* promoted: 4 hits, 2 misses */
	th_stats_take(&ssdd, &s2);
	CHECK_GT(th_stats_delta(&s1, &s2, "tier_ssd.promotions"), 0);
	CHECK_EQ(th_stats_delta(&s1, &s2, "tier_ssd.lookup_hits"), 4);
	th_stats_free(&s1);

	look(fast, h[15], 4, 4);    /* fast path: 4 hits */
	look(fast, absent, 3, 0);   /* the socket's: 3 misses */
	th_stats_take(&ssdd, &s1);
	CHECK_EQ(th_stats_delta(&s2, &s1, "fast.replayed"), 4);
	CHECK_EQ(th_stats_delta(&s2, &s1, "fast.fallback_miss"), 1);
	CHECK_EQ(th_stats_delta(&s2, &s1, "ops.lookup"), 1);
	th_stats_free(&s1);
	th_stats_free(&s2);
	check_surfaces(&ssdd, 4 + 4, 2 + 3);
	kvs_close(fast);
	kvs_close(sock);
}

int main(void)
{
	th_init("test_counters");
	fast_daemon();
	ssd_daemon();
	return th_finish();
}
