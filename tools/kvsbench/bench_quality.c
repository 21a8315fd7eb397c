/*
 * bench_quality.c - `kvsbench quality`: what storing KV as each kvshare
 * dtype does to attention output.
 *
 * For each stored dtype the benchmark writes synthetic KV into a paged
 * worker cache (16-token pages in scrambled order), scatters it into cache
 * blocks of that dtype (quantizing for int8/fp8), gathers it back (the path
 * a cache hit takes), and runs reference attention on the result. The error
 * is the relative Frobenius error ||O - O_ref|| / ||O_ref|| against the
 * attention output O_ref of the same Q with the original fp32 K and V.
 * fp16 and bf16 rows store what a worker with that cache dtype holds; int8,
 * fp8 and int4 rows quantize from a worker cache of --worker dtype (fp16 unless
 * told) and dequantize back into it, so they include that rounding too.
 *
 * Generator (fresh for every --seed; shapes default to one layer of a
 * Llama-3-8B-like model: 32 query heads, 8 KV heads, head_dim 128):
 *   Q[i,h,d] ~ N(0,1).                V[t,h,d] ~ N(0,1).
 *   K[t,h,d] ~ N(0,1), except in --outlier-channels channels of every KV
 *   head (chosen at random per head), where K[t,h,c] = m_c * (b_c + N(0,1))
 *   with m_c ~ U[--outlier-min, --outlier-max] (10..50) and b_c ~ U[-1,1]:
 *   a few channels 10-50x larger than the rest, across all tokens, with a
 *   per-channel offset, as measured in the K cache of Llama-class models
 *   (KIVI, KVQuant). V has no channel structure. The "no outliers" column
 *   repeats everything with --outlier-channels 0.
 * Attention is causal: the queries are the last --q-len positions.
 *
 * The CUDA column runs the CUDA scatter/gather and cuBLAS attention when a
 * device is present (chosen at run time); it reads "-" otherwise.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_quality.h"
#include "bench_quality_int.h"
#include "kvs_attention_ref.h"
#include "kvs_cuda.h"
#include "kvs_kv_copy.h"
#include "kvs_kv_format.h"
#include "kvs_numeric.h"
#include "kvshare.h"

struct qopts {
	uint32_t kv_len, q_len, heads, kv_heads, head_dim;
	uint32_t outliers, page_tokens, block_tokens;
	double omin, omax;
	uint64_t seed;
	kvs_dtype worker;
	int json, cpu_only;
};

/* One synthetic sequence: q [q_len][heads][D], k and v [kv_len][kv_heads][D]. */
struct seq {
	float *q, *k, *v;
};

struct row {
	const char *name;
	kvs_dtype stored, worker;
	double k_err, v_err, out_err, out_err_plain, out_err_cuda;
	int cuda_ran;
};

uint64_t kvsq_splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

double kvsq_unif(uint64_t *s) /* [0, 1) */
{
	return (double)(kvsq_splitmix64(s) >> 11) * 0x1.0p-53;
}

