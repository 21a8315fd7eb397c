/*
 * bench_ops.c - kvsbench ops (contract in bench_ops.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_ops.h"
#include "bench_proc.h"
#include "bench_redis.h"
#include "bench_util.h"
#include "kvshare.h"

#define OPS_MAX_CLIENTS 256
#define OPS_MAX_REPS KVSB_MEDIAN_MAX
#define OPS_TOKEN_SEED 0x6f70732d7072656full
#define OPS_VOCAB 128256

/* ---- time and statistics ------------------------------------------------- */

/* Log-linear latency histogram in ns: 16 buckets per power of two, so a
 * percentile is within ~6% of the true value; merging children is a sum. */
#define HIST_SUB 16
#define HIST_BUCKETS (64 * HIST_SUB)

static unsigned hist_index(uint64_t v)
{
	unsigned e;

	if (v < HIST_SUB)
		return (unsigned)v;
	e = 63u - (unsigned)__builtin_clzll(v);
	return (e - 3) * HIST_SUB + (unsigned)((v >> (e - 4)) & (HIST_SUB - 1));
}

static double hist_value(unsigned i)
{
	unsigned e, sub;

	if (i < HIST_SUB)
		return i;
	e = i / HIST_SUB + 3;
	sub = i % HIST_SUB;
	/* the bucket's middle */
	return (double)((uint64_t)(HIST_SUB + sub) << (e - 4)) +
	       (double)(1ull << (e - 4)) / 2;
}

static double hist_quantile(const uint64_t *h, double q)
{
	uint64_t n = 0, want, seen = 0;

	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		n += h[i];
	if (n == 0)
		return 0;
	want = (uint64_t)(q * (double)n);
	if (want < 1)
		want = 1;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h[i];
		if (seen >= want)
			return hist_value(i);
	}
	return hist_value(HIST_BUCKETS - 1);
}

/* ---- ops ----------------------------------------------------------------- */

/* The systems compared: kvshare's fast path (the default client), its
 * socket path (KVS_CONNECT_NO_FASTPATH), Redis MGET. */
enum { SYS_FAST, SYS_SOCKET, SYS_REDIS, SYS_N };
static const char *const sys_name[SYS_N] = { "fast", "socket", "redis" };

struct ops_opts {
	const char *sock;
	unsigned clients, blocks, reps, value_bytes;
	double seconds;
	int json;
	int run[SYS_N]; /* which systems run (--path) */
};

/* A client's result, in memory shared with the parent. */
struct ops_res {
	uint64_t ops;
	double secs;
	uint64_t hist[HIST_BUCKETS];
};

struct ops_ctx {
	const struct ops_opts *o;
	const char *sock;        /* kvshared's */
	const char *redis_sock;
	kvs_layout layout;
	kvs_hash *hashes;        /* the cached prefix, K blocks */
	const char **mget_argv;  /* "MGET" key1 .. keyK */
	uint32_t connect_flags;  /* of ours_client: KVS_CONNECT_NO_FASTPATH */
};

static int ours_client(const void *vctx, unsigned idx, kvsb_gate *g,
		       void *vres)
{
	const struct ops_ctx *x = vctx;
	struct ops_res *res = vres;
	unsigned k = x->o->blocks;
	kvs_block *b = calloc(k, sizeof(*b));
	kvs_client *c = NULL;
	kvs_lease lease;
	uint64_t t, t1, end;
	char who[32];
	double t0;
	int rc;

	snprintf(who, sizeof(who), "client %u: ", idx + 1);
	KVSB_STEP(who, "alloc", b ? 0 : -ENOMEM);
	KVSB_STEP(who, "connect", kvs_connect_flags(x->sock, &x->layout,
						    x->connect_flags, &c));
	/* one untimed round, so that the first timed one is not a cold one */
	KVSB_STEP(who, "lookup", kvs_lookup(c, x->hashes, k, &lease, b));
	KVSB_STEP(who, "release", kvs_release(c, lease));
	kvsb_gate_wait(g);
	t0 = now_s();
	end = now_ns() + (uint64_t)(x->o->seconds * 1e9);
	for (t = now_ns(); t < end; t = t1) {
		KVSB_STEP(who, "lookup", kvs_lookup(c, x->hashes, k, &lease, b));
		if ((unsigned)rc != k) {
			fprintf(stderr, "kvsbench: client %u: lookup hit %d of "
				"%u blocks (evicted?)\n", idx + 1, rc, k);
			rc = KVS_E_INTERNAL;
			goto out;
		}
		/* As a worker would: the release rides ahead of the next
		 * lookup instead of costing a round trip of its own. */
		KVSB_STEP(who, "release", kvs_release_nowait(c, lease));
		t1 = now_ns();
		res->hist[hist_index(t1 - t)]++;
		res->ops++;
	}
	res->secs = now_s() - t0;
	rc = 0;
out:
	kvs_close(c);
	free(b);
	return rc;
}

