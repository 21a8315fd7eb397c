/*
 * test_slab.c - the slot allocator (storage/host/slab.c) alone.
 *
 * Random parts are seeded from the clock; the seed is printed, and
 * KVS_TEST_SEED=<n> replays a run. Exit: 0 pass, 1 fail.
 */
#include "kvs_slab.h"
#include "kvs_types.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KiB (1024ULL)
#define MiB (1024ULL * 1024)

static unsigned checks, failures;

#define CHECK(cond, ...)						\
	do {								\
		checks++;						\
		if (!(cond)) {						\
			failures++;					\
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__,	\
				__LINE__, #cond);			\
			fprintf(stderr, __VA_ARGS__);			\
			fputc('\n', stderr);				\
		}							\
	} while (0)

/* splitmix64: the same sequence on every libc, so a seed replays anywhere. */
static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t rnd_below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

/*
 * The arena in 64-byte cells, each naming the slot that covers it (0 =
 * none). Offsets are 64-aligned and strides are blocks rounded to 64, so no
 * two live slots may share even a cell: stricter than a byte map, and 64x
 * smaller.
 */
struct cellmap {
	uint32_t *cell;
	uint64_t ncells;
};

static int cells_init(struct cellmap *m, uint64_t arena)
{
	m->ncells = arena / 64;
	m->cell = calloc(m->ncells, sizeof(*m->cell));
	return m->cell ? 0 : -1;
}

/* Mark [off, off+bytes) as @tag; 0 when it was all free and in range. */
static int cells_mark(struct cellmap *m, uint64_t off, uint64_t bytes,
		      uint32_t tag)
{
	uint64_t i, first = off / 64, end = (off + bytes + 63) / 64;

	if (off % 64 || end > m->ncells)
		return -1;
	for (i = first; i < end; i++)
		if (m->cell[i])
			return -1;
	for (i = first; i < end; i++)
		m->cell[i] = tag;
	return 0;
}

static void cells_clear(struct cellmap *m, uint64_t off, uint64_t bytes)
{
	memset(&m->cell[off / 64], 0, (bytes + 63) / 64 * sizeof(*m->cell));
}

/* Fields that depend only on the layout and what is allocated. */
static int stats_consistent(const kvs_slab_stats *st)
{
	uint64_t used_pages = st->pages_total - st->pages_free;

	return st->arena_bytes == st->pages_total * st->page_bytes &&
	       st->slab_bytes == used_pages * st->page_bytes &&
	       st->slot_bytes_used <= st->slab_bytes &&
	       (st->slabs == 0) == (st->slab_bytes == 0);
}

static void test_create(void)
{
	kvs_slab *s = NULL;
	kvs_slab_stats st;

	printf("create: bad page sizes and arenas are refused\n");
	CHECK(kvs_slab_create(1 * MiB, 0, &s) == -EINVAL, "page 0");
	CHECK(kvs_slab_create(1 * MiB, 2048, &s) == -EINVAL, "page 2048");
	CHECK(kvs_slab_create(1 * MiB, 6144, &s) == -EINVAL, "page 6144");
	CHECK(kvs_slab_create(1 * MiB, 4097, &s) == -EINVAL, "page 4097");
	CHECK(kvs_slab_create(4095, 4096, &s) == -EINVAL, "arena < page");
	CHECK(kvs_slab_create(0, 4096, &s) == -EINVAL, "arena 0");
	CHECK(kvs_slab_create(4096ULL << 31, 4096, &s) == -EINVAL,
	      "2^31 pages");

	printf("create: arena rounded down to whole pages\n");
	CHECK(kvs_slab_create(10 * 4096 + 100, 4096, &s) == 0, "create");
	kvs_slab_stats_get(s, &st);
	CHECK(st.arena_bytes == 10 * 4096 && st.pages_total == 10 &&
	      st.pages_free == 10 && st.page_bytes == 4096 &&
	      st.slots_used == 0 && st.slot_bytes_used == 0 &&
	      st.slab_bytes == 0 && st.classes == 0 && st.slabs == 0,
	      "fresh stats");
	kvs_slab_destroy(s);
	kvs_slab_destroy(NULL);
}

