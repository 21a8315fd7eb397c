/*
 * test_kv_edge.c - what a client controls in the KV format, at its edges:
 *
 *  - non-finite values: a block with +inf, -inf and NaN in K (a coded
 *    channel and an fp16 outlier channel) and in V, and groups with no
 *    finite value at all, for every quantized dtype and every worker dtype.
 *    Every group's scale and zero point are those of its finite values; every
 *    finite value reads back within the dtype's tolerance; +-inf read back
 *    as the group's finite extremes; NaN as the canonical NaN of the worker
 *    dtype (FP8) or the group's value nearest 0 (INT8, INT4)
 *    (kvs_numeric.h, docs/architecture.md "A block's bytes"); and finite
 *    values whose distance to the group's zero overflows fp32;
 *  - plain dtypes are bit copies: infinities and NaN payloads come back as
 *    they were;
 *  - layout sizes: kvs_kv_format_init() and kvs_layout_block_bytes() give
 *    the exact size, computed here in saturating 128-bit arithmetic, or
 *    refuse it (-EOVERFLOW, 0) when it passes INT64_MAX (or a row passes
 *    2^32 - 1 bytes), for layouts whose
 *    products overflow 32 and 64 bits and for random ones; worker caches
 *    whose strides pass INT64_MAX are refused (-EINVAL).
 * The CUDA kernels share every rule through kvs_numeric.h; they need a GPU
 * (tests/gpu/test_kernels_gpu.c compares them with these twins).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_check.h"
#include "kvs_kv_copy.h"
#include "kvs_kv_format.h"
#include "kvs_numeric.h"
#include "kvs_types.h" /* kvs_layout_block_bytes(): what HELLO checks */

static uint64_t xs = 88172645463325252ull;

static uint64_t next(void) /* xorshift64 */
{
	xs ^= xs << 13;
	xs ^= xs >> 7;
	xs ^= xs << 17;
	return xs;
}

static float noise(void) /* roughly N(0,1) */
{
	float x = 0.0f;

	for (int i = 0; i < 6; i++)
		x += (float)(next() >> 40) * 0x1p-24f - 0.5f;
	return x * 1.4f;
}

/* ---- non-finite values in quantized blocks ---- */

enum { L = 1, H = 2, D = 64, BT = 64, PT = 16, NPAGES = BT / PT };

static size_t wsize(kvs_dtype w) { return w == KVS_DTYPE_FP32 ? 4 : 2; }

static double wget(kvs_dtype w, const uint8_t *p)
{
	uint16_t h;
	float f;

	if (w == KVS_DTYPE_FP32)
		return memcpy(&f, p, 4), f;
	memcpy(&h, p, 2);
	return w == KVS_DTYPE_FP16 ? kvs_f16_to_f32(h) : kvs_bf16_to_f32(h);
}

static void wput(kvs_dtype w, uint8_t *p, float x)
{
	uint16_t h;

	if (w == KVS_DTYPE_FP32) {
		memcpy(p, &x, 4);
		return;
	}
	h = w == KVS_DTYPE_FP16 ? kvs_f32_to_f16(x) : kvs_f32_to_bf16(x);
	memcpy(p, &h, 2);
}

/* Whether the worker element at p is the canonical NaN of its dtype. */
static int canonical_nan(kvs_dtype w, const uint8_t *p)
{
	uint32_t u = 0;

	memcpy(&u, p, wsize(w));
	return u == (w == KVS_DTYPE_FP32 ? 0x7fc00000u :
		     w == KVS_DTYPE_FP16 ? 0x7e00u : 0x7fc0u);
}

/* Relative rounding of the worker dtype, and its smallest step. */
static double wtol(kvs_dtype w, double v)
{
	return fabs(v) * (w == KVS_DTYPE_FP32 ? 0x1p-24 : w == KVS_DTYPE_FP16 ? 0x1p-11 : 0x1p-8) +
	       (w == KVS_DTYPE_FP16 ? 0x1p-24 : 0x1p-140);
}

