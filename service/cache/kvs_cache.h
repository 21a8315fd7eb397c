/*
 * kvs_cache.h - blocks, namespaces, leases and eviction over the host tier.
 *
 * This is the glue between the wire (command.c) and the engines (storage/):
 * it knows blocks, namespaces, leases and stats; the slot allocator knows
 * only offsets and the arena only bytes. Tiers other than host plug in
 * through kvs_tier_ops.h (kvs_cache_tier_add). Its API speaks its own types
 * (kvs_hash arrays, kvs_ns_desc, kvs_verify_result, kvs_cache_event), never
 * the wire's: command.c and admin.c translate (layering.cache_no_wire keeps
 * every wire header out of the cache's includes).
 *
 * Rules it keeps:
 *  - Prefix closure: a block is linked to its parent (the chain one block
 *    shorter) and is evicted only as a leaf, so the cached blocks of a
 *    namespace always form a forest of prefixes and a lookup that stops at
 *    the first miss loses nothing.
 *  - A pinned block (refs > 0) is never evicted or moved.
 *  - A reserved block is invisible until its lease commits; a lease that
 *    ends any other way (abort, release, disconnect) frees its slots.
 *  - After a BUSY block (being written by another lease) the rest of a
 *    reserve's chain is BUSY too, so that no block ever has a parent that
 *    could vanish by an abort it does not control.
 *
 * Leases are named by 64-bit ids: slot index in the low 32 bits, a generation
 * in the high 32, so a stale or forged id is caught, never misapplied.
 *
 * Errors: 0 or a count, or a negative KVS_E_* / -errno (see each function).
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_CACHE_H
#define KVS_CACHE_H

#include <stdint.h>

#include "kvs_stats.h"
#include "kvs_tier_ops.h"
#include "kvs_types.h"

typedef struct kvs_cache kvs_cache;
typedef struct kvs_owner kvs_owner; /* one per connection */

typedef struct kvs_cache_config {
	uint64_t host_bytes;
	uint32_t page_bytes;
	int hugepages;       /* host arenas on 2 MiB huge pages */
	const char *policy;  /* eviction policy name, "lru" */
	uint32_t max_leases; /* per owner */
	uint32_t max_pinned; /* per owner: pins of all its leases; 0: none */
	/* Trust domains (--tenant-arenas): 0, one host arena of host_bytes
	 * for everybody; N > 0, one arena of tenant_bytes per peer uid (see
	 * kvs_cache_owner_set_uid), made on its first attach, at most N. */
	uint32_t max_tenants;
	uint64_t tenant_bytes;
	/* Namespaces one peer uid may create (an attach that would make one
	 * more gets KVS_E_LIMIT); 0: no limit. */
	uint32_t max_ns_per_uid;
	/* Distinct block sizes one peer uid's namespaces may have in its
	 * domain's allocator (each takes a slot class, of 256 shared by the
	 * domain); 0: no limit. */
	uint32_t max_sizes_per_uid;
	/* The share (percent) of its domain's host arena that the slabs one
	 * peer uid's leases hold blocks in may take: a lookup hit, or a
	 * reserve's new block, that would hold one slab more past it is cut
	 * (the chain ends there, leases.refused_slabs); operators are not
	 * budgeted (kvs_cache_owner_set_operator); 0: no limit. */
	uint32_t max_pinned_share_per_uid;
	/* Describe every committed host block in a metadata memfd, so that
	 * the next daemon can adopt the arenas (kvs_persist.h); 0: off. */
	int persist;
} kvs_cache_config;

/* A namespace as kvs_cache_ns_foreach() shows it. */
typedef struct kvs_ns_info {
	uint32_t id;
	const char *model, *adapter; /* NUL-terminated copies */
	int salted;
	uint32_t layers, kv_heads, head_dim, block_tokens, tp_rank, tp_size;
	uint32_t dtype;
	uint64_t block_bytes;
	uint64_t blocks;  /* committed */
	uint64_t writing; /* reserved, not committed */
	uint32_t clients;
	int tenant;       /* in a per-uid arena (--tenant-arenas uid) */
	uint32_t uid;     /* tenant: the uid owning that arena; else 0 */
	/* Its share of blocks.lookup_hit / lookup_miss (every path), since
	 * it was made. */
	uint64_t lookup_hit, lookup_miss;
} kvs_ns_info;

/*
 * kvs_cache_create - the host arena, slot allocator, block table and policy.
 * @stats: counters the cache adds to; must outlive the cache.
 * Errors: -EINVAL (unknown policy), -ENOMEM, -errno from the arena.
 */