static void test_classes(void)
{
	uint32_t a, b, c, id, i;
	uint64_t off;
	kvs_slab *s;
	int err = 0;

	printf("class: ids from 0, reused for the same size, errors\n");
	CHECK(kvs_slab_create(64 * MiB, 65536, &s) == 0, "create");
	CHECK(kvs_slab_class(s, 40 * KiB, &a) == 0 && a == 0, "first id 0");
	CHECK(kvs_slab_class(s, 2 * MiB, &b) == 0 && b == 1, "second id 1");
	CHECK(kvs_slab_class(s, 40 * KiB, &c) == 0 && c == a, "reuse");
	CHECK(kvs_slab_class_bytes(s, a) == 40 * KiB, "class bytes");
	CHECK(kvs_slab_class_bytes(s, b) == 2 * MiB, "class bytes");
	CHECK(kvs_slab_class_bytes(s, 99) == 0, "unknown class bytes");
	CHECK(kvs_slab_class_slabs(s, 99) == 0, "unknown class slabs");
	CHECK(kvs_slab_class(s, 0, &id) == KVS_E_LAYOUT, "block 0");
	CHECK(kvs_slab_class(s, 64 * MiB + 1, &id) == KVS_E_LAYOUT,
	      "block > arena");
	CHECK(kvs_slab_class(s, UINT64_MAX, &id) == KVS_E_LAYOUT, "huge block");
	CHECK(kvs_slab_class(s, 64 * MiB, &id) == 0, "block == arena");
	CHECK(kvs_slab_alloc(s, 3, &off) == -EINVAL, "alloc unknown class");
	CHECK(kvs_slab_alloc(s, UINT32_MAX, &off) == -EINVAL, "alloc class -1");
	for (i = 3; i < 256 && !err; i++)
		err = kvs_slab_class(s, 100 + i, &id);
	CHECK(err == 0 && id == 255, "256 classes (err %d)", err);
	CHECK(kvs_slab_class(s, 99999, &id) == -ENOSPC, "257th class");
	CHECK(kvs_slab_class(s, 40 * KiB, &id) == 0 && id == a,
	      "lookup with a full table");
	kvs_slab_destroy(s);
}

/* A class nobody holds and with no slab is freed; its id serves the next
 * new size. One with a slab in use stays until that slab is empty. */
static void test_class_put(void)
{
	uint32_t a, b, id, i;
	uint64_t off;
	kvs_slab_stats st;
	kvs_slab *s;
	int err = 0;

	printf("class: freed when nobody holds it and it has no slab\n");
	CHECK(kvs_slab_create(64 * MiB, 65536, &s) == 0, "create");
	CHECK(kvs_slab_class(s, 40 * KiB, &a) == 0, "class a");
	CHECK(kvs_slab_class(s, 40 * KiB, &id) == 0 && id == a, "a again");
	CHECK(kvs_slab_class(s, 8 * KiB, &b) == 0 && b != a, "class b");
	kvs_slab_class_put(s, a);
	CHECK(kvs_slab_class_bytes(s, a) == 40 * KiB, "a held once more");
	CHECK(kvs_slab_alloc(s, a, &off) == 0, "a slot of a");
	kvs_slab_class_put(s, a);
	CHECK(kvs_slab_class_bytes(s, a) == 40 * KiB, "a has a slab");
	CHECK(kvs_slab_free(s, off) == 0, "free it");
	CHECK(kvs_slab_class_bytes(s, a) == 0, "a is gone");
	CHECK(kvs_slab_alloc(s, a, &off) == -EINVAL, "alloc of a gone class");
	kvs_slab_class_put(s, a); /* no-op */
	kvs_slab_stats_get(s, &st);
	CHECK(st.classes == 1, "1 class left (%u)", st.classes);
	CHECK(kvs_slab_class(s, 12 * KiB, &id) == 0 && id == a, "a's id reused");
	/* The table full, a size freed makes room for another. */
	for (i = 0; i < 254 && !err; i++)
		err = kvs_slab_class(s, 100 + i, &id);
	CHECK(err == 0, "256 classes (err %d)", err);
	CHECK(kvs_slab_class(s, 99999, &id) == -ENOSPC, "257th class");
	kvs_slab_class_put(s, b);
	CHECK(kvs_slab_class(s, 99999, &id) == 0 && id == b, "b's id reused");
	kvs_slab_destroy(s);
}

