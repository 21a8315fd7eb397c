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

#define NONE KVS_REC_NONE
#define NO_CLASS UINT32_MAX

struct kvs_tier_gpu {
	kvs_gpu *eng;
	kvs_gpu_arena *arena;
	kvs_slab *slab;
	kvs_policy *policy;
	uint32_t *kids;   /* by record: children in the GPU tier */
	uint32_t nkids;
	uint32_t *cls;    /* by namespace id - 1: GPU class, or NO_CLASS */
	uint32_t ncls;
};

static kvs_rec *rec(const kvs_cache *c, uint32_t idx)
{
	return cache_rec(c, idx);
}

uint32_t tier_gpu_kids(const kvs_cache *c, uint32_t idx)
{
	const kvs_tier_gpu *t = c->gpu;

	return idx < t->nkids ? t->kids[idx] : 0;
}

void tier_gpu_kids_add(kvs_cache *c, uint32_t idx, int delta)
{
	kvs_tier_gpu *t = c->gpu;

	if (idx >= t->nkids) {
		uint32_t n = t->nkids ? t->nkids : 1024;
		uint32_t *nk;

		while (n <= idx)
			n *= 2;
		nk = realloc(t->kids, (size_t)n * sizeof(*nk));
		if (!nk) {
			/* Counts only grow from 0 here; losing one makes a
			 * parent look like a leaf, never a leaf a parent. */
			kvs_err("GPU tier: out of memory for child counts");
			return;
		}
		memset(nk + t->nkids, 0, (size_t)(n - t->nkids) * sizeof(*nk));
		t->kids = nk;
		t->nkids = n;
	}
	t->kids[idx] += (uint32_t)delta;
}

kvs_policy *tier_gpu_policy(const kvs_cache *c)
{
	return c->gpu->policy;
}

static int ns_class(kvs_cache *c, uint32_t ns_id, uint32_t *out)
{
	kvs_tier_gpu *t = c->gpu;
	int rc;

	if (ns_id > t->ncls) {
		uint32_t *nc = realloc(t->cls, (size_t)c->nns * sizeof(*nc));

		if (!nc)
			return -ENOMEM;
		for (uint32_t i = t->ncls; i < c->nns; i++)
			nc[i] = NO_CLASS;
		t->cls = nc;
		t->ncls = c->nns;
	}
	if (t->cls[ns_id - 1] == NO_CLASS) {
		rc = kvs_slab_class(t->slab, c->nss[ns_id - 1].info.block_bytes,
				    &t->cls[ns_id - 1]);
		if (rc < 0) {
			t->cls[ns_id - 1] = NO_CLASS;
			return rc == -ENOMEM ? rc : KVS_E_LAYOUT;
		}
	}
	*out = t->cls[ns_id - 1];
	return 0;
}

int tier_gpu_alloc(kvs_cache *c, uint32_t ns_id, uint64_t *off, uint16_t *cls)
{
	kvs_tier_gpu *t = c->gpu;
	uint32_t k;
	int rc = ns_class(c, ns_id, &k);

	if (rc < 0)
		return rc;
	for (int n = 0; n <= MAX_EVICTIONS_PER_SLOT; n++) {
		uint32_t v;

		rc = kvs_slab_alloc(t->slab, k, off);
		if (rc != -ENOSPC) {
			*cls = (uint16_t)k;
			return rc;
		}
		v = kvs_policy_victim(t->policy, k);
		if (v == NONE)
			v = kvs_policy_victim(t->policy, KVS_CLASS_ANY);
		if (v == NONE)
			return KVS_E_FULL;
		kvs_policy_del(t->policy, v);
		tier_gpu_demote(c, v);
	}
	return KVS_E_FULL;
}

void tier_gpu_free(kvs_cache *c, uint64_t off)
{
	kvs_slab_free(c->gpu->slab, off);
}

/* The copy is synchronous, on the loop thread (cuMemcpyDtoH; memcpy for the
 * twin): a block is at most a few MiB, which PCIe/NVLink moves in well under
 * a millisecond. An async version (a stream, completion through an eventfd)
 * is the next step; see docs/gpu.md. */
void tier_gpu_demote(kvs_cache *c, uint32_t idx)
{
	kvs_tier_gpu *t = c->gpu;
	kvs_rec *r = rec(c, idx);
	uint32_t ns_id = r->ns;
	uint64_t goff = r->offset, hoff = 0;
	uint64_t bytes = c->nss[ns_id - 1].info.block_bytes;
	int rc;

	/* A host slot first (may evict host blocks, never this one: it is in
	 * no policy now), then the copy, then the GPU slot goes. */
	rc = cache_alloc_slot(c, ns_id, &hoff);
	if (rc == 0) {
		rc = kvs_gpu_copy_to_host(t->arena, goff, cache_slot_ptr(c, hoff),
					  bytes);
		if (rc < 0) {
			kvs_err("GPU tier: demotion copy failed: %s", kvs_strerror(rc));
			kvs_slab_free(c->slab, hoff);
		}
	}
	kvs_slab_free(t->slab, goff);
	r = rec(c, idx);
	c->stats->tier_gpu_blocks--;
	if (rc < 0) {
		c->stats->tier_gpu_demote_dropped++;
		c->stats->blocks_evicted++;
		c->nss[ns_id - 1].info.blocks--;
		cache_forget(c, idx);
		return;
	}
	r->offset = hoff;
	r->cls = (uint16_t)cache_ns_cls(c, ns_id);
	r->gen = ++c->gen;
	cache_set_tier(c, idx, KVS_TIER_HOST);
	cache_sync_evictable(c, idx);
	c->stats->tier_gpu_demotions++;
	c->stats->tier_gpu_demoted_bytes += (int64_t)bytes;
	kvs_debug("GPU tier: demoted block %016llx%016llx to host",
		  (unsigned long long)r->hash.hi, (unsigned long long)r->hash.lo);
}

