/*
 * test_fastpins - the fast path's pins against clients that write what they
 * like (service/fast/fastpins.c), over a real cache:
 *
 *  - revocation: a pin stored before the daemon revokes the area still
 *    keeps its block for the grace, and no longer after it (test_revoke);
 *  - a pin key of 0 (a generation wrap at offset 0) is never matched by
 *    empty pins (test_key0);
 *  - client-written counters stay in fast.*, capped and monotone; only the
 *    misses reach blocks.lookup_miss, never the hits (test_counters);
 *  - forged grants are refused by the client's checks (test_grant_checks);
 *  - a victim shifted back by its neighbour's deletion stays marked going
 *    (test_batch_shift);
 *  - cost, counted (pins read + hash-set probes), never timed: K full pin
 *    areas and N held blocks cost a reserve O(pins x log N + N) and the
 *    disconnect O(pins + N), not O(pins x N) (test_scan_cost); areas full
 *    of junk cost at most 256 pins per eviction, amortized
 *    (test_reserve_amortized); touches replayed per call are bounded over
 *    all clients and go round (test_replay_budget);
 *  - a replayed touch is one hit in blocks.lookup_hit, junk and lapped
 *    touches are counted apart (test_touches).
 *
 * test_fastpins --bench K N prints the wall times of test_scan_cost.
 */
#include "fast_test.h"

static int reap_all(kvs_fast *f, double *ms);

/* ---- what a client writes, and what the daemon believes ------------------ */

/* One committed block in a fresh cache with the fast path, and one client
 * area; what test_revoke, test_key0 and test_counters start from. */
typedef struct one {
	kvs_cache *c;
	kvs_fast *f;
	kvs_fast_client *fc;
	kvs_fast_grant g;
	kvs_owner *o;
	kvs_fast_pins_hdr *ph;
	uint64_t *pins;
	uint32_t ns, idx;
	kvs_block b;
} one;

static void one_open(one *x)
{
	kvs_cache_config cfg = { .host_bytes = 4u << 20, .page_bytes = 64u << 10,
				 .policy = "leaf-lru", .max_leases = 64 };
	kvs_hash h = { 0x0e0eu, 0x1f1fu };
	uint64_t lease;

	memset(&stats, 0, sizeof(stats));
	memset(x, 0, sizeof(*x));
	CHECK(kvs_cache_create(&cfg, &stats, &x->c) == 0);
	CHECK(kvs_fast_create(x->c, &stats, 1024, 64, 1, &x->f) == 0);
	kvs_cache_set_fast(x->c, &kvs_fast_hooks, x->f);
	x->o = attach(x->c, &x->ns);
	CHECK(kvs_fast_attach(x->f, x->o, &x->fc, &x->g) == 0);
	x->ph = mmap(NULL, x->g.pins_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		     x->g.pins_fd, 0);
	CHECK(x->ph != MAP_FAILED);
	close(x->g.pins_fd);
	x->pins = (uint64_t *)((uint8_t *)x->ph + KVS_FAST_PINS_OFF);
	CHECK_EQ(kvs_cache_reserve(x->c, x->o, &h, 1, &lease, &x->b), 1);
	CHECK_EQ(kvs_cache_commit(x->c, x->o, lease), 1);
	x->idx = kvs_cache_find(x->c, x->ns, h);
}

static void one_close(one *x, int detached)
{
	if (!detached)
		kvs_fast_detach(x->f, x->fc);
	munmap(x->ph, x->g.pins_bytes);
	kvs_cache_owner_free(x->c, x->o);
	kvs_cache_destroy(x->c);
	kvs_fast_destroy(x->f);
}

/*
 * The revocation race, step by step. The client checked `revoked` (0),
 * found the block and stored its pin; the daemon closes the connection
 * now (revokes the area); the client fences and checks `revoked` again
 * (client/fast.c): it sees 1 and takes the socket. Had its fence come
 * before the revocation it would have used the block: so the daemon keeps
 * counting a revoked area's pins for its grace (the block stays, held),
 * and lets go once a tick after the grace forgets the area.
 */
