/*
 * test_remote_tier_reshard - slots move (`redis-cli --cluster reshard` of
 * 2000 slots, in a child process) while two daemons publish chains at
 * commit and look up each other's fresh chains (from the cluster): every
 * publish stores every block, every lookup hits whole with the right
 * bytes, and after the reshard a third daemon, with nothing of its own,
 * hits every chain (before and during the reshard) in full.
 * The engine test (tests/remote/test_remote_reshard.c) does it for the
 * engine; this is the same under the tier: its probes (EXISTS), fetches
 * (GET) and publishes (SET NX) through MOVED and ASK.
 * Skips (77) without redis-server.
 */
#include "remote_tier_util.h"

#include <inttypes.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK_TOKENS 16 /* 16 KiB blocks */
#define LEN 4
#define PRE 24      /* chains published before the reshard, per daemon */
#define CHAINS 1600 /* at most, both daemons, before and during */

static th_daemon D[3];
static kvs_layout L;
static kvs_hash H[CHAINS][LEN];
static int whole[CHAINS];  /* published whole (every block stored) */
static int nchains;

/* Daemon @d publishes chain number @k (seed @seed): whether every block
 * of it went to the cluster. */
static int publish_one(int d, kvs_client *cl, uint64_t seed)
{
	int64_t pub = th_stat_get(&D[d], "tier_remote.published"),
		ends = rt_publish_ends(&D[d]);
	int k = nchains++;

	th_chain(&L, seed, LEN, 0, 0, H[k]);
	CHECK_RC(th_publish(cl, H[k], LEN, NULL), LEN);
	CHECK(rt_wait_publish_ends(&D[d], ends + LEN, TH_WAIT_MS));
	whole[k] = th_stat_get(&D[d], "tier_remote.published") - pub == LEN;
	return whole[k];
}

/* A child running the reshard: node @from's slots to @to. */
static pid_t reshard(rc_cluster *c, int from, int to)
{
	pid_t pid = fork();

	if (pid == 0) {
		char addr[32], idf[64], idt[64];
		const char *argv[] = { "--cluster", "reshard", addr, "--cluster-from",
				       idf, "--cluster-to", idt, "--cluster-slots",
				       "2000", "--cluster-yes" };
		static char log[65536];
		int rc;

		rc_cli(c, from, idf, sizeof(idf), "CLUSTER", "MYID", NULL);
		rc_cli(c, to, idt, sizeof(idt), "CLUSTER", "MYID", NULL);
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", rc_port(c, 0));
		rc_set_cli_timeout(c, 200);
		rc = rc_cli_argv(c, 0, log, sizeof(log), 10, argv);
		if (rc != 0)
			fprintf(stderr, "reshard: exit %d\n...%s\n", rc,
				log + (strlen(log) > 4000 ? strlen(log) - 4000 : 0));
		_exit(rc == 0 ? 0 : 1);
	}
	return pid;
}

/* The reshard, under both daemons' traffic: each publishes, each looks
 * up the other's fresh chain; the chains published before it moved. */
static void reshard_under_traffic(rc_cluster *c, kvs_client **cl)
{
	static int8_t before[KVS_SLOTS], after[KVS_SLOTS];
	int64_t t0;
	size_t bad;
	int status = 0, done = 0, rounds = 0, hits_during = 0, asked = 0;
	int moved = 0, pre_chains;
	pid_t child;

	pre_chains = nchains;
	if (rt_owners(c, 0, before) < 0)
		th_fatal("CLUSTER NODES failed");

	child = reshard(c, 2, 1);
	CHECK(child > 0);
	t0 = th_now_ms();
	for (uint64_t k = 0; !done && th_now_ms() - t0 < 240000; k++) {
		done = waitpid(child, &status, WNOHANG) == child;
		if (nchains + 2 > CHAINS) {
			th_poll_pause();
			continue;
		}
		for (int d = 0; d < 2; d++)
			publish_one(d, cl[d], 100000 * (uint64_t)(d + 1) + k);
		/* each looks up the chain the other just published (from the
		 * cluster: it has none of it): bytes must be right, whatever
		 * hits */
		for (int d = 0; d < 2; d++) {
			hits_during += th_verify(cl[d], H[nchains - 1 - d], LEN, &bad);
			asked += LEN;
			CHECK_EQ(bad, 0);
		}
		rounds++;
	}
	if (!done) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
	}
	CHECK(done);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (rt_owners(c, 0, after) < 0)
		th_fatal("CLUSTER NODES failed");
	for (int k = 0; k < pre_chains; k++)
		for (int i = 0; i < LEN; i++)
			moved += before[rt_slot(&L, H[k][i])] != after[rt_slot(&L, H[k][i])];
	th_note("reshard: %" PRId64 " ms, %d rounds (%d chains published during "
		"it), lookups during it hit %d of %d blocks; %d blocks published "
		"before it moved", th_now_ms() - t0, rounds, nchains - pre_chains,
		hits_during, asked, moved);
	CHECK_GT(moved, 0);
	CHECK_GT(rounds, 0);
	/* as the engine test: through MOVED and ASK, nothing is lost */
	CHECK_EQ(hits_during, asked);
}

/* hits resume: a third daemon, empty, hits every whole chain */
static void third_daemon_hits_all(rc_cluster *c, kvs_client **cl)
{
	size_t bad;
	int nwhole = 0, chits = 0;

	th_daemon_up(&D[2], TH_ARGS("--host-size", "128M", "--page-size", "16K",
				    "--remote", rc_seeds(c)));
	cl[2] = th_connect(&D[2], &L);
	for (int k = 0; k < nchains; k++) {
		int hits;

		if (!whole[k])
			continue;
		nwhole++;
		hits = th_verify(cl[2], H[k], LEN, &bad);
		CHECK_EQ(bad, 0);
		if (!CHECK_EQ(hits, LEN))
			th_note("chain %d: %d of %d", k, hits, LEN);
		chits += hits;
	}
	th_note("after: the third daemon hits %d of %d blocks of %d whole chains",
		chits, nwhole * LEN, nwhole);
	CHECK_EQ(nwhole, nchains);
	CHECK_EQ(th_stat_get(&D[2], "tier_remote.corrupt"), 0);
}

int main(void)
{
	rc_cluster *c;
	kvs_client *cl[3];

	setenv("TH_TIMEOUT", "280", 0);
	th_init("test_remote_tier_reshard");
	c = rt_cluster(&(rc_opts){ .masters = 3 });
	for (int d = 0; d < 2; d++)
		th_daemon_up(&D[d], TH_ARGS("--host-size", "32M", "--page-size", "16K",
					    "--remote", rc_seeds(c), "--remote-write",
					    "through"));
	L = th_layout("remote-model", BLOCK_TOKENS);
	for (int d = 0; d < 2; d++)
		cl[d] = th_connect(&D[d], &L);
	for (int i = 0; i < PRE; i++)
		for (int d = 0; d < 2; d++)
			CHECK(publish_one(d, cl[d], 1000 * (uint64_t)(d + 1) + (uint64_t)i));

	reshard_under_traffic(c, cl);
	third_daemon_hits_all(c, cl);
	for (int d = 0; d < 3; d++)
		kvs_close(cl[d]);
	return th_finish();
}
