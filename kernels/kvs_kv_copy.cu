/*
 * kvs_kv_copy.cu - scatter/gather between a worker's paged KV cache and
 * cache blocks on a CUDA stream; the C twin is kvs_kv_copy.c.
 *
 * Plain copies: work is cut into units of up to tile_rows rows of one page
 * of one (block, layer, K|V). When a page's rows are contiguous on both
 * sides (the token-major layouts), a unit is one contiguous run (16-byte
 * vectors when aligned); otherwise (strided layouts: head-major, padded)
 * each warp copies a row at a time.
 * Quantized blocks (kvs_kv_format.h): one CUDA block per (block, layer,
 * head), because K's per-channel statistics span the block's tokens, which
 * may lie in several pages. Its threads take K's channels (their spans, in
 * shared memory; thread 0 ranks the outliers as the twin does), then whole
 * bytes of K's rows per token group, then V's (token, channel group)
 * pairs; a gather takes (K|V, token, channel) triples, consecutive threads
 * on consecutive channels. Every value is rounded as kvs_numeric.h says,
 * infinities and NaNs included (kvs_span_add, kvs_affine_y, one NaN per
 * format), so the results match the twin bit for bit.
 * The grid strides over units.
 */
#include <errno.h>

#include <cuda_runtime.h>

#include "kvs_cuda.h"
#include "kvs_kv_copy.h"
#include "kvs_kv_format.h"
#include "kvs_numeric.h"

#define THREADS 256
#define TILE_BYTES 32768u /* worker bytes per unit */
#define MAX_GRID (1u << 20)

struct geom {
	void *const *layers;
	const uint64_t *offsets;
	const int32_t *page_ids;
	uint8_t *arena;
	uint64_t arena_bytes, block_bytes, units;
	uint32_t nlayers, num_pages, pt, H, D, bt, ppb;
	uint32_t tile_rows, tiles; /* rows per unit, units per page */
	uint32_t w, q;             /* element bytes: worker, stored */
	uint32_t layer_first, layer_count;
	int64_t s_kv, s_page, s_tok, s_head; /* worker strides, elements */
	int contig;                /* a page's rows in block order, one run */
	int strides16;             /* every stride a multiple of 16 bytes */
};

