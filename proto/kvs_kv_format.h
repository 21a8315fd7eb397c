/*
 * kvs_kv_format.h - the byte layout of one cache block for each stored dtype
 * (quantization scheme 2), computed once for the C twins, the CUDA launchers,
 * kvs_layout_block_bytes() and the tests.
 *
 * A block holds [layers][2 (K, V)][block_tokens][kv_heads] rows of head_dim
 * values. Plain dtypes (fp16, bf16, fp32) store exactly that, nothing else.
 * Quantized dtypes (INT8, FP8_E4M3, INT4) store, in this order, without
 * padding:
 *
 *   data  [layers][2][block_tokens][kv_heads] rows of row_bytes: one code per
 *         value (INT8 and FP8 one byte; INT4 two per byte, the even channel
 *         in the low nibble, a row padded to whole bytes with a zero nibble)
 *   kpar  [layers][ktg][kv_heads][head_dim] x {fp32 scale, fp32 zero}:
 *         K is quantized per channel over a group of kgroup tokens
 *         (ktg = ceil(block_tokens / kgroup) groups)
 *   vpar  [layers][block_tokens][kv_heads][vcg] x {fp32 scale, fp32 zero}:
 *         V is quantized per token over groups of vgroup channels
 *         (vcg = ceil(head_dim / vgroup))
 *   oidx  [layers][kv_heads][nout] u16: K's nout widest channels in the
 *         block, per (layer, head), widest first (ties: lower channel)
 *   oval  [layers][kv_heads][nout][block_tokens] fp16: their codes
 *
 * Each group's value x is stored as y = (x - zero) / scale (kvs_numeric.h:
 * kvs_affine_params, kvs_affine_code*), and read back as fma(y', scale,
 * zero) where y' is the code's value: the integer code, the e4m3 value, or,
 * for the nout outlier channels of K, y itself rounded to fp16 (their
 * integer code bytes are 0). A group's scale and zero count its finite
 * values only; what infinities and NaNs are stored as is kvs_affine_y's
 * rule. All multi-byte fields are little-endian and may be unaligned.
 *
 *            kgroup          vgroup          nout
 *   INT8     block_tokens    head_dim        ceil(head_dim / 32)
 *   FP8      block_tokens    head_dim        ceil(head_dim / 32)
 *   INT4     32              32              ceil(head_dim / 32)
 *
 * Scheme 1 (one fp32 scale per row, symmetric) is not readable as scheme 2:
 * the scheme number of a dtype is part of the namespace seed
 * (kvs_hash_layout_seed), so blocks of the old scheme never hash alike.
 *
 * Thread: everything here is a pure function.
 */
#ifndef KVS_KV_FORMAT_H
#define KVS_KV_FORMAT_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "kvs_types.h"

#ifdef __CUDACC__
#define KVS_FMT_HD static inline __host__ __device__
#else
#define KVS_FMT_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The quantization scheme of a dtype's blocks: 1 for plain dtypes (a plain
 * copy since the first release), 2 for the quantized ones, 0 if unknown. */
static inline uint32_t kvs_kv_scheme(kvs_dtype d)
{
	switch (d) {
	case KVS_DTYPE_FP16:
	case KVS_DTYPE_BF16:
	case KVS_DTYPE_FP32:
		return 1;
	case KVS_DTYPE_INT8:
	case KVS_DTYPE_FP8_E4M3:
	case KVS_DTYPE_INT4:
		return 2;
	}
	return 0;
}

typedef struct kvs_kv_format {
	uint32_t layers, bt, H, D;
	kvs_dtype dtype;
	int quant;          /* INT8, FP8_E4M3 or INT4 */
	uint32_t row_bytes; /* bytes of one row of data */
	uint32_t kgroup, ktg, vgroup, vcg, nout;
	/* byte offsets from the block's start; total is the block's size */
	uint64_t data, kpar, vpar, oidx, oval, total;
} kvs_kv_format;

/* *x = a * b * c; 0 if that overflows 64 bits. */
static inline int kvs_kv_fmt_mul(uint64_t *x, uint64_t a, uint64_t b, uint64_t c)
{
	return !__builtin_mul_overflow(a, b, x) && !__builtin_mul_overflow(*x, c, x);
}

/* *x += a * b * c; 0 if the product or the sum overflows 64 bits. */
static inline int kvs_kv_fmt_add(uint64_t *x, uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t p;

	return kvs_kv_fmt_mul(&p, a, b, c) && !__builtin_add_overflow(*x, p, x);
}

/*
 * kvs_kv_format_init - the layout of a block of these shapes.
 * The shapes come from a client (a HELLO's layout, a worker's cache), up to
 * 2^32 - 1 each: every product and sum is checked, so a size is either
 * exact or refused, never wrapped around to a small one.
 * Returns 0; -EINVAL for a zero size or an unknown dtype; -EOVERFLOW for a
 * row past UINT32_MAX bytes or a block past INT64_MAX.
 */
