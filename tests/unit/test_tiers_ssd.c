/*
 * test_tiers_ssd - the cache with the real SSD tier (and the GPU tier's CPU
 * twin) behind the tier interface: the metadata per block, measured at one
 * million blocks, stays within 104 bytes (103.5: the cache's chain, 8, took
 * it past 96); a restart restores each namespace once; and the index loads
 * in slices while the cache serves.
 */
#include "tiers_test.h"

/* ---- tests -------------------------------------------------------------- */
/* One million 64-byte blocks in host RAM with the SSD tier (real files)
 * and the GPU tier (its CPU twin) on: every per-block array the cache and
 * the tiers keep, counted in table.metadata_bytes. */
static void test_metadata(void)
{
	const uint32_t chains = 62500, len = 16; /* 1,000,000 blocks */
	kvs_cache *c = mk_cache(96u << 20, "leaf-2q");
	char dir[256], why[256];
	kvs_tier_ssd_config sc = { .dir = dir, .segment_bytes = 1u << 20 };
	kvs_tier_gpu_config gc = { .device = -1, .bytes = 1u << 20, .page_bytes = PAGE };
	kvs_tier_mod *ssd = NULL, *gpu = NULL;
	kvs_owner *o;
	double per;

	if (!c || !mk_dir(dir)) {
		CHECK(!"setup");
		return;
	}
	CHECK_EQ(kvs_tier_ssd_open(&sc, &ssd), 0);
	CHECK_EQ(kvs_cache_tier_add(c, ssd), 0);
	setenv("KVS_GPU_FAKE", "1", 1);
	CHECK_EQ(kvs_tier_gpu_open(&gc, &gpu, why, sizeof(why)), 0);
	CHECK_EQ(kvs_cache_tier_add(c, gpu), 0);
	unsetenv("KVS_GPU_FAKE");
	o = attach(c, 16, 1); /* 1 x 1 x 1 x 16 x 2 x 2 = 64 bytes */
	for (uint32_t k = 0; k < chains; k++) {
		kvs_hash hs[16];
		kvs_block b[16];
		uint64_t lease;

		chain(k, len, hs);
		if (kvs_cache_reserve(c, o, hs, len, &lease, b) != (int)len ||
		    kvs_cache_commit(c, o, lease) != (int)len) {
			CHECK(!"publish at scale");
			break;
		}
	}
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.table_records, (int64_t)chains * len);
	per = (double)stats.table_metadata_bytes / (double)stats.table_records;
	printf("test_tiers: %lld blocks with the SSD and GPU tiers on: %.1f "
	       "bytes of metadata per block\n", (long long)stats.table_records, per);
	CHECK(per <= 104.0);
	kvs_cache_owner_free(c, o);
	kvs_cache_destroy(c);
	rm_dir(dir);
}


/* The SSD tier's own section, tier_ssd.* (refreshed by kvs_cache_stats_fill). */
static const kvs_tier_ssd_stats *ssd_counts(const kvs_tier_mod *ssd)
{
	return ssd->counters;
}

/* Run @ssd's completions and slices until no write is in flight. */
static void ssd_settle(kvs_cache *c, kvs_tier_mod *ssd)
{
	for (int i = 0; i < 10000; i++) {
		kvs_cache_tier_poll(ssd);
		kvs_cache_stats_fill(c);
		if (ssd_counts(ssd)->writes_inflight == 0)
			return;
		usleep(1000);
	}
	CHECK(!"SSD writes did not complete");
}

/* Records of @t's cache that are not linked to a parent. */
static uint32_t unlinked(kvs_tier_mod *t)
{
	uint32_t n = 0;
	kvs_tier_blk b;

	for (uint32_t i = 0; i < kvs_tier_rec_span(t); i++)
		n += kvs_tier_rec(t, i, &b) == 0 && !b.parent.lo && !b.parent.hi;
	return n;
}

/* The index loads in slices after the tier is added (a restart that
 * serves at once): while it loads, a query finds every indexed chain whole
 * (blocks not loaded yet come from the index), the cache's invariants hold
 * after every slice, and once it is done every block but the first of its
 * chain is linked to its parent, whatever order the two were loaded in. */
