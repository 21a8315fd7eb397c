/*
 * cache_int.h - the cache's internals, shared by its files only:
 * cache.c (life cycle, lookup, reserve, commit), cache_rec.c (record
 * state: the per-record arrays, last access, the leaf rule, policies,
 * children by tier, the hooks), cache_lease.c (leases, reserving a block
 * into one, commit), cache_pinslab.c (the host slabs each uid's leases
 * hold, budgeted), cache_promote.c (promotion jobs: reads back from store
 * tiers, the chain probed and fetched from a shared tier, remote queries),
 * cache_evict.c (tiers of a record, eviction and demotion, making room),
 * cache_ns.c (trust domains and namespaces), cache_tier.c (the tier
 * interface's cache side: adding and closing tiers, the environment,
 * owners that go away), cache_admin.c (operator primitives, stats) and
 * cache_check.c (the consistency check). Leases and promotion jobs are
 * elements of a kvs_pool each (storage/host/kvs_pool.h): their addresses
 * never move. No tier includes it:
 * tiers see kvs_tier_ops.h only. Nor does any wire header reach it: the cache
 * speaks kvs_hash and kvs_cache_event (layering.cache_no_wire).
 *
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_CACHE_INT_H
#define KVS_CACHE_INT_H

#include <string.h> /* memset */
#include <time.h>

#include "cache_key.h" /* cache_ns_key */
#include "kvs_arena.h"
#include "kvs_cache.h"
#include "kvs_cache_admin.h"
#include "kvs_log.h"
#include "kvs_policy.h"
#include "kvs_pool.h"
#include "kvs_slab.h"
#include "kvs_table.h"
#include "kvs_tier_ops.h"

/* kvs_tier values the cache can hold a tier for (array bound). */
#define KVS_TIER_MAX 8
#define NO_CLASS UINT32_MAX
/* An eviction loop that frees other classes' slots hoping to empty a whole
 * slab gives up after this many victims rather than flush the cache. */
#define MAX_EVICTIONS_PER_SLOT 4096

enum lease_kind { LEASE_FREE = 0, LEASE_READ = 1, LEASE_WRITE = 2 };

/* One lease, an element of kvs_cache.leases: its index is the slot, its id
 * (kvs_pool_id) the lease id the client holds. */
typedef struct lease {
	uint8_t kind;
	kvs_owner *owner;
	uint32_t prev, next; /* the owner's list */
	uint32_t n, cap;
	uint32_t *recs;
	uint32_t *held; /* by entry: the slab it is charged to, or KVS_NONE
			 * (cache_pinslab.c) */
} lease;

/* An entry of kvs_cache.pslab (cache_pinslab.c): @pins of @uid's pins in
 * slab @slab of domain @dom's arena, @pages long; with slab KVS_NONE, the
 * pages of all the slabs @uid holds there (pins 1). pins 0: empty. */
struct pin_slab {
	uint32_t uid, dom, slab, pins, pages;
};

typedef struct ns {
	kvs_ns_info info;
	char *model, *adapter, *salt;
	uint32_t salt_len;
	uint32_t cls;     /* slot class in its domain's allocator */
	uint32_t dom;     /* trust domain: index in kvs_cache.doms */
	uint32_t tcls[KVS_TIER_MAX]; /* class in each slot tier, or NO_CLASS */
	uint32_t creator; /* the uid whose attach made it (charged == 1) */
	int charged;      /* 0: restored by a tier, no uid's */
	int gone;         /* a free id: never given (the namespaces file
			   * skipped it) or reclaimed (cache_ns.c) */
	uint64_t recs;    /* its table records: any tier, ghosts too */
	uint64_t born;    /* creation order (kvs_cache.ns_born) */
} ns;

/* A trust domain (DESIGN.md: "an arena is a trust domain"): one host arena
 * (memfd), its slot allocator and the eviction policy that orders its
 * evictable host records. Every client that maps the arena can read and
 * write all of it, so clients that must not see each other's KV are put in
 * different domains. With --tenant-arenas off there is one (index 0) for
 * everybody; with uid, one per peer uid, made on its first attach.
 * A record's domain is its namespace's: kvs_rec needs no field for it. */
