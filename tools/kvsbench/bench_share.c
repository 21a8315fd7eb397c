/*
 * bench_share.c - `kvsbench share`: N worker processes with one shared
 * prompt prefix and private suffixes. Worker 1 runs alone and publishes;
 * workers 2..N then run at once and should find the whole shared prefix.
 * Every byte of every hit is checked against a pattern derived from the
 * block's hash, so a hit that serves the wrong KV, or KV scribbled on after
 * commit, is caught and counted.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_proc.h"
#include "bench_share.h"
#include "bench_util.h"
#include "kvshare.h"

#define MAX_WORKERS 1024
#define VOCAB 128256 /* token ids like a Llama-3 tokenizer's */
#define PREFIX_SEED 0x6b7673686172652dull
#define SUFFIX_SEED 0x7375666669782d31ull
#define DOC_SEED 0x646f632d706f6f6cull
#define DRAW_SEED 0x647261772d726e67ull

static uint64_t pattern_seed(kvs_hash h)
{
	return h.lo ^ (h.hi << 23 | h.hi >> 41);
}

/* The expected contents of a block: a function of its hash alone. */
static void pattern_fill(uint8_t *p, uint64_t n, kvs_hash h)
{
	uint64_t s = pattern_seed(h), i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t v = kvsb_splitmix64(&s);
		memcpy(p + i, &v, 8);
	}
	if (i < n) {
		uint64_t v = kvsb_splitmix64(&s);
		memcpy(p + i, &v, n - i);
	}
}

static int pattern_check(const uint8_t *p, uint64_t n, kvs_hash h)
{
	uint64_t s = pattern_seed(h), i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t v = kvsb_splitmix64(&s);
		if (memcmp(p + i, &v, 8))
			return -1;
	}
	if (i < n) {
		uint64_t v = kvsb_splitmix64(&s);
		if (memcmp(p + i, &v, n - i))
			return -1;
	}
	return 0;
}

/* ---- share ---- */

struct share_opts {
	const char *sock;
	unsigned workers, prefix, suffix;
	unsigned window; /* blocks per lookup and per reserve (0: not set) */
	kvs_layout layout;
	int json_only;
	/* RAG mode: each worker issues @requests requests of the prefix, then
	 * @per_req of the @docs documents (@doc_tokens each, @doc_tok[d * T..]),
	 * then a private question of @suffix tokens. */
	int rag, sorted;
	unsigned docs, per_req, doc_tokens, requests;
	uint64_t seed;
	uint32_t *doc_tok;
};

/* One worker's result, copied whole into its slot when the worker ends. */
struct report {
	uint32_t worker;
	int32_t rc;          /* 0, or the error of step `where` */
	char where[16];
	uint64_t requests, prompt_tokens, blocks, hit_blocks, miss_blocks, verified_bytes,
		corrupt_blocks, new_blocks, exists_blocks, busy_blocks,
		full_blocks;
	double lookup_s, write_s;
};

/* Set r->where to @name and pass @rc through: the step that failed. */
static int fail_at(struct report *r, const char *name, int rc)
{
	snprintf(r->where, sizeof(r->where), "%s", name);
	return rc;
}

/* The blocks' expected bytes computed privately (RAG mode's @scratch): the
 * time an engine takes to prefill KV it cannot get from the cache. */
static void compute_privately(uint8_t *scratch, uint64_t bb, const kvs_hash *h,
			      int from, int to)
{
	for (int i = from; scratch && i < to; i++)
		pattern_fill(scratch, bb, h[i]);
}

/*
 * Read the chain h[0..n) window by window: look up h[k..k+W), verify every
 * hit's bytes, release, and go on while the whole window hit. A hash names
 * its whole prefix, so a window is found by its own hashes, and a reader of
 * a chain longer than the host tier pins one window at a time (promoting it
 * from SSD as needed). Returns the number of leading blocks that hit, or an
 * error.
 */
static int read_windows(const struct share_opts *o, kvs_client *c,
			const kvs_hash *h, int n, kvs_block *b, unsigned idx,
			struct report *r)
{
	uint64_t bb = kvs_block_bytes(c);
	int k = 0, rc;

