/* tier_gpu.c - the GPU tier above the host tier (see tier_gpu.h). */
#define _GNU_SOURCE
#include "tier_gpu.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_gpu.h"
#include "kvs_log.h"
#include "kvs_types.h" /* kvs_strerror */
#include "kvs_slab.h"

typedef struct gpu_tier {
	kvs_tier_mod base; /* first: the cache's handle */
	kvs_gpu *eng;
	kvs_gpu_arena *arena;
	kvs_slab *slab;
	uint64_t blocks; /* committed blocks here (tier_gpu.blocks) */
	kvs_tier_gpu_stats counts; /* its section, tier_gpu.* (base.counters) */
} gpu_tier;

static gpu_tier *gpu_of(const kvs_tier_mod *t)
{
	return (gpu_tier *)t;
}

static void gpu_close(kvs_tier_mod *t)
{
	gpu_tier *g = gpu_of(t);

	kvs_slab_destroy(g->slab);
	kvs_gpu_arena_destroy(g->arena);
	kvs_gpu_close(g->eng);
	free(g);
}

static int gpu_slot_class(kvs_tier_mod *t, uint64_t bytes, uint32_t *cls)
{
	return kvs_slab_class(gpu_of(t)->slab, bytes, cls);
}

static void gpu_slot_class_put(kvs_tier_mod *t, uint32_t cls)
{
	kvs_slab_class_put(gpu_of(t)->slab, cls);
}

static int gpu_slot_alloc(kvs_tier_mod *t, uint32_t cls, uint64_t *off)
{
	return kvs_slab_alloc(gpu_of(t)->slab, cls, off);
}

static void gpu_slot_free(kvs_tier_mod *t, uint64_t off)
{
	kvs_slab_free(gpu_of(t)->slab, off);
}

static uint64_t gpu_slots_used(const kvs_tier_mod *t)
{
	kvs_slab_stats ss;

	kvs_slab_stats_get(gpu_of(t)->slab, &ss);
	return ss.slots_used;
}

/* Synchronous, on the loop thread (cuMemcpyDtoH; memcpy for the twin): a
 * block is at most a few MiB, which PCIe/NVLink moves in well under a
 * millisecond. An async version (a stream, completion through an eventfd)
 * is the next step; see docs/gpu.md. */
static int gpu_copy_to_host(kvs_tier_mod *t, uint64_t off, void *dst,
			    uint64_t bytes)
{
	return kvs_gpu_copy_to_host(gpu_of(t)->arena, off, dst, bytes);
}

static void gpu_map(const kvs_tier_mod *t, int *fd, uint64_t *bytes,
		    uint32_t *kind, uint32_t *device)
{
	const gpu_tier *g = gpu_of(t);

	*fd = kvs_gpu_arena_fd(g->arena);
	*bytes = kvs_gpu_arena_bytes(g->arena);
	*kind = (uint32_t)kvs_gpu_kind(g->eng);
	*device = (uint32_t)kvs_gpu_device(g->eng);
}

static uint64_t gpu_blocks(const kvs_tier_mod *t)
{
	return gpu_of(t)->blocks;
}

static void gpu_note(kvs_tier_mod *t, int what, uint64_t n)
{
	gpu_tier *g = gpu_of(t);
	kvs_tier_gpu_stats *st = &g->counts;

	switch (what) {
	case KVS_TIER_NOTE_RESERVED:
		st->reserved++;
		break;
	case KVS_TIER_NOTE_RESERVE_FALLBACK:
		st->reserve_fallbacks++;
		break;
	case KVS_TIER_NOTE_COMMITTED:
		g->blocks++;
		break;
	case KVS_TIER_NOTE_LOOKUP_HIT:
		st->lookup_hits += (int64_t)n;
		break;
	case KVS_TIER_NOTE_DEMOTED:
		g->blocks--;
		st->demotions++;
		st->demoted_bytes += (int64_t)n;
		break;
	case KVS_TIER_NOTE_DROPPED:
		g->blocks--;
		st->demote_dropped++;
		break;
	}
}