static void test_revoke(void)
{
	one x;
	double ms;

	one_open(&x);
	CHECK_EQ(__atomic_load_n(&x.ph->revoked, __ATOMIC_RELAXED), 0);
	x.pins[0] = kvs_fast_pin_key(x.b.offset, x.b.gen);
	__atomic_store_n(&x.ph->used, 1u, __ATOMIC_RELAXED);
	kvs_fast_detach(x.f, x.fc); /* the daemon, between the two checks */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	CHECK_EQ(__atomic_load_n(&x.ph->revoked, __ATOMIC_RELAXED), 1);
	/* In its grace the area's pins count: the block is kept. */
	CHECK_EQ(kvs_cache_free_rec(x.c, x.idx, KVS_CACHE_EVENT_FLUSHED), 0);
	kvs_fast_stats_fill(x.f);
	CHECK_EQ(kvs_fast_counters(x.f)->held, 1);
	CHECK_EQ(kvs_fast_counters(x.f)->clients, 0);
	CHECK_EQ(kvs_fast_counters(x.f)->revoked, 1);
	/* After it, forgotten: the hold goes, the block may go. */
	CHECK(reap_all(x.f, &ms));
	CHECK_EQ(kvs_fast_counters(x.f)->held, 0);
	CHECK_EQ(kvs_cache_free_rec(x.c, x.idx, KVS_CACHE_EVENT_FLUSHED), 1);
	CHECK_EQ(kvs_cache_check(x.c), 0);
	one_close(&x, 1);
}

/* A generation wrap can give a slot the pin key 0; 0 is also an empty pin.
 * Empty pins must not keep that block: the daemon never counts a 0. */
static void test_key0(void)
{
	one x;
	kvs_rec r;

	one_open(&x);
	r = *kvs_cache_rec_at(x.c, x.idx);
	r.hash = cache_ns_key(x.ns, (kvs_hash){ 0x2a2au, 0x3b3bu });
	r.offset = 0;
	r.gen = 0; /* wrapped */
	CHECK_EQ(kvs_fast_pin_key(r.offset, r.gen), 0);
	kvs_fast_publish(x.f, x.g.arena_id, x.idx, &r);
	/* Eight pins in use, all empty (released). */
	__atomic_store_n(&x.ph->used, 8u, __ATOMIC_RELAXED);
	CHECK_EQ(kvs_fast_hold(x.f, x.g.arena_id, x.idx, &r), 0);
	kvs_fast_stats_fill(x.f);
	CHECK_EQ(kvs_fast_counters(x.f)->held, 0);
	one_close(&x, 0);
}

/* A client's counters are its own words: shown as fast.* (client-reported),
 * capped per client, never moved back; only its misses reach
 * blocks.lookup_miss (and its namespace's), never its hits; the leases and
 * pins it says it holds count at most its area's cap. */
static void test_counters(void)
{
	one x;

	one_open(&x);
	for (int k = 0; k < KVS_FAST_NCOUNTERS; k++)
		x.ph->counters[k] = UINT64_MAX;
	x.ph->pins_live = UINT32_MAX;
	x.ph->leases_live = UINT32_MAX;
	kvs_fast_stats_fill(x.f);
	CHECK_EQ(stats.blocks_lookup_hit, 0);
	CHECK_EQ(stats.blocks_lookup_miss, (int64_t)KVS_FAST_CLIENT_MAX);
	CHECK_EQ(kvs_cache_ns_at(x.c, x.ns)->lookup_miss, KVS_FAST_CLIENT_MAX);
	CHECK_EQ(kvs_cache_ns_at(x.c, x.ns)->lookup_hit, 0);
	CHECK_EQ(stats.leases_active, x.g.pin_cap);
	CHECK_EQ(stats.leases_pinned_blocks, x.g.pin_cap);
	CHECK_EQ(kvs_fast_counters(x.f)->hit_blocks,
		 (int64_t)KVS_FAST_CLIENT_MAX);
	CHECK_EQ(kvs_fast_counters(x.f)->lookups, (int64_t)KVS_FAST_CLIENT_MAX);
	CHECK_EQ(kvs_fast_counters(x.f)->pins_live, x.g.pin_cap);
	/* Back to small: the counter does not go back. */
	x.ph->counters[KVS_FAST_CTR_hit_blocks] = 5;
	x.ph->counters[KVS_FAST_CTR_miss_blocks] = 5;
	kvs_fast_stats_fill(x.f);
	CHECK_EQ(kvs_fast_counters(x.f)->hit_blocks,
		 (int64_t)KVS_FAST_CLIENT_MAX);
	CHECK_EQ(stats.blocks_lookup_hit, 0);
	CHECK_EQ(stats.blocks_lookup_miss, (int64_t)KVS_FAST_CLIENT_MAX);
	/* Closed: what it reported stays counted, no more. */
	kvs_fast_detach(x.f, x.fc);
	x.ph->counters[KVS_FAST_CTR_lookups] = 1;
	kvs_fast_stats_fill(x.f);
	CHECK_EQ(kvs_fast_counters(x.f)->lookups, (int64_t)KVS_FAST_CLIENT_MAX);
	one_close(&x, 1);
}

