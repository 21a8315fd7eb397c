/*
 * test_ssd_sync - the SSD tier's synchronous fallback through the daemon:
 * KVS_SSD_NO_URING=1 in kvshared's environment (only there: th_daemon_setenv)
 * makes the segment store use pwritev/preadv instead of io_uring, with the
 * completions still delivered through the eventfd the loop watches.
 *
 * A 2 MiB host tier of 64 KiB blocks (32 blocks) over 8 MiB of SSD in 1 MiB
 * segments: 16 chains of 4 blocks demote the oldest 32; looking every chain
 * up again promotes them back with identical bytes. The daemon must log that
 * it runs without io_uring (so the variable did reach it), and a kill -9 and
 * restart must find the indexed blocks again with identical bytes.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>

#define CHAINS 16
#define LEN 4

static th_daemon d;
static kvs_layout L;
static char ssd_dir[160];
static kvs_hash H[CHAINS][LEN];

int main(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", NULL };
	th_stats before, after;
	kvs_client *c;
	size_t bad;
	int hits;
	int64_t indexed;

	th_init("test_ssd_sync");
	if (th_daemon_init(&d, args) < 0)
		th_fatal("cannot make a temp dir");
	snprintf(ssd_dir, sizeof(ssd_dir), "%s/ssd", d.dir);
	if (mkdir(ssd_dir, 0700) < 0)
		th_fatal("mkdir %s", ssd_dir);
	th_daemon_setenv(&d, "KVS_SSD_NO_URING=1");
	if (th_daemon_start(&d) < 0)
		th_fatal("daemon did not start");
	CHECK(th_log_contains(&d, "io_uring unavailable: synchronous I/O"));
	CHECK_EQ(th_stat_get(&d, "tier_ssd.enabled"), 1);
	L = th_layout("ssd-sync", 64);
	c = th_connect(&d, &L);

	/* demote: twice the host tier */
	for (int i = 0; i < CHAINS; i++) {
		th_chain(&L, 2000 + (uint64_t)i, LEN, 0, 0, H[i]);
		CHECK_RC(th_publish(c, H[i], LEN, NULL), LEN);
	}
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK_GE(th_stat_get(&d, "tier_ssd.demotions"), CHAINS * LEN - 32);
	CHECK_GE(th_stat_get(&d, "tier_ssd.writes"), CHAINS * LEN - 32);
	CHECK_GE(th_stat_get(&d, "tier_ssd.blocks_ssd_only"), CHAINS * LEN - 32);

	/* promote: every block back, byte for byte */
	th_stats_take(&d, &before);
	hits = th_verify_chains(c, &H[0][0], CHAINS, LEN, &bad);
	th_stats_take(&d, &after);
	CHECK_EQ(hits, CHAINS * LEN);
	CHECK_EQ(bad, 0);
	CHECK_GE(th_stats_delta(&before, &after, "tier_ssd.promotions"), 32);
	CHECK_GE(th_stats_delta(&before, &after, "tier_ssd.reads"), 1);
	CHECK_EQ(th_stats_val(&after, "tier_ssd.corrupt_blocks"), 0);
	CHECK_EQ(th_stats_val(&after, "tier_ssd.io_errors"), 0);
	CHECK_EQ(th_stats_val(&after, "tier_ssd.enabled"), 1);
	th_note("sync round trip: %" PRId64 " demotions, %" PRId64
		" promotions (%" PRId64 " reads), %d hits, 0 wrong",
		th_stats_val(&after, "tier_ssd.demotions"),
		th_stats_delta(&before, &after, "tier_ssd.promotions"),
		th_stats_delta(&before, &after, "tier_ssd.reads"), hits);
	th_stats_free(&before);
	th_stats_free(&after);
	CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS));

	/* kill -9 and restart, still synchronous */
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	indexed = th_stat_get(&d, "tier_ssd.index_entries");
	CHECK_GT(indexed, 0);
	kvs_close(c);
	th_daemon_kill(&d);
	if (th_daemon_start(&d) < 0)
		th_fatal("daemon did not restart");
	CHECK(th_wait_stat(&d, "tier_ssd.index_loading", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&d, "tier_ssd.restart_blocks"), indexed);
	c = th_connect(&d, &L);
	hits = th_verify_chains(c, &H[0][0], CHAINS, LEN, &bad);
	th_note("after kill -9: %d hits of %" PRId64 " indexed blocks", hits, indexed);
	CHECK_GE(hits, indexed);
	CHECK_EQ(bad, 0);
	kvs_close(c);
	return th_finish();
}
