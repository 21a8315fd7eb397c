/*
 * bench_ssd_cmd.c - `kvsbench ssd`'s command: its options, the chains it
 * publishes, the repetitions in rotating order (bench_ssd.c runs each), and
 * the report (a table and medians, or one JSON object).
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

#include "bench_ssd.h"
#include "bench_ssd_int.h"
#include "bench_util.h"
#include "kvs_size.h"

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

/* What the repetitions measured: per repetition and build, the row and
 * its columns; fio's figures; this / base in one repetition. */
struct ssd_results {
	unsigned nbuilds;
	struct ssd_row rows[SSD_MAX_REPS][SSD_BUILDS];
	double v[SSD_BUILDS][C_N][SSD_MAX_REPS];
	double fw[SSD_MAX_REPS], fr[SSD_MAX_REPS];
	double pair[2][SSD_MAX_REPS];
	char fio_why[256];
};

static const char *const names[SSD_BUILDS] = { "this", "base" };

/* The options into @o: -1 to go on, else the exit code (help, usage). */
static int ssd_parse(struct ssd_opts *o, int argc, char **argv)
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
	int opt, bad = 0;

	while ((opt = getopt_long(argc, argv, "d:b:q:t:c:r:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'd': o->dir = optarg; break;
		case 'b':
			if (kvs_parse_size(optarg, &o->block) < 0 || (o->block & 4095) ||
			    o->block > (256u << 20)) {
				fprintf(stderr, "kvsbench: ssd: --block-bytes must "
					"be a multiple of 4K up to 256M\n");
				bad = 1;
			}
			break;
		case 'q': bad |= parse_unsigned("qd", optarg, 1, 4096, &o->qd); break;
		case 't':
			if (kvs_parse_size(optarg, &o->total) < 0 || o->total > SSD_MAX_TOTAL) {
				fprintf(stderr, "kvsbench: ssd: --bytes: not a size\n");
				bad = 1;
			}
			break;
		case 'c': bad |= parse_unsigned("clients", optarg, 1, SSD_MAX_CLIENTS, &o->clients); break;
		case 'r': bad |= parse_unsigned("reps", optarg, 1, SSD_MAX_REPS, &o->reps); break;
		case O_BASELINE:
			if (access(optarg, X_OK) < 0) {
				fprintf(stderr, "kvsbench: ssd: --baseline %s: %s\n",
					optarg, strerror(errno));
				bad = 1;
			}
			o->baseline = optarg;
			break;
		case O_JSON: o->json = 1; break;
		case 'h': usage(); return 0;
		default: usage(); return 2;
		}
	}
	if (bad || optind < argc) {
		usage();
		return 2;
	}
	return -1;
}

/* The chains of hashes the runs publish: enough that at least 4 host
 * tiers' worth is demoted. -1 to go on, else the exit code. */
static int ssd_chains(struct ssd_ctx *x, struct ssd_opts *o)
{
	uint64_t blocks = o->total / o->block;
	uint32_t *tok;

	x->layout = (kvs_layout){ .model = "kvsbench-ssd", .layers = 1,
				  .kv_heads = 1, .block_tokens = 16,
				  .head_dim = (uint32_t)(o->block / 64),
				  .tp_size = 1, .dtype = KVS_DTYPE_FP16 };
	x->nchains = (unsigned)(blocks / o->qd);
	if (x->nchains < (o->clients + 2) * 5 + 2) {
		fprintf(stderr, "kvsbench: ssd: --bytes too small: at least %u "
			"chains of --qd blocks are needed\n", (o->clients + 2) * 5 + 2);
		return 2;
	}
	o->total = (uint64_t)x->nchains * o->qd * o->block;
	x->h = calloc((size_t)x->nchains * o->qd, sizeof(*x->h));
	tok = calloc((size_t)o->qd * 16, sizeof(*tok));
	if (!x->h || !tok) {
		fprintf(stderr, "kvsbench: ssd: out of memory\n");
		return 1;
	}
	for (unsigned i = 0; i < x->nchains; i++) {
		uint64_t s = SSD_TOKEN_SEED + i * 0x9e3779b97f4a7c15ull;

		for (unsigned j = 0; j < o->qd * 16; j++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			tok[j] = (uint32_t)(s % 128256);
		}
		kvs_hash_chain(kvs_hash_layout_seed(&x->layout), 16, tok,
			       (size_t)o->qd * 16, x->h + (size_t)i * o->qd, o->qd);
	}
	free(tok);
	return -1;
}