/* A fast-path hit is a touch the daemon checks: each one that names the
 * entry's publication is one hit in blocks.lookup_hit and its namespace's
 * (once: a second replay reads nothing), junk is touches_stale, and what a
 * client overwrote before it was read (its ring lapped) is touches_lost. */
static void test_touches(void)
{
	kvs_hash h = { 0x0e0eu, 0x1f1fu };
	uint64_t *ring;
	int64_t pos;
	view v;
	one x;

	one_open(&x);
	v = map_index(&x.g);
	pos = probe(&v, x.ns, h);
	CHECK(pos >= 0);
	ring = (uint64_t *)((uint8_t *)x.ph + KVS_FAST_PINS_HDR_SIZE);
	for (int i = 0; i < 3; i++)
		ring[i] = (uint64_t)pos << 32 | (uint32_t)v.e[pos].seq;
	ring[3] = (uint64_t)pos << 32 | (uint32_t)(v.e[pos].seq + 2);
	__atomic_store_n(&x.ph->touch_head, 4u, __ATOMIC_RELEASE);
	kvs_fast_replay(x.f);
	kvs_fast_replay(x.f);
	CHECK_EQ(kvs_fast_counters(x.f)->replayed, 3);
	CHECK_EQ(kvs_fast_counters(x.f)->touches_stale, 1);
	CHECK_EQ(stats.blocks_lookup_hit, 3);
	CHECK_EQ(kvs_cache_ns_at(x.c, x.ns)->lookup_hit, 3);
	CHECK_EQ(kvs_cache_rec_at(x.c, x.idx)->hits, 3);
	/* 100 touches more than the ring holds since: the oldest 100 lost. */
	for (uint32_t i = 0; i < KVS_FAST_TOUCHES; i++)
		ring[i] = (uint64_t)UINT32_MAX << 32;
	__atomic_store_n(&x.ph->touch_head, 4u + KVS_FAST_TOUCHES + 100,
			 __ATOMIC_RELEASE);
	kvs_fast_replay(x.f);
	CHECK_EQ(kvs_fast_counters(x.f)->touches_lost, 100);
	CHECK_EQ(kvs_fast_counters(x.f)->touches_stale, 1 + KVS_FAST_TOUCHES);
	CHECK_EQ(stats.blocks_lookup_hit, 3);
	munmap((void *)v.hdr, v.bytes);
	one_close(&x, 0);
}