typedef struct dom {
	uint32_t uid;       /* the peer uid it serves (uid mode) */
	uint32_t clients;   /* owners attached in it */
	kvs_arena *arena;
	kvs_slab *slab;
	kvs_policy *policy; /* host-tier records of this domain only */
	uint64_t arena_id;
} dom;

struct kvs_owner {
	uint32_t ns;      /* 0: not attached */
	uint32_t leases;  /* head of the owner's lease list */
	uint32_t nleases;
	uint64_t pins;    /* entries of its leases */
	uint32_t promo;   /* promotion in flight (cache_promote.c), or KVS_NONE */
	uint32_t verify;  /* verify job in flight in vtier, or KVS_NONE */
	kvs_tier_mod *vtier;
	uint8_t above;    /* the slot tier it maps (enum kvs_tier), or 0 */
	uint32_t uid;     /* the peer's uid: picks its domain (uid mode) */
	uint8_t op;       /* an operator's: leases not budgeted in slabs */
	kvs_cache_done_fn done; /* deferred lookup replies */
	void *done_arg;
	kvs_cache_verify_fn verify_fn; /* deferred verify replies */
	void *verify_arg;
};

/* A lookup asks a shared tier (the remote tier) about the blocks past its
 * hits in windows of this many: one window's probe in flight at a time,
 * sent as soon as the window before it was found whole, so that it
 * overlaps that window's fetches. */
#define KVS_PROBE_WINDOW 64

/* One lookup's promotion (cache_promote.c): reads from store tiers into
 * host slots, and blocks past the hits fetched from a shared tier. An
 * element of kvs_cache.promos: it stays put while the job runs. */
typedef struct promo {
	kvs_owner *owner; /* NULL once the connection is gone */
	uint32_t lease, n, cap, pending, cut, ns;
	int waited;       /* the lookup answered -EINPROGRESS */
	uint32_t *idx;    /* the lease's records, n of cap */
	int *res;         /* per position: 0, or the read's error */
	uint8_t *from;    /* per position: the store tier read (enum kvs_tier) */
	uint8_t *kind;    /* per position: in host, read, fetched */
	kvs_hash *want;   /* the chain past the hits (block hashes), nwant */
	uint32_t nwant;
	uint32_t probed;  /* want[0..probed) asked about (windows sent) */
	uint32_t wfrom;   /* the first block of the window asked last */
	int stop;         /* the chain was cut: no further window */
	int clipped;      /* nwant was cut to the owner's pin room */
	int query;        /* a query (kvs_cache_query): no lease, no records */
	uint32_t qcount;  /* a query's count so far: local, then windows */
	kvs_block *out;
} promo;

