/*
 * test_fastidx - the fast path's index and pin areas (service/fast/fastidx.c, fastconn.c)
 * over a real cache, read the way a client reads them (proto/kvs_fast.h):
 *
 *  - mechanics: records published into a small index up to 88% load, some
 *    left out at the probe bound (counted; COMPLETE cleared); every one
 *    published is found within the bound with its slot, none left out is;
 *    deleting them in random order (backward shift) keeps every other one
 *    findable and `moves` even between deletions; the left-out ones' exits
 *    bring COMPLETE back;
 *  - pins: a committed block pinned in a pin area survives an operator
 *    evict (held, one pin of its own) and goes once the pin is cleared and
 *    the hold dropped; the index is sealed read-only for others; closing
 *    the connection revokes the pin area;
 *  - contention: a client thread pins and validates the one published
 *    block as fast as it can while the daemon's side, in another thread,
 *    evicts it whenever the pin scan lets it and publishes it again under
 *    a new generation: no generation is ever freed while a pin the client
 *    validated names it (the memory-ordering argument of fastidx.c, tested
 *    on two CPUs: with the client's re-check removed it counts 0.5-5 million
 *    violations in 1.5 s, with the daemon's fence a compiler-only barrier
 *    about a hundred); and again with the daemon deciding that block in a
 *    batch with a block of the same home ahead of it (kvs_fast_hold_batch),
 *    so that deletions shift it while it is marked going.
 *
 * What hostile clients can do to the pins: test_fastpins.
 */
#include "fast_test.h"

static uint32_t ready(const view *v)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < v->hdr->entries; i++)
		n += v->e[i].state == KVS_FAST_READY;
	return n;
}

#define NREC 900 /* into 1024 entries */

