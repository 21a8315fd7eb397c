/*
 * test_slab_mixed.c - the slot allocator (storage/host/slab.c) with several
 * classes at once: churn and fill across four block sizes, then a random
 * run against a model of every live slot (no two overlap, frees of junk
 * refused, the stats exact). Seeded: KVS_TEST_SEED=<n> replays a run (the
 * seed is printed). Exit: 0 pass, 1 fail.
 */
#include <errno.h>

#include "slab_test.h"

#define MIX_CLASSES 4

static const uint64_t mix_sizes[MIX_CLASSES] = {
	40 * KiB, 200 * KiB + 4 * KiB, 1 * MiB + 12 * KiB, 2 * MiB,
};

struct live {
	uint64_t off;
	uint32_t cls;
};

struct mix {
	kvs_slab *s;
	uint32_t cid[MIX_CLASSES];
	struct live *live;
	size_t nlive, maxlive;
	struct cellmap m;
	int bad;
};

static void mix_drop(struct mix *x, size_t j)
{
	struct live *l = &x->live[j];

	x->bad |= kvs_slab_free(x->s, l->off) != 0;
	cells_clear(&x->m, l->off, mix_sizes[l->cls]);
	*l = x->live[--x->nlive];
}

static int mix_alloc(struct mix *x, uint32_t c)
{
	uint64_t off;
	int err;

	err = kvs_slab_alloc(x->s, x->cid[c], &off);
	if (err)
		return err;
	if (x->nlive == x->maxlive ||
	    cells_mark(&x->m, off, mix_sizes[c], (uint32_t)x->nlive + 1)) {
		x->bad = 1;
		return -EIO;
	}
	x->live[x->nlive].off = off;
	x->live[x->nlive++].cls = c;
	return 0;
}

/* Six rounds of churn near full, each favouring other sizes: an alloc that
 * finds no room evicts up to 64 random blocks. */
static void mix_churn(struct mix *x)
{
	uint64_t starved = 0, ops = 0, i, w[MIX_CLASSES], wsum, r;
	kvs_slab_stats st;
	int round, err, tries;
	uint32_t c;

	for (round = 0; round < 6; round++) {
		/* each round favours other sizes, so the page mix shifts */
		for (wsum = 0, c = 0; c < MIX_CLASSES; c++)
			wsum += w[c] = 1 + rnd_below(8);
		for (i = 0; i < 40000 && !x->bad; i++, ops++) {
			if (x->nlive && rnd_below(100) < 40) {
				mix_drop(x, rnd_below(x->nlive));
				continue;
			}
			r = rnd_below(wsum);
			for (c = 0; r >= w[c]; c++)
				r -= w[c];
			tries = 0;
			while ((err = mix_alloc(x, c)) == -ENOSPC && x->nlive &&
			       tries++ < 64)
				mix_drop(x, rnd_below(x->nlive));
			starved += err != 0;
		}
		kvs_slab_stats_get(x->s, &st);
		printf("  round %d: %zu live, %.2f%% of arena in blocks, "
		       "%" PRIu64 " pages free\n", round, x->nlive,
		       100.0 * st.slot_bytes_used / st.arena_bytes,
		       st.pages_free);
		/* a random cut, so the fill starts from a holey arena */
		for (i = rnd_below(x->nlive / 2 + 1); i > 0; i--)
			mix_drop(x, rnd_below(x->nlive));
	}
	CHECK(!x->bad, "churn: no overlap, no failed free");
	printf("  churn: %" PRIu64 " of %" PRIu64 " allocs found no room after"
	       " 64 evictions\n", starved, ops);
	CHECK(starved * 100 < ops, "churn: %" PRIu64 " of %" PRIu64
	      " allocs starved", starved, ops);
}

/* Fill: a random class each time until all of them are out of room; then
 * how much of the arena holds blocks. */
