/*
 * test_fastidx - the fast path's index and pin areas (service/fastidx.c)
 * over a real cache, read the way a client reads them (client/kvs_fast.h):
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
 *    about a hundred).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cache_key.h"
#include "kvs_cache.h"
#include "kvs_cache_admin.h"
#include "kvs_check.h"
#include "kvs_fast.h"
#include "kvs_fastidx.h"
#include "fastidx_int.h" /* fast_dom_get, fast_delete_at: a step test */
#include "kvs_log.h"

static kvs_counters stats;

typedef struct view {
	const kvs_fast_hdr *hdr;
	const kvs_fast_entry *e;
	size_t bytes;
} view;

static kvs_layout layout(void)
{
	return (kvs_layout){ .model = "fastidx", .layers = 1, .kv_heads = 1,
			     .head_dim = 4096 / 64, .block_tokens = 16,
			     .tp_size = 1, .dtype = KVS_DTYPE_FP16 };
}

static kvs_owner *attach(kvs_cache *c, uint32_t *ns)
{
	kvs_layout l = layout();
	kvs_ns_desc d = { .model = l.model, .adapter = "", .layers = l.layers,
			  .kv_heads = l.kv_heads, .head_dim = l.head_dim,
			  .block_tokens = l.block_tokens, .tp_size = l.tp_size,
			  .dtype = l.dtype };
	kvs_owner *o = kvs_cache_owner_new(c);
	uint64_t bb;

	CHECK(kvs_cache_attach(c, o, &d, 0, ns, &bb) == 0);
	return o;
}

static view map_index(const kvs_fast_grant *g)
{
	view v = { 0 };
	void *p = mmap(NULL, g->index_bytes, PROT_READ, MAP_SHARED,
		       g->index_fd, 0);

	CHECK(p != MAP_FAILED);
	/* Sealed: nobody but the daemon may map it writable. */
	CHECK(mmap(NULL, g->index_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		   g->index_fd, 0) == MAP_FAILED);
	CHECK(ftruncate(g->index_fd, 0) < 0);
	v.hdr = p;
	v.e = (const kvs_fast_entry *)((const uint8_t *)p + KVS_FAST_HDR_SIZE);
	v.bytes = g->index_bytes;
	return v;
}

