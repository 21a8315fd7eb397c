/*
 * test_eviction - a small host tier under pressure.
 *
 * Blocks are 64 KiB (one allocator page), the tier 4 MiB: a few dozen blocks.
 * Each scenario runs on a fresh daemon (restarted on the same socket).
 *  capacity: publishing past the tier evicts; the tier holds C blocks, and
 *            committed - evicted == blocks present.
 *  leaf-first: prompts share roots (a tree); after pressure every block that
 *            is present has its whole prefix present: for each chain, a
 *            lookup of any single later hash alone misses once an earlier
 *            block is gone. Again with only the leaves touched (so interior
 *            blocks are the least recently used): still no orphan.
 *  lru:      a chain looked up recently survives pressure that evicts an
 *            older untouched one.
 *  pinned:   a reader in another process holds a lease on the oldest chain
 *            while the tier is rewritten ten times over: its blocks stay, no new
 *            slot lands on them, and their bytes never change; once the
 *            lease is gone they are evictable again.
 *  full:     with every block pinned a reserve answers KVS_E_FULL and the
 *            daemon goes on serving; with some room, the chain gets as many
 *            NEW as fit and FULL for the rest.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <stdlib.h>
#include <string.h>

#define BT 64 /* 64 KiB blocks with th_layout() */
#define CHAIN 4
#define PIN_CHAIN 8 /* chains pinned at once in everything_pinned() */
#define MAXCHAIN 16

static th_daemon d;
static kvs_layout L;
static int C; /* blocks the tier holds */

typedef struct chain {
	kvs_hash h[MAXCHAIN];
	int len;
} chain;

static kvs_client *fresh_daemon(void)
{
	int rc = th_daemon_restart(&d);

	if (rc)
		th_fatal("restart failed: %d", rc);
	return th_connect(&d, &L);
}

/* Hashes of chain @seed (len blocks), published as a whole. */
static void publish_chain(kvs_client *c, uint64_t seed, int len, chain *ch,
			  kvs_block *b)
{
	ch->len = len;
	th_chain(&L, seed, (size_t)len, 0, 0, ch->h);
	CHECK_RC(th_publish(c, ch->h, (size_t)len, b), len);
}

/* Whether the evicted counter agrees with what is present. */
static void check_accounting(void)
{
	th_stats s;

	th_stats_take(&d, &s);
	CHECK_EQ(th_stats_val(&s, "blocks.committed") - th_stats_val(&s, "blocks.evicted"),
		 th_stats_val(&s, "tier_host.blocks"));
	CHECK_LE(th_stats_val(&s, "tier_host.blocks"), C);
	CHECK_EQ(th_stats_val(&s, "tier_host.blocks_writing"), 0);
	CHECK_EQ(th_stats_val(&s, "tier_host.slots_used"),
		 th_stats_val(&s, "tier_host.blocks"));
	th_stats_free(&s);
}

static void measure_capacity(void)
{
	kvs_client *c = th_connect(&d, &L);
	uint64_t bb = kvs_block_bytes(c);
	int64_t total = th_stat_get(&d, "tier_host.bytes_total");
	chain ch;
	int i;

	CHECK_EQ(bb, 64 * 1024);
	for (i = 0; i < 1000 && th_stat_get(&d, "blocks.evicted") == 0; i++)
		publish_chain(c, 1 + (uint64_t)i, CHAIN, &ch, NULL);
	C = (int)th_stat_get(&d, "tier_host.blocks");
	th_note("tier of %lld bytes holds %d blocks of %llu bytes", (long long)total,
		C, (unsigned long long)bb);
	if (!CHECK_GT(C, 4 * CHAIN))
		th_fatal("cannot go on without a capacity");
	CHECK_LE((int64_t)C * (int64_t)bb, total);
	/* The allocator promises at least 95% of the arena for block data. */
	CHECK_GE((int64_t)C * (int64_t)bb * 100, total * 95);
	CHECK_GT(th_stat_get(&d, "blocks.evicted"), 0);
	check_accounting();
	kvs_close(c);
}

/* present[j] = whether h[j] alone is found. Returns false on a hole: a block
 * present after one that is gone. */
static bool prefix_closed(kvs_client *c, const kvs_hash *h, int n, int *count)
{
	bool gone = false, ok = true;

	*count = 0;
	for (int j = 0; j < n; j++) {
		int hit = th_probe(c, &h[j], 1);

		CHECK_GE(hit, 0);
		if (hit > 0 && gone)
			ok = false;
		gone |= hit <= 0;
		*count += hit > 0;
	}
	return ok;
}

