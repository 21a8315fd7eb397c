/*
 * test_tiers - the tier interface (service/cache/kvs_tier_ops.h) from outside: a
 * store tier written here, in this file, with no change to the cache (a
 * copy in malloc'd memory per block) takes the host tier's evictions and
 * gives them back on lookups, bit exact, with every invariant holding; a
 * block it loses is dropped; two caches sharing a tier that others write
 * to (as the remote tier is) find each other's blocks; and a tier whose
 * table lacks a required operation is refused. The real SSD and GPU tiers
 * behind the same interface: test_tiers_ssd.
 */
#include "tiers_test.h"

/* A kvs_tier value no tier of the daemon uses. */
#define MEM_TIER 5

/* ---- a store tier in memory -------------------------------------------- */

typedef struct mem_tier {
	kvs_tier_mod base;
	void **copy;    /* by record index */
	uint32_t n;
	uint64_t demoted, promoted, lookup_hits;
	int lose_children; /* demote drops the copies of the block's children
			    * held only here, as a segment recycled under a
			    * demotion write does */
	uint32_t lost;
} mem_tier;

static mem_tier *mem_of(const kvs_tier_mod *t)
{
	return (mem_tier *)t;
}

static int mem_rec_new(kvs_tier_mod *t, uint32_t idx)
{
	mem_tier *m = mem_of(t);

	if (idx >= m->n) {
		uint32_t n = kvs_tier_rec_span(t) > idx ? kvs_tier_rec_span(t) : idx + 1;
		void **nc = realloc(m->copy, n * sizeof(*nc));

		if (!nc)
			return -ENOMEM;
		memset(nc + m->n, 0, (n - m->n) * sizeof(*nc));
		m->copy = nc;
		m->n = n;
	}
	free(m->copy[idx]);
	m->copy[idx] = NULL;
	return 0;
}

static int mem_has(const kvs_tier_mod *t, uint32_t idx)
{
	return idx < mem_of(t)->n && mem_of(t)->copy[idx] != NULL;
}

static int mem_keeps(const kvs_tier_mod *t, const kvs_tier_blk *b)
{
	(void)t;
	(void)b;
	return 1;
}

static int mem_demote(kvs_tier_mod *t, const kvs_tier_blk *b, int *holds)
{
	mem_tier *m = mem_of(t);

	*holds = 0;
	for (uint32_t i = 0; m->lose_children && i < m->n; i++) {
		kvs_tier_blk k;

		if (m->copy[i] && kvs_tier_rec(t, i, &k) == 0 && k.tier == MEM_TIER &&
		    k.parent.lo == b->hash.lo && k.parent.hi == b->hash.hi) {
			free(m->copy[i]);
			m->copy[i] = NULL;
			m->lost++;
			kvs_tier_lost(t, i);
		}
	}
	if (!m->copy[b->idx]) {
		m->copy[b->idx] = malloc(b->bytes);
		if (!m->copy[b->idx])
			return KVS_TIER_REFUSED;
		memcpy(m->copy[b->idx], kvs_tier_host_ptr(t, b->host_off), b->bytes);
	}
	m->demoted++;
	return KVS_TIER_KEPT;
}

static int mem_read(kvs_tier_mod *t, const kvs_tier_blk *b, void *dst,
		    uint64_t cookie)
{
	(void)cookie;
	memcpy(dst, mem_of(t)->copy[b->idx], b->bytes);
	return 0;
}

static int mem_reading(const kvs_tier_mod *t, uint32_t idx)
{
	(void)t;
	(void)idx;
	return 0;
}

static void mem_drop(kvs_tier_mod *t, const kvs_tier_blk *b)
{
	free(mem_of(t)->copy[b->idx]);
	mem_of(t)->copy[b->idx] = NULL;
}

static void mem_note(kvs_tier_mod *t, int what, uint64_t n)
{
	if (what == KVS_TIER_NOTE_PROMOTED)
		mem_of(t)->promoted += n;
	if (what == KVS_TIER_NOTE_LOOKUP_HIT)
		mem_of(t)->lookup_hits += n;
}

static void mem_stats(kvs_tier_mod *t, kvs_counters *st)
{
	(void)t;
	(void)st;
}