	while (k < n) {
		int len = n - k < (int)o->window ? n - k : (int)o->window, hits;
		kvs_lease lease;

		rc = kvs_lookup(c, h + k, (size_t)len, &lease, b + k);
		if (rc < 0)
			return fail_at(r, "lookup", rc);
		hits = rc;
		for (int i = k; i < k + hits; i++) {
			const uint8_t *p = kvs_block_ptr(c, &b[i]);

			if (!p || pattern_check(p, bb, h[i]) < 0) {
				fprintf(stderr, "kvsbench: worker %u: block %d %s\n",
					idx, i, p ? "corrupt" :
					"not readable in the host tier");
				r->corrupt_blocks++;
			} else {
				r->verified_bytes += bb;
			}
		}
		/* RAG mode sends the release ahead of the next request, as a
		 * worker that issues many requests would; plain share keeps
		 * its round trip. */
		rc = o->rag ? kvs_release_nowait(c, lease) : kvs_release(c, lease);
		if (rc < 0)
			return fail_at(r, "release", rc);
		/* A window cut short ends the read: a miss, or no room to
		 * promote the rest now; either way one lookup per request
		 * when the chain fits in one window, as without windows. */
		k += hits;
		if (hits < len)
			break;
	}
	return k;
}

/*
 * Publish the chain h[0..n) window by window: reserve h[0..end) (always the
 * chain from block 0, as kvs_reserve() requires), write every NEW block of
 * the answer, commit, and move on. The blocks of earlier windows answer
 * EXISTS, or NEW again when they were evicted meanwhile (they are written
 * again, never committed unwritten). Committed blocks can leave host RAM
 * for the SSD tier to make room for the next window, so a chain longer than
 * the host tier goes through. A window cut short by FULL is committed and
 * the next one starts at the first FULL block; FULL with no progress at all
 * (every evictable block is pinned), or BUSY (another writer has the rest),
 * ends the chain: those blocks are counted, not a failure. @hits: the
 * leading blocks the read found. With @scratch (RAG mode) the worker
 * computes the blocks it does not write privately, as an engine must.
 */
static int write_windows(const struct share_opts *o, kvs_client *c,
			 const kvs_hash *h, int n, int hits, kvs_block *b,
			 uint8_t *scratch, struct report *r)
{
	uint64_t bb = kvs_block_bytes(c);
	/* Each round with progress commits a block; evictions by others
	 * can undo that, so the rounds are bounded all the same. */
	int k = 0, rc, rounds = 2 * n + 2;

	while (k < n) {
		int end = n - k < (int)o->window ? n : k + (int)o->window;
		int fresh = 0, stop = end, from;
		kvs_lease lease;

		rc = kvs_reserve(c, h, (size_t)end, &lease, b);
		if (rc == KVS_E_FULL) {
			/* No answer per block: the hits exist, the rest is FULL. */
			from = hits > k ? hits : k;
			r->exists_blocks += (uint64_t)(from - k);
			r->full_blocks += (uint64_t)(n - from);
			compute_privately(scratch, bb, h, from, n);
			return 0;
		}
		if (rc < 0)
			return fail_at(r, "reserve", rc);
		for (int i = 0; i < end && stop == end; i++) {
			uint8_t *p;

			switch (b[i].status) {
			case KVS_BLOCK_NEW:
				p = kvs_block_ptr(c, &b[i]);
				if (!p) {
					kvs_abort(c, lease);
					return fail_at(r, "write", -ERANGE);
				}
				pattern_fill(p, bb, h[i]);
				r->new_blocks++;
				fresh++;
				break;
			case KVS_BLOCK_EXISTS:
				r->exists_blocks += i >= k; /* once per block */
				break;
			default: /* BUSY or FULL: so is the rest of the chain */
				stop = i;
				break;
			}
		}
		if (lease && (rc = kvs_commit(c, lease)) < 0)
			return fail_at(r, "commit", rc);
		if (stop == end) {
			k = end;
			continue;
		}
		if (b[stop].status == KVS_BLOCK_FULL && fresh > 0 && --rounds > 0) {
			k = stop; /* committed blocks can move down now */
			continue;
		}
		from = stop > k ? stop : k;
		if (b[stop].status == KVS_BLOCK_BUSY)
			r->busy_blocks += (uint64_t)(n - from);
		else
			r->full_blocks += (uint64_t)(n - from);
		compute_privately(scratch, bb, h, from, n);
		return 0;
	}
	return 0;
}

