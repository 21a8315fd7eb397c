/*
 * ssd_test.h - what test_ssd and test_ssd_segments share: a mkdtemp
 * directory, parts skipped for want of a capability, random fill, a store
 * opened with given settings, one block written or read and waited for.
 * Static inline: each test takes what it uses.
 */
#ifndef KVS_SSD_TEST_H
#define KVS_SSD_TEST_H

#define _GNU_SOURCE
#include "kvs_check.h"
#include "kvs_ssd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "kvs_clock.h"

#define KiB 1024ULL
#define MiB (1024ULL * 1024)
#define MAXC 1024

static char base[4096];

/* ---- helpers */

static uint64_t rng = 0x1234567;

/* Parts not run for want of a capability: the test still runs the rest,
 * then exits 77 (if nothing failed) naming them. */
static char skipped[1024];

static inline void skip_part(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void skip_part(const char *fmt, ...)
{
	size_t n = strlen(skipped);
	va_list ap;

	if (n && n < sizeof(skipped) - 2)
		strcat(skipped, "; ");
	n = strlen(skipped);
	va_start(ap, fmt);
	vsnprintf(skipped + n, sizeof(skipped) - n, fmt, ap);
	va_end(ap);
	printf("skip: %s\n", skipped + n);
}
static inline uint64_t rnd(void)
{
	return kvs_test_rnd(&rng);
}

static inline void fill(void *p, size_t n)
{
	uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		b[i] = (uint8_t)rnd();
}

static inline int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st; (void)flag; (void)f;
	return remove(p);
}

static inline void rm_rf(const char *d) { nftw(d, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static inline void subdir(char *out, size_t n, const char *name)
{
	snprintf(out, n, "%s/%s", base, name);
	mkdir(out, 0700);
}

/* Completions land in res[cookie]; cnt counts them. */
struct got {
	int n;
	int res[MAXC];
	kvs_ssd_cqe c[MAXC];
};

static inline void on_cqe(void *arg, const kvs_ssd_cqe *c)
{
	struct got *g = arg;

	if (c->cookie < MAXC) {
		g->res[c->cookie] = c->res;
		g->c[c->cookie] = *c;
	}
	g->n++;
}

/* drain - wait on the eventfd, as the loop would, until nothing is in flight. */
static inline int drain(kvs_ssd *s, struct got *g)
{
	struct pollfd p = { .fd = kvs_ssd_event_fd(s), .events = POLLIN };
	double t0 = now_s();

	while (kvs_ssd_inflight(s)) {
		if (poll(&p, 1, 1000) < 0 || now_s() - t0 > 30) {
			fprintf(stderr, "drain: timed out with %u in flight\n",
				kvs_ssd_inflight(s));
			return -1;
		}
		kvs_ssd_reap(s, on_cqe, g);
	}
	return 0;
}

static inline kvs_ssd *store(const char *dir, uint64_t seg, unsigned nseg, unsigned flags,
		      unsigned qd, kvs_ssd_recycle_fn fn, void *arg, int *rc)
{
	kvs_ssd *s;

	if (kvs_ssd_create(&s))
		return NULL;
	kvs_ssd_set_segment_bytes(s, seg);
	kvs_ssd_set_size(s, seg * nseg);
	kvs_ssd_set_flags(s, flags);
	kvs_ssd_set_queue_depth(s, qd);
	kvs_ssd_set_recycle(s, fn, arg);
	*rc = kvs_ssd_open(s, dir);
	if (*rc) {
		kvs_ssd_close(s);
		return NULL;
	}
	return s;
}

static inline kvs_ssd_blk blk_of(uint32_t ns, uint64_t id, uint32_t len)
{
	kvs_ssd_blk b = { .ns = ns, .len = len, .hash = { id * 7919 + 1, ~id } };

	return b;
}

/* write_one / read_one - one block, waited for. */
static inline int write_one(kvs_ssd *s, uint64_t id, void *buf, uint32_t len, kvs_ssd_loc *loc)
{
	struct got g = { 0 };
	kvs_ssd_blk b = blk_of(1, id, len);
	int rc = kvs_ssd_write(s, &b, buf, 0, 0, loc);

	if (rc)
		return rc;
	if (drain(s, &g))
		return -ETIMEDOUT;
	return g.res[0];
}

static inline int read_one(kvs_ssd *s, uint64_t id, const kvs_ssd_loc *loc, void *dst)
{
	struct got g = { 0 };
	kvs_ssd_blk b = blk_of(1, id, loc->len);
	int rc = kvs_ssd_read(s, loc, &b, 0, dst, 0);

	if (rc)
		return rc;
	if (drain(s, &g))
		return -ETIMEDOUT;
	return g.res[0];
}

static inline void *abuf(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, n + 4096))
		abort(); /* test code: out of memory ends the test */
	return p;
}


/* ssd_test_begin - the temp directory under $TMPDIR or /var/tmp: 0, or 77
 * (skip) when none can be made. */
static inline int ssd_test_begin(const char *name)
{
	const char *t = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/kvs-ssd-XXXXXX", t && *t ? t : "/var/tmp");
	if (!mkdtemp(base)) {
		printf("skip: cannot make a temp directory: %s\n", strerror(errno));
		return 77;
	}
	printf("%s: in %s\n", name, base);
	return 0;
}

/* ssd_test_end - remove the directory; the exit code: 1 failed, 77 a part
 * skipped (the rest passed), 0 passed. */
static inline int ssd_test_end(const char *name)
{
	rm_rf(base);
	if (check_summary(name))
		return 1;
	if (skipped[0]) {
		printf("%s: SKIP (the rest passed): NOT TESTED: %s\n", name, skipped);
		return 77;
	}
	return 0;
}

#endif
