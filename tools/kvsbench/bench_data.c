/*
 * bench_data.c - kvsbench data (contract in bench_data.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_data.h"
#include "bench_proc.h"
#include "bench_redis.h"
#include "bench_util.h"
#include "kvs_size.h"
#include "kvshare.h"

#define DATA_MAX_SIZES 16
#define DATA_MAX_REPS KVSB_MEDIAN_MAX
#define DATA_MAX_READERS 64
#define DATA_AUTO_BYTES (128ull << 20) /* per pass when --blocks is not set */
#define DATA_TOKEN_SEED 0x646174612d626c6bull
#define DATA_VOCAB 128256
#define DATA_KEY_LEN 48

enum { SYS_OURS, SYS_MEMCPY, SYS_REDIS, SYS_N };
static const char *const sys_name[SYS_N] = { "kvshare", "memcpy", "redis" };

struct data_opts {
	const char *sock;
	uint64_t sizes[DATA_MAX_SIZES];
	unsigned nsizes, blocks, reps, readers;
	double seconds;
	int json;
};

/* One block size's set-up, shared (read only) with the forked readers. */
struct data_ctx {
	const struct data_opts *o;
	const char *sock;       /* kvshared's */
	const char *redis_sock; /* NULL: no Redis */
	kvs_layout layout;
	uint64_t bb;            /* block bytes, B */
	unsigned k;             /* blocks per pass, K */
	kvs_hash *hashes;
	char *keys;             /* K keys of DATA_KEY_LEN bytes */
};

/* A reader's result, in memory shared with the parent. */
struct data_res {
	uint64_t bytes;
	double secs;
};

/* Block i's bytes: a byte that depends on i, with i itself in the first and
 * last 8 bytes, so that a reader can tell one block from another cheaply. */
static void block_fill(uint8_t *p, uint64_t bb, uint64_t i)
{
	memset(p, (int)((i * 131 + 7) & 0xff), bb);
	memcpy(p, &i, sizeof(i));
	memcpy(p + bb - sizeof(i), &i, sizeof(i));
}

static int block_check(const uint8_t *p, uint64_t bb, uint64_t i)
{
	uint64_t a, z;

	memcpy(&a, p, sizeof(a));
	memcpy(&z, p + bb - sizeof(z), sizeof(z));
	return a == i && z == i && p[bb / 2] == (uint8_t)((i * 131 + 7) & 0xff)
		       ? 0
		       : KVS_E_INTERNAL;
}

/* A private buffer of @n bytes, every page touched, so that page faults are
 * not timed. */
static uint8_t *buffer(uint64_t n)
{
	uint8_t *p = aligned_alloc(4096, (n + 4095) & ~4095ull);

	if (p)
		memset(p, 0, n);
	return p;
}

/* ---- the three readers --------------------------------------------------- */

static int ours_pass(kvs_client *c, const struct data_ctx *x, kvs_block *b,
		     uint8_t *dst, int check)
{
	kvs_lease lease;
	int rc = kvs_lookup(c, x->hashes, x->k, &lease, b), rc2;

	if (rc < 0)
		return rc;
	if ((unsigned)rc != x->k) {
		kvs_release(c, lease);
		fprintf(stderr, "kvsbench: data: lookup hit %d of %u blocks "
			"(evicted?)\n", rc, x->k);
		return KVS_E_INTERNAL;
	}
	rc = 0;
	for (unsigned i = 0; rc == 0 && i < x->k; i++) {
		const uint8_t *p = kvs_block_ptr(c, &b[i]);

		if (!p) {
			rc = -ERANGE;
			break;
		}
		memcpy(dst + i * x->bb, p, x->bb);
		if (check)
			rc = block_check(dst + i * x->bb, x->bb, i);
	}
	rc2 = kvs_release(c, lease);
	return rc < 0 ? rc : rc2;
}