static void mem_close(kvs_tier_mod *t)
{
	mem_tier *m = mem_of(t);

	for (uint32_t i = 0; i < m->n; i++)
		free(m->copy[i]);
	free(m->copy);
	free(m);
}

static const kvs_tier_store_ops mem_store_ops = {
	.rec_new = mem_rec_new, .has = mem_has, .keeps = mem_keeps,
	.demote = mem_demote, .read = mem_read, .reading = mem_reading,
	.drop = mem_drop,
};

/* Its stats section: values of mem_tier itself (base.counters = the tier). */
#define MEM_STATS(X)                                                          \
	X(demoted, COUNTER, "blocks the mem tier kept")                       \
	X(lookup_hits, COUNTER, "lookup hits in the mem tier")
#define KVS_STAT_TYPE mem_tier
KVS_STATS_SECTION_DEFINE(mem_section, "tier_mem", MEM_TIER, MEM_STATS);
#undef KVS_STAT_TYPE

static const kvs_tier_ops mem_ops = {
	.name = "mem", .tier = MEM_TIER,
	.close = mem_close, .note = mem_note, .stats = mem_stats,
	.stats_section = &mem_section, .store = &mem_store_ops,
};

/* ---- a shared tier: what two caches publish, both can fetch ------------ */

#define SHARED_MAX 256
#define SHARED_TIER 6

/* The shared store (a stand-in for the remote cluster): copies by hash. */
static struct {
	kvs_hash hash[SHARED_MAX];
	void *bytes[SHARED_MAX];
	int bad[SHARED_MAX];
	uint32_t n;
} shared;

/* One cache's tier over it; completions wait for poll(), as I/O does. */
typedef struct shared_tier {
	kvs_tier_mod base;
	struct { int probe; uint64_t cookie; int res; } q[256];
	uint32_t nq;
	uint64_t published, fetched, refused;
} shared_tier;

static int shared_find(kvs_hash h)
{
	for (uint32_t i = 0; i < shared.n; i++)
		if (shared.hash[i].lo == h.lo && shared.hash[i].hi == h.hi)
			return (int)i;
	return -1;
}

static void sh_committed(kvs_tier_mod *t, const kvs_tier_blk *b)
{
	if (shared_find(b->hash) >= 0 || shared.n == SHARED_MAX)
		return;
	shared.hash[shared.n] = b->hash;
	shared.bytes[shared.n] = malloc(b->bytes);
	memcpy(shared.bytes[shared.n++], kvs_tier_host_ptr(t, b->host_off), b->bytes);
	((shared_tier *)t)->published++;
}

static int sh_probe(kvs_tier_mod *t, const kvs_tier_blk *b, uint32_t n,
		    uint64_t cookie)
{
	shared_tier *m = (shared_tier *)t;
	uint32_t k = 0;

	while (k < n && shared_find(b[k].hash) >= 0)
		k++;
	m->q[m->nq++] = (typeof(m->q[0])){ .probe = 1, .cookie = cookie, .res = (int)k };
	return 1;
}

static int sh_fetch(kvs_tier_mod *t, const kvs_tier_blk *b, void *dst,
		    uint64_t cookie)
{
	shared_tier *m = (shared_tier *)t;
	int i = shared_find(b->hash);

	if (i < 0)
		return -ENOENT;
	memcpy(dst, shared.bytes[i], b->bytes);
	/* A copy whose checksum fails is a miss, never data. */
	m->q[m->nq++] = (typeof(m->q[0])){ .cookie = cookie,
					   .res = shared.bad[i] ? -EBADMSG : 0 };
	m->fetched += !shared.bad[i];
	return 1;
}

static void sh_poll(kvs_tier_mod *t)
{
	shared_tier *m = (shared_tier *)t;

	for (uint32_t i = 0; i < m->nq; i++) {
		if (m->q[i].probe)
			kvs_tier_probe_done(t, m->q[i].cookie, m->q[i].res);
		else
			kvs_tier_read_done(t, m->q[i].cookie, m->q[i].res);
	}
	m->nq = 0;
}

