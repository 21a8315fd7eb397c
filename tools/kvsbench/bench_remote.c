/*
 * bench_remote.c - `kvsbench remote` (see bench_remote.h): the remote tier
 * through two daemons beside redis-benchmark on the same cluster. On the
 * public client API; the cluster, the daemons, redis-benchmark and redis-cli
 * are processes.
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

#include "bench_cluster.h"
#include "bench_proc.h"
#include "bench_remote.h"
#include "bench_util.h"
#include "kvs_size.h"
#include "kvshare.h"

#define MAX_REPS 21
#define MAX_SIZES 4
#define MAX_BLOCKS 512 /* the long-chain case: 512 blocks of 64 KiB */
#define WAIT_S 60.0

enum { M_PUB, M_PROMO, M_SET, M_GET, M_N };

struct opts {
	const char *seeds;
	int tls; /* also every case over TLS, on the same nodes' TLS ports */
	unsigned blocks, reps, warmup, clients, keys, nsizes;
	uint64_t sizes[MAX_SIZES];
};

static void usage(void)
{
	fprintf(stderr,
		"usage: kvsbench remote [--seeds HOST:PORT,...] [--blocks N] [--reps N]\n"
		"                       [--warmup N] [--clients C] [--keys R] [--sizes 1M,2M]\n"
		"                       [--tls]\n"
		"\n"
		"The remote tier through two private daemons (A publishes at commit,\n"
		"B fetches) beside redis-benchmark on the same Redis Cluster; then\n"
		"the long chains (512 blocks of 64 KiB, 32 of 2 MiB): B's first\n"
		"lookup's hit ratio and GB/s.\n"
		"  --seeds LIST   an existing cluster (default: start a private 3-master\n"
		"                 one with kvs-redis-cluster from the build directory)\n"
		"  --blocks N     blocks per chain, one chain per rep and size (default 32)\n"
		"  --reps N       repetitions, interleaved; medians reported (default 5)\n"
		"  --warmup N     repetitions first, not reported (default 2): the\n"
		"                 daemons' 256 MiB host tiers then recycle slots whose\n"
		"                 pages are mapped, as in a daemon that has run a while\n"
		"  --clients C    redis-benchmark -c (default 16)\n"
		"  --keys R       redis-benchmark -r, with -n 24R, more until each of\n"
		"                 its tests lasts 4 s (its clock has 250 ms steps;\n"
		"                 default 16)\n"
		"  --sizes LIST   block (and value) sizes (default 1M,2M)\n"
		"  --tls          every case also over TLS (two more daemons with\n"
		"                 --remote-tls, redis-benchmark --tls), on the same\n"
		"                 nodes' TLS ports (the private cluster only)\n");
}

/* The "NAME: N requests per second" of redis-benchmark -q, last one. */
static double rps_of(const char *out, const char *name)
{
	char key[32];
	const char *p = NULL, *q = out;

	snprintf(key, sizeof(key), "%s: ", name);
	while ((q = strstr(q, key)) != NULL)
		p = q++;
	return p ? atof(p + strlen(key)) : 0;
}

/* One redis-benchmark --cluster run of @n SETs then @n GETs of -d @size
 * values on @port's cluster (over TLS, verified by CA file @ca, when not
 * NULL): the requests per second it reports for each. */
static int redis_run(const struct opts *o, const char *host, const char *port,
		     const char *ca, uint64_t size, unsigned requests, double *set_rps,
		     double *get_rps)
{
	static char out[1 << 16];
	char d[32], c[16], r[16], n[16];
	char *argv[] = { "redis-benchmark", "--cluster", "-h", (char *)host, "-p",
			 (char *)port, "-t", "set,get", "-d", d, "-c", c, "-r", r,
			 "-n", n, "-q", ca ? "--tls" : NULL, "--cacert", (char *)ca, NULL };
	int rc;

	snprintf(d, sizeof(d), "%" PRIu64, size);
	snprintf(c, sizeof(c), "%u", o->clients);
	snprintf(r, sizeof(r), "%u", o->keys);
	snprintf(n, sizeof(n), "%u", requests);
	rc = kvsb_run_capture(argv, out, sizeof(out), 600);
	if (rc != 0) {
		fprintf(stderr, "kvsbench: remote: redis-benchmark exited %d:\n%s\n", rc, out);
		return rc == 127 ? -ENOENT : -EIO;
	}
	*set_rps = rps_of(out, "SET");
	*get_rps = rps_of(out, "GET");
	if (*set_rps <= 0 || *get_rps <= 0) {
		fprintf(stderr, "kvsbench: remote: no rates in redis-benchmark's output:\n%s\n", out);
		return -EPROTO;
	}
	return 0;
}

