/*
 * bench_ssd.c - kvsbench ssd (contract in bench_ssd.h), on the public client
 * API and a private kvshared (bench_proc.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_proc.h"
#include "bench_ssd.h"
#include "bench_util.h"
#include "kvs_size.h"
#include "kvshare.h"

#define SSD_MAX_REPS 50
#define SSD_MAX_CLIENTS 64
#define SSD_MAX_TOTAL 1000000000000000ull /* --bytes, at most 1e15 */
#define SSD_SEGMENT (256ull << 20)
#define SSD_STAGING_CAP (192ull << 20) /* under the tier's 256 MiB */
#define SSD_TOKEN_SEED 0x7373642d62656e63ull

struct ssd_opts {
	const char *dir;
	const char *baseline; /* a second kvshared to measure beside, or NULL */
	uint64_t block, total;
	unsigned qd, reps, clients;
	int json;
};

#define SSD_BUILDS 2 /* [0] this build's kvshared, [1] --baseline */

/* Everything a repetition and its clients need (read-only in clients). */
struct ssd_ctx {
	const struct ssd_opts *o;
	const char *sock;
	kvs_layout layout;
	kvs_hash *h;          /* nchains * qd hashes */
	unsigned nchains;     /* chains published */
	unsigned promote_n;   /* chains 0..promote_n-1 are looked up again */
};

struct ssd_client_res {
	double t0, t1;
	uint64_t hits, bad;
};

struct ssd_row {
	double demote, promote;          /* GB/s */
	double fio_w, fio_r;             /* GB/s, < 0: n/a */
	int64_t rejected, io_errors, promote_writes;
	int64_t direct, staged;          /* demotion writes by path, -1: n/a */
	uint64_t demoted_bytes, promoted_bytes, missing, bad;
};

/* Between two polls of the daemon's stats: short next to one block's write,
 * long enough that polling does not take the daemon's loop from its I/O. */
static void nap(void)
{
	struct timespec ts = { 0, 200000 };

	nanosleep(&ts, NULL);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The median of the figures >= 0 in @v, and their smallest and largest
 * (the spread); -1 each when there are none. */
static double median(const double *v, unsigned n, double *lo, double *hi)
{
	double s[SSD_MAX_REPS];
	unsigned m = 0;

	for (unsigned i = 0; i < n; i++)
		if (v[i] >= 0)
			s[m++] = v[i];
	*lo = *hi = -1;
	if (m == 0)
		return -1;
	qsort(s, m, sizeof(*s), cmp_double);
	*lo = s[0];
	*hi = s[m - 1];
	return m % 2 ? s[m / 2] : (s[m / 2 - 1] + s[m / 2]) / 2;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: kvsbench ssd [--dir DIR] [--block-bytes B] [--qd N] "
		"[--bytes TOTAL]\n"
		"                    [--clients C] [--reps R] [--baseline KVSHARED] "
		"[--json]\n"
		"  --dir DIR          where the SSD tier and fio's file go "
		"(default $TMPDIR or /var/tmp)\n"
		"  --block-bytes B    block size, a multiple of 4K (default 1M)\n"
		"  --qd N             the tier's and fio's queue depth; also the "
		"chain length (default 32)\n"
		"  --bytes TOTAL      bytes demoted per repetition (default 1G)\n"
		"  --clients C        promoting clients (default 2)\n"
		"  --reps R           repetitions, kvshare and fio interleaved "
		"(default 5)\n"
		"  --baseline PATH    also measure this kvshared (another build) in "
		"every\n"
		"                     repetition, interleaved with this build's and "
		"fio\n"
		"  --json             one JSON object instead of the table\n");
}

static int parse_unsigned(const char *opt, const char *s, unsigned min,
			  unsigned max, unsigned *out)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (*s == '\0' || *end || v < min || v > max) {
		fprintf(stderr, "kvsbench: ssd: --%s must be %u..%u\n", opt, min, max);
		return 1;
	}
	*out = (unsigned)v;
	return 0;
}

