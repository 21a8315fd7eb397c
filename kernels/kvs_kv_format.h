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
 * integer code bytes are 0). All multi-byte fields are little-endian and
 * may be unaligned.
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

/* x += a * b, 0 on overflow. */
static inline int kvs_kv_fmt_madd(uint64_t *x, uint64_t a, uint64_t b)
{
	if (a && b > (UINT64_MAX - *x) / a)
		return 0;
	*x += a * b;
	return 1;
}

/*
 * kvs_kv_format_init - the layout of a block of these shapes.
 * Returns 0, or -1 for a zero size, an unknown dtype or a size that
 * overflows 2^63.
 */
static inline int kvs_kv_format_init(kvs_kv_format *f, uint32_t layers,
				     uint32_t bt, uint32_t H, uint32_t D,
				     kvs_dtype d)
{
	uint64_t rows, x = 0;
	uint32_t esz;

	memset(f, 0, sizeof(*f));
	f->layers = layers, f->bt = bt, f->H = H, f->D = D, f->dtype = d;
	if (!layers || !bt || !H || !D || !kvs_kv_scheme(d))
		return -1;
	f->quant = kvs_kv_scheme(d) == 2;
	esz = d == KVS_DTYPE_FP32 ? 4 : d == KVS_DTYPE_FP16 || d == KVS_DTYPE_BF16 ? 2 : 1;
	f->row_bytes = d == KVS_DTYPE_INT4 ? D / 2 + D % 2 : 0;
	if (d != KVS_DTYPE_INT4 && D > UINT32_MAX / esz)
		return -1;
	if (d != KVS_DTYPE_INT4)
		f->row_bytes = D * esz;
	f->kgroup = d == KVS_DTYPE_INT4 && bt > 32 ? 32 : bt;
	f->ktg = bt / f->kgroup + (bt % f->kgroup != 0);
	f->vgroup = d == KVS_DTYPE_INT4 && D > 32 ? 32 : D;
	f->vcg = D / f->vgroup + (D % f->vgroup != 0);
	f->nout = f->quant ? D / 32 + (D % 32 != 0) : 0;
	rows = 0; /* layers * 2 * bt * H */
	if (!kvs_kv_fmt_madd(&rows, (uint64_t)layers * 2, bt) || rows > UINT64_MAX / H)
		return -1;
	rows *= H;
	f->data = 0;
	if (!kvs_kv_fmt_madd(&x, rows, f->row_bytes))
		return -1;
	f->kpar = x;
	if (f->quant && !kvs_kv_fmt_madd(&x, (uint64_t)layers * f->ktg,
					 (uint64_t)H * D * 8))
		return -1;
	f->vpar = x;
	if (f->quant && !kvs_kv_fmt_madd(&x, rows / 2, (uint64_t)f->vcg * 8))
		return -1;
	f->oidx = x;
	if (!kvs_kv_fmt_madd(&x, (uint64_t)layers * H, (uint64_t)f->nout * 2))
		return -1;
	f->oval = x;
	if (!kvs_kv_fmt_madd(&x, (uint64_t)layers * H * f->nout, (uint64_t)bt * 2))
		return -1;
	if (x > INT64_MAX)
		return -1;
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