/*
 * One request's cache traffic for the chain h[0..n): read it (verifying every
 * hit's bytes), then publish what is missing; both a window at a time.
 * Counts into @r (adding to what is there). BUSY and FULL blocks are only
 * counted: nobody waits for another writer, and a cache with no room left
 * is a figure of the run, not a failure of the worker.
 */
static int share_request(const struct share_opts *o, kvs_client *c,
			 const kvs_hash *h, int n, kvs_block *b, unsigned idx,
			 uint8_t *scratch, struct report *r)
{
	double t0 = now_s();
	int rc, hits;

	r->blocks += (uint64_t)n;
	rc = hits = read_windows(o, c, h, n, b, idx, r);
	if (rc < 0)
		return rc;
	r->hit_blocks += (uint64_t)hits;
	r->miss_blocks += (uint64_t)(n - hits);
	r->lookup_s += now_s() - t0;

	t0 = now_s();
	rc = write_windows(o, c, h, n, hits, b, scratch, r);
	r->write_s += now_s() - t0;
	return rc;
}

static int share_worker(const struct share_opts *o, unsigned idx,
			struct report *r)
{
	size_t ntok = (size_t)o->prefix + o->suffix, nb;
	uint32_t *tok = malloc(ntok * sizeof(*tok) + 1);
	kvs_hash *h = NULL;
	kvs_block *b = NULL;
	kvs_client *c = NULL;
	int rc, n;

	r->worker = idx;
	r->requests = 1;
	if (!tok) {
		rc = fail_at(r, "alloc", -ENOMEM);
		goto out;
	}
	kvsb_tokens(tok, o->prefix, PREFIX_SEED, VOCAB);
	kvsb_tokens(tok + o->prefix, o->suffix,
		    SUFFIX_SEED ^ ((uint64_t)idx << 32), VOCAB);
	r->prompt_tokens = ntok;
	rc = kvs_connect(o->sock, &o->layout, &c);
	if (rc < 0) {
		fail_at(r, "connect", rc);
		goto out;
	}
	nb = ntok / o->layout.block_tokens;
	h = calloc(nb + 1, sizeof(*h));
	b = calloc(nb + 1, sizeof(*b));
	if (!h || !b) {
		rc = fail_at(r, "alloc", -ENOMEM);
		goto out;
	}
	rc = n = kvs_hash_tokens(c, tok, ntok, h, nb);
	if (rc < 0) {
		fail_at(r, "hash", rc);
		goto out;
	}
	rc = share_request(o, c, h, n, b, idx, NULL, r);
out:
	if (rc < 0)
		fprintf(stderr, "kvsbench: worker %u: %s failed: %s\n", idx,
			r->where, kvs_strerror(rc));
	r->rc = rc < 0 ? rc : 0;
	kvs_close(c);
	free(tok);
	free(h);
	free(b);
	return r->rc;
}

static int cmp_unsigned(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;

	return (x > y) - (x < y);
}

/*
 * RAG mode: @o->requests requests on one connection. The k documents of a
 * request are a uniform random subset of the pool (a partial Fisher-Yates
 * shuffle of a permutation the worker keeps), drawn from a stream that
 * depends only on --seed and the worker, so that --order sorted and random
 * see the same subsets, in a different order.
 */
static int rag_worker(const struct share_opts *o, unsigned idx,
		      struct report *r)
{
	size_t ntok = (size_t)o->prefix + (size_t)o->per_req * o->doc_tokens +
		      o->suffix, nb = ntok / o->layout.block_tokens;
	uint32_t *tok = malloc(ntok * sizeof(*tok) + 1);
	unsigned *perm = malloc(o->docs * sizeof(*perm));
	unsigned *pick = malloc(o->per_req * sizeof(*pick));
	kvs_hash *h = calloc(nb + 1, sizeof(*h));
	kvs_block *b = calloc(nb + 1, sizeof(*b));
	uint64_t draw = DRAW_SEED ^ o->seed ^ ((uint64_t)idx << 40);
	uint8_t *scratch = malloc(kvs_layout_block_bytes(&o->layout));
	kvs_client *c = NULL;
	int rc = 0, n;

