/*
 * bench_quality_mla.c - `kvsbench quality --mla`: what storing an MLA
 * latent cache as each kvshare dtype does to MLA's attention output.
 *
 * The cache is what vLLM's MLA backends keep: one row a token and layer,
 * the compressed KV c_kv (--rank elements, 512 for DeepSeek V2/V3) then the
 * rotated key k_pe (--rope, 64). The rows go through the path the vLLM
 * connector takes for them (PagedCache kind "mla"): worker pages
 * [pages][page_tokens][rank + rope] (16-token pages in scrambled order),
 * scattered into blocks of one "head" of head_dim (rank + rope) / 2 whose K
 * is each row's first half and V its second, gathered back.
 *
 * Attention is MLA's with the up-projections absorbed, per query head h:
 *   q_lat = W_UK[h]^T q_nope          (rank;  W_UK[h] is nope x rank)
 *   s_t   = (q_lat . c_kv[t] + q_pe . k_pe[t]) / sqrt(nope + rope)
 *   o_lat = sum_t softmax(s)_t c_kv[t]   (rank)
 *   out   = W_UV[h] o_lat             (vdim; W_UV[h] is vdim x rank)
 * causal, the queries the last --q-len positions. The error is
 * ||out - out_ref|| / ||out_ref|| against the same queries on the fp32 rows.
 *
 * Generator (fresh for every --seed): q_nope, q_pe ~ N(0,1); W_UK entries
 * N(0, 1/nope), W_UV N(0, 1/rank). c_kv[t,c] ~ N(0,1) except in
 * --outlier-channels channels (chosen at random among the rank), where it
 * is m_c * (b_c + N(0,1)), m_c ~ U[--outlier-min, --outlier-max], b_c ~
 * U[-1,1]: the per-channel outliers of kvsbench quality's K, at its density
 * (16 of 512 = 4 of 128). k_pe is the same generator over the rope dims
 * (--rope-outliers channels, 2 of 64), rotated by RoPE (base 10000,
 * interleaved pairs, as DeepSeek's) at its position, q_pe at the query's.
 * The "no_outliers" column repeats everything with no outlier channels.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_quality_int.h"
#include "kvs_kv_copy.h"
#include "kvs_kv_format.h"
#include "kvshare.h"

struct mopts {
	uint32_t kv_len, q_len, heads, rank, rope, nope, vdim;
	uint32_t outliers, rope_outliers, page_tokens, block_tokens;
	double omin, omax;
	uint64_t seed;
	kvs_dtype worker;
	int json;
};

/* One synthetic sequence: rows [kv_len][rank + rope]; q_lat [q_len][heads]
 * [rank] (W_UK applied), q_pe [q_len][heads][rope] (rotated); w_uv
 * [heads][vdim][rank]. */
struct mseq {
	float *rows, *q_lat, *q_pe, *w_uv;
};

struct mrow {
	const char *name;
	kvs_dtype stored, worker;
	double c_err, pe_err, out_err, out_err_plain;
};

static uint32_t width(const struct mopts *o)
{
	return o->rank + o->rope;
}

static void mseq_free(struct mseq *s)
{
	free(s->rows);
	free(s->q_lat);
	free(s->q_pe);
	free(s->w_uv);
	memset(s, 0, sizeof(*s));
}

/* x[n][dim] at stride @stride: N(0,1), or m_c (b_c + N(0,1)) in @outliers
 * random channels. */
static void gen_channels(const struct mopts *o, float *x, size_t n, uint32_t dim,
			 size_t stride, uint32_t outliers, uint64_t *seed)
{
	double *mag = calloc(dim, sizeof(double)), *bias = calloc(dim, sizeof(double));

	for (uint32_t i = 0; mag && bias && i < outliers; i++) {
		uint32_t c;

		do /* distinct channels */
			c = (uint32_t)(kvsq_splitmix64(seed) % dim);
		while (mag[c] != 0.0);
		mag[c] = o->omin + (o->omax - o->omin) * kvsq_unif(seed);
		bias[c] = 2.0 * kvsq_unif(seed) - 1.0;
	}
	for (size_t t = 0; t < n; t++)
		for (uint32_t c = 0; c < dim; c++) {
			double z = kvsq_normal(seed);

			x[t * stride + c] = (float)(mag && mag[c] != 0.0 ? mag[c] * (bias[c] + z) : z);
		}
	free(mag);
	free(bias);
}

