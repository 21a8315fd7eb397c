/*
 * kvs_kv_copy.c - the C twin of kvs_kv_copy.cu: the same scatter/gather on
 * host memory, one row at a time, and the shape checks both share.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_kv_copy.h"
#include "kvs_numeric.h"

static size_t elem_bytes(kvs_dtype d)
{
	switch (d) {
	case KVS_DTYPE_FP16:
	case KVS_DTYPE_BF16:
		return 2;
	case KVS_DTYPE_FP32:
		return 4;
	case KVS_DTYPE_INT8:
	case KVS_DTYPE_FP8_E4M3:
		return 1;
	}
	return 0;
}

static int is_quantized(kvs_dtype d)
{
	return d == KVS_DTYPE_INT8 || d == KVS_DTYPE_FP8_E4M3;
}

/* a * b into *out; 0 on overflow (or a zero factor, which callers reject). */
static int mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
	if (a == 0 || b == 0 || a > UINT64_MAX / b)
		return 0;
	*out = a * b;
	return 1;
}

uint64_t kvs_kv_block_bytes(const kvs_kv_cache *c, const kvs_kv_blocks *b)
{
	uint64_t rows, row_bytes, total;
	size_t q;

	if (!c || !b)
		return 0;
	q = elem_bytes(b->dtype);
	row_bytes = (uint64_t)c->head_dim * q + (is_quantized(b->dtype) ? 4 : 0);
	if (!mul_ok((uint64_t)c->layers * 2, b->block_tokens, &rows) ||
	    !mul_ok(rows, c->kv_heads, &rows) ||
	    !mul_ok(rows, row_bytes, &total) || c->head_dim == 0)
		return 0;
	return total;
}

int kvs_kv_strides(const kvs_kv_cache *c, int64_t s[KVS_KV_STRIDES])
{
	int64_t row = c->head_dim, page_half = (int64_t)c->page_tokens * c->kv_heads * row;

	switch (c->layout) {
	case KVS_KV_KV_INNER:
		s[KVS_KV_STRIDE_KV] = page_half;
		s[KVS_KV_STRIDE_PAGE] = 2 * page_half;
		break;
	case KVS_KV_KV_OUTER:
		s[KVS_KV_STRIDE_KV] = (int64_t)c->num_pages * page_half;
		s[KVS_KV_STRIDE_PAGE] = page_half;
		break;
	case KVS_KV_STRIDED:
		memcpy(s, c->strides, sizeof(c->strides));
		return 0;
	default:
		return -EINVAL;
	}
	s[KVS_KV_STRIDE_TOKEN] = (int64_t)c->kv_heads * row;
	s[KVS_KV_STRIDE_HEAD] = row;
	return 0;
}

/* Bytes from a layer's base to the end of the last element the strides
 * reach in num_pages pages; 0 for a negative stride or an overflow. */
static uint64_t layer_extent(const kvs_kv_cache *c, const int64_t s[], size_t w)
{
	const uint64_t last[KVS_KV_STRIDES] = { 1, c->num_pages - 1u,
						c->page_tokens - 1u,
						c->kv_heads - 1u };
	uint64_t end = c->head_dim;

	for (int k = 0; k < KVS_KV_STRIDES; k++) {
		if (s[k] < 0)
			return 0;
		if (last[k] && (uint64_t)s[k] > (INT64_MAX - end) / last[k])
			return 0;
		end += last[k] * (uint64_t)s[k];
	}
	return end > INT64_MAX / w ? 0 : end * w;
}