/* It keeps nothing per record: host evictions are dropped here. */
static int sh_demote(kvs_tier_mod *t, const kvs_tier_blk *b, int *holds)
{
	(void)b;
	*holds = 0;
	((shared_tier *)t)->refused++;
	return KVS_TIER_REFUSED;
}

static int sh_rec_new(kvs_tier_mod *t, uint32_t idx) { (void)t; (void)idx; return 0; }
static int sh_has(const kvs_tier_mod *t, uint32_t idx) { (void)t; (void)idx; return 0; }

static void sh_close(kvs_tier_mod *t) { free(t); }

static const kvs_tier_store_ops shared_store_ops = {
	.rec_new = sh_rec_new, .has = sh_has, .keeps = mem_keeps,
	.demote = sh_demote, .committed = sh_committed, .read = mem_read,
	.reading = mem_reading, .drop = mem_drop, .probe = sh_probe,
	.fetch = sh_fetch,
};

#define SHARED_STATS(X) X(published, COUNTER, "blocks the shared tier stored")
#define KVS_STAT_TYPE shared_tier
KVS_STATS_SECTION_DEFINE(shared_section, "tier_shared", SHARED_TIER,
			 SHARED_STATS);
#undef KVS_STAT_TYPE

static const kvs_tier_ops shared_ops = {
	.name = "shared", .tier = SHARED_TIER,
	.close = sh_close, .poll = sh_poll, .stats = mem_stats,
	.stats_section = &shared_section, .store = &shared_store_ops,
};

/* ---- helpers ------------------------------------------------------------ */

/* ---- tests -------------------------------------------------------------- */

/* 64 KiB blocks, a host tier of 1 MiB (16 blocks), 40 chains of 4: most go
 * down to the memory tier, and every lookup finds them back, bit exact. */
static void test_store_tier(void)
{
	kvs_cache *c = mk_cache(1u << 20, "leaf-lru");
	mem_tier *m = calloc(1, sizeof(*m));
	const uint64_t bytes = 64u << 10;
	kvs_owner *o;
	uint8_t *base;
	int fd;

	if (!c || !m)
		return;
	m->base.ops = &mem_ops;
	m->base.counters = m;
	CHECK_EQ(kvs_cache_tier_add(c, &m->base), 0);
	CHECK(kvs_cache_tier(c, MEM_TIER) == &m->base);
	CHECK_EQ(kvs_cache_tier_add(c, &m->base), -EEXIST);
	o = attach(c, 1024, 16); /* 1 x 1 x 16 x 1024 x 2 x 2 = 64 KiB */
	fd = kvs_cache_arena_fd(c);
	base = mmap(NULL, kvs_cache_arena_bytes(c), PROT_READ | PROT_WRITE,
		    MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		CHECK(!"mmap of the host arena");
		return;
	}
	for (uint32_t k = 0; k < 40; k++) {
		CHECK_EQ(publish(c, o, k, 4, base, bytes), 4);
		CHECK_EQ(kvs_cache_check(c), 0);
	}
	CHECK(m->demoted >= 40 * 4 - 16);
	for (uint32_t k = 0; k < 40; k++) {
		kvs_hash hs[4];
		kvs_block b[4];
		uint64_t lease;
		int hits;

		chain(k, 4, hs);
		hits = kvs_cache_lookup(c, o, hs, 4, &lease, b);
		CHECK_EQ(hits, 4);
		for (int i = 0; i < hits; i++) {
			CHECK_EQ(b[i].tier, KVS_TIER_HOST);
			CHECK_EQ(base[b[i].offset], (k * 31 + (uint32_t)i) & 0xff);
			CHECK_EQ(base[b[i].offset + bytes - 1], (k * 31 + (uint32_t)i) & 0xff);
		}
		if (hits > 0)
			CHECK(kvs_cache_release(c, o, lease) >= 0);
		CHECK_EQ(kvs_cache_check(c), 0);
	}
	CHECK(m->promoted > 0);
	printf("test_tiers: memory tier: %llu demotions, %llu promotions\n",
	       (unsigned long long)m->demoted, (unsigned long long)m->promoted);
	/* A copy the tier loses is gone for lookups; the cache stays whole. */
	for (uint32_t i = 0; i < m->n; i++)
		if (m->copy[i]) {
			free(m->copy[i]);
			m->copy[i] = NULL;
			kvs_tier_lost(&m->base, i);
		}
	CHECK_EQ(kvs_cache_check(c), 0);
	kvs_cache_owner_free(c, o);
	munmap(base, kvs_cache_arena_bytes(c));
	kvs_cache_destroy(c); /* closes the tier */
}

