/*
 * kvs_kv_copy.h - move KV between a worker's paged KV cache and kvshare cache
 * blocks: scatter (worker -> blocks, on store) and gather (blocks -> worker,
 * on load), many blocks per call, quantizing on store and dequantizing on
 * load when the namespace stores INT8 or FP8 E4M3.
 *
 * Worker cache, per layer (one base pointer per layer):
 *   KVS_KV_KV_INNER  [num_pages][2][page_tokens][kv_heads][head_dim]
 *                    (K and V inside a page)
 *   KVS_KV_KV_OUTER  [2][num_pages][page_tokens][kv_heads][head_dim]
 *                    (vLLM's CUDA flash-attention layout)
 *   KVS_KV_STRIDED   any layout where the head_dim elements of one row are
 *                    contiguous: strides[] give the elements between
 *                    consecutive K|V, pages, tokens and heads (vLLM's CPU
 *                    layout [num_pages][kv_heads][2][page_tokens][head_dim]
 *                    and the HND layouts are such layouts)
 *   element type fp16, bf16 or fp32.
 * Cache block (what kvs_layout_block_bytes() sizes): kvs_kv_format.h.
 * Stored dtype: the worker's own (a plain copy, bit exact: infinities and
 * NaNs, payloads included, come back as they were) or INT8 / FP8_E4M3 /
 * INT4 in groups with an fp32 scale and zero point each (kvs_numeric.h gives
 * the exact rounding rules, and what becomes of infinities and NaNs: no
 * value changes how the others of its group are stored).
 *
 * A call copies the layers [layer_first, layer_first + layer_count) of each
 * block (layer_count 0: every layer), so that a worker can move layer l
 * while its model computes another; only those layers' pointers are read.
 *
 * Block i holds tokens [0, block_tokens) of its job; they come from (go to)
 * the worker pages page_ids[i * P .. i * P + P - 1] in token order, where
 * P = block_tokens / page_tokens. A page may appear in several jobs of a
 * gather only if the caller means the last writer to win; on the GPU the
 * order is unspecified.
 *
 * Caveats
 *  - The *_cuda entries take the same descriptors, but every array they
 *    point to (layer_ptrs, offsets, page_ids) and all data must be
 *    device-accessible: device memory, or host memory registered/mapped for
 *    the device. They read the descriptor structs themselves on the host.
 *  - A CUDA kernel cannot return an error found in device memory: a page id
 *    out of range, a NULL layer pointer, or a block that does not fit in
 *    arena_bytes is skipped (never read or written out of bounds), where the
 *    C twin returns -ERANGE before touching anything. Check untrusted ids on
 *    the host with the C twin's rules if it matters.
 *  - The *_cuda entries are asynchronous on their stream.
 */
#ifndef KVS_KV_COPY_H
#define KVS_KV_COPY_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvs_kv_layout {
	KVS_KV_KV_INNER = 0, /* [num_pages][2][page_tokens][kv_heads][head_dim] */
	KVS_KV_KV_OUTER = 1, /* [2][num_pages][page_tokens][kv_heads][head_dim] */
	KVS_KV_STRIDED = 2,  /* kvs_kv_cache.strides say */
} kvs_kv_layout;

/* Indexes of kvs_kv_cache.strides. */
enum { KVS_KV_STRIDE_KV, KVS_KV_STRIDE_PAGE, KVS_KV_STRIDE_TOKEN,
       KVS_KV_STRIDE_HEAD, KVS_KV_STRIDES };

/* A worker's paged KV cache. */
typedef struct kvs_kv_cache {
	void *const *layer_ptrs; /* [layers] base of each layer's KV tensor,
				    aligned to the element size */
	uint32_t layers;
	uint32_t num_pages;      /* pages per layer tensor */
	uint32_t page_tokens;
	uint32_t kv_heads;
	uint32_t head_dim;
	kvs_dtype dtype;         /* KVS_DTYPE_FP16, _BF16 or _FP32 */
	kvs_kv_layout layout;
	int64_t strides[KVS_KV_STRIDES]; /* KVS_KV_STRIDED only: elements,
					    each >= 0 */
} kvs_kv_cache;

