/*
 * kvs_attention_ref.cu - reference attention on the GPU: strided-batched
 * cuBLAS SGEMMs for QK^T and PV, a row softmax kernel in between. The C twin
 * is kvs_attention_ref.c.
 *
 * cuBLAS is column-major: a row-major [m][n] matrix with leading dimension
 * ld is the column-major n x m matrix with the same ld, so row-major
 * S = Q K^T is computed as column-major S^T = K Q^T (op(A) = K: A is K^T
 * in column-major, transposed), and O = P V as O^T = V^T P^T (no transposes).
 * GQA: the query heads of KV head g are g*G .. g*G+G-1, so one batched GEMM
 * per r in [0, G) covers heads g*G + r for all g with constant strides.
 */
#include <errno.h>
#include <math.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kvs_attention_ref.h"
#include "kvs_cuda.h"

#define THREADS 256

template <bool MAX>
static __device__ float block_reduce(float v, float *red)
{
	const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;

	for (int off = 16; off > 0; off /= 2) {
		float o = __shfl_xor_sync(0xffffffffu, v, off);
		v = MAX ? fmaxf(v, o) : v + o;
	}
	__syncthreads(); /* red may still be read by an earlier reduction */
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	v = lane < blockDim.x / 32 ? red[lane] : (MAX ? -INFINITY : 0.0f);
	for (int off = 16; off > 0; off /= 2) {
		float o = __shfl_xor_sync(0xffffffffu, v, off);
		v = MAX ? fmaxf(v, o) : v + o;
	}
	return v;
}

/* One CUDA block per score row (head * q_len + i), in place. */
static __global__ void __launch_bounds__(THREADS)
softmax_rows(float *S, uint32_t q_len, uint32_t kv_len, int causal)
{
	__shared__ float red[32];
	const uint64_t row = blockIdx.x;
	const uint32_t i = (uint32_t)(row % q_len);
	const uint32_t seen = causal ? kv_len - q_len + i + 1 : kv_len;
	float *s = S + row * kv_len;
	float m = -INFINITY, sum = 0.0f;

	for (uint32_t j = threadIdx.x; j < seen; j += THREADS)
		m = fmaxf(m, s[j]);
	m = block_reduce<true>(m, red);
	for (uint32_t j = threadIdx.x; j < seen; j += THREADS) {
		float e = expf(s[j] - m);

		s[j] = e;
		sum += e;
	}
	sum = block_reduce<false>(sum, red);
	for (uint32_t j = threadIdx.x; j < kv_len; j += THREADS)
		s[j] = j < seen ? s[j] / sum : 0.0f;
}

static int blas_errno(cublasStatus_t st)
{
	switch (st) {
	case CUBLAS_STATUS_SUCCESS:
		return 0;
	case CUBLAS_STATUS_ALLOC_FAILED:
		return -ENOMEM;
	case CUBLAS_STATUS_NOT_INITIALIZED:
	case CUBLAS_STATUS_ARCH_MISMATCH:
		return -ENODEV;
	case CUBLAS_STATUS_INVALID_VALUE:
		return -EINVAL;
	default:
		return -EIO;
	}
}

static int attention(const kvs_attn_shape *s, const float *q, const float *k,
		     const float *v, float *out, float *S, cublasHandle_t h,
		     cudaStream_t st)
{
	const int D = (int)s->head_dim, H = (int)s->heads, KH = (int)s->kv_heads;
	const int G = H / KH, Lq = (int)s->q_len, Lk = (int)s->kv_len;
	const long long plane = (long long)Lq * Lk;
	const float alpha = s->scale > 0.0f ? s->scale : 1.0f / sqrtf((float)D);
	const float one = 1.0f, zero = 0.0f;
	int rc;

	rc = blas_errno(cublasSetStream(h, st));
	if (rc == 0) /* a reference: no TF32, no reduced-precision shortcuts */
		rc = blas_errno(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
	for (int r = 0; r < G && rc == 0; r++)
		rc = blas_errno(cublasSgemmStridedBatched(
			h, CUBLAS_OP_T, CUBLAS_OP_N, Lk, Lq, D, &alpha,
			k, KH * D, D, q + (size_t)r * D, H * D, (long long)G * D,
			&zero, S + (size_t)r * plane, Lk, G * plane, KH));
	if (rc < 0)
		return rc;
	softmax_rows<<<(unsigned)(H * Lq), THREADS, 0, st>>>(S, s->q_len,
							     s->kv_len, s->causal);
	rc = kvs_cuda_errno(cudaGetLastError());
	for (int r = 0; r < G && rc == 0; r++)
		rc = blas_errno(cublasSgemmStridedBatched(
			h, CUBLAS_OP_N, CUBLAS_OP_N, D, Lq, Lk, &one,
			v, KH * D, D, S + (size_t)r * plane, Lk, G * plane,
			&zero, out + (size_t)r * D, H * D, (long long)G * D, KH));
	return rc;
}

int kvs_attention_ref_cuda(const kvs_attn_shape *s, const float *q,
			   const float *k, const float *v, float *out,
			   void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	cublasHandle_t h = NULL;
	float *S = NULL;
	int rc = kvs_attention_check(s, q, k, v, out), rc2;

	if (rc < 0)
		return rc;
	rc = kvs_cuda_errno(cudaMallocAsync((void **)&S,
					    sizeof(float) * s->heads * s->q_len *
						    s->kv_len,
					    st));
	if (rc < 0)
		return rc;
	rc = blas_errno(cublasCreate(&h));
	if (rc == 0)
		rc = attention(s, q, k, v, out, S, h, st);
	rc2 = kvs_cuda_errno(cudaFreeAsync(S, st));
	if (h)
		(void)cublasDestroy(h); /* synchronizes the device */
	return rc < 0 ? rc : rc2;
}
