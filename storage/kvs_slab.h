/*
 * kvs_slab.h - the slot allocator: fixed-size slots for several block sizes
 * carved from one arena.
 *
 * The arena is cut into pages of page_bytes. A size class serves one block
 * size; it owns slabs, each a run of contiguous pages holding as many slots as
 * fit. A class's slab length is chosen so that the bytes lost at the slab's
 * tail are at most ~2% of the slab (or the least possible), so that at least
 * 95% of the arena stays usable for block data when several block sizes share
 * it. A slab whose last slot is freed returns its pages to the arena, where
 * any class can take them.
 *
 * The allocator knows offsets only: no pointers, no blocks, no namespaces.
 * All offsets are from the arena's start; every slot offset is a multiple of
 * 64 bytes (so of a cache line and of a 16-byte vector access); with block
 * sizes that are multiples of 4096, slots are 4096-aligned.
 *
 * Errors: 0 or a count on success; -EINVAL, -ENOMEM, -ENOSPC, KVS_E_LAYOUT.
 * Thread: one thread (the daemon's loop) owns a kvs_slab; no locking.
 */
#ifndef KVS_SLAB_H
#define KVS_SLAB_H

#include <stdint.h>

typedef struct kvs_slab kvs_slab;

typedef struct kvs_slab_stats {
	uint64_t arena_bytes;  /* usable bytes (pages * page_bytes) */
	uint64_t page_bytes;
	uint64_t pages_total;
	uint64_t pages_free;   /* pages not owned by any slab */
	uint64_t slots_used;   /* allocated slots, all classes */
	uint64_t slot_bytes_used; /* sum of block bytes of allocated slots */
	uint64_t slab_bytes;   /* pages owned by slabs, in bytes */
	uint32_t classes;
	uint32_t slabs;
} kvs_slab_stats;

/*
 * kvs_slab_create - an allocator over an arena of @arena_bytes, cut in pages
 * of @page_bytes (a power of two >= 4096; arena_bytes is rounded down to
 * whole pages).
 * Errors: -EINVAL (page size, arena smaller than one page), -ENOMEM.
 * Ownership: *out until kvs_slab_destroy().
 */
int kvs_slab_create(uint64_t arena_bytes, uint32_t page_bytes,
		    kvs_slab **out);
void kvs_slab_destroy(kvs_slab *s);

/*
 * kvs_slab_class - the class id that serves @block_bytes, created on first
 * use (ids are small integers from 0, stable for the allocator's life).
 * Errors: KVS_E_LAYOUT when block_bytes is 0 or no slab of it fits the arena;
 * -ENOMEM; -ENOSPC when the class table (256 classes) is full.
 */
int kvs_slab_class(kvs_slab *s, uint64_t block_bytes, uint32_t *class_id);

/*
 * kvs_slab_alloc - a free slot of @class_id; sets *offset.
 * Errors: -ENOSPC when the class's slabs are full and no page run is free for
 * a new slab; -EINVAL for an unknown class.
 */
int kvs_slab_alloc(kvs_slab *s, uint32_t class_id, uint64_t *offset);

/*
 * kvs_slab_free - give back the slot at @offset.
 * Errors: -EINVAL when @offset is not the start of an allocated slot (a
 * double free is caught, never corrupts the allocator).
 */
int kvs_slab_free(kvs_slab *s, uint64_t offset);

/* kvs_slab_class_bytes - the block bytes of a class (0 if unknown). */
uint64_t kvs_slab_class_bytes(const kvs_slab *s, uint32_t class_id);

/* kvs_slab_class_slabs - number of slabs a class owns now. */
uint32_t kvs_slab_class_slabs(const kvs_slab *s, uint32_t class_id);

/* kvs_slab_stats_get - fill the allocator's counters. */
void kvs_slab_stats_get(const kvs_slab *s, kvs_slab_stats *out);

#endif /* KVS_SLAB_H */
