/*
 * kvs_pool.h - an id pool: numbered elements of one size, handed out and
 * given back in O(1), whose addresses never move.
 *
 * The daemon's jobs and handles (leases, promotion jobs, SSD read and write
 * slots, verify jobs, remote jobs, the slot allocator's slab records) are
 * all "an array of structs, a free list through it, an index as the id".
 * A pool stores them in chunks of 2^shift elements: growing adds a chunk
 * and never moves the ones made, so a pointer to an element stays good for
 * as long as the element is allocated, across any number of allocations
 * (callbacks and nested calls need not re-derive it). Each element has a generation, bumped when it is freed:
 * kvs_pool_id() packs (generation, index) into 64 bits, and
 * kvs_pool_find() refuses an id whose element was freed since (a stale
 * lease id from a client, for instance).
 *
 * Order: the free list is last in, first out; a new chunk's elements are
 * handed out lowest index first. (Leases keep the ids they had when each
 * array was its own doubling realloc: the same indexes in the same order.)
 *
 * Contents: a new chunk is zeroed; after that the pool never touches an
 * element's bytes: an element handed out again holds what its last user
 * left in it (an owner may keep a buffer there across uses, as leases keep
 * their record arrays). Resetting fields is the owner's job.
 *
 * The struct is public so that kvs_pool_at() inlines on the lookup path;
 * its fields are the pool's own: use the functions.
 *
 * Where: storage/, so that the engines (the slot allocator's slab records)
 * and service/ (leases, jobs) share it; it needs only kvs_types.h.
 *
 * Thread: none of its own; each pool is used by one thread (the loop).
 */
#ifndef KVS_POOL_H
#define KVS_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_types.h" /* KVS_NONE */

/* The most elements one pool may hold: indexes stay below 2^31, so that a
 * caller may use the top bit of a 32-bit cookie for itself. */
#define KVS_POOL_MAX (1u << 31)

typedef struct kvs_pool {
	uint8_t **chunks;     /* nchunks of them, each elements then meta */
	uint32_t nchunks, chunk_slots; /* chunks made, room in chunks[] */
	uint32_t shift;       /* log2 of the elements per chunk */
	uint32_t elem;        /* bytes per element, rounded up to 8 */
	uint32_t max;         /* elements at most (a multiple of the chunk) */
	uint32_t free_head;   /* KVS_NONE: empty */
	uint32_t live;        /* elements allocated */
} kvs_pool;

/* kvs_pool_init - an empty pool of @elem_bytes-byte elements, grown
 * 2^@shift at a time, holding at most @max (rounded up to a whole chunk;
 * at most KVS_POOL_MAX). Nothing is allocated until the first
 * kvs_pool_alloc().
 * Errors: -EINVAL (@elem_bytes 0, @shift over 16, @max 0 or over
 * KVS_POOL_MAX).
 * Ownership: @p is the caller's; kvs_pool_fini() frees what the pool made.
 * Thread: any, before the pool is shared. */
int kvs_pool_init(kvs_pool *p, size_t elem_bytes, uint32_t shift, uint32_t max);

/* kvs_pool_fini - free every chunk; element pointers die. Owners free what
 * their elements own first (kvs_pool_live_at() walks them). Idempotent: the
 * pool is empty afterwards (and needs kvs_pool_init() again to be used).
 * Thread: the pool's. */
void kvs_pool_fini(kvs_pool *p);

/* kvs_pool_alloc - take a free element (growing by one chunk when none is
 * free); *@idx: its index. Its bytes: zero if it is new, else as its last
 * user left them.
 * Errors: -ENOMEM (no memory for a chunk), -ENOSPC (the pool holds its
 * maximum): the pool is unchanged.
 * Thread: the pool's. */
int kvs_pool_alloc(kvs_pool *p, uint32_t *idx);

/* kvs_pool_free - give element @idx back (it must be allocated): its
 * generation moves on (never to 0), so ids taken before are stale; it is
 * the next one handed out. Its bytes stay as they are.
 * Thread: the pool's. */
void kvs_pool_free(kvs_pool *p, uint32_t idx);

/* kvs_pool_live_at - element @idx if it is allocated, else NULL (also for
 * an index never made). With kvs_pool_cap(), a walk over the live ones.
 * Thread: the pool's. */
void *kvs_pool_live_at(const kvs_pool *p, uint32_t idx);

/* kvs_pool_id - the id of allocated element @idx: its generation (never 0)
 * in the high 32 bits, @idx in the low ones. Never 0.
 * Thread: the pool's. */
uint64_t kvs_pool_id(const kvs_pool *p, uint32_t idx);

/* kvs_pool_find - the index of the element @id names, in *@idx.
 * Errors: -ENOENT (no such element, or it is free), -ESTALE (the element
 * was freed, and perhaps handed out again, since @id was taken).
 * Thread: the pool's. */
int kvs_pool_find(const kvs_pool *p, uint64_t id, uint32_t *idx);

/* kvs_pool_cap - how many elements the pool has made (indexes below it
 * exist, allocated or free). */
static inline uint32_t kvs_pool_cap(const kvs_pool *p)
{
	return p->nchunks << p->shift;
}

/* kvs_pool_count - how many elements are allocated. */
static inline uint32_t kvs_pool_count(const kvs_pool *p)
{
	return p->live;
}

/* kvs_pool_at - element @idx, which the pool has made (below
 * kvs_pool_cap(); allocated, or free for an owner that reads what it left
 * there). The address is the element's for the pool's life. */
static inline void *kvs_pool_at(const kvs_pool *p, uint32_t idx)
{
	return p->chunks[idx >> p->shift] +
	       (size_t)(idx & ((1u << p->shift) - 1)) * p->elem;
}

#endif /* KVS_POOL_H */
