/*
 * test_remote_tier_faults - the remote tier's faults seen from the daemons: a
 * private 3-master cluster, A publishes at commit (--remote-write through),
 * B looks up, both with --remote-timeout 1000.
 *  corrupt:  one block's value changed in Redis (SETRANGE in its payload):
 *            B's lookup stops before it (its bytes never served), its MAC
 *            fails: tier_remote.forged counts it.
 *  stopped:  a node SIGSTOPped: B's lookup of a chain is the prefix before
 *            the first block on that node, within the timeout's bound, and
 *            counted as a timeout; after SIGCONT the same chain hits whole
 *            again (the node is retried after its backoff).
 *  killed:   a node killed: B's lookups are the prefix before its first
 *            block, at once (refused connections), counted as down; A's
 *            publishes to it fail without stalling the rest; the node
 *            restarted (empty): new chains hit whole again.
 * No lookup is ever an error to the client. Skips (77) without redis-server.
 */
#include "remote_tier_util.h"

#include <inttypes.h>
#include <signal.h>

#define BLOCK_TOKENS 16 /* 16 KiB blocks */
#define BLOCK_BYTES (BLOCK_TOKENS * 1024)
#define LEN 32
#define CLEN 8
#define MAX_ROUNDS 64
#define TIMEOUT_MS 1000

static th_daemon A, B;
static kvs_layout L;
static int8_t owner[KVS_SLOTS];
static uint64_t seed = 100;

/* A new chain of @n blocks, published through A and every publish ended. */
static void publish_chain(kvs_client *ca, kvs_hash *h, size_t n)
{
	int64_t ends = rt_publish_ends(&A);

	th_chain(&L, seed++, n, 0, 0, h);
	CHECK_RC(th_publish(ca, h, n, NULL), (long long)n);
	CHECK(rt_wait_publish_ends(&A, ends + (int64_t)n, 4 * TIMEOUT_MS + TH_WAIT_MS));
}

/* The first block of @h on node @node (n when none). */
static size_t first_on(const kvs_hash *h, size_t n, int node)
{
	for (size_t i = 0; i < n; i++)
		if (owner[rt_slot(&L, h[i])] == node)
			return i;
	return n;
}

/* B's lookup of @h: its hits, every byte checked, and how long it took. */
static int lookup_b(kvs_client *cb, const kvs_hash *h, size_t n, int64_t *ms)
{
	size_t bad = 0;
	int64_t t0 = th_now_ms();
	int hits = th_verify(cb, h, n, &bad);

	*ms = th_now_ms() - t0;
	CHECK_GE(hits, 0);
	CHECK_EQ(bad, 0);
	return hits;
}

/* Publish new chains through A until one hits whole through B (a node
 * back, empty, after a fault); the rounds it took, or -1. */
static int until_whole(kvs_client *ca, kvs_client *cb, int64_t deadline_ms)
{
	static kvs_hash h[LEN];
	int64_t ms;

	for (int round = 1; round <= MAX_ROUNDS && th_now_ms() < deadline_ms; round++) {
		publish_chain(ca, h, LEN);
		if (lookup_b(cb, h, LEN, &ms) == LEN)
			return round;
	}
	return -1;
}

/* Look @h up through B until it hits whole (a node answering again after
 * its backoff); the lookups it took, or -1. */
static int until_hits(kvs_client *cb, const kvs_hash *h, size_t n,
		      int64_t deadline_ms)
{
	int64_t ms;

	for (int tries = 1; th_now_ms() < deadline_ms; tries++) {
		if (lookup_b(cb, h, n, &ms) == (int)n)
			return tries;
		th_poll_pause();
	}
	return -1;
}

static void corrupt(rc_cluster *c, kvs_client *ca, kvs_client *cb)
{
	static kvs_hash h[CLEN];
	size_t m;
	int64_t ms, before = th_stat_get(&B, "tier_remote.forged");

	publish_chain(ca, h, CLEN);
	m = rt_corrupt(c, &L, h, CLEN, BLOCK_BYTES);
	if (!m)
		return;
	CHECK_EQ(lookup_b(cb, h, CLEN, &ms), m);
	CHECK_EQ(th_stat_get(&B, "tier_remote.forged"), before + 1);
	/* asked again: still the prefix before it, counted again */
	CHECK_EQ(lookup_b(cb, h, CLEN, &ms), m);
	CHECK_GE(th_stat_get(&B, "tier_remote.forged"), before + 1);
	th_note("corrupt: block %zu of %d changed in Redis, B hits %zu", m, CLEN, m);
	CHECK(th_log_contains(&B, "failed its MAC"));
}

