/*
 * test_ssd.c - the SSD segment store (storage/ssd/ssd*.c) alone.
 *
 * Runs in a mkdtemp directory under $TMPDIR or /var/tmp. Parts that need a
 * capability the machine lacks (O_DIRECT on that filesystem, io_uring,
 * mount permission for a size-limited tmpfs) say "skip:" with the reason;
 * the rest still runs, and the test then exits 77 naming what it did not
 * test. Exit: 0 pass, 1 fail, 77 no temp directory or a part skipped.
 */
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

#define KiB 1024ULL
#define MiB (1024ULL * 1024)
#define MAXC 1024

static char base[4096];

/* ---- helpers */

static uint64_t rng = 0x1234567;

/* Parts not run for want of a capability: the test still runs the rest,
 * then exits 77 (if nothing failed) naming them. */
static char skipped[1024];

static void skip_part(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void skip_part(const char *fmt, ...)
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
static uint64_t rnd(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void fill(void *p, size_t n)
{
	uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		b[i] = (uint8_t)rnd();
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st; (void)flag; (void)f;
	return remove(p);
}

static void rm_rf(const char *d) { nftw(d, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void subdir(char *out, size_t n, const char *name)
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

static void on_cqe(void *arg, const kvs_ssd_cqe *c)
{
	struct got *g = arg;

	if (c->cookie < MAXC) {
		g->res[c->cookie] = c->res;
		g->c[c->cookie] = *c;
	}
	g->n++;
}

/* drain - wait on the eventfd, as the loop would, until nothing is in flight. */
static int drain(kvs_ssd *s, struct got *g)
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

static kvs_ssd *store(const char *dir, uint64_t seg, unsigned nseg, unsigned flags,
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

static kvs_ssd_blk blk_of(uint32_t ns, uint64_t id, uint32_t len)
{
	kvs_ssd_blk b = { .ns = ns, .len = len, .hash = { id * 7919 + 1, ~id } };

	return b;
}

/* write_one / read_one - one block, waited for. */
static int write_one(kvs_ssd *s, uint64_t id, void *buf, uint32_t len, kvs_ssd_loc *loc)
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

static int read_one(kvs_ssd *s, uint64_t id, const kvs_ssd_loc *loc, void *dst)
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

static void *abuf(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, n + 4096))
		abort(); /* test code: out of memory ends the test */
	return p;
}

/* ---- parts */

static void t_errors(void)
{
	char d[4200], f[4300];
	kvs_ssd *s, *s2;
	kvs_ssd_loc loc;
	kvs_ssd_blk b = blk_of(1, 1, 0);
	int rc, fd;

	subdir(d, sizeof(d), "errors");
	snprintf(f, sizeof(f), "%s/missing", d);
	CHECK(store(f, 64 * KiB, 4, 0, 8, NULL, NULL, &rc) == NULL);
	CHECK_EQ(rc, -ENOENT);
	snprintf(f, sizeof(f), "%s/afile", d);
	fd = open(f, O_CREAT | O_WRONLY, 0600);
	close(fd);
	CHECK(store(f, 64 * KiB, 4, 0, 8, NULL, NULL, &rc) == NULL);
	CHECK_EQ(rc, -ENOTDIR);
	CHECK(store(d, 64 * KiB, 1, 0, 8, NULL, NULL, &rc) == NULL);
	CHECK_EQ(rc, -EINVAL);
	CHECK(kvs_ssd_create(&s) == 0);
	CHECK_EQ(kvs_ssd_set_segment_bytes(s, 5000), -EINVAL);
	CHECK_EQ(kvs_ssd_set_queue_depth(s, 0), -EINVAL);
	kvs_ssd_close(s);

	s = store(d, 64 * KiB, 4, 0, 8, NULL, NULL, &rc);
	CHECK(s != NULL);
	if (!s)
		return;
	CHECK_EQ(kvs_ssd_set_size(s, MiB), -EBUSY);
	s2 = store(d, 64 * KiB, 4, 0, 8, NULL, NULL, &rc);
	CHECK(s2 == NULL);
	CHECK_EQ(rc, -EBUSY); /* one process per directory */
	CHECK_EQ(kvs_ssd_write(s, &b, d, 0, 0, &loc), -EINVAL); /* len 0 */
	b.len = 64 * KiB; /* record = 68 KiB: more than a 64 KiB segment holds */
	CHECK_EQ(kvs_ssd_write(s, &b, d, 0, 0, &loc), -EINVAL);
	loc = (kvs_ssd_loc){ .seg = 9, .len = 10, .gen = 1, .off = 4096 };
	CHECK_EQ(kvs_ssd_check(s, &loc), -EINVAL);
	loc.seg = 0;
	CHECK_EQ(kvs_ssd_check(s, &loc), -ESTALE); /* free segment */
	kvs_ssd_close(s);
}

/*
 * Round trip: many blocks of several sizes in flight at once, aligned and
 * unaligned buffers, partial last sectors; every byte and checksum back.
 */
static void t_roundtrip(const char *name, unsigned flags, int timed)
{
	static const uint32_t sizes[] = { 4096, 8192, 65536, 12345, 300000, 1048576, 100 };
	enum { NB = 96 };
	char d[4200];
	uint8_t *src[NB], *dst[NB];
	kvs_ssd_loc loc[NB];
	struct got *g = calloc(1, sizeof(*g));
	kvs_ssd_stats st;
	kvs_ssd *s;
	uint64_t bytes = 0;
	double t0, tw, tr;
	int rc, i, ok = 1, fd;
	uint32_t magic;

	subdir(d, sizeof(d), name);
	s = store(d, 16 * MiB, 8, flags, 16, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (!s || !g)
		return;
	printf("%s: io_uring %d, O_DIRECT %d\n", name, kvs_ssd_uring(s), kvs_ssd_direct(s));
	if (!(flags & KVS_SSD_NO_DIRECT) && !kvs_ssd_direct(s))
		skip_part("%s O_DIRECT: the filesystem of %s refuses it", name, d);
	for (i = 0; i < NB; i++) {
		uint32_t len = sizes[i % 7];

		src[i] = abuf(len);
		dst[i] = abuf(len);
		fill(src[i] + (i % 5 == 4), len);
		bytes += len;
	}
	t0 = now_s();
	for (i = 0; i < NB; i++) {
		kvs_ssd_blk b = blk_of(3, (uint64_t)i, sizes[i % 7]);

		/* every 5th source is unaligned: the copying path */
		rc = kvs_ssd_write(s, &b, src[i] + (i % 5 == 4), 0, (uint64_t)i, &loc[i]);
		CHECK_EQ(rc, 0);
		CHECK_EQ(loc[i].off % 4096, 0);
	}
	CHECK(kvs_ssd_inflight(s) > 1);
	CHECK_EQ(drain(s, g), 0);
	tw = now_s() - t0;
	CHECK_EQ(g->n, NB);
	for (i = 0; i < NB; i++) {
		ok &= g->res[i] == 0;
		ok &= g->c[i].blk.csum ==
		      kvs_ssd_checksum(src[i] + (i % 5 == 4), sizes[i % 7]);
	}
	CHECK(ok);
	g->n = 0;
	t0 = now_s();
	for (i = 0; i < NB; i++) {
		kvs_ssd_blk b = blk_of(3, (uint64_t)i, sizes[i % 7]);

		/* every 7th destination is unaligned: the bounce path */
		rc = kvs_ssd_read(s, &loc[i], &b, 0, dst[i] + (i % 7 == 6), (uint64_t)i);
		CHECK_EQ(rc, 0);
	}
	CHECK_EQ(drain(s, g), 0);
	tr = now_s() - t0;
	CHECK_EQ(g->n, NB);
	for (i = 0, ok = 1; i < NB; i++) {
		ok &= g->res[i] == 0;
		ok &= memcmp(src[i] + (i % 5 == 4), dst[i] + (i % 7 == 6), sizes[i % 7]) == 0;
		ok &= g->c[i].blk.len == sizes[i % 7] && g->c[i].blk.ns == 3;
	}
	CHECK(ok);
	/* On disk: a record header at each 4 KiB-aligned location. */
	{
		char f[4300];

		snprintf(f, sizeof(f), "%s/seg-%05u.kvs", d, loc[5].seg);
		fd = open(f, O_RDONLY);
		CHECK(fd >= 0 && pread(fd, &magic, 4, (off_t)loc[5].off) == 4);
		CHECK_EQ(magic, 0x4253564bu);
		close(fd);
	}
	kvs_ssd_stats_get(s, &st);
	CHECK_EQ(st.blocks_written, NB);
	CHECK_EQ(st.blocks_read, NB);
	CHECK_EQ(st.bytes_written, bytes);
	CHECK_EQ(st.corrupt_reads, 0);
	if (kvs_ssd_uring(s))
		CHECK(st.inflight_max > 1); /* queue depth > 1 really happened */
	printf("%s: %d blocks, %.1f MiB: write %.0f MiB/s, read %.0f MiB/s; "
	       "write lat avg %llu p99 %llu us, read avg %llu p99 %llu us, "
	       "max in flight %llu\n", name, NB, (double)bytes / MiB,
	       (double)bytes / MiB / tw, (double)bytes / MiB / tr,
	       (unsigned long long)st.write_lat_avg_us,
	       (unsigned long long)st.write_lat_p99_us,
	       (unsigned long long)st.read_lat_avg_us,
	       (unsigned long long)st.read_lat_p99_us,
	       (unsigned long long)st.inflight_max);
	for (i = 0; i < NB; i++) {
		free(src[i]);
		free(dst[i]);
	}
	kvs_ssd_close(s);
	free(g);
	(void)timed;
}

/* Throughput at 1 MiB blocks, queue depth 32 (printed, not asserted). */
static void t_throughput(void)
{
	enum { NB = 192, LEN = 1 << 20 };
	char d[4200];
	uint8_t *buf = abuf((size_t)NB * LEN), *back = abuf((size_t)NB * LEN);
	kvs_ssd_loc loc[NB];
	struct got *g = calloc(1, sizeof(*g));
	kvs_ssd *s;
	double t0, tw, tr;
	int rc, i;

	subdir(d, sizeof(d), "throughput");
	s = store(d, 64 * MiB, 6, 0, 32, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (!s || !g)
		return;
	fill(buf, (size_t)NB * LEN);
	t0 = now_s();
	for (i = 0; i < NB; i++) {
		kvs_ssd_blk b = blk_of(9, (uint64_t)i, LEN);

		CHECK_EQ(kvs_ssd_write(s, &b, buf + (size_t)i * LEN, 0, (uint64_t)i, &loc[i]), 0);
	}
	CHECK_EQ(drain(s, g), 0);
	tw = now_s() - t0;
	t0 = now_s();
	for (i = 0; i < NB; i++) {
		kvs_ssd_blk b = blk_of(9, (uint64_t)i, LEN);

		CHECK_EQ(kvs_ssd_read(s, &loc[i], &b, 0, back + (size_t)i * LEN, (uint64_t)i), 0);
	}
	CHECK_EQ(drain(s, g), 0);
	tr = now_s() - t0;
	CHECK_EQ(g->n, 2 * NB);
	CHECK(memcmp(buf, back, (size_t)NB * LEN) == 0);
	printf("throughput: %d x 1 MiB, qd 32, O_DIRECT %d, io_uring %d: "
	       "write %.0f MiB/s, read %.0f MiB/s (checksums included)\n",
	       NB, kvs_ssd_direct(s), kvs_ssd_uring(s), NB / tw, NB / tr);
	kvs_ssd_close(s);
	free(buf);
	free(back);
	free(g);
}

/* A flipped byte, in payload or header, or a wrong expectation: -EBADMSG. */
static void t_corrupt(const char *name, unsigned flags)
{
	enum { LEN = 3 * 4096 + 17 };
	char d[4200], f[4300];
	uint8_t *src = abuf(LEN), *dst = abuf(LEN), x;
	kvs_ssd_loc loc[4];
	kvs_ssd_stats st;
	kvs_ssd_blk b;
	struct got g = { 0 };
	kvs_ssd *s;
	int rc, i, fd;

	subdir(d, sizeof(d), name);
	s = store(d, 1 * MiB, 4, flags, 8, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (!s)
		return;
	fill(src, LEN);
	for (i = 0; i < 3; i++)
		CHECK_EQ(write_one(s, (uint64_t)i, src, LEN, &loc[i]), 0);
	/* A payload scribbled on after its checksum was taken (at commit). */
	b = blk_of(1, 3, LEN);
	b.csum = kvs_ssd_checksum(src, LEN);
	src[100] ^= 1;
	CHECK_EQ(kvs_ssd_write(s, &b, src, KVS_SSD_CSUM, 3, &loc[3]), 0);
	CHECK_EQ(drain(s, &g), 0);
	src[100] ^= 1;

	snprintf(f, sizeof(f), "%s/seg-%05u.kvs", d, loc[0].seg);
	fd = open(f, O_RDWR);
	CHECK(fd >= 0);
	/* payload byte of block 0 (in its last, partial sector), header byte of 1 */
	CHECK(pread(fd, &x, 1, (off_t)(loc[0].off + 4096 + LEN - 1)) == 1);
	x ^= 0x40;
	CHECK(pwrite(fd, &x, 1, (off_t)(loc[0].off + 4096 + LEN - 1)) == 1);
	CHECK(pread(fd, &x, 1, (off_t)(loc[1].off + 9)) == 1);
	x ^= 0x01;
	CHECK(pwrite(fd, &x, 1, (off_t)(loc[1].off + 9)) == 1);
	fsync(fd);
	close(fd);

	CHECK_EQ(read_one(s, 0, &loc[0], dst), -EBADMSG);
	CHECK_EQ(read_one(s, 1, &loc[1], dst), -EBADMSG);
	CHECK_EQ(read_one(s, 3, &loc[3], dst), -EBADMSG); /* scribbled */
	CHECK_EQ(read_one(s, 2, &loc[2], dst), 0);
	CHECK(memcmp(src, dst, LEN) == 0);
	CHECK_EQ(read_one(s, 77, &loc[2], dst), -EBADMSG); /* wrong hash */
	/* A hash that differs in one half only: both halves are compared. */
	for (i = 0; i < 2; i++) {
		b = blk_of(1, 2, LEN);
		if (i)
			b.hash.hi ^= 1;
		else
			b.hash.lo ^= 1;
		CHECK_EQ(kvs_ssd_read(s, &loc[2], &b, 0, dst, 0), 0);
		g.n = 0;
		CHECK_EQ(drain(s, &g), 0);
		CHECK_EQ(g.res[0], -EBADMSG);
	}
	b = blk_of(2, 2, LEN); /* wrong namespace */
	CHECK_EQ(kvs_ssd_read(s, &loc[2], &b, 0, dst, 0), 0);
	g.n = 0;
	CHECK_EQ(drain(s, &g), 0);
	CHECK_EQ(g.res[0], -EBADMSG);
	b = blk_of(1, 2, LEN); /* the index's checksum disagrees */
	b.csum = 12345;
	CHECK_EQ(kvs_ssd_read(s, &loc[2], &b, KVS_SSD_CSUM, dst, 0), 0);
	CHECK_EQ(drain(s, &g), 0);
	CHECK_EQ(g.res[0], -EBADMSG);
	{
		kvs_ssd_loc l = loc[2]; /* another record's place */

		l.off = loc[1].off;
		CHECK_EQ(read_one(s, 2, &l, dst), -EBADMSG);
	}
	kvs_ssd_stats_get(s, &st);
	CHECK_EQ(st.corrupt_reads, 9);
	CHECK_EQ(st.blocks_read, 1);
	kvs_ssd_close(s);
	free(src);
	free(dst);
}

/* ---- recycling */

struct rec {
	int n, veto_seg, veto_all;
	uint32_t seg[64];
	uint64_t gen[64];
};

static int on_recycle(void *arg, uint32_t seg, uint64_t gen)
{
	struct rec *r = arg;

	if (r->veto_all || (int)seg == r->veto_seg)
		return -EBUSY;
	if (r->n < 64) {
		r->seg[r->n] = seg;
		r->gen[r->n] = gen;
	}
	r->n++;
	return 0;
}

static void t_recycle(void)
{
	enum { PER = 7, NSEG = 4 }; /* 64 KiB segments hold 7 records of 8 KiB */
	char d[4200];
	uint8_t *src = abuf(4096), *dst = abuf(4096);
	kvs_ssd_loc loc[64], l;
	struct rec r = { .veto_seg = -1 };
	uint64_t gen0[NSEG], g;
	kvs_ssd_stats st;
	kvs_ssd *s;
	int rc, i, ok = 1;

	subdir(d, sizeof(d), "recycle");
	s = store(d, 64 * KiB, NSEG, 0, 8, on_recycle, &r, &rc);
	CHECK_EQ(rc, 0);
	if (!s)
		return;
	for (i = 0; i < PER * NSEG; i++) {
		fill(src, 4096);
		ok &= write_one(s, (uint64_t)i, src, 4096, &loc[i]) == 0;
		ok &= loc[i].seg == (uint32_t)(i / PER);
	}
	CHECK(ok);
	CHECK_EQ(r.n, 0);
	for (i = 0; i < NSEG; i++)
		gen0[i] = kvs_ssd_segment_gen(s, (uint32_t)i);
	CHECK(gen0[0] < gen0[1] && gen0[1] < gen0[2] && gen0[2] < gen0[3]);
	/* One more block: the oldest segment (0) is asked for, then reused. */
	CHECK_EQ(write_one(s, 100, src, 4096, &l), 0);
	CHECK_EQ(r.n, 1);
	CHECK_EQ(r.seg[0], 0);
	CHECK_EQ(r.gen[0], gen0[0]);
	CHECK_EQ(l.seg, 0);
	CHECK(l.gen > gen0[3]);
	CHECK_EQ(kvs_ssd_segment_gen(s, 0), l.gen);
	/* Old locations of segment 0: refused without I/O. */
	CHECK_EQ(kvs_ssd_read(s, &loc[0], &(kvs_ssd_blk){ 1, 4096, { 1, ~0ULL }, 0 },
			      0, dst, 0), -ESTALE);
	CHECK_EQ(kvs_ssd_check(s, &loc[3]), -ESTALE);
	CHECK_EQ(kvs_ssd_check(s, &loc[PER]), 0);
	/* Fill on: FIFO order 1, 2, 3, then 0 again. */
	for (i = 0; i < PER * NSEG; i++)
		CHECK_EQ(write_one(s, 200 + (uint64_t)i, src, 4096, &l), 0);
	CHECK_EQ(r.n, 5);
	CHECK(r.seg[1] == 1 && r.seg[2] == 2 && r.seg[3] == 3 && r.seg[4] == 0);
	CHECK(r.gen[1] == gen0[1] && r.gen[2] == gen0[2] && r.gen[3] == gen0[3]);

	/* Veto: the oldest (1) is pinned; 2 goes instead, 1 keeps its data. */
	g = kvs_ssd_segment_gen(s, 1);
	r.veto_seg = 1;
	{
		/* segment 1's first block: block 206 of the loop above */
		kvs_ssd_loc keep = { .seg = 1, .len = 4096, .gen = g, .off = 4096 };
		int before = r.n, n = 0;

		while (r.n == before && n++ < 2 * PER)
			CHECK_EQ(write_one(s, 400 + (uint64_t)n, src, 4096, &l), 0);
		CHECK_EQ(r.n, before + 1);
		CHECK_EQ(r.seg[before], 2);
		CHECK_EQ(kvs_ssd_segment_gen(s, 1), g);
		CHECK_EQ(read_one(s, 206, &keep, dst), 0);
		CHECK(memcmp(src, dst, 4096) == 0);
	}
	kvs_ssd_stats_get(s, &st);
	CHECK(st.recycle_vetoed >= 1);
	/* Veto everything: once the current segment is full, -EBUSY (not
	 * -ENOSPC: the disk is not full), and a lifted veto makes writes work
	 * again. */
	r.veto_all = 1;
	for (i = 0, rc = 0; i < 2 * PER && rc == 0; i++)
		rc = write_one(s, 500 + (uint64_t)i, src, 4096, &l);
	CHECK_EQ(rc, -EBUSY);
	kvs_ssd_stats_get(s, &st);
	CHECK(st.no_segment >= 1);
	CHECK_EQ(st.enospc, 0);
	r.veto_all = 0;
	CHECK_EQ(write_one(s, 600, src, 4096, &l), 0);
	CHECK_EQ(read_one(s, 600, &l, dst), 0);
	CHECK(memcmp(src, dst, 4096) == 0);
	kvs_ssd_close(s);
	free(src);
	free(dst);
}

/* Reopen keeps segments, generations and data; shrinking drops extras. */
static void t_reopen(void)
{
	enum { NB = 7 }; /* 2 records of 24 KiB a segment: segments 0..3 */
	char d[4200], f[4300];
	uint8_t *src[NB], *dst = abuf(20000);
	kvs_ssd_loc loc[NB], l;
	uint64_t gen[6];
	kvs_ssd *s;
	int rc, i, ok = 1;

	subdir(d, sizeof(d), "reopen");
	s = store(d, 64 * KiB, 6, 0, 8, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (!s)
		return;
	for (i = 0; i < NB; i++) {
		src[i] = abuf(20000);
		fill(src[i], 20000);
		ok &= write_one(s, (uint64_t)i, src[i], 20000, &loc[i]) == 0;
	}
	CHECK(ok);
	for (i = 0; i < 6; i++)
		gen[i] = kvs_ssd_segment_gen(s, (uint32_t)i);
	CHECK(gen[0] && gen[3] && !gen[4]);
	kvs_ssd_close(s);

	s = store(d, 64 * KiB, 6, 0, 8, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (!s)
		return;
	for (i = 0; i < 6; i++)
		CHECK_EQ(kvs_ssd_segment_gen(s, (uint32_t)i), gen[i]);
	for (i = 0, ok = 1; i < NB; i++)
		ok &= read_one(s, (uint64_t)i, &loc[i], dst) == 0 &&
		      memcmp(dst, src[i], 20000) == 0;
	CHECK(ok);
	/* The half-filled segment 3 is sealed: new blocks start segment 4. */
	CHECK_EQ(write_one(s, 50, src[0], 20000, &l), 0);
	CHECK_EQ(l.seg, 4);
	CHECK(l.gen > gen[3]);
	kvs_ssd_close(s);

	/* Fewer segments: the extra files go, the rest keep their data. */
	s = store(d, 64 * KiB, 3, 0, 8, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (!s)
		return;
	snprintf(f, sizeof(f), "%s/seg-00004.kvs", d);
	CHECK(access(f, F_OK) < 0);
	CHECK_EQ(kvs_ssd_segment_gen(s, 0), gen[0]);
	CHECK_EQ(read_one(s, 0, &loc[0], dst), 0);
	kvs_ssd_close(s);
	/* Another segment size: segments start over, old locations are stale. */
	s = store(d, 128 * KiB, 3, 0, 8, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (!s)
		return;
	CHECK_EQ(kvs_ssd_segment_gen(s, 0), 0);
	CHECK_EQ(kvs_ssd_check(s, &loc[0]), -ESTALE);
	kvs_ssd_close(s);
	for (i = 0; i < NB; i++)
		free(src[i]);
	free(dst);
}

/* The synchronous fallback completes through the eventfd too. */
static void t_sync_eventfd(void)
{
	char d[4200];
	uint8_t *src = abuf(8192);
	struct pollfd p;
	struct got g = { 0 };
	kvs_ssd_loc l;
	kvs_ssd_blk b = blk_of(1, 1, 8192);
	kvs_ssd *s;
	int rc;

	subdir(d, sizeof(d), "sync-efd");
	s = store(d, 64 * KiB, 2, KVS_SSD_NO_URING, 8, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (!s)
		return;
	CHECK_EQ(kvs_ssd_uring(s), 0);
	fill(src, 8192);
	p = (struct pollfd){ .fd = kvs_ssd_event_fd(s), .events = POLLIN };
	CHECK_EQ(poll(&p, 1, 0), 0);
	CHECK_EQ(kvs_ssd_write(s, &b, src, 0, 42, &l), 0);
	CHECK_EQ(poll(&p, 1, 0), 1);
	CHECK_EQ(kvs_ssd_reap(s, on_cqe, &g), 1);
	CHECK_EQ(g.res[42], 0);
	CHECK_EQ(g.c[42].cookie, 42);
	CHECK_EQ(poll(&p, 1, 0), 0);
	kvs_ssd_close(s);
	free(src);
}

/* Released cookies land in rel[cookie]. */
static void on_release(void *arg, const kvs_ssd_cqe *c)
{
	int *rel = arg;

	if (c->cookie < MAXC && c->op == KVS_SSD_OP_WRITE && c->res == 0)
		rel[c->cookie]++;
}

/* kvs_ssd_wait: each write's payload is released once, before its
 * completion, which still comes through the reap (once); a read is not
 * released; nothing in flight is 0 at once. The payload read back is the
 * bytes written, and the buffer is reused (scribbled) after the release. */
static void t_wait(const char *name, unsigned flags)
{
	enum { NW = 8, LEN = 64 * 1024 };
	char d[4200];
	uint8_t *src = abuf((size_t)NW * LEN), *dst = abuf(LEN), *want = abuf(LEN);
	int rel[MAXC] = { 0 }, released = 0, rc;
	struct got g = { 0 };
	kvs_ssd_loc l[NW];
	kvs_ssd *s;

	subdir(d, sizeof(d), name);
	s = store(d, 1024 * KiB, 4, flags, 4, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (!s)
		goto out;
	CHECK_EQ(kvs_ssd_wait(s, on_release, rel), 0);
	fill(src, (size_t)NW * LEN);
	memcpy(want, src, LEN);
	for (int i = 0; i < NW; i++) {
		kvs_ssd_blk b = blk_of(1, (uint64_t)i, LEN);

		CHECK_EQ(kvs_ssd_write(s, &b, src + (size_t)i * LEN, 0, (uint64_t)i, &l[i]), 0);
	}
	while (released < NW && (rc = kvs_ssd_wait(s, on_release, rel)) > 0)
		released += rc;
	CHECK_EQ(released, NW);
	for (int i = 0; i < NW; i++)
		CHECK_EQ(rel[i], 1);
	memset(src, 0xee, (size_t)NW * LEN); /* the store no longer reads it */
	CHECK_EQ(kvs_ssd_wait(s, on_release, rel), 0);
	CHECK_EQ(drain(s, &g), 0);
	CHECK_EQ(g.n, NW);
	for (int i = 0; i < NW; i++)
		CHECK_EQ(g.res[i], 0);
	CHECK_EQ(read_one(s, 0, &l[0], dst), 0);
	CHECK(memcmp(dst, want, LEN) == 0);
	CHECK_EQ(kvs_ssd_read(s, &l[0], &(kvs_ssd_blk){ .ns = 1, .len = LEN,
			      .hash = blk_of(1, 0, LEN).hash }, 0, dst, 9), 0);
	CHECK_EQ(kvs_ssd_wait(s, on_release, rel), 0); /* a read: nothing */
	CHECK_EQ(rel[9], 0);
	CHECK_EQ(drain(s, &g), 0);
	CHECK_EQ(g.res[9], 0);
	kvs_ssd_close(s);
out:
	free(src);
	free(dst);
	free(want);
}

/* Close with writes and reads in flight and queued: waits, frees, no callback. */
/* Open descriptors of this process. */
static int open_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n - 1; /* the one opendir holds */
}

/* Close with I/O in flight: it returns, every descriptor it opened is
 * closed, and the directory opens again at once with the completed record
 * intact in its segment of the same generation. */
static void t_close_inflight(void)
{
	char d[4200];
	uint8_t *src = abuf(256 * KiB), *dst = abuf(256 * KiB);
	kvs_ssd_loc l, l0;
	kvs_ssd_blk b = blk_of(1, 1, 256 * KiB);
	kvs_ssd *s;
	uint64_t gen0;
	int rc, i, fds0 = open_fds();

	subdir(d, sizeof(d), "close");
	s = store(d, 4 * MiB, 4, 0, 4, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (!s)
		return;
	fill(src, 256 * KiB);
	CHECK_EQ(write_one(s, 1, src, 256 * KiB, &l0), 0);
	gen0 = kvs_ssd_segment_gen(s, l0.seg);
	CHECK(gen0 != 0);
	for (i = 0; i < 20; i++) {
		CHECK_EQ(kvs_ssd_write(s, &b, src, 0, 0, &l), 0);
		CHECK_EQ(kvs_ssd_read(s, &l, &b, 0, dst, 0), 0);
	}
	CHECK(kvs_ssd_inflight(s) > 4); /* some in the kernel, some queued */
	kvs_ssd_close(s);
	CHECK_EQ(open_fds(), fds0);

	s = store(d, 4 * MiB, 4, 0, 4, NULL, NULL, &rc);
	CHECK_EQ(rc, 0); /* not -EBUSY: the old handle let the directory go */
	if (s) {
		CHECK_EQ(kvs_ssd_segment_gen(s, l0.seg), gen0);
		memset(dst, 0, 256 * KiB);
		CHECK_EQ(read_one(s, 1, &l0, dst), 0);
		CHECK(memcmp(dst, src, 256 * KiB) == 0);
		kvs_ssd_close(s);
	}
	CHECK_EQ(open_fds(), fds0);
	free(src);
	free(dst);
}

/* A size-limited tmpfs: -ENOSPC at open (preallocated), then in a write's
 * completion (sparse files); a read-only mount: -EROFS at open. */
static void t_enospc(void)
{
	char d[4200];
	uint8_t *src = abuf(4096);
	kvs_ssd_loc l;
	kvs_ssd_stats st;
	struct got g = { 0 };
	kvs_ssd *s;
	int rc, i, seen = 0;

	subdir(d, sizeof(d), "tmpfs");
	if (mount("tmpfs", d, "tmpfs", 0, "size=1m,mode=0700") < 0) {
		skip_part("ENOSPC and EROFS on a size-limited tmpfs: mount: %s",
			  strerror(errno));
		free(src);
		return;
	}
	s = store(d, 256 * KiB, 8, 0, 8, NULL, NULL, &rc);
	CHECK(s == NULL);
	CHECK_EQ(rc, -ENOSPC);
	{
		char f[4300];

		snprintf(f, sizeof(f), "%s/seg-00000.kvs", d);
		CHECK(access(f, F_OK) < 0); /* what the failed open created is gone */
	}
	s = store(d, 256 * KiB, 8, KVS_SSD_NO_PREALLOC, 8, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (s) {
		printf("tmpfs: O_DIRECT %d, io_uring %d\n", kvs_ssd_direct(s),
		       kvs_ssd_uring(s));
		fill(src, 4096);
		for (i = 0; i < 300 && !seen; i++) {
			kvs_ssd_blk b = blk_of(1, (uint64_t)i, 4096);

			CHECK_EQ(kvs_ssd_write(s, &b, src, 0, 0, &l), 0);
			g.res[0] = 0;
			CHECK_EQ(drain(s, &g), 0);
			seen = g.res[0] == -ENOSPC;
		}
		CHECK(seen);
		kvs_ssd_stats_get(s, &st);
		CHECK(st.enospc >= 1);
		kvs_ssd_close(s);
	}
	umount2(d, MNT_DETACH);
	if (mount("tmpfs", d, "tmpfs", MS_RDONLY, "size=1m") == 0) {
		CHECK(store(d, 64 * KiB, 2, 0, 8, NULL, NULL, &rc) == NULL);
		CHECK_EQ(rc, -EROFS);
		umount2(d, MNT_DETACH);
	}
	free(src);
}

/* ---- the on-disk codecs alone (pure: no files) */

static void t_codec(void)
{
	static uint8_t sec[4096], good[4096];
	kvs_ssd_blk b = { .ns = 3, .len = 65536, .hash = { 0x1111, 0x2222 }, .csum = 0xc5c5 }, ob;
	kvs_ssd_loc l = { .seg = 7, .len = 65536, .gen = 99, .off = 8192 }, ol;
	kvs_ssd_sb sb = { .seg = 5, .used = 1, .seg_bytes = 1 << 20, .gen = 42 }, osb;
	size_t i;

	kvs_ssd_header_encode(good, &b, &l);
	CHECK(kvs_ssd_header_decode(good, sizeof(good), &ob, &ol) == 0);
	CHECK(ob.ns == b.ns && ob.len == b.len && ob.hash.lo == b.hash.lo &&
	      ob.hash.hi == b.hash.hi && ob.csum == b.csum);
	CHECK(ol.seg == l.seg && ol.len == l.len && ol.gen == l.gen && ol.off == l.off);
	for (i = KVS_SSD_HDR_BYTES; i < sizeof(good) && !good[i]; i++)
		;
	CHECK_EQ(i, sizeof(good)); /* the rest of the sector is zero */
	CHECK(kvs_ssd_header_decode(good, KVS_SSD_HDR_BYTES, &ob, &ol) == 0);
	CHECK(kvs_ssd_header_decode(good, KVS_SSD_HDR_BYTES - 1, &ob, &ol) == -EBADMSG);
	/* Any one bit flipped in the header: refused (the header checksum). */
	for (i = 0; i < KVS_SSD_HDR_BYTES * 8; i++) {
		memcpy(sec, good, KVS_SSD_HDR_BYTES);
		sec[i / 8] ^= (uint8_t)(1u << (i % 8));
		if (kvs_ssd_header_decode(sec, KVS_SSD_HDR_BYTES, &ob, &ol) != -EBADMSG) {
			CHECK(!"a flipped header bit decoded");
			break;
		}
	}
	/* Well checksummed but impossible: zero length, offsets 0 and unaligned. */
	l.len = 0;
	kvs_ssd_header_encode(sec, &b, &l);
	CHECK(kvs_ssd_header_decode(sec, sizeof(sec), &ob, &ol) == -EBADMSG);
	l.len = 65536;
	l.off = 0;
	kvs_ssd_header_encode(sec, &b, &l);
	CHECK(kvs_ssd_header_decode(sec, sizeof(sec), &ob, &ol) == -EBADMSG);
	l.off = 4096 + 512;
	kvs_ssd_header_encode(sec, &b, &l);
	CHECK(kvs_ssd_header_decode(sec, sizeof(sec), &ob, &ol) == -EBADMSG);
	memset(sec, 0, sizeof(sec));
	CHECK(kvs_ssd_header_decode(sec, sizeof(sec), &ob, &ol) == -EBADMSG);

	kvs_ssd_sb_encode(good, &sb);
	CHECK(kvs_ssd_sb_decode(good, sizeof(good), &osb) == 0);
	CHECK(osb.seg == sb.seg && osb.used == 1 && osb.seg_bytes == sb.seg_bytes &&
	      osb.gen == sb.gen);
	CHECK(kvs_ssd_sb_decode(good, KVS_SSD_SB_BYTES - 1, &osb) == -EBADMSG);
	for (i = 0; i < KVS_SSD_SB_BYTES * 8; i++) {
		memcpy(sec, good, KVS_SSD_SB_BYTES);
		sec[i / 8] ^= (uint8_t)(1u << (i % 8));
		if (kvs_ssd_sb_decode(sec, KVS_SSD_SB_BYTES, &osb) != -EBADMSG) {
			CHECK(!"a flipped superblock bit decoded");
			break;
		}
	}
	sb.used = 0;
	kvs_ssd_sb_encode(sec, &sb);
	CHECK(kvs_ssd_sb_decode(sec, sizeof(sec), &osb) == 0 && osb.used == 0);
	sb.seg_bytes = 1000; /* not a multiple of 4 KiB */
	kvs_ssd_sb_encode(sec, &sb);
	CHECK(kvs_ssd_sb_decode(sec, sizeof(sec), &osb) == -EBADMSG);
	sb.seg_bytes = 32 << 10; /* under 64 KiB */
	kvs_ssd_sb_encode(sec, &sb);
	CHECK(kvs_ssd_sb_decode(sec, sizeof(sec), &osb) == -EBADMSG);
	memset(sec, 0, sizeof(sec)); /* a fresh, zeroed file */
	CHECK(kvs_ssd_sb_decode(sec, sizeof(sec), &osb) == -EBADMSG);
	printf("test_ssd: codec: header and superblock round trip; every flipped bit refused\n");
}

int main(void)
{
	const char *t = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/kvs-ssd-XXXXXX", t && *t ? t : "/var/tmp");
	if (!mkdtemp(base)) {
		printf("skip: cannot make a temp directory: %s\n", strerror(errno));
		return 77;
	}
	printf("test_ssd: in %s\n", base);
	t_codec();
	t_errors();
	t_roundtrip("uring", 0, 1);
	t_roundtrip("sync", KVS_SSD_NO_URING, 1);
	t_roundtrip("buffered", KVS_SSD_NO_DIRECT, 0);
	t_throughput();
	t_corrupt("corrupt-uring", 0);
	t_corrupt("corrupt-sync", KVS_SSD_NO_URING);
	t_recycle();
	t_reopen();
	t_sync_eventfd();
	t_wait("wait-uring", 0);
	t_wait("wait-sync", KVS_SSD_NO_URING);
	t_close_inflight();
	t_enospc();
	rm_rf(base);
	if (check_summary("test_ssd"))
		return 1;
	if (skipped[0]) {
		printf("test_ssd: SKIP (the rest passed): NOT TESTED: %s\n", skipped);
		return 77;
	}
	return 0;
}
