/*
 * test_kernels_gpu.c - the CUDA ops against their C twins, and the copy
 * bandwidth of scatter/gather against a plain device-to-device cudaMemcpy.
 * Run by tests/gpu/run.sh on a machine with an NVIDIA GPU; not in CTest.
 *
 *  1. kvs_kv_scatter_cuda / kvs_kv_gather_cuda: every worker dtype x stored
 *     dtype x layout, several shapes (vector and scalar paths, unaligned
 *     scales), scrambled pages and slots: the whole arena and the whole
 *     worker cache must equal the C twin's, byte for byte (canaries
 *     included: nothing outside the jobs is written); once more with
 *     infinities and NaNs among the values.
 *  2. kvs_attention_ref_cuda vs kvs_attention_ref: relative Frobenius error
 *     below 1e-5.
 *  3. Bandwidth: (bytes read + bytes written) / time of each op on a
 *     Llama-3-8B-sized batch (32 layers, 8 KV heads, head_dim 128, 16 blocks
 *     of 256 tokens), against 2 * bytes / time of cudaMemcpy of the worker
 *     cache; goal >= 80%.
 *  4. `kvsbench quality` with its CUDA column.
 * Exit: 0 pass, 1 a mismatch or CUDA error, 77 no device.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench_quality.h"
#include "kvs_attention_ref.h"
#include "kvs_check.h"
#include "kvs_cuda.h"
#include "kvs_kv_copy.h"

#define MAX_LAYERS 32

static uint64_t rng = 0x6b76736861726521ull;

static uint64_t rnd(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static float rndn(void) /* roughly N(0,1) */
{
	float x = 0;

	for (int i = 0; i < 4; i++)
		x += (float)(rnd() >> 40) / (float)(1 << 24) - 0.5f;
	return x * 1.7f;
}

static float rndf(void) /* with some large values, as KV has */
{
	return rndn() * (rnd() % 16 == 0 ? 40.0f : 1.0f);
}

static size_t esz(kvs_dtype d)
{
	return d == KVS_DTYPE_FP32 ? 4 : d == KVS_DTYPE_FP16 || d == KVS_DTYPE_BF16 ? 2 : 1;
}

static const char *dname(kvs_dtype d)
{
	return d == KVS_DTYPE_FP16 ? "fp16" : d == KVS_DTYPE_BF16 ? "bf16" :
	       d == KVS_DTYPE_FP32 ? "fp32" : d == KVS_DTYPE_INT8 ? "int8" :
	       d == KVS_DTYPE_INT4 ? "int4" : "fp8";
}

#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, \
		cudaGetErrorString(e_)); exit(1); } } while (0)

/* Worker layouts: the two named ones, then two strided ones (copied one
 * layer per call, as the public API does). */
enum { LAY_INNER = KVS_KV_KV_INNER, LAY_OUTER = KVS_KV_KV_OUTER, LAY_BHNC = 2,
       LAY_CPU = 3, LAY_COUNT };

/* Scatter or gather, all layers at once or one layer per call. */
static int run_copy(int (*fn)(const kvs_kv_cache *, const kvs_kv_blocks *),
		    int (*fn_cuda)(const kvs_kv_cache *, const kvs_kv_blocks *, void *),
		    const kvs_kv_cache *c, kvs_kv_blocks *b, int per_layer)
{
	int rc = 0;

	for (uint32_t l = 0; rc == 0 && l < (per_layer ? c->layers : 1); l++) {
		b->layer_first = l;
		b->layer_count = per_layer ? 1 : 0;
		rc = fn ? fn(c, b) : fn_cuda(c, b, NULL);
	}
	return rc;
}

/* A worker cache and a block arena, on the host and on the device. */
struct setup {
	kvs_kv_cache c;
	kvs_kv_blocks b;
	void *h_layers[MAX_LAYERS], *d_layers[MAX_LAYERS], **d_layer_arr;
	uint8_t *h_arena, *d_arena;
	uint64_t *h_off, *d_off, bb;
	int32_t *h_ids, *d_ids;
	size_t layer_bytes, arena_bytes;
};