#define ROOT 2
#define BRANCH 2
#define BRANCHES 3

static void leaf_first(void)
{
	kvs_client *c = fresh_daemon();
	int roots = 3 * C / (ROOT + BRANCHES * BRANCH) + 1, present = 0;
	chain *tree = calloc((size_t)roots * BRANCHES, sizeof(*tree));

	/* Publish root r's branches one after the other: the root exists from
	 * the second on. */
	for (int r = 0; r < roots; r++)
		for (int b = 0; b < BRANCHES; b++) {
			chain *ch = &tree[r * BRANCHES + b];
			int n;

			ch->len = ROOT + BRANCH;
			th_chain(&L, 5000 + (uint64_t)r, ROOT, 9000 + (uint64_t)(r * BRANCHES + b),
				 BRANCH, ch->h);
			n = th_publish(c, ch->h, (size_t)ch->len, NULL);
			CHECK_RC(n, b == 0 ? ROOT + BRANCH : BRANCH);
		}
	CHECK_GT(th_stat_get(&d, "blocks.evicted"), 0);
	check_accounting();

	for (int r = 0; r < roots; r++) {
		int root_count = 0;

		for (int b = 0; b < BRANCHES; b++) {
			chain *ch = &tree[r * BRANCHES + b];
			int count, full = th_probe(c, ch->h, (size_t)ch->len);

			if (!CHECK(prefix_closed(c, ch->h, ch->len, &count)))
				th_note("root %d branch %d: a block is cached without its prefix", r, b);
			/* A full-chain lookup finds exactly the blocks present. */
			CHECK_EQ(full, count);
			/* Branches share the root: count its blocks once. */
			if (b == 0)
				root_count = count < ROOT ? count : ROOT;
			else
				CHECK_EQ(count < ROOT ? count : ROOT, root_count);
			if (count > ROOT)
				present += count - ROOT;
		}
		present += root_count;
	}
	/* Oldest roots went first; the newest survived whole. */
	CHECK_RC(th_probe(c, tree[0].h, ROOT + BRANCH), 0);
	CHECK_RC(th_probe(c, tree[roots * BRANCHES - 1].h, ROOT + BRANCH), ROOT + BRANCH);
	CHECK_EQ(present, th_stat_get(&d, "tier_host.blocks"));
	free(tree);
	kvs_close(c);
}

/* Only the leaves are touched, so every interior block is older than every
 * leaf: plain LRU would evict interiors first and strand the leaves; leaf-first
 * must take whole chains, leaf up, oldest leaf first. */
static void leaves_touched(void)
{
	kvs_client *c = fresh_daemon();
	int n = C / CHAIN, extra = n / 2, present = 0;
	chain *old = calloc((size_t)n, sizeof(*old)), ch;

	for (int i = 0; i < n; i++)
		publish_chain(c, 3000 + (uint64_t)i, CHAIN, &old[i], NULL);
	for (int i = 0; i < n; i++)
		CHECK_RC(th_probe(c, &old[i].h[CHAIN - 1], 1), 1);
	for (int i = 0; i < extra; i++)
		publish_chain(c, 4000 + (uint64_t)i, CHAIN, &ch, NULL);
	CHECK_GT(th_stat_get(&d, "blocks.evicted"), 0);
	check_accounting();
	for (int i = 0; i < n; i++) {
		int count;

		if (!CHECK(prefix_closed(c, old[i].h, CHAIN, &count)))
			th_note("chain %d: a leaf outlived its prefix", i);
		present += count;
	}
	CHECK_RC(th_probe(c, old[0].h, CHAIN), 0);             /* oldest leaf */
	CHECK_RC(th_probe(c, old[n - 1].h, CHAIN), CHAIN);     /* newest leaf */
	CHECK_EQ(present + extra * CHAIN, th_stat_get(&d, "tier_host.blocks"));
	free(old);
	kvs_close(c);
}

