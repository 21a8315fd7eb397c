/*
 * test_kernels.c - the C twins of kernels/ against plain references in
 * higher precision, on fresh random inputs each run (the seed is printed;
 * KVS_TEST_SEED=N repeats a run).
 *
 *  - element formats: fp16, bf16 and e4m3 encoders against a nearest-value
 *    search over every representable value (ties to the even code), decoders
 *    against their formulas;
 *  - attention against a long double reference;
 *  - argument errors, and -ENODEV from the CUDA entries without a device.
 *
 * Scatter/gather and the quantized formats: test_kernels_copy.c.
 */
#include "kernels_test.h"

static float any_float(void) /* random magnitude, sign, and some ties */
{
	switch (rnd() % 4) {
	case 0:
		return kvs_f32_from_bits((uint32_t)rnd() & 0xff7fffffu); /* finite */
	case 1:
		return (float)(gauss() * ldexp(1.0, (int)(rnd() % 40) - 30));
	case 2: { /* a midpoint of two e4m3 / fp16 values */
		uint32_t c = (uint32_t)(rnd() % 0x7bff);
		double m = (F16.tab[c] + F16.tab[c + 1]) / 2;
		return (float)(rnd() % 2 ? -m : m);
	}
	default: {
		uint32_t c = (uint32_t)(rnd() % 0x7e);
		double m = (E4M3.tab[c] + E4M3.tab[c + 1]) / 2;
		return (float)(rnd() % 2 ? m : -m * ldexp(1.0, (int)(rnd() % 3)));
	}
	}
}

static void test_formats(void)
{
	int bad16 = 0, badb = 0, bad8 = 0, dec = 0, f16native = 0;

	for (uint32_t c = 0; c < 0x10000; c++) {
		uint32_t a = c & 0x7fff;

		if (a < F16.n && kvs_f16_to_f32((uint16_t)c) != (float)ref_dec(&F16, c))
			dec++;
		if (a < BF16.n && kvs_bf16_to_f32((uint16_t)c) != (float)ref_dec(&BF16, c))
			dec++;
		if (a < F16.n && kvs_f32_to_f16(kvs_f16_to_f32((uint16_t)c)) != c)
			dec++;
	}
	for (uint32_t c = 0; c < 256; c++) {
		if ((c & 0x7f) == 0x7f)
			dec += !isnan(kvs_e4m3_to_f32((uint8_t)c));
		else
			dec += kvs_e4m3_to_f32((uint8_t)c) != (float)ref_dec(&E4M3, c);
	}
	CHECK_EQ(dec, 0);
	for (int i = 0; i < 300000; i++) {
		float x = any_float();

		bad16 += kvs_f32_to_f16(x) != ref_round(&F16, x);
		badb += kvs_f32_to_bf16(x) != ref_round(&BF16, x);
		bad8 += kvs_f32_to_e4m3(x) != ref_round(&E4M3, x);
#ifdef __FLT16_MAX__
		{
			_Float16 h = (_Float16)x;
			uint16_t hb;

			memcpy(&hb, &h, 2);
			f16native += hb != kvs_f32_to_f16(x);
		}
#endif
	}
	CHECK_EQ(bad16, 0);
	CHECK_EQ(badb, 0);
	CHECK_EQ(bad8, 0);
	CHECK_EQ(f16native, 0);
	/* Saturation and specials of e4m3. */
	CHECK_EQ(kvs_f32_to_e4m3(448.0f), 0x7e);
	CHECK_EQ(kvs_f32_to_e4m3(464.0f), 0x7e);
	CHECK_EQ(kvs_f32_to_e4m3(1e30f), 0x7e);
	CHECK_EQ(kvs_f32_to_e4m3(-INFINITY), 0xfe);
	CHECK_EQ(kvs_f32_to_e4m3(NAN), 0x7f);
	CHECK_EQ(kvs_f32_to_e4m3(-0.0f), 0x80);
	CHECK_EQ(kvs_f32_to_f16(65520.0f), 0x7c00);
	CHECK_EQ(kvs_f32_to_f16(65519.0f), 0x7bff);
	CHECK(isnan(kvs_bf16_to_f32(kvs_f32_to_bf16(NAN))));
}

/* ---- attention ---- */

