/*
 * bench_share_cmd.c - `kvsbench share`'s command: its options and their
 * checks, the phases of workers (bench_share.c), and the report (a table
 * and one JSON line).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_share.h"
#include "cli.h"
#include "bench_share_int.h"
#include "bench_util.h"

/* A quarter of the daemon's host tier, in blocks of @bb bytes: a window's
 * blocks are pinned at once, and several workers' windows should fit side
 * by side. 64 MiB when the daemon does not say (the workers' own connect
 * then reports why). */
static unsigned default_window(const char *sock, uint64_t bb)
{
	int64_t host = 64 << 20;
	kvs_client *c = NULL;
	char *text = NULL;
	uint64_t w;

	if (kvs_connect(sock, NULL, &c) == 0 && kvs_stats(c, &text) == 0 &&
	    (kvs_stats_value(text, "tier_host.bytes_total", &host) < 0 || host <= 0))
		host = 64 << 20;
	free(text);
	kvs_close(c);
	w = (uint64_t)host / 4 / bb;
	return w < 1 ? 1 : w > KVS_MAX_HASHES ? KVS_MAX_HASHES : (unsigned)w;
}

static void share_usage(void)
{
	fprintf(stderr,
		"usage: kvsbench [--socket PATH] share [OPTIONS]\n"
		"  -w, --workers N        worker processes (default 4)\n"
		"  -p, --prefix-tokens T  shared prefix tokens (default 4096)\n"
		"  -u, --suffix-tokens U  private suffix tokens per worker (default 512)\n"
		"      --layers L         (default 32)\n"
		"      --kv-heads H       (default 8)\n"
		"      --head-dim D       (default 128)\n"
		"      --dtype T          fp16|bf16|fp32|fp8|int8|int4 (default fp16)\n"
		"      --block-tokens B   (default 16)\n"
		"      --model NAME       (default kvsbench-model)\n"
		"      --salt S           tenant salt (default none)\n"
		"      --window N         blocks per lookup and per reserve+write+commit\n"
		"                         (default: a quarter of the daemon's host tier)\n"
		"      --json-only        print only the JSON summary line\n"
		"RAG mode: every worker issues R requests at once with the others,\n"
		"each the prefix, then k of D documents, then a private question:\n"
		"      --rag              RAG mode (defaults then: prefix 512, suffix 64,\n"
		"                         layers 4, i.e. 256 KiB blocks)\n"
		"      --docs D           documents in the pool (default 32)\n"
		"      --docs-per-request K  documents per request, K <= D (default 4)\n"
		"      --doc-tokens T     tokens per document (default 256)\n"
		"      --requests R       requests per worker (default 32)\n"
		"      --order O          sorted (by document id) | random (draw\n"
		"                         order) (default sorted)\n"
		"      --seed S           document draws and questions (default 1)\n");
}

