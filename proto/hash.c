/* hash.c - chained block hashes (see kvshare.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvs_kv_format.h"
#include "kvs_types.h"

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
			  l->tp_rank, l->tp_size, (uint32_t)l->dtype,
			  /* A new scheme of a dtype's bytes (kvs_kv_format.h) gives
			   * new hashes: old blocks (on SSD) are never read with it. */
			  kvs_kv_scheme(l->dtype) };
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

kvs_hash kvs_hash_key(kvs_hash seed, const void *key, size_t len)
{
	uint64_t pv[2] = { seed.lo, seed.hi };
	XXH3_state_t st;
	XXH128_hash_t h;

	/* A domain of its own: a key's hash never equals a token block's,
	 * whose input after the seed is a whole number of u32 tokens too. */
	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, pv, sizeof(pv));
	XXH3_128bits_update(&st, "kvshare-key-v1", 14);
	if (len)
		XXH3_128bits_update(&st, key, len);
	h = XXH3_128bits_digest(&st);
	return (kvs_hash){ .lo = h.low64, .hi = h.high64 };
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
	case KVS_DTYPE_INT4: /* two per byte: rounded up */
		return 1;
	}
	return 0;
}

static const struct {
	const char *name;
	kvs_dtype dtype;
} dtype_names[] = { /* the first of a dtype's names is its name */
	{ "fp16", KVS_DTYPE_FP16 }, { "bf16", KVS_DTYPE_BF16 },
	{ "fp32", KVS_DTYPE_FP32 }, { "fp8", KVS_DTYPE_FP8_E4M3 },
	{ "fp8_e4m3", KVS_DTYPE_FP8_E4M3 }, { "int8", KVS_DTYPE_INT8 },
	{ "int4", KVS_DTYPE_INT4 },
};

const char *kvs_dtype_name(kvs_dtype dtype)
{
	for (size_t i = 0; i < sizeof(dtype_names) / sizeof(dtype_names[0]); i++)
		if (dtype_names[i].dtype == dtype)
			return dtype_names[i].name;
	return "unknown";
}

int kvs_dtype_parse(const char *name, kvs_dtype *out)
{
	for (size_t i = 0; i < sizeof(dtype_names) / sizeof(dtype_names[0]); i++)
		if (strcmp(name, dtype_names[i].name) == 0) {
			*out = dtype_names[i].dtype;
			return 0;
		}
	return -EINVAL;
}

uint64_t kvs_layout_block_bytes(const kvs_layout *l)
{
	kvs_kv_format f;

	/* Data, then (quantized dtypes) scales, zero points and K's fp16
	 * outlier channels: kvs_kv_format.h. */
	if (kvs_kv_format_init(&f, l->layers, l->block_tokens, l->kv_heads,
			       l->head_dim, l->dtype) < 0)
		return 0;
	return f.total;
}

void kvs_hash_format(kvs_hash h, char out[33])
{
	snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.hi,
		 (unsigned long long)h.lo);
}

int kvs_hash_parse(const char *s, kvs_hash *out)
{
	uint64_t v[2] = { 0, 0 };

	if (!s || !out || strlen(s) != 32)
		return -EINVAL;
	for (int i = 0; i < 32; i++) {
		int d;
		char ch = s[i];

		if (ch >= '0' && ch <= '9')
			d = ch - '0';
		else if (ch >= 'a' && ch <= 'f')
			d = ch - 'a' + 10;
		else if (ch >= 'A' && ch <= 'F')
			d = ch - 'A' + 10;
		else
			return -EINVAL;
		v[i / 16] = v[i / 16] << 4 | (uint64_t)d;
	}
	out->hi = v[0];
	out->lo = v[1];
	return 0;
}