struct kvs_cache {
	kvs_counters *stats;
	/* Domain 0's, with --tenant-arenas off (the only mode tiers other
	 * than host run in); NULL in uid mode, where every use goes through
	 * the record's domain. */
	kvs_arena *arena;
	kvs_slab *slab;
	kvs_policy *policy;
	uint64_t arena_id;
	kvs_table *table;
	dom *doms;            /* maxdoms entries, ndoms in use; never moves */
	uint32_t ndoms, maxdoms;
	int by_uid;           /* --tenant-arenas uid */
	uint64_t dom_bytes;   /* host bytes of each domain's arena */
	int hugepages;        /* its arenas on 2 MiB huge pages */
	uint32_t page_bytes;
	char policy_name[32];
	uint32_t gen;         /* slot generations handed out */
	uint32_t max_leases;
	uint32_t max_pinned;  /* per owner; 0: no limit */
	uint32_t max_pinned_share; /* % of a domain's pages a uid's pinned
				    * slabs may take; 0: no limit */
	struct pin_slab *pslab; /* npslab of npslab_cap (a power of two) */
	uint32_t npslab, npslab_cap;
	uint64_t pslab_pages; /* the totals' pages, all uids */
	kvs_pool leases;      /* of lease; addresses never move */
	uint32_t active_leases;
	uint64_t pins;        /* sum of refs */
	uint32_t ghosts;      /* GHOST records */
	int leaf_only;        /* the policy evicts leaves only */
	ns *nss;              /* namespace id i+1 is nss[i] (gone: free) */
	uint32_t nns;
	uint32_t max_ns_per_uid; /* 0: no limit */
	uint32_t max_sizes_per_uid; /* block sizes; 0: no limit */
	uint64_t ns_born;     /* namespaces made so far */
	kvs_ratelimit rl_ns;  /* its refusals' log line */
	/* Tiers other than host (kvs_tier_ops.h), by kvs_tier value; stores[]
	 * lists the store tiers top down (demotion tries them in order). */
	kvs_tier_mod *tier[KVS_TIER_MAX];
	kvs_tier_mod *stores[KVS_TIER_MAX];
	uint32_t nstores;
	kvs_policy *tpol[KVS_TIER_MAX]; /* each slot tier's policy */
	uint64_t in_tier[KVS_TIER_MAX];  /* records by r->tier (NONE: 0) */
	/* Children in tier t of each record (kids[t][idx]), kept for the
	 * tiers whose leaf rule counts only their own children: a slot tier,
	 * and the host tier once a store tier is on. */
	uint8_t kids_on[KVS_TIER_MAX];
	uint32_t *kids[KVS_TIER_MAX];
	uint32_t nkids[KVS_TIER_MAX];
	kvs_pool promos;      /* of promo: promotions in flight */
	/* The fast path (kvs_cache_set_fast): its hooks, or NULL: none. */
	const kvs_cache_fast_ops *fast_ops;
	void *fast;
	/* operator's view (kvs_cache_admin.h, cache_admin.c) */
	kvs_cache_event_fn on_event;
	void *event_arg;
	kvs_cache_event evict_kind; /* what an eviction tells on_event */
	kvs_cache_resid_fn on_resid; /* where a record is loadable from */
	void *resid_arg;
	struct timespec born; /* atime counts seconds from here */
	uint32_t *atime;      /* by record: last store or hit (not in kvs_rec,
			       * which stays one cache line) */
	uint32_t natime;
	/* By record: where it hangs, set when it is linked (a parent outlives
	 * its children, as a ghost if need be), so that the operator's LIST
	 * and INSPECT know depth and root without walking the chain: @root
	 * is an ancestor (itself for a record without a parent) and @depth
	 * counts the blocks from @root down to it. A record linked after its
	 * children were (the SSD tier's warm load) was their root: they
	 * reach the true root through it (kvs_cache_rec_chain, which then
	 * points them at it). */
	struct cache_chain { uint32_t depth, root; } *chain;
	uint32_t nchain;
	struct cache_persist *persist; /* the metadata memfd, or NULL: off */
	struct persist_worker *pw;     /* its checksums' thread (with it) */
};

static inline kvs_rec *cache_rec(const kvs_cache *c, uint32_t idx)
{
	return kvs_table_rec(c->table, idx);
}

/* Record @idx was linked under @parent (KVS_NONE: it has none). */
static inline void cache_chain_link(kvs_cache *c, uint32_t idx, uint32_t parent)
{
	c->chain[idx] = parent == KVS_NONE ?
		(struct cache_chain){ 1, idx } :
		(struct cache_chain){ c->chain[parent].depth + 1,
				      c->chain[parent].root };
}

static inline lease *cache_lease(const kvs_cache *c, uint32_t s)
{
	return kvs_pool_at(&c->leases, s);
}

static inline promo *cache_promo(const kvs_cache *c, uint32_t ps)
{
	return kvs_pool_at(&c->promos, ps);
}

static inline ns *cache_ns(const kvs_cache *c, uint32_t ns_id)
{
	return &c->nss[ns_id - 1];
}

/* cache_count_lookup - @hit blocks found and @miss not, by a lookup of
 * namespace @ns_id (0: none), whatever path served it: blocks.lookup_* and
 * the namespace's share. The one place a lookup's blocks are counted. */