static inline int kvs_kv_format_init(kvs_kv_format *f, uint32_t layers,
				     uint32_t bt, uint32_t H, uint32_t D,
				     kvs_dtype d)
{
	uint64_t rows, lh, n, x = 0;
	uint32_t esz;

	memset(f, 0, sizeof(*f));
	f->layers = layers, f->bt = bt, f->H = H, f->D = D, f->dtype = d;
	if (!layers || !bt || !H || !D || !kvs_kv_scheme(d))
		return -EINVAL;
	f->quant = kvs_kv_scheme(d) == 2;
	esz = d == KVS_DTYPE_FP32 ? 4 : d == KVS_DTYPE_FP16 || d == KVS_DTYPE_BF16 ? 2 : 1;
	if (d == KVS_DTYPE_INT4)
		f->row_bytes = D / 2 + D % 2;
	else if (__builtin_mul_overflow(D, esz, &f->row_bytes))
		return -EOVERFLOW;
	f->kgroup = d == KVS_DTYPE_INT4 && bt > 32 ? 32 : bt;
	f->ktg = bt / f->kgroup + (bt % f->kgroup != 0);
	f->vgroup = d == KVS_DTYPE_INT4 && D > 32 ? 32 : D;
	f->vcg = D / f->vgroup + (D % f->vgroup != 0);
	f->nout = f->quant ? D / 32 + (D % 32 != 0) : 0;
	/* rows = layers * 2 * bt * H, lh = layers * H: counts of rows and of
	 * (layer, head) pairs; then each field, added to x, its end. */
	if (!kvs_kv_fmt_mul(&rows, layers, 2, bt) ||
	    !kvs_kv_fmt_mul(&rows, rows, H, 1) ||
	    !kvs_kv_fmt_mul(&lh, layers, H, 1))
		return -EOVERFLOW;
	f->data = 0;
	if (!kvs_kv_fmt_add(&x, rows, f->row_bytes, 1))
		return -EOVERFLOW;
	f->kpar = x;
	if (f->quant && (!kvs_kv_fmt_mul(&n, lh, f->ktg, D) ||
			 !kvs_kv_fmt_add(&x, n, 8, 1)))
		return -EOVERFLOW;
	f->vpar = x;
	if (f->quant && !kvs_kv_fmt_add(&x, rows / 2, f->vcg, 8))
		return -EOVERFLOW;
	f->oidx = x;
	if (!kvs_kv_fmt_add(&x, lh, f->nout, 2))
		return -EOVERFLOW;
	f->oval = x;
	if (!kvs_kv_fmt_mul(&n, lh, f->nout, 1) || !kvs_kv_fmt_add(&x, n, bt, 2))
		return -EOVERFLOW;
	if (x > INT64_MAX)
		return -EOVERFLOW;
	f->total = x;
	return 0;
}

/* Byte offsets of the fields of (layer l, ...) from the block's start. */
KVS_FMT_HD uint64_t kvs_kv_fmt_row(const kvs_kv_format *f, uint32_t l,
				      uint32_t kv, uint32_t t, uint32_t h)
{
	return f->data + ((((uint64_t)l * 2 + kv) * f->bt + t) * f->H + h) * f->row_bytes;
}

KVS_FMT_HD uint64_t kvs_kv_fmt_kpar(const kvs_kv_format *f, uint32_t l,
				       uint32_t g, uint32_t h, uint32_t d)
{
	return f->kpar + ((((uint64_t)l * f->ktg + g) * f->H + h) * f->D + d) * 8;
}

KVS_FMT_HD uint64_t kvs_kv_fmt_vpar(const kvs_kv_format *f, uint32_t l,
				       uint32_t t, uint32_t h, uint32_t c)
{
	return f->vpar + ((((uint64_t)l * f->bt + t) * f->H + h) * f->vcg + c) * 8;
}

KVS_FMT_HD uint64_t kvs_kv_fmt_oidx(const kvs_kv_format *f, uint32_t l,
				       uint32_t h, uint32_t j)
{
	return f->oidx + (((uint64_t)l * f->H + h) * f->nout + j) * 2;
}

KVS_FMT_HD uint64_t kvs_kv_fmt_oval(const kvs_kv_format *f, uint32_t l,
				       uint32_t h, uint32_t j, uint32_t t)
{
	return f->oval + ((((uint64_t)l * f->H + h) * f->nout + j) * f->bt + t) * 2;
}

#ifdef __cplusplus
}
#endif
#endif /* KVS_KV_FORMAT_H */