/* A client's probe (no concurrency here): the entry of (ns, h) or -1. */
static int64_t probe(const view *v, uint32_t ns, kvs_hash h)
{
	uint32_t mask = v->hdr->entries - 1, home = kvs_fast_home(ns, h.lo, h.hi, mask);

	for (uint32_t k = 0; k < v->hdr->max_probe; k++) {
		const kvs_fast_entry *e = &v->e[(home + k) & mask];

		CHECK(!(e->seq & 1));
		if (e->state == KVS_FAST_EMPTY)
			return -1;
		if (e->ns == ns && e->lo == h.lo && e->hi == h.hi)
			return (home + k) & mask;
	}
	return -1;
}

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
		uint64_t before = (uint64_t)stats.fast_unpublished;

		hs[i] = (kvs_hash){ ((uint64_t)rand() << 32) ^ (uint64_t)rand(),
				    ((uint64_t)rand() << 32) ^ (uint64_t)rand() };
		recs[i] = (kvs_rec){ .hash = cache_ns_key(ns, hs[i]),
				     .offset = (uint64_t)i * 4096, .gen = 1000u + i,
				     .ns = ns, .tier = KVS_TIER_HOST,
				     .state = KVS_REC_READY };
		kvs_fast_publish(f, g.arena_id, (uint32_t)i, &recs[i]);
		in[i] = (uint64_t)stats.fast_unpublished == before;
		published += in[i];
		order[i] = i;
	}
	printf("test_fastidx: %u of %d published into 1024 entries\n",
	       published, NREC);
	CHECK_EQ(ready(&v), published);
	CHECK_EQ(published + stats.fast_unpublished, NREC);
	CHECK(stats.fast_unpublished > 0);
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
	uint8_t wire[8 + 4 * 16];
	uint64_t lease;
	uint32_t ns = 0, idx[4];
	kvs_fast_pins_hdr *ph;
	uint64_t *pins;
	view v;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK(kvs_fast_create(c, &stats, 1024, 64, 1, &f) == 0);
	kvs_cache_set_fast(c, f);
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

	for (int i = 0; i < 4; i++)
		h[i] = (kvs_hash){ 0x1111u * (i + 1), 0x2222u * (i + 1) };
	CHECK(kvs_wire_hashes_encode(h, 4, 0, wire, sizeof(wire)) > 0);
	CHECK_EQ(kvs_cache_reserve(c, o, wire + 8, 4, &lease, b), 4);
	CHECK_EQ(ready(&v), 0); /* written, not committed: not visible */
	CHECK_EQ(kvs_cache_commit(c, o, lease), 4);
	CHECK_EQ(ready(&v), 4);
	for (int i = 0; i < 4; i++) {
		int64_t at = probe(&v, ns, h[i]);

		idx[i] = kvs_cache_find(c, ns, h[i]);
		CHECK(at >= 0);
		if (at >= 0) {
			CHECK_EQ(v.e[at].offset, b[i].offset);
			CHECK_EQ(v.e[at].gen, b[i].gen);
		}
	}
	/* The leaf pinned, as a client pins it: an operator evict keeps it. */
	pins[0] = kvs_fast_pin_key(b[3].offset, b[3].gen);
	ph->used = 1;
	CHECK_EQ(kvs_cache_free_rec(c, idx[3], KVS_EVENT_FLUSHED), 0);
	kvs_fast_stats_fill(f);
	CHECK_EQ(stats.fast_held, 1);
	CHECK_EQ(stats.fast_evict_skipped, 1);
	CHECK(probe(&v, ns, h[3]) >= 0);
	/* Held: not evictable, so not even asked again. */
	CHECK_EQ(kvs_cache_free_rec(c, idx[3], KVS_EVENT_FLUSHED), 0);
	CHECK_EQ(stats.fast_evict_skipped, 1);
	CHECK_EQ(kvs_fast_unhold(f), 0); /* still pinned */
	/* A bogus `used` past the area is clamped, and junk pins match
	 * nothing: the block stays only for its real pin. */
	ph->used = 0xffffffffu;
	pins[1] = 0x123456789abcdefull;
	CHECK_EQ(kvs_fast_unhold(f), 0);
	pins[0] = 0; /* the release: a store */
	CHECK_EQ(kvs_fast_unhold(f), 1);
	CHECK_EQ(kvs_cache_free_rec(c, idx[3], KVS_EVENT_FLUSHED), 1);
	CHECK(probe(&v, ns, h[3]) < 0);
	CHECK_EQ(ready(&v), 3);
	kvs_fast_stats_fill(f);
	CHECK_EQ(stats.fast_held, 0);
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
	uint8_t wire[8 + 16];
	uint64_t lease;

	memset(&stats, 0, sizeof(stats));
	memset(x, 0, sizeof(*x));
	CHECK(kvs_cache_create(&cfg, &stats, &x->c) == 0);
	CHECK(kvs_fast_create(x->c, &stats, 1024, 64, 1, &x->f) == 0);
	kvs_cache_set_fast(x->c, x->f);
	x->o = attach(x->c, &x->ns);
	CHECK(kvs_fast_attach(x->f, x->o, &x->fc, &x->g) == 0);
	x->ph = mmap(NULL, x->g.pins_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		     x->g.pins_fd, 0);
	CHECK(x->ph != MAP_FAILED);
	close(x->g.pins_fd);
	x->pins = (uint64_t *)((uint8_t *)x->ph + KVS_FAST_PINS_OFF);
	CHECK(kvs_wire_hashes_encode(&h, 1, 0, wire, sizeof(wire)) > 0);
	CHECK_EQ(kvs_cache_reserve(x->c, x->o, wire + 8, 1, &lease, &x->b), 1);
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
	CHECK_EQ(kvs_cache_free_rec(x.c, x.idx, KVS_EVENT_FLUSHED), 0);
	kvs_fast_stats_fill(x.f);
	CHECK_EQ(stats.fast_held, 1);
	CHECK_EQ(stats.fast_clients, 0);
	CHECK_EQ(stats.fast_revoked, 1);
	/* After it, forgotten: the hold goes, the block may go. */
	CHECK(reap_all(x.f, &ms));
	CHECK_EQ(stats.fast_held, 0);
	CHECK_EQ(kvs_cache_free_rec(x.c, x.idx, KVS_EVENT_FLUSHED), 1);
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
	CHECK_EQ(stats.fast_held, 0);
	one_close(&x, 0);
}

