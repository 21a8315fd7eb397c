/*
 * test_remote_tier_pins - write-through's pins are capped: a daemon W with a 4 MiB host tier (256 blocks of 16 KiB) publishes at
 * commit to a private 3-master cluster with --remote-timeout 10000. One node
 * SIGSTOPped; W commits 64 chains of 16 new blocks (4x its host tier) at
 * once. Every block whose key is on that node waits for its EXISTS (until
 * SIGCONT: the timeout is far): pinned from its slot, those would fill the
 * host tier (a third of 1024 blocks is more than 256) and reserves would be
 * FULL.
 * With the cap (--remote-pin-share, default 25%) at most 1 MiB is pinned,
 * the rest goes from copies (tier_remote.pin_capped), and every reserve
 * succeeds. After SIGCONT publishing resumes: a new chain is stored whole.
 * Skips (77) without redis-server.
 */
#include "remote_tier_util.h"

#include <inttypes.h>
#include <signal.h>

#define BLOCK_TOKENS 16 /* 16 KiB blocks */
#define BLOCK_BYTES (BLOCK_TOKENS * 1024)
#define HOST_BYTES (4u << 20)
#define CLEN 16
#define ROUNDS 64
#define TIMEOUT_MS 10000 /* far above the commits' time: the pins are held */

static th_daemon W;

int main(void)
{
	static kvs_hash h[CLEN];
	kvs_block b[CLEN];
	rc_cluster *c;
	kvs_client *cw;
	kvs_layout L;
	uint64_t seed = 9000;
	int64_t max_pinned = 0, t0, pub, ends;
	int full = 0, node = 1, resumed = -1, ret;

	setenv("TH_TIMEOUT", "180", 0);
	th_init("test_remote_tier_pins");
	c = rt_cluster(&(rc_opts){ .masters = 3 });
	th_daemon_up(&W, TH_ARGS("--host-size", "4M", "--page-size", "16K",
				 "--remote", rc_seeds(c), "--remote-write", "through",
				 "--remote-timeout", "10000"));
	L = th_layout("remote-pins", BLOCK_TOKENS);
	cw = th_connect(&W, &L);

	CHECK_EQ(kill(rc_pid(c, node), SIGSTOP), 0);
	t0 = th_now_ms();
	for (int r = 0; r < ROUNDS; r++) {
		int n;

		th_chain(&L, seed++, CLEN, 0, 0, h);
		n = th_publish(cw, h, CLEN, b);
		if (n != CLEN)
			full++;
		if (th_stat_get(&W, "tier_remote.pinned_bytes") > max_pinned)
			max_pinned = th_stat_get(&W, "tier_remote.pinned_bytes");
	}
	th_note("stopped node: %d chains of %d committed in %" PRId64 " ms, %d "
		"not whole (FULL), pinned at most %" PRId64 " KiB, pin_capped %"
		PRId64 ", skipped %" PRId64, ROUNDS, CLEN, th_now_ms() - t0, full,
		max_pinned >> 10, th_stat_get(&W, "tier_remote.pin_capped"),
		th_stat_get(&W, "tier_remote.skipped"));
	/* the commits took well under the timeout: the pins were all held */
	CHECK_LT(th_now_ms() - t0, TIMEOUT_MS);
	CHECK_EQ(full, 0);
	CHECK_LE(max_pinned, HOST_BYTES / 4);
	CHECK_GT(th_stat_get(&W, "tier_remote.pin_capped"), 0);
	CHECK_EQ(kill(rc_pid(c, node), SIGCONT), 0);

	/* every publish ends (stored, timed out, failed fast while the node
	 * is down), and the pins are given back */
	CHECK(rt_wait_publish_ends(&W, ROUNDS * CLEN, 2 * TIMEOUT_MS + TH_WAIT_MS));
	CHECK(th_wait_stat(&W, "tier_remote.pinned_bytes", 0, TH_WAIT_MS));

	/* publishing resumes: a new chain stored whole (the node is retried
	 * after its backoff, at most 2 s) */
	t0 = th_now_ms();
	for (int tries = 1; tries <= 64 && th_now_ms() < t0 + 30000; tries++) {
		pub = th_stat_get(&W, "tier_remote.published");
		ends = rt_publish_ends(&W);
		th_chain(&L, seed++, CLEN, 0, 0, h);
		CHECK_RC(th_publish(cw, h, CLEN, NULL), CLEN);
		CHECK(rt_wait_publish_ends(&W, ends + CLEN, TIMEOUT_MS + TH_WAIT_MS));
		if (th_stat_get(&W, "tier_remote.published") == pub + CLEN) {
			resumed = tries;
			break;
		}
		th_poll_pause();
	}
	th_note("after SIGCONT: a chain stored whole after %d tries, %" PRId64 " ms",
		resumed, th_now_ms() - t0);
	CHECK_GT(resumed, 0);

	kvs_close(cw);
	ret = th_finish();
	rc_stop(c);
	return ret;
}
