/*
 * test_slab.c - the slot allocator (storage/host/slab.c) alone: its
 * classes, slab lookup, filling one class to the end and back, pages given
 * back. Mixed classes under churn and a random model run are
 * test_slab_mixed. Exit: 0 pass, 1 fail.
 */
#include <errno.h>

#include "slab_test.h"

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

/* One test_fill_one run: the allocator, its one class, the slots it holds. */
struct fill {
	kvs_slab *s;
	uint32_t cid;
	uint64_t arena, block;
	uint64_t *offs, n;
};

/* Alloc to -ENOSPC, each slot marked in a real byte map (bytes); then the
 * stats, and the first slab's tail. */
static void fill_to_enospc(struct fill *f, uint32_t page, unsigned char *bytes,
			   uint64_t max)
{
	uint64_t n = 0, i, off, stride, slab1 = 0, per_slab = 0;
	uint64_t arena = f->arena, block = f->block;
	kvs_slab *s = f->s;
	uint32_t cid = f->cid;
	kvs_slab_stats st;
	int err, bad = 0;

	while ((err = kvs_slab_alloc(s, cid, &off)) == 0 && n < max) {
		if (off % 64 || off + block > arena) {
			bad = 1;
			break;
		}
		for (i = off; i < off + block; i++)
			bad |= bytes[i]++;
		f->offs[n++] = off;
		if (n == 1) {
			kvs_slab_stats_get(s, &st);
			slab1 = st.slab_bytes;
		}
		if (!per_slab && kvs_slab_class_slabs(s, cid) > 1)
			per_slab = n - 1;
	}
	f->n = n;
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
}

/* A freed slot is taken back by the next alloc; errors on free leave the
 * allocator as it was. */
static void fill_bad_frees(struct fill *f)
{
	uint64_t *offs = f->offs, n = f->n, off, block = f->block;
	kvs_slab *s = f->s;
	uint32_t cid = f->cid;
	kvs_slab_stats st, st2;

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
	CHECK(kvs_slab_free(s, f->arena) == -EINVAL, "past the arena");
	CHECK(kvs_slab_free(s, UINT64_MAX) == -EINVAL, "UINT64_MAX");
	kvs_slab_stats_get(s, &st2);
	CHECK(!memcmp(&st, &st2, sizeof(st)), "stats unchanged by bad frees");
	CHECK(kvs_slab_alloc(s, cid, &offs[n / 2]) == 0 && offs[n / 2] == off,
	      "allocator intact after bad frees");
}

/* Empty every slab: all pages come back, another class takes them. */
static void fill_free_all_then_other_class(struct fill *f)
{
	uint64_t *offs = f->offs, n = f->n, i, off, b2;
	uint64_t arena = f->arena, block = f->block;
	kvs_slab *s = f->s;
	uint32_t cid = f->cid, cid2;
	kvs_slab_stats st;
	int err;

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
}

/*
 * One class on a small arena: fill to -ENOSPC with a real byte map, then
 * errors on free leave everything as it was, then the pages come back.
 */
static void test_fill_one(uint64_t arena, uint32_t page, uint64_t block)
{
	struct fill f = { .arena = arena, .block = block };
	uint64_t max = arena / 64 + 1;
	unsigned char *bytes;

	printf("fill: arena %" PRIu64 " page %u block %" PRIu64 "\n",
	       arena, page, block);
	f.offs = malloc(max * sizeof(*f.offs));
	bytes = calloc(1, arena);
	if (!f.offs || !bytes) {
		CHECK(0, "out of memory");
		goto out_mem;
	}
	CHECK(kvs_slab_create(arena, page, &f.s) == 0, "create");
	CHECK(kvs_slab_class(f.s, block, &f.cid) == 0, "class");
	fill_to_enospc(&f, page, bytes, max);
	fill_bad_frees(&f);
	fill_free_all_then_other_class(&f);
	kvs_slab_destroy(f.s);
out_mem:
	free(bytes);
	free(f.offs);
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

int main(void)
{
	uint64_t seed = slab_test_seed("test_slab");

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
	return slab_test_end("test_slab", seed);
}