uint64_t tier_gpu_slots_used(const kvs_cache *c)
{
	kvs_slab_stats ss;

	kvs_slab_stats_get(c->gpu->slab, &ss);
	return ss.slots_used;
}

void tier_gpu_stats_fill(kvs_cache *c)
{
	kvs_tier_gpu *t = c->gpu;
	kvs_counters *st = c->stats;
	kvs_slab_stats ss;

	kvs_slab_stats_get(t->slab, &ss);
	st->tier_gpu_enabled = 1;
	st->tier_gpu_engine = kvs_gpu_kind(t->eng);
	st->tier_gpu_device = kvs_gpu_device(t->eng);
	st->tier_gpu_bytes_total = (int64_t)kvs_gpu_arena_bytes(t->arena);
	st->tier_gpu_bytes_used = (int64_t)ss.slot_bytes_used;
	st->tier_gpu_slots_used = (int64_t)ss.slots_used;
}

void tier_gpu_close(kvs_cache *c)
{
	kvs_tier_gpu *t = c->gpu;

	if (!t)
		return;
	kvs_policy_destroy(t->policy);
	kvs_slab_destroy(t->slab);
	kvs_gpu_arena_destroy(t->arena);
	kvs_gpu_close(t->eng);
	free(t->kids);
	free(t->cls);
	free(t);
	c->gpu = NULL;
}

/* ---- kvs_cache.h ------------------------------------------------------ */

static int open_on(kvs_tier_gpu *t, int kind, int device,
		   const kvs_cache_gpu_config *cfg, char *why, size_t why_len)
{
	int rc = kvs_gpu_open(kind, device, &t->eng, why, why_len);

	if (rc < 0)
		return rc;
	rc = kvs_gpu_arena_create(t->eng, cfg->bytes, &t->arena);
	if (rc < 0) {
		snprintf(why, why_len, "cannot create a %" PRIu64 "-byte arena on "
			 "device %d: %s", cfg->bytes, device, kvs_strerror(rc));
		kvs_gpu_close(t->eng);
		t->eng = NULL;
	}
	return rc;
}

int kvs_cache_gpu_open(kvs_cache *c, const kvs_cache_gpu_config *cfg,
		       char *why, size_t why_len)
{
	const char *fake = getenv("KVS_GPU_FAKE");
	int kind = fake && strcmp(fake, "1") == 0 ? KVS_GPU_FAKE : KVS_GPU_CUDA;
	kvs_tier_gpu *t;
	int rc;

	snprintf(why, why_len, "unknown");
	if (c->gpu)
		return -EEXIST;
	if (c->by_uid) {
		/* One GPU arena for every domain would mix tenants. */
		snprintf(why, why_len, "not supported yet with --tenant-arenas uid");
		return -ENODEV;
	}
	if (cfg->bytes == 0)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	if (cfg->device >= 0) {
		rc = open_on(t, kind, cfg->device, cfg, why, why_len);
	} else if (kind == KVS_GPU_FAKE) {
		rc = open_on(t, kind, 0, cfg, why, why_len);
	} else {
		/* auto: the first device that works. */
		int n = kvs_gpu_device_count(why, why_len);

		rc = n < 0 ? n : -ENODEV;
		if (n == 0)
			snprintf(why, why_len, "the CUDA driver sees no device");
		for (int d = 0; d < n && rc < 0; d++)
			rc = open_on(t, kind, d, cfg, why, why_len);
	}
	if (rc == 0)
		rc = kvs_slab_create(kvs_gpu_arena_bytes(t->arena), cfg->page_bytes,
				     &t->slab);
	if (rc == 0)
		rc = kvs_policy_create(kvs_policy_name(c->policy), c->table,
				       &t->policy);
	if (rc < 0) {
		c->gpu = t;
		tier_gpu_close(c);
		return rc;
	}
	c->gpu = t;
	return 0;
}

int kvs_cache_gpu_fd(const kvs_cache *c)
{
	return c->gpu ? kvs_gpu_arena_fd(c->gpu->arena) : -1;
}

uint64_t kvs_cache_gpu_bytes(const kvs_cache *c)
{
	return c->gpu ? kvs_gpu_arena_bytes(c->gpu->arena) : 0;
}

uint32_t kvs_cache_gpu_kind(const kvs_cache *c)
{
	return c->gpu ? (uint32_t)kvs_gpu_kind(c->gpu->eng) : 0;
}

uint32_t kvs_cache_gpu_device(const kvs_cache *c)
{
	return c->gpu ? (uint32_t)kvs_gpu_device(c->gpu->eng) : 0;
}