/* What a client believes of a grant (kvs_fast.h), forged every way. */
static void test_grant_checks(void)
{
	uint64_t ib = KVS_FAST_HDR_SIZE + 1024ull * KVS_FAST_ENTRY_SIZE;
	uint64_t pb = KVS_FAST_PINS_BYTES(64);
	kvs_fast_hdr h = { .magic = KVS_FAST_MAGIC, .version = KVS_FAST_VERSION,
			   .entries = 1024, .max_probe = KVS_FAST_MAX_PROBE,
			   .arena_id = 77 };
	kvs_fast_hdr bad;
	uint64_t huge = 1ull << 30;

	CHECK(kvs_fast_grant_ok(1024, ib, 64, pb));
	CHECK(!kvs_fast_grant_ok(0, KVS_FAST_HDR_SIZE, 64, pb));    /* mask ~0 */
	CHECK(!kvs_fast_grant_ok(1000, KVS_FAST_HDR_SIZE + 1000ull * 64, 64, pb));
	CHECK(!kvs_fast_grant_ok((uint32_t)huge,
				 KVS_FAST_HDR_SIZE + huge * KVS_FAST_ENTRY_SIZE, 64, pb));
	CHECK(!kvs_fast_grant_ok(1024, ib - 64, 64, pb));         /* short */
	CHECK(!kvs_fast_grant_ok(1024, ib + 4096, 64, pb));       /* not its size */
	CHECK(!kvs_fast_grant_ok(1024, ib, 0, pb));
	CHECK(!kvs_fast_grant_ok(1024, ib, KVS_FAST_MAX_PINS + 1, UINT64_MAX));
	CHECK(!kvs_fast_grant_ok(1024, ib, 64, pb - 8));
	CHECK(kvs_fast_hdr_ok(&h, 1024, 77));
	CHECK(!kvs_fast_hdr_ok(&h, 2048, 77));
	CHECK(!kvs_fast_hdr_ok(&h, 1024, 78));
	bad = h;
	bad.magic ^= 1;
	CHECK(!kvs_fast_hdr_ok(&bad, 1024, 77));
	bad = h;
	bad.version = 1; /* a 32-bit seq layout */
	CHECK(!kvs_fast_hdr_ok(&bad, 1024, 77));
	bad = h;
	bad.max_probe = 1u << 20;
	CHECK(!kvs_fast_hdr_ok(&bad, 1024, 77));
}

/* Deciding a batch deletes its victims one by one; a deletion shifts the
 * next victim of the same cluster back, and that one must stay marked
 * going (odd) where it lands, or a client could validate a pin on it
 * between the snapshot and its own deletion (fastpins.c). */
static void test_batch_shift(void)
{
	one x;
	kvs_rec a, b;
	fdom *d;
	uint32_t home;
	int64_t at;

	one_open(&x);
	a = *kvs_cache_rec_at(x.c, x.idx);
	b = a;
	a.hash = cache_ns_key(x.ns, (kvs_hash){ 0x4444u, 0x5555u });
	b.hash = cache_ns_key(x.ns, same_home(x.ns, (kvs_hash){ 0x4444u, 0x5555u }));
	b.offset += 4096;
	kvs_fast_publish(x.f, x.g.arena_id, x.idx, &a);
	kvs_fast_publish(x.f, x.g.arena_id, x.idx, &b);
	d = fast_dom_get(x.f, x.g.arena_id);
	home = kvs_fast_home(x.ns, 0x4444u, 0x5555u, d->mask);
	CHECK_EQ(fast_find(d, x.ns, kvs_cache_rec_hash(&b), &at), (home + 1) & d->mask);
	/* Both marked going, as hold_many() marks a batch; a is deleted. */
	d->e[home].seq++;
	d->e[(home + 1) & d->mask].seq++;
	fast_delete_at(d, home);
	CHECK_EQ(fast_find(d, x.ns, kvs_cache_rec_hash(&b), &at), home);
	CHECK_EQ(d->e[home].seq & 1, 1); /* still going where it moved */
	CHECK_EQ(d->e[home].offset, b.offset);
	fast_delete_at(d, home);
	CHECK_EQ(d->e[home].seq & 1, 0);
	CHECK_EQ(d->e[home].state, KVS_FAST_EMPTY);
	CHECK_EQ(d->e[(home + 1) & d->mask].seq & 1, 0);
	one_close(&x, 0);
}

/* ---- the cost of looking at pins ------------------------------------------ */

typedef struct area {
	kvs_fast_client *fc;
	kvs_fast_grant g;
	kvs_owner *o;
	kvs_fast_pins_hdr *ph;
	uint64_t *pins;
} area;

static void area_open(kvs_cache *c, kvs_fast *f, area *a)
{
	uint32_t ns;

	a->o = attach(c, &ns);
	a->fc = NULL;
	CHECK(kvs_fast_attach(f, a->o, &a->fc, &a->g) == 0);
	a->ph = mmap(NULL, a->g.pins_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		     a->g.pins_fd, 0);
	CHECK(a->ph != MAP_FAILED);
	close(a->g.pins_fd); /* the daemon's side closed it once sent */
	a->pins = (uint64_t *)((uint8_t *)a->ph + KVS_FAST_PINS_OFF);
}

