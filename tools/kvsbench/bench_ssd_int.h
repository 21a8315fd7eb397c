/*
 * bench_ssd_int.h - what the files of `kvsbench ssd` share (bench_ssd.c:
 * one repetition of each build, and fio; bench_ssd_cmd.c: the options,
 * the repetitions and the report).
 */
#ifndef KVSB_SSD_INT_H
#define KVSB_SSD_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kvshare.h"

#define SSD_MAX_REPS 50
#define SSD_MAX_TOTAL 1000000000000000ull /* --bytes, at most 1e15 */
#define SSD_MAX_CLIENTS 64
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

/* Whether fio is on $PATH. */
int kvsb_ssd_fio_found(void);
/* One repetition of the kvshared at @bin (NULL: this build's) with its SSD
 * tier in @ssd_dir: demotion, then promotion by the clients, into @row. */
int kvsb_ssd_run_ours(struct ssd_ctx *x, const char *bin, const char *ssd_dir,
		      struct ssd_row *row);
/* fio's write and read of @file, into @row (why not in @why). */
void kvsb_ssd_run_fio(const struct ssd_opts *o, const char *file, struct ssd_row *row,
		      char *why, size_t whylen);

#endif /* KVSB_SSD_INT_H */