static int64_t stat_of(kvs_client *ctl, const char *name)
{
	char *text = NULL;
	int64_t v = -1;

	if (kvs_stats(ctl, &text) == 0)
		kvs_stats_value(text, name, &v);
	free(text);
	return v;
}

typedef struct snap {
	int64_t written, read, rejected, io_errors, demotions;
	int64_t direct, staged; /* -1: the daemon has no such counter */
} snap;

static int snap_take(kvs_client *ctl, snap *s)
{
	char *text = NULL;
	int rc = kvs_stats(ctl, &text);

	if (rc < 0)
		return rc;
	if (kvs_stats_value(text, "tier_ssd.bytes_written", &s->written) < 0 ||
	    kvs_stats_value(text, "tier_ssd.bytes_read", &s->read) < 0 ||
	    kvs_stats_value(text, "tier_ssd.admission_rejected", &s->rejected) < 0 ||
	    kvs_stats_value(text, "tier_ssd.io_errors", &s->io_errors) < 0 ||
	    kvs_stats_value(text, "tier_ssd.demotions", &s->demotions) < 0)
		rc = -ENOENT;
	if (kvs_stats_value(text, "tier_ssd.writes_direct", &s->direct) < 0 ||
	    kvs_stats_value(text, "tier_ssd.writes_staged", &s->staged) < 0)
		s->direct = s->staged = -1; /* a build before they were counted */
	free(text);
	return rc;
}

/* A block's bytes: its hash, then one byte of it repeated. Cheap to write
 * and to check, and different for every block. */
static void stamp(uint8_t *p, uint64_t n, kvs_hash h)
{
	memset(p, (int)(h.lo & 0xff), n);
	memcpy(p, &h, sizeof(h));
}

static int stamp_ok(const uint8_t *p, uint64_t n, kvs_hash h)
{
	return memcmp(p, &h, sizeof(h)) == 0 && p[n - 1] == (uint8_t)(h.lo & 0xff) &&
	       p[n / 2] == (uint8_t)(h.lo & 0xff);
}

/* ---- demote ------------------------------------------------------------- */

static int demote(const struct ssd_ctx *x, kvs_client *ctl, double *secs)
{
	const struct ssd_opts *o = x->o;
	kvs_client *c = NULL;
	kvs_block *b = calloc(o->qd, sizeof(*b));
	uint64_t cap = SSD_STAGING_CAP / o->block;
	double t0 = -1, tc;
	int rc;

	if (cap > 2ull * o->qd)
		cap = 2ull * o->qd;
	if (cap < 1)
		cap = 1;
	rc = b ? kvs_connect(x->sock, &x->layout, &c) : -ENOMEM;
	if (rc < 0)
		goto out;
	for (unsigned i = 0; i < x->nchains; i++) {
		const kvs_hash *h = x->h + (size_t)i * o->qd;
		kvs_lease lease;
		int64_t inflight;

		tc = now_s();
		rc = kvs_reserve(c, h, o->qd, &lease, b);
		if (rc < 0)
			goto out;
		for (unsigned j = 0; j < o->qd; j++)
			if (b[j].status == KVS_BLOCK_NEW)
				stamp(kvs_block_ptr(c, &b[j]), o->block, h[j]);
		rc = kvs_commit(c, lease);
		if (rc < 0)
			goto out;
		/* The clock starts with the chain whose reserve made the first
		 * eviction: filling the empty host tier before it is not
		 * demotion (and fio has no such phase). */
		if (t0 < 0 && stat_of(ctl, "tier_ssd.demotions") > 0)
			t0 = tc;
		while ((inflight = stat_of(ctl, "tier_ssd.writes_inflight")) >
		       (int64_t)cap)
			nap();
		if (inflight < 0) {
			rc = -EIO;
			goto out;
		}
	}
	while ((rc = (int)stat_of(ctl, "tier_ssd.writes_inflight")) > 0)
		nap();
	if (t0 < 0) {
		fprintf(stderr, "kvsbench: ssd: nothing was demoted\n");
		rc = -ENODATA;
		goto out;
	}
	*secs = now_s() - t0;
out:
	if (rc < 0)
		fprintf(stderr, "kvsbench: ssd: demote failed: %s\n", kvs_strerror(rc));
	kvs_close(c);
	free(b);
	return rc < 0 ? rc : 0;
}

