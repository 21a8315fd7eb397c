/*
 * test_ssd.c - the SSD segment store (storage/ssd/ssd*.c) alone.
 *
 * Runs in a mkdtemp directory under $TMPDIR or /var/tmp. Parts that need a
 * capability the machine lacks (O_DIRECT on that filesystem, io_uring,
 * mount permission for a size-limited tmpfs) say "skip:" with the reason;
 * the rest still runs, and the test then exits 77 naming what it did not
 * test. Exit: 0 pass, 1 fail, 77 no temp directory or a part skipped.
 */
#include "ssd_test.h"

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

/* A round trip's blocks: RT_NB in flight at once, block i of rt_sizes[i % 7]
 * bytes. */
enum { RT_NB = 96 };
static const uint32_t rt_sizes[] = { 4096, 8192, 65536, 12345, 300000,
				     1048576, 100 };

/* Every block written at once, then drained: each completes with the
 * checksum of its bytes. Returns the seconds it took. */
static double rt_write_all(kvs_ssd *s, struct got *g, uint8_t **src,
			   kvs_ssd_loc *loc)
{
	double t0, tw;
	int rc, i, ok = 1;

	t0 = now_s();
	for (i = 0; i < RT_NB; i++) {
		kvs_ssd_blk b = blk_of(3, (uint64_t)i, rt_sizes[i % 7]);

		/* every 5th source is unaligned: the copying path */
		rc = kvs_ssd_write(s, &b, src[i] + (i % 5 == 4), 0, (uint64_t)i, &loc[i]);
		CHECK_EQ(rc, 0);
		CHECK_EQ(loc[i].off % 4096, 0);
	}
	CHECK(kvs_ssd_inflight(s) > 1);
	CHECK_EQ(drain(s, g), 0);
	tw = now_s() - t0;
	CHECK_EQ(g->n, RT_NB);
	for (i = 0; i < RT_NB; i++) {
		ok &= g->res[i] == 0;
		ok &= g->c[i].blk.csum ==
		      kvs_ssd_checksum(src[i] + (i % 5 == 4), rt_sizes[i % 7]);
	}
	CHECK(ok);
	return tw;
}

/* Every block read back at once, then drained: the same bytes, length and
 * namespace. Returns the seconds it took. */
static double rt_read_all(kvs_ssd *s, struct got *g, uint8_t **src,
			  uint8_t **dst, kvs_ssd_loc *loc)
{
	double t0, tr;
	int rc, i, ok;

	g->n = 0;
	t0 = now_s();
	for (i = 0; i < RT_NB; i++) {
		kvs_ssd_blk b = blk_of(3, (uint64_t)i, rt_sizes[i % 7]);

		/* every 7th destination is unaligned: the bounce path */
		rc = kvs_ssd_read(s, &loc[i], &b, 0, dst[i] + (i % 7 == 6), (uint64_t)i);
		CHECK_EQ(rc, 0);
	}
	CHECK_EQ(drain(s, g), 0);
	tr = now_s() - t0;
	CHECK_EQ(g->n, RT_NB);
	for (i = 0, ok = 1; i < RT_NB; i++) {
		ok &= g->res[i] == 0;
		ok &= memcmp(src[i] + (i % 5 == 4), dst[i] + (i % 7 == 6),
			     rt_sizes[i % 7]) == 0;
		ok &= g->c[i].blk.len == rt_sizes[i % 7] && g->c[i].blk.ns == 3;
	}
	CHECK(ok);
	return tr;
}

/* On disk: a record header at each 4 KiB-aligned location (block 5's). */
static void rt_check_header(const char *d, const kvs_ssd_loc *loc)
{
	char f[4300];
	uint32_t magic;
	int fd;

	snprintf(f, sizeof(f), "%s/seg-%05u.kvs", d, loc[5].seg);
	fd = open(f, O_RDONLY);
	CHECK(fd >= 0 && pread(fd, &magic, 4, (off_t)loc[5].off) == 4);
	CHECK_EQ(magic, 0x4253564bu);
	close(fd);
}

/*
 * Round trip: many blocks of several sizes in flight at once, aligned and
 * unaligned buffers, partial last sectors; every byte and checksum back.
 */
static void t_roundtrip(const char *name, unsigned flags, int timed)
{
	char d[4200];
	uint8_t *src[RT_NB], *dst[RT_NB];
	kvs_ssd_loc loc[RT_NB];
	struct got *g = calloc(1, sizeof(*g));
	kvs_ssd_stats st;
	kvs_ssd *s;
	uint64_t bytes = 0;
	double tw, tr;
	int rc, i;

	subdir(d, sizeof(d), name);
	s = store(d, 16 * MiB, 8, flags, 16, NULL, NULL, &rc);
	CHECK_EQ(rc, 0);
	if (!s || !g)
		return;
	printf("%s: io_uring %d, O_DIRECT %d\n", name, kvs_ssd_uring(s), kvs_ssd_direct(s));
	if (!(flags & KVS_SSD_NO_DIRECT) && !kvs_ssd_direct(s))
		skip_part("%s O_DIRECT: the filesystem of %s refuses it", name, d);
	for (i = 0; i < RT_NB; i++) {
		uint32_t len = rt_sizes[i % 7];

		src[i] = abuf(len);
		dst[i] = abuf(len);
		fill(src[i] + (i % 5 == 4), len);
		bytes += len;
	}
	tw = rt_write_all(s, g, src, loc);
	tr = rt_read_all(s, g, src, dst, loc);
	rt_check_header(d, loc);
	kvs_ssd_stats_get(s, &st);
	CHECK_EQ(st.blocks_written, RT_NB);
	CHECK_EQ(st.blocks_read, RT_NB);
	CHECK_EQ(st.bytes_written, bytes);
	CHECK_EQ(st.corrupt_reads, 0);
	if (kvs_ssd_uring(s))
		CHECK(st.inflight_max > 1); /* queue depth > 1 really happened */
	printf("%s: %d blocks, %.1f MiB: write %.0f MiB/s, read %.0f MiB/s; "
	       "write lat avg %llu p99 %llu us, read avg %llu p99 %llu us, "
	       "max in flight %llu\n", name, RT_NB, (double)bytes / MiB,
	       (double)bytes / MiB / tw, (double)bytes / MiB / tr,
	       (unsigned long long)st.write_lat_avg_us,
	       (unsigned long long)st.write_lat_p99_us,
	       (unsigned long long)st.read_lat_avg_us,
	       (unsigned long long)st.read_lat_p99_us,
	       (unsigned long long)st.inflight_max);
	for (i = 0; i < RT_NB; i++) {
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
	int rc = ssd_test_begin("test_ssd");

	if (rc)
		return rc;
	t_codec();
	t_errors();
	t_roundtrip("uring", 0, 1);
	t_roundtrip("sync", KVS_SSD_NO_URING, 1);
	t_roundtrip("buffered", KVS_SSD_NO_DIRECT, 0);
	t_throughput();
	t_corrupt("corrupt-uring", 0);
	t_corrupt("corrupt-sync", KVS_SSD_NO_URING);
	return ssd_test_end("test_ssd");
}