/* A block on its way down loses its last child meanwhile (the child's
 * copy dropped inside the demotion, as when the SSD tier recycles the
 * child's segment under the parent's write): the block becomes a leaf
 * there and is put back into the host policy, and must leave it when it
 * lands in the lower tier (it used to stay, and a later eviction took an
 * SSD block for a host one). */
static void test_child_lost_in_demotion(void)
{
	kvs_cache *c = mk_cache(1u << 20, "leaf-lru");
	mem_tier *m = calloc(1, sizeof(*m));
	const uint64_t bytes = 64u << 10;
	kvs_hash hs[2];
	uint8_t *base;
	kvs_block b[2];
	uint64_t lease;
	kvs_owner *o;

	if (!c || !m)
		return;
	m->base.ops = &mem_ops;
	m->base.counters = m;
	CHECK_EQ(kvs_cache_tier_add(c, &m->base), 0);
	o = attach(c, 1024, 16);
	base = mmap(NULL, kvs_cache_arena_bytes(c), PROT_READ | PROT_WRITE,
		    MAP_SHARED, kvs_cache_arena_fd(c), 0);
	if (base == MAP_FAILED) {
		CHECK(!"mmap");
		return;
	}
	/* [X, Y], then enough to push both down; then X alone back up. */
	CHECK_EQ(publish(c, o, 100, 2, base, bytes), 2);
	for (uint32_t k = 0; k < 10; k++)
		CHECK_EQ(publish(c, o, 200 + k, 2, base, bytes), 2);
	chain(100, 2, hs);
	CHECK_EQ(kvs_cache_lookup(c, o, hs, 1, &lease, b), 1);
	CHECK(kvs_cache_release(c, o, lease) >= 0);
	CHECK_EQ(kvs_cache_check(c), 0);
	/* X goes down again, losing Y on the way. */
	m->lose_children = 1;
	for (uint32_t k = 0; k < 10; k++) {
		CHECK_EQ(publish(c, o, 300 + k, 2, base, bytes), 2);
		CHECK_EQ(kvs_cache_check(c), 0);
	}
	CHECK(m->lost >= 1);
	kvs_cache_owner_free(c, o);
	munmap(base, kvs_cache_arena_bytes(c));
	kvs_cache_destroy(c);
}

typedef struct answer {
	int done, hits;
	uint64_t lease;
} answer;

static void on_done(void *arg, int rc, uint64_t lease, const kvs_block *out)
{
	answer *a = arg;

	(void)out;
	a->done++;
	a->hits = rc;
	a->lease = lease;
}

/* Two caches ("two machines") share a tier: what A publishes, a lookup in
 * B probes and fetches into new records, bit exact; a corrupt copy cuts
 * the chain and is never served; what B fetched is a local hit after. */
