/*
 * kvs_numeric.h - element formats of kvshare's kernels, shared by the C twins
 * and the CUDA kernels so that both round the same way, bit for bit:
 *
 *   fp16   IEEE binary16; from fp32 round-to-nearest-even, overflow to inf,
 *          any NaN to 0x7e00.
 *   bf16   top half of an fp32; from fp32 round-to-nearest-even, any NaN
 *          to 0x7fc0.
 *   e4m3   OCP FP8 E4M3 ("e4m3fn": no infinities, 0x7f/0xff are NaN,
 *          largest finite 448); from fp32 round-to-nearest-even, saturating
 *          to +-448 (inf too); any NaN to 0x7f.
 *   int8   unsigned 0..255 (group quantization).
 *   int4   unsigned 0..15 (group quantization).
 * One NaN per format, on the host and the device alike (their hardware
 * keeps different payloads and signs): the quiet NaNs torch writes.
 *
 * Group quantization (scheme 2, the block format of kvs_kv_format.h): a
 * group whose finite values span [lo, hi] (infinities and NaNs ignored;
 * 0, 0 when it has none) stores
 *   unsigned codes (INT8 qmax 255, INT4 qmax 15):
 *     zero = lo, scale = hi / qmax - lo / qmax,
 *     q = rint(clamp((x - zero) * (1 / scale), 0, qmax))
 *   signed codes (FP8 E4M3, qmax 448), symmetric (a zero point measured
 *   worse for e4m3, whose precision is relative):
 *     zero = 0, scale = max(-lo, hi) / 448, q = e4m3((x - zero) * (1 / scale))
 * ((x - zero) / scale where 1 / scale overflows; scale 0 stores code 0), and
 * reads back fma(value of q, scale, zero) (a NaN read back is 0x7fc00000).
 * Non-finite x (kvs_affine_y): +inf is stored as the top code (qmax) and
 * -inf as the bottom one (0, or -448 for e4m3), read back as the group's
 * finite extremes; NaN as a NaN code where the codes have one (e4m3, and
 * fp16 outlier codes of e4m3 blocks), else (unsigned codes) as the group's
 * value nearest 0. So no value changes how its neighbours are stored.
 * Every step is one IEEE fp32 operation rounded to nearest even, in this
 * order: the kernels and the twins agree bit for bit (the kernels use the
 * _rn intrinsics so that nvcc cannot contract them; the twins are built
 * with -ffp-contract=off).
 *
 * Host code gets portable C; device code (nvcc, __CUDA_ARCH__) uses the
 * hardware conversions, which round the same way.
 *
 * Thread: everything here is a pure function.
 */
#ifndef KVS_NUMERIC_H
#define KVS_NUMERIC_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define KVS_HD static __host__ __device__ __forceinline__
#else
#define KVS_HD static inline
#endif

#define KVS_E4M3_QMAX 448.0f

KVS_HD uint32_t kvs_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

KVS_HD float kvs_f32_from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* ---- fp16 ---- */

KVS_HD uint16_t kvs_f32_to_f16(float f)
{
#ifdef __CUDA_ARCH__
	if (f != f)
		return 0x7e00u; /* the hardware's NaN is 0x7fff */
	return __half_as_ushort(__float2half_rn(f));
#else
	uint32_t x = kvs_f32_bits(f), sign = (x >> 16) & 0x8000u, r;

	x &= 0x7fffffffu;
	if (x > 0x7f800000u)
		return 0x7e00u; /* NaN */
	if (x >= 0x477ff000u)
		return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
	if (x < 0x38800000u) {
		/* Below 2^-14: a subnormal half, in units of 2^-24 (exact
		 * scaling; rintf rounds half to even). 1024 is 2^-14 itself. */
		return (uint16_t)(sign |
				  (uint32_t)rintf(kvs_f32_from_bits(x) * 16777216.0f));
	}
	r = x - 0x38000000u; /* rebias the exponent from 127 to 15 */
	r += 0xfffu + ((r >> 13) & 1u);
	return (uint16_t)(sign | (r >> 13));
#endif
}

KVS_HD float kvs_f16_to_f32(uint16_t h)
{
#ifdef __CUDA_ARCH__
	return __half2float(__ushort_as_half(h));
#else
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu,
		 m = h & 0x3ffu;

	if (e == 0) {
		float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24 */
		return sign ? -v : v;
	}
	if (e == 31)
		return kvs_f32_from_bits(sign | 0x7f800000u | (m << 13));
	return kvs_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
#endif
}

/* ---- bf16 ---- */

KVS_HD uint16_t kvs_f32_to_bf16(float f)
{
#ifdef __CUDA_ARCH__
	if (f != f)
		return 0x7fc0u; /* the hardware's NaN is 0x7fff */
	return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
	uint32_t x = kvs_f32_bits(f);

	if ((x & 0x7fffffffu) > 0x7f800000u)
		return 0x7fc0u; /* NaN */
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
#endif
}

KVS_HD float kvs_bf16_to_f32(uint16_t b)
{
	return kvs_f32_from_bits((uint32_t)b << 16);
}

/* ---- FP8 E4M3 ---- */