static void mix_fill(struct mix *x)
{
	kvs_slab_stats st;
	uint32_t c, done;
	double pct;

	for (done = 0; done != (1u << MIX_CLASSES) - 1 && !x->bad;) {
		c = (uint32_t)rnd_below(MIX_CLASSES);
		if (!(done & (1u << c)) && mix_alloc(x, c) == -ENOSPC)
			done |= 1u << c;
	}
	CHECK(!x->bad, "fill: no overlap, ends in -ENOSPC");
	kvs_slab_stats_get(x->s, &st);
	CHECK(stats_consistent(&st), "stats consistent");
	CHECK(st.slots_used == x->nlive, "slots_used %" PRIu64 " vs %zu",
	      st.slots_used, x->nlive);
	pct = 100.0 * st.slot_bytes_used / st.arena_bytes;
	printf("  full: %.2f%% of arena in blocks (%.2f%% of slab bytes), "
	       "%" PRIu64 " pages free, %u slabs\n", pct,
	       100.0 * st.slot_bytes_used / st.slab_bytes, st.pages_free,
	       st.slabs);
	for (c = 0; c < MIX_CLASSES; c++)
		printf("    %8" PRIu64 " B: %u slabs\n", mix_sizes[c],
		       kvs_slab_class_slabs(x->s, x->cid[c]));
	CHECK(st.slot_bytes_used * 100 >= st.arena_bytes * 95,
	      "utilization %.2f%% < 95%%", pct);
}

static void test_mixed(void)
{
	const uint64_t arena = 256 * MiB;
	struct mix x = { .maxlive = arena / mix_sizes[0] + 1 };
	kvs_slab_stats st;
	uint32_t c;

	printf("mixed: 256 MiB arena, 64 KiB pages, "
	       "blocks 40K 204K 1036K 2M\n");
	x.live = malloc(x.maxlive * sizeof(*x.live));
	if (!x.live || cells_init(&x.m, arena)) {
		CHECK(0, "out of memory");
		free(x.live);
		return;
	}
	CHECK(kvs_slab_create(arena, 65536, &x.s) == 0, "create");
	for (c = 0; c < MIX_CLASSES; c++)
		CHECK(kvs_slab_class(x.s, mix_sizes[c], &x.cid[c]) == 0,
		      "class");

	mix_churn(&x);
	mix_fill(&x);

	/* and everything goes back */
	while (x.nlive)
		mix_drop(&x, x.nlive - 1);
	kvs_slab_stats_get(x.s, &st);
	CHECK(!x.bad && st.pages_free == st.pages_total && st.slabs == 0,
	      "empty again");
	kvs_slab_destroy(x.s);
	free(x.m.cell);
	free(x.live);
}

/*
 * test_model's allocator and its model: the live slots, and for each 64-byte
 * cell 1 + the index in live[] of the slot starting there (start_of).
 */
struct slab_model {
	kvs_slab *s;
	const uint64_t *sizes;
	const uint32_t *cid;
	int nsizes;
	uint64_t arena, *start_of, bytes_used;
	struct live *live;
	size_t nlive, maxlive;
	struct cellmap m;
	int bad;
};

/* What one random op tells the loop: go on, skip the stats check, stop. */
enum { MODEL_NEXT = 0, MODEL_SKIP = 1, MODEL_STOP = -1 };

/* The model forgets live slot j, which started at off. */
static void model_forget(struct slab_model *md, size_t j, uint64_t off)
{
	struct live *live = md->live;

	cells_clear(&md->m, off, md->sizes[live[j].cls]);
	md->bytes_used -= md->sizes[live[j].cls];
	md->start_of[off / 64] = 0;
	live[j] = live[--md->nlive];
	if (j < md->nlive)
		md->start_of[live[j].off / 64] = j + 1;
}

/* Op i: an alloc of a random class; -ENOSPC is no error. */
static int model_alloc(struct slab_model *md, uint64_t i)
{
	int c = (int)rnd_below((uint64_t)md->nsizes), err;
	uint64_t off = 0; /* kvs_slab_alloc sets it only on success */

	err = kvs_slab_alloc(md->s, md->cid[c], &off);
	if (err == -ENOSPC)
		return MODEL_SKIP;
	if (err || md->nlive == md->maxlive ||
	    cells_mark(&md->m, off, md->sizes[c], 1)) {
		fprintf(stderr, "op %" PRIu64 ": alloc %d off %"
			PRIu64 " bad\n", i, err, off);
		md->bad = 1;
		return MODEL_STOP;
	}
	md->live[md->nlive].off = off;
	md->live[md->nlive].cls = (uint32_t)c;
	md->start_of[off / 64] = ++md->nlive;
	md->bytes_used += md->sizes[c];
	return MODEL_NEXT;
}

