/*
 * test_ssd_restart_load - a restart that serves while the index loads
 * (docs/ssd.md "Warm restart"): kill -9 a daemon with a few thousand blocks
 * indexed on SSD, restart it with the load slowed down (test knobs
 * KVS_SSD_LOAD_SLICE=1 entry per slice, KVS_SSD_LOAD_PAUSE_US=1000 after
 * each: about 4 s for the whole index) and use it during the load. Each
 * phase checks by a count that it ran during the load (index_loading still
 * 1 when its clients are done), never by a clock.
 *
 * 4 KiB blocks, a 1 MiB host tier, 32 MiB of SSD in 1 MiB segments (~4000
 * records). Before the kill: 800 chains of 4 published, 300 more, more of
 * their own until the oldest segments were recycled, then chains 0-49
 * published again (their blocks rewritten in newer segments, under newer
 * generations), and one
 * segment's superblock zeroed at the kill (recycled behind the index's
 * back: its entries name a generation the store no longer has).
 *  load:   right after READY the load is in progress (tier_ssd.index_loading
 *          1, fewer blocks loaded than indexed); 8 clients look up every
 *          chain at once: every hit's bytes are right, nothing is dropped
 *          as corrupt, lookups loaded blocks the load had not come to
 *          (index_faults > 0), and the load was still running when they
 *          were done (a count, not a clock). Once fully loaded (the log line,
 *          index_loading 0) the same lookups hit exactly as often as during
 *          the load: a block on SSD is a hit whether loaded yet or not,
 *          and the leaf of every whole chain is LEN deep (INSPECT).
 *  write:  kill -9 and a slow restart again; first, 8 kvs_reserve_after()
 *          of a child of a chain's last block (on SSD, not loaded yet)
 *          link to it (EXISTS, NEW; never NOPARENT); then during the load a writer
 *          publishes 20 chains that were fully on SSD (every block must be
 *          answered EXISTS: the index's copy, not a second one) and 250 new
 *          chains (demotions recycle segments whose entries are not loaded
 *          yet), while 4 readers verify everything. Then: still right
 *          bytes everywhere, no corrupt read, and every SSD copy indexed
 *          (tier_ssd.index_entries == tier_ssd.blocks: the load never
 *          deleted the entry of a block the table had).
 *  stale:  kill -9, segment 20's superblock zeroed, slow restart: 250 new
 *          chains published first (the store writes them into segment 20,
 *          over the records its stale entries name), then 8 readers look
 *          up everything, still during the load: no corrupt read (an entry
 *          loaded without its generation checked would be read there and
 *          fail the record's header), no wrong byte.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"
#include "kvshare_admin.h"

#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LEN 4
#define FIRST 800
#define MORE 300
#define CHAINS (FIRST + MORE)
#define AGAIN 50
#define READERS 8
#define REPUB 20
#define NEW_CHAINS 250
#define STALE_SEG 20
#define LOAD_MS 120000 /* deadline for a slowed load to finish */

static th_daemon d;
static kvs_layout L;
static char ssd_dir[160];
static int chain_hits[CHAINS];

static void chain(uint64_t i, kvs_hash *h)
{
	th_chain(&L, 5000 + i, LEN, 0, 0, h);
}

/* Verify chains @first, @first + @step, ...: reports hits, then bad bytes. */
typedef struct part {
	uint32_t first, step;
} part;

static int reader(void *arg, int fd)
{
	const part *p = arg;
	uint64_t hits = 0, bad = 0;
	kvs_client *c;

	if (kvs_connect(d.socket, &L, &c) < 0)
		return 2;
	for (uint32_t i = p->first; i < CHAINS; i += p->step) {
		kvs_hash h[LEN];
		size_t b = 0;
		int rc;

		chain(i, h);
		rc = th_verify(c, h, LEN, &b);
		if (rc < 0)
			return 3;
		hits += (uint64_t)rc;
		bad += b;
	}
	kvs_close(c);
	th_send_u64(fd, hits);
	th_send_u64(fd, bad);
	return 0;
}

/* The writer: @repub chains that were fully on SSD again (reports how many
 * of their blocks were not EXISTS), then NEW_CHAINS new ones from @seed. */
