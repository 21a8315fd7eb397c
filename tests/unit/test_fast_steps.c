/*
 * test_fast_steps - the fast path's eviction decided step by step, over a
 * real cache (service/fast/fastpins.c):
 *
 *  - a pin that appears between a batch's snapshot and its decision (a
 *    client that probed before the victims were marked going, and stored
 *    its pin after the daemon read the pins): the client's re-check after
 *    its fence sees the mark and drops the pin, the victim goes, and a
 *    victim of the same batch pinned before the snapshot stays, its entry's
 *    seq back to what its client validated (test_late_pin); a client that
 *    keeps such a pin anyway holds nothing;
 *  - a worker's pin area with a slab budget: the pins within it keep their
 *    blocks, those past it, or naming a wrong slab word or one of 0 pages,
 *    protect nothing, and a block one of them names is still kept by
 *    another area that counts its pin (test_budget);
 *  - a release and a lookup that land while the daemon reads the area: a
 *    client that spends the released slab's pages at once makes a pin
 *    further along, validated long before, fall past the budget and lose
 *    its block; one that follows the index's `snaps` keeps them spent
 *    until the snapshot is over, and the block stays (test_release_race).
 */
#include "fast_test.h"

#include <stdio.h>

typedef struct area {
	kvs_fast_client *fc;
	kvs_fast_grant g;
	kvs_owner *o;
	kvs_fast_pins_hdr *ph;
	uint64_t *pins, *words;
} area;

static void area_open(kvs_cache *c, kvs_fast *f, area *a, uint32_t uid,
		      int op)
{
	uint32_t ns;

	memset(a, 0, sizeof(*a));
	a->o = kvs_cache_owner_new(c);
	kvs_cache_owner_set_uid(a->o, uid);
	kvs_cache_owner_set_operator(a->o, op);
	{
		kvs_layout l = layout();
		kvs_ns_desc d = { .model = l.model, .adapter = "",
				  .layers = l.layers, .kv_heads = l.kv_heads,
				  .head_dim = l.head_dim,
				  .block_tokens = l.block_tokens,
				  .tp_size = l.tp_size, .dtype = l.dtype };
		uint64_t bb;

		CHECK(kvs_cache_attach(c, a->o, &d, 0, &ns, &bb) == 0);
	}
	CHECK(kvs_fast_attach(f, a->o, &a->fc, &a->g) == 0);
	a->ph = mmap(NULL, a->g.pins_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		     a->g.pins_fd, 0);
	CHECK(a->ph != MAP_FAILED);
	close(a->g.pins_fd);
	a->pins = (uint64_t *)((uint8_t *)a->ph + KVS_FAST_PINS_OFF);
	a->words = a->pins + a->ph->cap;
}

static void area_close(kvs_cache *c, kvs_fast *f, area *a)
{
	kvs_fast_detach(f, a->fc);
	munmap(a->ph, a->g.pins_bytes);
	kvs_cache_owner_free(c, a->o);
}

/* @n committed one-block chains by @o: their records in @idx. */
static void commit_n(kvs_cache *c, kvs_owner *o, uint32_t ns, uint32_t n,
		     uint32_t *idx)
{
	for (uint32_t i = 0; i < n; i++) {
		kvs_hash h = { 0x5150u + i, 0x9a9au };
		uint64_t lease;
		kvs_block b;

		CHECK_EQ(kvs_cache_reserve(c, o, &h, 1, &lease, &b), 1);
		CHECK_EQ(kvs_cache_commit(c, o, lease), 1);
		idx[i] = kvs_cache_find(c, ns, h);
	}
}

static uint64_t key_of(kvs_cache *c, uint32_t idx)
{
	const kvs_rec *r = kvs_cache_rec_at(c, idx);

	return kvs_fast_pin_key(r->offset, r->gen);
}

static uint64_t word_of(kvs_cache *c, uint32_t idx)
{
	uint32_t pages, slab = kvs_cache_rec_slab(c, kvs_cache_rec_at(c, idx),
						  &pages);

	return kvs_fast_slab_word(slab, pages);
}

/* ---- a pin that lands after the snapshot ---------------------------------- */