	r->worker = idx;
	if (!tok || !perm || !pick || !h || !b || !scratch) {
		rc = fail_at(r, "alloc", -ENOMEM);
		goto out;
	}
	rc = kvs_connect(o->sock, &o->layout, &c);
	if (rc < 0) {
		fail_at(r, "connect", rc);
		goto out;
	}
	kvsb_tokens(tok, o->prefix, PREFIX_SEED, VOCAB);
	for (unsigned d = 0; d < o->docs; d++)
		perm[d] = d;
	for (unsigned q = 0; q < o->requests && rc >= 0; q++) {
		uint32_t *t = tok + o->prefix;

		for (unsigned j = 0; j < o->per_req; j++) {
			unsigned k = j + (unsigned)(kvsb_splitmix64(&draw) %
						   (o->docs - j)), x = perm[j];

			perm[j] = perm[k];
			perm[k] = x;
			pick[j] = perm[j];
		}
		if (o->sorted)
			qsort(pick, o->per_req, sizeof(*pick), cmp_unsigned);
		for (unsigned j = 0; j < o->per_req; j++, t += o->doc_tokens)
			memcpy(t, o->doc_tok + (size_t)pick[j] * o->doc_tokens,
			       o->doc_tokens * sizeof(*t));
		kvsb_tokens(t, o->suffix, SUFFIX_SEED ^ o->seed ^
			    ((uint64_t)idx << 32) ^ ((uint64_t)q << 8), VOCAB);
		rc = n = kvs_hash_tokens(c, tok, ntok, h, nb);
		if (rc < 0) {
			fail_at(r, "hash", rc);
			break;
		}
		rc = share_request(o, c, h, n, b, idx, scratch, r);
		r->requests++;
		r->prompt_tokens += ntok;
	}
out:
	if (rc < 0)
		fprintf(stderr, "kvsbench: worker %u: %s failed: %s\n", idx,
			r->where, kvs_strerror(rc));
	r->rc = rc < 0 ? rc : 0;
	kvs_close(c);
	free(tok);
	free(perm);
	free(pick);
	free(scratch);
	free(h);
	free(b);
	return r->rc;
}

/* The workers of one phase: worker first + idx, reporting into its slot. */
struct phase {
	const struct share_opts *o;
	unsigned first;
};

static int phase_worker(const void *vctx, unsigned idx, kvsb_gate *g,
			void *vres)
{
	const struct phase *p = vctx;
	struct report mine = { 0 };
	int rc;

	kvsb_gate_wait(g); /* nothing to set up: the whole worker is the run */
	if (p->o->rag)
		rc = rag_worker(p->o, p->first + idx, &mine);
	else
		rc = share_worker(p->o, p->first + idx, &mine);
	/* Whole or not at all: a worker that dies early leaves no report. */
	memcpy(vres, &mine, sizeof(mine));
	return rc;
}

/* Fork workers [first, last], collect their reports into r[], wait for all.
 * Returns the number of workers that failed (no report or a bad exit). */
static unsigned run_phase(const struct share_opts *o, unsigned first,
			  unsigned last, struct report *r)
{
	struct phase p = { o, first };
	unsigned n = last - first + 1;
	int failed = kvsb_clients_run(n, phase_worker, &p, r + first - 1,
				      sizeof(*r));

	if (failed < 0) {
		fprintf(stderr, "kvsbench: share: starting workers failed: %s\n",
			strerror(-failed));
		return n;
	}
	return (unsigned)failed;
}

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
	static const struct { const char *name; kvs_dtype d; } t[] = {
		{ "fp16", KVS_DTYPE_FP16 }, { "bf16", KVS_DTYPE_BF16 },
		{ "fp32", KVS_DTYPE_FP32 }, { "fp8", KVS_DTYPE_FP8_E4M3 },
		{ "int8", KVS_DTYPE_INT8 }, { "int4", KVS_DTYPE_INT4 },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (!strcmp(s, t[i].name)) {
			*out = t[i].d;
			return 0;
		}
	}
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

