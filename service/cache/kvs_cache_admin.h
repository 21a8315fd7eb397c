/*
 * kvs_cache_admin.h - the operator's primitives over the cache: walk and find
 * records, free one, pin one, count a fast-path hit, and hear about blocks
 * as they are stored and freed (implemented in cache_admin.c, the record
 * accessors and hooks in cache_rec.c, freeing in cache_evict.c). admin.c
 * builds list/inspect/evict/pin/watch on these, naming the cache's events
 * (kvs_cache_event) on the wire itself; the cache keeps its rules (prefix
 * closure, pinned blocks stay) because every change goes through it.
 *
 * Errors: 0 or a negative KVS_E_* / -errno.
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_CACHE_ADMIN_H
#define KVS_CACHE_ADMIN_H

#include <stdint.h>

#include "kvs_cache.h"
#include "kvs_table.h"

/* What the event hook hears: the cache's own kinds (admin.c names them on
 * the wire). */
typedef enum kvs_cache_event {
	KVS_CACHE_EVENT_STORED = 1,  /* committed (or fetched, as if committed) */
	KVS_CACHE_EVENT_EVICTED = 2, /* freed to make room, or by the operator */
	KVS_CACHE_EVENT_FLUSHED = 3, /* freed by the operator's flush */
} kvs_cache_event;

/* Called for STORED and for EVICTED / FLUSHED (before the record is
 * freed). */
typedef void (*kvs_cache_event_fn)(void *arg, kvs_cache_event kind,
				   const kvs_rec *r);
void kvs_cache_set_event_hook(kvs_cache *c, kvs_cache_event_fn fn, void *arg);

/* The residency hook: record @idx (@r) may have changed where its bytes are
 * loadable from (r->tier, r->state: committed and in a tier), after a
 * store, a tier move or a loss; @gone: the record is being removed (its
 * last call until @idx names another record). Called after the change,
 * before the record's index is reused. */
typedef void (*kvs_cache_resid_fn)(void *arg, uint32_t idx, const kvs_rec *r,
				   int gone);
void kvs_cache_set_resid_hook(kvs_cache *c, kvs_cache_resid_fn fn, void *arg);

/* kvs_cache_rec_span - records in use all have an index below this. O(n). */
uint32_t kvs_cache_rec_span(const kvs_cache *c);
/* kvs_cache_rec_end - every record has an index below this (the table's
 * capacity; FREE ones too). O(1). */
uint32_t kvs_cache_rec_end(const kvs_cache *c);
/* kvs_cache_rec_at - record @idx (check its state: FREE is unused). Valid
 * until the next change to the cache. */
const kvs_rec *kvs_cache_rec_at(const kvs_cache *c, uint32_t idx);
/* kvs_cache_rec_slab - the host slab holding record @r's slot, and its
 * length in pages (*pages); KVS_NONE (and 0) when @r is not in a host slot. */
uint32_t kvs_cache_rec_slab(const kvs_cache *c, const kvs_rec *r,
			    uint32_t *pages);
/* kvs_cache_rec_hash - the block hash a client names record @r by. */
kvs_hash kvs_cache_rec_hash(const kvs_rec *r);
/* kvs_cache_rec_chain - the blocks from the first of record @idx's chain
 * down to it (*depth, 1 for a record without a parent) and the record of
 * that first block (*root). O(1) but after a warm load linked records out
 * of order: then once per record so linked above it (amortized O(1)). */
void kvs_cache_rec_chain(kvs_cache *c, uint32_t idx, uint32_t *depth,
			 uint32_t *root);
/* kvs_cache_rec_age_s - seconds since record @idx was last stored or hit. */
uint64_t kvs_cache_rec_age_s(const kvs_cache *c, uint32_t idx);

/* kvs_cache_find - the record of block @h in namespace @ns (0: the first
 * namespace that has it), or KVS_NONE. */
uint32_t kvs_cache_find(const kvs_cache *c, uint32_t ns, kvs_hash h);

/* kvs_cache_ns_at - namespace @id (1..count), or NULL (none, or a free
 * id: never given, or reclaimed). kvs_cache_ns_count is the highest id. */
const kvs_ns_info *kvs_cache_ns_at(const kvs_cache *c, uint32_t id);
uint32_t kvs_cache_ns_count(const kvs_cache *c);

/*
 * kvs_cache_free_rec - free committed record @idx if the policy could evict
 * it now (unpinned; a leaf for a leaf-only policy), telling the event hook
 * @kind (KVS_CACHE_EVENT_EVICTED or KVS_CACHE_EVENT_FLUSHED).
 * Returns 1 when freed, 0 when it must stay.
 */
int kvs_cache_free_rec(kvs_cache *c, uint32_t idx, kvs_cache_event kind);

/*
 * kvs_cache_free_recs - kvs_cache_free_rec() for the records @idx[0..n)
 * (repeats allowed), with one look at the fast path's pins per batch of
 * KVS_CACHE_FREE_BATCH of one domain instead of one per record: freed[i]
 * = 1 for each one freed. Returns how many were freed.
 */
#define KVS_CACHE_FREE_BATCH 1024u
uint32_t kvs_cache_free_recs(kvs_cache *c, const uint32_t *idx, uint32_t n,
			     kvs_cache_event kind, uint8_t *freed);

/*
 * kvs_cache_pin_rec - add (+1) or drop (-1) an operator pin on committed
 * record @idx: a pin counts like a lease's (the block is not evicted) but
 * belongs to no connection. The caller keeps track of which it pinned.
 */
void kvs_cache_pin_rec(kvs_cache *c, uint32_t idx, int delta);

/* kvs_cache_touch_rec - committed record @idx was hit by a lookup that did
 * not come through the cache (the fast path): count the hit (in
 * blocks.lookup_hit and its namespace's, as LOOKUP counts its own), refresh
 * its access time and its place in the eviction order. Returns 1, or 0 when
 * the record is not committed (nothing counted). */
int kvs_cache_touch_rec(kvs_cache *c, uint32_t idx);

/* kvs_cache_count_miss - @n blocks of namespace @ns_id that a lookup outside
 * the cache (the fast path) found absent: blocks.lookup_miss and the
 * namespace's (saturating). */
void kvs_cache_count_miss(kvs_cache *c, uint32_t ns_id, uint64_t n);

/*
 * kvs_cache_prefix - how many leading blocks of @hashes[0..n) namespace @d
 * of the shared domain holds (0 with per-uid domains, --tenant-arenas:
 * every namespace is then a tenant's), a lookup of those hashes only: tiers[t] counts the blocks of that prefix in tier t (kvs_tier,
 * KVS_TIER_REMOTE + 1 entries; a store tier's only while it can read them
 * back). Pins, promotes and moves nothing; an unknown namespace is 0.
 * Counted in blocks.query_asked.
 */
uint32_t kvs_cache_prefix(kvs_cache *c, const kvs_ns_desc *d,
			  const kvs_hash *hashes, uint32_t n, uint32_t *tiers);

#endif /* KVS_CACHE_ADMIN_H */