/* Random values in one host layer of @bytes; @fill 2: with infinities and
 * NaNs among them. */
static void setup_fill_layer(void *layer, size_t bytes, kvs_dtype w, int fill)
{
	for (size_t e = 0; e < bytes / esz(w); e++) {
		float x = rndf();
		uint8_t *p = (uint8_t *)layer + e * esz(w);

		if (fill == 2 && rnd() % 61 == 0) { /* +inf, -inf, a NaN */
			static const uint32_t f32[3] = { 0x7f800000u, 0xff800000u,
							 0xffc01234u };
			static const uint16_t f16[3] = { 0x7c00u, 0xfc00u, 0xfe01u };
			static const uint16_t b16[3] = { 0x7f80u, 0xff80u, 0xff81u };
			int k = (int)(rnd() % 3);

			if (w == KVS_DTYPE_FP32)
				memcpy(p, &f32[k], 4);
			else
				memcpy(p, w == KVS_DTYPE_FP16 ? &f16[k] : &b16[k], 2);
			continue;
		}

		if (w == KVS_DTYPE_FP32) {
			memcpy(p, &x, 4);
		} else { /* truncation is fine: any bit pattern but NaN */
			uint32_t u;
			uint16_t h;

			memcpy(&u, &x, 4);
			h = w == KVS_DTYPE_BF16 ? (uint16_t)(u >> 16)
						: (uint16_t)(rnd() & 0x7bff) ^ (uint16_t)(rnd() & 0x8000);
			memcpy(p, &h, 2);
		}
	}
}