static void test_shared_tier(void)
{
	const uint64_t bytes = 64u << 10;
	kvs_cache *ca = mk_cache(4u << 20, "leaf-lru"), *cb;
	shared_tier *ta = calloc(1, sizeof(*ta)), *tb = calloc(1, sizeof(*tb));
	kvs_owner *oa, *ob;
	kvs_hash hs[8];
	uint8_t *base_a, *base_b;
	kvs_block b[8];
	answer ans = { 0 };
	uint64_t lease;
	int hits;

	cb = mk_cache(4u << 20, "leaf-lru");
	ta->base.ops = tb->base.ops = &shared_ops;
	ta->base.counters = ta;
	tb->base.counters = tb;
	CHECK_EQ(kvs_cache_tier_add(ca, &ta->base), 0);
	CHECK_EQ(kvs_cache_tier_add(cb, &tb->base), 0);
	oa = attach(ca, 1024, 16);
	ob = attach(cb, 1024, 16);
	kvs_cache_owner_set_done(ob, on_done, &ans);
	base_a = mmap(NULL, kvs_cache_arena_bytes(ca), PROT_READ | PROT_WRITE,
		      MAP_SHARED, kvs_cache_arena_fd(ca), 0);
	base_b = mmap(NULL, kvs_cache_arena_bytes(cb), PROT_READ | PROT_WRITE,
		      MAP_SHARED, kvs_cache_arena_fd(cb), 0);
	if (base_a == MAP_FAILED || base_b == MAP_FAILED) {
		CHECK(!"mmap");
		return;
	}
	CHECK_EQ(publish(ca, oa, 7, 6, base_a, bytes), 6);
	CHECK_EQ(ta->published, 6);
	/* B has none of them: the lookup waits for the shared tier. */
	chain(7, 6, hs);
	CHECK_EQ(kvs_cache_lookup(cb, ob, hs, 6, &lease, b), -EINPROGRESS);
	kvs_cache_tier_poll(&tb->base); /* the probe: 6 */
	kvs_cache_tier_poll(&tb->base); /* the fetches */
	CHECK_EQ(ans.done, 1);
	CHECK_EQ(ans.hits, 6);
	CHECK_EQ(kvs_cache_check(cb), 0);
	CHECK(kvs_cache_release(cb, ob, ans.lease) == 6);
	/* Now local: no wait, same bytes. */
	hits = kvs_cache_lookup(cb, ob, hs, 6, &lease, b);
	CHECK_EQ(hits, 6);
	for (int i = 0; i < hits; i++) {
		CHECK_EQ(base_b[b[i].offset], (7 * 31 + (uint32_t)i) & 0xff);
		CHECK_EQ(base_b[b[i].offset + bytes - 1], (7 * 31 + (uint32_t)i) & 0xff);
	}
	if (hits > 0)
		CHECK(kvs_cache_release(cb, ob, lease) >= 0);
	/* A corrupt copy (block 2 of chain 8) cuts the chain there. */
	CHECK_EQ(publish(ca, oa, 8, 4, base_a, bytes), 4);
	chain(8, 4, hs);
	shared.bad[shared_find(hs[2])] = 1;
	ans = (answer){ 0 };
	CHECK_EQ(kvs_cache_lookup(cb, ob, hs, 4, &lease, b), -EINPROGRESS);
	kvs_cache_tier_poll(&tb->base);
	kvs_cache_tier_poll(&tb->base);
	CHECK_EQ(ans.done, 1);
	CHECK_EQ(ans.hits, 2);
	CHECK(ans.lease != 0 && kvs_cache_release(cb, ob, ans.lease) == 2);
	CHECK_EQ(kvs_cache_check(cb), 0);
	/* The owner goes away while its fetches are in flight. */
	chain(9, 3, hs);
	CHECK_EQ(publish(ca, oa, 9, 3, base_a, bytes), 3);
	CHECK_EQ(kvs_cache_lookup(cb, ob, hs, 3, &lease, b), -EINPROGRESS);
	kvs_cache_tier_poll(&tb->base); /* probe: fetches go out */
	kvs_cache_owner_free(cb, ob);
	kvs_cache_tier_poll(&tb->base);
	CHECK_EQ(kvs_cache_check(cb), 0);
	printf("test_tiers: shared tier: %llu published by A, %llu fetched by B\n",
	       (unsigned long long)ta->published, (unsigned long long)tb->fetched);
	kvs_cache_owner_free(ca, oa);
	munmap(base_a, kvs_cache_arena_bytes(ca));
	munmap(base_b, kvs_cache_arena_bytes(cb));
	kvs_cache_destroy(ca);
	kvs_cache_destroy(cb);
	for (uint32_t i = 0; i < shared.n; i++)
		free(shared.bytes[i]);
}
/* ---- a tier whose table lacks a required operation --------------------- */

static int no_fd(const kvs_tier_mod *t) { (void)t; return -1; }
static uint64_t held_zero(const kvs_tier_mod *t) { (void)t; return 0; }

/* kvs_cache_tier_add() refuses @ops (-EINVAL) and the cache is as before:
 * no tier at that value, no store tier, and the tier still the caller's. */
