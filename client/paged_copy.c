/*
 * paged_copy.c - kvs_kv_store() and kvs_kv_load(): one layer of blocks
 * between an engine's paged cache and the tiers' arenas, through the kernels' C twin
 * (host memory) or their CUDA ops (device memory). The daemon is not asked:
 * the blocks come from a lookup or reserve the caller made. And
 * kvs_report(): an engine's counts of what it did with them, for the
 * daemon's stats.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_client_int.h"
#include "kvs_cuda.h"
#include "kvs_kv_copy.h"
#include "kvs_wire.h"
#include "kvshare.h"

uint32_t kvs_version(void)
{
	return (uint32_t)KVSHARE_VERSION_MAJOR << 16 | KVSHARE_VERSION_MINOR;
}

int kvs_report(kvs_client *c, const kvs_engine_report *delta)
{
	uint8_t req[KVS_WIRE_REPORT_SIZE];
	const uint8_t *reply;
	uint32_t rlen;
	int rc;

	if (!c || !delta)
		return -EINVAL;
	kvs_wire_report_encode(delta, req, sizeof(req));
	rc = kvs__rpc(c, KVS_OP_REPORT, req, sizeof(req), &reply, &rlen);
	return rc == KVS_E_OPCODE ? KVS_E_PROTO : rc < 0 ? rc : 0;
}

static int engine_dtype_ok(kvs_dtype d)
{
	return d == KVS_DTYPE_FP16 || d == KVS_DTYPE_BF16 || d == KVS_DTYPE_FP32;
}

int kvs_paged_cache_init(const kvs_client *c, kvs_paged_kind kind,
			 uint32_t num_pages, uint32_t page_tokens,
			 kvs_dtype dtype, kvs_paged_cache *out)
{
	const kvs_layout *l;
	int64_t D, H, T, N;

	if (!c || !out)
		return -EINVAL;
	l = kvs__layout(c);
	if (!l)
		return KVS_E_NOTATTACHED;
	if (!num_pages || !page_tokens || !engine_dtype_ok(dtype))
		return -EINVAL;
	D = l->head_dim, H = l->kv_heads, T = page_tokens, N = num_pages;
	*out = (kvs_paged_cache){ .num_pages = num_pages,
				  .page_tokens = page_tokens, .dtype = dtype };
	switch (kind) {
	case KVS_PAGED_NHD:
		out->stride_kv = N * T * H * D, out->stride_page = T * H * D;
		out->stride_token = H * D, out->stride_head = D;
		return 0;
	case KVS_PAGED_HND:
		out->stride_kv = N * H * T * D, out->stride_page = H * T * D;
		out->stride_token = D, out->stride_head = T * D;
		return 0;
	case KVS_PAGED_CPU:
		out->stride_kv = T * D, out->stride_page = H * 2 * T * D;
		out->stride_token = D, out->stride_head = 2 * T * D;
		return 0;
	case KVS_PAGED_NHD_KV_INNER:
		out->stride_kv = T * H * D, out->stride_page = 2 * T * H * D;
		out->stride_token = H * D, out->stride_head = D;
		return 0;
	}
	return -EINVAL;
}

/* One tier's jobs of a call, gathered so that one kernel call moves them. */
struct jobs {
	uint64_t *offsets;
	int32_t *page_ids;
	uint32_t count;
};

/* The CUDA op reads its arrays on the device: stage them there, run it and
 * wait, so that the staging can be freed and the caller's pages are final
 * when the call returns. */
static int run_device(kvs_kv_cache *kc, kvs_kv_blocks *kb, int store,
		      void *stream)
{
	uint32_t ppb = kb->block_tokens / kc->page_tokens;
	size_t np = (size_t)kc->layers * sizeof(void *);
	size_t no = (size_t)kb->count * sizeof(uint64_t);
	size_t ni = (size_t)kb->count * ppb * sizeof(int32_t);
	void *const *host_ptrs = kc->layer_ptrs;
	const uint64_t *host_off = kb->offsets;
	const int32_t *host_ids = kb->page_ids;
	uint8_t *dev = NULL;
	int rc;

	rc = kvs_cuda_malloc((void **)&dev, np + no + ni);
	if (rc < 0)
		return rc;
	if ((rc = kvs_cuda_copy(dev, host_ptrs, np)) < 0 ||
	    (rc = kvs_cuda_copy(dev + np, host_off, no)) < 0 ||
	    (rc = kvs_cuda_copy(dev + np + no, host_ids, ni)) < 0)
		goto out;
	kc->layer_ptrs = (void *const *)dev;
	kb->offsets = (const uint64_t *)(dev + np);
	kb->page_ids = (const int32_t *)(dev + np + no);
	rc = store ? kvs_kv_scatter_cuda(kc, kb, stream)
		   : kvs_kv_gather_cuda(kc, kb, stream);
	if (rc == 0)
		rc = kvs_cuda_sync(stream);
	kc->layer_ptrs = host_ptrs;
	kb->offsets = host_off;
	kb->page_ids = host_ids;
out:
	kvs_cuda_free(dev);
	return rc;
}

/* The arena a kernel addresses @tier's blocks through. */
static int tier_arena(kvs_client *c, int tier, int on_device, uint8_t **base,
		      uint64_t *bytes)
{
	int rc = kvs__tier_arena(c, tier, base, bytes);

	if (rc < 0)
		return rc;
	if (tier == KVS_TIER_GPU && !on_device)
		return -EINVAL; /* device memory is not the host's to touch */
	if (tier == KVS_TIER_HOST && on_device)
		return kvs__host_arena_device(c, base);
	return 0;
}