/* One MGET of the K keys; every value must come back whole. */
static int redis_mget(kvsb_resp *r, const struct ops_ctx *x)
{
	kvsb_reply *rep;
	int rc = kvsb_resp_command(r, (int)x->o->blocks + 1, x->mget_argv,
				   NULL, &rep);

	if (rc < 0)
		return rc;
	if (rep->type != KVSB_REPLY_ARRAY || rep->nelem != x->o->blocks)
		rc = -EPROTO;
	for (size_t i = 0; rc == 0 && i < rep->nelem; i++) {
		if (rep->elem[i].type != KVSB_REPLY_BULK ||
		    rep->elem[i].len != x->o->value_bytes)
			rc = -EPROTO;
	}
	kvsb_reply_free(rep);
	return rc;
}

static int redis_client(const void *vctx, unsigned idx, kvsb_gate *g,
			void *vres)
{
	const struct ops_ctx *x = vctx;
	struct ops_res *res = vres;
	kvsb_resp *r = NULL;
	uint64_t t, t1, end;
	char who[32];
	double t0;
	int rc;

	snprintf(who, sizeof(who), "client %u: ", idx + 1);
	KVSB_STEP(who, "redis connect", kvsb_resp_connect(x->redis_sock, &r));
	KVSB_STEP(who, "MGET", redis_mget(r, x));
	kvsb_gate_wait(g);
	t0 = now_s();
	end = now_ns() + (uint64_t)(x->o->seconds * 1e9);
	for (t = now_ns(); t < end; t = t1) {
		KVSB_STEP(who, "MGET", redis_mget(r, x));
		t1 = now_ns();
		res->hist[hist_index(t1 - t)]++;
		res->ops++;
	}
	res->secs = now_s() - t0;
	rc = 0;
out:
	kvsb_resp_close(r);
	return rc;
}

/* One system's figures for one repetition. */
struct ops_row {
	double ops_s, p50_us, p99_us;
};

static int measure(const struct ops_ctx *x, kvsb_client_fn fn,
		   struct ops_res *res, uint64_t *hist, struct ops_row *row)
{
	unsigned n = x->o->clients;
	int failed;

	memset(res, 0, n * sizeof(*res));
	failed = kvsb_clients_run(n, fn, x, res, sizeof(*res));
	if (failed != 0)
		return failed < 0 ? failed : KVS_E_INTERNAL;
	memset(hist, 0, HIST_BUCKETS * sizeof(*hist));
	row->ops_s = 0;
	for (unsigned i = 0; i < n; i++) {
		if (res[i].secs > 0)
			row->ops_s += (double)res[i].ops / res[i].secs;
		for (unsigned j = 0; j < HIST_BUCKETS; j++)
			hist[j] += res[i].hist[j];
	}
	row->p50_us = hist_quantile(hist, 0.50) / 1e3;
	row->p99_us = hist_quantile(hist, 0.99) / 1e3;
	return 0;
}