/* A client's counters are its own words: shown as fast.* (client-reported),
 * capped per client, never moved back, never added to blocks.lookup_*; the
 * leases and pins it says it holds count at most its area's cap. */
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
	CHECK_EQ(stats.blocks_lookup_miss, 0);
	CHECK_EQ(stats.leases_active, x.g.pin_cap);
	CHECK_EQ(stats.leases_pinned_blocks, x.g.pin_cap);
	CHECK_EQ(stats.fast_hit_blocks, (int64_t)KVS_FAST_CLIENT_MAX);
	CHECK_EQ(stats.fast_lookups, (int64_t)KVS_FAST_CLIENT_MAX);
	CHECK_EQ(stats.fast_pins_live, x.g.pin_cap);
	/* Back to small: the counter does not go back. */
	x.ph->counters[KVS_FAST_CTR_hit_blocks] = 5;
	kvs_fast_stats_fill(x.f);
	CHECK_EQ(stats.fast_hit_blocks, (int64_t)KVS_FAST_CLIENT_MAX);
	CHECK_EQ(stats.blocks_lookup_hit, 0);
	/* Closed: what it reported stays counted, no more. */
	kvs_fast_detach(x.f, x.fc);
	x.ph->counters[KVS_FAST_CTR_lookups] = 1;
	kvs_fast_stats_fill(x.f);
	CHECK_EQ(stats.fast_lookups, (int64_t)KVS_FAST_CLIENT_MAX);
	one_close(&x, 1);
}

