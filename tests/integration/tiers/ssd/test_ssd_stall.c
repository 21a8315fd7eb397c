/*
 * test_ssd_stall - the SSD tier out of recyclable segments under many
 * clients, as the soak found it (24 MiB in 2 MiB segments, 16 clients:
 * "no segment to recycle" was taken for a full disk and turned demotion
 * off for good). It must stay on, drop what it cannot write meanwhile, and
 * demote again as soon as a segment can be had.
 *
 * The daemon: a host tier of 64 blocks of 16 KiB, an SSD tier of 8
 * segments of 256 KiB (12 records each: 96 blocks), queue depth 1, so that
 * reads wait in the store and keep their segments busy. 16 child
 * processes, each with its own connection, run rounds of lookups (every
 * hit's bytes checked against its block's pattern) and publishes over 64
 * chains of 4 blocks (256 blocks, four times the host tier): every
 * publish evicts, every eviction demotes, lookups promote from SSD.
 *
 *  stall:   rounds until tier_ssd.stalls counts an episode (every used
 *           segment under I/O or holding blocks being promoted), at most
 *           TRIES of them: the condition must happen.
 *  resume:  one more round after it: demotions and SSD writes grow,
 *           tier_ssd.enabled is 1, no I/O error; segments holding blocks
 *           pinned in RAM were recycled (tier_ssd.recycle_forced: such a
 *           segment was kept before, and with this many readers every
 *           segment had one); the log has the episode's start and end
 *           lines.
 *  bytes:   not one wrong byte in any hit of any round; nothing corrupt;
 *           no lease, pin or write left; a fresh chain published by one
 *           client is demoted and read back from SSD, every byte right.
 *  promoting: what recycling must not take. A second daemon: 2 segments of
 *           256 KiB (3 records of 64 KiB blocks each) under a 32-block host
 *           tier. Chain C (3 blocks) is demoted first (segment 0, the
 *           oldest), 3 filler blocks after it (segment 1); kill -9 and a
 *           restart seal both and load the 6 as SSD-only blocks. 32 new
 *           blocks fill RAM; then a lookup of C pins it and promotes it:
 *           the first promotion evicts a block, whose demotion needs a
 *           segment: segment 0 holds C's blocks, pinned and not read yet,
 *           and must be kept (segment 1 is recycled instead). All 3 hit,
 *           every byte right. (Recycling segment 0 there forgot the pinned
 *           records under the lookup: a miss here; in the soak, hits
 *           answered from reused records, wrong bytes, a leaked slot.)
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLIENTS 16
#define CHAINS 64
#define LEN 4
#define OPS 150   /* per client and round */
#define TRIES 20  /* rounds to see a stall */
#define ROUND_MS 60000

static th_daemon d, dp;
static kvs_layout L;
static char ssd_dir[160], pdir[160];
static kvs_hash H[CHAINS][LEN];

/* One client's round: OPS lookups or publishes of random chains. Sends
 * hits and wrong blocks to the parent; a failed call is a failed check
 * unless it is the refusal the load explains (KVS_E_FULL: every slot pinned). */
static int client(void *arg, int fd)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg, hits = 0, wrong = 0;
	kvs_client *c = th_connect(&d, &L);

	srand48((long)seed);
	for (int i = 0; i < OPS; i++) {
		const kvs_hash *h = H[lrand48() % CHAINS];
		size_t bad = 0;
		int rc;

		if (lrand48() % 2) {
			rc = th_verify(c, h, LEN, &bad);
			if (rc > 0)
				hits += (uint64_t)rc;
			wrong += bad;
		} else {
			rc = th_publish(c, h, LEN, NULL);
		}
		if (rc < 0 && rc != KVS_E_FULL) {
			th_note("client %" PRIu64 ": op %d: %s", seed, i, kvs_strerror(rc));
			CHECK_GE(rc, 0);
		}
	}
	kvs_close(c);
	th_send_u64(fd, hits);
	th_send_u64(fd, wrong);
	return 0;
}

/* One round of every client; adds their hits and wrong blocks. */
static void round_all(int r, uint64_t *hits, uint64_t *wrong)
{
	th_child ch[CLIENTS];

	for (int i = 0; i < CLIENTS; i++)
		th_spawn(&ch[i], client, (void *)(uintptr_t)(r * 1000 + i + 1));
	for (int i = 0; i < CLIENTS; i++) {
		uint64_t h = 0, w = 0;

		CHECK_EQ(th_recv_u64(ch[i].fd, &h, ROUND_MS), 0);
		CHECK_EQ(th_recv_u64(ch[i].fd, &w, ROUND_MS), 0);
		CHECK_EQ(th_child_wait(&ch[i], ROUND_MS), 0);
		close(ch[i].fd);
		*hits += h;
		*wrong += w;
	}
}