/* The device copies of the host layers, arena, offsets and page ids. */
static void setup_upload(struct setup *s, uint32_t L, uint32_t nblocks,
			 uint32_t npages)
{
	CU(cudaMalloc((void **)&s->d_arena, s->arena_bytes));
	CU(cudaMalloc((void **)&s->d_off, sizeof(uint64_t) * nblocks));
	CU(cudaMalloc((void **)&s->d_ids, sizeof(int32_t) * npages));
	CU(cudaMalloc((void **)&s->d_layer_arr, sizeof(void *) * L));
	for (uint32_t l = 0; l < L; l++) {
		CU(cudaMalloc(&s->d_layers[l], s->layer_bytes));
		CU(cudaMemcpy(s->d_layers[l], s->h_layers[l], s->layer_bytes, cudaMemcpyHostToDevice));
	}
	CU(cudaMemcpy(s->d_layer_arr, s->d_layers, sizeof(void *) * L, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(s->d_arena, s->h_arena, s->arena_bytes, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(s->d_off, s->h_off, sizeof(uint64_t) * nblocks, cudaMemcpyHostToDevice));
	CU(cudaMemcpy(s->d_ids, s->h_ids, sizeof(int32_t) * npages, cudaMemcpyHostToDevice));
}

static void setup_make(struct setup *s, kvs_dtype w, kvs_dtype q, int lay,
		       uint32_t L, uint32_t H, uint32_t D, uint32_t pt, uint32_t bt,
		       uint32_t nblocks, uint64_t align, int fill)
{
	uint32_t ppb = bt / pt, npages = nblocks * ppb + 3;
	uint64_t stride;

	memset(s, 0, sizeof(*s));
	s->c = (kvs_kv_cache){ s->h_layers, L, npages, pt, H, D, w,
			       (kvs_kv_layout)lay, { 0 } };
	if (lay == LAY_BHNC || lay == LAY_CPU) {
		/* vLLM >= 0.32's [pages][H][T][2D]: each token's K then V (the
		 * CUDA backends), or each head's T K rows then T V rows (CPU). */
		int64_t t = pt, h = H, d = D;

		s->c.layout = KVS_KV_STRIDED;
		s->c.strides[KVS_KV_STRIDE_PAGE] = h * t * 2 * d;
		s->c.strides[KVS_KV_STRIDE_HEAD] = t * 2 * d;
		s->c.strides[KVS_KV_STRIDE_KV] = lay == LAY_BHNC ? d : t * d;
		s->c.strides[KVS_KV_STRIDE_TOKEN] = lay == LAY_BHNC ? 2 * d : d;
	}
	s->b = (kvs_kv_blocks){ NULL, 0, NULL, NULL, nblocks, bt, q, 0, 0 };
	s->bb = kvs_kv_block_bytes(&s->c, &s->b);
	stride = (s->bb + align - 1) / align * align + align; /* canary gaps */
	s->arena_bytes = stride * (nblocks + 1) + align;
	s->layer_bytes = (size_t)npages * 2 * pt * H * D * esz(w);
	s->h_arena = malloc(s->arena_bytes);
	s->h_off = malloc(sizeof(uint64_t) * nblocks);
	s->h_ids = malloc(sizeof(int32_t) * npages);
	memset(s->h_arena, 0xa5, s->arena_bytes);
	for (uint32_t i = 0; i < npages; i++)
		s->h_ids[i] = (int32_t)i;
	for (uint32_t i = npages - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rnd() % (i + 1));
		int32_t t = s->h_ids[i];
		s->h_ids[i] = s->h_ids[j], s->h_ids[j] = t;
	}
	for (uint32_t i = 0; i < nblocks; i++) /* reverse order, odd start if align 1 */
		s->h_off[i] = (uint64_t)(nblocks - i) * stride + (align == 1 ? 1 : 0);
	for (uint32_t l = 0; l < L; l++) {
		s->h_layers[l] = malloc(s->layer_bytes);
		if (!fill) {
			memset(s->h_layers[l], 0xa5, s->layer_bytes);
			continue;
		}
		setup_fill_layer(s->h_layers[l], s->layer_bytes, w, fill);
	}
	setup_upload(s, L, nblocks, npages);
}

static void setup_free(struct setup *s)
{
	for (uint32_t l = 0; l < s->c.layers; l++) {
		free(s->h_layers[l]);
		CU(cudaFree(s->d_layers[l]));
	}
	free(s->h_arena);
	free(s->h_off);
	free(s->h_ids);
	CU(cudaFree(s->d_arena));
	CU(cudaFree(s->d_off));
	CU(cudaFree(s->d_ids));
	CU(cudaFree(s->d_layer_arr));
}

/* Descriptors pointing at host (twin) or device memory. */
static void descr(struct setup *s, int dev, kvs_kv_cache *c, kvs_kv_blocks *b)
{
	*c = s->c;
	*b = s->b;
	c->layer_ptrs = dev ? (void *const *)s->d_layer_arr : s->h_layers;
	b->arena = dev ? (void *)s->d_arena : (void *)s->h_arena;
	b->arena_bytes = s->arena_bytes;
	b->offsets = dev ? s->d_off : s->h_off;
	b->page_ids = dev ? s->d_ids : s->h_ids;
}

static int same_bytes(const void *host, const void *dev, size_t n)
{
	void *tmp = malloc(n);
	int same;

	CU(cudaMemcpy(tmp, dev, n, cudaMemcpyDeviceToHost));
	same = memcmp(host, tmp, n) == 0;
	free(tmp);
	return same;
}

static void check_copy(kvs_dtype w, kvs_dtype q, int lay, uint32_t L,
		       uint32_t H, uint32_t D, uint32_t pt, uint32_t bt,
		       uint32_t nblocks, uint64_t align, int fill)
{
	struct setup src, dst;
	kvs_kv_cache c;
	kvs_kv_blocks b;
	int ok = 1;

	int per_layer = lay >= LAY_BHNC;

	setup_make(&src, w, q, lay, L, H, D, pt, bt, nblocks, align, fill);
	descr(&src, 0, &c, &b);
	CHECK_EQ(run_copy(kvs_kv_scatter, NULL, &c, &b, per_layer), 0);
	descr(&src, 1, &c, &b);
	CHECK_EQ(run_copy(NULL, kvs_kv_scatter_cuda, &c, &b, per_layer), 0);
	CU(cudaDeviceSynchronize());
	ok &= same_bytes(src.h_arena, src.d_arena, src.arena_bytes);
	/* Gather both arenas (equal if the scatter passed) into canaried caches. */
	dst = src;
	for (uint32_t l = 0; l < L; l++) {
		dst.h_layers[l] = malloc(src.layer_bytes);
		memset(dst.h_layers[l], 0xa5, src.layer_bytes);
		CU(cudaMalloc(&dst.d_layers[l], src.layer_bytes));
		CU(cudaMemcpy(dst.d_layers[l], dst.h_layers[l], src.layer_bytes, cudaMemcpyHostToDevice));
	}
	CU(cudaMalloc((void **)&dst.d_layer_arr, sizeof(void *) * L));
	CU(cudaMemcpy(dst.d_layer_arr, dst.d_layers, sizeof(void *) * L, cudaMemcpyHostToDevice));
	dst.c.layer_ptrs = dst.h_layers;
	descr(&dst, 0, &c, &b);
	CHECK_EQ(run_copy(kvs_kv_gather, NULL, &c, &b, per_layer), 0);
	descr(&dst, 1, &c, &b);
	CHECK_EQ(run_copy(NULL, kvs_kv_gather_cuda, &c, &b, per_layer), 0);
	CU(cudaDeviceSynchronize());
	for (uint32_t l = 0; l < L; l++)
		ok &= same_bytes(dst.h_layers[l], dst.d_layers[l], src.layer_bytes);
	if (!ok)
		fprintf(stderr, "mismatch: worker %s stored %s layout %d L%u H%u D%u "
			"pt %u bt %u blocks %u align %llu\n", dname(w), dname(q), lay,
			L, H, D, pt, bt, nblocks, (unsigned long long)align);
	CHECK(ok);
	for (uint32_t l = 0; l < L; l++) {
		free(dst.h_layers[l]);
		CU(cudaFree(dst.d_layers[l]));
	}
	CU(cudaFree(dst.d_layer_arr));
	setup_free(&src);
}

static void check_attention(void)
{
	static const kvs_attn_shape shapes[] = {
		{ 16, 1024, 32, 8, 128, 1, 0 }, { 7, 300, 12, 4, 64, 0, 0 },
		{ 128, 128, 8, 8, 96, 1, 0.1f }, { 1, 4096, 32, 8, 128, 1, 0 },
	};

	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		const kvs_attn_shape *s = &shapes[i];
		size_t nq = (size_t)s->q_len * s->heads * s->head_dim;
		size_t nk = (size_t)s->kv_len * s->kv_heads * s->head_dim;
		float *h[5];
		void *d[4];
		double num = 0, den = 0;

		for (int j = 0; j < 5; j++)
			h[j] = malloc((j == 1 || j == 2 ? nk : nq) * sizeof(float));
		for (size_t e = 0; e < nq; e++)
			h[0][e] = rndn();
		for (size_t e = 0; e < nk; e++)
			h[1][e] = rndn(), h[2][e] = rndn();
		for (int j = 0; j < 4; j++) {
			size_t n = (j == 1 || j == 2 ? nk : nq) * sizeof(float);
			CU(cudaMalloc(&d[j], n));
			if (j < 3)
				CU(cudaMemcpy(d[j], h[j], n, cudaMemcpyHostToDevice));
		}
		CHECK_EQ(kvs_attention_ref(s, h[0], h[1], h[2], h[3]), 0);
		CHECK_EQ(kvs_attention_ref_cuda(s, d[0], d[1], d[2], d[3], NULL), 0);
		CU(cudaMemcpy(h[4], d[3], nq * sizeof(float), cudaMemcpyDeviceToHost));
		for (size_t e = 0; e < nq; e++) {
			num += ((double)h[4][e] - h[3][e]) * ((double)h[4][e] - h[3][e]);
			den += (double)h[3][e] * h[3][e];
		}
		printf("attention q%u kv%u h%u/%u d%u causal %d: rel err %.2e\n",
		       s->q_len, s->kv_len, s->heads, s->kv_heads, s->head_dim,
		       s->causal, sqrt(num / den));
		CHECK(sqrt(num / den) < 1e-5);
		for (int j = 0; j < 5; j++)
			free(h[j]);
		for (int j = 0; j < 4; j++)
			CU(cudaFree(d[j]));
	}
}