/* ---- promote ------------------------------------------------------------ */

static int promote_client(const void *ctxp, unsigned idx, kvsb_gate *g, void *resp)
{
	const struct ssd_ctx *x = ctxp;
	const struct ssd_opts *o = x->o;
	struct ssd_client_res *res = resp;
	kvs_block *b = calloc(o->qd, sizeof(*b));
	kvs_client *c = NULL;
	int rc = b ? kvs_connect(x->sock, &x->layout, &c) : -ENOMEM;

	kvsb_gate_wait(g);
	if (rc < 0)
		goto out;
	res->t0 = now_s();
	for (unsigned i = idx; i < x->promote_n; i += o->clients) {
		const kvs_hash *h = x->h + (size_t)i * o->qd;
		kvs_lease lease;
		int n = kvs_lookup(c, h, o->qd, &lease, b);

		if (n < 0) {
			rc = n;
			goto out;
		}
		res->hits += (uint64_t)n;
		for (int j = 0; j < n; j++) {
			const uint8_t *p = kvs_block_ptr(c, &b[j]);

			if (!p || !stamp_ok(p, o->block, h[j]))
				res->bad++;
		}
		rc = kvs_release(c, lease);
		if (rc < 0)
			goto out;
	}
	res->t1 = now_s();
out:
	if (rc < 0)
		fprintf(stderr, "kvsbench: ssd: client %u: %s\n", idx, kvs_strerror(rc));
	kvs_close(c);
	free(b);
	return rc < 0 ? rc : 0;
}

static int promote(const struct ssd_ctx *x, double *secs, uint64_t *hits,
		   uint64_t *bad)
{
	unsigned n = x->o->clients;
	struct ssd_client_res *res = calloc(n, sizeof(*res));
	double t0 = 1e300, t1 = 0;
	int failed;

	if (!res)
		return -ENOMEM;
	failed = kvsb_clients_run(n, promote_client, x, res, sizeof(*res));
	*hits = *bad = 0;
	for (unsigned i = 0; i < n; i++) {
		if (res[i].t0 > 0 && res[i].t0 < t0)
			t0 = res[i].t0;
		if (res[i].t1 > t1)
			t1 = res[i].t1;
		*hits += res[i].hits;
		*bad += res[i].bad;
	}
	free(res);
	*secs = t1 - t0;
	return failed != 0 || t1 <= t0 ? -EIO : 0;
}

/* ---- fio ---------------------------------------------------------------- */

/* Whether fio is on $PATH. */
static int fio_found(void)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	while (path && *path) {
		size_t n = strcspn(path, ":");

		if (n && n + 5 < sizeof(buf)) {
			snprintf(buf, sizeof(buf), "%.*s/fio", (int)n, path);
			if (access(buf, X_OK) == 0)
				return 1;
		}
		path += n + (path[n] == ':');
	}
	return 0;
}