typedef struct wjob {
	uint32_t repub;
	uint64_t seed;
} wjob;

static int writer(void *arg, int fd)
{
	const wjob *j = arg;
	uint64_t notexist = 0, failed = 0;
	kvs_client *c;

	if (kvs_connect(d.socket, &L, &c) < 0)
		return 2;
	for (uint32_t i = 0, n = 0; i < CHAINS && n < j->repub; i++) {
		kvs_block b[LEN];
		kvs_hash h[LEN];

		if (chain_hits[i] != LEN)
			continue;
		n++;
		chain(i, h);
		if (th_publish(c, h, LEN, b) < 0) {
			failed++;
			continue;
		}
		for (int k = 0; k < LEN; k++)
			notexist += b[k].status != KVS_BLOCK_EXISTS;
	}
	for (uint32_t i = 0; i < NEW_CHAINS; i++) {
		kvs_hash h[LEN];

		th_chain(&L, j->seed + i, LEN, 0, 0, h);
		failed += th_publish(c, h, LEN, NULL) < 0;
	}
	kvs_close(c);
	th_send_u64(fd, notexist);
	th_send_u64(fd, failed);
	return 0;
}

/* Publish chains [a, b). */
static void publish(kvs_client *c, uint32_t a, uint32_t b)
{
	for (uint32_t i = a; i < b; i++) {
		kvs_hash h[LEN];

		chain(i, h);
		if (!CHECK_GE(th_publish(c, h, LEN, NULL), 0))
			return;
	}
}

/*
 * Whether @n segments were recycled, or demotion is off (an error; a store
 * that finds no segment it can recycle now stalls with demotion on,
 * docs/ssd.md "Stalls"; a restart turns demotion on again). Recycling is
 * this test's setting, not what it checks: the checks of the load hold
 * either way, and the log says which it was.
 */
static bool recycled_or_off(int64_t n, const char *what)
{
	if (th_stat_get(&d, "tier_ssd.recycled_segments") >= n)
		return true;
	if (th_stat_get(&d, "tier_ssd.enabled") != 0)
		return false;
	th_note("%s: demotion turned off (no recyclable segment) after %" PRId64
		" recycled", what, th_stat_get(&d, "tier_ssd.recycled_segments"));
	return true;
}

