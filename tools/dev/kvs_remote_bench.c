/*
 * kvs-remote-bench - the remote engine's throughput
 * (storage/remote/kvs_remote.h) for large values, beside redis-benchmark's
 * GET/SET of values of the same size against the same cluster. Not a test:
 * a tool for docs/benchmarks.md until `kvsbench remote` measures the tier
 * through the daemon. It lives in tools/dev/ because kvsctl and kvsbench
 * may only see the public client API (as tools/dev/kvs_ssd_fill.c).
 *
 *   kvs-remote-bench [--seeds HOST:PORT,...] [--size BYTES] [--keys N]
 *                    [--window N] [--pool N] [--reps N] [--tls]
 *
 * Without --seeds it starts a private 3-master cluster on loopback
 * (tests/support/redis_cluster.c); --tls makes it a TLS-only one, and the engine
 * and redis-benchmark (--tls) talk TLS to it. Each rep: SET NX of --keys values (--window
 * requests in flight), then GET of all of them into caller buffers, each
 * compared with what was sent; then redis-benchmark --cluster -t set,get -d
 * SIZE -n KEYS -c WINDOW. redis-benchmark has no -r there: with random keys
 * most of its GETs would miss (tiny replies); without, all its requests go to
 * one key (one node), every GET a hit of SIZE bytes and every SET an
 * overwrite, while the engine SETs new keys over all nodes. Prints GB/s
 * (1e9 bytes/s of values) per rep and the medians' ratios.
 * Exit 0, 1 on an error, 77 without Redis.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvs_clock.h"
#include "kvs_remote.h"
#include "redis_cluster.h"

static struct {
	size_t size, keys, window;
	unsigned pool;
	int reps;
	const char *seeds;
	int tls;
} opt = { 1u << 20, 256, 16, 4, 3, NULL, 0 };
static char tls_ca[512], tls_cert[512], tls_key[512];

static size_t inflight, next, done, errors;
static uint8_t **bufs; /* one per window slot */
static uint8_t *val;

static void usage(void)
{
	fprintf(stderr, "usage: kvs-remote-bench [--seeds HOST:PORT,...] [--size BYTES]\n"
		"       [--keys N] [--window N] [--pool N] [--reps N] [--tls]\n");
}

static size_t key_of(char *k, size_t i)
{
	return (size_t)snprintf(k, 32, "bench:%zu", i);
}

static int submit(kvs_remote *r, int op, size_t slot)
{
	char k[32];
	size_t kl = key_of(k, next);
	struct iovec iov;
	int rc;

	/* each value differs in its first 8 bytes: a mix-up shows */
	if (op == KVS_REMOTE_SET) {
		memcpy(bufs[slot], val, opt.size);
		memcpy(bufs[slot], &next, sizeof(next));
		iov = (struct iovec){ bufs[slot], opt.size };
		rc = kvs_remote_set_nx(r, k, kl, &iov, 1, slot | (uint64_t)next << 16);
	} else {
		iov = (struct iovec){ bufs[slot], opt.size };
		rc = kvs_remote_get(r, k, kl, &iov, 1, slot | (uint64_t)next << 16);
	}
	if (rc == 0) {
		inflight++;
		next++;
	}
	return rc;
}

static int cur_op;

static void on_done(void *arg, const kvs_remote_cqe *c)
{
	kvs_remote *r = arg;
	size_t slot = c->cookie & 0xffff, i = c->cookie >> 16;

	inflight--;
	done++;
	if (c->res != 0)
		errors++;
	else if (cur_op == KVS_REMOTE_GET &&
		 (memcmp(bufs[slot], &i, sizeof(i)) != 0 ||
		  memcmp(bufs[slot] + 8, val + 8, opt.size - 8) != 0))
		errors++;
	if (next < opt.keys)
		submit(r, cur_op, slot);
}

/* One phase: every key once; GB/s, or <0 on errors. */
static double phase(kvs_remote *r, int op)
{
	double t0 = now_s(), t;

	cur_op = op;
	next = done = errors = inflight = 0;
	for (size_t s = 0; s < opt.window && next < opt.keys; s++)
		if (submit(r, op, s) < 0)
			return -1;
	while (done < opt.keys)
		if (kvs_remote_wait(r, 30000) < 0)
			return -1;
	t = now_s() - t0;
	if (errors) {
		fprintf(stderr, "kvs-remote-bench: %zu errors in %s\n", errors,
			op == KVS_REMOTE_SET ? "SET" : "GET");
		return -1;
	}
	return (double)opt.keys * (double)opt.size / t / 1e9;
}

