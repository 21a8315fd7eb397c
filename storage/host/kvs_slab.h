/*
 * kvs_slab.h - the slot allocator: fixed-size slots for several block sizes
 * carved from one arena.
 *
 * The arena is cut into pages of page_bytes. A size class serves one block
 * size; it owns slabs, each a run of contiguous pages holding as many slots as
 * fit. A class's slab length is chosen so that the bytes lost at the slab's
 * tail (rounding each slot up to 64 bytes included) are at most ~2% of the
 * slab (or the least possible), so that at least 95% of the arena stays
 * usable for block data when several block sizes share it. When no free run
 * is long enough for that slab, a class may cut a shorter one (tail <= 10%)
 * rather than fail. A slab whose last slot is freed returns its pages to the
 * arena at once, where any class can take them (best fit, merged with free
 * neighbours).
 *
 * The allocator knows offsets only: no pointers, no blocks, no namespaces.
 * All offsets are from the arena's start; every slot offset is a multiple of
 * 64 bytes (so of a cache line and of a 16-byte vector access); with block
 * sizes that are multiples of 4096, slots are 4096-aligned.
 *
 * Caveats
 *  - Pages are shared by classes, so the arena fragments at page level: a free
 *    run shorter than every class's (short) slab is lost until a neighbour
 *    frees. Classes whose slabs are long (blocks of MiBs on 64 KiB pages)
 *    lose most: with a small class among them the loss is ~1-3%, with only
 *    large ones (1, 2, 3 MiB) 3-6%. So -ENOSPC from alloc does not mean "no
 *    free bytes": the caller evicts, its own class first.
 *  - A slab returns its pages only when all its slots are free, so evicting
 *    blocks of other classes frees pages slowly when their slabs hold many.
 *
 * Cost: alloc and free O(1) (a slab's slot bitmap is scanned from a hint);
 * cutting a new slab O(slab pages), plus a scan of the free runs of 128 pages
 * or more when no shorter run fits. Memory: 12 bytes per page, ~40 per slab,
 * and a bitmap per slab of more than 64 slots.
 *
 * Errors: 0 or a count on success; -EINVAL, -ENOMEM, -ENOSPC, KVS_E_LAYOUT.
 * Thread: one thread (the daemon's loop) owns a kvs_slab; no locking.
 */
#ifndef KVS_SLAB_H
#define KVS_SLAB_H

#include <stdint.h>

typedef struct kvs_slab kvs_slab;

#define KVS_SLAB_MAX_CLASSES 256 /* block sizes served at once */

typedef struct kvs_slab_stats {
	uint64_t arena_bytes;  /* usable bytes (pages * page_bytes) */
	uint64_t page_bytes;
	uint64_t pages_total;
	uint64_t pages_free;   /* pages not owned by any slab */
	uint64_t slots_used;   /* allocated slots, all classes */
	uint64_t slot_bytes_used; /* sum of block bytes of allocated slots */
	uint64_t slab_bytes;   /* pages owned by slabs, in bytes */
	uint32_t classes;      /* in use (held or with a slab) */
	uint32_t slabs;
} kvs_slab_stats;

/*
 * kvs_slab_create - an allocator over an arena of @arena_bytes, cut in pages
 * of @page_bytes (a power of two >= 4096; arena_bytes is rounded down to
 * whole pages).
 * Errors: -EINVAL (page size, arena smaller than one page or of 2^31 pages
 * or more), -ENOMEM.
 * Ownership: *out until kvs_slab_destroy().
 */
int kvs_slab_create(uint64_t arena_bytes, uint32_t page_bytes,
		    kvs_slab **out);
void kvs_slab_destroy(kvs_slab *s);

/*
 * kvs_slab_class - the class id that serves @block_bytes, created on first
 * use (ids are small integers from 0), and a reference to it: the class
 * and its id stay while a reference is held or a slab of it is in use.
 * kvs_slab_class_put - give a reference back; a class with none left and
 * no slab is freed, and its id may serve another block size.
 * Errors: KVS_E_LAYOUT when block_bytes is 0 or no slab of it fits the arena;
 * -ENOMEM; -ENOSPC when the class table (256 classes in use) is full.
 */
int kvs_slab_class(kvs_slab *s, uint64_t block_bytes, uint32_t *class_id);
void kvs_slab_class_put(kvs_slab *s, uint32_t class_id);

/*
 * kvs_slab_alloc - a free slot of @class_id; sets *offset (a multiple of 64,
 * slot + block_bytes within the arena).
 * Errors: -ENOSPC when the class's slabs are full and no page run is free for
 * a new slab; -EINVAL for an unknown class; -ENOMEM when a new slab's
 * metadata cannot be allocated.
 */
int kvs_slab_alloc(kvs_slab *s, uint32_t class_id, uint64_t *offset);

/*
 * kvs_slab_free - give back the slot at @offset. Never allocates, so it
 * cannot fail on a valid slot.
 * Errors: -EINVAL when @offset is not the start of an allocated slot (a
 * double free is caught, never corrupts the allocator; nothing changes).
 */
int kvs_slab_free(kvs_slab *s, uint64_t offset);

/*
 * kvs_slab_claim - mark the slot at @offset allocated, in the slab of
 * @class_id that starts at page @first and is @npages long: that slab if it
 * exists, else one cut there from free pages (what a rebuild from an arena
 * that outlived its allocator does, slot by slot; claims in ascending order
 * of @first cost O(pages) in all). A slab cut for a claim that then fails
 * goes back.
 * Errors: -EINVAL (unknown class, pages outside the arena, a length the
 * class never cuts, @offset off the slab's slot grid), -EEXIST (the slot is
 * allocated, or the pages hold another slab), -ENOMEM.
 */
int kvs_slab_claim(kvs_slab *s, uint32_t class_id, uint32_t first,
		   uint32_t npages, uint64_t offset);

/* kvs_slab_class_bytes - the block bytes of a class (0 if unknown). */
uint64_t kvs_slab_class_bytes(const kvs_slab *s, uint32_t class_id);

/* kvs_slab_class_slabs - number of slabs a class owns now. */
uint32_t kvs_slab_class_slabs(const kvs_slab *s, uint32_t class_id);

/*
 * kvs_slab_of - the slab that holds the allocated slot at @offset: its id
 * (a small integer, stable while any of its slots is allocated; a slab cut
 * later may reuse it) and its length in pages (*npages, may be NULL).
 * Returns KVS_NONE (UINT32_MAX) when no slab holds @offset. O(1).
 */
uint32_t kvs_slab_of(const kvs_slab *s, uint64_t offset, uint32_t *npages);
/* kvs_slab_first - the first page of slab @id (from kvs_slab_of). */
uint32_t kvs_slab_first(const kvs_slab *s, uint32_t id);

/* kvs_slab_pages - the arena's pages (what kvs_slab_of's lengths add to). */
uint32_t kvs_slab_pages(const kvs_slab *s);

/* kvs_slab_stats_get - fill the allocator's counters. */
void kvs_slab_stats_get(const kvs_slab *s, kvs_slab_stats *out);

#endif /* KVS_SLAB_H */
