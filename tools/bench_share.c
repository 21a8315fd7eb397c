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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_share.h"
#include "kvshare.h"

#define MAX_WORKERS 1024
#define VOCAB 128256 /* token ids like a Llama-3 tokenizer's */
#define PREFIX_SEED 0x6b7673686172652dull
#define SUFFIX_SEED 0x7375666669782d31ull

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t pattern_seed(kvs_hash h)
{
	return h.lo ^ (h.hi << 23 | h.hi >> 41);
}

/* The expected contents of a block: a function of its hash alone. */
static void pattern_fill(uint8_t *p, uint64_t n, kvs_hash h)
{
	uint64_t s = pattern_seed(h), i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t v = splitmix64(&s);
		memcpy(p + i, &v, 8);
	}
	if (i < n) {
		uint64_t v = splitmix64(&s);
		memcpy(p + i, &v, n - i);
	}
}

static int pattern_check(const uint8_t *p, uint64_t n, kvs_hash h)
{
	uint64_t s = pattern_seed(h), i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t v = splitmix64(&s);
		if (memcmp(p + i, &v, 8))
			return -1;
	}
	if (i < n) {
		uint64_t v = splitmix64(&s);
		if (memcmp(p + i, &v, n - i))
			return -1;
	}
	return 0;
}

/* ---- share ---- */

struct share_opts {
	const char *sock;
	unsigned workers, prefix, suffix;
	kvs_layout layout;
	int json_only;
};

/* One worker's result, sent whole through the pipe (< PIPE_BUF: atomic). */
struct report {
	uint32_t worker;
	int32_t rc;          /* 0, or the error of step `where` */
	char where[16];
	uint64_t blocks, hit_blocks, miss_blocks, verified_bytes,
		corrupt_blocks, new_blocks, exists_blocks, busy_blocks,
		full_blocks;
	double lookup_s, write_s;
};

static void make_tokens(uint32_t *t, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		t[i] = (uint32_t)(splitmix64(&seed) % VOCAB);
}

static int share_worker(const struct share_opts *o, unsigned idx,
			struct report *r)
{
	size_t ntok = (size_t)o->prefix + o->suffix, nb;
	uint32_t *tok = malloc(ntok * sizeof(*tok) + 1);
	kvs_hash *h = NULL;
	kvs_block *b = NULL;
	kvs_client *c = NULL;
	kvs_lease lease;
	uint64_t bb;
	double t0;
	int rc, n;

	r->worker = idx;
#define STEP(name, expr)                                                      \
	do {                                                                  \
		rc = (expr);                                                  \
		if (rc < 0) {                                                 \
			snprintf(r->where, sizeof(r->where), "%s", name);     \
			goto out;                                             \
		}                                                             \
	} while (0)
	STEP("alloc", tok ? 0 : -ENOMEM);
	make_tokens(tok, o->prefix, PREFIX_SEED);
	make_tokens(tok + o->prefix, o->suffix, SUFFIX_SEED ^ ((uint64_t)idx << 32));
	STEP("connect", kvs_connect(o->sock, &o->layout, &c));
	bb = kvs_block_bytes(c);
	nb = ntok / o->layout.block_tokens;
	h = calloc(nb + 1, sizeof(*h));
	b = calloc(nb + 1, sizeof(*b));
	STEP("alloc", h && b ? 0 : -ENOMEM);
	STEP("hash", n = kvs_hash_tokens(c, tok, ntok, h, nb));
	r->blocks = (uint64_t)n;

	t0 = now();
	STEP("lookup", kvs_lookup(c, h, (size_t)n, &lease, b));
	r->hit_blocks = (uint64_t)rc;
	r->miss_blocks = (uint64_t)(n - rc);
	for (int i = 0; i < rc; i++) {
		const uint8_t *p = kvs_block_ptr(c, &b[i]);

		if (!p || pattern_check(p, bb, h[i]) < 0) {
			fprintf(stderr, "kvsbench: worker %u: block %d %s\n", idx,
				i, p ? "corrupt" : "not readable in the host tier");
			r->corrupt_blocks++;
		} else {
			r->verified_bytes += bb;
		}
	}
	STEP("release", kvs_release(c, lease));
	r->lookup_s = now() - t0;

