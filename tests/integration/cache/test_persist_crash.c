/*
 * test_persist_crash - kill -9 kvshared at random points of a publish loop,
 * again and again, under the tests' stand-in for systemd's fd store
 * (tests/support/fdstore.c): each new daemon adopts the host arena and its
 * metadata memfd (kvs_persist.h) and must serve every block of every chain
 * committed before the kill, byte for byte, and nothing wrong of the chain
 * that was being published when it died (the next writer publishes that
 * one again).
 *
 * A writer process publishes 4-block chains of 4 KiB blocks without pause;
 * after 1 to 40 more chains (polled, never slept) the daemon gets SIGKILL
 * (one round in five, and every round after the eighth kill, the stand-in's
 * restart limit, a `systemctl restart` instead: SIGTERM, handed over).
 * First a host tier (32 MiB) that holds every chain the rounds can publish,
 * so no block is evicted: every chain reported committed must hit whole
 * (but those of a round that ended in kill -9: a prefix of each, as far as
 * the persist worker had verified them), and start.blocks_kept is at least
 * the blocks of the whole ones and at most one chain more than committed.
 * Then one of 1 MiB (64 chains) that evicts all along, so that slots are
 * freed and reused under the kills: blocks are kept after each restart
 * (after kill -9, none may be), at most what it holds; then the same over an
 * SSD tier, whose namespaces file and index load after the host tier came
 * back. After each restart of all: start.mode is recovered (handed over
 * after a restart) and every hit of every chain ever published has its
 * pattern.
 * Rounds: $TH_PERSIST_CRASH_ROUNDS (default 12). The seed is printed; set
 * $TH_SEED to replay one.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LEN 4
#define MAX_CHAINS 1500

static th_daemon ds[3]; /* alive until th_finish */
static th_daemon *D;
static kvs_layout L;
/* Chains committed in a round that ended in kill -9: their checksums may
 * not have been computed by the persist worker yet, so a prefix of each
 * (none included) may come back; any other committed chain comes back
 * whole. */
static uint8_t tail_of_kill[MAX_CHAINS + 1];
static uint64_t n_tail;

/* Publish chains from @base on until the daemon goes away; report each one
 * committed on the sync fd. */
static int writer(void *arg, int sync_fd)
{
	uint64_t base = *(uint64_t *)arg;
	kvs_client *c;

	if (kvs_connect(D->socket, &L, &c) < 0)
		return 2;
	for (uint64_t i = base; i < MAX_CHAINS; i++) {
		kvs_hash h[LEN];

		th_chain(&L, 5000 + i, LEN, 0, 0, h);
		/* The chain in flight at the last kill may be in, in part:
		 * published again, its missing blocks are the NEW ones. */
		if (th_publish(c, h, LEN, NULL) < 0)
			break;
		if (th_send_u64(sync_fd, i + 1) < 0)
			break;
	}
	_exit(0); /* the daemon went: the client is not closed on purpose */
}

/* The writer's reports so far (@wait 0), or all of them up to its exit
 * (the sync fd's end: th_child_wait closes it). */
static uint64_t drain(int fd, uint64_t upto, int wait)
{
	uint64_t v;

	while ((wait || th_fd_readable(fd)) &&
	       th_recv_u64(fd, &v, wait ? TH_WAIT_MS : 0) == 0)
		upto = v;
	return upto;
}

/* Every chain below @upto: committed before the kill, so whole (@whole: no
 * eviction); the one at @upto (in flight) any prefix. Returns blocks hit;
 * counts wrong bytes. */
static uint64_t verify_all(uint64_t upto, int whole, size_t *bad_total)
{
	kvs_client *c = th_connect(D, &L);
	uint64_t hits = 0;

	for (uint64_t i = 0; i <= upto && i < MAX_CHAINS; i++) {
		kvs_hash h[LEN];
		size_t bad = 0;
		int rc;

		th_chain(&L, 5000 + i, LEN, 0, 0, h);
		rc = th_verify(c, h, LEN, &bad);
		if (!CHECK_GE(rc, 0))
			break;
		if (whole && i < upto && !tail_of_kill[i] && !CHECK_EQ(rc, LEN))
			th_note("chain %" PRIu64 " (committed) hit %d of %d", i,
				rc, LEN);
		hits += (uint64_t)rc;
		*bad_total += bad;
	}
	kvs_close(c);
	return hits;
}

/* One round: a writer from @published on, stopped by a kill (or a clean
 * restart) after @want more chains. Returns the chains committed. */
static uint64_t round_of(uint64_t published, int want, int clean)
{
	uint64_t base = published;
	int64_t deadline = th_now_ms() + 20000;
	th_child w;

	th_spawn(&w, writer, &base);
	while (th_now_ms() < deadline && published < base + (uint64_t)want &&
	       published < MAX_CHAINS) {
		published = drain(w.fd, published, 0);
		th_poll_pause();
	}
	CHECK_RC(clean ? th_fdstore_restart(D) : th_fdstore_crash(D), 0);
	published = drain(w.fd, published, 1);
	CHECK_EQ(th_child_wait(&w, TH_WAIT_MS), 0);
	for (uint64_t i = base; !clean && i < published && i < MAX_CHAINS; i++)
		n_tail += !tail_of_kill[i], tail_of_kill[i] = 1;
	return published;
}

