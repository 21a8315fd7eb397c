/*
 * test_release_nowait - kvs_release_nowait(): pins are dropped before the
 * client's next request is handled, a bad lease is counted by the daemon and
 * not reported, thousands in a row never deadlock the two sides, and replies
 * of other calls still pair with their requests.
 */
#include <stdlib.h>

#include "harness.h"
#include "harness_client.h"

#define LEN 8

int main(void)
{
	th_daemon d;
	kvs_layout L;
	kvs_client *c;
	kvs_hash h[LEN];
	kvs_block b[LEN];
	kvs_lease lease;
	int64_t errs;
	size_t bad = 1;

	/* What the daemon does with released leases, stale ones included:
	 * socket leases (a fast-path lease is released in the client). */
	setenv("KVS_NO_FASTPATH", "1", 1);

	th_init("test_release_nowait");
	th_daemon_up(&d, TH_ARGS("--host-size", "16M", "--max-leases", "64"));
	L = th_layout("nowait-model", 16);
	c = th_connect(&d, &L);
	th_chain(&L, 42, LEN, 0, 0, h);
	CHECK_RC(th_publish(c, h, LEN, NULL), LEN);

	/* Pins are gone once the daemon answers anything after the release. */
	CHECK_RC(kvs_lookup(c, h, LEN, &lease, b), LEN);
	CHECK_RC(kvs_release_nowait(c, lease), 0);
	CHECK_RC(th_verify(c, h, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), 0);

	/* More lookups than --max-leases allows at once: each release lands
	 * before the next lookup, so the limit is never reached; and far more
	 * than the client keeps unanswered, so the draining path runs. */
	for (int i = 0; i < 3000; i++) {
		if (kvs_lookup(c, h, LEN, &lease, b) != LEN) {
			CHECK(!"lookup failed in the loop");
			break;
		}
		if (kvs_release_nowait(c, lease) != 0) {
			CHECK(!"release_nowait failed in the loop");
			break;
		}
	}
	for (int i = 0; i < 1000; i++) /* releases alone, then one call */
		if (kvs_release_nowait(c, lease) != 0) {
			CHECK(!"release_nowait of a stale lease failed");
			break;
		}
	/* The stale ones, counted not reported. Read on another connection:
	 * the loop serves connections in turns, so the count may still be
	 * rising when that one is answered (docs/reliability.md, "Bounds"). */
	CHECK(th_wait_stat(&d, "errors.lease", 1000, TH_WAIT_MS));
	errs = th_stat_get(&d, "errors.lease");
	CHECK_EQ(errs, 1000);
	CHECK_EQ(th_stat_get(&d, "leases.active"), 0);
	CHECK_EQ(th_stat_get(&d, "errors.limit"), 0);
	/* The stream is still in step: a commit after pending releases. */
	CHECK_RC(kvs_lookup(c, h, LEN, &lease, b), LEN);
	CHECK_RC(kvs_release_nowait(c, lease), 0);
	CHECK_RC(kvs_commit(c, lease), KVS_E_NOLEASE);
	CHECK_RC(kvs_release_nowait(c, 0), 0);
	kvs_close(c);
	return th_finish(); /* stops the daemon: it must exit 0 */
}