double kvsq_normal(uint64_t *s) /* Box-Muller */
{
	double u = kvsq_unif(s), v = kvsq_unif(s);

	return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

void kvsq_page_ids(int32_t *ids, uint32_t npages, uint64_t seed)
{
	for (uint32_t i = 0; i < npages; i++)
		ids[i] = (int32_t)i;
	for (uint32_t i = npages - 1; i > 0; i--) { /* Fisher-Yates */
		uint32_t j = (uint32_t)(kvsq_splitmix64(&seed) % (i + 1));
		int32_t t = ids[i];

		ids[i] = ids[j];
		ids[j] = t;
	}
}

size_t kvsq_esize(kvs_dtype d)
{
	return d == KVS_DTYPE_FP32 ? 4 : d == KVS_DTYPE_FP16 || d == KVS_DTYPE_BF16 ? 2 : 1;
}

double kvsq_bytes_per_elem(uint32_t block_tokens, uint32_t kv_heads, uint32_t head_dim,
			   kvs_dtype stored)
{
	kvs_kv_format f;

	if (kvs_kv_format_init(&f, 1, block_tokens, kv_heads, head_dim, stored) < 0)
		return 0.0;
	return (double)f.total / (2.0 * block_tokens * kv_heads * head_dim);
}

static double bytes_per_elem(const struct qopts *o, kvs_dtype stored)
{
	return kvsq_bytes_per_elem(o->block_tokens, o->kv_heads, o->head_dim, stored);
}

static void seq_free(struct seq *s)
{
	free(s->q);
	free(s->k);
	free(s->v);
	s->q = s->k = s->v = NULL;
}

static int seq_gen(const struct qopts *o, uint32_t outliers, uint64_t seed,
		   struct seq *s)
{
	size_t nq = (size_t)o->q_len * o->heads * o->head_dim;
	size_t nk = (size_t)o->kv_len * o->kv_heads * o->head_dim;
	double *mag = calloc((size_t)o->kv_heads * o->head_dim, sizeof(double));
	double *bias = calloc((size_t)o->kv_heads * o->head_dim, sizeof(double));

	s->q = malloc(nq * sizeof(float));
	s->k = malloc(nk * sizeof(float));
	s->v = malloc(nk * sizeof(float));
	if (!mag || !bias || !s->q || !s->k || !s->v) {
		free(mag);
		free(bias);
		seq_free(s);
		return -ENOMEM;
	}
	for (uint32_t h = 0; h < o->kv_heads; h++) {
		double *m = mag + (size_t)h * o->head_dim;

		for (uint32_t n = 0; n < outliers; n++) {
			uint32_t c;

			do /* distinct channels */
				c = (uint32_t)(kvsq_splitmix64(&seed) % o->head_dim);
			while (m[c] != 0.0);
			m[c] = o->omin + (o->omax - o->omin) * kvsq_unif(&seed);
			bias[(size_t)h * o->head_dim + c] = 2.0 * kvsq_unif(&seed) - 1.0;
		}
	}
	for (size_t i = 0; i < nq; i++)
		s->q[i] = (float)kvsq_normal(&seed);
	for (size_t i = 0; i < nk; i++) {
		size_t ch = i % ((size_t)o->kv_heads * o->head_dim);

		s->k[i] = (float)(mag[ch] != 0.0 ? mag[ch] * (bias[ch] + kvsq_normal(&seed))
						  : kvsq_normal(&seed));
		s->v[i] = (float)kvsq_normal(&seed);
	}
	free(mag);
	free(bias);
	return 0;
}

float kvsq_elem_get(const uint8_t *p, kvs_dtype d, size_t i)
{
	uint16_t h;
	float f;

	if (d == KVS_DTYPE_FP32)
		return memcpy(&f, p + i * 4, 4), f;
	memcpy(&h, p + i * 2, 2);
	return d == KVS_DTYPE_FP16 ? kvs_f16_to_f32(h) : kvs_bf16_to_f32(h);
}

void kvsq_elem_put(uint8_t *p, kvs_dtype d, size_t i, float x)
{
	uint16_t h = d == KVS_DTYPE_FP16 ? kvs_f32_to_f16(x) : kvs_f32_to_bf16(x);

	if (d == KVS_DTYPE_FP32)
		memcpy(p + i * 4, &x, 4);
	else
		memcpy(p + i * 2, &h, 2);
}

/* Index of K (kv 0) or V (kv 1) of token t in the one-layer KV-inner cache. */
static size_t cache_index(const struct qopts *o, const int32_t *ids, uint32_t t,
			  uint32_t kv)
{
	uint32_t ppb = o->block_tokens / o->page_tokens;
	uint32_t page = (uint32_t)ids[(t / o->block_tokens) * ppb +
				      (t % o->block_tokens) / o->page_tokens];

	return (((size_t)page * 2 + kv) * o->page_tokens + t % o->page_tokens) *
	       o->kv_heads * o->head_dim;
}

/* Device copies of a host cache, arena and job arrays; the descriptors
 * then point at them. */
static int to_device(kvs_kv_cache *c, kvs_kv_blocks *b, void *const *host_layer,
		     size_t cache_bytes, void **dev)
{
	int32_t nppb = (int32_t)(b->block_tokens / c->page_tokens);
	size_t sz[5] = { cache_bytes, sizeof(void *), b->arena_bytes,
			 b->count * sizeof(uint64_t),
			 (size_t)b->count * nppb * sizeof(int32_t) };
	int rc = 0;

	for (int i = 0; i < 5 && rc == 0; i++)
		rc = kvs_cuda_malloc(&dev[i], sz[i]);
	if (rc == 0)
		rc = kvs_cuda_copy(dev[0], host_layer[0], sz[0]);
	if (rc == 0)
		rc = kvs_cuda_copy(dev[1], &dev[0], sz[1]);
	if (rc == 0)
		rc = kvs_cuda_copy(dev[3], b->offsets, sz[3]);
	if (rc == 0)
		rc = kvs_cuda_copy(dev[4], b->page_ids, sz[4]);
	c->layer_ptrs = (void *const *)dev[1];
	b->arena = dev[2];
	b->offsets = dev[3];
	b->page_ids = dev[4];
	return rc;
}

/*
 * Store k and v (fp32) through a worker cache of dtype @worker into blocks
 * of dtype @stored and load them back into k_out and v_out (fp32), on the
 * C twin or on the GPU.
 */
/* The worker cache @layer[0] stored into the blocks of @b and loaded back
 * into the cache, cleared between: on the CPU, or with @cuda through device
 * copies of both (in @dev, the caller frees them). */
static int store_and_load(kvs_kv_cache *c, kvs_kv_blocks *b, void **layer,
			  size_t cache_bytes, int cuda, void *dev[5])
{
	uint8_t *cache = layer[0];
	int rc;

	if (!cuda) {
		rc = kvs_kv_scatter(c, b);
		memset(cache, 0, cache_bytes);
		return rc ? rc : kvs_kv_gather(c, b);
	}
	rc = to_device(c, b, layer, cache_bytes, dev);
	memset(cache, 0, cache_bytes);
	if (rc == 0)
		rc = kvs_kv_scatter_cuda(c, b, NULL);
	if (rc == 0) /* clear the worker cache, then load it back */
		rc = kvs_cuda_copy(dev[0], cache, cache_bytes);
	if (rc == 0)
		rc = kvs_kv_gather_cuda(c, b, NULL);
	if (rc == 0)
		rc = kvs_cuda_sync(NULL);
	if (rc == 0)
		rc = kvs_cuda_copy(cache, dev[0], cache_bytes);
	return rc;
}

static int roundtrip(const struct qopts *o, kvs_dtype worker, kvs_dtype stored,
		     const struct seq *in, float *k_out, float *v_out,
		     int cuda, uint64_t seed)
{
	uint32_t ppb = o->block_tokens / o->page_tokens;
	uint32_t nblocks = (o->kv_len + o->block_tokens - 1) / o->block_tokens;
	uint32_t npages = nblocks * ppb + 3; /* spares: ids are scattered */
	size_t row = (size_t)o->kv_heads * o->head_dim;
	size_t cache_bytes = (size_t)npages * 2 * o->page_tokens * row * kvsq_esize(worker);
	kvs_kv_cache c = { 0 };
	kvs_kv_blocks b = { 0 };
	void *layer[1] = { NULL }, *dev[5] = { NULL };
	uint64_t bb, *offsets = NULL;
	int32_t *ids = NULL;
	uint8_t *cache, *arena = NULL;
	int rc = -ENOMEM;

	c = (kvs_kv_cache){ .layer_ptrs = layer, .layers = 1, .num_pages = npages,
			    .page_tokens = o->page_tokens, .kv_heads = o->kv_heads,
			    .head_dim = o->head_dim, .dtype = worker,
			    .layout = KVS_KV_KV_INNER };
	b = (kvs_kv_blocks){ .count = nblocks, .block_tokens = o->block_tokens,
			     .dtype = stored };
	bb = kvs_kv_block_bytes(&c, &b);
	cache = calloc(1, cache_bytes);
	layer[0] = cache;
	if (bb)
		arena = calloc(nblocks, bb);
	offsets = calloc(nblocks, sizeof(*offsets));
	ids = calloc(npages, sizeof(*ids));
	if (!bb || !cache || !arena || !offsets || !ids)
		goto out;
	kvsq_page_ids(ids, npages, seed);
	for (uint32_t i = 0; i < nblocks; i++) /* blocks in reverse slot order */
		offsets[i] = (uint64_t)(nblocks - 1 - i) * bb;
	for (uint32_t t = 0; t < o->kv_len; t++)
		for (size_t e = 0; e < row; e++) {
			kvsq_elem_put(cache, worker, cache_index(o, ids, t, 0) + e,
				      in->k[t * row + e]);
			kvsq_elem_put(cache, worker, cache_index(o, ids, t, 1) + e,
				      in->v[t * row + e]);
		}
	b.arena = arena;
	b.arena_bytes = (uint64_t)nblocks * bb;
	b.offsets = offsets;
	b.page_ids = ids;
	rc = store_and_load(&c, &b, layer, cache_bytes, cuda, dev);
	for (uint32_t t = 0; rc == 0 && t < o->kv_len; t++)
		for (size_t e = 0; e < row; e++) {
			k_out[t * row + e] = kvsq_elem_get(cache, worker,
							   cache_index(o, ids, t, 0) + e);
			v_out[t * row + e] = kvsq_elem_get(cache, worker,
							   cache_index(o, ids, t, 1) + e);
		}
out:
	for (int i = 0; i < 5; i++)
		kvs_cuda_free(dev[i]);
	free(cache);
	free(arena);
	free(offsets);
	free(ids);
	return rc;
}

static int attend(const struct qopts *o, const float *q, const float *k,
		  const float *v, float *out, int cuda)
{
	kvs_attn_shape s = { .q_len = o->q_len, .kv_len = o->kv_len,
			     .heads = o->heads, .kv_heads = o->kv_heads,
			     .head_dim = o->head_dim, .causal = 1 };
	size_t nq = (size_t)o->q_len * o->heads * o->head_dim * sizeof(float);
	size_t nk = (size_t)o->kv_len * o->kv_heads * o->head_dim * sizeof(float);
	void *d[4] = { NULL };
	int rc = 0;

	if (!cuda)
		return kvs_attention_ref(&s, q, k, v, out);
	for (int i = 0; i < 4 && rc == 0; i++)
		rc = kvs_cuda_malloc(&d[i], i == 1 || i == 2 ? nk : nq);
	if (rc == 0)
		rc = kvs_cuda_copy(d[0], q, nq);
	if (rc == 0)
		rc = kvs_cuda_copy(d[1], k, nk);
	if (rc == 0)
		rc = kvs_cuda_copy(d[2], v, nk);
	if (rc == 0)
		rc = kvs_attention_ref_cuda(&s, d[0], d[1], d[2], d[3], NULL);
	if (rc == 0)
		rc = kvs_cuda_copy(out, d[3], nq);
	for (int i = 0; i < 4; i++)
		kvs_cuda_free(d[i]);
	return rc;
}

double kvsq_rel_err(const float *a, const float *ref, size_t n)
{
	double num = 0.0, den = 0.0;

	for (size_t i = 0; i < n; i++) {
		double d = (double)a[i] - ref[i];

		num += d * d;
		den += (double)ref[i] * ref[i];
	}
	return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* Errors of one stored dtype on one sequence; k_err/v_err may be NULL. */
static int measure(const struct qopts *o, const struct seq *s,
		   const float *ref, kvs_dtype worker, kvs_dtype stored, int cuda,
		   double *k_err, double *v_err, double *out_err)
{
	size_t nk = (size_t)o->kv_len * o->kv_heads * o->head_dim;
	size_t nq = (size_t)o->q_len * o->heads * o->head_dim;
	float *k = malloc(nk * sizeof(float)), *v = malloc(nk * sizeof(float));
	float *out = malloc(nq * sizeof(float));
	const char *what = "alloc";
	int rc = -ENOMEM;

	if (k && v && out) {
		what = cuda ? "cuda kv copy" : "kv copy";
		rc = roundtrip(o, worker, stored, s, k, v, cuda, o->seed ^ stored);
	}
	if (rc == 0) {
		what = cuda ? "cuda attention" : "attention";
		rc = attend(o, s->q, k, v, out, cuda);
	}
	if (rc == 0) {
		if (k_err)
			*k_err = kvsq_rel_err(k, s->k, nk);
		if (v_err)
			*v_err = kvsq_rel_err(v, s->v, nk);
		*out_err = kvsq_rel_err(out, ref, nq);
	} else {
		fprintf(stderr, "kvsbench: quality: %s (%s) failed: %s%s%s\n",
			what, kvs_dtype_name(stored), kvs_strerror(rc),
			cuda ? " " : "", cuda ? kvs_cuda_error_name() : "");
	}
	free(k);
	free(v);
	free(out);
	return rc;
}

static void print_results(const struct qopts *o, const struct row *r, int n,
			  int cuda)
{
	if (o->json) {
		printf("{\"bench\":\"quality\",\"kv_len\":%u,\"q_len\":%u,"
		       "\"heads\":%u,\"kv_heads\":%u,\"head_dim\":%u,"
		       "\"outlier_channels\":%u,\"outlier_min\":%g,"
		       "\"outlier_max\":%g,\"seed\":%" PRIu64 ",\"cuda\":%s,"
		       "\"rows\":[",
		       o->kv_len, o->q_len, o->heads, o->kv_heads, o->head_dim,
		       o->outliers, o->omin, o->omax, o->seed,
		       cuda ? "true" : "false");
		for (int i = 0; i < n; i++) {
			printf("%s{\"dtype\":\"%s\",\"worker\":\"%s\","
			       "\"bytes_per_elem\":%.4f,\"k_rel_err\":%.6e,"
			       "\"v_rel_err\":%.6e,\"out_rel_err\":%.6e,"
			       "\"out_rel_err_no_outliers\":%.6e,",
			       i ? "," : "", r[i].name, kvs_dtype_name(r[i].worker),
			       bytes_per_elem(o, r[i].stored), r[i].k_err, r[i].v_err, r[i].out_err,
			       r[i].out_err_plain);
			if (r[i].cuda_ran)
				printf("\"out_rel_err_cuda\":%.6e}", r[i].out_err_cuda);
			else
				printf("\"out_rel_err_cuda\":null}");
		}
		printf("]}\n");
		return;
	}
	printf("kvsbench quality: kv_len %u, q_len %u (causal), heads %u/%u, "
	       "head_dim %u, K outliers %u/%u channels x%g-%g, seed %" PRIu64 "\n",
	       o->kv_len, o->q_len, o->heads, o->kv_heads, o->head_dim,
	       o->outliers, o->head_dim, o->omin, o->omax, o->seed);
	printf("%-6s %-6s %10s %10s %10s %12s %14s %12s\n", "dtype", "worker",
	       "bytes/elem", "K_rel_err", "V_rel_err", "out_rel_err",
	       "no_outliers", "cuda");
	for (int i = 0; i < n; i++) {
		char cu[32] = "-";

		if (r[i].cuda_ran)
			snprintf(cu, sizeof(cu), "%.3e", r[i].out_err_cuda);
		printf("%-6s %-6s %10.3f %10.3e %10.3e %12.3e %14.3e %12s\n",
		       r[i].name, kvs_dtype_name(r[i].worker),
		       bytes_per_elem(o, r[i].stored), r[i].k_err, r[i].v_err, r[i].out_err, r[i].out_err_plain, cu);
	}
	if (!cuda)
		printf("(cuda: no device%s)\n", kvs_cuda_built() ? "" : "; built without CUDA");
}

static void usage(void)
{
	fprintf(stderr,
		"usage: kvsbench quality [OPTIONS]\n"
		"\n"
		"Relative error of attention output with KV stored as fp16, bf16,\n"
		"int8, fp8 and int4 (kvshare's block format) against fp32 KV, on synthetic KV\n"
		"whose K has per-channel outliers.\n"
		"\n"
		"  --kv-len N            sequence length (1024)\n"
		"  --q-len N             queries: the last N positions, causal (16)\n"
		"  --heads N             query heads (32)\n"
		"  --kv-heads N          KV heads, divides --heads (8)\n"
		"  --head-dim N          (128)\n"
		"  --outlier-channels N  outlier channels of K per KV head (4)\n"
		"  --outlier-min X       smallest outlier magnitude (10)\n"
		"  --outlier-max X       largest outlier magnitude (50)\n"
		"  --worker TYPE         worker cache dtype for int8/fp8: fp16, bf16, fp32 (fp16)\n"
		"  --page-tokens N       worker page size (16)\n"
		"  --block-tokens N      cache block size, a multiple of pages (256)\n"
		"  --seed N              generator seed (1)\n"
		"  --cpu                 C twins only, even with a GPU\n"
		"  --json                one JSON object instead of the table\n"
		"  --mla                 an MLA latent cache instead (--mla --help)\n"
		"  -h, --help            this help\n");
}

int kvsq_parse_u32(const char *name, const char *s, uint32_t lo, uint32_t hi,
		   uint32_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end || v < lo || v > hi || s[0] == '-') {
		fprintf(stderr, "kvsbench: quality: --%s: expected %u..%u, got '%s'\n",
			name, lo, hi, s);
		return 1;
	}
	*out = (uint32_t)v;
	return 0;
}

int kvsq_parse_f(const char *name, const char *s, double *out)
{
	char *end;

	*out = strtod(s, &end);
	if (end == s || *end || !(*out > 0.0) || isinf(*out)) {
		fprintf(stderr, "kvsbench: quality: --%s: expected a positive number, got '%s'\n",
			name, s);
		return 1;
	}
	return 0;
}

static int parse_opts(int argc, char **argv, struct qopts *o)
{
	enum { O_KV = 256, O_Q, O_H, O_KH, O_D, O_OC, O_OMIN, O_OMAX, O_W,
	       O_PT, O_BT, O_SEED, O_CPU, O_JSON };
	static const struct option opts[] = {
		{ "kv-len", required_argument, NULL, O_KV },
		{ "q-len", required_argument, NULL, O_Q },
		{ "heads", required_argument, NULL, O_H },
		{ "kv-heads", required_argument, NULL, O_KH },
		{ "head-dim", required_argument, NULL, O_D },
		{ "outlier-channels", required_argument, NULL, O_OC },
		{ "outlier-min", required_argument, NULL, O_OMIN },
		{ "outlier-max", required_argument, NULL, O_OMAX },
		{ "worker", required_argument, NULL, O_W },
		{ "page-tokens", required_argument, NULL, O_PT },
		{ "block-tokens", required_argument, NULL, O_BT },
		{ "seed", required_argument, NULL, O_SEED },
		{ "cpu", no_argument, NULL, O_CPU },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint32_t seed = 1;
	int opt, bad = 0;

	optind = 0; /* glibc: restart getopt on this argv */
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case O_KV: bad |= kvsq_parse_u32("kv-len", optarg, 1, 1u << 20, &o->kv_len); break;
		case O_Q: bad |= kvsq_parse_u32("q-len", optarg, 1, 1u << 16, &o->q_len); break;
		case O_H: bad |= kvsq_parse_u32("heads", optarg, 1, 1024, &o->heads); break;
		case O_KH: bad |= kvsq_parse_u32("kv-heads", optarg, 1, 1024, &o->kv_heads); break;
		case O_D: bad |= kvsq_parse_u32("head-dim", optarg, 1, 4096, &o->head_dim); break;
		case O_OC:
			bad |= kvsq_parse_u32("outlier-channels", optarg, 0, 4096, &o->outliers);
			break;
		case O_OMIN: bad |= kvsq_parse_f("outlier-min", optarg, &o->omin); break;
		case O_OMAX: bad |= kvsq_parse_f("outlier-max", optarg, &o->omax); break;
		case O_PT: bad |= kvsq_parse_u32("page-tokens", optarg, 1, 1u << 16, &o->page_tokens); break;
		case O_BT: bad |= kvsq_parse_u32("block-tokens", optarg, 1, 1u << 16, &o->block_tokens); break;
		case O_SEED: bad |= kvsq_parse_u32("seed", optarg, 0, UINT32_MAX, &seed); break;
		case O_W:
			if (!strcmp(optarg, "fp16")) o->worker = KVS_DTYPE_FP16;
			else if (!strcmp(optarg, "bf16")) o->worker = KVS_DTYPE_BF16;
			else if (!strcmp(optarg, "fp32")) o->worker = KVS_DTYPE_FP32;
			else {
				fprintf(stderr, "kvsbench: quality: --worker: unknown type '%s'\n", optarg);
				bad = 1;
			}
			break;
		case O_CPU: o->cpu_only = 1; break;
		case O_JSON: o->json = 1; break;
		case 'h': usage(); return 0;
		default: usage(); return 2;
		}
	}
	o->seed = seed;
	if (!bad && (o->heads % o->kv_heads || o->outliers > o->head_dim ||
		     o->q_len > o->kv_len || o->omin > o->omax ||
		     o->block_tokens % o->page_tokens)) {
		fprintf(stderr, "kvsbench: quality: need kv-heads | heads, "
			"outlier-channels <= head-dim, q-len <= kv-len, "
			"outlier-min <= outlier-max, page-tokens | block-tokens\n");
		bad = 1;
	}
	if (bad || optind < argc) {
		if (!bad)
			fprintf(stderr, "kvsbench: quality: unexpected argument '%s'\n",
				argv[optind]);
		usage();
		return 2;
	}
	return -1; /* go on */
}