static void ssd_header(const struct ssd_opts *o)
{
	printf("kvsbench ssd: %s, blocks of %" PRIu64 " KiB, queue depth %u, "
	       "%.2f GiB per run, %u promoting client(s), %u reps, "
	       "rotating order%s%s\n", o->dir, o->block >> 10, o->qd,
	       (double)o->total / (1u << 30), o->clients, o->reps,
	       o->baseline ? ", base = " : "", o->baseline ? o->baseline : "");
	printf("%-4s %-5s %11s %11s %6s %11s %11s %6s %13s\n", "rep",
	       "build", "demote_GB/s", "fio_w_GB/s", "ratio", "promo_GB/s",
	       "fio_r_GB/s", "ratio", "direct/staged");
}

/* Repetition @r's figures into @res's columns, its rows printed (unless
 * --json); -EBADMSG when a build served a wrong block. */
static int ssd_record(const struct ssd_opts *o, struct ssd_results *res,
		      unsigned r, const struct ssd_row *fio)
{
	int rc = 0;

	res->fw[r] = fio->fio_w;
	res->fr[r] = fio->fio_r;
	res->pair[0][r] = ratio(res->rows[r][0].demote, res->rows[r][1].demote);
	res->pair[1][r] = ratio(res->rows[r][0].promote, res->rows[r][1].promote);
	for (unsigned b = 0; b < res->nbuilds; b++) {
		struct ssd_row *row = &res->rows[r][b];
		char label[16];

		row->fio_w = fio->fio_w;
		row->fio_r = fio->fio_r;
		res->v[b][C_DEMOTE][r] = row->demote;
		res->v[b][C_PROMOTE][r] = row->promote;
		res->v[b][C_DRATIO][r] = ratio(row->demote, row->fio_w);
		res->v[b][C_PRATIO][r] = ratio(row->promote, row->fio_r);
		if (row->bad)
			rc = -EBADMSG;
		if (o->json)
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
	return rc;
}

/* Each repetition runs fio and every build once; the order rotates
 * (repetition r starts with unit r mod units), so that none of them
 * always runs first, or always right after fio. */
static int ssd_reps(struct ssd_ctx *x, struct ssd_results *res, int have_fio,
		    const char *ssd_dir, const char *file)
{
	const struct ssd_opts *o = x->o;
	unsigned units = res->nbuilds + 1;
	int rc = 0;

	for (unsigned r = 0; r < o->reps && rc == 0; r++) {
		struct ssd_row fio = { .fio_w = -1, .fio_r = -1 };

		for (unsigned k = 0; k < units && rc == 0; k++) {
			unsigned u = (r + k) % units;

			if (u == res->nbuilds) {
				if (have_fio)
					kvsb_ssd_run_fio(o, file, &fio, res->fio_why,
							 sizeof(res->fio_why));
				continue;
			}
			memset(&res->rows[r][u], 0, sizeof(res->rows[r][u]));
			rc = kvsb_ssd_run_ours(x, u ? o->baseline : NULL, ssd_dir,
					       &res->rows[r][u]);
		}
		if (rc < 0)
			break;
		rc = ssd_record(o, res, r, &fio);
		fflush(stdout);
	}
	return rc;
}

static void ssd_json(const struct ssd_opts *o, const struct ssd_results *res)
{
	printf("{\"block_bytes\":%" PRIu64 ",\"qd\":%u,\"bytes\":%" PRIu64
	       ",\"clients\":%u,\"reps\":%u,", o->block, o->qd, o->total,
	       o->clients, o->reps);
	json_spread("fio_write_gbps", res->fw, o->reps, ",");
	json_spread("fio_read_gbps", res->fr, o->reps, ",");
	for (unsigned b = 0; b < res->nbuilds; b++) {
		/* This build's figures at the top level, as before. */
		if (b)
			printf("\"baseline\":{");
		json_spread("demote_gbps", res->v[b][C_DEMOTE], o->reps, ",");
		json_spread("demote_ratio", res->v[b][C_DRATIO], o->reps, ",");
		json_spread("promote_gbps", res->v[b][C_PROMOTE], o->reps, ",");
		json_spread("promote_ratio", res->v[b][C_PRATIO], o->reps, b ? "}," : ",");
	}
	if (res->nbuilds > 1) {
		json_spread("demote_vs_baseline", res->pair[0], o->reps, ",");
		json_spread("promote_vs_baseline", res->pair[1], o->reps, ",");
	}
	if (res->fio_why[0]) {
		printf("\"fio_na\":\"");
		for (const char *p = res->fio_why; *p; p++)
			if (*p >= 0x20 && *p != '"' && *p != '\\')
				putchar(*p);
		printf("\"}\n");
	} else {
		printf("\"fio_na\":null}\n");
	}
}

static void ssd_summary(const struct ssd_opts *o, const struct ssd_results *res)
{
	char w[40], rd[40];

	printf("median (min-max) of %u reps:\n", o->reps);
	for (unsigned b = 0; b < res->nbuilds; b++) {
		char d[40], dr[40], p[40], pr[40];

		fmt_spread(d, sizeof(d), res->v[b][C_DEMOTE], o->reps, 0);
		fmt_spread(dr, sizeof(dr), res->v[b][C_DRATIO], o->reps, 1);
		fmt_spread(p, sizeof(p), res->v[b][C_PROMOTE], o->reps, 0);
		fmt_spread(pr, sizeof(pr), res->v[b][C_PRATIO], o->reps, 1);
		printf("  %-5s demote %s GB/s, x fio %s; promote %s GB/s, x fio %s\n",
		       names[b], d, dr, p, pr);
	}
	fmt_spread(w, sizeof(w), res->fw, o->reps, 0);
	fmt_spread(rd, sizeof(rd), res->fr, o->reps, 0);
	printf("  fio   write %s GB/s; read %s GB/s\n", w, rd);
	if (res->nbuilds > 1) {
		/* Paired in one repetition, so the machine's load cancels more
		 * than in the ratios to fio. */
		fmt_spread(w, sizeof(w), res->pair[0], o->reps, 1);
		fmt_spread(rd, sizeof(rd), res->pair[1], o->reps, 1);
		printf("  this / base in the same repetition: demote %s; "
		       "promote %s\n", w, rd);
	}
	printf("ratio = kvshare / fio in the same repetition; direct/staged = "
	       "demotion writes from the arena / through a staging copy\n");
	if (res->fio_why[0])
		printf("fio: n/a (%s)\n", res->fio_why);
}

int kvsb_cmd_ssd(const char *sock, int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");
	struct ssd_opts o = { .dir = tmp && *tmp ? tmp : "/var/tmp",
			      .block = 1u << 20, .total = 1ull << 30, .qd = 32,
			      .reps = 5, .clients = 2 };
	static struct ssd_results res;
	struct ssd_ctx x = { .o = &o };
	char base[PATH_MAX], ssd_dir[PATH_MAX + 16], file[PATH_MAX + 16];
	int rc = ssd_parse(&o, argc, argv), have_fio;

	if (rc >= 0)
		return rc;
	if (sock) {
		fprintf(stderr, "kvsbench: ssd: starts its own kvshared (it needs "
			"--ssd-dir); --socket is not used\n");
		return 2;
	}
	res.nbuilds = o.baseline ? 2 : 1;
	rc = ssd_chains(&x, &o);
	if (rc >= 0)
		return rc;
	snprintf(base, sizeof(base), "%s/kvsbench-ssd.XXXXXX", o.dir);
	if (!mkdtemp(base)) {
		fprintf(stderr, "kvsbench: ssd: mkdtemp in %s failed: %s\n", o.dir,
			strerror(errno));
		free(x.h);
		return 1;
	}
	snprintf(ssd_dir, sizeof(ssd_dir), "%s/ssd", base);
	snprintf(file, sizeof(file), "%s/fio.dat", base);
	have_fio = kvsb_ssd_fio_found();
	if (!have_fio)
		snprintf(res.fio_why, sizeof(res.fio_why), "fio not found on PATH");
	if (!o.json)
		ssd_header(&o);
	rc = ssd_reps(&x, &res, have_fio, ssd_dir, file);
	rmdir(base);
	free(x.h);
	if (rc < 0)
		return 1;
	if (o.json)
		ssd_json(&o, &res);
	else
		ssd_summary(&o, &res);
	return 0;
}