/* Publish the K-block prefix that every client will look up. */
static int ops_setup_ours(struct ops_ctx *x)
{
	size_t ntok = (size_t)x->o->blocks * x->layout.block_tokens;
	uint32_t *tok = malloc(ntok * sizeof(*tok));
	kvs_block *b = calloc(x->o->blocks, sizeof(*b));
	uint64_t seed = OPS_TOKEN_SEED, bb;
	const char *who = "ops: ";
	kvs_client *c = NULL;
	kvs_lease lease;
	int rc;

	KVSB_STEP(who, "alloc", tok && b ? 0 : -ENOMEM);
	kvsb_tokens(tok, ntok, seed, OPS_VOCAB);
	KVSB_STEP(who, "connect", kvs_connect(x->sock, &x->layout, &c));
	bb = kvs_block_bytes(c);
	KVSB_STEP(who, "hash", kvs_hash_tokens(c, tok, ntok, x->hashes,
					  x->o->blocks));
	KVSB_STEP(who, "reserve", kvs_reserve(c, x->hashes, x->o->blocks, &lease, b));
	for (unsigned i = 0; i < x->o->blocks; i++) {
		void *p = kvs_block_ptr(c, &b[i]);

		if (b[i].status == KVS_BLOCK_NEW && p)
			memset(p, (int)i, bb);
		else if (b[i].status != KVS_BLOCK_EXISTS)
			KVSB_STEP(who, "reserve (no room for the prefix)", KVS_E_FULL);
	}
	KVSB_STEP(who, "commit", kvs_commit(c, lease));
	KVSB_STEP(who, "lookup", kvs_lookup(c, x->hashes, x->o->blocks, &lease, b));
	if ((unsigned)rc != x->o->blocks)
		KVSB_STEP(who, "lookup (the prefix is not cached)", KVS_E_INTERNAL);
	KVSB_STEP(who, "release", kvs_release(c, lease));
	rc = 0;
out:
	kvs_close(c);
	free(tok);
	free(b);
	return rc;
}

/* The same K blocks in Redis: keys named by the block hashes, as LMCache
 * names its chunks, with values of V bytes. */
static int ops_setup_redis(struct ops_ctx *x, char **keybuf)
{
	unsigned k = x->o->blocks;
	char *value = malloc(x->o->value_bytes);
	const char *who = "ops: redis ";
	kvsb_resp *r = NULL;
	kvsb_reply *rep;
	int rc;

	*keybuf = malloc((size_t)k * 48);
	x->mget_argv = calloc(k + 1, sizeof(*x->mget_argv));
	KVSB_STEP(who, "alloc", value && *keybuf && x->mget_argv ? 0 : -ENOMEM);
	memset(value, 'v', x->o->value_bytes);
	x->mget_argv[0] = "MGET";
	KVSB_STEP(who, "connect", kvsb_resp_connect(x->redis_sock, &r));
	for (unsigned i = 0; i < k; i++) {
		char *key = *keybuf + (size_t)i * 48;
		const char *argv[3] = { "SET", key, value };
		size_t len[3] = { 3, 0, x->o->value_bytes };

		snprintf(key, 48, "kvs:%016" PRIx64 "%016" PRIx64,
			 x->hashes[i].hi, x->hashes[i].lo);
		len[1] = strlen(key);
		x->mget_argv[i + 1] = key;
		KVSB_STEP(who, "SET", kvsb_resp_command(r, 3, argv, len, &rep));
		rc = rep->type == KVSB_REPLY_STATUS ? 0 : -EIO;
		kvsb_reply_free(rep);
		KVSB_STEP(who, "SET", rc);
	}
out:
	kvsb_resp_close(r);
	free(value);
	return rc;
}

static void ops_usage(void)
{
	fprintf(stderr,
		"usage: kvsbench [--socket PATH] ops [OPTIONS]\n"
		"  N clients repeat lookup+release of K cached blocks against kvshared\n"
		"  (its fast path, then its socket path), then MGET of K keys against a\n"
		"  private redis-server; ratios of ops/s to Redis's.\n"
		"  -s, --socket PATH     use this daemon (default: start a private\n"
		"                        kvshared from kvsbench's directory)\n"
		"  -c, --clients N       client processes (default 4)\n"
		"  -k, --blocks K        blocks per lookup / keys per MGET (default 32)\n"
		"  -t, --seconds T       seconds per run (default 2)\n"
		"  -r, --reps R          repetitions, each runs every system (default 5)\n"
		"  -p, --path P          kvshare's lookups: fast, socket or both (default\n"
		"                        both; socket forces KVS_CONNECT_NO_FASTPATH)\n"
		"      --value-bytes V   Redis value size (default 16: a block reference)\n"
		"      --json            one JSON object per result line, no table\n"
		"  -h, --help            this help\n");
}

/* One table row; the ratios are this repetition's, or for the median row
 * the medians of the per-repetition ratios (not the ratio of the medians). */