typedef struct late {
	area *a;
	const kvs_fast_entry *e; /* the late client's entry */
	uint64_t seq;            /* as it copied it, before the marks */
	uint64_t key, word;
	int ran, saw_mark, keep;
} late;

/* The late client, between the snapshot and the decision: store the pin
 * (at 1: pin 0 is the early client's), fence, re-check the entry's seq as
 * client/fast.c does; changed, drop the pin (unless it keeps it anyway). */
static void late_client(void *arg)
{
	late *l = arg;

	l->ran++;
	__atomic_store_n(&l->a->words[1], l->word, __ATOMIC_RELAXED);
	__atomic_store_n(&l->a->pins[1], l->key, __ATOMIC_RELAXED);
	__atomic_store_n(&l->a->ph->used, 2u, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	l->saw_mark = __atomic_load_n(&l->e->seq, __ATOMIC_RELAXED) != l->seq;
	if (l->saw_mark && !l->keep)
		__atomic_store_n(&l->a->pins[1], 0, __ATOMIC_RELAXED);
}

static void test_late_pin(int keep)
{
	kvs_cache_config cfg = { .host_bytes = 4u << 20, .page_bytes = 64u << 10,
				 .policy = "leaf-lru", .max_leases = 64 };
	uint32_t idx[2], ns;
	uint8_t freed[2];
	kvs_cache *c = NULL;
	kvs_fast *f = NULL;
	const kvs_fast_entry *ea, *eb;
	uint64_t seq_a;
	view v;
	area a;
	late l;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK(kvs_fast_create(c, &stats, 1024, 64, 1, &f) == 0);
	kvs_cache_set_fast(c, &kvs_fast_hooks, f);
	area_open(c, f, &a, 0, 0);
	ns = kvs_cache_owner_ns(a.o);
	commit_n(c, a.o, ns, 2, idx);
	v = map_index(&a.g);
	ea = &v.e[probe(&v, ns, kvs_cache_rec_hash(kvs_cache_rec_at(c, idx[0])))];
	eb = &v.e[probe(&v, ns, kvs_cache_rec_hash(kvs_cache_rec_at(c, idx[1])))];
	/* The early client: validated its pin on block 0 before any mark. */
	seq_a = ea->seq;
	a.pins[0] = key_of(c, idx[0]);
	a.ph->used = 1;
	/* The late one probed block 1 before the marks, pins after the look. */
	l = (late){ .a = &a, .e = eb, .seq = eb->seq, .key = key_of(c, idx[1]),
		    .word = 0, .keep = keep };
	f->after_snapshot = late_client;
	f->after_snapshot_arg = &l;
	CHECK_EQ(kvs_cache_free_recs(c, idx, 2, KVS_CACHE_EVENT_FLUSHED, freed), 1);
	f->after_snapshot = NULL;
	CHECK_EQ(l.ran, 1);
	CHECK_EQ(l.saw_mark, 1); /* so it never used the block */
	CHECK_EQ(freed[0], 0);   /* pinned before the snapshot: kept */
	CHECK_EQ(freed[1], 1);   /* pinned after it: gone */
	/* The early client's entry unchanged: its validation stands. */
	CHECK_EQ(ea->seq, seq_a);
	CHECK_EQ(a.pins[1], keep ? l.key : 0);
	kvs_fast_stats_fill(f);
	CHECK_EQ(kvs_fast_counters(f)->held, 1);
	/* A pin kept past its re-check names a freed slot: nothing held by it
	 * (the early pin goes too, and the block with it). */
	a.pins[0] = 0;
	kvs_fast_unhold(f);
	kvs_fast_stats_fill(f);
	CHECK_EQ(kvs_fast_counters(f)->held, 0);
	CHECK_EQ(kvs_cache_free_rec(c, idx[0], KVS_CACHE_EVENT_FLUSHED), 1);
	CHECK_EQ(kvs_cache_check(c), 0);
	munmap((void *)v.hdr, v.bytes);
	area_close(c, f, &a);
	kvs_cache_destroy(c);
	kvs_fast_destroy(f);
}

/* ---- a pin area's slab budget ------------------------------------------- */

#define SLABS 6
#define PER_SLAB 16 /* 4 KiB blocks in a 64 KiB slab of one page */

/* One block of each of SLABS slabs of @idx, in the order of the slabs met. */
static void pick_slabs(kvs_cache *c, const uint32_t *idx, uint32_t *pick)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < SLABS * PER_SLAB && n < SLABS; i++) {
		uint32_t k;

		for (k = 0; k < n && word_of(c, pick[k]) != word_of(c, idx[i]); k++)
			;
		if (k == n)
			pick[n++] = idx[i];
	}
	CHECK_EQ(n, SLABS);
	CHECK_EQ((uint32_t)word_of(c, pick[0]), 1); /* one page each */
}