static void attn_ref(const kvs_attn_shape *s, const float *q, const float *k,
		     const float *v, long double *out)
{
	uint32_t G = s->heads / s->kv_heads, D = s->head_dim;
	long double scale = s->scale > 0 ? s->scale : 1.0L / sqrtl(D);
	long double *sc = malloc(sizeof(long double) * s->kv_len);

	for (uint32_t h = 0; h < s->heads; h++)
	for (uint32_t i = 0; i < s->q_len; i++) {
		long double m = -INFINITY, z = 0;
		const float *qi = q + ((size_t)i * s->heads + h) * D;

		for (uint32_t j = 0; j < s->kv_len; j++) {
			const float *kj = k + ((size_t)j * s->kv_heads + h / G) * D;
			long double dot = 0;

			for (uint32_t d = 0; d < D; d++)
				dot += (long double)qi[d] * kj[d];
			sc[j] = s->causal && j > s->kv_len - s->q_len + i ? -INFINITY
									  : dot * scale;
			m = fmaxl(m, sc[j]);
		}
		for (uint32_t j = 0; j < s->kv_len; j++)
			z += sc[j] == -INFINITY ? 0 : expl(sc[j] - m);
		for (uint32_t d = 0; d < D; d++) {
			long double o = 0;

			for (uint32_t j = 0; j < s->kv_len; j++)
				if (sc[j] != -INFINITY)
					o += expl(sc[j] - m) / z *
					     v[((size_t)j * s->kv_heads + h / G) * D + d];
			out[((size_t)i * s->heads + h) * D + d] = o;
		}
	}
	free(sc);
}

static void test_attention(void)
{
	static const kvs_attn_shape shapes[] = {
		{ 1, 1, 1, 1, 1, 0, 0 },      { 5, 37, 4, 2, 16, 1, 0 },
		{ 8, 8, 6, 3, 24, 1, 0.3f },  { 3, 50, 8, 1, 32, 0, 0 },
		{ 16, 64, 8, 8, 64, 1, 0 },
	};

	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const kvs_attn_shape *s = &shapes[si];
		size_t nq = (size_t)s->q_len * s->heads * s->head_dim;
		size_t nk = (size_t)s->kv_len * s->kv_heads * s->head_dim;
		float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4);
		float *out = malloc(nq * 4);
		long double *ref = malloc(nq * sizeof(long double)), num = 0, den = 0;
		int bad = 0;

		for (size_t i = 0; i < nq; i++)
			q[i] = (float)(gauss() * 2);
		for (size_t i = 0; i < nk; i++)
			k[i] = (float)(gauss() * 2), v[i] = (float)gauss();
		CHECK_EQ(kvs_attention_ref(s, q, k, v, out), 0);
		attn_ref(s, q, k, v, ref);
		for (size_t i = 0; i < nq; i++) {
			num += (out[i] - ref[i]) * (out[i] - ref[i]);
			den += ref[i] * ref[i];
			bad += fabsl(out[i] - ref[i]) > 1e-6L * (1 + fabsl(ref[i]));
		}
		CHECK_EQ(bad, 0);
		CHECK(sqrtl(num / den) < 1e-6L);
		/* Causal, q_len == kv_len: query 0 sees key 0 only. */
		if (s->causal && s->q_len == s->kv_len)
			CHECK(out[0] == v[0]);
		free(q), free(k), free(v), free(out), free(ref);
	}
}

static void test_attention_errors(void)
{
	float x[64] = { 0 };
	kvs_attn_shape s0 = { 2, 4, 4, 2, 2, 1, 0 }, s;

#define EXPECT(err, stmt)                                                      \
	do {                                                                   \
		s = s0;                                                        \
		stmt;                                                          \
		CHECK_EQ(kvs_attention_ref(&s, x, x, x, x + 32), err);         \
		if (kvs_cuda_device_count() == 0)                              \
			CHECK_EQ(kvs_attention_ref_cuda(&s, x, x, x, x + 32, NULL), \
				 (err) ? (err) : -ENODEV);                      \
	} while (0)
	EXPECT(0, (void)0);
	EXPECT(-EINVAL, s.heads = 3);
	EXPECT(-EINVAL, s.q_len = 5);
	EXPECT(-EINVAL, s.kv_heads = 0);
	EXPECT(-EINVAL, s.head_dim = 0);
	EXPECT(-EINVAL, s.scale = -1.0f);
	EXPECT(-EINVAL, s.scale = NAN);
	EXPECT(-EINVAL, s.scale = INFINITY);
	EXPECT(-EINVAL, (s.q_len = 1u << 20, s.kv_len = 1u << 20, s.causal = 0));
#undef EXPECT
	CHECK_EQ(kvs_attention_ref(NULL, x, x, x, x), -EINVAL);
	CHECK_EQ(kvs_attention_ref(&s0, x, NULL, x, x), -EINVAL);
}

int main(void)
{
	kernels_test_begin("test_kernels");
	test_formats();
	test_attention();
	test_attention_errors();
	if (!kvs_cuda_device_count()) {
		void *p = (void *)1;

		CHECK_EQ(kvs_cuda_malloc(&p, 16), -ENODEV);
		CHECK(p == NULL);
	}
	return kernels_test_end("test_kernels");
}