static void gpu_stats(kvs_tier_mod *t, kvs_counters *st)
{
	gpu_tier *g = gpu_of(t);
	kvs_tier_gpu_stats *c = &g->counts;
	kvs_slab_stats ss;

	kvs_slab_stats_get(g->slab, &ss);
	c->enabled = 1;
	c->blocks = (int64_t)g->blocks;
	c->engine = kvs_gpu_kind(g->eng);
	c->device = kvs_gpu_device(g->eng);
	c->bytes_total = (int64_t)kvs_gpu_arena_bytes(g->arena);
	c->bytes_used = (int64_t)ss.slot_bytes_used;
	c->slots_used = (int64_t)ss.slots_used;
}

#define KVS_STAT_TYPE kvs_tier_gpu_stats
KVS_STATS_SECTION_DEFINE(kvs_tier_gpu_section, "tier_gpu", KVS_TIER_GPU,
			 KVS_TIER_GPU_STATS);
#undef KVS_STAT_TYPE

static const kvs_tier_slot_ops gpu_slot_ops = {
	.class_of = gpu_slot_class,
	.class_put = gpu_slot_class_put,
	.alloc = gpu_slot_alloc,
	.free = gpu_slot_free,
	.used = gpu_slots_used,
	.blocks = gpu_blocks,
	.copy_to_host = gpu_copy_to_host,
	.map = gpu_map,
};

static const kvs_tier_ops gpu_ops = {
	.name = "GPU",
	.tier = KVS_TIER_GPU,
	.close = gpu_close,
	.note = gpu_note,
	.stats = gpu_stats,
	.stats_section = &kvs_tier_gpu_section,
	.slot = &gpu_slot_ops,
};

static int open_on(gpu_tier *g, int kind, int device,
		   const kvs_tier_gpu_config *cfg, char *why, size_t why_len)
{
	int rc = kvs_gpu_open(kind, device, &g->eng, why, why_len);

	if (rc < 0)
		return rc;
	rc = kvs_gpu_arena_create(g->eng, cfg->bytes, &g->arena);
	if (rc < 0) {
		snprintf(why, why_len, "cannot create a %" PRIu64 "-byte arena on "
			 "device %d: %s", cfg->bytes, device, kvs_strerror(rc));
		kvs_gpu_close(g->eng);
		g->eng = NULL;
	}
	return rc;
}

int kvs_tier_gpu_open(const kvs_tier_gpu_config *cfg, kvs_tier_mod **out,
		      char *why, size_t why_len)
{
	const char *fake = getenv("KVS_GPU_FAKE");
	int kind = fake && strcmp(fake, "1") == 0 ? KVS_GPU_FAKE : KVS_GPU_CUDA;
	gpu_tier *g;
	int rc;

	snprintf(why, why_len, "unknown");
	if (cfg->bytes == 0)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->base.ops = &gpu_ops;
	g->base.counters = &g->counts;
	if (cfg->device >= 0) {
		rc = open_on(g, kind, cfg->device, cfg, why, why_len);
	} else if (kind == KVS_GPU_FAKE) {
		rc = open_on(g, kind, 0, cfg, why, why_len);
	} else {
		/* auto: the first device that works. */
		int n = kvs_gpu_device_count(why, why_len);

		rc = n < 0 ? n : -ENODEV;
		if (n == 0)
			snprintf(why, why_len, "the CUDA driver sees no device");
		for (int d = 0; d < n && rc < 0; d++)
			rc = open_on(g, kind, d, cfg, why, why_len);
	}
	if (rc == 0)
		rc = kvs_slab_create(kvs_gpu_arena_bytes(g->arena), cfg->page_bytes,
				     &g->slab);
	if (rc < 0) {
		gpu_close(&g->base);
		return rc;
	}
	*out = &g->base;
	return 0;
}