static void lru(void)
{
	kvs_client *c = fresh_daemon();
	int n = C / CHAIN, extra = n / 2;
	chain *old = calloc((size_t)n, sizeof(*old)), ch;
	size_t bad;

	for (int i = 0; i < n; i++)
		publish_chain(c, 100 + (uint64_t)i, CHAIN, &old[i], NULL);
	CHECK_EQ(th_stat_get(&d, "blocks.evicted"), 0);
	/* Touch the oldest chain: it becomes the most recent. */
	CHECK_RC(th_probe(c, old[0].h, CHAIN), CHAIN);
	for (int i = 0; i < extra; i++)
		publish_chain(c, 200 + (uint64_t)i, CHAIN, &ch, NULL);
	CHECK_GT(th_stat_get(&d, "blocks.evicted"), 0);
	check_accounting();
	CHECK_RC(th_verify(c, old[0].h, CHAIN, &bad), CHAIN);
	CHECK_EQ(bad, 0);
	CHECK_RC(th_probe(c, old[1].h, CHAIN), 0);          /* oldest untouched */
	CHECK_RC(th_probe(c, old[n - 1].h, CHAIN), CHAIN);  /* newest old one */
	CHECK_RC(th_probe(c, ch.h, CHAIN), CHAIN);          /* just published */
	free(old);
	kvs_close(c);
}

#define PINNED 8
#define CHURN 10 /* times the tier is rewritten around the pinned chain */

static chain pinned_chain;

/* Hold a lease on the pinned chain and check its bytes until told to stop. */
static int pin_holder(void *arg, int fd)
{
	kvs_client *c = th_connect(&d, &L);
	uint64_t bb = kvs_block_bytes(c), msg;
	kvs_block b[PINNED];
	kvs_lease lease = 0;
	long rounds = 0, bad = 0;

	(void)arg;
	CHECK_RC(kvs_lookup(c, pinned_chain.h, PINNED, &lease, b), PINNED);
	for (int i = 0; i < PINNED; i++)
		CHECK_RC(th_send_u64(fd, b[i].offset), 0);
	while (!th_fd_readable(fd)) {
		for (int i = 0; i < PINNED; i++) {
			const void *p = kvs_block_ptr(c, &b[i]);

			if (!p || th_pattern_check(p, bb, pinned_chain.h[i], 0) >= 0)
				bad++;
		}
		rounds++;
	}
	CHECK_RC(th_recv_u64(fd, &msg, 1000), 0);
	for (int i = 0; i < PINNED; i++) {
		const void *p = kvs_block_ptr(c, &b[i]);

		if (!p || th_pattern_check(p, bb, pinned_chain.h[i], 0) >= 0)
			bad++;
	}
	if (!CHECK_EQ(bad, 0))
		th_note("pinned blocks changed under a held lease (%ld bad reads)", bad);
	th_note("checked the pinned blocks %ld times during the churn", rounds);
	CHECK_RC(kvs_release(c, lease), 0);
	kvs_close(c);
	return 0;
}

static void pinned(void)
{
	kvs_client *c = fresh_daemon();
	uint64_t offs[PINNED];
	kvs_block b[CHAIN];
	int64_t ev0;
	th_child kid;
	chain ch;
	int overlap = 0;

	/* The pinned chain is the oldest: the first to go were it not pinned. */
	publish_chain(c, 300, PINNED, &pinned_chain, NULL);
	th_spawn(&kid, pin_holder, NULL);
	for (int i = 0; i < PINNED; i++)
		CHECK_RC(th_recv_u64(kid.fd, &offs[i], 10000), 0);
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), PINNED);
	ev0 = th_stat_get(&d, "blocks.evicted");

	for (int i = 0; i < CHURN * C / CHAIN; i++) {
		publish_chain(c, 400 + (uint64_t)i, CHAIN, &ch, b);
		for (int k = 0; k < CHAIN; k++)
			for (int j = 0; j < PINNED; j++)
				overlap += b[k].status == KVS_BLOCK_NEW && b[k].offset == offs[j];
	}
	CHECK_EQ(overlap, 0);
	CHECK_GE(th_stat_get(&d, "blocks.evicted") - ev0, (CHURN - 1) * C);
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), PINNED);
	CHECK_RC(th_send_u64(kid.fd, 1), 0);
	CHECK_RC(th_child_wait(&kid, 20000), 0);
	CHECK(th_wait_stat(&d, "leases.pinned_blocks", 0, TH_WAIT_MS));
	/* Fast-path pins of a closed connection count for a grace of 100 ms;
	 * the blocks they held are let go after it. */
	CHECK(th_wait_stat(&d, "fast.held", 0, TH_WAIT_MS));
	CHECK_RC(th_probe(c, pinned_chain.h, PINNED), PINNED);
	check_accounting();

	/* Unpinned (and untouched by the churn), it is evictable again. */
	for (int i = 0; i < 2 * C / CHAIN; i++)
		publish_chain(c, 600 + (uint64_t)i, CHAIN, &ch, NULL);
	CHECK_LT(th_probe(c, pinned_chain.h, PINNED), PINNED);
	kvs_close(c);
}