/* One fio job; returns GB/s or -1 (why in @why). */
static double fio_run(const struct ssd_opts *o, const char *file, const char *rw,
		      char *why, size_t whylen)
{
	char cmd[PATH_MAX + 512], key[32], *out = NULL, *p;
	size_t len = 0, cap = 0;
	double bw = -1;
	FILE *f;
	int st;

	snprintf(cmd, sizeof(cmd),
		 "fio --name=kvsbench --ioengine=io_uring --direct=1 --rw=%s "
		 "--bs=%" PRIu64 " --iodepth=%u --size=%" PRIu64
		 " --filename='%s' --output-format=json 2>&1",
		 rw, o->block, o->qd, o->total, file);
	fflush(NULL);
	f = popen(cmd, "r");
	if (!f) {
		snprintf(why, whylen, "popen: %s", strerror(errno));
		return -1;
	}
	for (;;) {
		if (cap - len < 4096) {
			char *n = realloc(out, cap + 65536);

			if (!n)
				break;
			out = n;
			cap += 65536;
		}
		size_t got = fread(out + len, 1, cap - len - 1, f);

		if (got == 0)
			break;
		len += got;
	}
	st = pclose(f);
	if (!out) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	out[len] = '\0';
	/* "read" : { "io_bytes" : .., "io_kbytes" : .., "bw_bytes" : N, */
	snprintf(key, sizeof(key), "\"%s\" : {", strcmp(rw, "write") ? "read" : "write");
	p = strstr(out, key);
	p = p ? strstr(p, "\"bw_bytes\" : ") : NULL;
	if (st == 0 && p)
		bw = strtod(p + 13, NULL) / 1e9;
	else
		snprintf(why, whylen, "fio --rw=%s failed (status %d): %.80s", rw,
			 st, out);
	free(out);
	return bw;
}

/* ---- one repetition ----------------------------------------------------- */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path) < 0 ? -1 : 0;
}

static int run_ours(struct ssd_ctx *x, const char *bin, const char *ssd_dir,
		    struct ssd_row *row)
{
	const struct ssd_opts *o = x->o;
	char host[32], seg[32], size[32], qd[16];
	uint64_t ssd = (o->total / SSD_SEGMENT + 3) * SSD_SEGMENT;
	uint64_t hostb = (uint64_t)(o->clients + 2) * o->qd * o->block * 5 / 4 +
			 (32u << 20);
	const char *args[] = { "--host-size", host, "--ssd-dir", ssd_dir,
			       "--ssd-segment", seg, "--ssd-size", size,
			       "--ssd-queue-depth", qd, "--log-level", "warn", NULL };
	kvsb_daemon *d = NULL;
	kvs_client *ctl = NULL;
	snap s0, s1, s2;
	double dsecs = 0, psecs = 0;
	uint64_t hits = 0, bad = 0;
	int rc;