static void test_mechanics(unsigned seed)
{
	kvs_cache_config cfg = { .host_bytes = 16u << 20, .page_bytes = 64u << 10,
				 .policy = "leaf-lru", .max_leases = 64 };
	static kvs_rec recs[NREC];
	static kvs_hash hs[NREC];
	static int in[NREC], order[NREC];
	kvs_fast_client *fc = NULL;
	kvs_fast_grant g;
	kvs_cache *c = NULL;
	kvs_fast *f = NULL;
	kvs_owner *o;
	uint32_t ns = 0, published = 0;
	view v;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK(kvs_fast_create(c, &stats, 1024, 64, 1, &f) == 0);
	o = attach(c, &ns);
	CHECK(kvs_fast_attach(f, o, &fc, &g) == 0);
	close(g.pins_fd); /* the caller's, once sent */
	v = map_index(&g);
	CHECK_EQ(v.hdr->entries, 1024);
	CHECK(v.hdr->flags & KVS_FAST_COMPLETE);
	srand(seed);
	for (int i = 0; i < NREC; i++) {
		uint64_t before = (uint64_t)kvs_fast_counters(f)->unpublished;

		hs[i] = (kvs_hash){ ((uint64_t)rand() << 32) ^ (uint64_t)rand(),
				    ((uint64_t)rand() << 32) ^ (uint64_t)rand() };
		recs[i] = (kvs_rec){ .hash = cache_ns_key(ns, hs[i]),
				     .offset = (uint64_t)i * 4096, .gen = 1000u + i,
				     .ns = ns, .tier = KVS_TIER_HOST,
				     .state = KVS_REC_READY };
		kvs_fast_publish(f, g.arena_id, (uint32_t)i, &recs[i]);
		in[i] = (uint64_t)kvs_fast_counters(f)->unpublished == before;
		published += in[i];
		order[i] = i;
	}
	printf("test_fastidx: %u of %d published into 1024 entries\n",
	       published, NREC);
	CHECK_EQ(ready(&v), published);
	CHECK_EQ(published + kvs_fast_counters(f)->unpublished, NREC);
	CHECK(kvs_fast_counters(f)->unpublished > 0);
	CHECK(!(v.hdr->flags & KVS_FAST_COMPLETE));
	for (int i = 0; i < NREC; i++) {
		int64_t at = probe(&v, ns, hs[i]);

		CHECK_EQ(at >= 0, in[i]);
		if (at >= 0) {
			CHECK_EQ(v.e[at].offset, recs[i].offset);
			CHECK_EQ(v.e[at].gen, recs[i].gen);
		}
	}
	for (int i = NREC - 1; i > 0; i--) {
		int j = rand() % (i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (int k = 0; k < NREC; k++) {
		int i = order[k];

		/* No client pins anything: every record may go. */
		CHECK_EQ(kvs_fast_hold(f, g.arena_id, (uint32_t)i, &recs[i]), 0);
		in[i] = 0;
		CHECK(!(v.hdr->moves & 1));
		if (k % 60 == 0 || k == NREC - 1)
			for (int m = 0; m < NREC; m++)
				if (in[m])
					CHECK(probe(&v, ns, hs[m]) >= 0);
	}
	CHECK_EQ(ready(&v), 0);
	/* Every left-out block has left: a miss proves absence again. */
	CHECK(v.hdr->flags & KVS_FAST_COMPLETE);
	kvs_fast_detach(f, fc);
	kvs_cache_owner_free(c, o);
	munmap((void *)v.hdr, v.bytes);
	kvs_cache_destroy(c);
	kvs_fast_destroy(f);
}

/* Four blocks reserved and committed: visible in the index only once
 * committed, each found there with its block's slot; idx gets their
 * records. */
static void pins_publish_four(kvs_cache *c, kvs_owner *o, const view *v,
			      uint32_t ns, kvs_hash *h, kvs_block *b,
			      uint32_t *idx)
{
	uint64_t lease;

	for (int i = 0; i < 4; i++)
		h[i] = (kvs_hash){ 0x1111u * (i + 1), 0x2222u * (i + 1) };
	CHECK_EQ(kvs_cache_reserve(c, o, h, 4, &lease, b), 4);
	CHECK_EQ(ready(v), 0); /* written, not committed: not visible */
	CHECK_EQ(kvs_cache_commit(c, o, lease), 4);
	CHECK_EQ(ready(v), 4);
	for (int i = 0; i < 4; i++) {
		int64_t at = probe(v, ns, h[i]);

		idx[i] = kvs_cache_find(c, ns, h[i]);
		CHECK(at >= 0);
		if (at >= 0) {
			CHECK_EQ(v->e[at].offset, b[i].offset);
			CHECK_EQ(v->e[at].gen, b[i].gen);
		}
	}
}

static void test_pins(void)
{
	kvs_cache_config cfg = { .host_bytes = 4u << 20, .page_bytes = 64u << 10,
				 .policy = "leaf-lru", .max_leases = 64 };
	kvs_fast_client *fc = NULL;
	kvs_fast_grant g;
	kvs_cache *c = NULL;
	kvs_fast *f = NULL;
	kvs_owner *o;
	kvs_block b[4];
	kvs_hash h[4];
	uint32_t ns = 0, idx[4];
	kvs_fast_pins_hdr *ph;
	uint64_t *pins;
	view v;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK(kvs_fast_create(c, &stats, 1024, 64, 1, &f) == 0);
	kvs_cache_set_fast(c, &kvs_fast_hooks, f);
	o = attach(c, &ns);
	CHECK(kvs_fast_attach(f, o, &fc, &g) == 0);
	v = map_index(&g);
	ph = mmap(NULL, g.pins_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		  g.pins_fd, 0);
	CHECK(ph != MAP_FAILED);
	CHECK_EQ(ph->magic, KVS_FAST_PIN_MAGIC);
	CHECK(ftruncate(g.pins_fd, 0) < 0); /* sealed: the daemon reads it */
	close(g.pins_fd); /* the caller's, once sent */
	pins = (uint64_t *)((uint8_t *)ph + KVS_FAST_PINS_OFF);

	pins_publish_four(c, o, &v, ns, h, b, idx);
	/* The leaf pinned, as a client pins it: an operator evict keeps it. */
	pins[0] = kvs_fast_pin_key(b[3].offset, b[3].gen);
	ph->used = 1;
	CHECK_EQ(kvs_cache_free_rec(c, idx[3], KVS_CACHE_EVENT_FLUSHED), 0);
	kvs_fast_stats_fill(f);
	CHECK_EQ(kvs_fast_counters(f)->held, 1);
	CHECK_EQ(kvs_fast_counters(f)->evict_skipped, 1);
	CHECK(probe(&v, ns, h[3]) >= 0);
	/* Held: not evictable, so not even asked again. */
	CHECK_EQ(kvs_cache_free_rec(c, idx[3], KVS_CACHE_EVENT_FLUSHED), 0);
	CHECK_EQ(kvs_fast_counters(f)->evict_skipped, 1);
	CHECK_EQ(kvs_fast_unhold(f), 0); /* still pinned */
	/* A bogus `used` past the area is clamped, and junk pins match
	 * nothing: the block stays only for its real pin. */
	ph->used = 0xffffffffu;
	pins[1] = 0x123456789abcdefull;
	CHECK_EQ(kvs_fast_unhold(f), 0);
	pins[0] = 0; /* the release: a store */
	CHECK_EQ(kvs_fast_unhold(f), 1);
	CHECK_EQ(kvs_cache_free_rec(c, idx[3], KVS_CACHE_EVENT_FLUSHED), 1);
	CHECK(probe(&v, ns, h[3]) < 0);
	CHECK_EQ(ready(&v), 3);
	kvs_fast_stats_fill(f);
	CHECK_EQ(kvs_fast_counters(f)->held, 0);
	CHECK_EQ(kvs_cache_check(c), 0);

	/* The connection closes: its area is revoked for the client. */
	CHECK_EQ(ph->revoked, 0);
	kvs_fast_detach(f, fc);
	CHECK_EQ(ph->revoked, 1);
	munmap(ph, g.pins_bytes);
	munmap((void *)v.hdr, v.bytes);
	kvs_cache_owner_free(c, o);
	kvs_cache_destroy(c);
	kvs_fast_destroy(f);
}

/* ---- contention ---------------------------------------------------------- */

typedef struct duel {
	kvs_fast *f;
	uint64_t arena_id;
	uint32_t idx, ns;
	kvs_hash h;
	kvs_rec rec;          /* the daemon thread's copy of the record */
	uint32_t idx2;        /* batch: a record of the same home, before it */
	kvs_rec rec2;
	view v;
	uint64_t *pins;
	kvs_fast_pins_hdr *ph;
	int stop;
	uint32_t freed;       /* the last generation the daemon let go */
	uint64_t validated, busy, violations, cycles, held;
} duel;

static void *daemon_side(void *arg)
{
	duel *x = arg;
	uint32_t gen = 1u << 20;

	while (!__atomic_load_n(&x->stop, __ATOMIC_RELAXED)) {
		if (kvs_fast_hold(x->f, x->arena_id, x->idx, &x->rec) == 0) {
			__atomic_store_n(&x->freed, x->rec.gen, __ATOMIC_SEQ_CST);
			x->rec.gen = ++gen; /* the slot comes back as another block */
			kvs_fast_publish(x->f, x->arena_id, x->idx, &x->rec);
			x->cycles++;
		} else {
			x->held++;
			while (kvs_fast_unhold(x->f) == 0 &&
			       !__atomic_load_n(&x->stop, __ATOMIC_RELAXED))
				;
		}
	}
	return NULL;
}

/* The daemon's side in batches of two: the block the client reads and one
 * of the same home ahead of it in the index, decided together
 * (kvs_fast_hold_batch), so that deleting the other shifts the client's
 * block back while it is marked going, as fastpins.c says. */
static void *daemon_batch(void *arg)
{
	duel *x = arg;
	uint32_t gen = 1u << 20, idx[2] = { x->idx2, x->idx };
	uint8_t keep[2];

	while (!__atomic_load_n(&x->stop, __ATOMIC_RELAXED)) {
		uint32_t kept = kvs_fast_hold_batch(x->f, x->arena_id, idx, 2, keep);

		if (!keep[1]) {
			__atomic_store_n(&x->freed, x->rec.gen, __ATOMIC_SEQ_CST);
			x->rec.gen = ++gen;
		}
		if (!keep[0]) {
			x->rec2.gen = ++gen;
			kvs_fast_publish(x->f, x->arena_id, x->idx2, &x->rec2);
		}
		if (!keep[1])
			kvs_fast_publish(x->f, x->arena_id, x->idx, &x->rec);
		x->cycles++;
		if (kept)
			x->held++;
		while (kept > 0 && !__atomic_load_n(&x->stop, __ATOMIC_RELAXED))
			kept -= kvs_fast_unhold(x->f);
	}
	return NULL;
}

/* What client/fast.c does for a one-block chain. */
static void *client_side(void *arg)
{
	duel *x = arg;
	uint32_t mask = x->v.hdr->entries - 1;
	uint32_t home = kvs_fast_home(x->ns, x->h.lo, x->h.hi, mask);

	__atomic_store_n(&x->ph->used, 1u, __ATOMIC_RELAXED);
	while (!__atomic_load_n(&x->stop, __ATOMIC_RELAXED)) {
		const kvs_fast_entry *e = NULL;
		uint64_t s1 = 0, off = 0;
		uint32_t gen = 0;

		for (uint32_t k = 0; k < KVS_FAST_MAX_PROBE && !e; k++) {
			const kvs_fast_entry *p = &x->v.e[(home + k) & mask];
			uint64_t s2;
			uint8_t st;
			uint64_t lo, hi;

			s1 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);
			st = __atomic_load_n(&p->state, __ATOMIC_RELAXED);
			lo = __atomic_load_n(&p->lo, __ATOMIC_RELAXED);
			hi = __atomic_load_n(&p->hi, __ATOMIC_RELAXED);
			off = __atomic_load_n(&p->offset, __ATOMIC_RELAXED);
			gen = __atomic_load_n(&p->gen, __ATOMIC_RELAXED);
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			s2 = __atomic_load_n(&p->seq, __ATOMIC_RELAXED);
			if ((s1 & 1) || s1 != s2 || st != KVS_FAST_READY)
				break;
			if (lo == x->h.lo && hi == x->h.hi)
				e = p;
		}
		if (!e)
			continue;
		/* Widen the window between the copy and the pin now and then,
		 * so that evictions land inside it. */
		for (volatile uint32_t k = 0, n = (uint32_t)(x->validated % 7) * 40;
		     k < n; k++)
			;
		__atomic_store_n(&x->pins[0], kvs_fast_pin_key(off, gen),
				 __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(&e->seq, __ATOMIC_RELAXED) != s1) {
			__atomic_store_n(&x->pins[0], 0, __ATOMIC_RELAXED);
			x->busy++;
			continue;
		}
		x->validated++;
		/* Use the block: the daemon must not let this generation go. */
		for (int k = 0; k < 64; k++)
			if (__atomic_load_n(&x->freed, __ATOMIC_SEQ_CST) == gen)
				x->violations++;
		__atomic_store_n(&x->pins[0], 0, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void test_contention(int batch)
{
	kvs_cache_config cfg = { .host_bytes = 4u << 20, .page_bytes = 64u << 10,
				 .policy = "leaf-lru", .max_leases = 64 };
	kvs_fast_client *fc = NULL;
	kvs_fast_grant g;
	kvs_cache *c = NULL;
	kvs_owner *o;
	kvs_block b;
	uint64_t lease;
	duel x = { 0 };
	pthread_t td, tc;
	struct timespec t = { 1, 500000000 }; /* 1.5 s */

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK(kvs_fast_create(c, &stats, 1024, 64, 1, &x.f) == 0);
	kvs_cache_set_fast(c, &kvs_fast_hooks, x.f);
	o = attach(c, &x.ns);
	CHECK(kvs_fast_attach(x.f, o, &fc, &g) == 0);
	x.v = map_index(&g);
	x.ph = mmap(NULL, g.pins_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		    g.pins_fd, 0);
	CHECK(x.ph != MAP_FAILED);
	close(g.pins_fd);
	x.pins = (uint64_t *)((uint8_t *)x.ph + KVS_FAST_PINS_OFF);
	x.arena_id = g.arena_id;
	x.h = (kvs_hash){ 0xfeedu, 0xbeefu };
	if (batch) {
		/* Committed first: at home, the client's block right after. */
		kvs_hash other = same_home(x.ns, x.h);

		CHECK_EQ(kvs_cache_reserve(c, o, &other, 1, &lease, &b), 1);
		CHECK_EQ(kvs_cache_commit(c, o, lease), 1);
		x.idx2 = kvs_cache_find(c, x.ns, other);
		x.rec2 = *kvs_cache_rec_at(c, x.idx2);
	}
	CHECK_EQ(kvs_cache_reserve(c, o, &x.h, 1, &lease, &b), 1);
	CHECK_EQ(kvs_cache_commit(c, o, lease), 1);
	x.idx = kvs_cache_find(c, x.ns, x.h);
	x.rec = *kvs_cache_rec_at(c, x.idx);
	if (batch)
		CHECK_EQ(probe(&x.v, x.ns, x.h),
			 (kvs_fast_home(x.ns, x.h.lo, x.h.hi, 1023) + 1) & 1023);

	pthread_create(&td, NULL, batch ? daemon_batch : daemon_side, &x);
	pthread_create(&tc, NULL, client_side, &x);
	nanosleep(&t, NULL);
	__atomic_store_n(&x.stop, 1, __ATOMIC_RELAXED);
	pthread_join(tc, NULL);
	pthread_join(td, NULL);
	printf("test_fastidx: contention%s: %llu pins validated, %llu re-checks "
	       "failed, %llu evict+publish cycles, %llu holds, %llu violations\n",
	       batch ? " (batches of two)" : "", (unsigned long long)x.validated, (unsigned long long)x.busy,
	       (unsigned long long)x.cycles, (unsigned long long)x.held,
	       (unsigned long long)x.violations);
	CHECK_EQ(x.violations, 0);
	CHECK(x.validated > 0);
	CHECK(x.cycles > 0);
	kvs_fast_unhold(x.f);
	kvs_fast_detach(x.f, fc);
	munmap(x.ph, g.pins_bytes);
	munmap((void *)x.v.hdr, x.v.bytes);
	kvs_cache_owner_free(c, o);
	kvs_cache_destroy(c);
	kvs_fast_destroy(x.f);
}

int main(void)
{
	unsigned seed = (unsigned)kvs_test_seed("test_fastidx");

	kvs_log_set_level(KVS_LOG_WARN);
	test_mechanics(seed);
	test_pins();
	test_contention(0);
	test_contention(1);
	return check_summary("test_fastidx");
}