/* redis-benchmark --cluster SET then GET of -d @size values: GB/s of each.
 * redis-benchmark ends a test on its 250 ms timer, so the time it divides
 * by is rounded up to a multiple of about 250 ms (384 and 768 SETs of
 * 1 MiB both "take" 0.27 s on the 2-core machine: 1.5 and 3.0k/s): the
 * run is made again with more requests (-n a multiple of 24R) until each
 * test lasts RB_MIN_S, so that the rounding costs its rate at most 6%. */
#define RB_MIN_S 4.0
static int redis_bench(const struct opts *o, const char *host, const char *port,
		       const char *ca, uint64_t size, double *set_gbs, double *get_gbs)
{
	unsigned n = 24 * o->keys;
	double set, get;
	int rc;

	for (;;) {
		double shortest;

		rc = redis_run(o, host, port, ca, size, n, &set, &get);
		if (rc < 0)
			return rc;
		shortest = (double)n / (set > get ? set : get);
		if (shortest >= RB_MIN_S || n >= 1u << 24)
			break;
		n = (unsigned)(n * (RB_MIN_S * 1.2 / shortest)) / 24 * 24 + 24;
	}
	*set_gbs = set * (double)size / 1e9;
	*get_gbs = get * (double)size / 1e9;
	return 0;
}

/* ---- the daemons' side -------------------------------------------------- */

static int stat_of(kvs_client *c, const char *name, int64_t *v)
{
	char *text;
	int rc = kvs_stats(c, &text);

	if (rc < 0)
		return rc;
	rc = kvs_stats_value(text, name, v);
	free(text);
	return rc;
}

static void pause_ms(void)
{
	struct timespec ts = { 0, 500000 };

	nanosleep(&ts, NULL);
}

/* Wait until @name reaches @want; -ETIMEDOUT after WAIT_S. */
static int wait_stat(kvs_client *c, const char *name, int64_t want)
{
	double end = now_s() + WAIT_S;
	int64_t v = 0;
	int rc;

	while ((rc = stat_of(c, name, &v)) == 0 && v < want) {
		if (now_s() > end)
			return -ETIMEDOUT;
		pause_ms();
	}
	return rc;
}

static kvs_layout layout_of(uint64_t size)
{
	return (kvs_layout){ .model = "kvsbench-remote", .layers = 2, .kv_heads = 2,
			     .head_dim = 64, .block_tokens = (uint32_t)(size / 1024),
			     .tp_size = 1, .dtype = KVS_DTYPE_FP16 };
}

/* Publish a new chain of @n blocks through @ca (block i: @src with i in its
 * first 8 bytes), until A's tier has stored every one: GB/s. */
static int publish(kvs_client *ca, const kvs_hash *h, unsigned n, uint64_t size,
		   const uint8_t *src, double *gbs)
{
	static kvs_block blocks[MAX_BLOCKS];
	kvs_lease lease;
	int64_t base;
	double t0, t1;
	int rc = stat_of(ca, "tier_remote.published", &base);

	if (rc < 0)
		return rc;
	t0 = now_s();
	rc = kvs_reserve(ca, h, n, &lease, blocks);
	if (rc < 0)
		return rc;
	if (rc != (int)n) {
		kvs_abort(ca, lease);
		return -EEXIST; /* not new: the chains must be */
	}
	for (unsigned i = 0; i < n; i++) {
		uint8_t *p = kvs_block_ptr(ca, &blocks[i]);
		uint64_t tag = i;

		if (!p) {
			kvs_abort(ca, lease);
			return -EFAULT;
		}
		memcpy(p, src, size);
		memcpy(p, &tag, sizeof(tag));
	}
	rc = kvs_commit(ca, lease);
	if (rc < 0)
		return rc;
	rc = wait_stat(ca, "tier_remote.published", base + n);
	t1 = now_s();
	if (rc < 0)
		return rc;
	*gbs = (double)n * (double)size / (t1 - t0) / 1e9;
	return 0;
}

/* One lookup through @cb of the chain B does not have: GB/s; then every
 * byte checked (off the clock). *bad counts the blocks that differ. */
