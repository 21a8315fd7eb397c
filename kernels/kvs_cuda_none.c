/*
 * kvs_cuda_none.c - kvs_cuda.h and every *_cuda kernel entry for a build
 * without CUDA: arguments are checked as in the CUDA build (so a caller sees
 * the same -EINVAL everywhere), then -ENODEV.
 */
#include <errno.h>

#include "kvs_attention_ref.h"
#include "kvs_cuda.h"
#include "kvs_kv_copy.h"

int kvs_cuda_built(void)
{
	return 0;
}

int kvs_cuda_device_count(void)
{
	return 0;
}

int kvs_cuda_errno(int cuda_error)
{
	return cuda_error ? -EIO : 0;
}

const char *kvs_cuda_error_name(void)
{
	return "";
}

int kvs_cuda_malloc(void **out, size_t bytes)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	return -ENODEV;
}

void kvs_cuda_free(void *p)
{
}

int kvs_cuda_copy(void *dst, const void *src, size_t bytes)
{
	return -ENODEV;
}

int kvs_cuda_sync(void *stream)
{
	return -ENODEV;
}

int kvs_cuda_host_register(void *p, size_t bytes, void **dev)
{
	return !p || !dev ? -EINVAL : -ENODEV;
}

void kvs_cuda_host_unregister(void *p)
{
}

int kvs_kv_scatter_cuda(const kvs_kv_cache *cache, const kvs_kv_blocks *blocks,
			void *stream)
{
	int rc = kvs_kv_copy_check(cache, blocks);

	return rc < 0 ? rc : -ENODEV;
}

int kvs_kv_gather_cuda(const kvs_kv_cache *cache, const kvs_kv_blocks *blocks,
		       void *stream)
{
	int rc = kvs_kv_copy_check(cache, blocks);

	return rc < 0 ? rc : -ENODEV;
}

int kvs_attention_ref_cuda(const kvs_attn_shape *s, const float *q,
			   const float *k, const float *v, float *out,
			   void *stream)
{
	int rc = kvs_attention_check(s, q, k, v, out);

	return rc < 0 ? rc : -ENODEV;
}