static void test_budget(void)
{
	kvs_cache_config cfg = { .host_bytes = 4u << 20, .page_bytes = 64u << 10,
				 .policy = "leaf-lru", .max_leases = 64,
				 .max_pinned_share_per_uid = 50 };
	uint32_t idx[SLABS * PER_SLAB], pick[SLABS + 2], ns, n = 0, kept = 0;
	uint8_t freed[SLABS + 2];
	kvs_cache *c = NULL;
	kvs_fast *f = NULL;
	area w, op;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK(kvs_fast_create(c, &stats, 1024, 64, 1, &f) == 0);
	kvs_cache_set_fast(c, &kvs_fast_hooks, f);
	area_open(c, f, &w, 1000, 0);   /* a worker */
	area_open(c, f, &op, 0, 1);     /* an operator: no budget */
	CHECK_EQ(op.ph->slab_pages, KVS_FAST_NO_BUDGET);
	/* 64 pages, a share of 32, an area's eighth: 4 pages. */
	CHECK_EQ(w.ph->slab_pages, 4);
	ns = kvs_cache_owner_ns(w.o);
	commit_n(c, op.o, ns, SLABS * PER_SLAB, idx);
	pick_slabs(c, idx, pick);
	n = SLABS;
	for (uint32_t k = 0; k < n; k++) {
		w.words[k] = word_of(c, pick[k]);
		w.pins[k] = key_of(c, pick[k]);
	}
	/* Two more of slab 5's blocks, named with a false word (slab 0's,
	 * counted already) and with 0 pages. */
	for (uint32_t i = 0, m = n; i < SLABS * PER_SLAB && m < n + 2; i++)
		if (idx[i] != pick[5] && word_of(c, idx[i]) == word_of(c, pick[5]))
			pick[m++] = idx[i];
	w.words[n] = word_of(c, pick[0]);
	w.pins[n] = key_of(c, pick[n]);
	w.words[n + 1] = word_of(c, pick[n + 1]) & ~0xffffffffull;
	w.pins[n + 1] = key_of(c, pick[n + 1]);
	w.ph->used = n + 2;
	/* The operator's area pins slab 4's block too. */
	op.pins[0] = key_of(c, pick[4]);
	op.ph->used = 1;
	kvs_cache_free_recs(c, pick, n + 2, KVS_CACHE_EVENT_FLUSHED, freed);
	for (uint32_t k = 0; k < n + 2; k++)
		kept += !freed[k];
	printf("test_fast_steps: %u pins in %u one-page slabs, a budget of 4 "
	       "pages: %u blocks kept, %llu pins past it\n", n + 2, n, kept,
	       (unsigned long long)kvs_fast_counters(f)->pins_unbudgeted);
	CHECK(!freed[0] && !freed[1] && !freed[2] && !freed[3]); /* within */
	CHECK_EQ(freed[4], 0);     /* past it, but the operator's pin counts */
	CHECK_EQ(freed[5], 1);     /* past it */
	CHECK_EQ(freed[n], 1);     /* a false word */
	CHECK_EQ(freed[n + 1], 1); /* 0 pages */
	CHECK_EQ(kvs_fast_counters(f)->pins_unbudgeted, 3);
	CHECK_EQ(kvs_cache_check(c), 0);
	area_close(c, f, &w);
	area_close(c, f, &op);
	kvs_cache_destroy(c);
	kvs_fast_destroy(f);
}

/* ---- a release while the daemon reads the area --------------------------- */

typedef struct racer {
	area *a;
	const kvs_fast_hdr *hdr;
	uint64_t key4, word4; /* the lookup's pins: a fifth slab's block */
	int honest;           /* follows `snaps` (client/fast.c) */
	int ran, odd;
	uint32_t tag;
} racer;