/* Every SSD write done and indexed. */
static void settle(void)
{
	int64_t end = th_now_ms() + 30000;

	while (th_now_ms() < end &&
	       (th_stat_get(&d, "tier_ssd.writes_inflight") != 0 ||
		th_stat_get(&d, "tier_ssd.index_entries") !=
		th_stat_get(&d, "tier_ssd.blocks")))
		th_poll_pause();
	CHECK_EQ(th_stat_get(&d, "tier_ssd.writes_inflight"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.index_entries"),
		 th_stat_get(&d, "tier_ssd.blocks"));
}

/* Every chain once, from this process: total hits, per chain in
 * chain_hits[] when @keep. */
static int verify_all(int keep, size_t *bad_out)
{
	kvs_client *c = th_connect(&d, &L);
	int total = 0;

	*bad_out = 0;
	for (uint32_t i = 0; i < CHAINS; i++) {
		kvs_hash h[LEN];
		size_t bad = 0;
		int rc;

		chain(i, h);
		rc = th_verify(c, h, LEN, &bad);
		if (!CHECK_GE(rc, 0))
			break;
		if (keep)
			chain_hits[i] = rc;
		total += rc;
		*bad_out += bad;
	}
	kvs_close(c);
	return total;
}

static int zero_superblock(unsigned seg)
{
	char path[300], zero[4096] = { 0 };
	int fd, rc;

	snprintf(path, sizeof(path), "%s/seg-%05u.kvs", ssd_dir, seg);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -1;
	rc = pwrite(fd, zero, sizeof(zero), 0) == (ssize_t)sizeof(zero) ? 0 : -1;
	close(fd);
	return rc;
}

/* kill -9, then a start with the load slowed down, checked in progress;
 * @zero_seg (or -1): that segment recycled behind the index's back. */
static int64_t slow_restart(const char *what, int zero_seg)
{
	int64_t indexed = th_stat_get(&d, "tier_ssd.index_entries");

	CHECK_EQ(th_daemon_kill(&d), 128 + SIGKILL);
	if (zero_seg >= 0)
		CHECK_EQ(zero_superblock((unsigned)zero_seg), 0);
	if (th_daemon_start(&d) < 0)
		th_fatal("%s: the daemon did not start on the old --ssd-dir", what);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.index_loading"), 1);
	CHECK_LT(th_stat_get(&d, "tier_ssd.index_loaded"), indexed);
	return indexed;
}

static void wait_loaded(const char *what)
{
	if (!CHECK(th_wait_stat(&d, "tier_ssd.index_loading", 0, LOAD_MS)))
		th_fatal("%s: the index did not finish loading", what);
	CHECK(th_log_contains(&d, "SSD tier: index fully loaded"));
}

/* The load linked blocks in the index's order, children before their
 * parents as often as not: INSPECT still finds every whole chain's leaf
 * LEN deep (the depth kept in the record, not walked). */
static void check_depths(void)
{
	kvs_client *ctl = th_connect(&d, NULL);
	int whole = 0, wrong = 0;

	for (uint32_t i = 0; i < CHAINS; i++) {
		kvs_block_info bi;
		kvs_hash h[LEN];

		if (chain_hits[i] != LEN)
			continue;
		chain(i, h);
		whole++;
		wrong += kvs_inspect(ctl, 0, h[LEN - 1], &bi) != 0 || bi.depth != LEN;
	}
	th_note("after the load: %d whole chains, %d leaves at a wrong depth",
		whole, wrong);
	CHECK_GT(whole, 0);
	CHECK_EQ(wrong, 0);
	kvs_close(ctl);
}

static void t_load(void)
{
	th_child r[READERS];
	part p[READERS];
	uint64_t hits = 0, bad = 0, v;
	int64_t indexed, faults, corrupt0;
	size_t after_bad;
	int after;

	indexed = slow_restart("load", 5);
	corrupt0 = th_stat_get(&d, "tier_ssd.corrupt_blocks");
	for (int i = 0; i < READERS; i++) {
		p[i] = (part){ (uint32_t)i, READERS };
		th_spawn(&r[i], reader, &p[i]);
	}
	for (int i = 0; i < READERS; i++) {
		CHECK_EQ(th_recv_u64(r[i].fd, &v, LOAD_MS), 0);
		hits += v;
		CHECK_EQ(th_recv_u64(r[i].fd, &v, LOAD_MS), 0);
		bad += v;
		CHECK_EQ(th_child_wait(&r[i], LOAD_MS), 0);
	}
	/* The lookups ran during the load: it is not over yet. */
	CHECK_EQ(th_stat_get(&d, "tier_ssd.index_loading"), 1);
	faults = th_stat_get(&d, "tier_ssd.index_faults");
	CHECK_GT(faults, 0);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), corrupt0);
	th_note("during the load: %" PRIu64 " hits (%" PRId64 " blocks loaded by "
		"lookups, %" PRId64 " by the load so far, of %" PRId64 " indexed)",
		hits, faults, th_stat_get(&d, "tier_ssd.index_loaded") - faults,
		indexed);
	wait_loaded("load");
	after = verify_all(1, &after_bad);
	CHECK_EQ(after_bad, 0);
	CHECK_EQ((uint64_t)after, hits);
	CHECK_GT(after, 0);
	check_depths();
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), corrupt0);
	th_note("fully loaded: %" PRId64 " blocks (%" PRId64 " stale dropped of %"
		PRId64 " indexed), %d hits as during the load",
		th_stat_get(&d, "tier_ssd.restart_blocks"),
		indexed - th_stat_get(&d, "tier_ssd.restart_blocks"), indexed, after);
}

/* SGLang's batches during the load: a kvs_reserve_after() whose parent is
 * the last block of a chain on SSD that the load has not reached yet links
 * to it (EXISTS, then NEW), never NOPARENT. Right after the restart, from
 * the last chains back (the load has barely begun). */