/* A free of a random live slot. */
static int model_free_live(struct slab_model *md)
{
	size_t j = rnd_below(md->nlive);
	uint64_t off = md->live[j].off;

	if (kvs_slab_free(md->s, off)) {
		md->bad = 1;
		return MODEL_STOP;
	}
	model_forget(md, j, off);
	return MODEL_NEXT;
}

/* Op i: a free of any offset, often one near a live slot: what the model
 * expects, and a refused free changes no stats. */
static int model_free_any(struct slab_model *md, uint64_t i, unsigned op)
{
	kvs_slab_stats st, st2;
	uint64_t off;
	int err, expect;

	off = rnd_below(md->arena + 4096);
	if (md->nlive && (op & 1))
		off = md->live[rnd_below(md->nlive)].off +
		      (rnd_below(4) ? 0 : rnd_below(3) * 64);
	expect = off < md->arena && off % 64 == 0 &&
		 md->start_of[off / 64];
	kvs_slab_stats_get(md->s, &st);
	err = kvs_slab_free(md->s, off);
	if (expect ? err != 0 : err != -EINVAL) {
		fprintf(stderr, "op %" PRIu64 ": free %" PRIu64
			" -> %d, model says %s\n", i, off, err,
			expect ? "live" : "not a live slot");
		md->bad = 1;
		return MODEL_STOP;
	}
	if (!expect) {
		kvs_slab_stats_get(md->s, &st2);
		md->bad |= !!memcmp(&st, &st2, sizeof(st));
		return MODEL_SKIP;
	}
	model_forget(md, md->start_of[off / 64] - 1, off);
	return MODEL_NEXT;
}

/*
 * The allocator against a reference: the set of live offsets (a cell map
 * says which slot starts where). Random allocs, frees of live slots, frees
 * of random offsets: the allocator must agree with the model on every one.
 */
static void test_model(void)
{
	static const uint64_t sizes[] = { 64, 100, 4096, 5000, 12288, 70000,
					  200000 };
	const int nsizes = sizeof(sizes) / sizeof(sizes[0]);
	const uint64_t arena = 8 * MiB;
	uint32_t cid[sizeof(sizes) / sizeof(sizes[0])];
	struct slab_model md = { .sizes = sizes, .cid = cid, .nsizes = nsizes,
				 .arena = arena, .maxlive = arena / 64 };
	kvs_slab_stats st;
	uint64_t i;
	int c;

	printf("model: %d classes on 8 MiB, 4 KiB pages, 300000 random ops\n",
	       nsizes);
	md.live = malloc(md.maxlive * sizeof(*md.live));
	/* start_of[cell] = 1 + index in live[] of the slot starting there */
	md.start_of = calloc(arena / 64, sizeof(*md.start_of));
	if (!md.live || !md.start_of || cells_init(&md.m, arena)) {
		CHECK(0, "out of memory");
		goto out;
	}
	CHECK(kvs_slab_create(arena, 4096, &md.s) == 0, "create");
	for (c = 0; c < nsizes; c++)
		CHECK(kvs_slab_class(md.s, sizes[c], &cid[c]) == 0, "class");

	for (i = 0; i < 300000 && !md.bad; i++) {
		unsigned op = (unsigned)rnd_below(100);
		int next;

		if (op < 50)
			next = model_alloc(&md, i);
		else if (op < 90 && md.nlive)
			next = model_free_live(&md);
		else
			next = model_free_any(&md, i, op);
		if (next == MODEL_STOP)
			break;
		if (next == MODEL_SKIP)
			continue;
		if (i % 1000 == 0) {
			kvs_slab_stats_get(md.s, &st);
			md.bad |= st.slots_used != md.nlive ||
				  st.slot_bytes_used != md.bytes_used ||
				  !stats_consistent(&st);
		}
	}
	CHECK(!md.bad, "allocator agrees with the model (op %" PRIu64 ")", i);
	while (md.nlive && !md.bad)
		md.bad |= kvs_slab_free(md.s, md.live[--md.nlive].off);
	kvs_slab_stats_get(md.s, &st);
	CHECK(!md.bad && st.pages_free == st.pages_total && st.slots_used == 0,
	      "model: empty again");
	kvs_slab_destroy(md.s);
out:
	free(md.m.cell);
	free(md.start_of);
	free(md.live);
}

int main(void)
{
	uint64_t seed = slab_test_seed("test_slab_mixed");

	test_mixed();
	test_model();
	return slab_test_end("test_slab_mixed", seed);
}
