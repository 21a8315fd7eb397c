/*
 * test_cache_random - randomized runs of the cache (service/cache/cache.c)
 * without a socket: several owners, with and without the GPU tier (its CPU
 * twin), under each policy, checked against every invariant and against
 * the bytes written.
 */
#include "cache_test.h"

/* Several owners on shared and private chains in a cache too small for them;
 * every committed block carries a pattern of its hash, checked whenever it is
 * read under a lease. */
static uint64_t pat(kvs_hash h, uint64_t i)
{
	return (h.lo ^ (h.hi << 1)) + i * 0x9e3779b97f4a7c15ull;
}

/* A lookup's n blocks of chain ch: every 509th word checked against the
 * pattern; returns the words that differ, counts those read in *verified. */
static uint64_t verify_blocks(const uint8_t *base, const chain *ch,
			      const kvs_block *bl, int n, uint64_t *verified)
{
	uint64_t bad = 0;

	for (int i = 0; i < n; i++) {
		const uint64_t *p = (const uint64_t *)(base + bl[i].offset);

		for (uint64_t j = 0; j < PAGE / 8; j += 509, (*verified)++)
			bad += p[j] != pat(ch->h[i], j);
	}
	return bad;
}

/* A reserve of chain ch that got n > 0: the pattern written into each block
 * it left NEW. */
static void fill_new_blocks(uint8_t *base, const chain *ch,
			    const kvs_block *bl, int n)
{
	for (uint32_t i = 0; n > 0 && i < ch->n; i++) {
		uint64_t *p = (uint64_t *)(base + bl[i].offset);

		if (bl[i].status != KVS_BLOCK_NEW)
			continue;
		for (uint64_t j = 0; j < PAGE / 8; j++)
			p[j] = pat(ch->h[i], j);
	}
}

static void test_random(unsigned seed)
{
	enum { OWNERS = 5, CHAINS = 12, STEPS = 20000 };
	kvs_cache *c = mk_cache(40 * PAGE, 16);
	kvs_layout l = layout("m", NULL, 64);
	kvs_owner *o[OWNERS];
	uint64_t held[OWNERS][16];
	int nheld[OWNERS] = { 0 };
	chain ch[CHAINS];
	uint8_t *base;
	uint64_t bad = 0, verified = 0, lookups = 0;

	srand(seed);
	base = mmap(NULL, kvs_cache_arena_bytes(c), PROT_READ | PROT_WRITE,
		    MAP_SHARED, kvs_cache_arena_fd(c), 0);
	CHECK(base != MAP_FAILED);
	/* Three uids; with a pinned share, each holds at most its share of
	 * the 40 one-block slabs (kvs_cache_check counts them). */
	for (int i = 0; i < OWNERS; i++) {
		o[i] = attach(c, &l);
		kvs_cache_owner_set_uid(o[i], (uint32_t)i % 3);
	}
	kvs_cache_owner_set_operator(o[OWNERS - 1], 1); /* not budgeted */
	/* Chains 0-5 share their first blocks in pairs (as prompts share a
	 * system prompt); lengths up to 20 blocks. */
	for (int i = 0; i < CHAINS; i++)
		mk_chain(&ch[i], &l, (uint32_t)(i < 6 ? 100 : i), 4 + (uint32_t)(i * 7) % 17);
	for (int s = 0; s < STEPS; s++) {
		int w = rand() % OWNERS, k = rand() % CHAINS, op = rand() % 10;
		kvs_block bl[64];
		uint64_t lease;
		int n;

		if (op < 4 && nheld[w] < 16) {
			n = kvs_cache_lookup(c, o[w], H(&ch[k], 0), ch[k].n, &lease, bl);
			lookups++;
			bad += verify_blocks(base, &ch[k], bl, n, &verified);
			if (n > 0)
				held[w][nheld[w]++] = lease;
		} else if (op < 7 && nheld[w] < 16) {
			n = kvs_cache_reserve(c, o[w], H(&ch[k], 0), ch[k].n, &lease, bl);
			fill_new_blocks(base, &ch[k], bl, n);
			if (n > 0 && rand() % 4 == 0)
				kvs_cache_abort(c, o[w], lease);
			else if (n > 0)
				CHECK_EQ(kvs_cache_commit(c, o[w], lease), n);
		} else if (op < 9 && nheld[w] > 0) {
			CHECK(kvs_cache_release(c, o[w], held[w][--nheld[w]]) >= 0);
		} else if (op == 9 && rand() % 20 == 0) {
			kvs_cache_owner_free(c, o[w]); /* a crash */
			o[w] = attach(c, &l);
			kvs_cache_owner_set_uid(o[w], (uint32_t)w % 3);
			kvs_cache_owner_set_operator(o[w], w == OWNERS - 1);
			nheld[w] = 0;
		}
		if (s % 64 == 0 && kvs_cache_check(c) != 0) {
			CHECK(!"invariant broken");
			break;
		}
	}
	CHECK(kvs_cache_check(c) == 0);
	CHECK_EQ(bad, 0);
	CHECK(stats.blocks_evicted > 0);
	printf("test_cache: random run (%s, pinned share %u%%): %lld lookups hit "
	       "%lld blocks (%lld cut at a uid's slabs), %lld evictions, "
	       "%llu words verified, %llu wrong\n",
	       policy, pinned_share, (long long)lookups,
	       (long long)stats.blocks_lookup_hit,
	       (long long)stats.leases_refused_slabs,
	       (long long)stats.blocks_evicted, (unsigned long long)verified,
	       (unsigned long long)bad);
	for (int i = 0; i < OWNERS; i++)
		kvs_cache_owner_free(c, o[i]);
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.leases_pinned_blocks, 0);
	CHECK_EQ(stats.leases_pinned_slab_bytes, 0);
	CHECK_EQ(stats.tier_host_blocks_writing, 0);
	munmap(base, kvs_cache_arena_bytes(c));
	kvs_cache_destroy(c);
}