static void area_close(kvs_cache *c, area *a)
{
	munmap(a->ph, a->g.pins_bytes);
	kvs_cache_owner_free(c, a->o);
}

static uint64_t work(const kvs_fast *f)
{
	const kvs_fast_stats *fs = kvs_fast_counters(f);

	return (uint64_t)fs->pin_reads + (uint64_t)fs->pin_probes;
}

static int lg(uint64_t n)
{
	int b = 0;

	while ((1ull << b) < n)
		b++;
	return b;
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 +
	       (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Let a revoked area's grace pass: ticks until it is forgotten (about
 * 2 heartbeats; a deadline, not a sleep). *ms: the last tick's time. */
static int reap_all(kvs_fast *f, double *ms)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (ms_since(&t0) < 5000) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		kvs_fast_stats_fill(f);
		*ms = ms_since(&t);
		if (kvs_fast_counters(f)->revoked == 0)
			return 1;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	return 0;
}

/* A tier of N 4 KiB blocks, a writer, and K pin areas of 16384 pins. */
typedef struct rig {
	kvs_cache *c;
	kvs_fast *f;
	kvs_owner *w;
	area *a;
	int K;
} rig;

static void rig_open(rig *r, int K, uint32_t N)
{
	kvs_cache_config cfg = { .host_bytes = (uint64_t)N * 4096,
				 .page_bytes = 64u << 10, .policy = "lru",
				 .max_leases = 64 };
	uint32_t ns;

	memset(&stats, 0, sizeof(stats));
	memset(r, 0, sizeof(*r));
	r->K = K;
	r->a = calloc((size_t)K, sizeof(*r->a));
	CHECK(kvs_cache_create(&cfg, &stats, &r->c) == 0);
	CHECK(kvs_fast_create(r->c, &stats, 2 * N, KVS_FAST_MAX_PINS, 1, &r->f) == 0);
	kvs_cache_set_fast(r->c, &kvs_fast_hooks, r->f);
	r->w = attach(r->c, &ns);
	for (int k = 0; k < K; k++)
		area_open(r->c, r->f, &r->a[k]);
}

/* Areas from @from on are still attached. */
static void rig_close(rig *r, int from)
{
	CHECK_EQ(kvs_cache_check(r->c), 0);
	for (int k = 0; k < r->K; k++) {
		if (k >= from)
			kvs_fast_detach(r->f, r->a[k].fc);
		area_close(r->c, &r->a[k]);
	}
	kvs_cache_owner_free(r->c, r->w);
	kvs_cache_destroy(r->c);
	kvs_fast_destroy(r->f);
	free(r->a);
}

/*
 * K full pin areas (KVS_FAST_MAX_PINS each: junk, and in the first one the
 * pins of every block but the newest), a host tier full of N blocks. One
 * reserve must hold the N - 1 pinned victims and evict the last; then the
 * first area's connection closes and, after its grace, its N - 1 holds go.
 * The pins read and the hash-set probes are counted: O(pins x log N + N)
 * for the reserve (one snapshot per batch, batches doubling) and
 * O(pins + N) for the disconnect, where a scan per victim costs
 * O(pins x N). With @bench, the wall times are printed as well.
 */
