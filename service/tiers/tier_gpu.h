/*
 * tier_gpu.h - the GPU tier: a slot tier (kvs_tier_ops.h) above the host tier,
 * over the GPU arena engine (storage/gpu/gpu.c). Workers that attach asking
 * for it (KVS_HELLO_GPU) map its arena and reserve there first; the cache
 * demotes its victims to the host tier.
 *
 * Its counters are the tier_gpu.* stats. Only the daemon's tier table
 * (tiers_table.c) and tests include this header.
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_TIER_GPU_H
#define KVS_TIER_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_tier_ops.h"

/* Its stats section (tier_gpu.*): X(name, kind, help) lines (kvs_stats.h),
 * the tier's kvs_tier_gpu_stats, described by kvs_tier_gpu_section. */
#define KVS_TIER_GPU_STATS(X)                                                 \
	X(enabled, GAUGE, "1 when the GPU tier is on")                        \
	X(engine, GAUGE, "1 CUDA, 2 the fake device (tests)")                 \
	X(device, GAUGE, "device ordinal of the GPU arena")                   \
	X(bytes_total, GAUGE, "GPU arena bytes")                              \
	X(bytes_used, GAUGE, "bytes of allocated GPU slots")                  \
	X(slots_used, GAUGE, "allocated GPU slots (blocks+writing)")          \
	X(blocks, GAUGE, "committed blocks in the GPU tier")                  \
	X(reserved, COUNTER, "slots handed out in the GPU tier")              \
	X(reserve_fallbacks, COUNTER, "GPU reserves served by host")          \
	X(demotions, COUNTER, "blocks moved from GPU to host")                \
	X(demoted_bytes, COUNTER, "bytes copied GPU -> host")                 \
	X(demote_dropped, COUNTER, "GPU evictions with no host slot")         \
	X(lookup_hits, COUNTER, "lookup hits in the GPU tier")

typedef struct kvs_tier_gpu_stats {
	KVS_TIER_GPU_STATS(KVS_STAT_FIELD)
} kvs_tier_gpu_stats;
extern const kvs_stats_section kvs_tier_gpu_section;

typedef struct kvs_tier_gpu_config {
	int device;          /* ordinal, or -1: the first usable device */
	uint64_t bytes;      /* rounded up to the device's granularity */
	uint32_t page_bytes; /* slot allocator page */
} kvs_tier_gpu_config;

/*
 * kvs_tier_gpu_open - the engine (the CPU twin when $KVS_GPU_FAKE is "1",
 * tests only; else CUDA through the run-time loaded driver) and its
 * exported arena, ready for kvs_cache_tier_add().
 * @why: on failure, one line saying why.
 * Errors: -ENODEV (no driver, no such device, unsupported: see @why),
 * -ENOMEM, -EIO, -EINVAL.
 * Ownership: *out is the caller's until kvs_cache_tier_add() takes it
 * (or its ops->close()).
 */
int kvs_tier_gpu_open(const kvs_tier_gpu_config *cfg, kvs_tier_mod **out,
		      char *why, size_t why_len);

#endif /* KVS_TIER_GPU_H */
