/*
 * tier_gpu.h - the GPU tier's glue between the block cache (cache.c) and the
 * GPU arena engine (storage/gpu.c). Internal to the cache: only cache.c and
 * tier_gpu.c include it; the daemon sees kvs_cache_gpu_* in kvs_cache.h.
 *
 * The tier has its own arena, slot allocator and eviction policy (an
 * instance of the daemon's policy over the same table: a record is in the
 * policy of the tier it is in). Per record it keeps one count: children in
 * the GPU tier, so that "leaf" for GPU eviction means "no child in the GPU
 * tier": a parent whose children were demoted may be demoted too, and the
 * prefix stays whole across the tiers.
 *
 * Every function here requires c->gpu (the tier on), except tier_gpu_close.
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_TIER_GPU_H
#define KVS_TIER_GPU_H

#include "cache_int.h"

/* Children of @idx in the GPU tier, and a change of that count. */
uint32_t tier_gpu_kids(const kvs_cache *c, uint32_t idx);
void tier_gpu_kids_add(kvs_cache *c, uint32_t idx, int delta);
kvs_policy *tier_gpu_policy(const kvs_cache *c);

/*
 * tier_gpu_alloc - a GPU slot for a block of namespace @ns_id, demoting GPU
 * victims to the host tier as needed; sets *off and *cls (the GPU
 * allocator's class). Errors: KVS_E_FULL (nothing evictable), KVS_E_LAYOUT
 * (the block does not fit the GPU arena), -ENOMEM: the caller uses the host
 * tier instead.
 */
int tier_gpu_alloc(kvs_cache *c, uint32_t ns_id, uint64_t *off,
		   uint16_t *cls);
/* tier_gpu_free - give back the GPU slot at @off. */
void tier_gpu_free(kvs_cache *c, uint64_t off);

/*
 * tier_gpu_demote - move READY @idx (out of the GPU policy already) to the
 * host tier: a host slot (evicting there as needed), a synchronous copy
 * device -> host, the GPU slot freed. When no host slot can be had, the
 * block is dropped (a ghost if it has children), counted in
 * tier_gpu.demote_dropped.
 */
void tier_gpu_demote(kvs_cache *c, uint32_t idx);

/* tier_gpu_slots_used - allocated GPU slots, for kvs_cache_check(). */
uint64_t tier_gpu_slots_used(const kvs_cache *c);
void tier_gpu_stats_fill(kvs_cache *c);
/* tier_gpu_close - free the arena and the engine. No-op when off. */
void tier_gpu_close(kvs_cache *c);

#endif /* KVS_TIER_GPU_H */