static int promote(kvs_client *cb, const kvs_hash *h, unsigned n, uint64_t size,
		   const uint8_t *src, double *gbs, unsigned *bad, int *got)
{
	static kvs_block blocks[MAX_BLOCKS];
	kvs_lease lease = 0;
	double t0 = now_s(), t1;
	int hits = kvs_lookup(cb, h, n, &lease, blocks);

	t1 = now_s();
	if (hits < 0)
		return hits;
	for (int i = 0; i < hits; i++) {
		const uint8_t *p = kvs_block_ptr(cb, &blocks[i]);
		uint64_t tag;

		if (!p) {
			(*bad)++;
			continue;
		}
		memcpy(&tag, p, sizeof(tag));
		if (tag != (uint64_t)i || memcmp(p + 8, src + 8, size - 8))
			(*bad)++;
	}
	kvs_release(cb, lease);
	if (got) { /* the long chains: their hit ratio is the result */
		*got = hits;
		*gbs = (double)hits * (double)size / (t1 - t0) / 1e9;
		return 0;
	}
	if (hits != (int)n) {
		fprintf(stderr, "kvsbench: remote: B found %d of %u blocks\n", hits, n);
		return -ENOENT;
	}
	*gbs = (double)n * (double)size / (t1 - t0) / 1e9;
	return 0;
}

/* The long chains: a prompt of 512 blocks of 64 KiB, and 32 of
 * 2 MiB, published through A; B's first lookup of each: its hit ratio
 * (the whole chain since lookups fetch all the cluster holds) and GB/s,
 * medians over the reps. */
static int long_chains(const struct opts *o, const struct kvsb_cluster *cl,
		       kvsb_daemon *da, kvsb_daemon *db, const uint8_t *src,
		       unsigned *bad)
{
	static const struct { uint64_t size; unsigned n; } lc[] = {
		{ 64u << 10, 512 }, { 2u << 20, 32 } };
	static kvs_hash h[MAX_BLOCKS];
	static uint32_t tok[MAX_BLOCKS * 64];
	double gbs[2][MAX_REPS], pub;
	int worst[2] = { MAX_BLOCKS, MAX_BLOCKS }, rc = 0;

	printf("\nlong chains: B's first lookup of a chain A published\n");
	for (unsigned k = 0; k < 2 && rc == 0; k++) {
		kvs_layout l = layout_of(lc[k].size);
		uint32_t bt = l.block_tokens;
		kvs_client *ca = NULL, *cb = NULL;

		rc = kvs_connect(kvsb_daemon_socket(da), &l, &ca);
		if (rc == 0)
			rc = kvs_connect(kvsb_daemon_socket(db), &l, &cb);
		for (unsigned r = 0; r < o->reps && rc == 0; r++) {
			int got = 0;

			if (cl->pid > 0)
				kvsb_cluster_flush(cl);
			kvsb_tokens(tok, (size_t)lc[k].n * bt, 7000003ull * (r + 1) + k, 128256);
			rc = kvs_hash_tokens(ca, tok, (size_t)lc[k].n * bt, h, MAX_BLOCKS);
			if (rc >= 0)
				rc = publish(ca, h, lc[k].n, lc[k].size, src, &pub);
			if (rc >= 0)
				rc = promote(cb, h, lc[k].n, lc[k].size, src, &gbs[k][r],
					     bad, &got);
			if (got < worst[k])
				worst[k] = got;
		}
		if (rc == 0)
			printf("%6" PRIu64 " KiB x %3u blocks: first lookup hits %d/%u "
			       "(worst of %u), %.2f GB/s (median)\n", lc[k].size >> 10,
			       lc[k].n, worst[k], lc[k].n, o->reps,
			       kvsb_median(gbs[k], o->reps));
		kvs_close(ca);
		kvs_close(cb);
	}
	return rc < 0 ? rc : 0;
}

/* ---- the command -------------------------------------------------------- */

/* --sizes: 1K to 64M each, multiples of 1K. */
static int parse_sizes(const char *s, struct opts *o)
{
	int n = kvs_parse_sizes(s, o->sizes, MAX_SIZES);

	for (int i = 0; i < n; i++)
		if (o->sizes[i] < 1024 || o->sizes[i] > (64ull << 20) || o->sizes[i] % 1024)
			return -1;
	o->nsizes = n > 0 ? (unsigned)n : 0;
	return n > 0 ? 0 : -1;
}

