/*
 * cache_int.h - the cache's internals, shared by cache.c and the SSD-tier
 * glue (tier_ssd.c) only. Nothing else includes it.
 *
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_CACHE_INT_H
#define KVS_CACHE_INT_H

#include <time.h>

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
	uint32_t cls;
} ns;

struct kvs_owner {
	uint32_t ns;      /* 0: not attached */
	uint32_t leases;  /* head of the owner's lease list */
	uint32_t nleases;
	uint64_t pins;    /* entries of its leases */
	uint32_t promo;   /* promotion in flight (tier_ssd.c), or NONE */
	uint32_t verify;  /* verify in flight (tier_ssd.c), or NONE */
	int gpu;          /* attached with KVS_HELLO_GPU, the GPU tier on */
	kvs_cache_done_fn done; /* deferred lookup replies */
	void *done_arg;
};

struct kvs_cache {
	kvs_counters *stats;
	kvs_arena *arena;
	kvs_slab *slab;
	kvs_table *table;
	kvs_policy *policy;
	uint64_t arena_id;
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

/* The table is keyed by (namespace, hash): see ns_key() in cache.c. The mix
 * is an xor, so it also turns a key back into the block's hash. */
static inline kvs_hash cache_ns_key(uint32_t ns_id, kvs_hash h)
{
	h.lo ^= (uint64_t)ns_id * 0x9e3779b97f4a7c15ull;
	return h;
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
int cache_alloc_slot(kvs_cache *c, uint32_t cls, uint64_t *off);
void *cache_slot_ptr(kvs_cache *c, uint64_t off);
int cache_lease_new(kvs_cache *c, kvs_owner *o, uint8_t kind, uint32_t *out);
int cache_lease_room(lease *l, uint32_t more);
void cache_lease_free(kvs_cache *c, uint32_t s);
uint64_t cache_lease_id(const kvs_cache *c, uint32_t s);
int cache_ns_restore(kvs_cache *c, const kvs_wire_hello *h, uint32_t *id);

/* tier_gpu.c: the cache's view of the namespace's host class. */
static inline uint32_t cache_ns_cls(const kvs_cache *c, uint32_t ns_id)
{
	return c->nss[ns_id - 1].cls;
}

#endif /* KVS_CACHE_INT_H */