static inline void cache_count_lookup(kvs_cache *c, uint32_t ns_id,
				      uint64_t hit, uint64_t miss)
{
	c->stats->blocks_lookup_hit += (int64_t)hit;
	c->stats->blocks_lookup_miss += (int64_t)miss;
	if (ns_id >= 1 && ns_id <= c->nns) {
		c->nss[ns_id - 1].info.lookup_hit += hit;
		c->nss[ns_id - 1].info.lookup_miss += miss;
	}
}

static inline dom *cache_ns_dom(const kvs_cache *c, uint32_t ns_id)
{
	return &c->doms[c->nss[ns_id - 1].dom];
}

/* Whether kids[t] is kept (see struct kvs_cache). */
static inline int cache_kids_on(const kvs_cache *c, uint8_t t)
{
	return t < KVS_TIER_MAX && c->kids_on[t];
}

/* Whether tier @t is a slot tier (its own slots and policy). */
static inline int cache_slot_tier(const kvs_cache *c, uint8_t t)
{
	return t < KVS_TIER_MAX && c->tier[t] && c->tier[t]->ops->slot;
}

/* The host bytes at offset @off of the shared arena (--tenant-arenas off,
 * the only mode store tiers run in). */
static inline void *cache_host_ptr(const kvs_cache *c, uint64_t off)
{
	return (uint8_t *)kvs_arena_base(c->arena) + off;
}

/* Where record @r is, as a lookup or reserve answers it. */
static inline kvs_block cache_located(const kvs_rec *r, uint8_t status)
{
	return (kvs_block){ .offset = r->offset, .gen = r->gen,
			    .tier = r->tier, .status = status };
}

/* The fast path's hooks (kvs_cache_set_fast), each what the fast path
 * answers when there is none: nothing published, nothing held, batches of
 * one, nothing to let go or replay. */
static inline void cache_fast_publish(kvs_cache *c, uint32_t idx,
				      const kvs_rec *r)
{
	if (c->fast_ops)
		c->fast_ops->publish(c->fast, cache_ns_dom(c, r->ns)->arena_id,
				     idx, r);
}

static inline uint32_t cache_fast_hold_batch(kvs_cache *c, uint64_t arena_id,
					     const uint32_t *idx, uint32_t n,
					     uint8_t *keep)
{
	if (c->fast_ops)
		return c->fast_ops->hold_batch(c->fast, arena_id, idx, n, keep);
	memset(keep, 0, n);
	return 0;
}

static inline uint32_t cache_fast_batch_hint(kvs_cache *c, uint64_t arena_id)
{
	return c->fast_ops ? c->fast_ops->batch_hint(c->fast, arena_id) : 1;
}

static inline uint32_t cache_fast_unhold(kvs_cache *c)
{
	return c->fast_ops ? c->fast_ops->unhold(c->fast) : 0;
}

static inline uint32_t cache_fast_replay(kvs_cache *c)
{
	return c->fast_ops ? c->fast_ops->replay(c->fast) : 0;
}

/*
 * The files call down this order (layering.calls reads their calls off
 * the objects and fails on any circle among them):
 *
 *   cache_check -> cache_admin -> cache -> cache_tier -> cache_promote ->
 *   cache_ns -> cache_lease -> cache_evict -> cache_rec ->
 *   cache_pinslab, cache_persist*, policy*, table
 *
 * (cache_persist_adopt and cache_persist_rebuild, which build a cache's
 * state from a metadata memfd, sit above cache_ns.)
 */

/* cache_rec.c: the record-state core. */
/* cache_grow - grow the per-record array *@arr of @elem-byte entries
 * (*@cap of them) to @n entries, new ones zeroed: sized as the table's
 * records (kvs_table_capacity), it has their slack, a quarter at most.
 * Errors: -ENOMEM (unchanged). */
int cache_grow(void **arr, uint32_t *cap, size_t elem, uint32_t n);
/* cache_rec_room - record @idx was inserted: room for it in every kept
 * per-record array, and store tiers told (rec_new). Errors: -ENOMEM. */