/* redis-benchmark's SET and GET rates (requests/s) from its CSV, @n
 * requests each. */
static int redis_run(const char *host, int port, size_t n, double *set, double *get)
{
	char cmd[2400], line[512];
	FILE *f;

	char tls[1700] = "";

	if (opt.tls)
		snprintf(tls, sizeof(tls), " --tls --cacert '%s' --cert '%s' --key '%s'",
			 tls_ca, tls_cert, tls_key);
	snprintf(cmd, sizeof(cmd),
		 "redis-benchmark --cluster -h %s -p %d -t set,get -d %zu -n %zu "
		 "-c %zu --csv%s 2>/dev/null", host, port, opt.size, n,
		 opt.window, tls);
	f = popen(cmd, "r");
	if (!f)
		return -errno;
	*set = *get = 0;
	while (fgets(line, sizeof(line), f)) {
		double v;

		if (sscanf(line, "\"SET\",\"%lf\"", &v) == 1)
			*set = v;
		else if (sscanf(line, "\"GET\",\"%lf\"", &v) == 1)
			*get = v;
	}
	return pclose(f) == 0 && *set > 0 && *get > 0 ? 0 : -EIO;
}

/* redis_run with --keys requests, then more until each test lasts 4 s:
 * redis-benchmark ends a test on its 250 ms timer, so a short test's time
 * is rounded up (docs/remote.md, "Benchmark: kvsbench remote"). */
static int redis_benchmark(const char *host, int port, double *set, double *get)
{
	size_t n = opt.keys;

	for (;;) {
		int rc = redis_run(host, port, n, set, get);
		double shortest;

		if (rc < 0)
			return rc;
		shortest = (double)n / (*set > *get ? *set : *get);
		if (shortest >= 4.0 || n >= (size_t)1 << 24)
			return 0;
		n = (size_t)((double)n * 4.8 / shortest) + 1;
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The command line into opt. 0: run; 1: --help; 2: a usage error (usage
 * printed either way). */
static int parse_opts(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "seeds", required_argument, NULL, 's' },
		{ "size", required_argument, NULL, 'd' },
		{ "keys", required_argument, NULL, 'n' },
		{ "window", required_argument, NULL, 'w' },
		{ "pool", required_argument, NULL, 'p' },
		{ "reps", required_argument, NULL, 'r' },
		{ "tls", no_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 } };
	int ch;

	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 's': opt.seeds = optarg; break;
		case 'd': opt.size = strtoull(optarg, NULL, 0); break;
		case 'n': opt.keys = strtoull(optarg, NULL, 0); break;
		case 'w': opt.window = strtoull(optarg, NULL, 0); break;
		case 'p': opt.pool = (unsigned)atoi(optarg); break;
		case 'r': opt.reps = atoi(optarg); break;
		case 't': opt.tls = 1; break;
		default: usage(); return ch == 'h' ? 1 : 2;
		}
	}
	if (opt.size < 16 || !opt.keys || !opt.window || opt.window > 0xffff ||
	    opt.reps < 1 || opt.reps > 16 || (opt.tls && opt.seeds)) {
		usage();
		return 2;
	}
	return 0;
}

/* A private 3-master cluster into *@c, its seeds into opt (and with --tls
 * its CA and client certificate). 0, 77 (no redis-server: said) or 1. */
static int start_cluster(rc_cluster **c)
{
	int rc = rc_start(&(rc_opts){ .masters = 3, .tls = opt.tls }, c);

	if (rc == -ENOENT) {
		printf("kvs-remote-bench: SKIP: %s\n", rc_why());
		return 77;
	}
	if (rc < 0) {
		fprintf(stderr, "kvs-remote-bench: cluster start failed: %s\n",
			strerror(-rc));
		return 1;
	}
	opt.seeds = rc_seeds(*c);
	if (opt.tls) {
		snprintf(tls_ca, sizeof(tls_ca), "%s", rc_tls_file(*c, "ca.crt"));
		snprintf(tls_cert, sizeof(tls_cert), "%s", rc_tls_file(*c, "client.crt"));
		snprintf(tls_key, sizeof(tls_key), "%s", rc_tls_file(*c, "client.key"));
	}
	return 0;
}

