/*
 * kvs_kv_copy.cu - scatter/gather between a worker's paged KV cache and
 * cache blocks on a CUDA stream; the C twin is kvs_kv_copy.c.
 *
 * Work is cut into units: up to tile_rows rows of one page of one
 * (block, layer, K|V). When a page's rows are contiguous on both sides (the
 * token-major layouts), a plain copy of a unit is one contiguous run (16-byte
 * vectors when aligned); otherwise (strided layouts: head-major, padded) each
 * warp copies a row at a time. A
 * quantized unit gives each row a group of G threads (a power of two <= 32)
 * that reduce the row's absmax with warp shuffles, holding the row in
 * registers, and write the codes and the row's scale in the same pass.
 * One CUDA block per unit; the grid strides over units.
 */
#include <errno.h>

#include <cuda_runtime.h>

#include "kvs_cuda.h"
#include "kvs_kv_copy.h"
#include "kvs_numeric.h"

#define THREADS 256
#define TILE_BYTES 32768u /* worker bytes per unit */
#define MAX_GRID (1u << 20)
#define NV 4 /* 8-element vectors a thread keeps in registers per row */

struct geom {
	void *const *layers;
	const uint64_t *offsets;
	const int32_t *page_ids;
	uint8_t *arena;
	uint64_t arena_bytes, block_bytes, data_bytes, units;
	uint32_t nlayers, num_pages, pt, H, D, bt, ppb;
	uint32_t tile_rows, tiles; /* rows per unit, units per page */
	uint32_t w, q;             /* element bytes: worker, stored */
	uint32_t group;            /* threads per row (quantized) */
	uint32_t layer_first, layer_count;
	int64_t s_kv, s_page, s_tok, s_head; /* worker strides, elements */
	int contig;                /* a page's rows in block order, one run */
	int strides16;             /* every stride a multiple of 16 bytes */
};

struct unit {
	uint8_t *wpage;  /* the page's K or V in the worker cache */
	uint64_t r0;     /* first row of the unit in the page */
	uint8_t *data;   /* first block row */
	uint8_t *scales; /* scale of the first block row */
	uint32_t rows;
};

/* Row r of a unit in the worker cache (rows are token-major, as in the
 * block: row = token * H + head). */
static __device__ uint8_t *wrow(const geom &g, const unit &t, uint32_t r)
{
	uint64_t rr = t.r0 + r;

	if (g.contig)
		return t.wpage + rr * g.D * g.w;
	return t.wpage + ((rr / g.H) * g.s_tok + (rr % g.H) * g.s_head) * g.w;
}

/* The unit's addresses; false if its job is invalid (skipped: the kernel
 * cannot report errors, and must never touch memory outside the jobs). */
static __device__ bool locate(const geom &g, uint64_t u, unit *o)
{
	uint32_t tile = (uint32_t)(u % g.tiles);
	uint32_t p, kv, l;
	uint64_t i, off, page_rows = (uint64_t)g.pt * g.H, r0, brow;
	uint8_t *base;
	int32_t page;

	u /= g.tiles;
	p = (uint32_t)(u % g.ppb);
	u /= g.ppb;
	kv = (uint32_t)(u % 2);
	u /= 2;
	l = g.layer_first + (uint32_t)(u % g.layer_count);
	i = u / g.layer_count;
	page = g.page_ids[i * g.ppb + p];
	off = g.offsets[i];
	base = (uint8_t *)g.layers[l];
	if (page < 0 || (uint32_t)page >= g.num_pages || !base ||
	    (uintptr_t)base % g.w || off > g.arena_bytes - g.block_bytes ||
	    off % g.q)
		return false;
	r0 = (uint64_t)tile * g.tile_rows;
	o->wpage = base + (kv * g.s_kv + (int64_t)page * g.s_page) * g.w;
	o->r0 = r0;
	brow = (((uint64_t)l * 2 + kv) * g.bt + (uint64_t)p * g.pt) * g.H + r0;
	o->data = g.arena + off + brow * g.D * g.q;
	o->scales = g.arena + off + g.data_bytes + brow * 4;
	o->rows = (uint32_t)min((uint64_t)g.tile_rows, page_rows - r0);
	return true;
}

