/* hash.c - chained block hashes (see kvshare.h). */
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvshare.h"

/* Everything that makes two layouts differ goes into the seed, each field
 * length-prefixed so that ("ab","c") and ("a","bc") never collide. */
static size_t put_str(uint8_t *p, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	uint32_t n32;

	if (n > KVS_NAME_MAX)
		n = KVS_NAME_MAX;
	n32 = (uint32_t)n;
	memcpy(p, &n32, 4);
	if (n)
		memcpy(p + 4, s, n);
	return 4 + n;
}

kvs_hash kvs_hash_layout_seed(const kvs_layout *l)
{
	uint8_t buf[16 + 3 * (4 + KVS_NAME_MAX) + 8 * 4];
	uint32_t f[8] = { l->layers, l->kv_heads, l->head_dim, l->block_tokens,
			  l->tp_rank, l->tp_size, (uint32_t)l->dtype, 1 /* scheme */ };
	size_t n = 0;
	XXH128_hash_t h;
	kvs_hash out;

	memcpy(buf, "kvshare-ns-v1\0\0\0", 16);
	n = 16;
	n += put_str(buf + n, l->model);
	n += put_str(buf + n, l->adapter);
	n += put_str(buf + n, l->salt);
	memcpy(buf + n, f, sizeof(f));
	n += sizeof(f);
	h = XXH3_128bits(buf, n);
	out.lo = h.low64;
	out.hi = h.high64;
	return out;
}

size_t kvs_hash_chain(kvs_hash seed, uint32_t block_tokens,
		      const uint32_t *tokens, size_t ntokens, kvs_hash *out,
		      size_t max)
{
	size_t nblocks, i;
	kvs_hash prev = seed;
	XXH3_state_t st;

	if (block_tokens == 0)
		return 0;
	nblocks = ntokens / block_tokens;
	if (nblocks > max)
		nblocks = max;
	for (i = 0; i < nblocks; i++) {
		XXH128_hash_t h;
		uint64_t pv[2] = { prev.lo, prev.hi };

		XXH3_128bits_reset(&st);
		XXH3_128bits_update(&st, pv, sizeof(pv));
		XXH3_128bits_update(&st, tokens + i * (size_t)block_tokens,
				    (size_t)block_tokens * sizeof(uint32_t));
		h = XXH3_128bits_digest(&st);
		prev.lo = h.low64;
		prev.hi = h.high64;
		out[i] = prev;
	}
	return nblocks;
}

size_t kvs_dtype_bytes(kvs_dtype dtype)
{
	switch (dtype) {
	case KVS_DTYPE_FP16:
	case KVS_DTYPE_BF16:
		return 2;
	case KVS_DTYPE_FP32:
		return 4;
	case KVS_DTYPE_FP8_E4M3:
	case KVS_DTYPE_INT8:
		return 1;
	}
	return 0;
}

static uint64_t product(const uint64_t *f, int n)
{
	uint64_t b = 1;

	for (int i = 0; i < n; i++) {
		if (f[i] == 0 || b > UINT64_MAX / f[i])
			return 0;
		b *= f[i];
	}
	return b;
}

uint64_t kvs_layout_block_bytes(const kvs_layout *l)
{
	/* Rows: one (layer, K|V, token, head) each. */
	uint64_t rf[4] = { l->layers, 2, l->block_tokens, l->kv_heads };
	uint64_t rows = product(rf, 4), esz = kvs_dtype_bytes(l->dtype);
	uint64_t row_bytes;

	if (!rows || !esz || l->head_dim == 0)
		return 0;
	row_bytes = (uint64_t)l->head_dim * esz;
	/* Quantized rows carry their fp32 scale (stored after all the data). */
	if (esz == 1)
		row_bytes += 4;
	if (row_bytes > UINT64_MAX / rows)
		return 0;
	return rows * row_bytes;
}