static int ours_reader(const void *vctx, unsigned idx, kvsb_gate *g, void *vres)
{
	const struct data_ctx *x = vctx;
	struct data_res *res = vres;
	kvs_block *b = calloc(x->k, sizeof(*b));
	uint8_t *dst = buffer(x->k * x->bb);
	kvs_client *c = NULL;
	const char *who = "data: kvshare reader: ";
	double t0;
	int rc;

	(void)idx;
	KVSB_STEP(who, "alloc", b && dst ? 0 : -ENOMEM);
	KVSB_STEP(who, "connect", kvs_connect(x->sock, &x->layout, &c));
	KVSB_STEP(who, "first pass", ours_pass(c, x, b, dst, 1));
	kvsb_gate_wait(g);
	t0 = now_s();
	do {
		KVSB_STEP(who, "pass", ours_pass(c, x, b, dst, 0));
		res->bytes += x->k * x->bb;
		res->secs = now_s() - t0;
	} while (res->secs < x->o->seconds);
	rc = 0;
out:
	kvs_close(c);
	free(b);
	free(dst);
	return rc;
}

static int memcpy_reader(const void *vctx, unsigned idx, kvsb_gate *g,
			 void *vres)
{
	const struct data_ctx *x = vctx;
	struct data_res *res = vres;
	uint8_t *src = buffer(x->k * x->bb), *dst = buffer(x->k * x->bb);
	const char *who = "data: memcpy reader: ";
	double t0;
	int rc;

	(void)idx;
	KVSB_STEP(who, "alloc", src && dst ? 0 : -ENOMEM);
	for (unsigned i = 0; i < x->k; i++)
		block_fill(src + i * x->bb, x->bb, i);
	for (unsigned i = 0; i < x->k; i++)
		memcpy(dst + i * x->bb, src + i * x->bb, x->bb);
	kvsb_gate_wait(g);
	t0 = now_s();
	do {
		for (unsigned i = 0; i < x->k; i++)
			memcpy(dst + i * x->bb, src + i * x->bb, x->bb);
		/* the copies have a use, so they cannot be elided */
		__asm__ volatile("" : : "r"(dst) : "memory");
		res->bytes += x->k * x->bb;
		res->secs = now_s() - t0;
	} while (res->secs < x->o->seconds);
	rc = block_check(dst, x->bb, 0);
	KVSB_STEP(who, "check", rc);
out:
	free(src);
	free(dst);
	return rc;
}

static int redis_pass(kvsb_resp *r, const struct data_ctx *x, uint8_t *dst,
		      int check)
{
	for (unsigned i = 0; i < x->k; i++) {
		int64_t n = kvsb_resp_get_into(r, x->keys + i * DATA_KEY_LEN,
					       dst + i * x->bb, x->bb);
		int rc;

		if (n < 0)
			return (int)n;
		if ((uint64_t)n != x->bb)
			return -EPROTO;
		if (check && (rc = block_check(dst + i * x->bb, x->bb, i)) < 0)
			return rc;
	}
	return 0;
}

static int redis_reader(const void *vctx, unsigned idx, kvsb_gate *g,
			void *vres)
{
	const struct data_ctx *x = vctx;
	struct data_res *res = vres;
	uint8_t *dst = buffer(x->k * x->bb);
	const char *who = "data: redis reader: ";
	kvsb_resp *r = NULL;
	double t0;
	int rc;

	(void)idx;
	KVSB_STEP(who, "alloc", dst ? 0 : -ENOMEM);
	KVSB_STEP(who, "connect", kvsb_resp_connect(x->redis_sock, &r));
	KVSB_STEP(who, "first pass", redis_pass(r, x, dst, 1));
	kvsb_gate_wait(g);
	t0 = now_s();
	do {
		KVSB_STEP(who, "GET", redis_pass(r, x, dst, 0));
		res->bytes += x->k * x->bb;
		res->secs = now_s() - t0;
	} while (res->secs < x->o->seconds);
	rc = 0;
out:
	kvsb_resp_close(r);
	free(dst);
	return rc;
}