static int refused(kvs_cache *c, kvs_tier_mod *t, const kvs_tier_ops *ops)
{
	int rc;

	t->ops = ops;
	t->cache = NULL;
	rc = kvs_cache_tier_add(c, t);
	return rc == -EINVAL && !kvs_cache_tier(c, ops->tier) &&
	       !kvs_cache_has_stores(c) && t->cache == NULL;
}

/* Each member kvs_tier_ops.h requires, taken out of a table that works: the
 * tier is refused (the cache would call a NULL), then the whole table is
 * taken. */
static void test_ops_required(void)
{
	kvs_cache *c = mk_cache(4u << 20, "leaf-2q");
	kvs_tier_gpu_config gc = { .device = -1, .bytes = 1u << 20, .page_bytes = PAGE };
	mem_tier *m = calloc(1, sizeof(*m));
	kvs_tier_mod *gpu = NULL;
	kvs_tier_slot_ops sl;
	kvs_tier_store_ops st;
	kvs_tier_ops ops;
	char why[256];

	if (!c || !m) {
		CHECK(!"setup");
		return;
	}
	m->base.counters = m; /* refused for the member taken out, only */
#define WITHOUT(tbl, orig, member, ...)                                       \
	do {                                                                  \
		ops = mem_ops;                                                \
		st = mem_store_ops;                                           \
		ops.store = &st;                                              \
		tbl = orig;                                                   \
		tbl.member = NULL;                                            \
		__VA_ARGS__;                                                  \
		CHECK(refused(c, &m->base, &ops));                            \
	} while (0)
	WITHOUT(ops, mem_ops, name);
	WITHOUT(ops, mem_ops, close);
	WITHOUT(ops, mem_ops, stats);
	WITHOUT(ops, mem_ops, stats_section);
	WITHOUT(ops, mem_ops, stats_section, ops.stats_section = &shared_section);
	WITHOUT(ops, mem_ops, poll, ops.event_fd = no_fd);
	WITHOUT(ops, mem_ops, store);           /* neither table */
	WITHOUT(st, mem_store_ops, rec_new);
	WITHOUT(st, mem_store_ops, has);
	WITHOUT(st, mem_store_ops, keeps);
	WITHOUT(st, mem_store_ops, demote);
	WITHOUT(st, mem_store_ops, read);
	WITHOUT(st, mem_store_ops, drop);
	WITHOUT(st, mem_store_ops, fetch, st.probe = sh_probe);
	WITHOUT(st, mem_store_ops, wait_held, st.host_held = held_zero);

	setenv("KVS_GPU_FAKE", "1", 1);
	CHECK_EQ(kvs_tier_gpu_open(&gc, &gpu, why, sizeof(why)), 0);
	unsetenv("KVS_GPU_FAKE");
	if (gpu) {
		const kvs_tier_ops *real = gpu->ops;

		WITHOUT(sl, *real->slot, map, ops = *real; ops.slot = &sl);
		WITHOUT(sl, *real->slot, alloc, ops = *real; ops.slot = &sl);
		WITHOUT(sl, *real->slot, class_put, ops = *real; ops.slot = &sl);
		WITHOUT(sl, *real->slot, used, ops = *real; ops.slot = &sl);
		/* both tables: a tier is above host or below it */
		ops = *real;
		ops.store = &mem_store_ops;
		CHECK(refused(c, gpu, &ops));
		gpu->ops = real;
		CHECK_EQ(kvs_cache_tier_add(c, gpu), 0);
	}
#undef WITHOUT
	/* a section with no values to render */
	m->base.counters = NULL;
	CHECK(refused(c, &m->base, &mem_ops));
	m->base.ops = &mem_ops;
	m->base.counters = m;
	CHECK_EQ(kvs_cache_tier_add(c, &m->base), 0);
	CHECK(kvs_cache_has_stores(c));
	CHECK_EQ(kvs_cache_check(c), 0);
	kvs_cache_destroy(c);
}

int main(void)
{
	kvs_log_set_level(KVS_LOG_WARN);
	test_store_tier();
	test_child_lost_in_demotion();
	test_shared_tier();
	test_ops_required();
	return check_summary("test_tiers");
}