	t0 = now();
	STEP("reserve", kvs_reserve(c, h, (size_t)n, &lease, b));
	for (int i = 0; i < n; i++) {
		uint8_t *p;

		switch (b[i].status) {
		case KVS_BLOCK_NEW:
			p = kvs_block_ptr(c, &b[i]);
			STEP("write", p ? 0 : -ERANGE);
			pattern_fill(p, bb, h[i]);
			r->new_blocks++;
			break;
		case KVS_BLOCK_EXISTS:
			r->exists_blocks++;
			break;
		case KVS_BLOCK_BUSY:
			r->busy_blocks++;
			break;
		default:
			r->full_blocks++;
			break;
		}
	}
	if (lease)
		STEP("commit", kvs_commit(c, lease));
	r->write_s = now() - t0;
	rc = 0;
#undef STEP
out:
	if (rc < 0)
		fprintf(stderr, "kvsbench: worker %u: %s failed: %s\n", idx,
			r->where, kvs_strerror(rc));
	r->rc = rc;
	kvs_close(c);
	free(tok);
	free(h);
	free(b);
	return rc;
}

/* Fork workers [first, last], collect their reports into r[], wait for all.
 * Returns the number of workers that failed (no report or a bad exit). */
static unsigned run_phase(const struct share_opts *o, unsigned first,
			  unsigned last, struct report *r)
{
	int pfd[2];
	unsigned failed = 0, got = 0;
	struct report in;
	ssize_t nr;

	if (pipe(pfd) < 0) {
		fprintf(stderr, "kvsbench: pipe failed: %s\n", strerror(errno));
		return last - first + 1;
	}
	for (unsigned i = first; i <= last; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			fprintf(stderr, "kvsbench: fork failed: %s\n",
				strerror(errno));
			failed++;
			continue;
		}
		if (pid == 0) {
			struct report mine = { 0 };

			close(pfd[0]);
			share_worker(o, i, &mine);
			if (write(pfd[1], &mine, sizeof(mine)) != sizeof(mine))
				_exit(2);
			_exit(mine.rc < 0 ? 1 : 0);
		}
	}
	close(pfd[1]);
	/* Read while the workers run, so that none blocks on a full pipe. */
	while ((nr = read(pfd[0], &in, sizeof(in))) != 0) {
		if (nr < 0 && errno == EINTR)
			continue;
		if (nr != (ssize_t)sizeof(in) || in.worker < first ||
		    in.worker > last)
			break;
		r[in.worker - 1] = in;
		got++;
	}
	close(pfd[0]);
	for (;;) {
		int status;
		pid_t p = wait(&status);

		if (p < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	/* A worker that exited 0 without a whole report failed too. */
	if (failed < last - first + 1 - got)
		failed = last - first + 1 - got;
	return failed;
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
		"      --dtype T          fp16|bf16|fp32|fp8|int8 (default fp16)\n"
		"      --block-tokens B   (default 16)\n"
		"      --model NAME       (default kvsbench-model)\n"
		"      --salt S           tenant salt (default none)\n"
		"      --json-only        print only the JSON summary line\n");
}