/* The command line into @o. 0: run; 1: --help was asked (usage printed);
 * 2: a usage error (said). */
static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lopts[] = {
		{ "seeds", required_argument, NULL, 'S' },
		{ "blocks", required_argument, NULL, 'b' },
		{ "reps", required_argument, NULL, 'r' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "clients", required_argument, NULL, 'c' },
		{ "keys", required_argument, NULL, 'k' },
		{ "sizes", required_argument, NULL, 'z' },
		{ "tls", no_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt, usage_bad = 0;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		switch (opt) {
		case 'S': o->seeds = optarg; break;
		case 'b': usage_bad |= kvsb_parse_uint("blocks", optarg, 1, MAX_BLOCKS, &o->blocks) < 0; break;
		case 'w': usage_bad |= kvsb_parse_uint("warmup", optarg, 0, 100, &o->warmup) < 0; break;
		case 'r': usage_bad |= kvsb_parse_uint("reps", optarg, 1, MAX_REPS, &o->reps) < 0; break;
		case 'c': usage_bad |= kvsb_parse_uint("clients", optarg, 1, 1024, &o->clients) < 0; break;
		case 'k': usage_bad |= kvsb_parse_uint("keys", optarg, 1, 100000, &o->keys) < 0; break;
		case 'T': o->tls = 1; break;
		case 'z':
			if (parse_sizes(optarg, o) < 0) {
				fprintf(stderr, "kvsbench: remote: --sizes: sizes from 1K to "
					"64M, multiples of 1K, comma-separated\n");
				usage_bad = 1;
			}
			break;
		case 'h': usage(); return 1;
		default: usage_bad = 1;
		}
	}
	if (usage_bad || optind != argc) {
		usage();
		return 2;
	}
	if (o->tls && o->seeds) {
		fprintf(stderr, "kvsbench: remote: --tls runs on the private cluster "
			"(its CA signed the nodes' certificates), not with --seeds\n");
		return 2;
	}
	/* a chain fits the daemons' 256 MiB host tiers twice, and its tokens
	 * the token array */
	for (unsigned s = 0; s < o->nsizes; s++)
		if (o->blocks * o->sizes[s] > (128ull << 20)) {
			fprintf(stderr, "kvsbench: remote: --blocks x size over 128 MiB\n");
			return 2;
		}
	return 0;
}

/* Daemons A (writes through to the cluster) and B (promotes from it) on the
 * plain seeds, and with --tls two more on the TLS seeds: da[1], db[1]. */
static int start_daemons(const struct opts *o, const struct kvsb_cluster *cl,
			 kvsb_daemon *da[2], kvsb_daemon *db[2])
{
	const char *aa[] = { "--host-size", "256M", "--page-size", "1M",
			     "--remote", o->seeds, "--remote-write", "through",
			     "--remote-timeout", "10000", "--log-level", "warn", NULL };
	const char *ab[] = { "--host-size", "256M", "--page-size", "1M",
			     "--remote", o->seeds, "--remote-timeout", "10000",
			     "--log-level", "warn", NULL };
	const char *ta[] = { "--host-size", "256M", "--page-size", "1M",
			     "--remote", cl->tls_seeds, "--remote-write", "through",
			     "--remote-timeout", "10000", "--log-level", "warn",
			     "--remote-tls", "--remote-tls-ca", cl->ca, NULL };
	const char *tb[] = { "--host-size", "256M", "--page-size", "1M",
			     "--remote", cl->tls_seeds, "--remote-timeout", "10000",
			     "--log-level", "warn", "--remote-tls",
			     "--remote-tls-ca", cl->ca, NULL };
	int rc;

	KVSB_STEP("remote: ", "daemon A start", kvsb_daemon_start_args(aa, 30, &da[0]));
	KVSB_STEP("remote: ", "daemon B start", kvsb_daemon_start_args(ab, 30, &db[0]));
	if (o->tls) {
		KVSB_STEP("remote: ", "TLS daemon A start",
			  kvsb_daemon_start_args(ta, 30, &da[1]));
		KVSB_STEP("remote: ", "TLS daemon B start",
			  kvsb_daemon_start_args(tb, 30, &db[1]));
	}
out:
	return rc;
}