/* A remote engine on opt's seeds, open, into *@out. */
static int open_remote(kvs_remote **out)
{
	kvs_remote *r;
	int rc = kvs_remote_create(&r);

	if (rc < 0)
		return rc;
	kvs_remote_set_seeds(r, opt.seeds);
	kvs_remote_set_pool(r, opt.pool);
	kvs_remote_set_timeout_ms(r, 30000);
	kvs_remote_set_callback(r, on_done, r);
	if (opt.tls)
		rc = kvs_remote_set_tls(r, &(struct kvs_remote_tls){ .ca_file = tls_ca });
	if (rc == 0)
		rc = kvs_remote_open(r);
	if (rc < 0) {
		kvs_remote_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

/* One repetition: the engine's SETs then GETs on a clean keyspace (@c's
 * nodes flushed when it is the private cluster), then redis-benchmark's;
 * GB/s into @rs (engine) and @rr (redis-benchmark), [0] SET, [1] GET. */
static int one_rep(rc_cluster *c, const char *host, int port, double rs[2], double rr[2])
{
	double s_rps = 0, g_rps = 0;
	kvs_remote *r;
	int rc = open_remote(&r);

	if (rc < 0) {
		fprintf(stderr, "kvs-remote-bench: open failed: %s\n", strerror(-rc));
		return -1;
	}
	/* a clean keyspace each rep: SET NX must store */
	for (int i = 0; c && i < rc_nodes(c); i++)
		rc_cli(c, i, NULL, 0, "FLUSHALL", NULL);
	rs[0] = phase(r, KVS_REMOTE_SET);
	rs[1] = phase(r, KVS_REMOTE_GET);
	kvs_remote_close(r);
	if (rs[0] < 0 || rs[1] < 0)
		return -1;
	if (redis_benchmark(host, port, &s_rps, &g_rps) < 0) {
		fprintf(stderr, "kvs-remote-bench: redis-benchmark failed\n");
		return -1;
	}
	rr[0] = s_rps * (double)opt.size / 1e9;
	rr[1] = g_rps * (double)opt.size / 1e9;
	return 0;
}

int main(int argc, char **argv)
{
	double rs[2][16], rr[2][16];
	rc_cluster *c = NULL;
	char host[64] = "127.0.0.1";
	int port = 0, rc;

	rc = parse_opts(argc, argv);
	if (rc)
		return rc == 1 ? 0 : 2;
	if (!opt.seeds && (rc = start_cluster(&c)) != 0)
		return rc;
	sscanf(opt.seeds, "%63[^:]:%d", host, &port);
	val = malloc(opt.size);
	bufs = calloc(opt.window, sizeof(*bufs));
	for (size_t i = 0; i < opt.size; i++)
		val[i] = (uint8_t)(i * 131 + 7);
	for (size_t s = 0; s < opt.window; s++)
		bufs[s] = malloc(opt.size);
	printf("kvs-remote-bench: seeds %s%s%s, values %zu B, %zu keys, window %zu, "
	       "pool %u per node\n", opt.seeds, c ? " (private 3-master cluster)" : "",
	       opt.tls ? ", TLS" : "", opt.size, opt.keys, opt.window, opt.pool);
	printf("rep  engine_SET_GB/s  redis_SET_GB/s  engine_GET_GB/s  redis_GET_GB/s\n");
	for (int rep = 0; rep < opt.reps; rep++) {
		double s2[2], r2[2];

		if (one_rep(c, host, port, s2, r2) < 0)
			return 1;
		for (int k = 0; k < 2; k++) {
			rs[k][rep] = s2[k];
			rr[k][rep] = r2[k];
		}
		printf("%3d  %15.2f  %14.2f  %15.2f  %14.2f\n", rep, rs[0][rep],
		       rr[0][rep], rs[1][rep], rr[1][rep]);
	}
	for (int k = 0; k < 2; k++) {
		qsort(rs[k], (size_t)opt.reps, sizeof(double), cmp_double);
		qsort(rr[k], (size_t)opt.reps, sizeof(double), cmp_double);
	}
	printf("median: SET %.2f vs %.2f GB/s (ratio %.2f), GET %.2f vs %.2f GB/s "
	       "(ratio %.2f)\n", rs[0][opt.reps / 2], rr[0][opt.reps / 2],
	       rs[0][opt.reps / 2] / rr[0][opt.reps / 2], rs[1][opt.reps / 2],
	       rr[1][opt.reps / 2], rs[1][opt.reps / 2] / rr[1][opt.reps / 2]);
	rc_stop(c);
	for (size_t s = 0; s < opt.window; s++)
		free(bufs[s]);
	free(bufs);
	free(val);
	return 0;
}