/* kvs_slab_of: a slot's slab, the same for every slot of it, gone once
 * the slab's last slot is freed. 62 KiB on 64 KiB pages: 31 pages, 32
 * slots, no tail. */
static void test_slab_of(void)
{
	uint64_t off[33];
	uint32_t a, id0, id, np = 0;
	kvs_slab *s;

	printf("slab_of: the slab of a slot and its length\n");
	CHECK(kvs_slab_create(64 * MiB, 65536, &s) == 0, "create");
	CHECK(kvs_slab_pages(s) == 1024, "1024 pages");
	CHECK(kvs_slab_class(s, 62 * KiB, &a) == 0, "class");
	for (int i = 0; i < 33; i++)
		CHECK(kvs_slab_alloc(s, a, &off[i]) == 0, "alloc %d", i);
	id0 = kvs_slab_of(s, off[0], &np);
	CHECK(id0 != UINT32_MAX && np == 31, "slab of slot 0 (%u pages)", np);
	for (int i = 1; i < 32; i++)
		CHECK(kvs_slab_of(s, off[i], NULL) == id0, "slot %d in slab 0", i);
	id = kvs_slab_of(s, off[32], &np);
	CHECK(id != id0 && id != UINT32_MAX && np == 31, "slot 32: a second slab");
	CHECK(kvs_slab_of(s, 64 * MiB, NULL) == UINT32_MAX, "past the arena");
	CHECK(kvs_slab_of(s, off[32] + 31 * 65536, NULL) == UINT32_MAX,
	      "a free page");
	CHECK(kvs_slab_free(s, off[32]) == 0, "free the second's slot");
	CHECK(kvs_slab_of(s, off[32], NULL) == UINT32_MAX, "its slab is gone");
	kvs_slab_destroy(s);
}

/*
 * One class on a small arena: fill to -ENOSPC with a real byte map, then
 * errors on free leave everything as it was, then the pages come back.
 */