/* Every block's bytes (sizes <= 64 MiB): one SplitMix64 stream. */
static uint8_t *make_src(void)
{
	uint8_t *src = malloc(64u << 20);
	uint64_t s = 0x72656d6f7465ull;

	if (!src)
		return NULL;
	for (size_t i = 0; i + 8 <= (64u << 20); i += 8) {
		uint64_t x = kvsb_splitmix64(&s);

		memcpy(src + i, &x, 8);
	}
	return src;
}

/* The rates of the repetitions, by mode (plain, TLS), size, measure, rep. */
typedef double rates[2][MAX_SIZES][M_N][MAX_REPS];

/* The warm-up and measured repetitions: in each, for each size and mode, a
 * new chain published through A, promoted through B, then redis-benchmark
 * on the same nodes; the measured ones into @v (and printed). Blocks read
 * back wrong are counted in @bad. */
static int run_reps(const struct opts *o, const struct kvsb_cluster *cl,
		    kvs_client *ca[2][MAX_SIZES], kvs_client *cb[2][MAX_SIZES],
		    const char *host, const char *port, const char *tport,
		    const uint8_t *src, rates v, unsigned *bad)
{
	static kvs_hash h[MAX_BLOCKS];
	static uint32_t tok[MAX_BLOCKS * 2048];
	int rc = 0;

	for (unsigned r = 0; r < o->warmup + o->reps; r++) {
		unsigned at = r < o->warmup ? 0 : r - o->warmup; /* warm-up: slot 0, overwritten */

		if (cl->pid > 0)
			kvsb_cluster_flush(cl);
		for (unsigned s = 0; s < o->nsizes; s++)
		for (int m = 0; m <= o->tls; m++) {
			uint64_t size = o->sizes[s];
			uint32_t bt = (uint32_t)(size / 1024);
			double *x[M_N] = { &v[m][s][M_PUB][at], &v[m][s][M_PROMO][at],
					   &v[m][s][M_SET][at], &v[m][s][M_GET][at] };
			int n;

			/* TLS chains apart: the daemons share the nodes */
			kvsb_tokens(tok, (size_t)o->blocks * bt,
				    1000003ull * (r + 1) + s + 7919ull * (uint64_t)m, 128256);
			n = kvs_hash_tokens(ca[m][s], tok, (size_t)o->blocks * bt, h, MAX_BLOCKS);
			KVSB_STEP("remote: ", "hash", n);
			KVSB_STEP("remote: ", "publish (A)",
				  publish(ca[m][s], h, o->blocks, size, src, x[M_PUB]));
			KVSB_STEP("remote: ", "promote (B)",
				  promote(cb[m][s], h, o->blocks, size, src, x[M_PROMO], bad, NULL));
			KVSB_STEP("remote: ", "redis-benchmark",
				  redis_bench(o, host, m ? tport : port, m ? cl->ca : NULL,
					      size, x[M_SET], x[M_GET]));
			if (r < o->warmup)
				continue;
			printf("%-4u %-5s%-4s %10.2f %10.2f %10.2f %10.2f  GB/s\n", at + 1,
			       size == (1u << 20) ? "1M" : size == (2u << 20) ? "2M" : "",
			       m ? "TLS" : "", *x[M_PUB], *x[M_PROMO], *x[M_SET], *x[M_GET]);
			fflush(stdout);
		}
	}
out:
	return rc;
}

/* The medians of @v and their ratios to redis-benchmark's, and with --tls
 * what TLS costs each side. */
static void print_medians(const struct opts *o, rates v)
{
	printf("\nmedians (GB/s)          publish  rb SET  ratio   promote  rb GET  ratio\n");
	for (int t = 0; t <= o->tls; t++)
	for (unsigned s = 0; s < o->nsizes; s++) {
		double m[M_N];

		for (int k = 0; k < M_N; k++)
			m[k] = kvsb_median(v[t][s][k], o->reps);
		printf("%6" PRIu64 " KiB blocks%-4s %8.2f %7.2f %6.2f %9.2f %7.2f %6.2f\n",
		       o->sizes[s] >> 10, t ? " TLS" : "", m[M_PUB], m[M_SET],
		       m[M_PUB] / m[M_SET], m[M_PROMO], m[M_GET], m[M_PROMO] / m[M_GET]);
	}
	/* What TLS costs each side: TLS GB/s over plain GB/s, medians of the
	 * reps' own ratios (a rep's plain and TLS cases run back to back). */
	if (!o->tls)
		return;
	printf("\nTLS / plain (medians)  publish  rb SET   promote  rb GET\n");
	for (unsigned s = 0; s < o->nsizes; s++) {
		double q[M_N], x[MAX_REPS];

		for (int k = 0; k < M_N; k++) {
			for (unsigned i = 0; i < o->reps; i++)
				x[i] = v[1][s][k][i] / v[0][s][k][i];
			q[k] = kvsb_median(x, o->reps);
		}
		printf("%6" PRIu64 " KiB blocks     %7.2f %7.2f %9.2f %7.2f\n",
		       o->sizes[s] >> 10, q[M_PUB], q[M_SET], q[M_PROMO], q[M_GET]);
	}
}

