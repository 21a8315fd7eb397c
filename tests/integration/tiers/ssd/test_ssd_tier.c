/*
 * test_ssd_tier - the SSD tier under a small host tier (64 KiB blocks, a
 * 2 MiB host tier: 32 blocks; 1 MiB segments, 8 MiB of SSD).
 *  demote/promote: publishing 64 blocks demotes the oldest to SSD; looking
 *            every chain up again returns identical bytes, with promotions
 *            counted.
 *  restart:  after kill -9 and a restart on the same --ssd-dir, the indexed
 *            blocks (whole chains, at least half of them) are loaded and
 *            every one hits with identical bytes.
 *  stale:    with segment 0's superblock zeroed (recycled behind the
 *            index's back), its index entries are dropped at load: fewer
 *            blocks load, some still do, and every hit is right.
 *  corrupt:  with a byte flipped in the payload of every record on disk, a
 *            lookup never returns data that differs: the blocks are misses
 *            and ssd corrupt_blocks counts them.
 *  recycle:  writing past the SSD size recycles the oldest segments; the
 *            newest 8 chains hit from RAM, and whatever older block is
 *            still found is still right.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <dirent.h>
#include <inttypes.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHAINS 16
#define LEN 4
#define RECYCLE_CHAINS 32

static th_daemon d;
static kvs_layout L;
static char ssd_dir[160];
static kvs_hash H[CHAINS][LEN];
static kvs_hash R[RECYCLE_CHAINS][LEN];

/* Flip one payload byte of every record in every segment file. */
static int corrupt_all(void)
{
	DIR *dir = opendir(ssd_dir);
	struct dirent *e;
	int flipped = 0;

	if (!dir)
		return -1;
	while ((e = readdir(dir))) {
		char path[512];
		uint8_t sec[4096];
		int fd;
		off_t off;

		if (strncmp(e->d_name, "seg-", 4) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", ssd_dir, e->d_name);
		fd = open(path, O_RDWR);
		if (fd < 0)
			continue;
		for (off = 4096; pread(fd, sec, sizeof(sec), off) == sizeof(sec);
		     off += 4096) {
			uint32_t magic;

			memcpy(&magic, sec, 4);
			if (magic != 0x4253564bu)
				continue;
			if (pread(fd, sec, 1, off + 4096 + 100) == 1) {
				sec[0] ^= 0x5a;
				if (pwrite(fd, sec, 1, off + 4096 + 100) == 1)
					flipped++;
			}
		}
		close(fd);
	}
	closedir(dir);
	return flipped;
}

/* Zero the superblock of segment @seg: it opens as a free segment. */
static int zero_superblock(unsigned seg)
{
	char path[512];
	uint8_t zero[4096] = { 0 };
	int fd, rc;

	snprintf(path, sizeof(path), "%s/seg-%05u.kvs", ssd_dir, seg);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -errno;
	rc = pwrite(fd, zero, sizeof(zero), 0) == (ssize_t)sizeof(zero) ? 0 : -EIO;
	close(fd);
	return rc;
}

/* demote / promote */
static void demote_then_promote(kvs_client *c)
{
	size_t bad;
	int hits;

	for (int i = 0; i < CHAINS; i++) {
		th_chain(&L, 1000 + (uint64_t)i, LEN, 0, 0, H[i]);
		CHECK_RC(th_publish(c, H[i], LEN, NULL), LEN);
	}
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK_GT(th_stat_get(&d, "tier_ssd.demotions"), 0);
	CHECK_GT(th_stat_get(&d, "tier_ssd.writes"), 0);
	hits = th_verify_chains(c, &H[0][0], CHAINS, LEN, &bad);
	CHECK_EQ(hits, CHAINS * LEN);
	CHECK_EQ(bad, 0);
	CHECK_GT(th_stat_get(&d, "tier_ssd.promotions"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 0);
	CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS));
}

/* restart after kill -9: the indexed blocks load and all hit. *@c is
 * closed and replaced by a client of the restarted daemon. Returns how
 * many blocks were indexed. */