static void test_scan_cost(int K, uint32_t N, int bench)
{
	rig r;
	kvs_cache *c;
	kvs_fast *f;
	kvs_owner *w;
	area *a;
	uint64_t *keys = calloc(N, sizeof(uint64_t));
	uint64_t w0, w_reserve, w_detach, P = (uint64_t)K * KVS_FAST_MAX_PINS;
	uint64_t lease;
	uint32_t filled = 0;
	kvs_block b;
	struct timespec t0;
	double t_reserve, t_detach = 0;

	rig_open(&r, K, N);
	c = r.c, f = r.f, w = r.w, a = r.a;
	for (uint32_t i = 0; i < N; i++) {
		kvs_hash h = { 0x5151u + i, 0x7373u * (i + 1) };

		if (kvs_cache_reserve(c, w, &h, 1, &lease, &b) != 1 ||
		    stats.blocks_evicted > 0)
			break;
		CHECK_EQ(kvs_cache_commit(c, w, lease), 1);
		keys[filled++] = kvs_fast_pin_key(b.offset, b.gen);
	}
	CHECK_EQ(filled, N);
	srand(7);
	for (int k = 0; k < K; k++) {
		for (uint32_t p = 0; p < KVS_FAST_MAX_PINS; p++)
			a[k].pins[p] = k == 0 && p + 1 < filled
					       ? keys[p]
					       : (uint64_t)rand() << 33 | (uint64_t)rand() << 2 | 1;
		a[k].ph->used = KVS_FAST_MAX_PINS;
	}

	w0 = work(r.f);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	{
		kvs_hash h = { 0xabcdu, 0xef01u };

		CHECK_EQ(kvs_cache_reserve(c, w, &h, 1, &lease, &b), 1);
	}
	t_reserve = ms_since(&t0);
	w_reserve = work(r.f) - w0;
	CHECK_EQ(stats.blocks_evicted, 1);
	/* a gauge: filled by stats_fill */
	CHECK_EQ(kvs_fast_counters(f)->held, 0);
	kvs_fast_stats_fill(f);
	CHECK_EQ(kvs_fast_counters(f)->held, filled - 1);
	CHECK(w_reserve <= 4 * (P + N) * (uint64_t)(lg(N) + 2));

	/* The pinning connection closes: after its grace, one snapshot of
	 * the other areas answers for all N - 1 holds. */
	w0 = work(r.f);
	kvs_fast_detach(f, a[0].fc);
	CHECK(reap_all(f, &t_detach));
	w_detach = work(r.f) - w0;
	CHECK_EQ(kvs_fast_counters(f)->held, 0);
	CHECK(w_detach <= 4 * (P + N));
	printf("test_fastpins: %d full pin areas (%llu pins), %u blocks held: "
	       "reserve read+probed %llu (bound %llu), disconnect %llu (bound %llu)\n",
	       K, (unsigned long long)P, filled - 1, (unsigned long long)w_reserve,
	       (unsigned long long)(4 * (P + N) * (uint64_t)(lg(N) + 2)),
	       (unsigned long long)w_detach, (unsigned long long)(4 * (P + N)));
	if (bench)
		printf("test_fastpins: bench: reserve %.2f ms, disconnect (the "
		       "tick that lets go, after the grace) %.2f ms\n",
		       t_reserve, t_detach);
	rig_close(&r, 1);
	free(keys);
}

/*
 * K pin areas full of junk (a client that pins nothing real but fills its
 * area), a host tier full of unpinned blocks, then M reserves that each
 * need a slot: a look at all K x 16384 pins per eviction would cost
 * O(M x pins). The batches are sized from the last look
 * (kvs_fast_batch_hint), so it costs O(pins + M x 256), and no more than
 * M + one batch of blocks go.
 */
static void test_reserve_amortized(int K, uint32_t N, uint32_t M)
{
	rig r;
	area *a;
	uint64_t w0, spent, P = (uint64_t)K * KVS_FAST_MAX_PINS, bound;
	uint64_t lease;
	kvs_block b;

	rig_open(&r, K, N);
	a = r.a;
	for (int k = 0; k < K; k++) {
		for (uint32_t p = 0; p < KVS_FAST_MAX_PINS; p++)
			a[k].pins[p] = (uint64_t)(k + 1) << 48 | (uint64_t)p << 8 | 1;
		a[k].ph->used = KVS_FAST_MAX_PINS;
	}
	w0 = work(r.f);
	for (uint32_t i = 0; i < N + M; i++) {
		kvs_hash h = { 0x9191u + i, 0x3737u * (i + 1) };

		if (kvs_cache_reserve(r.c, r.w, &h, 1, &lease, &b) != 1)
			break;
		CHECK_EQ(kvs_cache_commit(r.c, r.w, lease), 1);
	}
	spent = work(r.f) - w0;
	bound = 4 * (2 * P + (uint64_t)M * KVS_FAST_PINS_PER_VICTIM);
	printf("test_fastpins: %d areas of junk pins, %u reserves past a full "
	       "tier: %lld evicted, %lld looks, read+probed %llu (bound %llu, "
	       "one look per eviction: about %llu)\n", K, M,
	       (long long)stats.blocks_evicted,
	       (long long)kvs_fast_counters(r.f)->snapshots,
	       (unsigned long long)spent, (unsigned long long)bound,
	       (unsigned long long)((uint64_t)stats.blocks_evicted * 2 * P));
	CHECK(stats.blocks_evicted >= M);
	CHECK(stats.blocks_evicted <= M + KVS_FAST_BATCH);
	CHECK(spent <= bound);
	rig_close(&r, 0);
}