int kvsb_cmd_share(const char *sock, int argc, char **argv)
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
	struct share_opts o = {
		.sock = sock, .workers = 4, .prefix = 4096, .suffix = 512,
		.layout = { .model = "kvsbench-model", .layers = 32,
			    .kv_heads = 8, .head_dim = 128, .block_tokens = 16,
			    .tp_rank = 0, .tp_size = 1,
			    .dtype = KVS_DTYPE_FP16 },
		.sorted = 1, .docs = 32, .per_req = 4, .doc_tokens = 256,
		.requests = 32, .seed = 1,
	};
	/* Which options were given: RAG mode has its own defaults for the
	 * others, and RAG options without --rag are a usage error. */
	int set_prefix = 0, set_suffix = 0, set_layers = 0, rag_opts = 0;
	struct report *r, sum = { 0 };
	unsigned failed, ntok_max = 1u << 24;
	uint64_t bb;
	double t0, secs;
	int opt, bad = 0;

	while ((opt = getopt_long(argc, argv, "w:p:u:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'w': bad |= kvsb_parse_uint("workers", optarg, 1, MAX_WORKERS, &o.workers); break;
		case 'p': set_prefix = 1; bad |= kvsb_parse_uint("prefix-tokens", optarg, 0, ntok_max, &o.prefix); break;
		case 'u': set_suffix = 1; bad |= kvsb_parse_uint("suffix-tokens", optarg, 0, ntok_max, &o.suffix); break;
		case O_LAYERS: set_layers = 1; bad |= kvsb_parse_uint("layers", optarg, 1, 1u << 16, &o.layout.layers); break;
		case O_HEADS: bad |= kvsb_parse_uint("kv-heads", optarg, 1, 1u << 16, &o.layout.kv_heads); break;
		case O_DIM: bad |= kvsb_parse_uint("head-dim", optarg, 1, 1u << 16, &o.layout.head_dim); break;
		case O_BT: bad |= kvsb_parse_uint("block-tokens", optarg, 1, 1u << 16, &o.layout.block_tokens); break;
		case O_DTYPE: bad |= parse_dtype(optarg, &o.layout.dtype); break;
		case O_MODEL: o.layout.model = optarg; break;
		case O_SALT: o.layout.salt = optarg; break;
		case O_JSON: o.json_only = 1; break;
		case O_WINDOW: bad |= kvsb_parse_uint("window", optarg, 1, KVS_MAX_HASHES, &o.window); break;
		case O_RAG: o.rag = 1; break;
		case O_DOCS: rag_opts = 1; bad |= kvsb_parse_uint("docs", optarg, 1, 1u << 20, &o.docs); break;
		case O_PER: rag_opts = 1; bad |= kvsb_parse_uint("docs-per-request", optarg, 1, 1u << 16, &o.per_req); break;
		case O_DOCTOK: rag_opts = 1; bad |= kvsb_parse_uint("doc-tokens", optarg, 1, ntok_max, &o.doc_tokens); break;
		case O_REQS: rag_opts = 1; bad |= kvsb_parse_uint("requests", optarg, 1, 1u << 24, &o.requests); break;
		case O_SEED: rag_opts = 1; bad |= parse_u64("seed", optarg, &o.seed); break;
		case O_ORDER:
			rag_opts = 1;
			if (!strcmp(optarg, "sorted") || !strcmp(optarg, "random")) {
				o.sorted = optarg[0] == 's';
			} else {
				fprintf(stderr, "kvsbench: --order: '%s' is not sorted or random\n", optarg);
				bad = 1;
			}
			break;
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
	if (rag_opts && !o.rag) {
		fprintf(stderr, "kvsbench: share: --docs, --docs-per-request, "
			"--doc-tokens, --requests, --order and --seed need --rag\n");
		return 2;
	}
	if (o.rag && o.per_req > o.docs) {
		fprintf(stderr, "kvsbench: share: --docs-per-request %u is more "
			"than --docs %u\n", o.per_req, o.docs);
		return 2;
	}
	if (o.rag) {
		o.prefix = set_prefix ? o.prefix : 512;
		o.suffix = set_suffix ? o.suffix : 64;
		o.layout.layers = set_layers ? o.layout.layers : 4;
	}
	bb = kvs_layout_block_bytes(&o.layout);
	if (bb == 0) {
		fprintf(stderr, "kvsbench: layout failed: %s\n",
			kvs_strerror(KVS_E_LAYOUT));
		return 1;
	}
	if (((uint64_t)o.prefix + (uint64_t)o.rag * o.per_req * o.doc_tokens +
	     o.suffix) / o.layout.block_tokens > KVS_MAX_HASHES) {
		fprintf(stderr, "kvsbench: share: more than %d blocks per request\n",
			KVS_MAX_HASHES);
		return 2;
	}
	if (o.rag && (uint64_t)o.docs * o.doc_tokens > 1u << 28) {
		fprintf(stderr, "kvsbench: share: the pool (--docs x "
			"--doc-tokens) is over 2^28 tokens\n");
		return 2;
	}
	if (!o.window)
		o.window = default_window(o.sock, bb);
	r = calloc(o.workers, sizeof(*r));
	if (o.rag && r) {
		/* Made once here, shared with the workers by fork. */
		o.doc_tok = malloc((size_t)o.docs * o.doc_tokens * sizeof(uint32_t));
		for (unsigned d = 0; o.doc_tok && d < o.docs; d++)
			kvsb_tokens(o.doc_tok + (size_t)d * o.doc_tokens,
				    o.doc_tokens, DOC_SEED ^ ((uint64_t)d << 24),
				    VOCAB);
		if (!o.doc_tok) {
			free(r);
			r = NULL;
		}
	}
	if (!r) {
		fprintf(stderr, "kvsbench: alloc failed: %s\n",
			kvs_strerror(-ENOMEM));
		return 1;
	}
	fflush(stdout); /* nothing buffered may be written twice by the children */
	t0 = now_s();
	if (o.rag) {
		/* RAG: all at once, from a cold cache, as a serving fleet. */
		failed = run_phase(&o, 1, o.workers, r);
	} else {
		failed = run_phase(&o, 1, 1, r);
		if (failed && o.workers > 1) {
			fprintf(stderr, "kvsbench: share: worker 1 failed; the "
				"others are not started\n");
			failed = o.workers;
		} else if (o.workers > 1) {
			failed += run_phase(&o, 2, o.workers, r);
		}
	}
	secs = now_s() - t0;

	for (unsigned i = 0; i < o.workers; i++) {
		sum.requests += r[i].requests;
		sum.prompt_tokens += r[i].prompt_tokens;
		sum.lookup_s += r[i].lookup_s;
		sum.write_s += r[i].write_s;
		sum.hit_blocks += r[i].hit_blocks;
		sum.miss_blocks += r[i].miss_blocks;
		sum.verified_bytes += r[i].verified_bytes;
		sum.corrupt_blocks += r[i].corrupt_blocks;
		sum.new_blocks += r[i].new_blocks;
		sum.exists_blocks += r[i].exists_blocks;
		sum.busy_blocks += r[i].busy_blocks;
		sum.full_blocks += r[i].full_blocks;
	}
	if (o.rag) {
		if (!o.json_only)
			rag_table(&o, r, &sum, bb);
		rag_json(&o, r, &sum, bb, secs, failed);
		goto done;
	}
	if (!o.json_only)
		print_table(&o, r, bb);
	printf("{\"bench\":\"share\",\"workers\":%u,\"prefix_tokens\":%u,"
	       "\"suffix_tokens\":%u,\"block_bytes\":%" PRIu64
	       ",\"hit_blocks\":%" PRIu64 ",\"miss_blocks\":%" PRIu64
	       ",\"verified_bytes\":%" PRIu64 ",\"corrupt_blocks\":%" PRIu64
	       ",\"bytes_reused\":%" PRIu64 ",\"seconds\":%.6f"
	       ",\"new_blocks\":%" PRIu64 ",\"exists_blocks\":%" PRIu64
	       ",\"busy_blocks\":%" PRIu64 ",\"full_blocks\":%" PRIu64
	       ",\"failed_workers\":%u}\n",
	       o.workers, o.prefix, o.suffix, bb, sum.hit_blocks,
	       sum.miss_blocks, sum.verified_bytes, sum.corrupt_blocks,
	       sum.hit_blocks * bb, secs, sum.new_blocks, sum.exists_blocks,
	       sum.busy_blocks, sum.full_blocks, failed);
done:
	free(r);
	free(o.doc_tok);
	if (failed)
		fprintf(stderr, "kvsbench: share: %u worker(s) failed\n", failed);
	if (sum.corrupt_blocks)
		fprintf(stderr, "kvsbench: share: %" PRIu64 " corrupt block(s)\n",
			sum.corrupt_blocks);
	return failed || sum.corrupt_blocks ? 1 : 0;
}