static int parse_u64(const char *opt, const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-') {
		fprintf(stderr, "kvsbench: --%s: '%s' is not a number\n", opt, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_dtype(const char *s, kvs_dtype *out)
{
	if (kvs_dtype_parse(s, out) == 0)
		return 0;
	fprintf(stderr, "kvsbench: --dtype: unknown type '%s'\n", s);
	return -1;
}

static void print_table(const struct share_opts *o, const struct report *r,
			uint64_t bb)
{
	printf("kvsbench share: %u workers, %u prefix + %u suffix tokens, "
	       "%u tokens/block, %" PRIu64 " bytes/block, %u shared blocks\n",
	       o->workers, o->prefix, o->suffix, o->layout.block_tokens, bb,
	       o->prefix / o->layout.block_tokens);
	printf("%6s %7s %7s %7s %7s %7s %5s %5s %7s %11s %10s %10s %s\n",
	       "worker", "blocks", "hit", "miss", "new", "exists", "busy",
	       "full", "corrupt", "verified_MB", "lookup_ms", "write_ms",
	       "status");
	for (unsigned i = 0; i < o->workers; i++) {
		const struct report *w = &r[i];

		if (w->worker == 0) {
			printf("%6u %s\n", i + 1, "(no report)");
			continue;
		}
		printf("%6u %7" PRIu64 " %7" PRIu64 " %7" PRIu64 " %7" PRIu64
		       " %7" PRIu64 " %5" PRIu64 " %5" PRIu64 " %7" PRIu64
		       " %11.2f %10.3f %10.3f %s%s\n",
		       w->worker, w->blocks, w->hit_blocks, w->miss_blocks,
		       w->new_blocks, w->exists_blocks, w->busy_blocks,
		       w->full_blocks, w->corrupt_blocks,
		       (double)w->verified_bytes / 1e6, w->lookup_s * 1e3,
		       w->write_s * 1e3, w->rc < 0 ? w->where : "ok",
		       w->rc < 0 ? " failed" : "");
	}
}

/* Hit tokens: the cache keeps whole blocks only, so a hit is always
 * block_tokens tokens and a prompt's trailing partial block never hits. */
static double hit_ratio(const struct share_opts *o, const struct report *w)
{
	return w->prompt_tokens ? (double)(w->hit_blocks * o->layout.block_tokens) /
					  (double)w->prompt_tokens : 0.0;
}

static void rag_row(const struct share_opts *o, const char *name,
		    const struct report *w, uint64_t bb)
{
	printf("%6s %8" PRIu64 " %10" PRIu64 " %10" PRIu64 " %6.2f%% %10.1f"
	       " %7" PRIu64 " %7" PRIu64 " %5" PRIu64 " %5" PRIu64 " %7" PRIu64
	       " %10.1f %10.1f %s%s\n",
	       name, w->requests, w->prompt_tokens,
	       w->hit_blocks * o->layout.block_tokens, 100.0 * hit_ratio(o, w),
	       (double)(w->hit_blocks * bb) / 1e6, w->new_blocks,
	       w->exists_blocks, w->busy_blocks, w->full_blocks,
	       w->corrupt_blocks, w->lookup_s * 1e3, w->write_s * 1e3,
	       w->rc < 0 ? w->where : "ok", w->rc < 0 ? " failed" : "");
}

static void rag_table(const struct share_opts *o, const struct report *r,
		      const struct report *sum, uint64_t bb)
{
	printf("kvsbench share --rag: %u workers x %u requests; prefix %u + "
	       "%u of %u docs x %u tokens (order %s) + question %u tokens; "
	       "%u tokens/block, %" PRIu64 " bytes/block, seed %" PRIu64 "\n",
	       o->workers, o->requests, o->prefix, o->per_req, o->docs,
	       o->doc_tokens, o->sorted ? "sorted" : "random", o->suffix,
	       o->layout.block_tokens, bb, o->seed);
	printf("%6s %8s %10s %10s %7s %10s %7s %7s %5s %5s %7s %10s %10s %s\n",
	       "worker", "requests", "prompt_tok", "hit_tok", "hit", "reused_MB",
	       "new", "exists", "busy", "full", "corrupt", "lookup_ms",
	       "write_ms", "status");
	for (unsigned i = 0; i < o->workers; i++) {
		char name[16];

		snprintf(name, sizeof(name), "%u", i + 1);
		if (r[i].worker == 0)
			printf("%6s %s\n", name, "(no report)");
		else
			rag_row(o, name, &r[i], bb);
	}
	rag_row(o, "total", sum, bb);
	printf("hit = hit tokens / prompt tokens; the cache keeps whole blocks, "
	       "so hits count whole blocks of %u tokens\n",
	       o->layout.block_tokens);
}

static void rag_json(const struct share_opts *o, const struct report *r,
		     const struct report *sum, uint64_t bb, double secs,
		     unsigned failed)
{
	printf("{\"bench\":\"share\",\"mode\":\"rag\",\"workers\":%u,"
	       "\"requests_per_worker\":%u,\"requests\":%" PRIu64
	       ",\"docs\":%u,\"docs_per_request\":%u,\"doc_tokens\":%u,"
	       "\"order\":\"%s\",\"seed\":%" PRIu64 ",\"prefix_tokens\":%u,"
	       "\"suffix_tokens\":%u,\"block_tokens\":%u,\"block_bytes\":%" PRIu64
	       ",\"prompt_tokens\":%" PRIu64 ",\"hit_tokens\":%" PRIu64
	       ",\"hit_ratio\":%.6f,\"hit_blocks\":%" PRIu64
	       ",\"miss_blocks\":%" PRIu64 ",\"bytes_reused\":%" PRIu64
	       ",\"verified_bytes\":%" PRIu64 ",\"corrupt_blocks\":%" PRIu64
	       ",\"new_blocks\":%" PRIu64 ",\"exists_blocks\":%" PRIu64
	       ",\"busy_blocks\":%" PRIu64 ",\"full_blocks\":%" PRIu64
	       ",\"seconds\":%.6f,\"failed_workers\":%u,\"worker_hit_ratio\":[",
	       o->workers, o->requests, sum->requests, o->docs, o->per_req,
	       o->doc_tokens, o->sorted ? "sorted" : "random", o->seed,
	       o->prefix, o->suffix, o->layout.block_tokens, bb,
	       sum->prompt_tokens, sum->hit_blocks * o->layout.block_tokens,
	       hit_ratio(o, sum), sum->hit_blocks, sum->miss_blocks,
	       sum->hit_blocks * bb, sum->verified_bytes, sum->corrupt_blocks,
	       sum->new_blocks, sum->exists_blocks, sum->busy_blocks,
	       sum->full_blocks, secs, failed);
	for (unsigned i = 0; i < o->workers; i++)
		printf("%s%.6f", i ? "," : "", hit_ratio(o, &r[i]));
	printf("]}\n");
}

/* Which options were given: RAG mode has its own defaults for the others,
 * and RAG options without --rag are a usage error. */
struct share_given {
	int prefix, suffix, layers, rag_opts;
};

static int parse_order(const char *s, struct share_opts *o)
{
	if (!strcmp(s, "sorted") || !strcmp(s, "random")) {
		o->sorted = s[0] == 's';
		return 0;
	}
	fprintf(stderr, "kvsbench: --order: '%s' is not sorted or random\n", s);
	return 1;
}

/* The options into @o: -1 to go on, else the exit code (help, usage). */
static int share_parse(struct share_opts *o, struct share_given *g, int argc,
		       char **argv)
{
	enum { O_LAYERS = 256, O_HEADS, O_DIM, O_DTYPE, O_BT, O_MODEL, O_SALT,
	       O_JSON, O_RAG, O_DOCS, O_PER, O_DOCTOK, O_REQS, O_ORDER,
	       O_SEED, O_WINDOW };
	static const struct option opts[] = {
		{ "workers", required_argument, NULL, 'w' },
		{ "prefix-tokens", required_argument, NULL, 'p' },
		{ "suffix-tokens", required_argument, NULL, 'u' },
		{ "layers", required_argument, NULL, O_LAYERS },
		{ "kv-heads", required_argument, NULL, O_HEADS },
		{ "head-dim", required_argument, NULL, O_DIM },
		{ "dtype", required_argument, NULL, O_DTYPE },
		{ "block-tokens", required_argument, NULL, O_BT },
		{ "model", required_argument, NULL, O_MODEL },
		{ "salt", required_argument, NULL, O_SALT },
		{ "json-only", no_argument, NULL, O_JSON },
		{ "window", required_argument, NULL, O_WINDOW },
		{ "rag", no_argument, NULL, O_RAG },
		{ "docs", required_argument, NULL, O_DOCS },
		{ "docs-per-request", required_argument, NULL, O_PER },
		{ "doc-tokens", required_argument, NULL, O_DOCTOK },
		{ "requests", required_argument, NULL, O_REQS },
		{ "order", required_argument, NULL, O_ORDER },
		{ "seed", required_argument, NULL, O_SEED },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned ntok_max = 1u << 24;
	int opt, bad = 0;

	while ((opt = getopt_long(argc, argv, "w:p:u:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'w': bad |= kvsb_parse_uint("workers", optarg, 1, MAX_WORKERS, &o->workers); break;
		case 'p': g->prefix = 1; bad |= kvsb_parse_uint("prefix-tokens", optarg, 0, ntok_max, &o->prefix); break;
		case 'u': g->suffix = 1; bad |= kvsb_parse_uint("suffix-tokens", optarg, 0, ntok_max, &o->suffix); break;
		case O_LAYERS: g->layers = 1; bad |= kvsb_parse_uint("layers", optarg, 1, 1u << 16, &o->layout.layers); break;
		case O_HEADS: bad |= kvsb_parse_uint("kv-heads", optarg, 1, 1u << 16, &o->layout.kv_heads); break;
		case O_DIM: bad |= kvsb_parse_uint("head-dim", optarg, 1, 1u << 16, &o->layout.head_dim); break;
		case O_BT: bad |= kvsb_parse_uint("block-tokens", optarg, 1, 1u << 16, &o->layout.block_tokens); break;
		case O_DTYPE: bad |= parse_dtype(optarg, &o->layout.dtype); break;
		case O_MODEL: o->layout.model = optarg; break;
		case O_SALT: o->layout.salt = optarg; break;
		case O_JSON: o->json_only = 1; break;
		case O_WINDOW: bad |= kvsb_parse_uint("window", optarg, 1, KVS_MAX_HASHES, &o->window); break;
		case O_RAG: o->rag = 1; break;
		case O_DOCS: g->rag_opts = 1; bad |= kvsb_parse_uint("docs", optarg, 1, 1u << 20, &o->docs); break;
		case O_PER: g->rag_opts = 1; bad |= kvsb_parse_uint("docs-per-request", optarg, 1, 1u << 16, &o->per_req); break;
		case O_DOCTOK: g->rag_opts = 1; bad |= kvsb_parse_uint("doc-tokens", optarg, 1, ntok_max, &o->doc_tokens); break;
		case O_REQS: g->rag_opts = 1; bad |= kvsb_parse_uint("requests", optarg, 1, 1u << 24, &o->requests); break;
		case O_SEED: g->rag_opts = 1; bad |= parse_u64("seed", optarg, &o->seed); break;
		case O_ORDER: g->rag_opts = 1; bad |= parse_order(optarg, o); break;
		case 'h': share_usage(); return 0;
		default: share_usage(); return 2;
		}
	}
	if (bad || optind < argc) {
		if (optind < argc)
			fprintf(stderr, "kvsbench: share: unexpected argument '%s'\n",
				argv[optind]);
		share_usage();
		return 2;
	}
	return -1;
}

/* The options together: RAG mode's defaults, the limits of a request and
 * of the pool. The block's bytes into @bb; -1 to go on, else the exit code. */
static int share_check(struct share_opts *o, const struct share_given *g,
		       uint64_t *bb)
{
	if (g->rag_opts && !o->rag) {
		fprintf(stderr, "kvsbench: share: --docs, --docs-per-request, "
			"--doc-tokens, --requests, --order and --seed need --rag\n");
		return 2;
	}
	if (o->rag && o->per_req > o->docs) {
		fprintf(stderr, "kvsbench: share: --docs-per-request %u is more "
			"than --docs %u\n", o->per_req, o->docs);
		return 2;
	}
	if (o->rag) {
		o->prefix = g->prefix ? o->prefix : 512;
		o->suffix = g->suffix ? o->suffix : 64;
		o->layout.layers = g->layers ? o->layout.layers : 4;
	}
	*bb = kvs_layout_block_bytes(&o->layout);
	if (*bb == 0) {
		fprintf(stderr, "kvsbench: layout failed: %s\n",
			kvs_strerror(KVS_E_LAYOUT));
		return 1;
	}
	if (((uint64_t)o->prefix + (uint64_t)o->rag * o->per_req * o->doc_tokens +
	     o->suffix) / o->layout.block_tokens > KVS_MAX_HASHES) {
		fprintf(stderr, "kvsbench: share: more than %d blocks per request\n",
			KVS_MAX_HASHES);
		return 2;
	}
	if (o->rag && (uint64_t)o->docs * o->doc_tokens > 1u << 28) {
		fprintf(stderr, "kvsbench: share: the pool (--docs x "
			"--doc-tokens) is over 2^28 tokens\n");
		return 2;
	}
	return -1;
}

/* The reports' slots, and in RAG mode the documents' tokens (made once
 * here, shared with the workers by fork). NULL when out of memory. */
static struct report *share_alloc(struct share_opts *o)
{
	struct report *r = calloc(o->workers, sizeof(*r));

	if (o->rag && r) {
		o->doc_tok = malloc((size_t)o->docs * o->doc_tokens * sizeof(uint32_t));
		for (unsigned d = 0; o->doc_tok && d < o->docs; d++)
			kvsb_tokens(o->doc_tok + (size_t)d * o->doc_tokens,
				    o->doc_tokens, DOC_SEED ^ ((uint64_t)d << 24),
				    VOCAB);
		if (!o->doc_tok) {
			free(r);
			r = NULL;
		}
	}
	if (!r)
		fprintf(stderr, "kvsbench: alloc failed: %s\n",
			kvs_strerror(-ENOMEM));
	return r;
}

/* The phases: RAG all at once, from a cold cache, as a serving fleet;
 * else worker 1 alone, then the others. The number of workers that failed. */
static unsigned share_run(const struct share_opts *o, struct report *r)
{
	unsigned failed;

	if (o->rag)
		return kvsb_share_phase(o, 1, o->workers, r);
	failed = kvsb_share_phase(o, 1, 1, r);
	if (failed && o->workers > 1) {
		fprintf(stderr, "kvsbench: share: worker 1 failed; the "
			"others are not started\n");
		failed = o->workers;
	} else if (o->workers > 1) {
		failed += kvsb_share_phase(o, 2, o->workers, r);
	}
	return failed;
}

static void share_sum(const struct share_opts *o, const struct report *r,
		      struct report *sum)
{
	for (unsigned i = 0; i < o->workers; i++) {
		sum->requests += r[i].requests;
		sum->prompt_tokens += r[i].prompt_tokens;
		sum->lookup_s += r[i].lookup_s;
		sum->write_s += r[i].write_s;
		sum->hit_blocks += r[i].hit_blocks;
		sum->miss_blocks += r[i].miss_blocks;
		sum->verified_bytes += r[i].verified_bytes;
		sum->corrupt_blocks += r[i].corrupt_blocks;
		sum->new_blocks += r[i].new_blocks;
		sum->exists_blocks += r[i].exists_blocks;
		sum->busy_blocks += r[i].busy_blocks;
		sum->full_blocks += r[i].full_blocks;
	}
}

static void share_json(const struct share_opts *o, const struct report *sum,
		       uint64_t bb, double secs, unsigned failed)
{
	printf("{\"bench\":\"share\",\"workers\":%u,\"prefix_tokens\":%u,"
	       "\"suffix_tokens\":%u,\"block_bytes\":%" PRIu64
	       ",\"hit_blocks\":%" PRIu64 ",\"miss_blocks\":%" PRIu64
	       ",\"verified_bytes\":%" PRIu64 ",\"corrupt_blocks\":%" PRIu64
	       ",\"bytes_reused\":%" PRIu64 ",\"seconds\":%.6f"
	       ",\"new_blocks\":%" PRIu64 ",\"exists_blocks\":%" PRIu64
	       ",\"busy_blocks\":%" PRIu64 ",\"full_blocks\":%" PRIu64
	       ",\"failed_workers\":%u}\n",
	       o->workers, o->prefix, o->suffix, bb, sum->hit_blocks,
	       sum->miss_blocks, sum->verified_bytes, sum->corrupt_blocks,
	       sum->hit_blocks * bb, secs, sum->new_blocks, sum->exists_blocks,
	       sum->busy_blocks, sum->full_blocks, failed);
}

int kvsb_cmd_share(const char *sock, int argc, char **argv)
{
	struct share_opts o = {
		.sock = sock, .workers = 4, .prefix = 4096, .suffix = 512,
		.layout = { .model = "kvsbench-model", .layers = 32,
			    .kv_heads = 8, .head_dim = 128, .block_tokens = 16,
			    .tp_rank = 0, .tp_size = 1,
			    .dtype = KVS_DTYPE_FP16 },
		.sorted = 1, .docs = 32, .per_req = 4, .doc_tokens = 256,
		.requests = 32, .seed = 1,
	};
	struct share_given g = { 0 };
	struct report *r, sum = { 0 };
	unsigned failed;
	uint64_t bb = 0;
	double t0, secs;
	int rc = share_parse(&o, &g, argc, argv);

	if (rc < 0)
		rc = share_check(&o, &g, &bb);
	if (rc >= 0)
		return rc;
	if (!o.window)
		o.window = default_window(o.sock, bb);
	r = share_alloc(&o);
	if (!r)
		return 1;
	fflush(stdout); /* nothing buffered may be written twice by the children */
	t0 = now_s();
	failed = share_run(&o, r);
	secs = now_s() - t0;
	share_sum(&o, r, &sum);
	if (o.rag) {
		if (!o.json_only)
			rag_table(&o, r, &sum, bb);
		rag_json(&o, r, &sum, bb, secs, failed);
	} else {
		if (!o.json_only)
			print_table(&o, r, bb);
		share_json(&o, &sum, bb, secs, failed);
	}
	free(r);
	free(o.doc_tok);
	if (failed)
		fprintf(stderr, "kvsbench: share: %u worker(s) failed\n", failed);
	if (sum.corrupt_blocks)
		fprintf(stderr, "kvsbench: share: %" PRIu64 " corrupt block(s)\n",
			sum.corrupt_blocks);
	return failed || sum.corrupt_blocks ? 1 : 0;
}