static char ssd_dir[160];

/* One daemon under the stand-in, @rounds kills or restarts. @tight: a host
 * tier of 1 MiB (64 chains), evicting all along (@ssd: to an SSD tier,
 * whose namespaces file names the namespace the host tier brought back):
 * hits are checked for their bytes only; else 32 MiB, nothing evicted,
 * every committed chain whole. */
static void part(th_daemon *d, int tight, int ssd, int rounds)
{
	uint64_t published = 0, tot_kept = 0, tot_hits = 0;
	size_t bad_total = 0;
	int kills = 0, rc;

	D = d;
	memset(tail_of_kill, 0, sizeof(tail_of_kill));
	n_tail = 0;
	if (ssd)
		rc = th_daemon_init(d, TH_ARGS("--host-size", "1M", "--page-size",
					       "64K", "--gpu", "off", "--ssd-dir",
					       ssd_dir, "--ssd-segment", "1M",
					       "--ssd-size", "16M"));
	else
		rc = th_daemon_init(d, TH_ARGS("--host-size", tight ? "1M" : "32M",
					       "--page-size", "64K", "--gpu", "off"));
	if (rc < 0)
		th_fatal("temp dir");
	if (ssd) {
		snprintf(ssd_dir, sizeof(ssd_dir), "%s/ssd", d->dir);
		if (mkdir(ssd_dir, 0700) < 0)
			th_fatal("mkdir %s", ssd_dir);
	}
	d->fdstore = true;
	if (th_daemon_start(d) < 0)
		th_fatal("kvshared under the stand-in did not start");
	CHECK(th_fdstore_wait(d, "fds", 3));
	CHECK_EQ(th_stat_get(d, "start.mode"), 0);
	for (int r = 0; r < rounds && published < MAX_CHAINS; r++) {
		/* The stand-in restarts a crashed daemon 8 times, as a unit's
		 * start limit would; a restart asked for does not count. */
		int clean = kills >= 8 || rand() % 5 == 0;
		int64_t kept;
		uint64_t hits;

		published = round_of(published, 1 + rand() % 40, clean);
		kills += !clean;
		CHECK_EQ(th_stat_get(d, "start.mode"), clean ? 1 : 2);
		CHECK(th_log_contains(d, "adopted pool: accepting in 350 ms"));
		kept = th_stat_get(d, "start.blocks_kept");
		/* Every committed block, and at most the chain in flight. */
		if (tight) {
			/* After kill -9 every block may be gone (the persist
			 * worker, starved of a core, verified none since the
			 * slots were last reused); a clean stop verifies what
			 * the tier holds. */
			CHECK_GE(kept, clean ? 1 : 0);
			CHECK_LE(kept, 256);
		} else {
			CHECK_GE(kept, (int64_t)((published - n_tail) * LEN));
			CHECK_LE(kept, (int64_t)((published + 1) * LEN));
		}
		if (ssd) /* its index loaded: the chains evicted are there */
			CHECK(th_wait_stat(d, "tier_ssd.index_loading", 0,
					   TH_WAIT_MS));
		hits = verify_all(published, !tight, &bad_total);
		if (!tight)
			CHECK_EQ(th_stat_get(d, "blocks.evicted"), 0);
		if (ssd)
			th_note("SSD index: %" PRId64 " blocks loaded",
				th_stat_get(d, "tier_ssd.restart_blocks"));
		th_note("%s round %d (%s): %" PRIu64 " chains committed, %" PRId64
			" blocks kept, %" PRIu64 " hit, %zu wrong", tight ?
			(ssd ? "1M+SSD" : "1M") : "32M", r, clean ? "restart" : "kill -9", published,
			kept, hits, bad_total);
		tot_kept += (uint64_t)kept;
		tot_hits += hits;
	}
	CHECK_EQ(bad_total, 0);
	CHECK_GT(tot_hits, 0);
	if (ssd) /* the SSD tier shares the namespace, never takes its id */
		CHECK(!th_log_contains(d, "not restored"));
	th_note("%s: %d kills -9, %d restarts: %" PRIu64 " chains published, %"
		PRIu64 " blocks kept and %" PRIu64 " hit over the starts, 0 wrong",
		tight ? (ssd ? "1M+SSD" : "1M") : "32M", kills, rounds - kills, published, tot_kept,
		tot_hits);
}

int main(void)
{
	const char *env = getenv("TH_PERSIST_CRASH_ROUNDS");
	int rounds = env && atoi(env) > 0 ? atoi(env) : 12;
	unsigned seed = getenv("TH_SEED") ? (unsigned)strtoul(getenv("TH_SEED"), NULL, 0)
					  : (unsigned)(getpid() ^ th_now_ms());

	th_init("test_persist_crash");
	srand(seed);
	th_note("seed %u, %d rounds a part", seed, rounds);
	L = th_layout("persist-crash", 4); /* 4 KiB blocks */
	part(&ds[0], 0, 0, rounds);
	part(&ds[1], 1, 0, rounds);
	part(&ds[2], 1, 1, rounds);
	return th_finish();
}