/* RoPE of one vector of @dim (even) elements at position @pos, in place. */
static void rope(float *x, uint32_t dim, uint32_t pos)
{
	for (uint32_t i = 0; i < dim / 2; i++) {
		double th = pos * pow(10000.0, -2.0 * i / dim), c = cos(th), s = sin(th);
		double a = x[2 * i], b = x[2 * i + 1];

		x[2 * i] = (float)(a * c - b * s);
		x[2 * i + 1] = (float)(a * s + b * c);
	}
}

static int mseq_gen(const struct mopts *o, int outliers, uint64_t seed, struct mseq *s)
{
	size_t w = width(o), nh = (size_t)o->q_len * o->heads;
	float *q_nope = malloc(nh * o->nope * sizeof(float));
	float *w_uk = malloc((size_t)o->nope * o->rank * sizeof(float));

	s->rows = malloc(o->kv_len * w * sizeof(float));
	s->q_lat = calloc(nh * o->rank, sizeof(float));
	s->q_pe = malloc(nh * o->rope * sizeof(float));
	s->w_uv = malloc((size_t)o->heads * o->vdim * o->rank * sizeof(float));
	if (!q_nope || !w_uk || !s->rows || !s->q_lat || !s->q_pe || !s->w_uv) {
		free(q_nope);
		free(w_uk);
		mseq_free(s);
		return -ENOMEM;
	}
	gen_channels(o, s->rows, o->kv_len, o->rank, w, outliers ? o->outliers : 0, &seed);
	gen_channels(o, s->rows + o->rank, o->kv_len, o->rope, w,
		     outliers ? o->rope_outliers : 0, &seed);
	for (uint32_t t = 0; t < o->kv_len; t++)
		rope(s->rows + t * w + o->rank, o->rope, t);
	gen_channels(o, q_nope, nh, o->nope, o->nope, 0, &seed);
	gen_channels(o, s->q_pe, nh, o->rope, o->rope, 0, &seed);
	for (size_t i = 0; i < (size_t)o->heads * o->vdim * o->rank; i++)
		s->w_uv[i] = (float)(kvsq_normal(&seed) / sqrt(o->rank));
	for (uint32_t h = 0; h < o->heads; h++) {
		for (size_t i = 0; i < (size_t)o->nope * o->rank; i++)
			w_uk[i] = (float)(kvsq_normal(&seed) / sqrt(o->nope));
		for (uint32_t q = 0; q < o->q_len; q++) {
			const float *qn = q_nope + ((size_t)q * o->heads + h) * o->nope;
			float *ql = s->q_lat + ((size_t)q * o->heads + h) * o->rank;

			for (uint32_t d = 0; d < o->nope; d++)
				for (uint32_t c = 0; c < o->rank; c++)
					ql[c] += qn[d] * w_uk[(size_t)d * o->rank + c];
			rope(s->q_pe + ((size_t)q * o->heads + h) * o->rope, o->rope,
			     o->kv_len - o->q_len + q);
		}
	}
	free(q_nope);
	free(w_uk);
	return 0;
}

/* MLA attention (absorbed) of @s's queries over @rows: out [q_len][heads][vdim]. */
static int mla_attend(const struct mopts *o, const struct mseq *s, const float *rows,
		      float *out)
{
	size_t w = width(o);
	double *p = malloc(o->kv_len * sizeof(double)), *lat = malloc(o->rank * sizeof(double));
	double scale = 1.0 / sqrt((double)o->nope + o->rope);

	if (!p || !lat) {
		free(p);
		free(lat);
		return -ENOMEM;
	}
	for (uint32_t q = 0; q < o->q_len; q++)
		for (uint32_t h = 0; h < o->heads; h++) {
			const float *ql = s->q_lat + ((size_t)q * o->heads + h) * o->rank;
			const float *qp = s->q_pe + ((size_t)q * o->heads + h) * o->rope;
			uint32_t n = o->kv_len - o->q_len + q + 1; /* causal */
			double mx = -INFINITY, sum = 0.0;

			for (uint32_t t = 0; t < n; t++) {
				const float *r = rows + t * w;
				double d = 0.0;

				for (uint32_t c = 0; c < o->rank; c++)
					d += (double)ql[c] * r[c];
				for (uint32_t c = 0; c < o->rope; c++)
					d += (double)qp[c] * r[o->rank + c];
				p[t] = d * scale;
				mx = p[t] > mx ? p[t] : mx;
			}
			memset(lat, 0, o->rank * sizeof(double));
			for (uint32_t t = 0; t < n; t++) {
				p[t] = exp(p[t] - mx);
				sum += p[t];
				for (uint32_t c = 0; c < o->rank; c++)
					lat[c] += p[t] * rows[t * w + c];
			}
			for (uint32_t v = 0; v < o->vdim; v++) {
				const float *wv = s->w_uv + ((size_t)h * o->vdim + v) * o->rank;
				double acc = 0.0;

				for (uint32_t c = 0; c < o->rank; c++)
					acc += wv[c] * lat[c];
				out[((size_t)q * o->heads + h) * o->vdim + v] = (float)(acc / sum);
			}
		}
	free(p);
	free(lat);
	return 0;
}