static void print_row(const struct ops_opts *o, const char *rep,
		      const struct ops_row *row, const double *ratio,
		      const char *redis_na)
{
	if (o->json) {
		printf("{\"bench\":\"ops\",\"rep\":\"%s\",\"reps\":%u,"
		       "\"clients\":%u,\"blocks\":%u,\"seconds\":%.3f", rep,
		       o->reps, o->clients, o->blocks, o->seconds);
		for (int sy = 0; sy < SYS_N; sy++) {
			if (!o->run[sy] || (sy == SYS_REDIS && redis_na))
				printf(",\"%s_ops_s\":null,\"%s_p50_us\":null,"
				       "\"%s_p99_us\":null", sys_name[sy],
				       sys_name[sy], sys_name[sy]);
			else
				printf(",\"%s_ops_s\":%.1f,\"%s_p50_us\":%.2f,"
				       "\"%s_p99_us\":%.2f", sys_name[sy],
				       row[sy].ops_s, sys_name[sy], row[sy].p50_us,
				       sys_name[sy], row[sy].p99_us);
		}
		for (int sy = 0; sy < SYS_REDIS; sy++) {
			if (!o->run[sy] || redis_na)
				printf(",\"%s_ratio\":null", sys_name[sy]);
			else
				printf(",\"%s_ratio\":%.3f", sys_name[sy], ratio[sy]);
		}
		if (redis_na)
			printf(",\"redis\":\"%s\"", redis_na);
		printf("}\n");
		return;
	}
	printf("%-7s", rep);
	for (int sy = 0; sy < SYS_N; sy++) {
		if (!o->run[sy] || (sy == SYS_REDIS && redis_na))
			printf(" %11s %7s %7s", "-", "-", "-");
		else
			printf(" %11.0f %7.1f %7.1f", row[sy].ops_s,
			       row[sy].p50_us, row[sy].p99_us);
	}
	for (int sy = 0; sy < SYS_REDIS; sy++) {
		if (!o->run[sy] || redis_na)
			printf(" %7s", "-");
		else
			printf(" %6.2fx", ratio[sy]);
	}
	printf("\n");
}

/* Fast-path lookups the daemon counted (its clients' reports), or -1. */
static int64_t fast_lookups(const char *sock)
{
	kvs_client *c = NULL;
	char *text = NULL;
	int64_t v = -1;

	if (kvs_connect(sock, NULL, &c) == 0 && kvs_stats(c, &text) == 0 &&
	    kvs_stats_value(text, "fast.lookups", &v) < 0)
		v = -1;
	free(text);
	kvs_close(c);
	return v;
}

static int run_system(struct ops_ctx *x, int sy, struct ops_res *res,
		      uint64_t *hist, struct ops_row *row)
{
	int64_t before = sy == SYS_FAST ? fast_lookups(x->sock) : 0;
	int rc;

	if (sy == SYS_REDIS)
		return measure(x, redis_client, res, hist, row);
	x->connect_flags = sy == SYS_SOCKET ? KVS_CONNECT_NO_FASTPATH : 0;
	rc = measure(x, ours_client, res, hist, row);
	if (rc == 0 && sy == SYS_FAST && fast_lookups(x->sock) <= before)
		fprintf(stderr, "kvsbench: ops: the fast path answered no lookup "
			"(KVS_NO_FASTPATH set, or a daemon without it): the "
			"\"fast\" figures are the socket's\n");
	return rc;
}

/* The command line into @o. 0: run; 1: --help (usage printed); 2: a usage
 * error (said). */