/* The blocks of one call and where their tokens are in the worker cache. */
typedef struct kvs_kv_blocks {
	void *arena;             /* base the offsets count from */
	uint64_t arena_bytes;    /* every block must lie inside */
	const uint64_t *offsets; /* [count] byte offset of block i from arena;
				    arena + offset aligned to the stored
				    element size (16 bytes for full speed) */
	const int32_t *page_ids; /* [count][block_tokens / page_tokens] */
	uint32_t count;          /* number of blocks; 0 does nothing */
	uint32_t block_tokens;   /* a multiple of the cache's page_tokens */
	kvs_dtype dtype;         /* stored: the cache's dtype, INT8 or FP8_E4M3 */
	uint32_t layer_first;    /* the layers to copy: [first, first + count) */
	uint32_t layer_count;    /* 0: every layer */
} kvs_kv_blocks;

/*
 * kvs_kv_block_bytes - bytes of one block of these shapes, as
 * kvs_layout_block_bytes() computes it for the same layout.
 * Returns 0 if a shape is invalid (as kvs_kv_copy_check() would say) or the
 * size overflows.
 * Thread: any.
 */
uint64_t kvs_kv_block_bytes(const kvs_kv_cache *cache,
			    const kvs_kv_blocks *blocks);

/*
 * kvs_kv_strides - the strides (elements) of @cache's layout, for any layout.
 * Returns 0, or -EINVAL for an unknown layout or a stride past INT64_MAX.
 * Thread: any.
 */
int kvs_kv_strides(const kvs_kv_cache *cache, int64_t out[KVS_KV_STRIDES]);

/*
 * kvs_kv_copy_check - validate the shapes of a scatter or gather without
 * reading any array (what the *_cuda entries can check on the host).
 * Errors: -EINVAL: NULL descriptor or array, a zero size, an unknown or
 *         unsupported dtype or layout, block_tokens not a multiple of
 *         page_tokens, a stored plain dtype different from the cache's, a
 *         negative stride, a layer range outside [0, layers), a size that
 *         overflows, arena_bytes smaller than one block, a
 *         misaligned arena.
 * Thread: any.
 */
int kvs_kv_copy_check(const kvs_kv_cache *cache, const kvs_kv_blocks *blocks);

/*
 * kvs_kv_scatter - copy the tokens of each job's pages into its block,
 * quantizing when the stored dtype is INT8 or FP8_E4M3 (C twin, host memory).
 * @cache: the worker's cache (read only).
 * @blocks: the jobs; the blocks' bytes are written, nothing else in the arena.
 * Errors: those of kvs_kv_copy_check(); -EINVAL for a NULL or misaligned
 *         layer pointer or block; -ERANGE for a page id outside
 *         [0, num_pages) or a block outside arena_bytes. Everything is checked
 *         before anything is written.
 * Ownership: the caller's memory, untouched after return.
 * Thread: any; calls on disjoint blocks may run in parallel.
 */
int kvs_kv_scatter(const kvs_kv_cache *cache, const kvs_kv_blocks *blocks);

/*
 * kvs_kv_gather - copy each block into its job's pages of the worker cache,
 * dequantizing when the stored dtype is INT8 or FP8_E4M3 (C twin).
 * Only the listed pages are written.
 * Errors, Ownership, Thread: as kvs_kv_scatter().
 */
int kvs_kv_gather(const kvs_kv_cache *cache, const kvs_kv_blocks *blocks);

/*
 * kvs_kv_scatter_cuda / kvs_kv_gather_cuda - the same on a CUDA stream.
 * @stream: a cudaStream_t, or NULL for the legacy default stream.
 * The call returns once the kernel is queued; results are ready when the
 * stream has run it. See the caveats about device memory and skipped jobs.
 * Errors: those of kvs_kv_copy_check(); -ENODEV when kvshare was built
 *         without CUDA or no device is usable; -EIO for another CUDA error
 *         (launch failure, an earlier asynchronous fault).
 * Ownership: the caller's memory; it must stay valid until the stream has
 *            run the kernel.
 * Thread: any thread with the stream's device current.
 */
int kvs_kv_scatter_cuda(const kvs_kv_cache *cache, const kvs_kv_blocks *blocks,
			void *stream);
int kvs_kv_gather_cuda(const kvs_kv_cache *cache, const kvs_kv_blocks *blocks,
		       void *stream);

#ifdef __cplusplus
}
#endif
#endif /* KVS_KV_COPY_H */