int kvs_cache_create(const kvs_cache_config *cfg, kvs_counters *stats,
		     kvs_cache **out);
/*
 * kvs_cache_reserve_pages - with hugepages, take the shared host arena's
 * pages from the huge page pool (kvs_arena_reserve): once, after any adoption
 * (which replaces the arena kvs_cache_create made) and before any client
 * may touch it. 0 without hugepages or with tenant arenas (each reserved
 * when made). Errors: -ENOMEM (the pool is short), -errno.
 */
int kvs_cache_reserve_pages(kvs_cache *c);
void kvs_cache_destroy(kvs_cache *c);

/* The shared host arena (--tenant-arenas off): its fd, size and id. With
 * per-uid domains there is none to hand out: fd -1, id 0, and bytes is the
 * host tier's capacity (tenant bytes x max tenants). */
int kvs_cache_arena_fd(const kvs_cache *c);
uint64_t kvs_cache_arena_bytes(const kvs_cache *c);
uint64_t kvs_cache_arena_id(const kvs_cache *c);

/* The most records one hold_batch hook is asked about at once. */
#define KVS_CACHE_HOLD_BATCH 1024u

/*
 * The fast path's hooks (service/fast/kvs_fastidx.h): the cache calls them
 * and knows nothing else of the fast path, which sits above it and reads
 * records through kvs_cache_admin.h. @fast is the pointer given to
 * kvs_cache_set_fast.
 *  - publish: host record @idx (READY) became visible in the domain of
 *    arena @arena_id (commit, promotion from a store tier, demotion from a
 *    slot tier);
 *  - hold_batch: may the @n (at most KVS_CACHE_HOLD_BATCH) distinct host
 *    records @idx of that domain leave the tier (eviction, an operator's
 *    evict or flush)? keep[i] = 0: yes, and it is unpublished; 1: a client
 *    pins it, it stays, held by one pin of the fast path's
 *    (kvs_cache_pin_rec). Returns how many were kept;
 *  - batch_hint: how many victims a make-room loop should decide in its
 *    first batch for that domain (at least 1);
 *  - unhold: room is short: drop the holds that no client's pin needs any
 *    more; returns how many were let go;
 *  - replay: before an eviction, apply the hits clients made without the
 *    socket to the policy's order and the hit counts; returns the touches
 *    read.
 */
struct kvs_rec; /* kvs_table.h */
typedef struct kvs_cache_fast_ops {
	void (*publish)(void *fast, uint64_t arena_id, uint32_t idx,
			const struct kvs_rec *r);
	uint32_t (*hold_batch)(void *fast, uint64_t arena_id,
			       const uint32_t *idx, uint32_t n, uint8_t *keep);
	uint32_t (*batch_hint)(void *fast, uint64_t arena_id);
	uint32_t (*unhold)(void *fast);
	uint32_t (*replay)(void *fast);
} kvs_cache_fast_ops;

/* kvs_cache_set_fast - the fast path's hooks (@ops, called with @fast);
 * the host blocks already committed (an adoption's) are published at once.
 * @ops NULL: none (the default). */
void kvs_cache_set_fast(kvs_cache *c, const kvs_cache_fast_ops *ops,
			void *fast);
/* kvs_cache_owner_arena - the host arena of @o's domain (the only one its
 * HELLO reply may hand out). Errors: KVS_E_NOTATTACHED. */
int kvs_cache_owner_arena(const kvs_cache *c, const kvs_owner *o, int *fd,
			  uint64_t *bytes, uint64_t *id);
/*
 * kvs_cache_fast_grant - what a new fast-path pin area of @o (attached)
 * may hold: g->pins of the @want pins it asks for (a worker uid's areas in
 * one domain hold at most @uid_pins together) and g->pages, the pages of
 * distinct host slabs its pins may protect at once, taken out of the uid's
 * --max-pinned-share-per-uid (its socket leases may hold the share less
 * its areas' grants); g->pages KVS_NONE: not budgeted (an operator, no
 * share, --tenant-arenas uid). An area gets an eighth of the share, a
 * uid's areas half of it at most.
 * Errors: KVS_E_NOTATTACHED; KVS_E_LIMIT (the uid has no pins or pages
 * left: no pin area), -ENOMEM; nothing granted.
 * kvs_cache_fast_ungrant - give back what a grant took (once; @g is marked).
 */
typedef struct kvs_cache_grant {
	uint32_t uid, dom, pins, pages;
	int charged;
} kvs_cache_grant;
int kvs_cache_fast_grant(kvs_cache *c, const kvs_owner *o, uint32_t want,
			 uint32_t uid_pins, kvs_cache_grant *g);