static void reserve_after_unloaded(void)
{
	int noparent = 0, tried = 0, faults0;
	kvs_client *c;

	faults0 = (int)th_stat_get(&d, "tier_ssd.index_faults");
	if (!CHECK_EQ(kvs_connect(d.socket, &L, &c), 0))
		return;
	for (uint32_t i = CHAINS; i-- > 0 && tried < 8;) {
		kvs_hash h[LEN], two[2];
		kvs_block b[2];
		kvs_lease lease = 0;

		if (chain_hits[i] != LEN)
			continue;
		tried++;
		chain(i, h);
		two[0] = h[LEN - 1];
		two[1] = (kvs_hash){ .lo = 0x5a61a77e00000000ull + i, .hi = i + 1 };
		if (!CHECK_GE(kvs_reserve_after(c, two, 2, &lease, b), 0))
			continue;
		noparent += b[0].status == KVS_BLOCK_NOPARENT;
		CHECK_EQ(b[0].status, KVS_BLOCK_EXISTS);
		CHECK_EQ(b[1].status, KVS_BLOCK_NEW);
		if (lease)
			CHECK_GE(kvs_abort(c, lease), 0);
	}
	kvs_close(c);
	CHECK_EQ(tried, 8);
	CHECK_EQ(noparent, 0);
	CHECK_GT(th_stat_get(&d, "tier_ssd.index_faults"), faults0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.index_loading"), 1);
}

static void t_write(void)
{
	th_child w, r[READERS / 2];
	part p[READERS / 2];
	wjob j = { REPUB, 900000 };
	uint64_t v, bad = 0;
	int64_t corrupt0, faults0;
	size_t fin_bad;
	int fin, full = 0;

	for (uint32_t i = 0; i < CHAINS; i++)
		full += chain_hits[i] == LEN;
	CHECK_GE(full, REPUB);
	slow_restart("write", -1);
	reserve_after_unloaded();
	corrupt0 = th_stat_get(&d, "tier_ssd.corrupt_blocks");
	faults0 = th_stat_get(&d, "tier_ssd.index_faults");
	th_spawn(&w, writer, &j);
	for (int i = 0; i < READERS / 2; i++) {
		p[i] = (part){ (uint32_t)i, READERS / 2 };
		th_spawn(&r[i], reader, &p[i]);
	}
	CHECK_EQ(th_recv_u64(w.fd, &v, LOAD_MS), 0);
	CHECK_EQ(v, 0); /* every block of a chain on SSD: EXISTS */
	CHECK_EQ(th_recv_u64(w.fd, &v, LOAD_MS), 0);
	CHECK_EQ(v, 0); /* no publish failed */
	CHECK_EQ(th_child_wait(&w, LOAD_MS), 0);
	for (int i = 0; i < READERS / 2; i++) {
		CHECK_EQ(th_recv_u64(r[i].fd, &v, LOAD_MS), 0);
		CHECK_EQ(th_recv_u64(r[i].fd, &v, LOAD_MS), 0);
		bad += v;
		CHECK_EQ(th_child_wait(&r[i], LOAD_MS), 0);
	}
	CHECK_EQ(th_stat_get(&d, "tier_ssd.index_loading"), 1);
	CHECK_GT(th_stat_get(&d, "tier_ssd.index_faults"), faults0);
	CHECK(recycled_or_off(1, "writes during the load"));
	CHECK_EQ(bad, 0);
	wait_loaded("write");
	settle();
	fin = verify_all(0, &fin_bad);
	CHECK_EQ(fin_bad, 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), corrupt0);
	settle();
	th_note("writes during the load: %" PRId64 " segments recycled, %d hits "
		"after, %" PRId64 " blocks on SSD, all indexed",
		th_stat_get(&d, "tier_ssd.recycled_segments"), fin,
		th_stat_get(&d, "tier_ssd.blocks"));
}

/*
 * A segment recycled behind the index's back (zeroed superblock: it opens
 * free) is the first the store writes new blocks to, at the offsets its
 * stale entries name: new chains are published during the load, and only
 * then every chain is looked up (still during the load): an entry loaded
 * without its generation checked would be read there, another block's
 * record, and dropped as corrupt.
 */