int kvsbench_quality(int argc, char **argv)
{
	struct qopts o = { .kv_len = 1024, .q_len = 16, .heads = 32,
			   .kv_heads = 8, .head_dim = 128, .outliers = 4,
			   .page_tokens = 16, .block_tokens = 256, .omin = 10.0,
			   .omax = 50.0, .worker = KVS_DTYPE_FP16 };
	struct row rows[] = {
		{ .name = "fp32", .stored = KVS_DTYPE_FP32, .worker = KVS_DTYPE_FP32 },
		{ .name = "fp16", .stored = KVS_DTYPE_FP16, .worker = KVS_DTYPE_FP16 },
		{ .name = "bf16", .stored = KVS_DTYPE_BF16, .worker = KVS_DTYPE_BF16 },
		{ .name = "int8", .stored = KVS_DTYPE_INT8 },
		{ .name = "fp8", .stored = KVS_DTYPE_FP8_E4M3 },
		{ .name = "int4", .stored = KVS_DTYPE_INT4 },
	};
	const int nrows = (int)(sizeof(rows) / sizeof(rows[0]));
	struct seq s[2] = { { 0 } };
	float *ref[2] = { NULL, NULL };
	size_t nq;
	int rc, cuda;

	for (int i = 1; i < argc; i++) /* MLA's latent rows: bench_quality_mla.c */
		if (!strcmp(argv[i], "--mla"))
			return kvsbench_quality_mla(argc, argv);
	rc = parse_opts(argc, argv, &o);
	if (rc >= 0)
		return rc;
	cuda = !o.cpu_only && kvs_cuda_device_count() > 0;
	nq = (size_t)o.q_len * o.heads * o.head_dim;
	rc = 0;
	/* s[0]: K with outliers; s[1]: the same generator without them. */
	for (int i = 0; i < 2 && rc == 0; i++) {
		rc = seq_gen(&o, i ? 0 : o.outliers, o.seed * 2 + (uint64_t)i, &s[i]);
		ref[i] = rc == 0 ? malloc(nq * sizeof(float)) : NULL;
		if (rc == 0 && !ref[i])
			rc = -ENOMEM;
		if (rc == 0)
			rc = kvs_attention_ref(&(kvs_attn_shape){
				.q_len = o.q_len, .kv_len = o.kv_len, .heads = o.heads,
				.kv_heads = o.kv_heads, .head_dim = o.head_dim,
				.causal = 1 }, s[i].q, s[i].k, s[i].v, ref[i]);
	}
	if (rc < 0)
		fprintf(stderr, "kvsbench: quality: setup failed: %s\n",
			kvs_strerror(rc));
	for (int i = 0; i < nrows && rc == 0; i++) {
		struct row *r = &rows[i];

		if (kvsq_esize(r->stored) == 1)
			r->worker = o.worker;
		rc = measure(&o, &s[0], ref[0], r->worker, r->stored, 0,
			     &r->k_err, &r->v_err, &r->out_err);
		if (rc == 0)
			rc = measure(&o, &s[1], ref[1], r->worker, r->stored, 0,
				     NULL, NULL, &r->out_err_plain);
		if (rc == 0 && cuda) {
			rc = measure(&o, &s[0], ref[0], r->worker, r->stored, 1,
				     NULL, NULL, &r->out_err_cuda);
			r->cuda_ran = rc == 0;
		}
	}
	if (rc == 0)
		print_results(&o, rows, nrows, cuda);
	for (int i = 0; i < 2; i++) {
		seq_free(&s[i]);
		free(ref[i]);
	}
	return rc == 0 ? 0 : 1;
}