static void everything_pinned(void)
{
	kvs_client *c = fresh_daemon(), *other = th_connect(&d, &L);
	int nchains = (C + PIN_CHAIN - 1) / PIN_CHAIN, left = C;
	chain *chains = calloc((size_t)nchains, sizeof(*chains)), want;
	kvs_lease *leases = calloc((size_t)nchains, sizeof(*leases));
	kvs_block b[MAXCHAIN];
	th_stats s0, s1;
	kvs_lease wl = 7;
	size_t bad;
	int last_len;

	/* Exactly C blocks, then every one of them pinned. */
	for (int i = 0; i < nchains; i++) {
		int len = left < PIN_CHAIN ? left : PIN_CHAIN;

		publish_chain(c, 700 + (uint64_t)i, len, &chains[i], NULL);
		left -= len;
		CHECK_RC(kvs_lookup(c, chains[i].h, (size_t)len, &leases[i], b), len);
	}
	CHECK_EQ(th_stat_get(&d, "tier_host.blocks"), C);
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), C);
	CHECK_EQ(th_stat_get(&d, "blocks.evicted"), 0);

	th_stats_take(&d, &s0);
	want.len = CHAIN;
	th_chain(&L, 800, CHAIN, 0, 0, want.h);
	CHECK_RC(kvs_reserve(other, want.h, CHAIN, &wl, b), KVS_E_FULL);
	CHECK_EQ(wl, 0);
	th_stats_take(&d, &s1);
	CHECK_EQ(th_stats_delta(&s0, &s1, "errors.full"), 1);
	CHECK_EQ(th_stats_delta(&s0, &s1, "errors.total"), 1);
	CHECK_EQ(th_stats_delta(&s0, &s1, "blocks.reserve_full"), CHAIN);
	CHECK_EQ(th_stats_delta(&s0, &s1, "blocks.reserved"), 0);
	CHECK_EQ(th_stats_val(&s1, "tier_host.blocks_writing"), 0);
	th_stats_free(&s0);
	th_stats_free(&s1);

	/* Still serving: the pinned blocks are readable, intact, by anyone. */
	CHECK_RC(th_verify(other, chains[0].h, (size_t)chains[0].len, &bad), chains[0].len);
	CHECK_EQ(bad, 0);
	CHECK_RC(th_probe(other, want.h, CHAIN), 0);

	/* Unpin the last chain: exactly that many slots can be made, the rest
	 * of a longer chain is FULL. */
	last_len = chains[nchains - 1].len;
	CHECK_RC(kvs_release(c, leases[nchains - 1]), 0);
	leases[nchains - 1] = 0;
	want.len = last_len + 2;
	th_chain(&L, 801, (size_t)want.len, 0, 0, want.h);
	CHECK_RC(th_publish(other, want.h, (size_t)want.len, b), last_len);
	for (int i = 0; i < want.len; i++)
		CHECK_EQ(b[i].status, i < last_len ? KVS_BLOCK_NEW : KVS_BLOCK_FULL);
	CHECK_RC(th_probe(other, want.h, (size_t)want.len), last_len);
	CHECK_RC(th_probe(other, chains[nchains - 1].h, (size_t)last_len), 0);
	CHECK_EQ(th_stat_get(&d, "blocks.evicted"), last_len);

	for (int i = 0; i < nchains; i++)
		CHECK_RC(kvs_release(c, leases[i]), 0);
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), 0);
	check_accounting();
	free(chains);
	free(leases);
	kvs_close(other);
	kvs_close(c);
}

int main(void)
{
	th_init("test_eviction");
	L = th_layout("evict-model", BT);
	/* The order checks below are LRU's; leaf-2q's are in test_policy_2q. */
	th_daemon_up(&d, TH_ARGS("--host-size", "4M", "--page-size", "64K",
				  "--eviction-policy", "leaf-lru"));
	measure_capacity();
	leaf_first();
	leaves_touched();
	lru();
	pinned();
	everything_pinned();
	return th_finish();
}