/* Offset (elements) of (kv, token t, head h) in the KV-inner cache, pages in
 * reverse order. */
static size_t at(uint32_t kv, uint32_t t, uint32_t h)
{
	size_t page = NPAGES - 1 - t / PT;

	return (((page * 2 + kv) * PT + t % PT) * H + h) * D;
}

struct bad { /* counts of failed checks, by kind */
	int par, finite, pinf, ninf, nan, none;
};

/* One group (n values *x[k], read back as *g[k]) against the rule; s, z:
 * its stored scale and zero point. */
static void check_group(kvs_dtype w, kvs_dtype q, uint8_t *const *x,
			uint8_t *const *g, uint32_t n, float s, float z,
			struct bad *b)
{
	double qmax = q == KVS_DTYPE_FP8_E4M3 ? 448.0 : q == KVS_DTYPE_INT4 ? 15.0 : 255.0;
	float lo = INFINITY, hi = -INFINITY, ws, wz, inv;
	int fp8 = q == KVS_DTYPE_FP8_E4M3, any = 0;
	double top, bot, mid;

	for (uint32_t k = 0; k < n; k++) {
		float v = (float)wget(w, x[k]);

		if (isfinite(v)) {
			lo = fminf(lo, v), hi = fmaxf(hi, v);
			any = 1;
		}
	}
	if (!any)
		lo = hi = 0.0f;
	kvs_affine_params(lo, hi, (float)qmax, fp8, &ws, &wz, &inv);
	b->par += s != ws || z != wz;
	top = fp8 ? fmax(-lo, hi) : hi;
	bot = fp8 ? -top : lo;
	mid = fp8 ? 0.0 : fmin(fmax(0.0, lo), hi); /* the value nearest 0 */
	for (uint32_t k = 0; k < n; k++) {
		double v = wget(w, x[k]), r = wget(w, g[k]);
		/* fp32 rounding, and the worker's of a value in the group's range
		 * (never of r itself: an inf read back must not widen its own
		 * bound) */
		double slack = 0x1p-20 * (fabs(lo) + fabs(hi)) +
			       wtol(w, fmax(fabs(lo), fabs(hi)) + s);

		if (!any) {
			if (isnan(v) && fp8)
				b->none += !canonical_nan(w, g[k]);
			else
				b->none += r != 0.0;
		} else if (isfinite(v)) {
			double bound = fp8 ? 0x1p-4 * fabs(v) + 0x1p-9 * s : s / 2;

			b->finite += !(fabs(v - r) <= bound * (1 + 0x1p-10) + slack);
		} else if (isinf(v) && v > 0) {
			b->pinf += !(fabs(r - top) <= slack);
		} else if (isinf(v)) {
			b->ninf += !(fabs(r - bot) <= slack);
		} else if (fp8) {
			b->nan += !canonical_nan(w, g[k]);
		} else {
			b->nan += !(fabs(r - mid) <= s / 2 * (1 + 0x1p-10) + slack);
		}
	}
}

/* The source layer: noise, with +-inf, NaN and values near fp32's limits
 * placed in it. */