	snprintf(host, sizeof(host), "%" PRIu64 "M", (hostb + (1u << 20) - 1) >> 20);
	snprintf(seg, sizeof(seg), "%" PRIu64, (uint64_t)SSD_SEGMENT);
	snprintf(size, sizeof(size), "%" PRIu64, ssd);
	snprintf(qd, sizeof(qd), "%u", o->qd);
	/* Chains still in RAM after the fill are not looked up: their
	 * promotion would be a RAM hit. */
	x->promote_n = x->nchains - (unsigned)((hostb / o->block) / o->qd + 1);
	if (mkdir(ssd_dir, 0700) < 0)
		return -errno;
	rc = kvsb_daemon_start_exe(bin, args, 60.0, &d);
	if (rc < 0) {
		fprintf(stderr, "kvsbench: ssd: starting kvshared failed: %s\n",
			kvs_strerror(rc));
		goto out;
	}
	x->sock = kvsb_daemon_socket(d);
	rc = kvs_connect(x->sock, NULL, &ctl);
	if (rc == 0)
		rc = snap_take(ctl, &s0);
	if (rc == 0)
		rc = demote(x, ctl, &dsecs);
	if (rc == 0)
		rc = snap_take(ctl, &s1);
	if (rc == 0)
		rc = promote(x, &psecs, &hits, &bad);
	if (rc == 0)
		rc = snap_take(ctl, &s2);
	if (rc < 0)
		goto out;
	row->demoted_bytes = (uint64_t)(s1.written - s0.written);
	row->promoted_bytes = (uint64_t)(s2.read - s1.read);
	row->demote = (double)row->demoted_bytes / dsecs / 1e9;
	row->promote = (double)row->promoted_bytes / psecs / 1e9;
	row->rejected = s2.rejected - s0.rejected;
	row->io_errors = s2.io_errors - s0.io_errors;
	row->promote_writes = s2.written - s1.written;
	row->direct = s2.direct < 0 ? -1 : s2.direct - s0.direct;
	row->staged = s2.staged < 0 ? -1 : s2.staged - s0.staged;
	row->missing = (uint64_t)x->promote_n * o->qd - hits;
	row->bad = bad;
	if (bad)
		fprintf(stderr, "kvsbench: ssd: %" PRIu64 " blocks read back "
			"wrong\n", bad);
out:
	kvs_close(ctl);
	if (d && kvsb_daemon_stop(d) < 0 && rc == 0)
		rc = -ECHILD;
	nftw(ssd_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return rc;
}

static void run_fio(const struct ssd_opts *o, const char *file, struct ssd_row *row,
		    char *why, size_t whylen)
{
	row->fio_w = fio_run(o, file, "write", why, whylen);
	row->fio_r = row->fio_w < 0 ? -1 : fio_run(o, file, "read", why, whylen);
	unlink(file);
}

/* ---- output -------------------------------------------------------------- */

/* The columns of one build, per repetition: GB/s and ratios to fio. */
enum { C_DEMOTE, C_PROMOTE, C_DRATIO, C_PRATIO, C_N };

static void fmt(char *buf, size_t n, double v, int ratio)
{
	if (v < 0)
		snprintf(buf, n, "n/a");
	else
		snprintf(buf, n, ratio ? "%.2f" : "%.3f", v);
}

static double ratio(double a, double b)
{
	return a >= 0 && b > 0 ? a / b : -1;
}

static void print_row(const char *label, const char *build, const struct ssd_row *row)
{
	char c[4][16], r[2][16], paths[48] = "";

	fmt(c[0], 16, row->demote, 0);
	fmt(c[1], 16, row->fio_w, 0);
	fmt(c[2], 16, row->promote, 0);
	fmt(c[3], 16, row->fio_r, 0);
	fmt(r[0], 16, ratio(row->demote, row->fio_w), 1);
	fmt(r[1], 16, ratio(row->promote, row->fio_r), 1);
	if (row->direct >= 0)
		snprintf(paths, sizeof(paths), "%" PRId64 "/%" PRId64, row->direct,
			 row->staged);
	else
		snprintf(paths, sizeof(paths), "n/a");
	printf("%-4s %-5s %11s %11s %6s %11s %11s %6s %13s\n", label, build, c[0],
	       c[1], r[0], c[2], c[3], r[1], paths);
}

/* "median (min-max)" of @v, or n/a. */
static void fmt_spread(char *buf, size_t n, const double *v, unsigned reps, int ratio)
{
	double lo, hi, m = median(v, reps, &lo, &hi);

	if (m < 0)
		snprintf(buf, n, "n/a");
	else
		snprintf(buf, n, ratio ? "%.2f (%.2f-%.2f)" : "%.3f (%.3f-%.3f)",
			 m, lo, hi);
}

static void json_num(const char *key, double v, const char *sep)
{
	if (v < 0)
		printf("\"%s\":null%s", key, sep);
	else
		printf("\"%s\":%.4f%s", key, v, sep);
}

/* "KEY":median,"KEY_min":lo,"KEY_max":hi */
static void json_spread(const char *key, const double *v, unsigned reps, const char *sep)
{
	char k[64];
	double lo, hi, m = median(v, reps, &lo, &hi);

	json_num(key, m, ",");
	snprintf(k, sizeof(k), "%s_min", key);
	json_num(k, lo, ",");
	snprintf(k, sizeof(k), "%s_max", key);
	json_num(k, hi, sep);
}

int kvsb_cmd_ssd(const char *sock, int argc, char **argv)
{
	enum { O_JSON = 256, O_BASELINE };
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "block-bytes", required_argument, NULL, 'b' },
		{ "qd", required_argument, NULL, 'q' },
		{ "bytes", required_argument, NULL, 't' },
		{ "clients", required_argument, NULL, 'c' },
		{ "reps", required_argument, NULL, 'r' },
		{ "baseline", required_argument, NULL, O_BASELINE },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const names[SSD_BUILDS] = { "this", "base" };
	const char *tmp = getenv("TMPDIR");
	struct ssd_opts o = { .dir = tmp && *tmp ? tmp : "/var/tmp",
			      .block = 1u << 20, .total = 1ull << 30, .qd = 32,
			      .reps = 5, .clients = 2 };
	static struct ssd_row rows[SSD_MAX_REPS][SSD_BUILDS];
	struct ssd_ctx x = { .o = &o };
	char base[PATH_MAX], ssd_dir[PATH_MAX + 16], file[PATH_MAX + 16];
	char fio_why[256] = "";
	static double v[SSD_BUILDS][C_N][SSD_MAX_REPS];
	double fw[SSD_MAX_REPS], fr[SSD_MAX_REPS];
	double pair[2][SSD_MAX_REPS]; /* this / base in one repetition */
	int opt, bad = 0, rc = 0, have_fio;
	unsigned nbuilds, units;
	uint32_t *tok = NULL;
	uint64_t blocks;