static int parse_uint(const char *opt, const char *s, unsigned min,
		      unsigned max, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max) {
		fprintf(stderr, "kvsbench: --%s: '%s' is not a number in %u..%u\n",
			opt, s, min, max);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

static int parse_dtype(const char *s, kvs_dtype *out)
{
	static const struct { const char *name; kvs_dtype d; } t[] = {
		{ "fp16", KVS_DTYPE_FP16 }, { "bf16", KVS_DTYPE_BF16 },
		{ "fp32", KVS_DTYPE_FP32 }, { "fp8", KVS_DTYPE_FP8_E4M3 },
		{ "int8", KVS_DTYPE_INT8 },
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

int kvsb_cmd_share(const char *sock, int argc, char **argv)
{
	enum { O_LAYERS = 256, O_HEADS, O_DIM, O_DTYPE, O_BT, O_MODEL, O_SALT,
	       O_JSON };
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
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct share_opts o = {
		.sock = sock, .workers = 4, .prefix = 4096, .suffix = 512,
		.layout = { .model = "kvsbench-model", .layers = 32,
			    .kv_heads = 8, .head_dim = 128, .block_tokens = 16,
			    .tp_rank = 0, .tp_size = 1,
			    .dtype = KVS_DTYPE_FP16 },
	};
	struct report *r, sum = { 0 };
	unsigned failed, ntok_max = 1u << 24;
	uint64_t bb;
	double t0, secs;
	int opt, bad = 0;

	while ((opt = getopt_long(argc, argv, "w:p:u:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'w': bad |= parse_uint("workers", optarg, 1, MAX_WORKERS, &o.workers); break;
		case 'p': bad |= parse_uint("prefix-tokens", optarg, 0, ntok_max, &o.prefix); break;
		case 'u': bad |= parse_uint("suffix-tokens", optarg, 0, ntok_max, &o.suffix); break;
		case O_LAYERS: bad |= parse_uint("layers", optarg, 1, 1u << 16, &o.layout.layers); break;
		case O_HEADS: bad |= parse_uint("kv-heads", optarg, 1, 1u << 16, &o.layout.kv_heads); break;
		case O_DIM: bad |= parse_uint("head-dim", optarg, 1, 1u << 16, &o.layout.head_dim); break;
		case O_BT: bad |= parse_uint("block-tokens", optarg, 1, 1u << 16, &o.layout.block_tokens); break;
		case O_DTYPE: bad |= parse_dtype(optarg, &o.layout.dtype); break;
		case O_MODEL: o.layout.model = optarg; break;
		case O_SALT: o.layout.salt = optarg; break;
		case O_JSON: o.json_only = 1; break;
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
	bb = kvs_layout_block_bytes(&o.layout);
	if (bb == 0) {
		fprintf(stderr, "kvsbench: layout failed: %s\n",
			kvs_strerror(KVS_E_LAYOUT));
		return 1;
	}
	if (((uint64_t)o.prefix + o.suffix) / o.layout.block_tokens > KVS_MAX_HASHES) {
		fprintf(stderr, "kvsbench: share: more than %d blocks per request\n",
			KVS_MAX_HASHES);
		return 2;
	}
	r = calloc(o.workers, sizeof(*r));
	if (!r) {
		fprintf(stderr, "kvsbench: alloc failed: %s\n",
			kvs_strerror(-ENOMEM));
		return 1;
	}
	fflush(stdout); /* nothing buffered may be written twice by the children */
	t0 = now();
	failed = run_phase(&o, 1, 1, r);
	if (failed && o.workers > 1) {
		fprintf(stderr, "kvsbench: share: worker 1 failed; the others "
			"are not started\n");
		failed = o.workers;
	} else if (o.workers > 1) {
		failed += run_phase(&o, 2, o.workers, r);
	}
	secs = now() - t0;

	for (unsigned i = 0; i < o.workers; i++) {
		sum.hit_blocks += r[i].hit_blocks;
		sum.miss_blocks += r[i].miss_blocks;
		sum.verified_bytes += r[i].verified_bytes;
		sum.corrupt_blocks += r[i].corrupt_blocks;
		sum.new_blocks += r[i].new_blocks;
		sum.exists_blocks += r[i].exists_blocks;
		sum.busy_blocks += r[i].busy_blocks;
		sum.full_blocks += r[i].full_blocks;
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
	free(r);
	if (failed)
		fprintf(stderr, "kvsbench: share: %u worker(s) failed\n", failed);
	if (sum.corrupt_blocks)
		fprintf(stderr, "kvsbench: share: %" PRIu64 " corrupt block(s)\n",
			sum.corrupt_blocks);
	return failed || sum.corrupt_blocks ? 1 : 0;
}