/* GB/s of one way for one repetition, summed over its readers. */
static int measure(const struct data_ctx *x, int sys, double *gbps)
{
	static const kvsb_client_fn fn[SYS_N] = { ours_reader, memcpy_reader,
						  redis_reader };
	struct data_res res[DATA_MAX_READERS];
	unsigned n = sys == SYS_MEMCPY ? 1 : x->o->readers;
	int failed;

	memset(res, 0, sizeof(res));
	failed = kvsb_clients_run(n, fn[sys], x, res, sizeof(res[0]));
	if (failed != 0)
		return failed < 0 ? failed : KVS_E_INTERNAL;
	*gbps = 0;
	for (unsigned i = 0; i < n; i++)
		if (res[i].secs > 0)
			*gbps += (double)res[i].bytes / res[i].secs / 1e9;
	return 0;
}

/* ---- set-up -------------------------------------------------------------- */

static unsigned blocks_for(const struct data_opts *o, uint64_t bb)
{
	uint64_t k = o->blocks;

	if (k == 0) {
		k = DATA_AUTO_BYTES / bb;
		if (k < 8)
			k = 8;
		if (k > 4096)
			k = 4096;
	}
	return (unsigned)k;
}

/* Publish K blocks of B bytes in the daemon. */
static int setup_ours(struct data_ctx *x)
{
	size_t ntok = (size_t)x->k * x->layout.block_tokens;
	uint32_t *tok = malloc(ntok * sizeof(*tok));
	kvs_block *b = calloc(x->k, sizeof(*b));
	uint64_t seed = DATA_TOKEN_SEED ^ x->bb;
	const char *who = "data: ";
	kvs_client *c = NULL;
	kvs_lease lease = 0;
	int rc;

	KVSB_STEP(who, "alloc", tok && b ? 0 : -ENOMEM);
	kvsb_tokens(tok, ntok, seed, DATA_VOCAB);
	KVSB_STEP(who, "connect", kvs_connect(x->sock, &x->layout, &c));
	if (kvs_block_bytes(c) != x->bb)
		KVSB_STEP(who, "layout (block bytes differ)", KVS_E_LAYOUT);
	KVSB_STEP(who, "hash", kvs_hash_tokens(c, tok, ntok, x->hashes, x->k));
	KVSB_STEP(who, "reserve", kvs_reserve(c, x->hashes, x->k, &lease, b));
	for (unsigned i = 0; i < x->k; i++) {
		uint8_t *p = kvs_block_ptr(c, &b[i]);

		if (b[i].status == KVS_BLOCK_NEW && p)
			block_fill(p, x->bb, i);
		else if (b[i].status != KVS_BLOCK_EXISTS)
			KVSB_STEP(who, "reserve (the host tier is too small)",
			     KVS_E_FULL);
	}
	KVSB_STEP(who, "commit", kvs_commit(c, lease));
	lease = 0;
	rc = 0;
out:
	if (lease)
		kvs_abort(c, lease);
	kvs_close(c);
	free(tok);
	free(b);
	return rc;
}

static int redis_simple(kvsb_resp *r, int argc, const char *const *argv,
			const size_t *len)
{
	kvsb_reply *rep;
	int rc = kvsb_resp_command(r, argc, argv, len, &rep);

	if (rc < 0)
		return rc;
	rc = rep->type == KVSB_REPLY_STATUS ? 0 : -EIO;
	if (rc < 0)
		fprintf(stderr, "kvsbench: data: redis %s: %s\n", argv[0],
			rep->str ? rep->str : "unexpected reply");
	kvsb_reply_free(rep);
	return rc;
}

/* The same K blocks as Redis values, after dropping the last size's. */
static int setup_redis(struct data_ctx *x)
{
	static const char *const flush[] = { "FLUSHALL" };
	uint8_t *value = malloc(x->bb);
	const char *who = "data: redis ";
	kvsb_resp *r = NULL;
	int rc;

	KVSB_STEP(who, "alloc", value ? 0 : -ENOMEM);
	KVSB_STEP(who, "connect", kvsb_resp_connect(x->redis_sock, &r));
	KVSB_STEP(who, "FLUSHALL", redis_simple(r, 1, flush, NULL));
	for (unsigned i = 0; i < x->k; i++) {
		char *key = x->keys + i * DATA_KEY_LEN;
		const char *argv[3] = { "SET", key, (const char *)value };
		size_t len[3] = { 3, 0, x->bb };

		snprintf(key, DATA_KEY_LEN, "kvsbench:data:%" PRIu64 ":%u",
			 x->bb, i);
		len[1] = strlen(key);
		block_fill(value, x->bb, i);
		KVSB_STEP(who, "SET", redis_simple(r, 3, argv, len));
	}
	rc = 0;
out:
	kvsb_resp_close(r);
	free(value);
	return rc;
}