static void t_stale(void)
{
	th_child r[READERS];
	part p[READERS];
	wjob j = { 0, 950000 };
	uint64_t v, bad = 0;
	int64_t corrupt0, written0;
	size_t fin_bad;

	slow_restart("stale", STALE_SEG);
	corrupt0 = th_stat_get(&d, "tier_ssd.corrupt_blocks");
	written0 = th_stat_get(&d, "tier_ssd.writes");
	CHECK_EQ(th_run_child(writer, &j, LOAD_MS), 0);
	/* Segment 20, the only free one, is full (127 records of 8 KiB): its
	 * stale entries' offsets hold new blocks now, once the demotion writes
	 * in flight are done (the loop does not wait for the load's pauses:
	 * the reader thread takes them). */
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, LOAD_MS));
	CHECK_GE(th_stat_get(&d, "tier_ssd.writes") - written0, 127);
	for (int i = 0; i < READERS; i++) {
		p[i] = (part){ (uint32_t)i, READERS };
		th_spawn(&r[i], reader, &p[i]);
	}
	for (int i = 0; i < READERS; i++) {
		CHECK_EQ(th_recv_u64(r[i].fd, &v, LOAD_MS), 0);
		CHECK_EQ(th_recv_u64(r[i].fd, &v, LOAD_MS), 0);
		bad += v;
		CHECK_EQ(th_child_wait(&r[i], LOAD_MS), 0);
	}
	CHECK_EQ(th_stat_get(&d, "tier_ssd.index_loading"), 1);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), corrupt0);
	wait_loaded("stale");
	settle();
	verify_all(0, &fin_bad);
	CHECK_EQ(fin_bad, 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), corrupt0);
	th_note("segment %d recycled behind the index: %" PRId64 " blocks "
		"written during the load, %" PRId64 " corrupt reads", STALE_SEG,
		th_stat_get(&d, "tier_ssd.writes") - written0,
		th_stat_get(&d, "tier_ssd.corrupt_blocks") - corrupt0);
}

int main(void)
{
	static const char *args[] = { "--host-size", "1M", "--page-size", "4K",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
				      "--ssd-size", "32M", NULL };
	kvs_client *c;

	th_init("test_ssd_restart_load");
	if (th_daemon_init(&d, args) < 0)
		th_fatal("cannot make a temp dir");
	snprintf(ssd_dir, sizeof(ssd_dir), "%s/ssd", d.dir);
	if (mkdir(ssd_dir, 0700) < 0)
		th_fatal("mkdir %s", ssd_dir);
	th_daemon_setenv(&d, "KVS_SSD_LOAD_SLICE=1");
	th_daemon_setenv(&d, "KVS_SSD_LOAD_PAUSE_US=1000");
	if (th_daemon_start(&d) < 0)
		th_fatal("the daemon did not start");
	L = th_layout("ssd-restart-load", 4); /* 4 KiB blocks */
	c = th_connect(&d, &L);
	publish(c, 0, FIRST);
	publish(c, FIRST, CHAINS);
	/* Chains of their own until the oldest segments were recycled (or
	 * demotion went off: see recycled_or_off). */
	for (uint32_t i = 0; i < 4000 && !recycled_or_off(2, "before the kill");
	     i++) {
		kvs_hash h[LEN];

		th_chain(&L, 700000 + i, LEN, 0, 0, h);
		if (!CHECK_GE(th_publish(c, h, LEN, NULL), 0))
			break;
	}
	publish(c, 0, AGAIN);
	kvs_close(c);
	settle();
	CHECK(recycled_or_off(2, "before the kill"));
	th_note("before the kill: %" PRId64 " blocks indexed, %" PRId64
		" segments recycled, %" PRId64 " demotions not admitted, "
		"enabled %" PRId64 ", io_errors %" PRId64,
		th_stat_get(&d, "tier_ssd.index_entries"),
		th_stat_get(&d, "tier_ssd.recycled_segments"),
		th_stat_get(&d, "tier_ssd.admission_rejected"),
		th_stat_get(&d, "tier_ssd.enabled"),
		th_stat_get(&d, "tier_ssd.io_errors"));
	t_load();
	t_write();
	t_stale();
	return th_finish();
}