static void nonfinite_fill(kvs_dtype w, uint8_t *src)
{
	const float inf = INFINITY, spec[3] = { INFINITY, -INFINITY, NAN };
	size_t e = wsize(w);

	for (uint32_t kv = 0; kv < 2; kv++)
	for (uint32_t t = 0; t < BT; t++)
	for (uint32_t h = 0; h < H; h++)
	for (uint32_t d = 0; d < D; d++) /* K channels 5 and 40: the outliers */
		wput(w, src + (at(kv, t, h) + d) * e,
		     noise() * (kv == 0 && (d == 5 || d == 40) ? 100.0f : 1.0f));
	/* K, head 0: +inf, -inf, NaN in coded channel 3 and outlier channel 5
	 * (tokens 1-6, INT4's first token group); head 1: channel 7 has no
	 * finite value. */
	for (uint32_t i = 0; i < 3; i++) {
		wput(w, src + (at(0, 1 + i, 0) + 3) * e, spec[i]);
		wput(w, src + (at(0, 4 + i, 0) + 5) * e, spec[i]);
		/* V, head 0: token 9 in channels 3-5, token 10 in 40-42 (INT4's
		 * second channel group). */
		wput(w, src + (at(1, 9, 0) + 3 + i) * e, spec[i]);
		wput(w, src + (at(1, 10, 0) + 40 + i) * e, spec[i]);
	}
	for (uint32_t t = 0; t < BT; t++)
		wput(w, src + (at(0, t, 1) + 7) * e, spec[t % 3]);
	/* K, head 1, outlier channel 40: finite values whose x - zero
	 * overflows fp32 (bf16 and fp32 workers can hold them). */
	if (w != KVS_DTYPE_FP16) {
		wput(w, src + (at(0, 20, 1) + 40) * e, 3e38f);
		wput(w, src + (at(0, 21, 1) + 40) * e, -3e38f);
	}
	for (uint32_t d = 0; d < D; d++) /* V, head 1: token 11 has none */
		wput(w, src + (at(1, 11, 1) + d) * e, d % 2 ? -inf : NAN);
}

/* Every group of the block in @arena (format @f) against check_group():
 * K by channel x token group, V by token x channel group. */
static void nonfinite_groups(kvs_dtype w, kvs_dtype q, const kvs_kv_format *f,
			     const uint8_t *arena, uint8_t *src, uint8_t *dst,
			     struct bad *bad)
{
	size_t e = wsize(w);
	uint8_t *xp[BT], *gs[BT];

	for (uint32_t h = 0; h < H; h++) {
		for (uint32_t gi = 0; gi < f->ktg; gi++) /* K: channel x token group */
		for (uint32_t d = 0; d < D; d++) {
			uint32_t t0 = gi * f->kgroup, n = BT - t0 < f->kgroup ? BT - t0 : f->kgroup;
			float s, z;

			memcpy(&s, arena + kvs_kv_fmt_kpar(f, 0, gi, h, d), 4);
			memcpy(&z, arena + kvs_kv_fmt_kpar(f, 0, gi, h, d) + 4, 4);
			for (uint32_t k = 0; k < n; k++) {
				xp[k] = src + (at(0, t0 + k, h) + d) * e;
				gs[k] = dst + (at(0, t0 + k, h) + d) * e;
			}
			check_group(w, q, xp, gs, n, s, z, bad);
		}
		for (uint32_t t = 0; t < BT; t++) /* V: token x channel group */
		for (uint32_t ci = 0; ci < f->vcg; ci++) {
			uint32_t e0 = ci * f->vgroup, n = D - e0 < f->vgroup ? D - e0 : f->vgroup;
			float s, z;

			memcpy(&s, arena + kvs_kv_fmt_vpar(f, 0, t, h, ci), 4);
			memcpy(&z, arena + kvs_kv_fmt_vpar(f, 0, t, h, ci) + 4, 4);
			for (uint32_t k = 0; k < n; k++) {
				xp[k] = src + (at(1, t, h) + e0 + k) * e;
				gs[k] = dst + (at(1, t, h) + e0 + k) * e;
			}
			check_group(w, q, xp, gs, n, s, z, bad);
		}
	}
}