/*
 * Store @in's rows (fp32) through a worker latent cache of dtype @worker
 * into blocks of dtype @stored, as the connector's "mla" paged copy lays
 * them out, and load them back into @out (fp32). C twins.
 */
static int mla_roundtrip(const struct mopts *o, kvs_dtype worker, kvs_dtype stored,
			 const float *in, float *out, uint64_t seed)
{
	uint32_t w = width(o), ppb = o->block_tokens / o->page_tokens;
	uint32_t nblocks = (o->kv_len + o->block_tokens - 1) / o->block_tokens;
	uint32_t npages = nblocks * ppb + 3; /* spares: ids are scattered */
	size_t cache_bytes = (size_t)npages * o->page_tokens * w * kvsq_esize(worker);
	void *layer[1] = { NULL };
	kvs_kv_cache c = { .layer_ptrs = layer, .layers = 1, .num_pages = npages,
			   .page_tokens = o->page_tokens, .kv_heads = 1, .head_dim = w / 2,
			   .dtype = worker, .layout = KVS_KV_STRIDED,
			   .strides = { w / 2, (int64_t)o->page_tokens * w, w, w } };
	kvs_kv_blocks b = { .count = nblocks, .block_tokens = o->block_tokens,
			    .dtype = stored };
	uint64_t bb = kvs_kv_block_bytes(&c, &b), *offsets = calloc(nblocks, sizeof(uint64_t));
	int32_t *ids = calloc(npages, sizeof(int32_t));
	uint8_t *cache = calloc(1, cache_bytes), *arena = bb ? calloc(nblocks, bb) : NULL;
	int rc = -ENOMEM;

	layer[0] = cache;
	if (!bb || !cache || !arena || !offsets || !ids)
		goto out;
	kvsq_page_ids(ids, npages, seed);
	for (uint32_t i = 0; i < nblocks; i++)
		offsets[i] = (uint64_t)(nblocks - 1 - i) * bb;
	for (uint32_t t = 0; t < o->kv_len; t++) {
		size_t at = ((size_t)ids[t / o->page_tokens] * o->page_tokens +
			     t % o->page_tokens) * w;

		for (uint32_t e = 0; e < w; e++)
			kvsq_elem_put(cache, worker, at + e, in[(size_t)t * w + e]);
	}
	b.arena = arena;
	b.arena_bytes = (uint64_t)nblocks * bb;
	b.offsets = offsets;
	b.page_ids = ids;
	rc = kvs_kv_scatter(&c, &b);
	memset(cache, 0, cache_bytes);
	if (rc == 0)
		rc = kvs_kv_gather(&c, &b);
	for (uint32_t t = 0; rc == 0 && t < o->kv_len; t++) {
		size_t at = ((size_t)ids[t / o->page_tokens] * o->page_tokens +
			     t % o->page_tokens) * w;

		for (uint32_t e = 0; e < w; e++)
			out[(size_t)t * w + e] = kvsq_elem_get(cache, worker, at + e);
	}
out:
	free(cache);
	free(arena);
	free(offsets);
	free(ids);
	return rc;
}