static void test_fill_one(uint64_t arena, uint32_t page, uint64_t block)
{
	uint64_t *offs, n = 0, i, off, max = arena / 64 + 1, stride, b2;
	uint64_t slab1 = 0, per_slab = 0;
	kvs_slab_stats st, st2;
	unsigned char *bytes;
	uint32_t cid, cid2;
	int err, bad = 0;
	kvs_slab *s;

	printf("fill: arena %" PRIu64 " page %u block %" PRIu64 "\n",
	       arena, page, block);
	offs = malloc(max * sizeof(*offs));
	bytes = calloc(1, arena);
	if (!offs || !bytes) {
		CHECK(0, "out of memory");
		goto out_mem;
	}
	CHECK(kvs_slab_create(arena, page, &s) == 0, "create");
	CHECK(kvs_slab_class(s, block, &cid) == 0, "class");
	while ((err = kvs_slab_alloc(s, cid, &off)) == 0 && n < max) {
		if (off % 64 || off + block > arena) {
			bad = 1;
			break;
		}
		for (i = off; i < off + block; i++)
			bad |= bytes[i]++;
		offs[n++] = off;
		if (n == 1) {
			kvs_slab_stats_get(s, &st);
			slab1 = st.slab_bytes;
		}
		if (!per_slab && kvs_slab_class_slabs(s, cid) > 1)
			per_slab = n - 1;
	}
	CHECK(err == -ENOSPC, "fill ends in -ENOSPC (got %d)", err);
	CHECK(!bad, "offsets aligned, in range, not overlapping");
	CHECK(kvs_slab_alloc(s, cid, &off) == -ENOSPC, "still -ENOSPC");
	kvs_slab_stats_get(s, &st);
	CHECK(st.slots_used == n && st.slot_bytes_used == n * block,
	      "slots_used %" PRIu64 " == %" PRIu64, st.slots_used, n);
	CHECK(st.slabs == kvs_slab_class_slabs(s, cid), "slab counts");
	CHECK(stats_consistent(&st), "stats consistent");
	/*
	 * The first slab's length is chosen for <= 2% tail, beyond what the
	 * rounding of each slot to 64 bytes costs. (Later ones may be short
	 * slabs in the leftover pages.)
	 */
	stride = (block + 63) / 64 * 64;
	CHECK(!per_slab || (slab1 - per_slab * block) * 100 <=
	      slab1 * 2 + per_slab * (stride - block) * 100,
	      "tail: %" PRIu64 " slots of %" PRIu64 " in %" PRIu64, per_slab,
	      block, slab1);
	printf("  %" PRIu64 " slots, %u slabs, %.2f%% of slab bytes used, "
	       "first slab %" PRIu64 " pages, %" PRIu64 " slots\n", n,
	       st.slabs, 100.0 * st.slot_bytes_used / st.slab_bytes,
	       slab1 / page, per_slab ? per_slab : n);

	/* free, then alloc takes the hole back */
	off = offs[n / 2];
	CHECK(kvs_slab_free(s, off) == 0, "free");
	CHECK(kvs_slab_alloc(s, cid, &offs[n / 2]) == 0 && offs[n / 2] == off,
	      "realloc takes the only free slot");

	/* errors leave the allocator as it was */
	CHECK(kvs_slab_free(s, off) == 0, "free");
	kvs_slab_stats_get(s, &st);
	CHECK(kvs_slab_free(s, off) == -EINVAL, "double free");
	CHECK(kvs_slab_free(s, off + 64) == -EINVAL, "inside a slot");
	CHECK(kvs_slab_free(s, off + 1) == -EINVAL, "unaligned");
	CHECK(kvs_slab_free(s, offs[0] + block / 2) == -EINVAL, "mid slot");
	CHECK(kvs_slab_free(s, arena) == -EINVAL, "past the arena");
	CHECK(kvs_slab_free(s, UINT64_MAX) == -EINVAL, "UINT64_MAX");
	kvs_slab_stats_get(s, &st2);
	CHECK(!memcmp(&st, &st2, sizeof(st)), "stats unchanged by bad frees");
	CHECK(kvs_slab_alloc(s, cid, &offs[n / 2]) == 0 && offs[n / 2] == off,
	      "allocator intact after bad frees");

	/* empty every slab: all pages come back, another class takes them */
	err = 0;
	for (i = 0; i < n; i++)
		err |= kvs_slab_free(s, offs[i]);
	CHECK(err == 0, "free all");
	kvs_slab_stats_get(s, &st);
	CHECK(st.pages_free == st.pages_total && st.slabs == 0 &&
	      st.slots_used == 0 && st.slot_bytes_used == 0 &&
	      st.slab_bytes == 0 && kvs_slab_class_slabs(s, cid) == 0,
	      "every page back (free %" PRIu64 " of %" PRIu64 ")",
	      st.pages_free, st.pages_total);
	CHECK(kvs_slab_free(s, offs[0]) == -EINVAL, "free into a freed slab");
	b2 = block * 8 < arena ? block * 3 + 64 : block / 2 + 64;
	CHECK(kvs_slab_class(s, b2, &cid2) == 0, "second class");
	n = 0;
	while (kvs_slab_alloc(s, cid2, &off) == 0)
		n++;
	CHECK(n * b2 * 2 >= arena,
	      "the other class takes the pages (%" PRIu64 " slots)", n);
	kvs_slab_destroy(s);
out_mem:
	free(bytes);
	free(offs);
}