static void test_restart_background(void)
{
	enum { CHAINS = 48, LEN = 6 };
	const uint64_t bytes = 4096;
	char dir[256];
	kvs_tier_ssd_config sc = { .dir = dir, .segment_bytes = 1u << 20,
				   .bytes = 8u << 20, .write_through = 1 };
	kvs_cache *c = mk_cache(4u << 20, "leaf-lru");
	kvs_tier_mod *ssd = NULL;
	kvs_owner *o;
	uint8_t *base;
	kvs_hash hs[LEN];
	int slices = 0, whole = 0;

	if (!c || !mk_dir(dir)) {
		CHECK(!"setup");
		return;
	}
	CHECK_EQ(kvs_tier_ssd_open(&sc, &ssd), 0);
	CHECK_EQ(kvs_cache_tier_add(c, ssd), 0);
	o = attach(c, 1024, 1); /* 1 x 1 x 1 x 1024 x 2 x 2 = 4 KiB */
	base = mmap(NULL, kvs_cache_arena_bytes(c), PROT_READ | PROT_WRITE,
		    MAP_SHARED, kvs_cache_arena_fd(c), 0);
	if (base == MAP_FAILED) {
		CHECK(!"mmap of the host arena");
		return;
	}
	for (uint32_t k = 0; k < CHAINS; k++)
		CHECK_EQ(publish(c, o, k, LEN, base, bytes), LEN);
	ssd_settle(c, ssd);
	CHECK_EQ(ssd_counts(ssd)->index_entries, CHAINS * LEN);
	kvs_cache_owner_free(c, o);
	munmap(base, kvs_cache_arena_bytes(c));
	kvs_cache_destroy(c);

	setenv("KVS_SSD_LOAD_SLICE", "3", 1);
	c = mk_cache(4u << 20, "leaf-lru");
	CHECK_EQ(kvs_tier_ssd_open(&sc, &ssd), 0);
	CHECK_EQ(kvs_cache_tier_add(c, ssd), 0);
	unsetenv("KVS_SSD_LOAD_SLICE");
	kvs_cache_stats_fill(c);
	CHECK_EQ(ssd_counts(ssd)->index_loading, 1);
	CHECK_EQ(ssd_counts(ssd)->index_loaded, 0);
	o = attach(c, 1024, 1);
	for (uint32_t k = 0; ssd_counts(ssd)->index_loading; k++) {
		if (k < CHAINS) {
			chain(k, LEN, hs);
			whole += kvs_cache_query(c, o, hs, LEN, 0) == LEN;
		}
		kvs_cache_tier_poll(ssd);
		slices++;
		CHECK_EQ(kvs_cache_check(c), 0);
		kvs_cache_stats_fill(c);
		if (slices > 100000)
			break;
	}
	CHECK_EQ(ssd_counts(ssd)->index_loading, 0);
	CHECK_EQ(whole, CHAINS);
	CHECK(ssd_counts(ssd)->index_faults > 0);
	CHECK_EQ(ssd_counts(ssd)->restart_blocks, CHAINS * LEN);
	CHECK_EQ(ssd_counts(ssd)->index_loaded, CHAINS * LEN);
	CHECK_EQ(unlinked(ssd), CHAINS);
	CHECK_EQ(kvs_cache_check(c), 0);
	printf("test_tiers: background load: %d polls, %lld blocks loaded by "
	       "queries first\n", slices, (long long)ssd_counts(ssd)->index_faults);
	kvs_cache_owner_free(c, o);
	kvs_cache_destroy(c);
	rm_dir(dir);
}


/* One block of 64 KiB (head_dim 1024, 16 tokens), to SSD. */
static void publish_one(kvs_cache *c, kvs_tier_mod *ssd, kvs_owner *o)
{
	uint8_t *base = mmap(NULL, kvs_cache_arena_bytes(c), PROT_READ | PROT_WRITE,
			     MAP_SHARED, kvs_cache_arena_fd(c), 0);

	if (base == MAP_FAILED) {
		CHECK(!"mmap of the host arena");
		return;
	}
	CHECK_EQ(publish(c, o, 1, 1, base, 1024u * 16 * 2 * 2), 1);
	ssd_settle(c, ssd);
	munmap(base, kvs_cache_arena_bytes(c));
}

/* A restart restores each namespace once: the namespaces file keeps its
 * size over restarts (it used to double at each). Its entry is written at
 * its first block on SSD (a write-through commit here), not before. */
static void test_restart_namespaces(void)
{
	char dir[256], path[300];
	kvs_tier_ssd_config sc = { .dir = dir, .segment_bytes = 1u << 20,
				   .write_through = 1 };
	struct stat st;
	off_t first = 0;

	if (!mk_dir(dir)) {
		CHECK(!"mkdtemp");
		return;
	}
	snprintf(path, sizeof(path), "%s/namespaces", dir);
	for (int run = 0; run < 3; run++) {
		kvs_cache *c = mk_cache(4u << 20, "leaf-lru");
		kvs_tier_mod *ssd = NULL;
		kvs_owner *o;

		CHECK_EQ(kvs_tier_ssd_open(&sc, &ssd), 0);
		CHECK_EQ(kvs_cache_tier_add(c, ssd), 0);
		o = attach(c, 1024, 16);
		kvs_cache_stats_fill(c);
		CHECK_EQ(stats.namespaces_count, 1);
		CHECK(run > 0 || stat(path, &st) < 0); /* no block yet */
		if (run == 0)
			publish_one(c, ssd, o);
		CHECK(stat(path, &st) == 0);
		if (run == 0)
			first = st.st_size;
		CHECK(first > 0 && st.st_size == first);
		kvs_cache_owner_free(c, o);
		kvs_cache_destroy(c);
	}
	rm_dir(dir);
}


int main(void)
{
	kvs_log_set_level(KVS_LOG_WARN);
	test_restart_namespaces();
	test_restart_background();
	test_metadata();
	return check_summary("test_tiers_ssd");
}