/* Touches replayed per call are bounded over all clients, in equal shares
 * (KVS_FAST_REPLAY_BUDGET): three clients that each wrote a full ring cost
 * one replay 3 x 2730 touches read, not 12288, and the next one the rest;
 * with 200 clients the shares are KVS_FAST_REPLAY_SHARE and the turn goes
 * round, so every client's ring is read within two calls. */
static void test_replay_budget(void)
{
	enum { K = 200 };
	kvs_cache_config cfg = { .host_bytes = 4u << 20, .page_bytes = 64u << 10,
				 .policy = "lru", .max_leases = 64 };
	kvs_cache *c = NULL;
	kvs_fast *f = NULL;
	area *a = calloc(K, sizeof(*a));
	uint32_t share = KVS_FAST_REPLAY_BUDGET / 3, n1, n2, starved = 0, rest;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK(kvs_fast_create(c, &stats, 1024, 64, 1, &f) == 0);
	kvs_cache_set_fast(c, &kvs_fast_hooks, f);
	for (int k = 0; k < 3; k++) {
		area_open(c, f, &a[k]);
		a[k].ph->touch_head = KVS_FAST_TOUCHES; /* a full ring of junk */
	}
	n1 = kvs_fast_replay(f);
	n2 = kvs_fast_replay(f);
	CHECK_EQ(n1, 3 * share);
	CHECK_EQ(n2, 3 * KVS_FAST_TOUCHES - 3 * share);
	CHECK_EQ(kvs_fast_replay(f), 0);
	for (int k = 3; k < K; k++)
		area_open(c, f, &a[k]);
	for (int k = 0; k < K; k++)
		a[k].ph->touch_head += 2 * KVS_FAST_REPLAY_SHARE;
	n1 = kvs_fast_replay(f);
	n2 = kvs_fast_replay(f);
	/* 200 x 128 touches: 8192 a call, 64 per client: every client had a
	 * turn after two calls (none starves behind the first ones). */
	CHECK_EQ(n1, KVS_FAST_REPLAY_BUDGET);
	CHECK_EQ(n2, KVS_FAST_REPLAY_BUDGET);
	for (int k = 3; k < K; k++)
		starved += a[k].fc->tail == 0;
	CHECK_EQ(starved, 0);
	rest = kvs_fast_replay(f) + kvs_fast_replay(f);
	CHECK_EQ(n1 + n2 + rest, (uint32_t)K * 2 * KVS_FAST_REPLAY_SHARE);
	for (int k = 0; k < K; k++) {
		kvs_fast_detach(f, a[k].fc);
		area_close(c, &a[k]);
	}
	kvs_cache_destroy(c);
	kvs_fast_destroy(f);
	free(a);
}

int main(int argc, char **argv)
{
	kvs_log_set_level(KVS_LOG_WARN);
	/* --bench K N: the wall time of the pin-scan test, nothing else. */
	if (argc == 4 && strcmp(argv[1], "--bench") == 0) {
		test_scan_cost(atoi(argv[2]), (uint32_t)atoi(argv[3]), 1);
		return check_summary("test_fastpins");
	}
	test_revoke();
	test_key0();
	test_counters();
	test_touches();
	test_grant_checks();
	test_batch_shift();
	test_scan_cost(4, 2048, 0);
	test_reserve_amortized(4, 2048, 512);
	test_replay_budget();
	return check_summary("test_fastpins");
}