/* A slab emptied by one class is taken by another of a different size. */
static void test_pages_return(void)
{
	uint64_t off[16], o;
	kvs_slab_stats st;
	uint32_t a, b;
	kvs_slab *s;
	int i, n = 0;

	printf("pages: an emptied slab goes back at once to any class\n");
	CHECK(kvs_slab_create(4 * MiB, 65536, &s) == 0, "create");
	CHECK(kvs_slab_class(s, 2 * MiB, &a) == 0, "class a");
	CHECK(kvs_slab_class(s, 200 * KiB + 4 * KiB, &b) == 0, "class b");
	CHECK(kvs_slab_alloc(s, a, &off[0]) == 0, "a 1");
	CHECK(kvs_slab_alloc(s, a, &off[1]) == 0, "a 2");
	CHECK(kvs_slab_alloc(s, b, &o) == -ENOSPC, "b finds no pages");
	CHECK(kvs_slab_free(s, off[0]) == 0, "free a 1");
	kvs_slab_stats_get(s, &st);
	CHECK(st.pages_free == 32 && kvs_slab_class_slabs(s, a) == 1,
	      "pages back (%" PRIu64 ")", st.pages_free);
	for (i = 0; i < 16 && kvs_slab_alloc(s, b, &off[i]) == 0; i++)
		n++;
	CHECK(n == 8, "b fits two 13-page slabs of 4 in 32 pages (%d)", n);
	kvs_slab_destroy(s);

	/*
	 * 1036 KiB blocks take 33-page slabs of 2 (1.9% tail); 17 pages left
	 * over still hold one in a short slab (4.8% tail) rather than -ENOSPC.
	 */
	printf("pages: a run too short for a slab takes a short slab\n");
	CHECK(kvs_slab_create(50 * 65536, 65536, &s) == 0, "create");
	CHECK(kvs_slab_class(s, 1 * MiB + 12 * KiB, &b) == 0, "class");
	for (n = 0; n < 16 && kvs_slab_alloc(s, b, &off[n]) == 0; n++)
		;
	kvs_slab_stats_get(s, &st);
	CHECK(n == 3 && st.slabs == 2 && st.pages_free == 0,
	      "%d slots in %u slabs, %" PRIu64 " pages free", n, st.slabs,
	      st.pages_free);
	for (i = 0; i < n; i++)
		CHECK(kvs_slab_free(s, off[i]) == 0, "free");
	kvs_slab_stats_get(s, &st);
	CHECK(st.pages_free == 50 && st.slabs == 0, "all back");
	kvs_slab_destroy(s);
}

/*
 * Mixed sizes on a 256 MiB arena: churn near full (an alloc that finds no
 * room evicts random blocks of any class, as the daemon would), then fill
 * every class to -ENOSPC and measure how much of the arena holds blocks.
 */
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