	while ((opt = getopt_long(argc, argv, "d:b:q:t:c:r:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'd': o.dir = optarg; break;
		case 'b':
			if (kvs_parse_size(optarg, &o.block) < 0 || (o.block & 4095) ||
			    o.block > (256u << 20)) {
				fprintf(stderr, "kvsbench: ssd: --block-bytes must "
					"be a multiple of 4K up to 256M\n");
				bad = 1;
			}
			break;
		case 'q': bad |= parse_unsigned("qd", optarg, 1, 4096, &o.qd); break;
		case 't':
			if (kvs_parse_size(optarg, &o.total) < 0 || o.total > SSD_MAX_TOTAL) {
				fprintf(stderr, "kvsbench: ssd: --bytes: not a size\n");
				bad = 1;
			}
			break;
		case 'c': bad |= parse_unsigned("clients", optarg, 1, SSD_MAX_CLIENTS, &o.clients); break;
		case 'r': bad |= parse_unsigned("reps", optarg, 1, SSD_MAX_REPS, &o.reps); break;
		case O_BASELINE:
			if (access(optarg, X_OK) < 0) {
				fprintf(stderr, "kvsbench: ssd: --baseline %s: %s\n",
					optarg, strerror(errno));
				bad = 1;
			}
			o.baseline = optarg;
			break;
		case O_JSON: o.json = 1; break;
		case 'h': usage(); return 0;
		default: usage(); return 2;
		}
	}
	if (bad || optind < argc) {
		usage();
		return 2;
	}
	if (sock) {
		fprintf(stderr, "kvsbench: ssd: starts its own kvshared (it needs "
			"--ssd-dir); --socket is not used\n");
		return 2;
	}
	nbuilds = o.baseline ? 2 : 1;
	x.layout = (kvs_layout){ .model = "kvsbench-ssd", .layers = 1,
				 .kv_heads = 1, .block_tokens = 16,
				 .head_dim = (uint32_t)(o.block / 64),
				 .tp_size = 1, .dtype = KVS_DTYPE_FP16 };
	/* Enough chains that at least 4 host tiers' worth is demoted. */
	blocks = o.total / o.block;
	x.nchains = (unsigned)(blocks / o.qd);
	if (x.nchains < (o.clients + 2) * 5 + 2) {
		fprintf(stderr, "kvsbench: ssd: --bytes too small: at least %u "
			"chains of --qd blocks are needed\n", (o.clients + 2) * 5 + 2);
		return 2;
	}
	o.total = (uint64_t)x.nchains * o.qd * o.block;
	x.h = calloc((size_t)x.nchains * o.qd, sizeof(*x.h));
	tok = calloc((size_t)o.qd * 16, sizeof(*tok));
	if (!x.h || !tok) {
		fprintf(stderr, "kvsbench: ssd: out of memory\n");
		return 1;
	}
	for (unsigned i = 0; i < x.nchains; i++) {
		uint64_t s = SSD_TOKEN_SEED + i * 0x9e3779b97f4a7c15ull;

		for (unsigned j = 0; j < o.qd * 16; j++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			tok[j] = (uint32_t)(s % 128256);
		}
		kvs_hash_chain(kvs_hash_layout_seed(&x.layout), 16, tok,
			       (size_t)o.qd * 16, x.h + (size_t)i * o.qd, o.qd);
	}
	free(tok);
	snprintf(base, sizeof(base), "%s/kvsbench-ssd.XXXXXX", o.dir);
	if (!mkdtemp(base)) {
		fprintf(stderr, "kvsbench: ssd: mkdtemp in %s failed: %s\n", o.dir,
			strerror(errno));
		free(x.h);
		return 1;
	}
	snprintf(ssd_dir, sizeof(ssd_dir), "%s/ssd", base);
	snprintf(file, sizeof(file), "%s/fio.dat", base);
	have_fio = fio_found();
	if (!have_fio)
		snprintf(fio_why, sizeof(fio_why), "fio not found on PATH");
	if (!o.json) {
		printf("kvsbench ssd: %s, blocks of %" PRIu64 " KiB, queue depth %u, "
		       "%.2f GiB per run, %u promoting client(s), %u reps, "
		       "rotating order%s%s\n", o.dir, o.block >> 10, o.qd,
		       (double)o.total / (1u << 30), o.clients, o.reps,
		       o.baseline ? ", base = " : "", o.baseline ? o.baseline : "");
		printf("%-4s %-5s %11s %11s %6s %11s %11s %6s %13s\n", "rep",
		       "build", "demote_GB/s", "fio_w_GB/s", "ratio", "promo_GB/s",
		       "fio_r_GB/s", "ratio", "direct/staged");
	}
	/* Each repetition runs fio and every build once; the order rotates
	 * (repetition r starts with unit r mod units), so that none of them
	 * always runs first, or always right after fio. */
	units = nbuilds + 1;
	for (unsigned r = 0; r < o.reps && rc == 0; r++) {
		struct ssd_row fio = { .fio_w = -1, .fio_r = -1 };

		for (unsigned k = 0; k < units && rc == 0; k++) {
			unsigned u = (r + k) % units;

			if (u == nbuilds) {
				if (have_fio)
					run_fio(&o, file, &fio, fio_why, sizeof(fio_why));
				continue;
			}
			memset(&rows[r][u], 0, sizeof(rows[r][u]));
			rc = run_ours(&x, u ? o.baseline : NULL, ssd_dir, &rows[r][u]);
		}
		if (rc < 0)
			break;
		fw[r] = fio.fio_w;
		fr[r] = fio.fio_r;
		pair[0][r] = ratio(rows[r][0].demote, rows[r][1].demote);
		pair[1][r] = ratio(rows[r][0].promote, rows[r][1].promote);
		for (unsigned b = 0; b < nbuilds; b++) {
			struct ssd_row *row = &rows[r][b];
			char label[16];

			row->fio_w = fio.fio_w;
			row->fio_r = fio.fio_r;
			v[b][C_DEMOTE][r] = row->demote;
			v[b][C_PROMOTE][r] = row->promote;
			v[b][C_DRATIO][r] = ratio(row->demote, row->fio_w);
			v[b][C_PRATIO][r] = ratio(row->promote, row->fio_r);
			if (row->bad)
				rc = -EBADMSG;
			if (o.json)
				continue;
			snprintf(label, sizeof(label), "%u", r + 1);
			print_row(label, names[b], row);
			if (row->rejected || row->io_errors || row->missing ||
			    row->bad || row->promote_writes)
				printf("           (rejected %" PRId64 ", io_errors %"
				       PRId64 ", blocks not found %" PRIu64
				       ", wrong %" PRIu64 ", bytes written while "
				       "promoting %" PRId64 ")\n", row->rejected,
				       row->io_errors, row->missing, row->bad,
				       row->promote_writes);
		}
		fflush(stdout);
	}
	rmdir(base);
	free(x.h);
	if (rc < 0)
		return 1;
	if (o.json) {
		printf("{\"block_bytes\":%" PRIu64 ",\"qd\":%u,\"bytes\":%" PRIu64
		       ",\"clients\":%u,\"reps\":%u,", o.block, o.qd, o.total,
		       o.clients, o.reps);
		json_spread("fio_write_gbps", fw, o.reps, ",");
		json_spread("fio_read_gbps", fr, o.reps, ",");
		for (unsigned b = 0; b < nbuilds; b++) {
			/* This build's figures at the top level, as before. */
			if (b)
				printf("\"baseline\":{");
			json_spread("demote_gbps", v[b][C_DEMOTE], o.reps, ",");
			json_spread("demote_ratio", v[b][C_DRATIO], o.reps, ",");
			json_spread("promote_gbps", v[b][C_PROMOTE], o.reps, ",");
			json_spread("promote_ratio", v[b][C_PRATIO], o.reps, b ? "}," : ",");
		}
		if (nbuilds > 1) {
			json_spread("demote_vs_baseline", pair[0], o.reps, ",");
			json_spread("promote_vs_baseline", pair[1], o.reps, ",");
		}
		if (fio_why[0]) {
			printf("\"fio_na\":\"");
			for (const char *p = fio_why; *p; p++)
				if (*p >= 0x20 && *p != '"' && *p != '\\')
					putchar(*p);
			printf("\"}\n");
		} else {
			printf("\"fio_na\":null}\n");
		}
		return 0;
	}
	printf("median (min-max) of %u reps:\n", o.reps);
	for (unsigned b = 0; b < nbuilds; b++) {
		char d[40], dr[40], p[40], pr[40];

		fmt_spread(d, sizeof(d), v[b][C_DEMOTE], o.reps, 0);
		fmt_spread(dr, sizeof(dr), v[b][C_DRATIO], o.reps, 1);
		fmt_spread(p, sizeof(p), v[b][C_PROMOTE], o.reps, 0);
		fmt_spread(pr, sizeof(pr), v[b][C_PRATIO], o.reps, 1);
		printf("  %-5s demote %s GB/s, x fio %s; promote %s GB/s, x fio %s\n",
		       names[b], d, dr, p, pr);
	}
	{
		char w[40], rd[40];

		fmt_spread(w, sizeof(w), fw, o.reps, 0);
		fmt_spread(rd, sizeof(rd), fr, o.reps, 0);
		printf("  fio   write %s GB/s; read %s GB/s\n", w, rd);
		if (nbuilds > 1) {
			/* Paired in one repetition, so the machine's load
			 * cancels more than in the ratios to fio. */
			fmt_spread(w, sizeof(w), pair[0], o.reps, 1);
			fmt_spread(rd, sizeof(rd), pair[1], o.reps, 1);
			printf("  this / base in the same repetition: demote %s; "
			       "promote %s\n", w, rd);
		}
	}
	printf("ratio = kvshare / fio in the same repetition; direct/staged = "
	       "demotion writes from the arena / through a staging copy\n");
	if (fio_why[0])
		printf("fio: n/a (%s)\n", fio_why);
	return 0;
}
