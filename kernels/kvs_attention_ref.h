/*
 * kvs_attention_ref.h - reference scaled-dot-product attention for one
 * sequence, in fp32, with grouped-query attention and an optional causal
 * mask. Not a serving kernel: tests and `kvsbench quality` use it to measure
 * what a stored KV dtype does to attention output.
 *
 *   q    [q_len][heads][head_dim]     fp32
 *   k, v [kv_len][kv_heads][head_dim] fp32
 *   out  [q_len][heads][head_dim]     fp32
 *   head h reads KV head h / (heads / kv_heads).
 *   out[i,h] = sum_j softmax_j(scale * q[i,h] . k[j,h']) v[j,h']
 * Causal: the queries are the last q_len positions of the kv_len sequence,
 * so query i sees keys 0 .. kv_len - q_len + i.
 *
 * Tolerance: the C twin accumulates in double; the CUDA version (fp32
 * cuBLAS GEMMs without TF32, an fp32 softmax) agrees with it to a relative
 * Frobenius error below 1e-5 on unit-scale inputs.
 */
#ifndef KVS_ATTENTION_REF_H
#define KVS_ATTENTION_REF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_attn_shape {
	uint32_t q_len;
	uint32_t kv_len;
	uint32_t heads;     /* query heads, a multiple of kv_heads */
	uint32_t kv_heads;
	uint32_t head_dim;
	int causal;         /* nonzero: mask as described above */
	float scale;        /* softmax scale; 0 means 1 / sqrt(head_dim) */
} kvs_attn_shape;

/*
 * kvs_attention_ref - attention of one sequence (C twin, host memory).
 * @s: the shapes; @q, @k, @v: inputs; @out: written, q_len*heads*head_dim.
 * Errors: -EINVAL: a NULL pointer, a zero size, heads not a multiple of
 *         kv_heads, causal with q_len > kv_len, a negative or non-finite
 *         scale, sizes whose product overflows; -ENOMEM.
 * Ownership: the caller's buffers; @out must not overlap the inputs.
 * Thread: any.
 */
int kvs_attention_ref(const kvs_attn_shape *s, const float *q, const float *k,
		      const float *v, float *out);

/*
 * kvs_attention_ref_cuda - the same on a CUDA stream: two strided-batched
 * cuBLAS SGEMMs per query head of a group (QK^T, then PV) and a softmax
 * kernel. All four arrays are device memory. It creates a cuBLAS handle and
 * an fp32 score buffer (heads * q_len * kv_len) for the call and frees them
 * before returning; destroying the handle synchronizes the device, so the
 * result is ready on return: a reference, not a hot path.
 * @stream: a cudaStream_t, or NULL for the legacy default stream.
 * Errors: as kvs_attention_ref(); -ENODEV when built without CUDA or no
 *         device is usable; -ENOMEM when the score buffer or the cuBLAS
 *         handle cannot be allocated; -EIO for another CUDA or cuBLAS error.
 * Ownership: the caller's buffers.
 * Thread: any thread with the stream's device current.
 */
int kvs_attention_ref_cuda(const kvs_attn_shape *s, const float *q,
			   const float *k, const float *v, float *out,
			   void *stream);

/*
 * kvs_attention_check - validate shapes and pointers as both entries do.
 * Errors: as kvs_attention_ref(), without -ENOMEM.
 * Thread: any.
 */
int kvs_attention_check(const kvs_attn_shape *s, const void *q, const void *k,
			const void *v, const void *out);

#ifdef __cplusplus
}
#endif
#endif /* KVS_ATTENTION_REF_H */