static void test_mixed(void)
{
	const uint64_t arena = 256 * MiB;
	uint64_t starved = 0, ops = 0, i, w[MIX_CLASSES], wsum, r;
	struct mix x = { .maxlive = arena / mix_sizes[0] + 1 };
	uint32_t c, done;
	kvs_slab_stats st;
	int round, err, tries;
	double pct;

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

	for (round = 0; round < 6; round++) {
		/* each round favours other sizes, so the page mix shifts */
		for (wsum = 0, c = 0; c < MIX_CLASSES; c++)
			wsum += w[c] = 1 + rnd_below(8);
		for (i = 0; i < 40000 && !x.bad; i++, ops++) {
			if (x.nlive && rnd_below(100) < 40) {
				mix_drop(&x, rnd_below(x.nlive));
				continue;
			}
			r = rnd_below(wsum);
			for (c = 0; r >= w[c]; c++)
				r -= w[c];
			tries = 0;
			while ((err = mix_alloc(&x, c)) == -ENOSPC && x.nlive &&
			       tries++ < 64)
				mix_drop(&x, rnd_below(x.nlive));
			starved += err != 0;
		}
		kvs_slab_stats_get(x.s, &st);
		printf("  round %d: %zu live, %.2f%% of arena in blocks, "
		       "%" PRIu64 " pages free\n", round, x.nlive,
		       100.0 * st.slot_bytes_used / st.arena_bytes,
		       st.pages_free);
		/* a random cut, so the fill starts from a holey arena */
		for (i = rnd_below(x.nlive / 2 + 1); i > 0; i--)
			mix_drop(&x, rnd_below(x.nlive));
	}
	CHECK(!x.bad, "churn: no overlap, no failed free");
	printf("  churn: %" PRIu64 " of %" PRIu64 " allocs found no room after"
	       " 64 evictions\n", starved, ops);
	CHECK(starved * 100 < ops, "churn: %" PRIu64 " of %" PRIu64
	      " allocs starved", starved, ops);

	/* fill: random class each time until all of them are out of room */
	for (done = 0; done != (1u << MIX_CLASSES) - 1 && !x.bad;) {
		c = (uint32_t)rnd_below(MIX_CLASSES);
		if (!(done & (1u << c)) && mix_alloc(&x, c) == -ENOSPC)
			done |= 1u << c;
	}
	CHECK(!x.bad, "fill: no overlap, ends in -ENOSPC");
	kvs_slab_stats_get(x.s, &st);
	CHECK(stats_consistent(&st), "stats consistent");
	CHECK(st.slots_used == x.nlive, "slots_used %" PRIu64 " vs %zu",
	      st.slots_used, x.nlive);
	pct = 100.0 * st.slot_bytes_used / st.arena_bytes;
	printf("  full: %.2f%% of arena in blocks (%.2f%% of slab bytes), "
	       "%" PRIu64 " pages free, %u slabs\n", pct,
	       100.0 * st.slot_bytes_used / st.slab_bytes, st.pages_free,
	       st.slabs);
	for (c = 0; c < MIX_CLASSES; c++)
		printf("    %8" PRIu64 " B: %u slabs\n", mix_sizes[c],
		       kvs_slab_class_slabs(x.s, x.cid[c]));
	CHECK(st.slot_bytes_used * 100 >= st.arena_bytes * 95,
	      "utilization %.2f%% < 95%%", pct);

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
	uint64_t off, *start_of, bytes_used = 0, i;
	size_t nlive = 0, maxlive = arena / 64, j;
	uint32_t cid[sizeof(sizes) / sizeof(sizes[0])];
	kvs_slab_stats st, st2;
	struct cellmap m;
	struct live *live;
	int bad = 0, err, c, expect;
	kvs_slab *s;

	printf("model: %d classes on 8 MiB, 4 KiB pages, 300000 random ops\n",
	       nsizes);
	live = malloc(maxlive * sizeof(*live));
	/* start_of[cell] = 1 + index in live[] of the slot starting there */
	start_of = calloc(arena / 64, sizeof(*start_of));
	if (!live || !start_of || cells_init(&m, arena)) {
		CHECK(0, "out of memory");
		goto out;
	}
	CHECK(kvs_slab_create(arena, 4096, &s) == 0, "create");
	for (c = 0; c < nsizes; c++)
		CHECK(kvs_slab_class(s, sizes[c], &cid[c]) == 0, "class");

	for (i = 0; i < 300000 && !bad; i++) {
		unsigned op = (unsigned)rnd_below(100);

		if (op < 50) {
			c = (int)rnd_below((uint64_t)nsizes);
			err = kvs_slab_alloc(s, cid[c], &off);
			if (err == -ENOSPC)
				continue;
			if (err || nlive == maxlive ||
			    cells_mark(&m, off, sizes[c], 1)) {
				fprintf(stderr, "op %" PRIu64 ": alloc %d off %"
					PRIu64 " bad\n", i, err, off);
				bad = 1;
				break;
			}
			live[nlive].off = off;
			live[nlive].cls = (uint32_t)c;
			start_of[off / 64] = ++nlive;
			bytes_used += sizes[c];
		} else if (op < 90 && nlive) {
			j = rnd_below(nlive);
			off = live[j].off;
			if (kvs_slab_free(s, off)) {
				bad = 1;
				break;
			}
			cells_clear(&m, off, sizes[live[j].cls]);
			bytes_used -= sizes[live[j].cls];
			start_of[off / 64] = 0;
			live[j] = live[--nlive];
			if (j < nlive)
				start_of[live[j].off / 64] = j + 1;
		} else {
			/* any offset, often one near a live slot */
			off = rnd_below(arena + 4096);
			if (nlive && (op & 1))
				off = live[rnd_below(nlive)].off +
				      (rnd_below(4) ? 0 : rnd_below(3) * 64);
			expect = off < arena && off % 64 == 0 &&
				 start_of[off / 64];
			kvs_slab_stats_get(s, &st);
			err = kvs_slab_free(s, off);
			if (expect ? err != 0 : err != -EINVAL) {
				fprintf(stderr, "op %" PRIu64 ": free %" PRIu64
					" -> %d, model says %s\n", i, off, err,
					expect ? "live" : "not a live slot");
				bad = 1;
				break;
			}
			if (!expect) {
				kvs_slab_stats_get(s, &st2);
				bad |= !!memcmp(&st, &st2, sizeof(st));
				continue;
			}
			j = start_of[off / 64] - 1;
			cells_clear(&m, off, sizes[live[j].cls]);
			bytes_used -= sizes[live[j].cls];
			start_of[off / 64] = 0;
			live[j] = live[--nlive];
			if (j < nlive)
				start_of[live[j].off / 64] = j + 1;
		}
		if (i % 1000 == 0) {
			kvs_slab_stats_get(s, &st);
			bad |= st.slots_used != nlive ||
			       st.slot_bytes_used != bytes_used ||
			       !stats_consistent(&st);
		}
	}
	CHECK(!bad, "allocator agrees with the model (op %" PRIu64 ")", i);
	while (nlive && !bad)
		bad |= kvs_slab_free(s, live[--nlive].off);
	kvs_slab_stats_get(s, &st);
	CHECK(!bad && st.pages_free == st.pages_total && st.slots_used == 0,
	      "model: empty again");
	kvs_slab_destroy(s);
out:
	free(m.cell);
	free(start_of);
	free(live);
}