/* ---- options and output -------------------------------------------------- */

static void data_usage(void)
{
	fprintf(stderr,
		"usage: kvsbench [--socket PATH] data [OPTIONS]\n"
		"  Readers copy K leased host-tier blocks of B bytes into private\n"
		"  buffers, beside memcpy (the limit) and Redis GET of B-byte values.\n"
		"  -s, --socket PATH      use this daemon (default: start a private\n"
		"                         kvshared from kvsbench's directory)\n"
		"  -b, --block-bytes B    block size, or a list: 64K,256K,1M,2M,8M\n"
		"                         (a multiple of 64; default 2M)\n"
		"  -k, --blocks K         blocks per pass (default: 128 MiB / B,\n"
		"                         8..4096)\n"
		"  -n, --readers N        reader processes (default 1; memcpy is\n"
		"                         always one process)\n"
		"  -t, --seconds T        seconds per run (default 0.5)\n"
		"  -r, --reps R           repetitions, each runs all three (default 5)\n"
		"      --json             one JSON object per result line, no table\n"
		"  -h, --help             this help\n");
}

/* "64K,256K,1M,2M,8M" (kvs_parse_sizes()): multiples of 64 up to 1G. */
static int parse_sizes(const char *s, struct data_opts *o)
{
	int n = kvs_parse_sizes(s, o->sizes, DATA_MAX_SIZES);

	for (int i = 0; i < n; i++)
		if (o->sizes[i] > (1ull << 30) || o->sizes[i] % 64)
			goto bad;
	if (n > 0) {
		o->nsizes = (unsigned)n;
		return 0;
	}
bad:
	fprintf(stderr, "kvsbench: --block-bytes: '%s' is not a list of at most "
		"%d sizes, each a multiple of 64 up to 1G\n", s, DATA_MAX_SIZES);
	return -1;
}

static void human_size(char *buf, size_t len, uint64_t b)
{
	if (b % (1u << 20) == 0)
		snprintf(buf, len, "%" PRIu64 "M", b >> 20);
	else if (b % 1024 == 0)
		snprintf(buf, len, "%" PRIu64 "K", b >> 10);
	else
		snprintf(buf, len, "%" PRIu64, b);
}

struct data_row {
	uint64_t bb;
	unsigned k;
	double gbps[SYS_N];        /* medians */
	double lo[SYS_N], hi[SYS_N]; /* the range over repetitions */
	double vs_memcpy, vs_redis; /* medians of per-rep ratios */
};

static void print_row(const struct data_opts *o, const struct data_row *w,
		      const char *redis_na)
{
	char sz[32];

	if (o->json) {
		printf("{\"bench\":\"data\",\"block_bytes\":%" PRIu64
		       ",\"blocks\":%u,\"readers\":%u,\"reps\":%u,"
		       "\"seconds\":%.3f",
		       w->bb, w->k, o->readers, o->reps, o->seconds);
		for (int s = 0; s < SYS_N; s++) {
			if (s == SYS_REDIS && redis_na) {
				printf(",\"redis_gbps\":null");
				continue;
			}
			printf(",\"%s_gbps\":%.3f,\"%s_gbps_min\":%.3f,"
			       "\"%s_gbps_max\":%.3f", sys_name[s], w->gbps[s],
			       sys_name[s], w->lo[s], sys_name[s], w->hi[s]);
		}
		printf(",\"kvshare_over_memcpy\":%.3f", w->vs_memcpy);
		if (redis_na)
			printf(",\"kvshare_over_redis\":null,\"redis\":\"%s\"}\n",
			       redis_na);
		else
			printf(",\"kvshare_over_redis\":%.3f}\n", w->vs_redis);
		return;
	}
	human_size(sz, sizeof(sz), w->bb);
	printf("%6s %7u %12.2f %12.2f", sz, w->k, w->gbps[SYS_OURS],
	       w->gbps[SYS_MEMCPY]);
	if (redis_na)
		printf(" %12s %10.2fx %10s   %s\n", "n/a", w->vs_memcpy, "n/a",
		       redis_na);
	else
		printf(" %12.2f %10.2fx %10.2fx\n", w->gbps[SYS_REDIS],
		       w->vs_memcpy, w->vs_redis);
}