int kvs_kv_copy_check(const kvs_kv_cache *c, const kvs_kv_blocks *b)
{
	int64_t s[KVS_KV_STRIDES];
	uint64_t bb;
	size_t w;

	if (!c || !b || !c->layer_ptrs)
		return -EINVAL;
	w = elem_bytes(c->dtype);
	if (w < 2) /* fp16, bf16 or fp32 only */
		return -EINVAL;
	if (kvs_kv_strides(c, s) < 0)
		return -EINVAL;
	if (!c->layers || !c->num_pages || !c->page_tokens || !c->kv_heads ||
	    !c->head_dim || !b->block_tokens)
		return -EINVAL;
	if (b->block_tokens % c->page_tokens)
		return -EINVAL;
	if (b->dtype != c->dtype && !is_quantized(b->dtype))
		return -EINVAL;
	if (b->layer_first >= c->layers ||
	    b->layer_count > c->layers - b->layer_first)
		return -EINVAL;
	/* Offsets inside a layer tensor are computed in 64 bits. */
	if (layer_extent(c, s, w) == 0)
		return -EINVAL;
	bb = kvs_kv_block_bytes(c, b);
	if (bb == 0 || bb > INT64_MAX)
		return -EINVAL;
	if (b->count == 0)
		return 0;
	if (!b->arena || !b->offsets || !b->page_ids || b->arena_bytes < bb)
		return -EINVAL;
	if ((uintptr_t)b->arena % elem_bytes(b->dtype))
		return -EINVAL;
	return 0;
}

/* What kvs_kv_copy_check() cannot see: the contents of the arrays. */
static int check_arrays(const kvs_kv_cache *c, const kvs_kv_blocks *b,
			uint64_t bb)
{
	uint32_t ppb = b->block_tokens / c->page_tokens;
	size_t w = elem_bytes(c->dtype), q = elem_bytes(b->dtype);

	uint32_t lc = b->layer_count ? b->layer_count : c->layers;

	for (uint32_t l = b->layer_first; l < b->layer_first + lc; l++)
		if (!c->layer_ptrs[l] || (uintptr_t)c->layer_ptrs[l] % w)
			return -EINVAL;
	for (uint32_t i = 0; i < b->count; i++) {
		if (b->offsets[i] > b->arena_bytes - bb)
			return -ERANGE;
		if (b->offsets[i] % q)
			return -EINVAL;
		for (uint32_t p = 0; p < ppb; p++) {
			int32_t id = b->page_ids[(uint64_t)i * ppb + p];

			if (id < 0 || (uint32_t)id >= c->num_pages)
				return -ERANGE;
		}
	}
	return 0;
}

static void load_row(const void *src, kvs_dtype d, uint32_t n, float *out)
{
	const uint16_t *h = src;

	if (d == KVS_DTYPE_FP32) {
		memcpy(out, src, (size_t)n * 4);
	} else if (d == KVS_DTYPE_FP16) {
		for (uint32_t i = 0; i < n; i++)
			out[i] = kvs_f16_to_f32(h[i]);
	} else {
		for (uint32_t i = 0; i < n; i++)
			out[i] = kvs_bf16_to_f32(h[i]);
	}
}

static void store_row(void *dst, kvs_dtype d, uint32_t n, const float *in)
{
	uint16_t *h = dst;

	if (d == KVS_DTYPE_FP32) {
		memcpy(dst, in, (size_t)n * 4);
	} else if (d == KVS_DTYPE_FP16) {
		for (uint32_t i = 0; i < n; i++)
			h[i] = kvs_f32_to_f16(in[i]);
	} else {
		for (uint32_t i = 0; i < n; i++)
			h[i] = kvs_f32_to_bf16(in[i]);
	}
}

static void quantize_row(const float *x, uint32_t n, kvs_dtype q,
			 uint8_t *out, uint8_t *scale_at)
{
	float absmax = 0.0f, scale, inv;
	float qmax = q == KVS_DTYPE_INT8 ? KVS_INT8_QMAX : KVS_E4M3_QMAX;

	for (uint32_t i = 0; i < n; i++)
		absmax = fmaxf(absmax, fabsf(x[i]));
	kvs_quant_params(absmax, qmax, &scale, &inv);
	for (uint32_t i = 0; i < n; i++) {
		float y = kvs_quant_apply(x[i], scale, inv);

		out[i] = q == KVS_DTYPE_INT8 ? (uint8_t)kvs_quant_int8(y)
					     : kvs_f32_to_e4m3(y);
	}
	memcpy(scale_at, &scale, 4); /* scales need not be 4-byte aligned */
}

static void dequantize_row(const uint8_t *in, const uint8_t *scale_at,
			   uint32_t n, kvs_dtype q, float *x)
{
	float scale;

	memcpy(&scale, scale_at, 4);
	for (uint32_t i = 0; i < n; i++) {
		float v = q == KVS_DTYPE_INT8 ? (float)(int8_t)in[i]
					      : kvs_e4m3_to_f32(in[i]);
		x[i] = v * scale;
	}
}