int cache_rec_room(kvs_cache *c, uint32_t idx);
uint32_t cache_clock_s(const kvs_cache *c);
void cache_touch_atime(kvs_cache *c, uint32_t idx);
void cache_tell(kvs_cache *c, kvs_cache_event kind, uint32_t idx);
/* Tell the residency hook of record @idx (@gone: it is being removed). */
void cache_resid(kvs_cache *c, uint32_t idx, int gone);
int cache_evictable(const kvs_cache *c, uint32_t idx, const kvs_rec *r);
kvs_policy *cache_policy_of(const kvs_cache *c, uint32_t idx);
void cache_sync_evictable(kvs_cache *c, uint32_t idx);
uint32_t cache_kids(const kvs_cache *c, uint8_t t, uint32_t idx);
void cache_kids_add(kvs_cache *c, uint8_t t, uint32_t idx, int delta);
/* The store tier that can read @idx back now, or NULL. */
kvs_tier_mod *cache_store_of(const kvs_cache *c, uint32_t idx);
void cache_note(kvs_cache *c, uint8_t t, int what, uint64_t n);

/* cache_evict.c */
void cache_set_tier(kvs_cache *c, uint32_t idx, uint8_t tier);
/* Record @p lost a child that was in tier @t (0: none). */
void cache_child_gone(kvs_cache *c, uint32_t p, uint8_t t);
/* A record lost its bytes in every tier: drop it, or keep it as a ghost
 * while it has children. Its slot, if any, is already freed. */
void cache_forget(kvs_cache *c, uint32_t idx);
/* Record @idx leaves its tier (the policy's victim, or the operator's). */
void cache_evict(kvs_cache *c, uint32_t idx, int tell_it);
/* Host victims in batches (the fast path looks at its clients' pins once
 * per batch, service/fast/fastpins.c). cache_victim_take: @x leaves policy @pol
 * (as an eviction, as far as the policy knows) and takes one pin of ours,
 * so that the policy names the next one and a repeat is not taken twice.
 * cache_evict_batch: decide @v[0..n) (at most KVS_CACHE_HOLD_BATCH, all of
 * the domain of arena @arena_id, each taken): a victim a client pins is held
 * by the fast path and goes back to its policy (kept[i] = 1 when @kept is
 * not NULL), the others are evicted. Returns how many were evicted. */
void cache_victim_take(kvs_cache *c, kvs_policy *pol, uint32_t x);
uint32_t cache_evict_batch(kvs_cache *c, uint64_t arena_id, const uint32_t *v,
			   uint32_t n, uint8_t *kept);
/* A free slot for a block of namespace @ns_id in tier @t (host: in its
 * domain's arena), evicting that tier's victims as needed. */
int cache_make_room(kvs_cache *c, uint32_t ns_id, uint8_t t, uint64_t *off);
/* The class of namespace @ns_id's blocks in slot tier @t (made on first
 * use). Errors: KVS_E_LAYOUT, -ENOMEM. */
int cache_ns_tier_class(kvs_cache *c, uint32_t ns_id, uint8_t t, uint32_t *cls);
/* Give back record @idx's slot, in the arena of its tier. */
void cache_free_slot(kvs_cache *c, uint32_t idx);
/* Whether a store tier would keep @idx if the host tier evicted it. */
int cache_store_keeps(kvs_cache *c, uint32_t idx);
/* The facts of @idx a tier is told (kvs_tier_blk). */
void cache_blk(const kvs_cache *c, uint32_t idx, kvs_tier_blk *b);

/* cache_lease.c */
uint64_t cache_lease_id(const kvs_cache *c, uint32_t s);
int cache_lease_new(kvs_cache *c, kvs_owner *o, uint8_t kind, uint32_t *out);
int cache_lease_room(lease *l, uint32_t more);
void cache_lease_free(kvs_cache *c, uint32_t s);
int cache_lease_get(kvs_cache *c, kvs_owner *o, uint64_t id, uint32_t *out);
uint32_t cache_end_read(kvs_cache *c, uint32_t s);
/* Drop read lease @l's pin @i (its slab charge too); the entry stays. */
void cache_lease_unpin(kvs_cache *c, lease *l, uint32_t i);
/* Drop one pin of @idx (a record whose bytes are gone from every tier is
 * forgotten once unpinned). */