static void nonfinite_case(kvs_dtype w, kvs_dtype q)
{
	size_t e = wsize(w), layer = (size_t)NPAGES * 2 * PT * H * D * e;
	uint8_t *src = malloc(layer), *dst = malloc(layer), *arena;
	void *sp[1] = { src }, *dp[1] = { dst };
	int32_t ids[NPAGES];
	uint64_t off = 0;
	kvs_kv_cache c = { sp, L, NPAGES, PT, H, D, w, KVS_KV_KV_INNER, { 0 } };
	kvs_kv_blocks b = { 0 };
	kvs_kv_format f;
	struct bad bad = { 0 };
	uint16_t oidx[2];

	CHECK_EQ(kvs_kv_format_init(&f, L, BT, H, D, q), 0);
	arena = malloc(f.total);
	for (uint32_t p = 0; p < NPAGES; p++)
		ids[p] = NPAGES - 1 - (int32_t)p;
	nonfinite_fill(w, src);
	b = (kvs_kv_blocks){ arena, f.total, &off, ids, 1, BT, q, 0, 0 };
	CHECK_EQ(kvs_kv_scatter(&c, &b), 0);
	memset(dst, 0xa5, layer);
	c.layer_ptrs = dp;
	CHECK_EQ(kvs_kv_gather(&c, &b), 0);
	/* Channel 5 is an outlier: its span counts only its finite values. */
	memcpy(oidx, arena + kvs_kv_fmt_oidx(&f, 0, 0, 0), 2);
	memcpy(oidx + 1, arena + kvs_kv_fmt_oidx(&f, 0, 0, 1), 2);
	CHECK(oidx[0] == 5 || oidx[0] == 40);
	CHECK(oidx[1] == 5 || oidx[1] == 40);
	nonfinite_groups(w, q, &f, arena, src, dst, &bad);
	if (bad.par + bad.finite + bad.pinf + bad.ninf + bad.nan + bad.none)
		fprintf(stderr, "non-finite: worker %d stored %d: scale/zero %d, "
			"finite %d, +inf %d, -inf %d, NaN %d, no finite value %d\n",
			w, q, bad.par, bad.finite, bad.pinf, bad.ninf, bad.nan, bad.none);
	CHECK_EQ(bad.par, 0);
	CHECK_EQ(bad.finite, 0);
	CHECK_EQ(bad.pinf, 0);
	CHECK_EQ(bad.ninf, 0);
	CHECK_EQ(bad.nan, 0);
	CHECK_EQ(bad.none, 0);
	free(src);
	free(dst);
	free(arena);
}

/* Plain dtypes: the block holds the worker's bytes, NaN payloads and all. */
static void plain_case(kvs_dtype w)
{
	static const uint32_t odd32[] = { 0x7f800000u, 0xff800000u, 0x7fc01234u,
					  0xffc00001u, 0x7f800001u };
	static const uint16_t odd16[] = { 0x7c00u, 0xfc00u, 0x7e01u, 0xfd55u, 0x7c01u };
	static const uint16_t oddb16[] = { 0x7f80u, 0xff80u, 0x7fc1u, 0xff81u, 0x7f81u };
	size_t e = wsize(w), layer = (size_t)NPAGES * 2 * PT * H * D * e;
	uint8_t *src = malloc(layer), *dst = calloc(1, layer), *arena;
	void *sp[1] = { src }, *dp[1] = { dst };
	int32_t ids[NPAGES] = { 3, 2, 1, 0 };
	uint64_t off = 0;
	kvs_kv_cache c = { sp, L, NPAGES, PT, H, D, w, KVS_KV_KV_INNER, { 0 } };
	kvs_kv_blocks b;
	kvs_kv_format f;

	CHECK_EQ(kvs_kv_format_init(&f, L, BT, H, D, w), 0);
	arena = malloc(f.total);
	for (size_t i = 0; i < layer / e; i++) {
		if (w == KVS_DTYPE_FP32)
			memcpy(src + i * 4, &odd32[i % 5], 4);
		else
			memcpy(src + i * 2, w == KVS_DTYPE_FP16 ? &odd16[i % 5] : &oddb16[i % 5], 2);
	}
	b = (kvs_kv_blocks){ arena, f.total, &off, ids, 1, BT, w, 0, 0 };
	CHECK_EQ(kvs_kv_scatter(&c, &b), 0);
	c.layer_ptrs = dp;
	CHECK_EQ(kvs_kv_gather(&c, &b), 0);
	CHECK(memcmp(src, dst, layer) == 0);
	free(src);
	free(dst);
	free(arena);
}

