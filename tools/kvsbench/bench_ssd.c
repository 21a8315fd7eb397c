/*
 * bench_ssd.c - kvsbench ssd (contract in bench_ssd.h), on the public client
 * API and a private kvshared (bench_proc.h): one repetition of a build
 * (demote, then promote), and fio beside it. The options, the repetitions
 * and the report: bench_ssd_cmd.c.
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
#include "bench_ssd_int.h"
#include "bench_util.h"
#include "kvshare.h"

/* Between two polls of the daemon's stats: short next to one block's write,
 * long enough that polling does not take the daemon's loop from its I/O. */
static void nap(void)
{
	struct timespec ts = { 0, 200000 };

	nanosleep(&ts, NULL);
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
int kvsb_ssd_fio_found(void)
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

int kvsb_ssd_run_ours(struct ssd_ctx *x, const char *bin, const char *ssd_dir,
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

void kvsb_ssd_run_fio(const struct ssd_opts *o, const char *file, struct ssd_row *row,
		      char *why, size_t whylen)
{
	row->fio_w = fio_run(o, file, "write", why, whylen);
	row->fio_r = row->fio_w < 0 ? -1 : fio_run(o, file, "read", why, whylen);
	unlink(file);
}
