/*
 * tier_gpu.h - the GPU tier: a slot tier (kvs_tier.h) above the host tier,
 * over the GPU arena engine (storage/gpu.c). Workers that attach asking
 * for it (KVS_HELLO_GPU) map its arena and reserve there first; the cache
 * demotes its victims to the host tier.
 *
 * Its counters are the tier_gpu.* stats. Only the daemon's tier table
 * (tiers.c) and tests include this header.
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_TIER_GPU_H
#define KVS_TIER_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_tier.h"

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
