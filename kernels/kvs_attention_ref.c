/*
 * kvs_attention_ref.c - the C twin of kvs_attention_ref.cu: plain loops,
 * double accumulation, a max-subtracted softmax.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "kvs_attention_ref.h"

int kvs_attention_check(const kvs_attn_shape *s, const void *q, const void *k,
			const void *v, const void *out)
{
	uint64_t qn, kn, sn;

	if (!s || !q || !k || !v || !out)
		return -EINVAL;
	if (!s->q_len || !s->kv_len || !s->heads || !s->kv_heads ||
	    !s->head_dim || s->heads % s->kv_heads)
		return -EINVAL;
	if (s->causal && s->q_len > s->kv_len)
		return -EINVAL;
	if (!(s->scale >= 0.0f) || isinf(s->scale))
		return -EINVAL;
	/* Each product of two 32-bit sizes fits; bound the triples that index
	 * arrays (the scores of the CUDA version are heads*q_len*kv_len). */
	qn = (uint64_t)s->q_len * s->heads;
	kn = (uint64_t)s->kv_len * s->kv_heads;
	sn = (uint64_t)s->q_len * s->kv_len;
	if (qn > INT32_MAX || kn > INT32_MAX || sn > INT32_MAX ||
	    qn * s->head_dim > INT32_MAX || kn * s->head_dim > INT32_MAX ||
	    sn * s->heads > INT32_MAX)
		return -EINVAL;
	return 0;
}

int kvs_attention_ref(const kvs_attn_shape *s, const float *q, const float *k,
		      const float *v, float *out)
{
	uint32_t D, H, KH, group;
	double scale, *p, *acc;
	int rc = kvs_attention_check(s, q, k, v, out);

	if (rc < 0)
		return rc;
	D = s->head_dim;
	H = s->heads;
	KH = s->kv_heads;
	group = H / KH;
	scale = s->scale > 0.0f ? (double)s->scale : 1.0 / sqrt((double)D);
	p = malloc(sizeof(double) * s->kv_len);
	acc = malloc(sizeof(double) * D);
	if (!p || !acc) {
		free(p);
		free(acc);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < s->q_len; i++) {
		uint32_t seen = s->causal ? s->kv_len - s->q_len + i + 1 : s->kv_len;

		for (uint32_t h = 0; h < H; h++) {
			const float *qi = q + ((uint64_t)i * H + h) * D;
			uint32_t kh = h / group;
			double max = -INFINITY, sum = 0.0;

			for (uint32_t j = 0; j < seen; j++) {
				const float *kj = k + ((uint64_t)j * KH + kh) * D;
				double dot = 0.0;

				for (uint32_t d = 0; d < D; d++)
					dot += (double)qi[d] * kj[d];
				p[j] = dot * scale;
				if (p[j] > max)
					max = p[j];
			}
			for (uint32_t j = 0; j < seen; j++) {
				p[j] = exp(p[j] - max);
				sum += p[j];
			}
			for (uint32_t d = 0; d < D; d++)
				acc[d] = 0.0;
			for (uint32_t j = 0; j < seen; j++) {
				const float *vj = v + ((uint64_t)j * KH + kh) * D;

				for (uint32_t d = 0; d < D; d++)
					acc[d] += p[j] * vj[d];
			}
			for (uint32_t d = 0; d < D; d++)
				out[((uint64_t)i * H + h) * D + d] =
					(float)(acc[d] / sum);
		}
	}
	free(p);
	free(acc);
	return 0;
}