void kvs_cache_fast_ungrant(kvs_cache *c, kvs_cache_grant *g);
/* kvs_cache_tenants - domains made so far (1 when --tenant-arenas off). */
uint32_t kvs_cache_tenants(const kvs_cache *c);

/* kvs_cache_owner_new - state for one connection; NULL when out of memory. */
kvs_owner *kvs_cache_owner_new(kvs_cache *c);
/*
 * kvs_cache_done_fn - a lookup that answered -EINPROGRESS (blocks being read
 * back from a store tier) is done: @rc hits (or an error), @lease and @out[0..rc) as
 * kvs_cache_lookup() would have filled them (a query's: its count, @out
 * NULL, @lease 0). Called from kvs_cache_tier_poll();
 * @out is valid during the call only. The callback may issue requests.
 */
typedef void (*kvs_cache_done_fn)(void *arg, int rc, uint64_t lease,
				  const kvs_block *out);
/* kvs_cache_owner_set_done - where @o's deferred lookups answer. */
void kvs_cache_owner_set_done(kvs_owner *o, kvs_cache_done_fn fn, void *arg);

/*
 * kvs_cache_verify_fn - a verify that answered -EINPROGRESS is done: @res
 * (counts) and @fails[0..res->count). Called from a tier's poll; both are
 * valid during the call only. The callback may issue requests.
 */
typedef kvs_verify_fn kvs_cache_verify_fn;

/*
 * kvs_cache_verify - have the first store tier that can (the SSD tier)
 * read back every block it holds with no I/O in flight (of namespace @ns,
 * 0: all) and check each against its header and checksums; a block that
 * fails leaves that tier (docs/ssd.md, "Verify"). @max_failed: failures
 * listed in the answer (all are counted).
 * Returns 0 with *res filled (nothing was read: no such tier, has_tier 0,
 * or it holds no block to check), or -EINPROGRESS: @fn(@arg) answers
 * later and @o must send no other request until then.
 * Errors: -EBUSY (a verify of @o in flight), -ENOMEM.
 */
int kvs_cache_verify(kvs_cache *c, kvs_owner *o, uint32_t ns,
		     uint32_t max_failed, kvs_cache_verify_fn fn, void *arg,
		     kvs_verify_result *res);

/* kvs_cache_owner_set_uid - the peer's uid (SO_PEERCRED), which picks
 * @o's trust domain when the cache has per-uid domains; before attach. */
void kvs_cache_owner_set_uid(kvs_owner *o, uint32_t uid);
/* kvs_cache_owner_set_operator - @o's peer is an operator (the daemon's
 * uid, root, --admin-uid): its leases are not budgeted in slabs
 * (max_pinned_share_per_uid); before its first lease. */
void kvs_cache_owner_set_operator(kvs_owner *o, int op);
/* kvs_cache_owner_ns - the namespace @o attached to, 0 before attach. */
uint32_t kvs_cache_owner_ns(const kvs_owner *o);

/* kvs_cache_owner_free - end every lease of @o (pins dropped, uncommitted
 * slots freed) and free it. @o may be NULL. */
void kvs_cache_owner_free(kvs_cache *c, kvs_owner *o);

/*
 * kvs_cache_attach - bind @o to namespace @d, creating it on first use.
 * Attaching again with the same layout is allowed. @maps_slots: the owner
 * maps the slot tier's arena (the GPU tier's) and reserves there first.
 * With per-uid domains the namespace is the owner's domain's: the same
 * layout and salt attached from two uids are two namespaces.
 * Errors: KVS_E_LAYOUT (a zero or out-of-range field, a block that does not
 * fit the arena), KVS_E_ATTACHED (already bound to another namespace),
 * KVS_E_LIMIT (the owner's uid has no domain and max_tenants exist, or
 * the namespace is new and the uid has max_ns_per_uid of them, none
 * reclaimable: counted in namespaces.refused; or its block size would be
 * one more than max_sizes_per_uid for the uid, or one more than the 256
 * the domain serves: namespaces.refused_sizes), -ENOMEM.
 */
int kvs_cache_attach(kvs_cache *c, kvs_owner *o, const kvs_ns_desc *d,
		     int maps_slots, uint32_t *ns_id, uint64_t *block_bytes);

/*
 * kvs_cache_lookup - pin the longest present prefix of @hashes (@n block
 * hashes, read during the call only). Fills out[0..hits) and *lease (0 if none).
 * Returns hits. Errors: KVS_E_NOTATTACHED, KVS_E_LIMIT (the owner holds
 * max_leases leases, or the hits would take its pins past max_pinned:
 * nothing is pinned then), -ENOMEM.
 * -EINPROGRESS: some hits are being read back from a store tier; the
 * answer comes through the owner's kvs_cache_done_fn (set one before
 * looking up with a store tier on), and @o must send no other request
 * until then.
 */