static void promoting(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", pdir, "--ssd-segment", "256K",
				      "--ssd-size", "512K", NULL };
	kvs_layout l = th_layout("ssd-promoting", 64);
	kvs_hash C[3], f[40][1];
	kvs_client *c;
	size_t bad;
	int n = 0;

	th_daemon_up_ssd(&dp, args, pdir, sizeof(pdir));
	c = th_connect(&dp, &l);
	th_chain(&l, 100, 3, 0, 0, C);
	CHECK_RC(th_publish(c, C, 3, NULL), 3);
	/* Never hit, C leaves RAM first, leaf first: segment 0. */
	while (n < 40 && th_stat_get(&dp, "tier_ssd.writes") < 6) {
		th_chain(&l, 200 + (uint64_t)n, 1, 0, 0, f[n]);
		CHECK_RC(th_publish(c, f[n++], 1, NULL), 1);
		CHECK(th_wait_stat(&dp, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	}
	CHECK_EQ(th_stat_get(&dp, "tier_ssd.writes"), 6);
	CHECK_EQ(th_stat_get(&dp, "tier_ssd.recycled_segments"), 0);
	CHECK(th_wait_stat(&dp, "tier_ssd.index_entries", 6, TH_WAIT_MS));
	kvs_close(c);
	th_daemon_kill(&dp);
	if (th_daemon_start(&dp) < 0)
		th_fatal("daemon did not restart");
	CHECK(th_wait_stat(&dp, "tier_ssd.index_loading", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&dp, "tier_ssd.restart_blocks"), 6);
	c = th_connect(&dp, &l);
	for (int i = 0; i < 32; i++) {
		kvs_hash h;

		th_chain(&l, 300 + (uint64_t)i, 1, 0, 0, &h);
		CHECK_RC(th_publish(c, &h, 1, NULL), 1);
	}
	CHECK_EQ(th_stat_get(&dp, "blocks.evicted"), 0);
	CHECK_EQ(th_verify(c, C, 3, &bad), 3);
	CHECK_EQ(bad, 0);
	th_note("promoting: %" PRId64 " promoted, %" PRId64 " segments recycled, "
		"%" PRId64 " stalls", th_stat_get(&dp, "tier_ssd.promotions"),
		th_stat_get(&dp, "tier_ssd.recycled_segments"),
		th_stat_get(&dp, "tier_ssd.stalls"));
	CHECK_EQ(th_stat_get(&dp, "tier_ssd.promotions"), 3);
	CHECK_GE(th_stat_get(&dp, "tier_ssd.recycled_segments"), 1);
	CHECK(th_wait_stat(&dp, "leases.active", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&dp, "leases.pinned_blocks"), 0);
	kvs_close(c);
}

int main(void)
{
	static const char *args[] = { "--host-size", "1M", "--page-size", "64K",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "256K",
				      "--ssd-size", "2M", "--ssd-queue-depth", "1",
				      NULL };
	uint64_t hits = 0, wrong = 0;
	int64_t stalls = 0, dem, wr;
	kvs_hash F[LEN];
	kvs_client *c;
	size_t bad;
	int r;

	th_init("test_ssd_stall");
	th_daemon_up_ssd(&d, args, ssd_dir, sizeof(ssd_dir));
	L = th_layout("ssd-stall", 16);
	for (int i = 0; i < CHAINS; i++)
		th_chain(&L, 7000 + (uint64_t)i, LEN, 0, 0, H[i]);

	/* stall */
	for (r = 0; r < TRIES && stalls <= 0; r++) {
		round_all(r, &hits, &wrong);
		stalls = th_stat_get(&d, "tier_ssd.stalls");
	}
	th_note("%d rounds to a stall: %" PRId64 " episodes, %" PRId64
		" writes dropped, %" PRId64 " segments recycled (%" PRId64
		" with pinned blocks), enabled %" PRId64, r, stalls,
		th_stat_get(&d, "tier_ssd.stall_drops"),
		th_stat_get(&d, "tier_ssd.recycled_segments"),
		th_stat_get(&d, "tier_ssd.recycle_forced"),
		th_stat_get(&d, "tier_ssd.enabled"));
	CHECK_GT(stalls, 0);
	CHECK_GT(th_stat_get(&d, "tier_ssd.stall_drops"), 0);

	/* resume */
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	dem = th_stat_get(&d, "tier_ssd.demotions");
	wr = th_stat_get(&d, "tier_ssd.writes");
	round_all(r, &hits, &wrong);
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	th_note("after the stall: %" PRId64 " demotions, %" PRId64
		" SSD writes more; %" PRId64 " episodes in all, %" PRId64 " ms",
		th_stat_get(&d, "tier_ssd.demotions") - dem,
		th_stat_get(&d, "tier_ssd.writes") - wr,
		th_stat_get(&d, "tier_ssd.stalls"),
		th_stat_get(&d, "tier_ssd.stall_ms"));
	CHECK_GT(th_stat_get(&d, "tier_ssd.demotions"), dem);
	CHECK_GT(th_stat_get(&d, "tier_ssd.writes"), wr);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.enabled"), 1);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.io_errors"), 0);
	/* Readers pin blocks all over the segments: segments with pinned
	 * blocks in RAM are recycled (vetoed before, the soak's cause). */
	CHECK_GT(th_stat_get(&d, "tier_ssd.recycle_forced"), 0);
	CHECK(th_log_contains(&d, "no segment can be recycled now"));
	CHECK(th_log_contains(&d, "demoting again after"));

	/* bytes */
	th_note("%" PRIu64 " blocks hit, %" PRIu64 " wrong", hits, wrong);
	CHECK_GT(hits, 0);
	CHECK_EQ(wrong, 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 0);
	CHECK_GT(th_stat_get(&d, "tier_ssd.promotions"), 0);
	CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_host.blocks_writing"), 0);
	/* A fresh chain, then every other chain over it (evicting it to SSD,
	 * demotion on), then the fresh one back with every byte right. */
	c = th_connect(&d, &L);
	th_chain(&L, 9999, LEN, 0, 0, F);
	CHECK_RC(th_publish(c, F, LEN, NULL), LEN);
	dem = th_stat_get(&d, "tier_ssd.promotions");
	for (int i = 0; i < 16; i++)
		CHECK_GE(th_publish(c, H[i], LEN, NULL), 0);
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK_EQ(th_verify(c, F, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	CHECK_GT(th_stat_get(&d, "tier_ssd.promotions"), dem);
	kvs_close(c);
	promoting();
	return th_finish();
}