static int ops_parse(int argc, char **argv, struct ops_opts *o)
{
	enum { O_VALUE = 256, O_JSON };
	static const struct option opts[] = {
		{ "clients", required_argument, NULL, 'c' },
		{ "blocks", required_argument, NULL, 'k' },
		{ "seconds", required_argument, NULL, 't' },
		{ "reps", required_argument, NULL, 'r' },
		{ "path", required_argument, NULL, 'p' },
		{ "value-bytes", required_argument, NULL, O_VALUE },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt, bad = 0;

	while ((opt = getopt_long(argc, argv, "c:k:t:r:p:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'c': bad |= kvsb_parse_uint("clients", optarg, 1, OPS_MAX_CLIENTS, &o->clients); break;
		case 'k': bad |= kvsb_parse_uint("blocks", optarg, 1, KVS_MAX_HASHES, &o->blocks); break;
		case 't': bad |= kvsb_parse_seconds(optarg, &o->seconds); break;
		case 'r': bad |= kvsb_parse_uint("reps", optarg, 1, OPS_MAX_REPS, &o->reps); break;
		case 'p':
			o->run[SYS_FAST] = !strcmp(optarg, "fast") || !strcmp(optarg, "both");
			o->run[SYS_SOCKET] = !strcmp(optarg, "socket") || !strcmp(optarg, "both");
			if (!o->run[SYS_FAST] && !o->run[SYS_SOCKET]) {
				fprintf(stderr, "kvsbench: ops: --path: fast, socket "
					"or both, not '%s'\n", optarg);
				bad = 1;
			}
			break;
		case O_VALUE: bad |= kvsb_parse_uint("value-bytes", optarg, 1, 1u << 20, &o->value_bytes); break;
		case O_JSON: o->json = 1; break;
		case 'h': ops_usage(); return 1;
		default: ops_usage(); return 2;
		}
	}
	if (bad || optind < argc) {
		if (optind < argc)
			fprintf(stderr, "kvsbench: ops: unexpected argument '%s'\n",
				argv[optind]);
		ops_usage();
		return 2;
	}
	return 0;
}

/* The table's heading (none with --json). */
static void ops_header(const struct ops_ctx *x, const kvsb_daemon *d,
		       const kvsb_redis *srv)
{
	const struct ops_opts *o = x->o;

	if (o->json)
		return;
	printf("kvsbench ops: %u clients; kvshare: lookup+release of %u "
	       "cached blocks (fast path, socket path); Redis: MGET of %u "
	       "keys x %u B\n", o->clients, o->blocks, o->blocks,
	       o->value_bytes);
	printf("  %.1f s per run, %u reps, order rotated per rep; "
	       "kvshared %s; redis-server %s\n", o->seconds, o->reps,
	       d ? "private (started here)" : x->sock,
	       srv ? kvsb_redis_version(srv) : "n/a");
	printf("%-7s %11s %7s %7s %11s %7s %7s %11s %7s %7s %7s %7s\n",
	       "rep", "fast_op/s", "p50_us", "p99_us", "sock_op/s",
	       "p50_us", "p99_us", "redis_op/s", "p50_us", "p99_us",
	       "fast/R", "sock/R");
}

/* The repetitions, each system first in turn, into @row and the kvshare
 * paths' ratios to Redis into @ratio; each printed. A run's error. */
static int ops_reps(struct ops_ctx *x, struct ops_res *res, uint64_t *hist,
		    struct ops_row row[OPS_MAX_REPS][SYS_N],
		    double ratio[OPS_MAX_REPS][SYS_REDIS], const char *redis_na)
{
	const struct ops_opts *o = x->o;
	int rc;

	for (unsigned r = 0; r < o->reps; r++) {
		char name[16];

		/* Interleaved: each system goes first in turn. */
		for (int k = 0; k < SYS_N; k++) {
			int sy = (int)((r + (unsigned)k) % SYS_N);

			if (o->run[sy] &&
			    (rc = run_system(x, sy, res, hist, &row[r][sy])) < 0)
				return rc;
		}
		for (int sy = 0; sy < SYS_REDIS; sy++)
			ratio[r][sy] = row[r][SYS_REDIS].ops_s > 0
					       ? row[r][sy].ops_s / row[r][SYS_REDIS].ops_s
					       : 0;
		snprintf(name, sizeof(name), "%u", r + 1);
		print_row(o, name, row[r], ratio[r], redis_na);
		fflush(stdout);
	}
	return 0;
}

/* The median row: each column's median over the repetitions, and the
 * medians of the per-repetition ratios. */
static void ops_medians(const struct ops_opts *o,
			struct ops_row row[OPS_MAX_REPS][SYS_N],
			double ratio[OPS_MAX_REPS][SYS_REDIS], const char *redis_na)
{
	struct ops_row med[SYS_N];
	double v[OPS_MAX_REPS], mratio[SYS_REDIS];

#define MED(field, sy)                                                        \
	do {                                                                  \
		for (unsigned r = 0; r < o->reps; r++)                        \
			v[r] = row[r][sy].field;                              \
		med[sy].field = kvsb_median(v, o->reps);                      \
	} while (0)
	for (int sy = 0; sy < SYS_N; sy++) {
		MED(ops_s, sy);
		MED(p50_us, sy);
		MED(p99_us, sy);
	}
#undef MED
	for (int sy = 0; sy < SYS_REDIS; sy++) {
		for (unsigned r = 0; r < o->reps; r++)
			v[r] = ratio[r][sy];
		mratio[sy] = kvsb_median(v, o->reps);
	}
	print_row(o, "median", med, mratio, redis_na);
	if (!o->json && !redis_na)
		printf("fast/R, sock/R = kvshare ops/s / Redis ops/s in the same "
		       "repetition; the median row has the medians of those\n");
}

/* The daemon measured: --socket's, or a private one started into *@d. */
static int ops_daemon(struct ops_ctx *x, kvsb_daemon **d)
{
	int rc;

	if (x->o->sock) {
		x->sock = x->o->sock;
		return 0;
	}
	/* K blocks of 4 KiB, plus slack for the allocator's pages */
	rc = kvsb_daemon_start((uint64_t)x->o->blocks * 4096 + (16u << 20), 10.0, d);
	if (rc < 0) {
		fprintf(stderr, "kvsbench: ops: starting kvshared failed: %s%s\n",
			kvs_strerror(rc), rc == -ENOENT ?
			" (none beside kvsbench; pass --socket)" : "");
		return rc;
	}
	x->sock = kvsb_daemon_socket(*d);
	return 0;
}

int kvsb_cmd_ops(const char *sock, int argc, char **argv)
{
	struct ops_opts o = { .sock = sock, .clients = 4, .blocks = 32,
			      .reps = 5, .value_bytes = 16, .seconds = 2.0,
			      .run = { 1, 1, 1 } };
	struct ops_ctx x = {
		.o = &o,
		/* a 4 KiB block: the control plane moves no block bytes, so
		 * the size only sets how much host memory the daemon needs */
		.layout = { .model = "kvsbench-ops", .layers = 1, .kv_heads = 1,
			    .head_dim = 64, .block_tokens = 16, .tp_size = 1,
			    .dtype = KVS_DTYPE_FP16 },
	};
	struct ops_row row[OPS_MAX_REPS][SYS_N];
	double ratio[OPS_MAX_REPS][SYS_REDIS];
	struct ops_res *res = NULL;
	uint64_t *hist = NULL;
	kvsb_daemon *d = NULL;
	kvsb_redis *srv = NULL;
	const char *redis_na = NULL;
	char *keybuf = NULL, redis_why[128];
	int rc, status = 1;

	rc = ops_parse(argc, argv, &o);
	if (rc)
		return rc == 1 ? 0 : 2;
	x.hashes = calloc(o.blocks, sizeof(*x.hashes));
	res = calloc(o.clients, sizeof(*res));
	hist = calloc(HIST_BUCKETS, sizeof(*hist));
	if (!x.hashes || !res || !hist) {
		fprintf(stderr, "kvsbench: alloc failed: %s\n",
			kvs_strerror(-ENOMEM));
		goto out;
	}
	if (ops_daemon(&x, &d) < 0 || ops_setup_ours(&x) < 0)
		goto out;

	redis_na = kvsb_redis_start_or_na(10.0, &srv, redis_why, sizeof(redis_why));
	if (srv) {
		x.redis_sock = kvsb_redis_socket(srv);
		if (ops_setup_redis(&x, &keybuf) < 0)
			goto out;
	}
	o.run[SYS_REDIS] = srv != NULL;

	ops_header(&x, d, srv);
	memset(row, 0, sizeof(row));
	memset(ratio, 0, sizeof(ratio));
	rc = ops_reps(&x, res, hist, row, ratio, redis_na);
	if (rc < 0) {
		fprintf(stderr, "kvsbench: ops: a run failed: %s\n", kvs_strerror(rc));
		goto out;
	}
	ops_medians(&o, row, ratio, redis_na);
	status = 0;
out:
	if (srv && kvsb_redis_stop(srv) < 0)
		fprintf(stderr, "kvsbench: ops: redis-server did not stop "
			"cleanly\n");
	if (d && kvsb_daemon_stop(d) < 0) {
		fprintf(stderr, "kvsbench: ops: kvshared did not exit 0\n");
		status = 1;
	}
	free(keybuf);
	free(x.mget_argv);
	free(x.hashes);
	free(res);
	free(hist);
	return status;
}
