/*
 * test_ssd_write_through - --ssd-write-through: a commit also writes the
 * block to SSD, so it is indexed as soon as its write completes, while it is
 * still in RAM, and it survives a kill -9 without ever having been evicted.
 *
 * A 2 MiB host tier of 64 KiB blocks (32 blocks) over 8 MiB of SSD in 1 MiB
 * segments. 6 chains of 4 blocks (24 blocks, less than the host tier): after
 * writes_inflight reaches 0, every block has an SSD copy and an index entry,
 * nothing was evicted or demoted, and every block is still in RAM
 * (blocks_ssd_only 0). Then kill -9 and restart on the same --ssd-dir: all
 * 24 are loaded from the index and hit with identical bytes, read back from
 * the segments (promotions).
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>

#define CHAINS 6
#define LEN 4
#define BLOCKS (CHAINS * LEN)

static th_daemon d;
static kvs_layout L;
static char ssd_dir[160];
static kvs_hash H[CHAINS][LEN];

int main(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", "--ssd-write-through", NULL };
	kvs_client *c;
	size_t bad;
	int hits;

	th_init("test_ssd_write_through");
	th_daemon_up_ssd(&d, args, ssd_dir, sizeof(ssd_dir));
	CHECK(th_log_contains(&d, "write-through"));
	L = th_layout("ssd-wt", 64);
	c = th_connect(&d, &L);

	for (int i = 0; i < CHAINS; i++) {
		th_chain(&L, 3000 + (uint64_t)i, LEN, 0, 0, H[i]);
		CHECK_RC(th_publish(c, H[i], LEN, NULL), LEN);
	}
	/* Right after commit: written and indexed, still in RAM. */
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&d, "tier_ssd.writes"), BLOCKS);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.blocks"), BLOCKS);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.index_entries"), BLOCKS);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.blocks_ssd_only"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_host.blocks"), BLOCKS);
	CHECK_EQ(th_stat_get(&d, "blocks.evicted"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.demotions"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.io_errors"), 0);
	/* Served from RAM while written through: no reads. */
	hits = th_verify_chains(c, &H[0][0], CHAINS, LEN, &bad);
	CHECK_EQ(hits, BLOCKS);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.reads"), 0);
	CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS));

	/* kill -9: nothing was ever evicted, all of it is on SSD. */
	kvs_close(c);
	th_daemon_kill(&d);
	if (th_daemon_start(&d) < 0)
		th_fatal("daemon did not restart");
	CHECK(th_wait_stat(&d, "tier_ssd.index_loading", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&d, "tier_ssd.restart_blocks"), BLOCKS);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.blocks_ssd_only"), BLOCKS);
	CHECK_EQ(th_stat_get(&d, "tier_host.blocks"), 0);
	c = th_connect(&d, &L);
	hits = th_verify_chains(c, &H[0][0], CHAINS, LEN, &bad);
	th_note("after kill -9: %d hits of %d written-through blocks, %zu wrong, "
		"%" PRId64 " read from SSD", hits, BLOCKS, bad,
		th_stat_get(&d, "tier_ssd.reads"));
	CHECK_EQ(hits, BLOCKS);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.promotions"), BLOCKS);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.reads"), BLOCKS);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 0);
	kvs_close(c);
	return th_finish();
}