static void test_nonfinite(void)
{
	static const kvs_dtype ws[] = { KVS_DTYPE_FP32, KVS_DTYPE_FP16, KVS_DTYPE_BF16 };
	static const kvs_dtype qs[] = { KVS_DTYPE_INT8, KVS_DTYPE_FP8_E4M3, KVS_DTYPE_INT4 };

	for (int i = 0; i < 3; i++) {
		for (int j = 0; j < 3; j++)
			nonfinite_case(ws[i], qs[j]);
		plain_case(ws[i]);
	}
	/* The element encoders: one NaN each, whatever the sign or payload. */
	CHECK_EQ(kvs_f32_to_f16(kvs_f32_from_bits(0xffc01234u)), 0x7e00);
	CHECK_EQ(kvs_f32_to_bf16(kvs_f32_from_bits(0xffc01234u)), 0x7fc0);
	CHECK_EQ(kvs_f32_to_e4m3(kvs_f32_from_bits(0xffc01234u)), 0x7f);
}

/* ---- layout sizes ---- */

typedef unsigned __int128 u128;

#define SAT ((u128)1 << 100) /* past any real size; saturates */

static u128 mul(u128 a, u128 b)
{
	return a && b > SAT / a ? SAT : a * b;
}

static u128 mul4(u128 a, u128 b, u128 c, u128 d)
{
	return mul(mul(a, b), mul(c, d));
}

/* A block's bytes by the table of kvs_kv_format.h, in 128 bits. */
static u128 ref_bytes(uint32_t l, uint32_t bt, uint32_t h, uint32_t d, kvs_dtype q)
{
	int quant = kvs_kv_scheme(q) == 2, int4 = q == KVS_DTYPE_INT4;
	u128 esz = q == KVS_DTYPE_FP32 ? 4 : q == KVS_DTYPE_FP16 || q == KVS_DTYPE_BF16 ? 2 : 1;
	u128 row = int4 ? ((u128)d + 1) / 2 : esz * d;
	u128 kg = int4 && bt > 32 ? 32 : bt, vg = int4 && d > 32 ? 32 : d;
	u128 nout = quant ? ((u128)d + 31) / 32 : 0, n;

	n = mul(mul4(l, 2, bt, h), row) + mul4(l, h, nout, 2) + mul(mul4(l, h, nout, bt), 2);
	if (quant)
		n += mul(mul4(l, ((u128)bt + kg - 1) / kg, h, d), 8) +
		     mul(mul4(l, bt, h, ((u128)d + vg - 1) / vg), 8);
	return n;
}

/* A row of D values is one u32 of bytes (kvs_kv_format.row_bytes). */
static int row_too_long(uint32_t d, kvs_dtype q)
{
	return (q == KVS_DTYPE_FP32 ? 4ull : q == KVS_DTYPE_FP16 || q == KVS_DTYPE_BF16 ? 2ull : 1ull) *
	       d > UINT32_MAX;
}

static int size_bad; /* layouts whose size was wrong */

static void size_case(uint32_t l, uint32_t bt, uint32_t h, uint32_t d, kvs_dtype q)
{
	u128 want = ref_bytes(l, bt, h, d, q);
	kvs_layout lay = { .model = "m", .layers = l, .kv_heads = h, .head_dim = d,
			   .block_tokens = bt, .tp_size = 1, .dtype = q };
	kvs_kv_format f;
	int rc = kvs_kv_format_init(&f, l, bt, h, d, q);
	uint64_t lb = kvs_layout_block_bytes(&lay);
	int ok;

	if (want <= INT64_MAX && !row_too_long(d, q))
		ok = rc == 0 && f.total == (uint64_t)want && lb == f.total;
	else
		ok = rc < 0 && lb == 0;
	if (!ok && size_bad++ < 5)
		fprintf(stderr, "size: layers %u tokens %u heads %u dim %u dtype %d: "
			"rc %d total %llu (client %llu), want %llu (0: refused)\n",
			l, bt, h, d, q, rc, (unsigned long long)f.total,
			(unsigned long long)lb, want <= INT64_MAX && !row_too_long(d, q) ?
			(unsigned long long)want : 0ull);
}

static uint32_t any_u32(void) /* log-uniform in [1, 2^32 - 1] */
{
	uint32_t bits = 1 + (uint32_t)(next() % 32);
	uint32_t v = (uint32_t)(next() >> (64 - bits));

	return v ? v : 1;
}