int kvs_cache_lookup(kvs_cache *c, kvs_owner *o, const kvs_hash *hashes,
		     uint32_t n, uint64_t *lease, kvs_block *out);

/*
 * kvs_cache_query - how many leading blocks of @hashes (@n, as for a lookup)
 * a lookup would find in this daemon's tiers (host, the owner's slot tier,
 * SSD), pinning, promoting and fetching nothing; with @remote, and a
 * shared tier on, also how far the chain goes on in it, asked in EXISTS
 * windows of KVS_PROBE_WINDOW without moving bytes.
 * Returns the count. Errors: KVS_E_NOTATTACHED, -ENOMEM.
 * -EINPROGRESS: the shared tier was asked; the answer comes through the
 * owner's kvs_cache_done_fn (@out NULL, @lease 0), from the tier's poll or
 * from kvs_cache_query_expire(), whichever is first; @o must send no other
 * request until then.
 */
int kvs_cache_query(kvs_cache *c, kvs_owner *o, const kvs_hash *hashes,
		    uint32_t n, int remote);

/*
 * kvs_cache_query_expire - the bound of @o's query in flight has passed:
 * answer it now (through the done callback) with the local count and the
 * windows the shared tier answered so far; its requests finish unseen.
 * No-op when @o has none in flight.
 */
void kvs_cache_query_expire(kvs_cache *c, kvs_owner *o);

/*
 * kvs_cache_reserve - slots for the missing blocks of a chain; fills all of
 * out[0..n) (NEW, EXISTS, BUSY, FULL) and *lease (0 if no NEW).
 * Returns the number of NEW. Errors: KVS_E_FULL (blocks were missing and none
 * could get a slot), KVS_E_NOTATTACHED, KVS_E_LIMIT (max_leases, or the NEW
 * blocks would take the owner's pins past max_pinned: nothing is reserved
 * then).
 */
int kvs_cache_reserve(kvs_cache *c, kvs_owner *o, const kvs_hash *hashes,
		      uint32_t n, uint64_t *lease, kvs_block *out);

/*
 * kvs_cache_reserve_after - kvs_cache_reserve() of a chain whose first
 * hash (@n >= 1) is its parent: a block committed before, by anyone, in
 * any tier. It is linked to (out[0] EXISTS) and never reserved. When it is
 * not a committed block of the owner's namespace (absent, being written, a
 * ghost), nothing is reserved: every out[i] is KVS_BLOCK_NOPARENT, *lease 0,
 * and the blocks that were not reserved are counted in
 * blocks.reserve_noparent. So a child is never published without its
 * parent and the cache stays a forest of whole prefixes.
 * Returns and Errors: as kvs_cache_reserve().
 */
int kvs_cache_reserve_after(kvs_cache *c, kvs_owner *o, const kvs_hash *hashes,
			    uint32_t n, uint64_t *lease, kvs_block *out);

/* kvs_cache_commit - publish a write lease; returns blocks published.
 * Errors: KVS_E_NOTATTACHED, KVS_E_NOLEASE, KVS_E_NOTOWNER, KVS_E_LEASEKIND. */
int kvs_cache_commit(kvs_cache *c, kvs_owner *o, uint64_t lease);
/* kvs_cache_abort - free a write lease's slots; returns slots freed.
 * Errors: as commit. */
int kvs_cache_abort(kvs_cache *c, kvs_owner *o, uint64_t lease);
/* kvs_cache_release - end any lease (a write lease is aborted); returns the
 * blocks it held. Errors: KVS_E_NOTATTACHED, KVS_E_NOLEASE, KVS_E_NOTOWNER. */
int kvs_cache_release(kvs_cache *c, kvs_owner *o, uint64_t lease);

/* kvs_cache_stats_fill - refresh the gauges the cache owns in its stats. */
void kvs_cache_stats_fill(kvs_cache *c);

/* kvs_cache_ns_foreach - call @fn for every namespace. */
void kvs_cache_ns_foreach(const kvs_cache *c,
			  void (*fn)(const kvs_ns_info *ns, void *arg),
			  void *arg);

/* kvs_cache_check - verify every invariant (refs, children, evictable set,
 * slot accounting); returns 0 or KVS_E_INTERNAL. For tests: O(records). */
int kvs_cache_check(kvs_cache *c);

#endif /* KVS_CACHE_H */