/* The client, when the daemon is about to read pin 2: it releases lease R
 * (pin 1), then looks up two blocks of slab 4 into pins 1..2 (first fit).
 * Its budget (4 pages) holds slabs 0..3; R's page is free again only if
 * no snapshot may have read R: an honest client sees `snaps` odd, keeps
 * the page spent and takes the socket; one that ignores it pins slab 4. */
static void racer_step(void *arg, uint32_t k)
{
	racer *r = arg;

	if (k != 2 || r->ran++)
		return;
	__atomic_store_n(&r->a->pins[1], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&r->a->words[1], 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	r->tag = __atomic_load_n(&r->hdr->snaps, __ATOMIC_RELAXED);
	r->odd = r->tag & 1u;
	if (r->honest && r->odd)
		return; /* 4 pages spent: the lookup goes to the socket */
	for (uint32_t i = 1; i <= 2; i++) {
		__atomic_store_n(&r->a->words[i], r->word4, __ATOMIC_RELAXED);
		__atomic_store_n(&r->a->pins[i], r->key4, __ATOMIC_RELEASE);
	}
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static void test_release_race(int honest)
{
	kvs_cache_config cfg = { .host_bytes = 4u << 20, .page_bytes = 64u << 10,
				 .policy = "leaf-lru", .max_leases = 64,
				 .max_pinned_share_per_uid = 50 };
	uint32_t idx[SLABS * PER_SLAB], pick[SLABS], ns;
	static const uint32_t at[4] = { 0, 1, 3, 4 }; /* s0, R, A, A' */
	uint8_t freed = 0;
	kvs_cache *c = NULL;
	kvs_fast *f = NULL;
	area w, op;
	racer r;
	view v;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK(kvs_fast_create(c, &stats, 1024, 64, 1, &f) == 0);
	kvs_cache_set_fast(c, &kvs_fast_hooks, f);
	area_open(c, f, &w, 1000, 0);
	area_open(c, f, &op, 0, 1);
	CHECK_EQ(w.ph->slab_pages, 4);
	ns = kvs_cache_owner_ns(w.o);
	commit_n(c, op.o, ns, SLABS * PER_SLAB, idx);
	pick_slabs(c, idx, pick);
	for (uint32_t k = 0; k < 4; k++) {
		w.words[at[k]] = word_of(c, pick[k]);
		w.pins[at[k]] = key_of(c, pick[k]);
	}
	w.ph->used = 5;
	v = map_index(&w.g);
	r = (racer){ .a = &w, .hdr = v.hdr, .key4 = key_of(c, pick[4]),
		     .word4 = word_of(c, pick[4]), .honest = honest };
	f->at_pin = racer_step;
	f->at_pin_arg = &r;
	/* A' (slab 3, pin 4), validated long before: its block must stay. */
	kvs_cache_free_recs(c, &pick[3], 1, KVS_CACHE_EVENT_FLUSHED, &freed);
	f->at_pin = NULL;
	CHECK_EQ(r.ran, 1);
	CHECK_EQ(r.odd, 1); /* the daemon was reading */
	/* Over now: the retired page may be spent again. */
	CHECK((v.hdr->snaps & 1u) == 0 && v.hdr->snaps != r.tag);
	printf("test_fast_steps: a release during the snapshot, the client %s "
	       "`snaps`: A' %s, %llu pins past the budget\n",
	       honest ? "following" : "ignoring", freed ? "freed" : "kept",
	       (unsigned long long)kvs_fast_counters(f)->pins_unbudgeted);
	CHECK_EQ(freed, honest ? 0 : 1);
	CHECK_EQ(kvs_fast_counters(f)->pins_unbudgeted, honest ? 0 : 1);
	CHECK_EQ(kvs_cache_check(c), 0);
	munmap((void *)v.hdr, v.bytes);
	area_close(c, f, &w);
	area_close(c, f, &op);
	kvs_cache_destroy(c);
	kvs_fast_destroy(f);
}

int main(void)
{
	kvs_log_set_level(KVS_LOG_WARN);
	test_late_pin(0);
	test_late_pin(1);
	test_budget();
	test_release_race(0);
	test_release_race(1);
	return check_summary("test_fast_steps");
}