void cache_unpin(kvs_cache *c, uint32_t idx);
uint32_t cache_end_write(kvs_cache *c, uint32_t s, int commit);
/* Whether @more pins would take @o past --max-pinned-blocks (counted). */
int cache_over_pin_limit(kvs_cache *c, kvs_owner *o, uint64_t more);
/* Keep the first @hits records of read lease @s (unpin the rest), fill
 * @out; returns the lease id, 0 (lease freed) when @hits is 0. */
uint64_t cache_lookup_finish(kvs_cache *c, uint32_t s, uint32_t hits,
			     kvs_block *out);
/* Reserve one missing block after @prev into write lease @s (@ghost: its
 * ghost record, or KVS_NONE); @host_only: not in the owner's slot tier. */
int cache_reserve_one(kvs_cache *c, kvs_owner *o, uint32_t s, kvs_hash h,
		      uint32_t prev, uint32_t ghost, int host_only, uint32_t *idx);

/* cache_pinslab.c: the slab of host record @idx, which owner @o is about
 * to pin, charged to @o's uid unless @o is an operator (*held: the slab,
 * or KVS_NONE when nothing was charged: not in the host tier, or no
 * budget). Errors: KVS_E_LIMIT
 * (one slab more would pass the uid's share; counted), -ENOMEM; nothing
 * charged. cache_pinslab_drop gives back what a pin of @idx by @o was
 * charged (@held). */
int cache_pinslab_take(kvs_cache *c, const kvs_owner *o, uint32_t idx,
		       uint32_t *held);
void cache_pinslab_drop(kvs_cache *c, const kvs_owner *o, uint32_t idx,
			uint32_t held);
/* The same by host slot: offset @off in domain @d's arena. */
int cache_pinslab_charge(kvs_cache *c, const kvs_owner *o, uint32_t d,
			 uint64_t off, uint32_t *held);
void cache_pinslab_uncharge(kvs_cache *c, const kvs_owner *o, uint32_t d,
			    uint32_t held);
void cache_pinslab_free(kvs_cache *c);
/* For kvs_cache_check: the counts against the leases (KVS_E_INTERNAL). */
int cache_pinslab_check(const kvs_cache *c);

/* cache_ns.c */
int cache_dom_create(kvs_cache *c, uint32_t uid, uint32_t *out);
/* The same over @arena (NULL: a new one), which is the domain's from then
 * on, even on failure. */
int cache_dom_adopt(kvs_cache *c, uint32_t uid, kvs_arena *arena,
		    uint32_t *out);
void cache_dom_destroy(dom *d);
int cache_dom_of_owner(kvs_cache *c, const kvs_owner *o, uint32_t *out);
int cache_ns_check(const kvs_ns_desc *d, uint64_t *bytes);
uint32_t cache_ns_find(const kvs_cache *c, uint32_t d, const kvs_ns_desc *desc);
/* A new namespace in domain @d, with id @at (0: a free one, see ns_slot
 * in cache_ns.c); @from: the tier restoring it (not told of it again), or
 * NULL. */
int cache_ns_create(kvs_cache *c, const kvs_ns_desc *desc, uint32_t d,
		    const kvs_tier_mod *from, uint32_t at, uint32_t *id);
void cache_ns_free_all(kvs_cache *c);
/* Store tier @t, added after namespaces were made (an adoption,
 * kvs_persist.h), is told of each (ns_created), as if it had been there. */
void cache_ns_tell_store(kvs_cache *c, kvs_tier_mod *t);

/* cache_promote.c: read lease @s pins a chain some of whose records are
 * in a store tier only (host slots, reads), and/or the lookup goes on past
 * its hits with @want[0..nwant) (block hashes, copied), which a shared
 * tier is asked for, a window at a time (@clipped: the chain went on past
 * nwant, beyond the owner's pin room). Returns the hits (the chain cut at
 * the first block that could not be had) with *lease and @out filled, or
 * -EINPROGRESS: the owner's done callback answers later. */
