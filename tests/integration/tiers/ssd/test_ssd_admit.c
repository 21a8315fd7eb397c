/*
 * test_ssd_admit - --ssd-admit hit: a block evicted from the host tier is
 * demoted to SSD only if a lookup hit it at least once; one never hit is
 * dropped and counted in tier_ssd.admission_rejected.
 *
 * A 2 MiB host tier of 64 KiB blocks (32 blocks, leaf-lru) over 8 MiB of SSD.
 * 8 chains of 4 fill it (A0..A7); A0..A3 are looked up once (hit); then 16
 * new chains (B0..B15, never hit) push every A block and half the B blocks
 * out. Then: every eviction is a demotion or a rejection; exactly the 16 hit
 * blocks were demoted and written; the never-hit A blocks are gone (misses,
 * not on SSD); A0..A3 come back from SSD with identical bytes.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>

#define LEN 4
#define NA 8
#define NB 16
#define HIT 4 /* A0..A3 are hit */

static th_daemon d;
static kvs_layout L;
static char ssd_dir[160];
static kvs_hash A[NA][LEN], B[NB][LEN];

int main(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--eviction-policy", "leaf-lru",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", "--ssd-admit", "hit", NULL };
	int64_t evicted, demoted, rejected;
	kvs_client *c;
	size_t bad;
	int hits;

	th_init("test_ssd_admit");
	th_daemon_up_ssd(&d, args, ssd_dir, sizeof(ssd_dir));
	CHECK(th_log_contains(&d, "admit hit"));
	L = th_layout("ssd-admit", 64);
	c = th_connect(&d, &L);

	for (int i = 0; i < NA; i++) {
		th_chain(&L, 4000 + (uint64_t)i, LEN, 0, 0, A[i]);
		CHECK_RC(th_publish(c, A[i], LEN, NULL), LEN);
	}
	CHECK_EQ(th_stat_get(&d, "blocks.evicted"), 0);
	for (int i = 0; i < HIT; i++) {
		CHECK_RC(th_verify(c, A[i], LEN, &bad), LEN);
		CHECK_EQ(bad, 0);
	}
	CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS));
	for (int i = 0; i < NB; i++) {
		th_chain(&L, 5000 + (uint64_t)i, LEN, 0, 0, B[i]);
		CHECK_RC(th_publish(c, B[i], LEN, NULL), LEN);
	}
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));

	evicted = th_stat_get(&d, "blocks.evicted");
	demoted = th_stat_get(&d, "tier_ssd.demotions");
	rejected = th_stat_get(&d, "tier_ssd.admission_rejected");
	th_note("%" PRId64 " evicted: %" PRId64 " demoted, %" PRId64 " rejected",
		evicted, demoted, rejected);
	CHECK_EQ(evicted, (NA + NB) * LEN - 32);
	CHECK_EQ(evicted, demoted + rejected);
	CHECK_EQ(demoted, HIT * LEN);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.writes"), HIT * LEN);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.blocks_ssd_only"), HIT * LEN);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.index_entries"), HIT * LEN);
	CHECK_EQ(rejected, evicted - HIT * LEN);

	/* Never hit, evicted: dropped, not on SSD. */
	for (int i = HIT; i < NA; i++)
		CHECK_RC(th_probe(c, A[i], LEN), 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.promotions"), 0);
	/* Hit once, evicted: back from SSD, byte for byte. */
	for (int i = 0; i < HIT; i++) {
		hits = th_verify(c, A[i], LEN, &bad);
		CHECK_EQ(hits, LEN);
		CHECK_EQ(bad, 0);
	}
	CHECK_EQ(th_stat_get(&d, "tier_ssd.promotions"), HIT * LEN);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 0);
	/* The B blocks still in RAM are right; none went to SSD. */
	hits = 0;
	for (int i = 0; i < NB; i++) {
		int rc = th_verify(c, B[i], LEN, &bad);

		CHECK_GE(rc, 0);
		CHECK_EQ(bad, 0);
		hits += rc > 0 ? rc : 0;
	}
	/* Leaf-first eviction leaves whole prefixes: every B block in RAM hits. */
	CHECK_EQ(hits, 32 - HIT * LEN);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.promotions"), HIT * LEN);
	kvs_close(c);
	return th_finish();
}