struct unit {
	uint8_t *wpage;  /* the page's K or V in the worker cache */
	uint64_t r0;     /* first row of the unit in the page */
	uint8_t *data;   /* first block row */
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

/* ---- quantized blocks (kvs_kv_format.h) ---- */

/* One CUDA block per (block, layer, head): K's per-channel statistics span
 * the whole block's tokens (several worker pages), so that is the unit. */
struct qgeom {
	void *const *layers;
	const uint64_t *offsets;
	const int32_t *page_ids;
	uint8_t *arena;
	uint64_t arena_bytes, units;
	kvs_kv_format f;
	uint32_t num_pages, pt, ppb, w;
	uint32_t layer_first, layer_count;
	int64_t s_kv, s_page, s_tok, s_head;
	float qmax;
	int sign, int4;
};

/* Token t, K|V kv of job i's layer base @base. */
static __device__ const uint8_t *qrow(const qgeom &g, const uint8_t *base,
				      uint64_t i, uint32_t kv, uint32_t t,
				      uint32_t h)
{
	int64_t page = g.page_ids[i * g.ppb + t / g.pt];

	return base + (kv * g.s_kv + page * g.s_page + (int64_t)(t % g.pt) * g.s_tok +
		       (int64_t)h * g.s_head) * (int64_t)g.w;
}

static __device__ bool qvalid(const qgeom &g, uint64_t i, const uint8_t *base)
{
	uint64_t off = g.offsets[i];

	if (!base || (uintptr_t)base % g.w || off > g.arena_bytes - g.f.total)
		return false;
	for (uint32_t p = 0; p < g.ppb; p++) {
		int32_t id = g.page_ids[i * g.ppb + p];

		if (id < 0 || (uint32_t)id >= g.num_pages)
			return false;
	}
	return true;
}

static __device__ void par_store(uint8_t *p, float scale, float zero)
{
	scale_store(p, scale);
	scale_store(p + 4, zero);
}

static __device__ void u16_store(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v; /* little-endian, maybe unaligned */
	p[1] = (uint8_t)(v >> 8);
}

static __device__ uint16_t u16_load(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static __device__ uint8_t qcode(const qgeom &g, float y)
{
	return g.sign ? kvs_f32_to_e4m3(y) : kvs_affine_code(y, g.qmax);
}

static __device__ float qvalue(const qgeom &g, uint8_t q)
{
	return g.sign ? kvs_e4m3_to_f32(q) : (float)q;
}

static __device__ uint8_t code_at(const qgeom &g, const uint8_t *row, uint32_t e)
{
	return g.int4 ? (row[e / 2] >> (4 * (e % 2))) & 15u : row[e];
}

/* Half the width of a channel: what ranks outliers (as the twin). */
static __device__ float qwidth(float lo, float hi)
{
	return kvs_fsub(kvs_fmul(hi, 0.5f), kvs_fmul(lo, 0.5f));
}

template <int WD>
static __device__ void quant_scatter(const qgeom &g, uint64_t i, uint32_t l,
				     uint32_t h, const uint8_t *base, uint8_t *blk,
				     float *s_lo, float *s_hi, int *s_omap)
{
	const kvs_kv_format &f = g.f;
	const float inf = kvs_f32_from_bits(0x7f800000u);
	const uint32_t D = f.D, bt = f.bt, cpb = g.int4 ? 2 : 1;

	/* K: the span of each channel over the block, then the outliers. */
	for (uint32_t d = threadIdx.x; d < D; d += THREADS) {
		float lo = inf, hi = -inf;

		for (uint32_t t = 0; t < bt; t++)
			kvs_span_add(elem_load<WD>(qrow(g, base, i, 0, t, h), d), &lo, &hi);
		if (lo > hi)
			lo = hi = 0.0f;
		s_lo[d] = lo;
		s_hi[d] = hi;
		s_omap[d] = -1;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		for (uint32_t j = 0; j < f.nout; j++) {
			uint32_t best = D;

			for (uint32_t d = 0; d < D; d++)
				if (s_omap[d] < 0 &&
				    (best == D || qwidth(s_lo[d], s_hi[d]) >
							  qwidth(s_lo[best], s_hi[best])))
					best = d;
			s_omap[best] = (int)j;
			u16_store(blk + kvs_kv_fmt_oidx(&f, l, h, j), (uint16_t)best);
		}
	}
	__syncthreads();
	/* Each thread owns whole bytes of the rows: one channel, or two (INT4). */
	for (uint32_t gi = 0; gi < f.ktg; gi++) {
		uint32_t t0 = gi * f.kgroup, n = min(f.kgroup, bt - t0);

		for (uint32_t c = threadIdx.x; c < f.row_bytes; c += THREADS) {
			float sc[2], ze[2], inv[2];

			for (uint32_t k = 0; k < cpb && c * cpb + k < D; k++) {
				uint32_t d = c * cpb + k;
				float lo = inf, hi = -inf;

				for (uint32_t t = t0; t < t0 + n; t++)
					kvs_span_add(elem_load<WD>(qrow(g, base, i, 0, t, h), d),
						     &lo, &hi);
				if (lo > hi)
					lo = hi = 0.0f;
				kvs_affine_params(lo, hi, g.qmax, g.sign, &sc[k], &ze[k], &inv[k]);
				par_store(blk + kvs_kv_fmt_kpar(&f, l, gi, h, d), sc[k], ze[k]);
			}
			for (uint32_t t = t0; t < t0 + n; t++) {
				const uint8_t *wr = qrow(g, base, i, 0, t, h);
				uint32_t byte = 0;

				for (uint32_t k = 0; k < cpb && c * cpb + k < D; k++) {
					uint32_t d = c * cpb + k;
					float y = kvs_affine_y(elem_load<WD>(wr, d), sc[k],
							       ze[k], inv[k], g.qmax, g.sign);

					if (s_omap[d] >= 0)
						u16_store(blk + kvs_kv_fmt_oval(&f, l, h, (uint32_t)s_omap[d], t),
							  kvs_f32_to_f16(y));
					else
						byte |= (uint32_t)qcode(g, y) << (4 * k);
				}
				blk[kvs_kv_fmt_row(&f, l, 0, t, h) + c] = (uint8_t)byte;
			}
		}
	}
	/* V: one thread per (token, channel group); groups start on even
	 * channels, so a thread owns its bytes. */
	for (uint64_t u = threadIdx.x; u < (uint64_t)bt * f.vcg; u += THREADS) {
		uint32_t t = (uint32_t)(u / f.vcg), c = (uint32_t)(u % f.vcg);
		uint32_t e0 = c * f.vgroup, n = min(f.vgroup, D - e0);
		const uint8_t *wr = qrow(g, base, i, 1, t, h);
		uint8_t *row = blk + kvs_kv_fmt_row(&f, l, 1, t, h);
		float lo = inf, hi = -inf, sc, ze, inv;

		for (uint32_t e = e0; e < e0 + n; e++)
			kvs_span_add(elem_load<WD>(wr, e), &lo, &hi);
		if (lo > hi)
			lo = hi = 0.0f;
		kvs_affine_params(lo, hi, g.qmax, g.sign, &sc, &ze, &inv);
		par_store(blk + kvs_kv_fmt_vpar(&f, l, t, h, c), sc, ze);
		for (uint32_t e = e0; e < e0 + n; e += cpb) {
			uint32_t byte = 0;

			for (uint32_t k = 0; k < cpb && e + k < e0 + n; k++)
				byte |= (uint32_t)qcode(g, kvs_affine_y(
						elem_load<WD>(wr, e + k), sc, ze, inv, g.qmax,
						g.sign)) << (4 * k);
			row[e / cpb] = (uint8_t)byte;
		}
	}
}

template <int WD>
static __device__ void quant_gather(const qgeom &g, uint64_t i, uint32_t l,
				    uint32_t h, uint8_t *base, const uint8_t *blk,
				    int *s_omap)
{
	const kvs_kv_format &f = g.f;
	const uint32_t D = f.D;

	for (uint32_t d = threadIdx.x; d < D; d += THREADS)
		s_omap[d] = -1;
	__syncthreads();
	if (threadIdx.x == 0) {
		for (uint32_t j = 0; j < f.nout; j++) {
			uint32_t d = u16_load(blk + kvs_kv_fmt_oidx(&f, l, h, j));

			if (d < D && s_omap[d] < 0) /* a damaged list: the first wins */
				s_omap[d] = (int)j;
		}
	}
	__syncthreads();
	/* Consecutive threads on consecutive channels of a row. */
	for (uint64_t u = threadIdx.x; u < (uint64_t)2 * f.bt * D; u += THREADS) {
		uint32_t kv = (uint32_t)(u / ((uint64_t)f.bt * D));
		uint32_t t = (uint32_t)(u / D % f.bt), d = (uint32_t)(u % D);
		const uint8_t *row = blk + kvs_kv_fmt_row(&f, l, kv, t, h), *par;
		float v;

		if (kv == 0 && s_omap[d] >= 0)
			v = kvs_f16_to_f32(u16_load(blk + kvs_kv_fmt_oval(&f, l, h,
									  (uint32_t)s_omap[d], t)));
		else
			v = qvalue(g, code_at(g, row, d));
		par = blk + (kv == 0 ? kvs_kv_fmt_kpar(&f, l, t / f.kgroup, h, d)
				     : kvs_kv_fmt_vpar(&f, l, t, h, d / f.vgroup));
		elem_store<WD>((uint8_t *)qrow(g, base, i, kv, t, h), d,
			       kvs_affine_value(v, scale_load(par), scale_load(par + 4)));
	}
}

template <int WD, bool SCATTER>
static __global__ void __launch_bounds__(THREADS) kv_copy_quant(qgeom g)
{
	extern __shared__ float smem[]; /* lo[D], hi[D], omap[D] */
	float *s_lo = smem, *s_hi = smem + g.f.D;
	int *s_omap = (int *)(smem + 2 * g.f.D);

	for (uint64_t u = blockIdx.x; u < g.units; u += gridDim.x) {
		uint32_t h = (uint32_t)(u % g.f.H);
		uint32_t l = g.layer_first + (uint32_t)(u / g.f.H % g.layer_count);
		uint64_t i = u / g.f.H / g.layer_count;
		uint8_t *base = (uint8_t *)g.layers[l];

		if (!qvalid(g, i, base)) /* uniform over the CUDA block */
			continue;
		if (SCATTER)
			quant_scatter<WD>(g, i, l, h, base, g.arena + g.offsets[i],
					  s_lo, s_hi, s_omap);
		else
			quant_gather<WD>(g, i, l, h, base, g.arena + g.offsets[i],
					 s_omap);
		__syncthreads(); /* shared memory is reused by the next unit */
	}
}

static size_t elem_bytes(kvs_dtype d)
{
	return d == KVS_DTYPE_FP32 ? 4 : d == KVS_DTYPE_FP16 || d == KVS_DTYPE_BF16 ? 2 : 1;
}

template <int WD>
static void launch_quant(const qgeom &g, unsigned grid, size_t shm,
			 cudaStream_t st, bool scatter)
{
	if (scatter)
		kv_copy_quant<WD, true><<<grid, THREADS, shm, st>>>(g);
	else
		kv_copy_quant<WD, false><<<grid, THREADS, shm, st>>>(g);
}

static int kv_quant_cuda(const kvs_kv_cache *c, const kvs_kv_blocks *b,
			 cudaStream_t st, bool scatter)
{
	qgeom g;
	int64_t s[KVS_KV_STRIDES];
	size_t shm = (size_t)c->head_dim * 12;
	unsigned grid;

	memset(&g, 0, sizeof(g));
	kvs_kv_format_init(&g.f, c->layers, b->block_tokens, c->kv_heads,
			   c->head_dim, b->dtype); /* checked by the caller */
	kvs_kv_strides(c, s);
	g.layers = c->layer_ptrs;
	g.offsets = b->offsets;
	g.page_ids = b->page_ids;
	g.arena = (uint8_t *)b->arena;
	g.arena_bytes = b->arena_bytes;
	g.num_pages = c->num_pages;
	g.pt = c->page_tokens;
	g.ppb = b->block_tokens / c->page_tokens;
	g.w = (uint32_t)elem_bytes(c->dtype);
	g.layer_first = b->layer_first;
	g.layer_count = b->layer_count ? b->layer_count : c->layers;
	g.s_kv = s[KVS_KV_STRIDE_KV];
	g.s_page = s[KVS_KV_STRIDE_PAGE];
	g.s_tok = s[KVS_KV_STRIDE_TOKEN];
	g.s_head = s[KVS_KV_STRIDE_HEAD];
	g.sign = b->dtype == KVS_DTYPE_FP8_E4M3;
	g.int4 = b->dtype == KVS_DTYPE_INT4;
	g.qmax = g.sign ? KVS_E4M3_QMAX : g.int4 ? KVS_INT4_QMAX : KVS_UINT8_QMAX;
	/* units = count * layers * heads, each factor < 2^32 */
	if ((uint64_t)b->count * g.layer_count > UINT64_MAX / c->kv_heads)
		return -EINVAL;
	g.units = (uint64_t)b->count * g.layer_count * c->kv_heads;
	if (shm > 48 * 1024) /* head_dim > 4096: more than the default limit */
		return -EINVAL;
	grid = (unsigned)(g.units < MAX_GRID ? g.units : MAX_GRID);
	if (c->dtype == KVS_DTYPE_FP16)
		launch_quant<KVS_DTYPE_FP16>(g, grid, shm, st, scatter);
	else if (c->dtype == KVS_DTYPE_BF16)
		launch_quant<KVS_DTYPE_BF16>(g, grid, shm, st, scatter);
	else
		launch_quant<KVS_DTYPE_FP32>(g, grid, shm, st, scatter);
	return kvs_cuda_errno(cudaGetLastError());
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
	if (b->dtype != c->dtype)
		return kv_quant_cuda(c, b, st, scatter);
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
	page_rows = (uint64_t)g.pt * g.H;
	g.tile_rows = (uint32_t)(TILE_BYTES / ((uint64_t)g.D * g.w));
	if (g.tile_rows == 0)
		g.tile_rows = 1;
	if (g.tile_rows > page_rows)
		g.tile_rows = (uint32_t)page_rows;
	if ((page_rows + g.tile_rows - 1) / g.tile_rows > UINT32_MAX)
		return -EINVAL;
	g.tiles = (uint32_t)((page_rows + g.tile_rows - 1) / g.tile_rows);
	/* units = count * layers * 2 * ppb * tiles, each factor < 2^32. */
	units = (uint64_t)b->count * g.layer_count * 2;
	if (units > UINT64_MAX / g.ppb / g.tiles)
		return -EINVAL;
	g.units = units * g.ppb * g.tiles;
	grid = (unsigned)(g.units < MAX_GRID ? g.units : MAX_GRID);

	kv_copy_plain<<<grid, THREADS, 0, st>>>(g, scatter);
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
