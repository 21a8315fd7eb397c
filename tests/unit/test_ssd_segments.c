/*
 * test_ssd_segments.c - the SSD segment store (storage/ssd/ssd*.c) alone:
 * its segments recycled, reopened, waited on and closed with I/O in
 * flight, and a full filesystem.
 *
 * Runs in a mkdtemp directory under $TMPDIR or /var/tmp. Parts that need a
 * capability the machine lacks say "skip:" with the reason; the rest still
 * runs, and the test then exits 77 naming what it did not test. Exit: 0
 * pass, 1 fail, 77 no temp directory or a part skipped.
 */
#include "ssd_test.h"

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
int main(void)
{
	int rc = ssd_test_begin("test_ssd_segments");

	if (rc)
		return rc;
	t_recycle();
	t_reopen();
	t_sync_eventfd();
	t_wait("wait-uring", 0);
	t_wait("wait-sync", KVS_SSD_NO_URING);
	t_close_inflight();
	t_enospc();
	return ssd_test_end("test_ssd_segments");
}