static void test_sizes(void)
{
	static const kvs_dtype all[] = { KVS_DTYPE_FP16, KVS_DTYPE_BF16, KVS_DTYPE_FP32,
					 KVS_DTYPE_INT8, KVS_DTYPE_FP8_E4M3, KVS_DTYPE_INT4 };
	kvs_kv_format f;

	for (int i = 0; i < 6; i++) {
		kvs_dtype q = all[i];

		size_case(32, 256, 8, 128, q); /* Llama-3-8B's */
		/* heads x dim = 2^32 (overflows 32 bits; the size does not) */
		size_case(1, 1, 1u << 16, 1u << 16, q);
		size_case(2, 16, 1u << 20, 1u << 12, q);
		/* K's parameters, 8 x heads x dim, wrap 64 bits to 0 while the
		 * codes alone (2 x heads x dim) are 2^62 bytes */
		size_case(1, 1, 1u << 30, 1u << 31, q);
		size_case(1, 1, 1u << 31, 1u << 30, q);
		size_case(1, 1, 1u << 30, (1u << 31) + 3, q);
		/* every factor at its largest */
		size_case(UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, q);
		size_case(1, UINT32_MAX, 1, UINT32_MAX, q);
		size_case(1, 1, 1, UINT32_MAX, q);
		for (int k = 0; k < 20000; k++)
			size_case(any_u32(), any_u32(), any_u32(), any_u32(), q);
	}
	CHECK_EQ(size_bad, 0);
	CHECK_EQ(kvs_kv_format_init(&f, 1, 1, 1u << 30, 1u << 31, KVS_DTYPE_INT8), -EOVERFLOW);
	CHECK_EQ(kvs_kv_format_init(&f, 0, 16, 8, 128, KVS_DTYPE_INT8), -EINVAL);
	CHECK_EQ(kvs_kv_format_init(&f, 1, 16, 8, 128, (kvs_dtype)99), -EINVAL);
}

/* A worker cache whose strides pass INT64_MAX is refused, not wrapped. */
static void test_strides(void)
{
	static uint8_t arena[64], layer[64];
	void *lp[1] = { layer };
	uint64_t off = 0;
	int32_t id = 0;
	int64_t s[KVS_KV_STRIDES];
	/* tokens x heads x dim = 2^62 elements: a page's K and V are 2^63 */
	kvs_kv_cache c = { lp, 1, 1, 1u << 21, 1u << 21, 1u << 20, KVS_DTYPE_FP16,
			   KVS_KV_KV_INNER, { 0 } };
	kvs_kv_blocks b = { arena, sizeof(arena), &off, &id, 1, 1u << 21,
			    KVS_DTYPE_INT4, 0, 0 };

	CHECK_EQ(kvs_kv_strides(&c, s), -EINVAL);
	CHECK_EQ(kvs_kv_copy_check(&c, &b), -EINVAL);
	c.layout = KVS_KV_KV_OUTER; /* pages x the same */
	c.num_pages = 4;
	c.page_tokens = 1u << 20;
	b.block_tokens = 1u << 20;
	CHECK_EQ(kvs_kv_strides(&c, s), -EINVAL);
	CHECK_EQ(kvs_kv_copy_check(&c, &b), -EINVAL);
	c.page_tokens = UINT32_MAX; /* heads x dim x tokens past 2^64 */
	c.kv_heads = UINT32_MAX;
	c.head_dim = UINT32_MAX;
	CHECK_EQ(kvs_kv_strides(&c, s), -EINVAL);
	c.layout = KVS_KV_STRIDED; /* the caller's own strides: taken as they are */
	CHECK_EQ(kvs_kv_strides(&c, s), 0);
}

int main(void)
{
	xs ^= kvs_test_seed("test_kv_edge");
	if (!xs)
		xs = 1;
	test_nonfinite();
	test_sizes();
	test_strides();
	return check_summary("test_kv_edge");
}
