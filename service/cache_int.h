/*
 * cache_int.h - the cache's internals, shared by cache.c and the SSD-tier
 * glue (tier_ssd.c) only. Nothing else includes it.
 *
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_CACHE_INT_H
#define KVS_CACHE_INT_H

#include <time.h>

#include "cache_key.h" /* cache_ns_key */
#include "kvs_arena.h"
#include "kvs_cache.h"
#include "kvs_cache_admin.h"
#include "kvs_policy.h"
#include "kvs_slab.h"
#include "kvs_table.h"

/* An eviction loop that frees other classes' slots hoping to empty a whole
 * slab gives up after this many victims rather than flush the cache. */
#define MAX_EVICTIONS_PER_SLOT 4096

typedef struct kvs_tier_ssd kvs_tier_ssd;
typedef struct kvs_tier_gpu kvs_tier_gpu;

enum lease_kind { LEASE_FREE = 0, LEASE_READ = 1, LEASE_WRITE = 2 };

typedef struct lease {
	uint32_t gen;
	uint8_t kind;
	kvs_owner *owner;
	uint32_t prev, next; /* owner's list, or the free list (next) */
	uint32_t n, cap;
	uint32_t *recs;
} lease;

typedef struct ns {
	kvs_ns_info info;
	char *model, *adapter, *salt;
	uint32_t salt_len;
	uint32_t cls;     /* slot class in its domain's allocator */
	uint32_t dom;     /* trust domain: index in kvs_cache.doms */
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
	uint32_t promo;   /* promotion in flight (tier_ssd.c), or NONE */
	uint32_t verify;  /* verify in flight (tier_ssd.c), or NONE */
	int gpu;          /* attached with KVS_HELLO_GPU, the GPU tier on */
	uint32_t uid;     /* the peer's uid: picks its domain (uid mode) */
	kvs_cache_done_fn done; /* deferred lookup replies */
	void *done_arg;
};

struct kvs_cache {
	kvs_counters *stats;
	/* Domain 0's, with --tenant-arenas off (the only mode the SSD and GPU
	 * tiers run in, so tier_ssd.c and tier_gpu.c use these); NULL in uid
	 * mode, where every use goes through the record's domain. */
	kvs_arena *arena;
	kvs_slab *slab;
	kvs_policy *policy;
	uint64_t arena_id;
	kvs_table *table;
	dom *doms;            /* maxdoms entries, ndoms in use; never moves */
	uint32_t ndoms, maxdoms;
	int by_uid;           /* --tenant-arenas uid */
	uint64_t dom_bytes;   /* host bytes of each domain's arena */
	uint32_t page_bytes;
	char policy_name[32];
	uint32_t gen;         /* slot generations handed out */
	uint32_t max_leases;
	uint32_t max_pinned;  /* per owner; 0: no limit */
	lease *leases;
	uint32_t nleases, free_lease, active_leases;
	uint64_t pins;        /* sum of refs */
	uint32_t ghosts;      /* GHOST records */
	int leaf_only;        /* the policy evicts leaves only */
	ns *nss;              /* namespace id i+1 is nss[i] */
	uint32_t nns;
	kvs_tier_ssd *ssd;    /* NULL when the SSD tier is off */
	kvs_tier_gpu *gpu;    /* NULL when the GPU tier is off */
	struct kvs_fast *fast; /* the fast path's index and pins, or NULL */
	/* operator's view (kvs_cache_admin.h; code at the end of cache.c) */
	kvs_cache_event_fn on_event;
	void *event_arg;
	uint32_t evict_kind;  /* what an eviction tells on_event */
	struct timespec born; /* atime counts seconds from here */
	uint32_t *atime;      /* by record: last store or hit (not in kvs_rec,
			       * which stays one cache line) */
	uint32_t natime;
};


static inline kvs_rec *cache_rec(const kvs_cache *c, uint32_t idx)
{
	return kvs_table_rec(c->table, idx);
}


/* cache.c, for tier_ssd.c and tier_gpu.c */
kvs_policy *cache_policy_of(const kvs_cache *c, uint32_t idx);
void cache_sync_evictable(kvs_cache *c, uint32_t idx);
void cache_set_tier(kvs_cache *c, uint32_t idx, uint8_t tier);
/* Keep the first @hits records of read lease @s (unpin the rest), fill
 * @out; returns the lease id, 0 (lease freed) when @hits is 0. */
uint64_t cache_lookup_finish(kvs_cache *c, uint32_t s, uint32_t hits,
			     kvs_block *out);
/* A record lost its bytes in every tier: drop it, or keep it as a ghost
 * while it has children. Its slot, if any, is already freed. */
void cache_forget(kvs_cache *c, uint32_t idx);
/* A free host slot for a block of namespace @ns_id, in its domain. */
int cache_alloc_slot(kvs_cache *c, uint32_t ns_id, uint64_t *off);
/* Domain 0's arena (tier_ssd.c, tier_gpu.c: --tenant-arenas off only). */
void *cache_slot_ptr(kvs_cache *c, uint64_t off);
int cache_lease_new(kvs_cache *c, kvs_owner *o, uint8_t kind, uint32_t *out);
int cache_lease_room(lease *l, uint32_t more);
void cache_lease_free(kvs_cache *c, uint32_t s);
uint64_t cache_lease_id(const kvs_cache *c, uint32_t s);
int cache_ns_restore(kvs_cache *c, const kvs_wire_hello *h, uint32_t *id);

static inline dom *cache_ns_dom(const kvs_cache *c, uint32_t ns_id)
{
	return &c->doms[c->nss[ns_id - 1].dom];
}

/* tier_gpu.c: the cache's view of the namespace's host class. */
static inline uint32_t cache_ns_cls(const kvs_cache *c, uint32_t ns_id)
{
	return c->nss[ns_id - 1].cls;
}

#endif /* KVS_CACHE_INT_H */