/* All repetitions of one block size. */
static int run_size(struct data_ctx *x, int have_redis, struct data_row *w)
{
	double g[SYS_N][DATA_MAX_REPS], rm[DATA_MAX_REPS], rr[DATA_MAX_REPS];
	unsigned reps = x->o->reps;
	int rc;

	for (unsigned r = 0; r < reps; r++) {
		/* rotate the order, so that no way always runs first or last */
		for (int j = 0; j < SYS_N; j++) {
			int s = (int)((r + (unsigned)j) % SYS_N);

			g[s][r] = 0;
			if (s == SYS_REDIS && !have_redis)
				continue;
			rc = measure(x, s, &g[s][r]);
			if (rc < 0) {
				fprintf(stderr, "kvsbench: data: %s run failed: "
					"%s\n", sys_name[s], kvs_strerror(rc));
				return rc;
			}
		}
		rm[r] = g[SYS_MEMCPY][r] > 0 ? g[SYS_OURS][r] / g[SYS_MEMCPY][r] : 0;
		rr[r] = g[SYS_REDIS][r] > 0 ? g[SYS_OURS][r] / g[SYS_REDIS][r] : 0;
	}
	w->bb = x->bb;
	w->k = x->k;
	for (int s = 0; s < SYS_N; s++) {
		w->gbps[s] = kvsb_median(g[s], reps);
		w->lo[s] = w->hi[s] = g[s][0];
		for (unsigned r = 1; r < reps; r++) {
			if (g[s][r] < w->lo[s])
				w->lo[s] = g[s][r];
			if (g[s][r] > w->hi[s])
				w->hi[s] = g[s][r];
		}
	}
	w->vs_memcpy = kvsb_median(rm, reps);
	w->vs_redis = kvsb_median(rr, reps);
	return 0;
}

/* The command line into @o. 0: run; 1: --help (usage printed); 2: a usage
 * error (said). */
