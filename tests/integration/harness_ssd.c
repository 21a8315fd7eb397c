/*
 * harness_ssd.c - the integration-test harness: daemons with an SSD tier and
 * the checks the SSD tests share (see harness_ssd.h).
 */
#include "harness_ssd.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the SSD tier ----------------------------------------------------------- */

int th_verify_chains(kvs_client *c, const kvs_hash *h, size_t chains,
		     size_t len, size_t *bad)
{
	int total = 0;

	*bad = 0;
	for (size_t i = 0; i < chains; i++) {
		size_t b = 0;
		int rc = th_verify(c, h + i * len, len, &b);

		if (!CHECK_GE(rc, 0))
			return -1;
		total += rc;
		*bad += b;
	}
	return total;
}

void th_ssd_off_checks(th_daemon *d, kvs_client *c, const kvs_layout *l,
		       kvs_hash (*h)[4], int n, int fresh, uint64_t seed,
		       const char *what)
{
	th_stats before, after;
	int64_t writes, evicted;
	size_t bad = 0;
	int hits;

	/* Every hit is right; what reached SSD before the fault comes back. */
	th_stats_take(d, &before);
	hits = th_verify_chains(c, &h[0][0], (size_t)n, 4, &bad);
	th_stats_take(d, &after);
	th_note("%s: %d hits of %d blocks, %zu wrong, %" PRId64
		" promoted from SSD", what, hits, n * 4, bad,
		th_stats_delta(&before, &after, "tier_ssd.promotions"));
	CHECK_EQ(bad, 0);
	CHECK_GE(hits, 32 - 4);
	CHECK_GT(th_stats_delta(&before, &after, "tier_ssd.promotions"), 0);
	CHECK_EQ(th_stats_val(&after, "tier_ssd.corrupt_blocks"), 0);
	th_stats_free(&before);
	th_stats_free(&after);

	/* Reserves and lookups go on from RAM; nothing more goes to SSD. */
	writes = th_stat_get(d, "tier_ssd.writes");
	evicted = th_stat_get(d, "blocks.evicted");
	for (int i = n; i < n + fresh; i++) {
		th_chain(l, seed + (uint64_t)i, 4, 0, 0, h[i]);
		CHECK_RC(th_publish(c, h[i], 4, NULL), 4);
		/* At once: the next publishes may evict it (leaf-2q evicts
		 * new blocks before the ones hit above). */
		CHECK_RC(th_verify_chains(c, h[i], 1, 4, &bad), 4);
		CHECK_EQ(bad, 0);
	}
	CHECK_GT(th_stat_get(d, "blocks.evicted"), evicted);
	CHECK_EQ(th_stat_get(d, "tier_ssd.writes"), writes);
	CHECK_EQ(th_stat_get(d, "tier_ssd.writes_inflight"), 0);
	CHECK_EQ(th_stat_get(d, "tier_ssd.enabled"), 0);
	CHECK(th_wait_stat(d, "leases.active", 0, TH_WAIT_MS));
}

void th_daemon_up_ssd(th_daemon *d, const char *const *args, char *ssd_dir,
		      size_t cap)
{
	if (th_daemon_init(d, args) < 0)
		th_fatal("cannot make a temp dir");
	snprintf(ssd_dir, cap, "%s/ssd", d->dir);
	if (mkdir(ssd_dir, 0700) < 0)
		th_fatal("mkdir %s: %s", ssd_dir, strerror(errno));
	if (th_daemon_start(d) < 0)
		th_fatal("daemon did not start");
}
