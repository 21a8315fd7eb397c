/*
 * kvs_kv_copy.c - the C twin of kvs_kv_copy.cu: the same scatter/gather on
 * host memory, one row at a time, and the shape checks both share.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_kv_copy.h"
#include "kvs_kv_format.h"
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
	case KVS_DTYPE_INT4: /* the alignment unit: a byte holds two codes */
		return 1;
	}
	return 0;
}

static int is_quantized(kvs_dtype d)
{
	return kvs_kv_scheme(d) == 2;
}

uint64_t kvs_kv_block_bytes(const kvs_kv_cache *c, const kvs_kv_blocks *b)
{
	kvs_kv_format f;

	if (!c || !b ||
	    kvs_kv_format_init(&f, c->layers, b->block_tokens, c->kv_heads,
			       c->head_dim, b->dtype) < 0)
		return 0;
	return f.total;
}

int kvs_kv_strides(const kvs_kv_cache *c, int64_t s[KVS_KV_STRIDES])
{
	int64_t row = c->head_dim, tok, page_half;

	if (c->layout == KVS_KV_STRIDED) {
		memcpy(s, c->strides, sizeof(c->strides));
		return 0;
	}
	if (c->layout != KVS_KV_KV_INNER && c->layout != KVS_KV_KV_OUTER)
		return -EINVAL;
	/* Each factor is a caller's u32: the products may pass 2^63. */
	if (__builtin_mul_overflow((int64_t)c->kv_heads, row, &tok) ||
	    __builtin_mul_overflow(tok, (int64_t)c->page_tokens, &page_half))
		return -EINVAL;
	if (c->layout == KVS_KV_KV_INNER) {
		s[KVS_KV_STRIDE_KV] = page_half;
		if (__builtin_mul_overflow(page_half, 2, &s[KVS_KV_STRIDE_PAGE]))
			return -EINVAL;
	} else {
		if (__builtin_mul_overflow((int64_t)c->num_pages, page_half,
					   &s[KVS_KV_STRIDE_KV]))
			return -EINVAL;
		s[KVS_KV_STRIDE_PAGE] = page_half;
	}
	s[KVS_KV_STRIDE_TOKEN] = tok;
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

/* ---- quantized blocks (kvs_kv_format.h), one (block, layer, head) at a time ---- */

struct qgeom {
	const kvs_kv_cache *c;
	const kvs_kv_blocks *b;
	kvs_kv_format f;
	int64_t s[KVS_KV_STRIDES];
	size_t w;
	uint32_t ppb;
	float qmax;
	int sign;
	float *buf, *lo, *hi; /* [block_tokens * head_dim], [head_dim] x 2 */
	int32_t *omap;        /* [head_dim]: outlier slot of a K channel, or -1 */
};

/* Token t of block i's job, layer l, K|V kv, head h, in the worker cache. */
static uint8_t *wrow_at(const struct qgeom *g, uint32_t i, uint32_t l,
			uint32_t kv, uint32_t t, uint32_t h)
{
	uint32_t pt = g->c->page_tokens;
	int64_t page = g->b->page_ids[(uint64_t)i * g->ppb + t / pt];

	return (uint8_t *)g->c->layer_ptrs[l] +
	       (kv * g->s[KVS_KV_STRIDE_KV] + page * g->s[KVS_KV_STRIDE_PAGE] +
		(int64_t)(t % pt) * g->s[KVS_KV_STRIDE_TOKEN] +
		(int64_t)h * g->s[KVS_KV_STRIDE_HEAD]) * (int64_t)g->w;
}

static uint8_t code_of(const struct qgeom *g, float y)
{
	return g->sign ? kvs_f32_to_e4m3(y) : kvs_affine_code(y, g->qmax);
}

static float value_of(const struct qgeom *g, uint8_t q)
{
	return g->sign ? kvs_e4m3_to_f32(q) : (float)q;
}

/* Code e of a data row; INT4 rows hold two per byte (the row starts at 0). */
static void code_put(const struct qgeom *g, uint8_t *row, uint32_t e, uint8_t q)
{
	if (g->f.dtype == KVS_DTYPE_INT4)
		row[e / 2] |= (uint8_t)(q << (4 * (e % 2)));
	else
		row[e] = q;
}

static uint8_t code_get(const struct qgeom *g, const uint8_t *row, uint32_t e)
{
	if (g->f.dtype == KVS_DTYPE_INT4)
		return (row[e / 2] >> (4 * (e % 2))) & 15u;
	return row[e];
}

static void par_put(uint8_t *p, float scale, float zero)
{
	memcpy(p, &scale, 4); /* fields may be unaligned */
	memcpy(p + 4, &zero, 4);
}

static void par_get(const uint8_t *p, float *scale, float *zero)
{
	memcpy(scale, p, 4);
	memcpy(zero, p + 4, 4);
}

/* The span of the finite values of x[0], x[step], ... (n values); 0, 0 if
 * none. */
static void span(const float *x, uint32_t n, size_t step, float *lo, float *hi)
{
	float a = INFINITY, b = -INFINITY;

	for (uint32_t k = 0; k < n; k++)
		kvs_span_add(x[k * step], &a, &b);
	if (a > b)
		a = b = 0.0f;
	*lo = a;
	*hi = b;
}

/* Half the width of channel d over the block: what ranks outliers. */
static float width(const struct qgeom *g, uint32_t d)
{
	return kvs_fsub(kvs_fmul(g->hi[d], 0.5f), kvs_fmul(g->lo[d], 0.5f));
}

static void scatter_head(struct qgeom *g, uint8_t *blk, uint32_t i,
			 uint32_t l, uint32_t h)
{
	const kvs_kv_format *f = &g->f;
	uint32_t D = f->D, bt = f->bt;
	float scale, zero, inv;

	/* K: channels over token groups; the nout widest keep fp16 codes. */
	for (uint32_t t = 0; t < bt; t++) {
		load_row(wrow_at(g, i, l, 0, t, h), g->c->dtype, D, g->buf + (size_t)t * D);
		memset(blk + kvs_kv_fmt_row(f, l, 0, t, h), 0, f->row_bytes);
	}
	for (uint32_t d = 0; d < D; d++) {
		span(g->buf + d, bt, D, &g->lo[d], &g->hi[d]);
		g->omap[d] = -1;
	}
	for (uint32_t j = 0; j < f->nout; j++) {
		uint32_t best = D;
		uint16_t best16;

		for (uint32_t d = 0; d < D; d++)
			if (g->omap[d] < 0 && (best == D || width(g, d) > width(g, best)))
				best = d;
		g->omap[best] = (int32_t)j;
		best16 = (uint16_t)best;
		memcpy(blk + kvs_kv_fmt_oidx(f, l, h, j), &best16, 2);
	}
	for (uint32_t gi = 0; gi < f->ktg; gi++) {
		uint32_t t0 = gi * f->kgroup;
		uint32_t n = bt - t0 < f->kgroup ? bt - t0 : f->kgroup;

		for (uint32_t d = 0; d < D; d++) {
			float lo, hi;

			span(g->buf + (size_t)t0 * D + d, n, D, &lo, &hi);
			kvs_affine_params(lo, hi, g->qmax, g->sign, &scale, &zero, &inv);
			par_put(blk + kvs_kv_fmt_kpar(f, l, gi, h, d), scale, zero);
			for (uint32_t t = t0; t < t0 + n; t++) {
				float y = kvs_affine_y(g->buf[(size_t)t * D + d], scale,
						       zero, inv, g->qmax, g->sign);

				if (g->omap[d] >= 0) {
					uint16_t y16 = kvs_f32_to_f16(y);

					memcpy(blk + kvs_kv_fmt_oval(f, l, h, (uint32_t)g->omap[d], t),
					       &y16, 2);
				} else {
					code_put(g, blk + kvs_kv_fmt_row(f, l, 0, t, h), d,
						 code_of(g, y));
				}
			}
		}
	}
	/* V: each token's channels in groups of vgroup. */
	for (uint32_t t = 0; t < bt; t++) {
		uint8_t *row = blk + kvs_kv_fmt_row(f, l, 1, t, h);

		load_row(wrow_at(g, i, l, 1, t, h), g->c->dtype, D, g->buf);
		memset(row, 0, f->row_bytes);
		for (uint32_t c = 0; c < f->vcg; c++) {
			uint32_t e0 = c * f->vgroup;
			uint32_t n = D - e0 < f->vgroup ? D - e0 : f->vgroup;
			float lo, hi;

			span(g->buf + e0, n, 1, &lo, &hi);
			kvs_affine_params(lo, hi, g->qmax, g->sign, &scale, &zero, &inv);
			par_put(blk + kvs_kv_fmt_vpar(f, l, t, h, c), scale, zero);
			for (uint32_t e = e0; e < e0 + n; e++)
				code_put(g, row, e, code_of(g, kvs_affine_y(
						g->buf[e], scale, zero, inv, g->qmax, g->sign)));
		}
	}
}

static void gather_head(struct qgeom *g, const uint8_t *blk, uint32_t i,
			uint32_t l, uint32_t h)
{
	const kvs_kv_format *f = &g->f;
	uint32_t D = f->D;
	float scale, zero;

	for (uint32_t d = 0; d < D; d++)
		g->omap[d] = -1;
	for (uint32_t j = 0; j < f->nout; j++) {
		uint16_t d;

		memcpy(&d, blk + kvs_kv_fmt_oidx(f, l, h, j), 2);
		if (d < D && g->omap[d] < 0) /* a damaged list: the first wins */
			g->omap[d] = (int32_t)j;
	}
	for (uint32_t t = 0; t < f->bt; t++) {
		const uint8_t *row = blk + kvs_kv_fmt_row(f, l, 0, t, h);

		for (uint32_t d = 0; d < D; d++) {
			float v;

			if (g->omap[d] >= 0) {
				uint16_t y16;

				memcpy(&y16, blk + kvs_kv_fmt_oval(f, l, h, (uint32_t)g->omap[d], t), 2);
				v = kvs_f16_to_f32(y16);
			} else {
				v = value_of(g, code_get(g, row, d));
			}
			par_get(blk + kvs_kv_fmt_kpar(f, l, t / f->kgroup, h, d), &scale, &zero);
			g->buf[d] = kvs_affine_value(v, scale, zero);
		}
		store_row(wrow_at(g, i, l, 0, t, h), g->c->dtype, D, g->buf);
	}
	for (uint32_t t = 0; t < f->bt; t++) {
		const uint8_t *row = blk + kvs_kv_fmt_row(f, l, 1, t, h);

		for (uint32_t d = 0; d < D; d++) {
			par_get(blk + kvs_kv_fmt_vpar(f, l, t, h, d / f->vgroup), &scale, &zero);
			g->buf[d] = kvs_affine_value(value_of(g, code_get(g, row, d)),
						     scale, zero);
		}
		store_row(wrow_at(g, i, l, 1, t, h), g->c->dtype, D, g->buf);
	}
}

static int kv_copy_quant(const kvs_kv_cache *c, const kvs_kv_blocks *b,
			 int scatter)
{
	struct qgeom g = { .c = c, .b = b };
	uint32_t l_end = b->layer_first + (b->layer_count ? b->layer_count : c->layers);
	int rc = 0;

	kvs_kv_format_init(&g.f, c->layers, b->block_tokens, c->kv_heads,
			   c->head_dim, b->dtype); /* checked by the caller */
	kvs_kv_strides(c, g.s);
	g.w = elem_bytes(c->dtype);
	g.ppb = b->block_tokens / c->page_tokens;
	g.sign = b->dtype == KVS_DTYPE_FP8_E4M3;
	g.qmax = g.sign ? KVS_E4M3_QMAX :
		 b->dtype == KVS_DTYPE_INT4 ? KVS_INT4_QMAX : KVS_UINT8_QMAX;
	/* calloc checks the products: a client's layout sets the factors. */
	g.buf = calloc((size_t)b->block_tokens * c->head_dim, sizeof(float));
	g.lo = calloc(c->head_dim, sizeof(float));
	g.hi = calloc(c->head_dim, sizeof(float));
	g.omap = calloc(c->head_dim, sizeof(int32_t));
	if (!g.buf || !g.lo || !g.hi || !g.omap)
		rc = -ENOMEM;
	for (uint32_t i = 0; rc == 0 && i < b->count; i++) {
		uint8_t *blk = (uint8_t *)b->arena + b->offsets[i];

		for (uint32_t l = b->layer_first; l < l_end; l++)
			for (uint32_t h = 0; h < c->kv_heads; h++) {
				if (scatter)
					scatter_head(&g, blk, i, l, h);
				else
					gather_head(&g, blk, i, l, h);
			}
	}
	free(g.buf);
	free(g.lo);
	free(g.hi);
	free(g.omap);
	return rc;
}

static int kv_copy(const kvs_kv_cache *c, const kvs_kv_blocks *b, int scatter)
{
	uint64_t bb = kvs_kv_block_bytes(c, b);
	uint32_t ppb, D, H, pt, l_end;
	int64_t s[KVS_KV_STRIDES];
	size_t w;
	int contiguous;
	int rc = kvs_kv_copy_check(c, b);

	if (rc < 0 || b->count == 0)
		return rc;
	rc = check_arrays(c, b, bb);
	if (rc < 0)
		return rc;
	if (is_quantized(b->dtype))
		return kv_copy_quant(c, b, scatter);
	kvs_kv_strides(c, s);
	ppb = b->block_tokens / c->page_tokens;
	D = c->head_dim;
	H = c->kv_heads;
	pt = c->page_tokens;
	w = elem_bytes(c->dtype);
	l_end = b->layer_first + (b->layer_count ? b->layer_count : c->layers);
	/* A page's K (or V) rows in the block's [token][head] order, one run? */
	contiguous = s[KVS_KV_STRIDE_HEAD] == D &&
		     s[KVS_KV_STRIDE_TOKEN] == (int64_t)H * D;
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
			uint8_t *bp = blk + brow * D * w;

			if (contiguous) {
				memmove(scatter ? bp : wp, scatter ? wp : bp,
					(size_t)pt * H * D * w);
				continue;
			}
			for (uint32_t t = 0; t < pt; t++)
			for (uint32_t h = 0; h < H; h++) {
				uint64_t r = (uint64_t)t * H + h;
				uint8_t *wr = wp + (t * s[KVS_KV_STRIDE_TOKEN] +
						    h * s[KVS_KV_STRIDE_HEAD]) * w;
				uint8_t *br = bp + r * D * w;

				memmove(scatter ? br : wr, scatter ? wr : br,
					(size_t)D * w);
			}
		}
	}
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