int cache_promote(kvs_cache *c, kvs_owner *o, uint32_t s, kvs_block *out,
		  const kvs_hash *want, uint32_t nwant, int clipped,
		  uint64_t *lease);
/* cache_promote.c: the rest of a query's chain, @want[0..nwant) past its
 * @local hits, asked of the shared tier (kvs_cache_query). */
int cache_query_remote(kvs_cache *c, kvs_owner *o, const kvs_hash *want,
		       uint32_t nwant, uint32_t local);
/* The promotion jobs' arrays and pool, once the tiers are closed (their
 * reads land in the jobs). */
void cache_promos_free(kvs_cache *c);

/* cache_tier.c */
/* The record of (@ns_id, @hash), asking the store tiers that restore in the
 * background (store->find) when the table has none; KVS_NONE if nobody
 * has it. */
uint32_t cache_find(kvs_cache *c, uint32_t ns_id, kvs_hash hash);
void cache_tiers_owner_gone(kvs_cache *c, kvs_owner *o);
void cache_tiers_close(kvs_cache *c);

/* cache_admin.c */
/* The slot allocators of every domain, summed; *bytes, *resident: their
 * arenas'. */
void cache_host_stats(const kvs_cache *c, kvs_slab_stats *ss, uint64_t *bytes,
		      uint64_t *resident);

/* cache_persist.c: the metadata memfd (kvs_persist.h, persist_fmt.h). */
struct persist_hdr;
struct persist_rec;
struct persist_ns;
typedef struct cache_persist {
	int fd;
	uint8_t *base;
	uint64_t bytes;
	struct persist_hdr *hdr;
	int adopting; /* namespaces made by the rebuild are written already */
} cache_persist;
/* A new metadata memfd for @c (c->persist; left NULL when the geometry
 * cannot be described). Errors: -errno, -ENOMEM. */
int cache_persist_open(kvs_cache *c);
int cache_persist_map(int fd, uint64_t bytes, cache_persist **out);
void cache_persist_unmap(cache_persist *p);
void cache_persist_geometry(const kvs_cache *c, struct persist_hdr *h);
struct persist_rec *cache_persist_rec(const cache_persist *p, uint32_t idx);
struct persist_ns *cache_persist_ns_at(const cache_persist *p, uint32_t id);
/* The hooks: domain @d made, namespace @id made, record @idx reserved in
 * host (writing), its host bytes there (committed), or none any more. Each
 * is a no-op with persistence off. */
void cache_persist_dom(kvs_cache *c, uint32_t d);
void cache_persist_ns(kvs_cache *c, uint32_t id);
void cache_persist_writing(kvs_cache *c, uint32_t idx);
void cache_persist_commit(kvs_cache *c, uint32_t idx);
void cache_persist_free(kvs_cache *c, uint32_t idx);
/* The worker's turn done, then every record still committed verified in
 * the loop: each committed block is kept at the next start. */
void cache_persist_settle(kvs_cache *c);

/* cache_persist_worker.c: the thread that verifies committed records. */
typedef struct persist_worker persist_worker;
int cache_pw_start(persist_worker **out);
void cache_pw_stop(persist_worker *w); /* NULL: nothing */
/* Queue record @e's check: its state word @word, its bytes. -ENOSPC: the
 * queue is full (the record stays unverified). */
int cache_pw_queue(persist_worker *w, struct persist_rec *e, uint32_t word,
		   const uint8_t *bytes, uint64_t len);
uint32_t cache_pw_pending(persist_worker *w); /* queued or being hashed */
void cache_pw_drain(persist_worker *w);      /* until none is */
void cache_pw_set_hook(persist_worker *w, void (*hook)(void *), void *arg);
/* Hash @len @bytes and mark @e verified, if its state word is @word before
 * and after (@hook, if any, runs between). 1: marked. Any thread, one at
 * a time per record's sum. */
int cache_persist_verify(struct persist_rec *e, uint32_t word,
			 const uint8_t *bytes, uint64_t len,
			 void (*hook)(void *), void *arg);

#endif /* KVS_CACHE_INT_H */