static float time_ms(int (*fn)(const kvs_kv_cache *, const kvs_kv_blocks *, void *),
		     kvs_kv_cache *c, kvs_kv_blocks *b, void *dst, const void *src,
		     size_t n, int iters)
{
	cudaEvent_t e0, e1;
	float ms;

	CU(cudaEventCreate(&e0));
	CU(cudaEventCreate(&e1));
	for (int i = 0; i < iters + 2; i++) {
		if (i == 2)
			CU(cudaEventRecord(e0, NULL));
		if (fn)
			CHECK_EQ(fn(c, b, NULL), 0);
		else
			CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, NULL));
	}
	CU(cudaEventRecord(e1, NULL));
	CU(cudaEventSynchronize(e1));
	CU(cudaEventElapsedTime(&ms, e0, e1));
	CU(cudaEventDestroy(e0));
	CU(cudaEventDestroy(e1));
	return ms / iters;
}

static void bandwidth(void)
{
	static const struct { kvs_dtype q; kvs_kv_layout lay; uint32_t pt; } rows[] = {
		{ KVS_DTYPE_FP16, KVS_KV_KV_INNER, 16 },
		{ KVS_DTYPE_FP16, KVS_KV_KV_OUTER, 16 },
		{ KVS_DTYPE_FP16, KVS_KV_KV_INNER, 256 },
		{ KVS_DTYPE_INT8, KVS_KV_KV_INNER, 16 },
		{ KVS_DTYPE_FP8_E4M3, KVS_KV_KV_INNER, 16 },
		{ KVS_DTYPE_FP8_E4M3, KVS_KV_KV_OUTER, 16 },
		{ KVS_DTYPE_INT4, KVS_KV_KV_INNER, 16 },
	};
	const uint32_t L = 32, H = 8, D = 128, bt = 256, nblocks = 16, iters = 10;
	int met = 0, total = 0;

	printf("\n%-7s %-6s %-6s %5s %10s %9s %9s %11s %6s\n", "op", "stored",
	       "layout", "page", "MiB_moved", "ms", "GB/s", "memcpy_GB/s", "pct");
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		struct setup s;
		kvs_kv_cache c;
		kvs_kv_blocks b;
		uint64_t wbytes = (uint64_t)nblocks * L * 2 * bt * H * D * 2, moved;
		void *a, *z;
		float mc;

		setup_make(&s, KVS_DTYPE_FP16, rows[r].q, rows[r].lay, L, H, D,
			   rows[r].pt, bt, nblocks, 256, 0);
		moved = wbytes + nblocks * s.bb;
		/* The baseline: one contiguous memcpy of all the worker bytes. */
		CU(cudaMalloc(&a, wbytes));
		CU(cudaMalloc(&z, wbytes));
		mc = time_ms(NULL, NULL, NULL, z, a, wbytes, iters);
		CU(cudaFree(a));
		CU(cudaFree(z));
		descr(&s, 1, &c, &b);
		for (int op = 0; op < 2; op++) {
			float ms = time_ms(op ? kvs_kv_gather_cuda : kvs_kv_scatter_cuda,
					   &c, &b, NULL, NULL, 0, iters);
			double gbs = moved / (ms * 1e6), mgbs = 2.0 * wbytes / (mc * 1e6);

			printf("%-7s %-6s %-6s %5u %10.1f %9.3f %9.1f %11.1f %5.0f%%\n",
			       op ? "gather" : "scatter", dname(rows[r].q),
			       rows[r].lay == KVS_KV_KV_INNER ? "inner" : "outer",
			       rows[r].pt, moved / 1048576.0, ms, gbs, mgbs,
			       100.0 * gbs / mgbs);
			met += gbs >= 0.8 * mgbs;
			total++;
		}
		setup_free(&s);
	}
	printf("bandwidth goal (>= 80%% of cudaMemcpy D2D): %d of %d rows met\n",
	       met, total);
}