/* What a client believes of a grant (kvs_fast.h), forged every way. */
static void test_grant_checks(void)
{
	uint64_t ib = KVS_FAST_HDR_SIZE + 1024ull * KVS_FAST_ENTRY_SIZE;
	uint64_t pb = KVS_FAST_PINS_OFF + 64ull * 8;
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

static kvs_hash same_home(uint32_t ns, kvs_hash h);

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

static uint64_t work(void)
{
	return (uint64_t)stats.fast_pin_reads + (uint64_t)stats.fast_pin_probes;
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
		if (stats.fast_revoked == 0)
			return 1;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	return 0;
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
	kvs_cache_config cfg = { .host_bytes = (uint64_t)N * 4096,
				 .page_bytes = 64u << 10, .policy = "lru",
				 .max_leases = 64 };
	kvs_cache *c = NULL;
	kvs_fast *f = NULL;
	kvs_owner *w;
	area *a = calloc((size_t)K, sizeof(*a));
	uint64_t *keys = calloc(N, sizeof(uint64_t));
	uint64_t w0, w_reserve, w_detach, P = (uint64_t)K * KVS_FAST_MAX_PINS;
	uint8_t wire[8 + 16];
	uint64_t lease;
	uint32_t ns, filled = 0;
	kvs_block b;
	struct timespec t0;
	double t_reserve, t_detach = 0;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK(kvs_fast_create(c, &stats, 2 * N, KVS_FAST_MAX_PINS, 1, &f) == 0);
	kvs_cache_set_fast(c, f);
	w = attach(c, &ns);
	for (int k = 0; k < K; k++)
		area_open(c, f, &a[k]);
	for (uint32_t i = 0; i < N; i++) {
		kvs_hash h = { 0x5151u + i, 0x7373u * (i + 1) };

		CHECK(kvs_wire_hashes_encode(&h, 1, 0, wire, sizeof(wire)) > 0);
		if (kvs_cache_reserve(c, w, wire + 8, 1, &lease, &b) != 1 ||
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

	w0 = work();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	{
		kvs_hash h = { 0xabcdu, 0xef01u };

		CHECK(kvs_wire_hashes_encode(&h, 1, 0, wire, sizeof(wire)) > 0);
		CHECK_EQ(kvs_cache_reserve(c, w, wire + 8, 1, &lease, &b), 1);
	}
	t_reserve = ms_since(&t0);
	w_reserve = work() - w0;
	CHECK_EQ(stats.blocks_evicted, 1);
	CHECK_EQ(stats.fast_held, 0); /* a gauge: filled by stats_fill */
	kvs_fast_stats_fill(f);
	CHECK_EQ(stats.fast_held, filled - 1);
	CHECK(w_reserve <= 4 * (P + N) * (uint64_t)(lg(N) + 2));

	/* The pinning connection closes: after its grace, one snapshot of
	 * the other areas answers for all N - 1 holds. */
	w0 = work();
	kvs_fast_detach(f, a[0].fc);
	CHECK(reap_all(f, &t_detach));
	w_detach = work() - w0;
	CHECK_EQ(stats.fast_held, 0);
	CHECK(w_detach <= 4 * (P + N));
	printf("test_fastidx: %d full pin areas (%llu pins), %u blocks held: "
	       "reserve read+probed %llu (bound %llu), disconnect %llu (bound %llu)\n",
	       K, (unsigned long long)P, filled - 1, (unsigned long long)w_reserve,
	       (unsigned long long)(4 * (P + N) * (uint64_t)(lg(N) + 2)),
	       (unsigned long long)w_detach, (unsigned long long)(4 * (P + N)));
	if (bench)
		printf("test_fastidx: bench: reserve %.2f ms, disconnect (the "
		       "tick that lets go, after the grace) %.2f ms\n",
		       t_reserve, t_detach);
	CHECK_EQ(kvs_cache_check(c), 0);
	for (int k = 1; k < K; k++)
		kvs_fast_detach(f, a[k].fc);
	for (int k = 0; k < K; k++)
		area_close(c, &a[k]);
	kvs_cache_owner_free(c, w);
	kvs_cache_destroy(c);
	kvs_fast_destroy(f);
	free(keys);
	free(a);
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
	kvs_cache_config cfg = { .host_bytes = (uint64_t)N * 4096,
				 .page_bytes = 64u << 10, .policy = "lru",
				 .max_leases = 64 };
	kvs_cache *c = NULL;
	kvs_fast *f = NULL;
	kvs_owner *w;
	area *a = calloc((size_t)K, sizeof(*a));
	uint64_t w0, spent, P = (uint64_t)K * KVS_FAST_MAX_PINS, bound;
	uint8_t wire[8 + 16];
	uint64_t lease;
	uint32_t ns;
	kvs_block b;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK(kvs_fast_create(c, &stats, 2 * N, KVS_FAST_MAX_PINS, 1, &f) == 0);
	kvs_cache_set_fast(c, f);
	w = attach(c, &ns);
	for (int k = 0; k < K; k++) {
		area_open(c, f, &a[k]);
		for (uint32_t p = 0; p < KVS_FAST_MAX_PINS; p++)
			a[k].pins[p] = (uint64_t)(k + 1) << 48 | (uint64_t)p << 8 | 1;
		a[k].ph->used = KVS_FAST_MAX_PINS;
	}
	w0 = work();
	for (uint32_t i = 0; i < N + M; i++) {
		kvs_hash h = { 0x9191u + i, 0x3737u * (i + 1) };

		CHECK(kvs_wire_hashes_encode(&h, 1, 0, wire, sizeof(wire)) > 0);
		if (kvs_cache_reserve(c, w, wire + 8, 1, &lease, &b) != 1)
			break;
		CHECK_EQ(kvs_cache_commit(c, w, lease), 1);
	}
	spent = work() - w0;
	bound = 4 * (2 * P + (uint64_t)M * KVS_FAST_PINS_PER_VICTIM);
	printf("test_fastidx: %d areas of junk pins, %u reserves past a full "
	       "tier: %lld evicted, %lld looks, read+probed %llu (bound %llu, "
	       "one look per eviction: about %llu)\n", K, M,
	       (long long)stats.blocks_evicted, (long long)stats.fast_snapshots,
	       (unsigned long long)spent, (unsigned long long)bound,
	       (unsigned long long)((uint64_t)stats.blocks_evicted * 2 * P));
	CHECK(stats.blocks_evicted >= M);
	CHECK(stats.blocks_evicted <= M + KVS_FAST_BATCH);
	CHECK(spent <= bound);
	CHECK_EQ(kvs_cache_check(c), 0);
	for (int k = 0; k < K; k++) {
		kvs_fast_detach(f, a[k].fc);
		area_close(c, &a[k]);
	}
	kvs_cache_owner_free(c, w);
	kvs_cache_destroy(c);
	kvs_fast_destroy(f);
	free(a);
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
	kvs_cache_set_fast(c, f);
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

/* A hash of namespace @ns with the same home as @h in 1024 entries. */
static kvs_hash same_home(uint32_t ns, kvs_hash h)
{
	uint32_t home = kvs_fast_home(ns, h.lo, h.hi, 1023);

	for (uint64_t i = 1;; i++) {
		kvs_hash o = { h.lo + i * 0x10001u, h.hi };

		if (kvs_fast_home(ns, o.lo, o.hi, 1023) == home)
			return o;
	}
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
	uint8_t wire[8 + 16];
	uint64_t lease;
	duel x = { 0 };
	pthread_t td, tc;
	struct timespec t = { 1, 500000000 }; /* 1.5 s */

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK(kvs_fast_create(c, &stats, 1024, 64, 1, &x.f) == 0);
	kvs_cache_set_fast(c, x.f);
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

		CHECK(kvs_wire_hashes_encode(&other, 1, 0, wire, sizeof(wire)) > 0);
		CHECK_EQ(kvs_cache_reserve(c, o, wire + 8, 1, &lease, &b), 1);
		CHECK_EQ(kvs_cache_commit(c, o, lease), 1);
		x.idx2 = kvs_cache_find(c, x.ns, other);
		x.rec2 = *kvs_cache_rec_at(c, x.idx2);
	}
	CHECK(kvs_wire_hashes_encode(&x.h, 1, 0, wire, sizeof(wire)) > 0);
	CHECK_EQ(kvs_cache_reserve(c, o, wire + 8, 1, &lease, &b), 1);
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

int main(int argc, char **argv)
{
	unsigned seed;

	kvs_log_set_level(KVS_LOG_WARN);
	/* --bench K N: the wall time of the pin-scan test, nothing else. */
	if (argc == 4 && strcmp(argv[1], "--bench") == 0) {
		test_scan_cost(atoi(argv[2]), (uint32_t)atoi(argv[3]), 1);
		return check_summary("test_fastidx");
	}
	seed = (unsigned)kvs_test_seed("test_fastidx");
	test_mechanics(seed);
	test_pins();
	test_revoke();
	test_key0();
	test_counters();
	test_grant_checks();
	test_batch_shift();
	test_scan_cost(4, 2048, 0);
	test_reserve_amortized(4, 2048, 512);
	test_replay_budget();
	test_contention(0);
	test_contention(1);
	return check_summary("test_fastidx");
}