int kvsb_cmd_remote(const char *sock, int argc, char **argv)
{
	struct opts o = { .blocks = 32, .reps = 5, .warmup = 2, .clients = 16, .keys = 16,
			  .nsizes = 2, .sizes = { 1u << 20, 2u << 20 } };
	struct kvsb_cluster cl = { 0 };
	/* [0]: plain, [1]: TLS (--tls) */
	kvsb_daemon *da[2] = { 0 }, *db[2] = { 0 };
	kvs_client *ca[2][MAX_SIZES] = { 0 }, *cb[2][MAX_SIZES] = { 0 };
	static rates v;
	char host[256] = "127.0.0.1", port[16] = "", tport[16] = "";
	uint8_t *src = NULL;
	unsigned bad = 0;
	int rc;

	(void)sock;
	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc == 1 ? 0 : 2;
	if (!o.seeds) {
		rc = kvsb_cluster_start(&cl, o.tls);
		if (rc == -ENOENT) {
			fprintf(stderr, "kvsbench: remote: no redis-server or no "
				"kvs-redis-cluster beside kvsbench: give --seeds\n");
			return 77;
		}
		KVSB_STEP("remote: ", "cluster start", rc);
		o.seeds = cl.seeds;
	}
	/* redis-benchmark's first node: the first seed */
	sscanf(o.seeds, "%255[^:]:%15[0-9]", host, port);
	if (o.tls && sscanf(cl.tls_seeds, "%*[^:]:%15[0-9]", tport) != 1) {
		fprintf(stderr, "kvsbench: remote: the cluster has no TLS ports\n");
		rc = -EPROTO;
		goto out;
	}
	rc = start_daemons(&o, &cl, da, db);
	if (rc < 0)
		goto out;
	src = make_src();
	if (!src) {
		rc = -ENOMEM;
		goto out;
	}
	for (int m = 0; m <= o.tls; m++)
		for (unsigned s = 0; s < o.nsizes; s++) {
			kvs_layout l = layout_of(o.sizes[s]);

			KVSB_STEP("remote: ", "connect A",
				  kvs_connect(kvsb_daemon_socket(da[m]), &l, &ca[m][s]));
			KVSB_STEP("remote: ", "connect B",
				  kvs_connect(kvsb_daemon_socket(db[m]), &l, &cb[m][s]));
		}
	printf("kvsbench remote: seeds %s, %u blocks per chain, %u reps after %u warm-up; "
	       "redis-benchmark --cluster -c %u -r %u -n %u or more (4 s a test)\n",
	       o.seeds, o.blocks, o.reps, o.warmup, o.clients, o.keys, 24 * o.keys);
	printf("%-4s %-9s %10s %10s %10s %10s\n", "rep", "size", "publish", "promote",
	       "rb SET", "rb GET");
	rc = run_reps(&o, &cl, ca, cb, host, port, tport, src, v, &bad);
	if (rc < 0)
		goto out;
	print_medians(&o, v);
	KVSB_STEP("remote: ", "long chains", long_chains(&o, &cl, da[0], db[0], src, &bad));
	if (bad) {
		fprintf(stderr, "kvsbench: remote: %u blocks read back wrong\n", bad);
		rc = -EBADMSG;
	}
out:
	for (int m = 0; m < 2; m++)
		for (unsigned s = 0; s < o.nsizes; s++) {
			kvs_close(ca[m][s]);
			kvs_close(cb[m][s]);
		}
	free(src);
	for (int m = 0; m < 2; m++)
		if (kvsb_daemon_stop(da[m]) < 0 || kvsb_daemon_stop(db[m]) < 0)
			rc = rc < 0 ? rc : -ECHILD;
	kvsb_cluster_stop(&cl);
	return rc < 0 ? 1 : 0;
}