/* ||a - ref|| / ||ref|| over columns [c0, c0 + n) of [rows][w] arrays. */
static double part_err(const struct mopts *o, const float *a, const float *ref,
		       uint32_t c0, uint32_t n)
{
	double num = 0.0, den = 0.0;

	for (size_t t = 0; t < o->kv_len; t++)
		for (uint32_t c = c0; c < c0 + n; c++) {
			double x = ref[t * width(o) + c], d = a[t * width(o) + c] - x;

			num += d * d;
			den += x * x;
		}
	return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* Errors of one stored dtype on one sequence; c_err/pe_err may be NULL. */
static int mla_measure(const struct mopts *o, const struct mseq *s, const float *ref,
		       kvs_dtype worker, kvs_dtype stored, double *c_err, double *pe_err,
		       double *out_err)
{
	size_t nrow = (size_t)o->kv_len * width(o), nout = (size_t)o->q_len * o->heads * o->vdim;
	float *rows = malloc(nrow * sizeof(float)), *out = malloc(nout * sizeof(float));
	int rc = rows && out ? mla_roundtrip(o, worker, stored, s->rows, rows, o->seed ^ stored)
			     : -ENOMEM;

	if (rc == 0)
		rc = mla_attend(o, s, rows, out);
	if (rc == 0) {
		if (c_err)
			*c_err = part_err(o, rows, s->rows, 0, o->rank);
		if (pe_err)
			*pe_err = part_err(o, rows, s->rows, o->rank, o->rope);
		*out_err = kvsq_rel_err(out, ref, nout);
	} else {
		fprintf(stderr, "kvsbench: quality --mla: %s failed: %s\n",
			kvs_dtype_name(stored), kvs_strerror(rc));
	}
	free(rows);
	free(out);
	return rc;
}

/* A latent row is a block's K and V halves of one head (docs/vllm.md, MLA). */
static double mla_bytes_per_elem(const struct mopts *o, kvs_dtype stored)
{
	return kvsq_bytes_per_elem(o->block_tokens, 1, width(o) / 2, stored);
}

static void mla_print(const struct mopts *o, const struct mrow *r, int n)
{
	if (o->json) {
		printf("{\"bench\":\"quality\",\"mode\":\"mla\",\"kv_len\":%u,\"q_len\":%u,"
		       "\"heads\":%u,\"rank\":%u,\"rope\":%u,\"nope\":%u,\"vdim\":%u,"
		       "\"outlier_channels\":%u,\"rope_outliers\":%u,\"seed\":%" PRIu64
		       ",\"rows\":[", o->kv_len, o->q_len, o->heads, o->rank, o->rope,
		       o->nope, o->vdim, o->outliers, o->rope_outliers, o->seed);
		for (int i = 0; i < n; i++)
			printf("%s{\"dtype\":\"%s\",\"worker\":\"%s\",\"bytes_per_elem\":%.4f,"
			       "\"c_kv_rel_err\":%.6e,\"k_pe_rel_err\":%.6e,\"out_rel_err\":%.6e,"
			       "\"out_rel_err_no_outliers\":%.6e}", i ? "," : "", r[i].name,
			       kvs_dtype_name(r[i].worker), mla_bytes_per_elem(o, r[i].stored),
			       r[i].c_err, r[i].pe_err, r[i].out_err, r[i].out_err_plain);
		printf("]}\n");
		return;
	}
	printf("kvsbench quality --mla: kv_len %u, q_len %u (causal), heads %u, latent %u+%u "
	       "(nope %u, v %u), outliers %u/%u c_kv and %u/%u rope channels x%g-%g, "
	       "seed %" PRIu64 "\n", o->kv_len, o->q_len, o->heads, o->rank, o->rope, o->nope,
	       o->vdim, o->outliers, o->rank, o->rope_outliers, o->rope, o->omin, o->omax,
	       o->seed);
	printf("%-6s %-6s %10s %10s %10s %12s %14s\n", "dtype", "worker", "bytes/elem",
	       "c_kv_err", "k_pe_err", "out_rel_err", "no_outliers");
	for (int i = 0; i < n; i++)
		printf("%-6s %-6s %10.3f %10.3e %10.3e %12.3e %14.3e\n", r[i].name,
		       kvs_dtype_name(r[i].worker), mla_bytes_per_elem(o, r[i].stored),
		       r[i].c_err, r[i].pe_err, r[i].out_err, r[i].out_err_plain);
}

static void mla_usage(void)
{
	fprintf(stderr,
		"usage: kvsbench quality --mla [OPTIONS]\n"
		"\n"
		"Relative error of MLA attention output with the latent cache (c_kv and\n"
		"k_pe rows, as vLLM's MLA backends keep it) stored as fp16, bf16, int8,\n"
		"fp8 and int4 through the vLLM connector's latent layout, against fp32.\n"
		"\n"
		"  --kv-len N            sequence length (1024)\n"
		"  --q-len N             queries: the last N positions, causal (16)\n"
		"  --heads N             query heads (16)\n"
		"  --rank N              kv_lora_rank: c_kv elements (512)\n"
		"  --rope N              qk_rope_head_dim: k_pe elements, even (64)\n"
		"  --nope N              qk_nope_head_dim (128)\n"
		"  --vdim N              v_head_dim (128)\n"
		"  --outlier-channels N  outlier channels of c_kv (16)\n"
		"  --rope-outliers N     outlier channels of k_pe before RoPE (2)\n"
		"  --outlier-min X       smallest outlier magnitude (10)\n"
		"  --outlier-max X       largest outlier magnitude (50)\n"
		"  --worker TYPE         worker cache dtype for int8/fp8/int4: fp16, bf16, fp32 (fp16)\n"
		"  --page-tokens N       worker page size (16)\n"
		"  --block-tokens N      cache block size, a multiple of pages (256)\n"
		"  --seed N              generator seed (1)\n"
		"  --json                one JSON object instead of the table\n"
		"  -h, --help            this help\n");
}

static int mla_opt(int opt, struct mopts *o, uint32_t *seed)
{
	switch (opt) {
	case 'k': return kvsq_parse_u32("kv-len", optarg, 1, 1u << 18, &o->kv_len);
	case 'q': return kvsq_parse_u32("q-len", optarg, 1, 1u << 12, &o->q_len);
	case 'H': return kvsq_parse_u32("heads", optarg, 1, 256, &o->heads);
	case 'r': return kvsq_parse_u32("rank", optarg, 1, 4096, &o->rank);
	case 'p': return kvsq_parse_u32("rope", optarg, 0, 1024, &o->rope);
	case 'n': return kvsq_parse_u32("nope", optarg, 1, 1024, &o->nope);
	case 'v': return kvsq_parse_u32("vdim", optarg, 1, 1024, &o->vdim);
	case 'o': return kvsq_parse_u32("outlier-channels", optarg, 0, 4096, &o->outliers);
	case 'O': return kvsq_parse_u32("rope-outliers", optarg, 0, 1024, &o->rope_outliers);
	case 'a': return kvsq_parse_f("outlier-min", optarg, &o->omin);
	case 'b': return kvsq_parse_f("outlier-max", optarg, &o->omax);
	case 't': return kvsq_parse_u32("page-tokens", optarg, 1, 1u << 16, &o->page_tokens);
	case 'B': return kvsq_parse_u32("block-tokens", optarg, 1, 1u << 16, &o->block_tokens);
	case 's': return kvsq_parse_u32("seed", optarg, 0, UINT32_MAX, seed);
	case 'j': o->json = 1; return 0;
	case 'w':
		if (!strcmp(optarg, "fp16") || !strcmp(optarg, "bf16") || !strcmp(optarg, "fp32")) {
			o->worker = optarg[0] == 'b' ? KVS_DTYPE_BF16 : optarg[2] == '1' ?
				    KVS_DTYPE_FP16 : KVS_DTYPE_FP32;
			return 0;
		}
		fprintf(stderr, "kvsbench: quality: --worker: unknown type '%s'\n", optarg);
		return 1;
	case 'm': return 0; /* --mla: how we got here */
	}
	return 1;
}

static int mla_parse(int argc, char **argv, struct mopts *o)
{
	static const struct option opts[] = {
		{ "kv-len", required_argument, NULL, 'k' }, { "q-len", required_argument, NULL, 'q' },
		{ "heads", required_argument, NULL, 'H' }, { "rank", required_argument, NULL, 'r' },
		{ "rope", required_argument, NULL, 'p' }, { "nope", required_argument, NULL, 'n' },
		{ "vdim", required_argument, NULL, 'v' },
		{ "outlier-channels", required_argument, NULL, 'o' },
		{ "rope-outliers", required_argument, NULL, 'O' },
		{ "outlier-min", required_argument, NULL, 'a' },
		{ "outlier-max", required_argument, NULL, 'b' },
		{ "worker", required_argument, NULL, 'w' },
		{ "page-tokens", required_argument, NULL, 't' },
		{ "block-tokens", required_argument, NULL, 'B' },
		{ "seed", required_argument, NULL, 's' }, { "json", no_argument, NULL, 'j' },
		{ "mla", no_argument, NULL, 'm' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint32_t seed = 1;
	int opt, bad = 0;

	optind = 0; /* glibc: restart getopt on this argv */
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (opt == 'h') {
			mla_usage();
			return 0;
		}
		bad |= mla_opt(opt, o, &seed);
	}
	o->seed = seed;
	if (!bad && (o->outliers > o->rank || o->rope_outliers > o->rope || o->rope % 2 ||
		     (o->rank + o->rope) % 2 || o->q_len > o->kv_len || o->omin > o->omax ||
		     o->block_tokens % o->page_tokens)) {
		fprintf(stderr, "kvsbench: quality --mla: need outlier-channels <= rank, "
			"rope-outliers <= rope, an even rope and rank + rope, q-len <= kv-len, "
			"outlier-min <= outlier-max, page-tokens | block-tokens\n");
		bad = 1;
	}
	if (bad || optind < argc) {
		if (!bad)
			fprintf(stderr, "kvsbench: quality --mla: unexpected argument '%s'\n",
				argv[optind]);
		mla_usage();
		return 2;
	}
	return -1; /* go on */
}

int kvsbench_quality_mla(int argc, char **argv)
{
	struct mopts o = { .kv_len = 1024, .q_len = 16, .heads = 16, .rank = 512, .rope = 64,
			   .nope = 128, .vdim = 128, .outliers = 16, .rope_outliers = 2,
			   .page_tokens = 16, .block_tokens = 256, .omin = 10.0, .omax = 50.0,
			   .worker = KVS_DTYPE_FP16 };
	struct mrow rows[] = {
		{ .name = "fp32", .stored = KVS_DTYPE_FP32, .worker = KVS_DTYPE_FP32 },
		{ .name = "fp16", .stored = KVS_DTYPE_FP16, .worker = KVS_DTYPE_FP16 },
		{ .name = "bf16", .stored = KVS_DTYPE_BF16, .worker = KVS_DTYPE_BF16 },
		{ .name = "int8", .stored = KVS_DTYPE_INT8 },
		{ .name = "fp8", .stored = KVS_DTYPE_FP8_E4M3 },
		{ .name = "int4", .stored = KVS_DTYPE_INT4 },
	};
	const int nrows = (int)(sizeof(rows) / sizeof(rows[0]));
	struct mseq s[2] = { { 0 } };
	float *ref[2] = { NULL, NULL };
	int rc = mla_parse(argc, argv, &o);
	size_t nout = (size_t)o.q_len * o.heads * o.vdim;

	if (rc >= 0)
		return rc;
	rc = 0;
	/* s[0]: outlier channels; s[1]: the same generator without them. */
	for (int i = 0; i < 2 && rc == 0; i++) {
		rc = mseq_gen(&o, !i, o.seed * 2 + (uint64_t)i, &s[i]);
		ref[i] = rc == 0 ? malloc(nout * sizeof(float)) : NULL;
		if (rc == 0)
			rc = ref[i] ? mla_attend(&o, &s[i], s[i].rows, ref[i]) : -ENOMEM;
	}
	if (rc < 0)
		fprintf(stderr, "kvsbench: quality --mla: setup failed: %s\n", kvs_strerror(rc));
	for (int i = 0; i < nrows && rc == 0; i++) {
		struct mrow *r = &rows[i];

		if (kvsq_esize(r->stored) == 1)
			r->worker = o.worker;
		rc = mla_measure(&o, &s[0], ref[0], r->worker, r->stored, &r->c_err, &r->pe_err,
				 &r->out_err);
		if (rc == 0)
			rc = mla_measure(&o, &s[1], ref[1], r->worker, r->stored, NULL, NULL,
					 &r->out_err_plain);
	}
	if (rc == 0)
		mla_print(&o, rows, nrows);
	for (int i = 0; i < 2; i++) {
		mseq_free(&s[i]);
		free(ref[i]);
	}
	return rc == 0 ? 0 : 1;
}