KVS_HD uint8_t kvs_f32_to_e4m3(float f)
{
#ifdef __CUDA_ARCH__
	if (f != f)
		return 0x7f; /* whatever its sign */
	return (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
#else
	uint32_t sign = (kvs_f32_bits(f) >> 24) & 0x80u;
	float a = fabsf(f);
	int e;
	uint32_t m;

	if (a != a)
		return 0x7f;
	if (a >= 448.0f)
		return (uint8_t)(sign | 0x7eu); /* saturate (448 itself is 0x7e) */
	if (a < 0.015625f) /* below 2^-6: subnormal, in units of 2^-9 */
		return (uint8_t)(sign | (uint32_t)rintf(a * 512.0f));
	(void)frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1) */
	e -= 1;              /* a = 1.m * 2^e, e in [-6, 8] */
	m = (uint32_t)rintf((ldexpf(a, -e) - 1.0f) * 8.0f);
	/* m == 8 carries into the exponent, which the addition does. */
	return (uint8_t)(sign | ((((uint32_t)(e + 7)) << 3) + m));
#endif
}

KVS_HD float kvs_e4m3_to_f32(uint8_t b)
{
	uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
	float v;

	if (e == 15 && m == 7)
		return kvs_f32_from_bits(0x7fc00000u);
	if (e == 0)
		v = (float)m * 0.001953125f; /* m * 2^-9 */
	else
		v = kvs_f32_from_bits(((e + 120u) << 23) | (m << 20));
	return (b & 0x80u) ? -v : v;
}

/* ---- group quantization (scheme 2) ---- */

#define KVS_UINT8_QMAX 255.0f
#define KVS_INT4_QMAX 15.0f

/* One rounding each, never fused. */
KVS_HD float kvs_fadd(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fadd_rn(a, b);
#else
	return a + b;
#endif
}

KVS_HD float kvs_fsub(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fsub_rn(a, b);
#else
	return a - b;
#endif
}

KVS_HD float kvs_fmul(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fmul_rn(a, b);
#else
	return a * b;
#endif
}

KVS_HD float kvs_fdiv(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fdiv_rn(a, b);
#else
	return a / b;
#endif
}

KVS_HD float kvs_fma(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
	return __fmaf_rn(a, b, c);
#else
	return fmaf(a, b, c);
#endif
}

/* Whether x is a number (not an infinity, not a NaN): a bit test, the same
 * on the host and the device. */
KVS_HD int kvs_finite(float x)
{
	return (kvs_f32_bits(x) & 0x7f800000u) != 0x7f800000u;
}

/* Widen a group's span [*lo, *hi] (start at +inf, -inf) by x when x is
 * finite: one non-finite value must not decide how its neighbours are
 * stored (a single inf would make the scale inf and every code NaN). */
KVS_HD void kvs_span_add(float x, float *lo, float *hi)
{
	if (kvs_finite(x)) {
		*lo = fminf(*lo, x);
		*hi = fmaxf(*hi, x);
	}
}

/* Scale, zero point and 1/scale of a group spanning [lo, hi]; @sign: signed
 * codes (e4m3, symmetric), else unsigned ones. Callers pass lo = hi = 0 for a group
 * with no number in it. */
KVS_HD void kvs_affine_params(float lo, float hi, float qmax, int sign,
				     float *scale, float *zero, float *inv)
{
	if (sign) {
		*zero = 0.0f;
		*scale = kvs_fdiv(fmaxf(-lo, hi), qmax);
	} else {
		*zero = lo;
		*scale = kvs_fsub(kvs_fdiv(hi, qmax), kvs_fdiv(lo, qmax));
	}
	*inv = *scale > 0.0f ? kvs_fdiv(1.0f, *scale) : 0.0f;
}

/* x in code units, before rounding to a code. */
KVS_HD float kvs_affine_apply(float x, float scale, float zero, float inv)
{
	float d = kvs_fsub(x, zero);

	if (inv <= FLT_MAX)
		return kvs_fmul(d, inv);
	return kvs_fdiv(d, scale); /* scale so small that 1 / scale overflows */
}

/*
 * kvs_affine_y - x of a group in code units, inside the codes' range
 * [bot, qmax] (bot = -qmax for signed codes, else 0), for a code or an fp16
 * outlier code: +inf is qmax, -inf bot (the group's finite extremes); NaN
 * stays NaN for signed codes (e4m3 has a NaN, and so has fp16), and for
 * unsigned ones (no NaN code) is where 0 lies, clamped: the group's value
 * nearest 0. The clamp also keeps a finite x whose x - zero overflows, or
 * rounds past qmax, inside the range.
 */
KVS_HD float kvs_affine_y(float x, float scale, float zero, float inv,
				 float qmax, int sign)
{
	float bot = sign ? -qmax : 0.0f, y;

	if (x != x) {
		if (sign)
			return x;
		x = 0.0f;
	} else if (!kvs_finite(x)) {
		return x > 0.0f ? qmax : bot;
	}
	y = kvs_affine_apply(x, scale, zero, inv);
	/* Comparisons, not fminf/fmaxf: a -0 stays -0 on every device. */
	if (y > qmax)
		return qmax;
	if (y < bot)
		return bot;
	return y;
}

/* An unsigned code 0..qmax (a NaN gives 0). */
KVS_HD uint8_t kvs_affine_code(float y, float qmax)
{
	return (uint8_t)(int)rintf(fminf(fmaxf(y, 0.0f), qmax));
}

/* A code's value back in the group's range; a NaN code gives 0x7fc00000
 * (the device's fma and the host's keep different NaNs). */
KVS_HD float kvs_affine_value(float v, float scale, float zero)
{
	float r = kvs_fma(v, scale, zero);

	return r != r ? kvs_f32_from_bits(0x7fc00000u) : r;
}

#endif /* KVS_NUMERIC_H */
