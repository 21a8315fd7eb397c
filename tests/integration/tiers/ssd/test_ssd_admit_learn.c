/*
 * test_ssd_admit_learn - --ssd-admit hit under the default policy
 * (leaf-learn) admits what the policy judged reused, not only what a lookup
 * hit: a block written again while the policy's ghost remembered it is
 * demoted to SSD when it leaves RAM again; a block seen once is not.
 *
 * A 2 MiB host tier of 64 KiB blocks (32 blocks) over 8 MiB of SSD. 8
 * chains of 4 (A) fill it; 8 more (B), never hit, push every A block out:
 * all 32 rejected (seen once). A is written again: the ghost remembers
 * every A block, so they come back protected, and push B out (rejected).
 * Then 8 new chains (C) push out what they must: every A block that leaves
 * RAM goes to SSD (no lookup ever hit one), nothing else does; every A
 * block then reads back, from RAM or SSD, byte for byte.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>

#define LEN 4
#define NCH 8

static th_daemon d;
static kvs_layout L;
static char ssd_dir[160];
static kvs_hash A[NCH][LEN], B[NCH][LEN], C[NCH][LEN];

static void publish_all(kvs_client *c, kvs_hash (*h)[LEN])
{
	for (int i = 0; i < NCH; i++)
		CHECK_RC(th_publish(c, h[i], LEN, NULL), LEN);
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
}

int main(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", "--ssd-admit", "hit", NULL };
	int64_t demoted, rejected, evicted;
	kvs_client *c;
	size_t bad;
	int back = 0;

	th_init("test_ssd_admit_learn");
	th_daemon_up_ssd(&d, args, ssd_dir, sizeof(ssd_dir));
	CHECK(th_log_contains(&d, "admit hit"));
	L = th_layout("ssd-admit-learn", 64);
	c = th_connect(&d, &L);
	for (int i = 0; i < NCH; i++) {
		th_chain(&L, 6000 + (uint64_t)i, LEN, 0, 0, A[i]);
		th_chain(&L, 7000 + (uint64_t)i, LEN, 0, 0, B[i]);
		th_chain(&L, 8000 + (uint64_t)i, LEN, 0, 0, C[i]);
	}

	publish_all(c, A);
	publish_all(c, B);
	CHECK_EQ(th_stat_get(&d, "blocks.evicted"), NCH * LEN);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.demotions"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.admission_rejected"), NCH * LEN);

	publish_all(c, A); /* written again: remembered */
	CHECK_EQ(th_stat_get(&d, "tier_ssd.demotions"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.admission_rejected"), 2 * NCH * LEN);

	publish_all(c, C);
	evicted = th_stat_get(&d, "blocks.evicted");
	demoted = th_stat_get(&d, "tier_ssd.demotions");
	rejected = th_stat_get(&d, "tier_ssd.admission_rejected");
	th_note("%" PRId64 " evicted: %" PRId64 " demoted, %" PRId64 " rejected",
		evicted, demoted, rejected);
	CHECK_EQ(evicted, 3 * NCH * LEN);
	CHECK_EQ(evicted, demoted + rejected);
	CHECK_GE(demoted, LEN); /* at least one A chain left RAM, to SSD */
	CHECK_EQ(th_stat_get(&d, "tier_ssd.writes"), demoted);

	/* B: seen once, gone. A: every block back, from RAM or SSD. */
	for (int i = 0; i < NCH; i++)
		CHECK_RC(th_probe(c, B[i], LEN), 0);
	for (int i = 0; i < NCH; i++) {
		int hits = th_verify(c, A[i], LEN, &bad);

		CHECK_EQ(hits, LEN);
		CHECK_EQ(bad, 0);
	}
	/* Promoting one evicts another A block, which goes to SSD in turn
	 * (it is reused too): at least the demoted ones came back. */
	back = (int)th_stat_get(&d, "tier_ssd.promotions");
	th_note("%d A blocks promoted back from SSD", back);
	CHECK_GE(back, demoted);
	kvs_close(c);
	return th_finish();
}