static int64_t restart_after_kill(kvs_client **c)
{
	int64_t indexed;
	size_t bad;
	int hits;

	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	indexed = th_stat_get(&d, "tier_ssd.index_entries");
	CHECK_GT(indexed, 0);
	kvs_close(*c);
	th_daemon_kill(&d);
	if (th_daemon_start(&d) < 0)
		th_fatal("daemon did not restart");
	CHECK(th_wait_stat(&d, "tier_ssd.index_loading", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&d, "tier_ssd.restart_blocks"), indexed);
	*c = th_connect(&d, &L);
	hits = th_verify_chains(*c, &H[0][0], CHAINS, LEN, &bad);
	th_note("after restart: %d hits of %" PRId64 " indexed blocks", hits, indexed);
	/* At least the first 8 chains went through the SSD while publishing;
	 * chains leave RAM whole (leaf-first, 4 blocks per publish), so every
	 * indexed block has its prefix indexed too, and every one hits. */
	CHECK_GE(indexed, CHAINS * LEN / 2);
	CHECK_EQ(hits, indexed);
	CHECK_EQ(bad, 0);
	return indexed;
}

/* stale: segment 0 (the first demotions') recycled behind the index's
 * back, as by a crash between a recycle and the index commit: its
 * superblock is gone, so its entries are dropped at load and the rest
 * is loaded; nothing wrong is served. *@c is replaced as above. */
static void restart_with_stale_segment(kvs_client **c, int64_t indexed)
{
	int64_t loaded;
	size_t bad;
	int hits;

	kvs_close(*c);
	th_daemon_kill(&d);
	CHECK_EQ(zero_superblock(0), 0);
	if (th_daemon_start(&d) < 0)
		th_fatal("daemon did not restart");
	CHECK(th_wait_stat(&d, "tier_ssd.index_loading", 0, TH_WAIT_MS));
	loaded = th_stat_get(&d, "tier_ssd.restart_blocks");
	th_note("segment 0 stale: %" PRId64 " of %" PRId64 " indexed blocks loaded",
		loaded, indexed);
	CHECK_LT(loaded, indexed);
	CHECK_GT(loaded, 0);
	*c = th_connect(&d, &L);
	hits = th_verify_chains(*c, &H[0][0], CHAINS, LEN, &bad);
	CHECK_LE(hits, loaded);
	CHECK_EQ(bad, 0);
}

/* corrupt every record on disk: all misses, counted. *@c is replaced. */
static void restart_with_corrupt_records(kvs_client **c)
{
	size_t bad;
	int hits;

	kvs_close(*c);
	th_daemon_kill(&d);
	CHECK_GT(corrupt_all(), 0);
	if (th_daemon_start(&d) < 0)
		th_fatal("daemon did not restart");
	*c = th_connect(&d, &L);
	hits = th_verify_chains(*c, &H[0][0], CHAINS, LEN, &bad);
	CHECK_EQ(hits, 0);
	CHECK_EQ(bad, 0);
	CHECK_GT(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 0);
}

/* recycle: 32 new chains, 128 blocks, past what 8 MiB of SSD holds
 * beside the records already there */
static void recycle_segments(kvs_client *c)
{
	size_t bad;
	int hits;

	for (int i = 0; i < RECYCLE_CHAINS; i++) {
		th_chain(&L, 5000 + (uint64_t)i, LEN, 0, 0, R[i]);
		CHECK_RC(th_publish(c, R[i], LEN, NULL), LEN);
		CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	}
	CHECK_GT(th_stat_get(&d, "tier_ssd.recycled_segments"), 0);
	/* The last 8 chains fill the 32-block host tier: all hit, from RAM. */
	hits = th_verify_chains(c, &R[RECYCLE_CHAINS - 8][0], 8, LEN, &bad);
	CHECK_EQ(hits, 8 * LEN);
	CHECK_EQ(bad, 0);
	/* The older ones: whatever is still found is right. */
	hits = th_verify_chains(c, &R[0][0], RECYCLE_CHAINS - 8, LEN, &bad);
	th_note("after recycling: %d of %d older blocks still found", hits,
		(RECYCLE_CHAINS - 8) * LEN);
	CHECK_GE(hits, 0);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.io_errors"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.enabled"), 1);
}

int main(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", NULL };
	kvs_client *c;
	int64_t indexed;

	th_init("test_ssd_tier");
	th_daemon_up_ssd(&d, args, ssd_dir, sizeof(ssd_dir));
	L = th_layout("ssd-model", 64);
	c = th_connect(&d, &L);

	demote_then_promote(c);
	indexed = restart_after_kill(&c);
	restart_with_stale_segment(&c, indexed);
	restart_with_corrupt_records(&c);
	recycle_segments(c);
	kvs_close(c);
	return th_finish();
}