/* Every job's ids and blocks against their bounds, before anything moves:
 * a call that fails has written nothing, whichever tier failed. */
static int check_jobs(kvs_client *c, const kvs_paged_cache *pc,
		      const kvs_block *blocks, const int32_t *page_ids,
		      size_t n, uint32_t ppb, uint64_t block_bytes, int want)
{
	for (size_t i = 0; i < n; i++) {
		const kvs_block *b = &blocks[i];
		uint8_t *base;
		uint64_t bytes;
		int rc;

		if (b->status != want)
			return -EINVAL;
		rc = kvs__tier_arena(c, b->tier, &base, &bytes);
		if (rc < 0)
			return rc;
		if (b->tier == KVS_TIER_GPU && !pc->on_device)
			return -EINVAL;
		if (b->offset > bytes || block_bytes > bytes - b->offset)
			return -ERANGE;
		for (uint32_t p = 0; p < ppb; p++) {
			int32_t id = page_ids[i * ppb + p];

			if (id < 0 || (uint32_t)id >= pc->num_pages)
				return -ERANGE;
		}
	}
	return 0;
}

/* jobs_collect - the offsets and page ids of the @n blocks that are on
 * @tier, into @j (room for all @n). */
static void jobs_collect(struct jobs *j, int tier, const kvs_block *blocks,
			 const int32_t *page_ids, size_t n, uint32_t ppb)
{
	j->count = 0;
	for (size_t i = 0; i < n; i++) {
		if (blocks[i].tier != tier)
			continue;
		j->offsets[j->count] = blocks[i].offset;
		memcpy(j->page_ids + (size_t)j->count * ppb,
		       page_ids + i * ppb, ppb * sizeof(int32_t));
		j->count++;
	}
}

static int kv_move(kvs_client *c, const kvs_paged_cache *pc, uint32_t layer,
		   void *layer_base, const kvs_block *blocks,
		   const int32_t *page_ids, size_t n, void *stream, int store)
{
	static const int tiers[] = { KVS_TIER_HOST, KVS_TIER_GPU };
	const kvs_layout *l;
	kvs_kv_cache kc;
	kvs_kv_blocks kb;
	struct jobs j = { 0 };
	void **ptrs;
	uint32_t ppb;
	int rc;

	if (!c || !pc || !layer_base || pc->on_device > 1)
		return -EINVAL;
	l = kvs__layout(c);
	if (!l)
		return KVS_E_NOTATTACHED;
	if (layer >= l->layers || !pc->page_tokens ||
	    l->block_tokens % pc->page_tokens || n > KVS_MAX_HASHES ||
	    (n && (!blocks || !page_ids)))
		return -EINVAL;
	ppb = l->block_tokens / pc->page_tokens;
	ptrs = calloc(l->layers, sizeof(*ptrs));
	if (!ptrs)
		return -ENOMEM;
	ptrs[layer] = layer_base;
	kc = (kvs_kv_cache){
		.layer_ptrs = ptrs, .layers = l->layers,
		.num_pages = pc->num_pages, .page_tokens = pc->page_tokens,
		.kv_heads = l->kv_heads, .head_dim = l->head_dim,
		.dtype = pc->dtype, .layout = KVS_KV_STRIDED,
		.strides = { pc->stride_kv, pc->stride_page, pc->stride_token,
			     pc->stride_head },
	};
	kb = (kvs_kv_blocks){ .block_tokens = l->block_tokens,
			      .dtype = l->dtype, .layer_first = layer,
			      .layer_count = 1 };
	rc = kvs_kv_copy_check(&kc, &kb); /* shapes, with no job yet */
	if (rc < 0 || n == 0)
		goto out;
	rc = check_jobs(c, pc, blocks, page_ids, n, ppb,
			kvs_kv_block_bytes(&kc, &kb),
			store ? KVS_BLOCK_NEW : KVS_BLOCK_HIT);
	if (rc < 0)
		goto out;
	j.offsets = malloc(n * sizeof(*j.offsets));
	j.page_ids = malloc(n * ppb * sizeof(*j.page_ids));
	if (!j.offsets || !j.page_ids) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t t = 0; t < sizeof(tiers) / sizeof(tiers[0]) && rc == 0; t++) {
		jobs_collect(&j, tiers[t], blocks, page_ids, n, ppb);
		if (j.count == 0)
			continue;
		kb.count = j.count;
		kb.offsets = j.offsets;
		kb.page_ids = j.page_ids;
		rc = tier_arena(c, tiers[t], (int)pc->on_device,
				(uint8_t **)&kb.arena, &kb.arena_bytes);
		if (rc < 0)
			break;
		if (pc->on_device)
			rc = run_device(&kc, &kb, store, stream);
		else
			rc = store ? kvs_kv_scatter(&kc, &kb)
				   : kvs_kv_gather(&kc, &kb);
	}
out:
	free(j.offsets);
	free(j.page_ids);
	free(ptrs);
	return rc;
}

int kvs_kv_store(kvs_client *c, const kvs_paged_cache *pc, uint32_t layer,
		 const void *layer_base, const kvs_block *blocks,
		 const int32_t *page_ids, size_t n, void *stream)
{
	/* The twin takes one descriptor for both directions; a store only
	 * reads the engine's pages. */
	return kv_move(c, pc, layer, (void *)(uintptr_t)layer_base, blocks,
		       page_ids, n, stream, 1);
}

int kvs_kv_load(kvs_client *c, const kvs_paged_cache *pc, uint32_t layer,
		void *layer_base, const kvs_block *blocks,
		const int32_t *page_ids, size_t n, void *stream)
{
	return kv_move(c, pc, layer, layer_base, blocks, page_ids, n, stream, 0);
}