int main(void)
{
	static const kvs_dtype ws[] = { KVS_DTYPE_FP16, KVS_DTYPE_BF16, KVS_DTYPE_FP32 };
	static const struct { uint32_t L, H, D, pt, bt, nblocks; uint64_t align; } sh[] = {
		{ 2, 4, 128, 16, 256, 3, 256 }, { 2, 2, 64, 16, 16, 4, 16 },
		{ 1, 3, 12, 4, 16, 3, 16 },     { 2, 8, 256, 8, 32, 2, 64 },
		{ 1, 2, 1024, 4, 8, 2, 16 },    { 1, 2, 2048, 2, 4, 2, 16 },
		{ 2, 3, 64, 4, 16, 3, 1 },      /* odd block offsets: scalar path */
		{ 2, 3, 33, 8, 48, 2, 16 },     /* odd head_dim; INT4: partial groups */
	};
	char *qargv[] = { "quality", NULL };
	struct cudaDeviceProp prop;
	int n = kvs_cuda_device_count();

	if (n == 0) {
		printf("test_kernels_gpu: SKIP: no CUDA device (%s)\n",
		       kvs_cuda_built() ? "no driver or device" : "built without CUDA");
		return 77;
	}
	CU(cudaGetDeviceProperties(&prop, 0));
	printf("test_kernels_gpu: %s, sm_%d%d, %.0f GiB\n", prop.name, prop.major,
	       prop.minor, prop.totalGlobalMem / 1073741824.0);
	for (size_t wi = 0; wi < 3; wi++)
	for (int qi = 0; qi < 4; qi++)
	for (int lay = 0; lay < LAY_COUNT; lay++)
	for (size_t si = 0; si < sizeof(sh) / sizeof(sh[0]); si++) {
		kvs_dtype q = qi == 0 ? ws[wi] : qi == 1 ? KVS_DTYPE_INT8 :
			      qi == 2 ? KVS_DTYPE_FP8_E4M3 : KVS_DTYPE_INT4;

		if (sh[si].align == 1 && qi == 0)
			continue; /* plain blocks must be element-aligned */
		check_copy(ws[wi], q, lay, sh[si].L, sh[si].H,
			   sh[si].D, sh[si].pt, sh[si].bt, sh[si].nblocks, sh[si].align, 1);
	}
	/* Infinities and NaNs (signed, with payloads) in 1 value of 61: the
	 * rule of kvs_numeric.h, canonical NaNs included, on both sides. */
	for (size_t wi = 0; wi < 3; wi++)
	for (int qi = 0; qi < 4; qi++)
		check_copy(ws[wi], qi == 0 ? ws[wi] : qi == 1 ? KVS_DTYPE_INT8 :
			   qi == 2 ? KVS_DTYPE_FP8_E4M3 : KVS_DTYPE_INT4, 0,
			   2, 3, 64, 4, 16, 3, 16, 2);
	check_attention();
	bandwidth();
	printf("\n");
	fflush(stdout);
	CHECK_EQ(kvsbench_quality(1, qargv), 0);
	return check_summary("test_kernels_gpu");
}