/* One row (head_dim elements) worker <-> block. */
static void copy_row(const kvs_kv_cache *c, const kvs_kv_blocks *b,
		     uint8_t *wr, uint8_t *br, uint8_t *sr, float *row,
		     int scatter)
{
	uint32_t D = c->head_dim;

	if (!row)
		memmove(scatter ? br : wr, scatter ? wr : br,
			(size_t)D * elem_bytes(c->dtype));
	else if (scatter) {
		load_row(wr, c->dtype, D, row);
		quantize_row(row, D, b->dtype, br, sr);
	} else {
		dequantize_row(br, sr, D, b->dtype, row);
		store_row(wr, c->dtype, D, row);
	}
}

static int kv_copy(const kvs_kv_cache *c, const kvs_kv_blocks *b, int scatter)
{
	uint64_t bb = kvs_kv_block_bytes(c, b);
	uint32_t ppb, D, H, pt, l_end;
	int64_t s[KVS_KV_STRIDES];
	size_t w, q;
	uint64_t data_bytes;
	int contiguous;
	float *row = NULL;
	int rc = kvs_kv_copy_check(c, b);

	if (rc < 0 || b->count == 0)
		return rc;
	rc = check_arrays(c, b, bb);
	if (rc < 0)
		return rc;
	kvs_kv_strides(c, s);
	ppb = b->block_tokens / c->page_tokens;
	D = c->head_dim;
	H = c->kv_heads;
	pt = c->page_tokens;
	w = elem_bytes(c->dtype);
	q = elem_bytes(b->dtype);
	l_end = b->layer_first + (b->layer_count ? b->layer_count : c->layers);
	data_bytes = (uint64_t)c->layers * 2 * b->block_tokens * H * D * q;
	/* A page's K (or V) rows in the block's [token][head] order, one run? */
	contiguous = s[KVS_KV_STRIDE_HEAD] == D &&
		     s[KVS_KV_STRIDE_TOKEN] == (int64_t)H * D;
	if (is_quantized(b->dtype)) {
		row = malloc((size_t)D * sizeof(float));
		if (!row)
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < b->count; i++) {
		uint8_t *blk = (uint8_t *)b->arena + b->offsets[i];

		for (uint32_t l = b->layer_first; l < l_end; l++)
		for (uint32_t kv = 0; kv < 2; kv++)
		for (uint32_t p = 0; p < ppb; p++) {
			uint64_t page = (uint64_t)b->page_ids[(uint64_t)i * ppb + p];
			uint8_t *wp = (uint8_t *)c->layer_ptrs[l] +
				      (kv * s[KVS_KV_STRIDE_KV] +
				       page * s[KVS_KV_STRIDE_PAGE]) * w;
			uint64_t brow = (((uint64_t)l * 2 + kv) * b->block_tokens +
					 (uint64_t)p * pt) * H;
			uint8_t *bp = blk + brow * D * q;
			uint8_t *sp = blk + data_bytes + brow * 4;

			if (!row && contiguous) {
				memmove(scatter ? bp : wp, scatter ? wp : bp,
					(size_t)pt * H * D * w);
				continue;
			}
			for (uint32_t t = 0; t < pt; t++)
			for (uint32_t h = 0; h < H; h++) {
				uint64_t r = (uint64_t)t * H + h;
				uint8_t *wr = wp + (t * s[KVS_KV_STRIDE_TOKEN] +
						    h * s[KVS_KV_STRIDE_HEAD]) * w;

				copy_row(c, b, wr, bp + r * D * q, sp + r * 4,
					 row, scatter);
			}
		}
	}
	free(row);
	return 0;
}

int kvs_kv_scatter(const kvs_kv_cache *cache, const kvs_kv_blocks *blocks)
{
	return kv_copy(cache, blocks, 1);
}

int kvs_kv_gather(const kvs_kv_cache *cache, const kvs_kv_blocks *blocks)
{
	return kv_copy(cache, blocks, 0);
}