static void stopped(rc_cluster *c, kvs_client *ca, kvs_client *cb)
{
	static kvs_hash h[LEN];
	int64_t ms, t0, timeouts = th_stat_get(&B, "tier_remote.errors_timeout");
	size_t cut;
	int node, hits, tries;

	publish_chain(ca, h, LEN);
	node = owner[rt_slot(&L, h[1])] != owner[rt_slot(&L, h[0])] ? owner[rt_slot(&L, h[1])]
							     : (owner[rt_slot(&L, h[0])] + 1) % 3;
	cut = first_on(h, LEN, node);
	CHECK_EQ(kill(rc_pid(c, node), SIGSTOP), 0);
	hits = lookup_b(cb, h, LEN, &ms);
	CHECK_EQ(kill(rc_pid(c, node), SIGCONT), 0);
	th_note("stopped: node %d stopped, B hits %d (cut at %zu) in %" PRId64 " ms",
		node, hits, cut, ms);
	CHECK_EQ(hits, (long long)cut);
	CHECK_LT(ms, 4 * TIMEOUT_MS);
	CHECK_GT(th_stat_get(&B, "tier_remote.errors_timeout"), timeouts);
	/* the node is retried after its backoff (at most 2 s) */
	t0 = th_now_ms();
	tries = until_hits(cb, h, LEN, t0 + 30000);
	th_note("stopped: the whole chain hits again after %d lookups, %" PRId64
		" ms after SIGCONT", tries, th_now_ms() - t0);
	CHECK_GT(tries, 0);
}

static void killed(rc_cluster *c, kvs_client *ca, kvs_client *cb)
{
	static kvs_hash h[LEN], p[LEN];
	int64_t ms, down = th_stat_get(&B, "tier_remote.errors_down");
	size_t cut;
	int node, hits, rounds;

	publish_chain(ca, h, LEN);
	node = owner[rt_slot(&L, h[2])] != owner[rt_slot(&L, h[0])] ? owner[rt_slot(&L, h[2])]
							     : (owner[rt_slot(&L, h[0])] + 2) % 3;
	cut = first_on(h, LEN, node);
	CHECK_EQ(rc_kill(c, node), 0);
	hits = lookup_b(cb, h, LEN, &ms);
	th_note("killed: node %d killed, B hits %d (cut at %zu) in %" PRId64 " ms, "
		"errors_down %" PRId64 ", nodes_down %" PRId64, node, hits, cut, ms,
		th_stat_get(&B, "tier_remote.errors_down"),
		th_stat_get(&B, "tier_remote.nodes_down"));
	CHECK_EQ(hits, (long long)cut);
	CHECK_LT(ms, 2 * TIMEOUT_MS);
	CHECK_GT(th_stat_get(&B, "tier_remote.errors_down"), down);
	CHECK_GE(th_stat_get(&B, "tier_remote.nodes_down"), 1);
	CHECK(th_log_contains(&B, " down: "));

	/* publishing while it is down: its blocks fail, the others are stored */
	publish_chain(ca, p, LEN);
	cut = first_on(p, LEN, node);
	hits = lookup_b(cb, p, LEN, &ms);
	th_note("killed: a chain published while down, B hits %d (cut at %zu)", hits, cut);
	CHECK_EQ(hits, (long long)cut);
	CHECK_GT(th_stat_get(&A, "tier_remote.errors_down"), 0);

	CHECK_EQ(rc_restart(c, node, 60), 0);
	rounds = until_whole(ca, cb, th_now_ms() + 30000);
	th_note("killed: node restarted, whole chains again after %d round(s)", rounds);
	CHECK_GT(rounds, 0);
	CHECK(th_log_contains(&B, "answers again"));
}

int main(void)
{
	rc_cluster *c;
	kvs_client *ca, *cb;
	int ret;

	setenv("TH_TIMEOUT", "240", 0);
	th_init("test_remote_tier_faults");
	c = rt_cluster(&(rc_opts){ .masters = 3 });
	th_daemon_up(&A, TH_ARGS("--host-size", "32M", "--page-size", "16K",
				 "--remote", rc_seeds(c), "--remote-write", "through",
				 "--remote-timeout", "1000"));
	th_daemon_up(&B, TH_ARGS("--host-size", "32M", "--page-size", "16K",
				 "--remote", rc_seeds(c), "--remote-timeout", "1000"));
	L = th_layout("remote-faults", BLOCK_TOKENS);
	ca = th_connect(&A, &L);
	cb = th_connect(&B, &L);
	if (rt_owners(c, 0, owner) < 0)
		th_fatal("no slot map");

	corrupt(c, ca, cb);
	stopped(c, ca, cb);
	killed(c, ca, cb);

	CHECK(th_wait_stat(&B, "leases.active", 0, TH_WAIT_MS));
	kvs_close(ca);
	kvs_close(cb);
	ret = th_finish();
	rc_stop(c);
	return ret;
}