template <typename V>
static __device__ void copy_run(uint8_t *dst, const uint8_t *src, uint64_t n)
{
	const V *s = (const V *)src;
	V *d = (V *)dst;
	uint64_t i = threadIdx.x;

	/* Four loads in flight per thread before the stores. */
	for (; i + 3 * THREADS < n; i += 4 * THREADS) {
		V a = s[i], b = s[i + THREADS], c = s[i + 2 * THREADS],
		  e = s[i + 3 * THREADS];

		d[i] = a;
		d[i + THREADS] = b;
		d[i + 2 * THREADS] = c;
		d[i + 3 * THREADS] = e;
	}
	for (; i < n; i += THREADS)
		d[i] = s[i];
}

/* A strided unit: one warp per row, its lanes over the row's elements. */
template <typename V>
static __device__ void copy_row_lanes(uint8_t *dst, const uint8_t *src,
				      uint64_t n, uint32_t lane)
{
	for (uint64_t k = lane; k < n; k += 32)
		((V *)dst)[k] = ((const V *)src)[k];
}

static __device__ void copy_rows(const geom &g, const unit &t, int scatter)
{
	const uint32_t lane = threadIdx.x % 32, warps = THREADS / 32;
	const uint64_t n = (uint64_t)g.D * g.w;

	for (uint32_t r = threadIdx.x / 32; r < t.rows; r += warps) {
		uint8_t *wr = wrow(g, t, r), *br = t.data + r * n;
		const uint8_t *src = scatter ? wr : br;
		uint8_t *dst = scatter ? br : wr;
		uintptr_t a = (uintptr_t)src | (uintptr_t)dst | (uintptr_t)n;

		if (a % 16 == 0)
			copy_row_lanes<uint4>(dst, src, n / 16, lane);
		else if (a % 4 == 0)
			copy_row_lanes<uint32_t>(dst, src, n / 4, lane);
		else
			copy_row_lanes<uint16_t>(dst, src, n / 2, lane);
	}
}

static __global__ void __launch_bounds__(THREADS)
kv_copy_plain(geom g, int scatter)
{
	for (uint64_t u = blockIdx.x; u < g.units; u += gridDim.x) {
		unit t;

		if (!locate(g, u, &t))
			continue;
		if (!g.contig) {
			copy_rows(g, t, scatter);
			continue;
		}
		uint8_t *wk = wrow(g, t, 0);
		const uint8_t *src = scatter ? wk : t.data;
		uint8_t *dst = scatter ? t.data : wk;
		uint64_t n = (uint64_t)t.rows * g.D * g.w;
		uintptr_t a = (uintptr_t)src | (uintptr_t)dst | (uintptr_t)n;

		if (a % 16 == 0)
			copy_run<uint4>(dst, src, n / 16);
		else if (a % 4 == 0)
			copy_run<uint32_t>(dst, src, n / 4);
		else /* elements are at least 2 bytes and aligned (locate) */
			copy_run<uint16_t>(dst, src, n / 2);
	}
}

/* ---- worker elements <-> fp32 ---- */

template <int WD>
static __device__ float elem_load(const uint8_t *row, uint32_t k)
{
	if (WD == KVS_DTYPE_FP32)
		return ((const float *)row)[k];
	uint16_t h = ((const uint16_t *)row)[k];
	return WD == KVS_DTYPE_FP16 ? kvs_f16_to_f32(h) : kvs_bf16_to_f32(h);
}

template <int WD>
static __device__ void elem_store(uint8_t *row, uint32_t k, float x)
{
	if (WD == KVS_DTYPE_FP32)
		((float *)row)[k] = x;
	else
		((uint16_t *)row)[k] = WD == KVS_DTYPE_FP16 ? kvs_f32_to_f16(x)
							    : kvs_f32_to_bf16(x);
}

/* Eight elements at a 16-byte aligned address, kept raw (one uint4 for
 * 16-bit types, two for fp32) so that a row held in registers costs half as
 * many of them; unpack8() converts. */
template <int WD>
static __device__ void load8(const uint8_t *p, uint4 raw[2])
{
	raw[0] = ((const uint4 *)p)[0];
	if (WD == KVS_DTYPE_FP32)
		raw[1] = ((const uint4 *)p)[1];
}