static int data_parse(int argc, char **argv, struct data_opts *o)
{
	enum { O_JSON = 256 };
	static const struct option opts[] = {
		{ "block-bytes", required_argument, NULL, 'b' },
		{ "blocks", required_argument, NULL, 'k' },
		{ "readers", required_argument, NULL, 'n' },
		{ "seconds", required_argument, NULL, 't' },
		{ "reps", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt, bad = 0;

	while ((opt = getopt_long(argc, argv, "b:k:n:t:r:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'b': bad |= parse_sizes(optarg, o); break;
		case 'k': bad |= kvsb_parse_uint("blocks", optarg, 1, KVS_MAX_HASHES, &o->blocks); break;
		case 'n': bad |= kvsb_parse_uint("readers", optarg, 1, DATA_MAX_READERS, &o->readers); break;
		case 't': bad |= kvsb_parse_seconds(optarg, &o->seconds); break;
		case 'r': bad |= kvsb_parse_uint("reps", optarg, 1, DATA_MAX_REPS, &o->reps); break;
		case O_JSON: o->json = 1; break;
		case 'h': data_usage(); return 1;
		default: data_usage(); return 2;
		}
	}
	if (bad || optind < argc) {
		if (optind < argc)
			fprintf(stderr, "kvsbench: data: unexpected argument '%s'\n",
				argv[optind]);
		data_usage();
		return 2;
	}
	return 0;
}

/* The daemon measured: --socket's, or a private one started into *@d with
 * room for every size's blocks at once. NULL when that failed (said). */
static const char *data_daemon(const struct data_opts *o, kvsb_daemon **d)
{
	uint64_t host = 32u << 20;
	int rc;

	if (o->sock)
		return o->sock;
	/* every size's blocks at once, plus the allocator's slack
	 * (slab tails, at most ~2%; one spare block per size) */
	for (unsigned i = 0; i < o->nsizes; i++)
		host += (blocks_for(o, o->sizes[i]) + 1ull) * o->sizes[i] * 105 / 100;
	rc = kvsb_daemon_start(host, 10.0, d);
	if (rc < 0) {
		fprintf(stderr, "kvsbench: data: starting kvshared failed: %s%s\n",
			kvs_strerror(rc), rc == -ENOENT ?
			" (none beside kvsbench; pass --socket)" : "");
		return NULL;
	}
	return kvsb_daemon_socket(*d);
}

/* One size: its blocks in both systems, measured, its row printed. */
static int data_size(const struct data_opts *o, const char *dsock, const kvsb_redis *srv,
		     uint64_t size, const char *redis_na)
{
	struct data_ctx x = {
		.o = o, .sock = dsock,
		.redis_sock = srv ? kvsb_redis_socket(srv) : NULL,
		.layout = { .model = "kvsbench-data", .layers = 1,
			    .kv_heads = 1, .block_tokens = 16,
			    .head_dim = (uint32_t)(size / 64),
			    .tp_size = 1, .dtype = KVS_DTYPE_FP16 },
		.bb = size, .k = blocks_for(o, size),
	};
	struct data_row w;
	int rc = 0;

	x.hashes = calloc(x.k, sizeof(*x.hashes));
	x.keys = calloc(x.k, DATA_KEY_LEN);
	if (!x.hashes || !x.keys)
		rc = -ENOMEM;
	if (rc == 0)
		rc = setup_ours(&x);
	if (rc == 0 && srv)
		rc = setup_redis(&x);
	if (rc == 0)
		rc = run_size(&x, srv != NULL, &w);
	if (rc == 0) {
		print_row(o, &w, redis_na);
		fflush(stdout);
	}
	free(x.hashes);
	free(x.keys);
	return rc;
}

int kvsb_cmd_data(const char *sock, int argc, char **argv)
{
	struct data_opts o = { .sock = sock, .sizes = { 2u << 20 }, .nsizes = 1,
			       .reps = 5, .readers = 1, .seconds = 0.5 };
	kvsb_daemon *d = NULL;
	kvsb_redis *srv = NULL;
	const char *redis_na, *dsock;
	char redis_why[128];
	int rc, status = 1;

	rc = data_parse(argc, argv, &o);
	if (rc)
		return rc == 1 ? 0 : 2;
	dsock = data_daemon(&o, &d);
	if (!dsock)
		return 1;
	redis_na = kvsb_redis_start_or_na(10.0, &srv, redis_why, sizeof(redis_why));
	rc = 0;
	if (!o.json) {
		printf("kvsbench data: %u reader(s) copy K blocks of B bytes into "
		       "private buffers; %.1f s per run, %u reps, rotating order\n",
		       o.readers, o.seconds, o.reps);
		printf("  kvshared %s; redis-server %s; GB/s = 1e9 B/s, medians\n",
		       d ? "private (started here)" : dsock,
		       srv ? kvsb_redis_version(srv) : "n/a");
		printf("%6s %7s %12s %12s %12s %11s %11s\n", "B", "K",
		       "kvshare_GB/s", "memcpy_GB/s", "redis_GB/s",
		       "vs_memcpy", "vs_redis");
	}
	for (unsigned i = 0; i < o.nsizes && rc == 0; i++)
		rc = data_size(&o, dsock, srv, o.sizes[i], redis_na);
	if (rc < 0)
		fprintf(stderr, "kvsbench: data failed: %s\n", kvs_strerror(rc));
	else
		status = 0;
	if (srv && kvsb_redis_stop(srv) < 0)
		fprintf(stderr, "kvsbench: data: redis-server did not stop "
			"cleanly\n");
	if (d && kvsb_daemon_stop(d) < 0) {
		fprintf(stderr, "kvsbench: data: kvshared did not exit 0\n");
		status = 1;
	}
	return status;
}
