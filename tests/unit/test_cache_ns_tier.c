/*
 * test_cache_ns_tier - a reclaimed namespace gives back its class in a slot
 * tier (service/cache/cache_ns.c, ns_release), on the GPU tier's CPU twin
 * (KVS_GPU_FAKE=1).
 *
 * One uid with a namespace cap of 4 attaches 300 layouts of distinct block
 * sizes one after the other, each mapping the GPU tier, reserving one
 * block there (which takes the size's class in the GPU tier's allocator)
 * and aborting it, then leaving: each namespace is idle and empty, so the
 * next one past the cap reclaims the oldest. The GPU tier's allocator
 * serves 256 classes: without the class given back, the 257th size found
 * none and its reserve went to host RAM; with it, all 300 reserves are
 * GPU slots and the allocator holds no more classes than live namespaces.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cache.h"
#include "kvs_check.h"
#include "kvs_log.h"
#include "tier_gpu.h"

#define PAGE (64u << 10)
#define SIZES 300
#define CAP 4

static kvs_counters stats;

int main(void)
{
	kvs_cache_config cfg = { .host_bytes = 16u << 20, .page_bytes = PAGE,
				 .policy = "leaf-lru", .max_leases = 64,
				 .max_ns_per_uid = CAP };
	kvs_tier_gpu_config gc = { .device = -1, .bytes = 8u << 20,
				   .page_bytes = PAGE };
	kvs_tier_mod *gt = NULL;
	kvs_cache *c = NULL;
	uint32_t on_gpu = 0, first_host = 0;
	char why[256];

	kvs_log_set_level(KVS_LOG_WARN);
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	setenv("KVS_GPU_FAKE", "1", 1);
	CHECK_EQ(kvs_tier_gpu_open(&gc, &gt, why, sizeof(why)), 0);
	unsetenv("KVS_GPU_FAKE");
	if (!c || !gt)
		return check_summary("test_cache_ns_tier");
	CHECK_EQ(kvs_cache_tier_add(c, gt), 0);
	for (uint32_t k = 1; k <= SIZES; k++) {
		/* 256 bytes a token: K and V of one head of 64 fp16. */
		kvs_ns_desc d = { .model = "gpu-sizes", .adapter = "",
				  .layers = 1, .kv_heads = 1, .head_dim = 64,
				  .block_tokens = k, .tp_size = 1,
				  .dtype = KVS_DTYPE_FP16 };
		kvs_owner *o = kvs_cache_owner_new(c);
		kvs_hash h = { 0x1000u + k, 0x77u };
		uint64_t bb, lease = 0;
		kvs_block b;
		uint32_t ns;

		kvs_cache_owner_set_uid(o, 1000);
		CHECK_EQ(kvs_cache_attach(c, o, &d, 1, &ns, &bb), 0);
		CHECK_EQ(kvs_cache_reserve(c, o, &h, 1, &lease, &b), 1);
		if (b.tier == KVS_TIER_GPU)
			on_gpu++;
		else if (!first_host)
			first_host = k;
		CHECK(kvs_cache_abort(c, o, lease) >= 0);
		kvs_cache_owner_free(c, o);
		CHECK_EQ(kvs_cache_check(c), 0);
	}
	printf("test_cache_ns_tier: %u of %u block sizes reserved in the GPU "
	       "tier (first one in host RAM: size %u), %lld namespaces "
	       "reclaimed\n", on_gpu, SIZES, first_host,
	       (long long)stats.namespaces_reclaimed);
	CHECK_EQ(on_gpu, SIZES);
	CHECK_EQ(stats.namespaces_reclaimed, SIZES - CAP);
	kvs_cache_destroy(c);
	return check_summary("test_cache_ns_tier");
}