template <int WD>
static __device__ void unpack8(const uint4 raw[2], float f[8])
{
	if (WD == KVS_DTYPE_FP32) {
		uint32_t w[8] = { raw[0].x, raw[0].y, raw[0].z, raw[0].w,
				  raw[1].x, raw[1].y, raw[1].z, raw[1].w };

#pragma unroll
		for (int e = 0; e < 8; e++)
			f[e] = __uint_as_float(w[e]);
	} else {
		uint32_t w[4] = { raw[0].x, raw[0].y, raw[0].z, raw[0].w };

#pragma unroll
		for (int e = 0; e < 8; e++) {
			uint16_t h = (uint16_t)(w[e / 2] >> (16 * (e % 2)));

			f[e] = WD == KVS_DTYPE_FP16 ? kvs_f16_to_f32(h)
						    : kvs_bf16_to_f32(h);
		}
	}
}

template <int WD>
static __device__ void store8(uint8_t *p, const float f[8])
{
	if (WD == KVS_DTYPE_FP32) {
		((float4 *)p)[0] = make_float4(f[0], f[1], f[2], f[3]);
		((float4 *)p)[1] = make_float4(f[4], f[5], f[6], f[7]);
	} else {
		uint32_t w[4];

#pragma unroll
		for (int e = 0; e < 4; e++) {
			uint32_t lo, hi;

			lo = WD == KVS_DTYPE_FP16 ? kvs_f32_to_f16(f[2 * e])
						  : kvs_f32_to_bf16(f[2 * e]);
			hi = WD == KVS_DTYPE_FP16 ? kvs_f32_to_f16(f[2 * e + 1])
						  : kvs_f32_to_bf16(f[2 * e + 1]);
			w[e] = lo | hi << 16;
		}
		*(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
	}
}

/* ---- stored codes ---- */

template <int QD>
static __device__ uint8_t quant(float y)
{
	return QD == KVS_DTYPE_INT8 ? (uint8_t)kvs_quant_int8(y) : kvs_f32_to_e4m3(y);
}

template <int QD>
static __device__ float dequant(uint8_t b)
{
	return QD == KVS_DTYPE_INT8 ? (float)(int8_t)b : kvs_e4m3_to_f32(b);
}

/* Scales follow data of any length, so they may be unaligned. */
static __device__ float scale_load(const uint8_t *p)
{
	float f;

	if ((uintptr_t)p % 4 == 0)
		return *(const float *)p;
	memcpy(&f, p, 4);
	return f;
}

static __device__ void scale_store(uint8_t *p, float f)
{
	if ((uintptr_t)p % 4 == 0)
		*(float *)p = f;
	else
		memcpy(p, &f, 4);
}

/* One row worker -> block. Every lane of the warp calls this (the shuffles
 * need them all); @ok says whether this lane's group has a row. */
template <int WD, int QD>
static __device__ void scatter_row(const geom &g, uint32_t lane, bool ok,
				   bool regs, const uint8_t *wr, uint8_t *br,
				   uint8_t *sr)
{
	const uint32_t G = g.group, nv = g.D / 8;
	float f[8], amax = 0.0f, scale, inv;
	uint4 raw[NV][2];

	if (ok && regs) {
#pragma unroll
		for (int i = 0; i < NV; i++)
			if (lane + i * G < nv)
				load8<WD>(wr + (uint64_t)(lane + i * G) * 8 * g.w, raw[i]);
#pragma unroll
		for (int i = 0; i < NV; i++) {
			if (lane + i * G >= nv)
				continue;
			unpack8<WD>(raw[i], f);
#pragma unroll
			for (int e = 0; e < 8; e++)
				amax = fmaxf(amax, fabsf(f[e]));
		}
	} else if (ok) {
		for (uint32_t k = lane; k < g.D; k += G)
			amax = fmaxf(amax, fabsf(elem_load<WD>(wr, k)));
	}
	for (uint32_t off = G / 2; off > 0; off /= 2)
		amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
	if (!ok)
		return;
	kvs_quant_params(amax, QD == KVS_DTYPE_INT8 ? KVS_INT8_QMAX : KVS_E4M3_QMAX,
			 &scale, &inv);
	if (regs) {
#pragma unroll
		for (int i = 0; i < NV; i++) {
			uint32_t k = lane + i * G, c[2] = { 0, 0 };

			if (k >= nv)
				continue;
			unpack8<WD>(raw[i], f);
#pragma unroll
			for (int e = 0; e < 8; e++)
				c[e / 4] |= (uint32_t)quant<QD>(kvs_quant_apply(
						    f[e], scale, inv))
					    << (8 * (e % 4));
			*(uint2 *)(br + (uint64_t)k * 8) = make_uint2(c[0], c[1]);
		}
	} else {
		/* Rows too long for registers: read again (from L1/L2). */
		for (uint32_t k = lane; k < g.D; k += G)
			br[k] = quant<QD>(kvs_quant_apply(elem_load<WD>(wr, k),
							  scale, inv));
	}
	if (lane == 0)
		scale_store(sr, scale);
}

/* One row block -> worker. */
template <int WD, int QD>
static __device__ void gather_row(const geom &g, uint32_t lane, bool vec,
				  uint8_t *wr, const uint8_t *br,
				  const uint8_t *sr)
{
	float scale = scale_load(sr);

	if (vec) {
		for (uint32_t k = lane; k < g.D / 8; k += g.group) {
			uint2 c = *(const uint2 *)(br + (uint64_t)k * 8);
			float f[8];

#pragma unroll
			for (int e = 0; e < 8; e++)
				f[e] = dequant<QD>((uint8_t)((e < 4 ? c.x : c.y) >>
							     (8 * (e % 4)))) *
				       scale;
			store8<WD>(wr + (uint64_t)k * 8 * g.w, f);
		}
	} else {
		for (uint32_t k = lane; k < g.D; k += g.group)
			elem_store<WD>(wr, k, dequant<QD>(br[k]) * scale);
	}
}

template <int WD, int QD, bool SCATTER>
static __global__ void __launch_bounds__(THREADS) kv_copy_quant(geom g)
{
	const uint32_t lane = threadIdx.x % g.group, slot = threadIdx.x / g.group;
	const uint32_t per_pass = THREADS / g.group;

	for (uint64_t u = blockIdx.x; u < g.units; u += gridDim.x) {
		unit t;

		if (!locate(g, u, &t))
			continue;
		/* Uniform over the CUDA block: every row of a unit shares the
		 * alignment of its first row. */
		bool vec = g.D % 8 == 0 && g.strides16 &&
			   (uintptr_t)wrow(g, t, 0) % 16 == 0 &&
			   (uintptr_t)t.data % 8 == 0;
		bool regs = vec && g.D / 8 <= NV * g.group;

		for (uint32_t r0 = 0; r0 < t.rows; r0 += per_pass) {
			uint32_t r = r0 + slot;
			bool ok = r < t.rows;
			uint8_t *wr = ok ? wrow(g, t, r) : t.wpage;
			uint8_t *br = t.data + (uint64_t)r * g.D;
			uint8_t *sr = t.scales + (uint64_t)r * 4;

			if (SCATTER)
				scatter_row<WD, QD>(g, lane, ok, regs, wr, br, sr);
			else if (ok)
				gather_row<WD, QD>(g, lane, vec, wr, br, sr);
		}
	}
}

static uint32_t pow2_at_least(uint32_t n, uint32_t cap)
{
	uint32_t p = 1;

	while (p < n && p < cap)
		p *= 2;
	return p;
}

static size_t elem_bytes(kvs_dtype d)
{
	return d == KVS_DTYPE_FP32 ? 4 : d == KVS_DTYPE_FP16 || d == KVS_DTYPE_BF16 ? 2 : 1;
}

template <int WD, int QD>
static void launch_quant(const geom &g, unsigned grid, cudaStream_t st,
			 bool scatter)
{
	if (scatter)
		kv_copy_quant<WD, QD, true><<<grid, THREADS, 0, st>>>(g);
	else
		kv_copy_quant<WD, QD, false><<<grid, THREADS, 0, st>>>(g);
}

template <int WD>
static void launch_quant_w(const geom &g, kvs_dtype qd, unsigned grid,
			   cudaStream_t st, bool scatter)
{
	if (qd == KVS_DTYPE_INT8)
		launch_quant<WD, KVS_DTYPE_INT8>(g, grid, st, scatter);
	else
		launch_quant<WD, KVS_DTYPE_FP8_E4M3>(g, grid, st, scatter);
}

static int kv_copy_cuda(const kvs_kv_cache *c, const kvs_kv_blocks *b,
			void *stream, bool scatter)
{
	cudaStream_t st = (cudaStream_t)stream;
	uint64_t page_rows, units;
	unsigned grid;
	geom g;
	int rc = kvs_kv_copy_check(c, b);

	if (rc < 0 || b->count == 0)
		return rc;
	g.layers = c->layer_ptrs;
	g.offsets = b->offsets;
	g.page_ids = b->page_ids;
	g.arena = (uint8_t *)b->arena;
	g.arena_bytes = b->arena_bytes;
	g.block_bytes = kvs_kv_block_bytes(c, b);
	g.nlayers = c->layers;
	g.num_pages = c->num_pages;
	g.pt = c->page_tokens;
	g.H = c->kv_heads;
	g.D = c->head_dim;
	g.bt = b->block_tokens;
	g.ppb = b->block_tokens / c->page_tokens;
	g.w = (uint32_t)elem_bytes(c->dtype);
	g.q = (uint32_t)elem_bytes(b->dtype);
	{
		int64_t st[KVS_KV_STRIDES];

		kvs_kv_strides(c, st); /* checked above */
		g.s_kv = st[KVS_KV_STRIDE_KV];
		g.s_page = st[KVS_KV_STRIDE_PAGE];
		g.s_tok = st[KVS_KV_STRIDE_TOKEN];
		g.s_head = st[KVS_KV_STRIDE_HEAD];
	}
	g.contig = g.s_head == g.D && g.s_tok == (int64_t)g.H * g.D;
	g.strides16 = g.contig || ((g.s_kv | g.s_page | g.s_tok | g.s_head) *
				   (int64_t)g.w) % 16 == 0;
	g.layer_first = b->layer_first;
	g.layer_count = b->layer_count ? b->layer_count : c->layers;
	g.data_bytes = (uint64_t)g.nlayers * 2 * g.bt * g.H * g.D * g.q;
	page_rows = (uint64_t)g.pt * g.H;
	g.tile_rows = (uint32_t)(TILE_BYTES / ((uint64_t)g.D * g.w));
	if (g.tile_rows == 0)
		g.tile_rows = 1;
	if (g.tile_rows > page_rows)
		g.tile_rows = (uint32_t)page_rows;
	if ((page_rows + g.tile_rows - 1) / g.tile_rows > UINT32_MAX)
		return -EINVAL;
	g.tiles = (uint32_t)((page_rows + g.tile_rows - 1) / g.tile_rows);
	g.group = g.D % 8 == 0 ? pow2_at_least(g.D / 8, 32) : pow2_at_least(g.D, 32);
	/* units = count * layers * 2 * ppb * tiles, each factor < 2^32. */
	units = (uint64_t)b->count * g.layer_count * 2;
	if (units > UINT64_MAX / g.ppb / g.tiles)
		return -EINVAL;
	g.units = units * g.ppb * g.tiles;
	grid = (unsigned)(g.units < MAX_GRID ? g.units : MAX_GRID);

	if (b->dtype == c->dtype)
		kv_copy_plain<<<grid, THREADS, 0, st>>>(g, scatter);
	else if (c->dtype == KVS_DTYPE_FP16)
		launch_quant_w<KVS_DTYPE_FP16>(g, b->dtype, grid, st, scatter);
	else if (c->dtype == KVS_DTYPE_BF16)
		launch_quant_w<KVS_DTYPE_BF16>(g, b->dtype, grid, st, scatter);
	else
		launch_quant_w<KVS_DTYPE_FP32>(g, b->dtype, grid, st, scatter);
	return kvs_cuda_errno(cudaGetLastError());
}

int kvs_kv_scatter_cuda(const kvs_kv_cache *cache, const kvs_kv_blocks *blocks,
			void *stream)
{
	return kv_copy_cuda(cache, blocks, stream, true);
}

int kvs_kv_gather_cuda(const kvs_kv_cache *cache, const kvs_kv_blocks *blocks,
		       void *stream)
{
	return kv_copy_cuda(cache, blocks, stream, false);
}