/* The GPU tier on the twin (KVS_GPU_FAKE=1): a GPU owner's reserves go to
 * the GPU tier, a full GPU tier demotes to host, and every invariant
 * (children in the GPU tier, both slot accountings, both policies' sets)
 * holds after every step of a random mix; a host-only owner never hits a
 * GPU block. */
static void test_gpu_random(unsigned seed)
{
	kvs_layout l = layout("gpu", NULL, 256); /* 256 KiB blocks */
	kvs_tier_gpu_config gc = { .device = -1, .bytes = 4u << 20, .page_bytes = PAGE };
	kvs_tier_mod *gt = NULL;
	const kvs_tier_gpu_stats *gs;
	uint32_t kind, device;
	int fd;
	kvs_cache *c = mk_cache(16u << 20, 64);
	kvs_ns_desc h;
	kvs_owner *g = kvs_cache_owner_new(c), *o;
	uint32_t ns;
	uint64_t bb;
	char why[256];
	chain ch;

	setenv("KVS_GPU_FAKE", "1", 1);
	CHECK_EQ(kvs_tier_gpu_open(&gc, &gt, why, sizeof(why)), 0);
	CHECK_EQ(kvs_cache_tier_add(c, gt), 0);
	unsetenv("KVS_GPU_FAKE");
	CHECK_EQ(kvs_cache_tier_map(c, KVS_TIER_GPU, &fd, &bb, &kind, &device), 0);
	CHECK(fd >= 0);
	CHECK_EQ(bb, 4u << 20);
	h = desc_of(&l);
	CHECK(kvs_cache_attach(c, g, &h, 1, &ns, &bb) == 0);
	o = attach(c, &l);
	srand(seed);
	for (int step = 0; step < 400; step++) {
		uint32_t stream = (uint32_t)(rand() % 24), len = 1 + (uint32_t)(rand() % 8);
		int r = rand() % 10;

		mk_chain(&ch, &l, stream, len);
		if (r < 5) {
			publish(c, r < 4 ? g : o, &ch);
		} else if (r < 7) {
			kvs_block b[64];
			uint64_t lease;
			int hh = kvs_cache_lookup(c, o, H(&ch, 0), ch.n, &lease, b);

			for (int i = 0; i < hh; i++)
				CHECK(b[i].tier == KVS_TIER_HOST);
			if (hh > 0)
				CHECK(kvs_cache_release(c, o, lease) >= 0);
		} else if (r < 9) {
			hits(c, g, &ch, 0, ch.n);
		} else {
			kvs_block b[64];
			uint64_t lease;

			if (kvs_cache_reserve(c, g, H(&ch, 0), ch.n, &lease, b) > 0)
				CHECK(kvs_cache_abort(c, g, lease) >= 0);
		}
		if (kvs_cache_check(c) != 0) {
			CHECK(!"kvs_cache_check with the GPU tier");
			break;
		}
	}
	gs = gt->counters; /* the tier's own section, tier_gpu.* */
	CHECK(gs->demotions > 0);
	CHECK(gs->reserved > 0);
	CHECK_EQ(gs->demote_dropped, 0);
	kvs_cache_owner_free(c, g);
	kvs_cache_owner_free(c, o);
	CHECK_EQ(kvs_cache_check(c), 0);
	kvs_cache_destroy(c);
}

int main(void)
{
	unsigned seed = (unsigned)kvs_test_seed("test_cache_random");

	kvs_log_set_level(KVS_LOG_WARN);
	test_random(seed);
	pinned_share = 25;
	test_random(seed + 4);
	pinned_share = 0;
	test_gpu_random(seed);
	policy = "leaf-2q";
	test_gpu_random(seed + 2);
	policy = "lru";
	test_random(seed + 1);
	test_gpu_random(seed + 3);
	return check_summary("test_cache_random");
}