int main(void)
{
	const char *env = getenv("KVS_TEST_SEED");
	struct timespec ts;
	uint64_t seed;

	clock_gettime(CLOCK_REALTIME, &ts);
	seed = env ? strtoull(env, NULL, 0) :
		     (uint64_t)ts.tv_sec * 1000000007ULL + (uint64_t)ts.tv_nsec;
	rng_state = seed;
	printf("test_slab: seed %" PRIu64 " (KVS_TEST_SEED to replay)\n", seed);

	test_create();
	test_classes();
	test_class_put();
	test_slab_of();
	test_fill_one(4 * MiB, 4096, 4096);
	test_fill_one(4 * MiB, 4096, 100);
	test_fill_one(16 * MiB + 12345, 65536, 40 * KiB);
	test_fill_one(16 * MiB, 65536, 200 * KiB + 4 * KiB);
	test_fill_one(32 * MiB, 65536, 1 * MiB + 12 * KiB);
	test_fill_one(8 * MiB, 8192, 8 * MiB);
	test_pages_return();
	test_mixed();
	test_model();

	if (failures) {
		printf("test_slab: %u of %u checks FAILED (seed %" PRIu64 ")\n",
		       failures, checks, seed);
		return 1;
	}
	printf("test_slab: %u checks passed\n", checks);
	return 0;
}
