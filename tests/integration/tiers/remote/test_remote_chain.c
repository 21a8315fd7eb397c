/*
 * test_remote_chain - whole chains through the remote tier: a private
 * 3-master cluster, A publishes at commit (--remote-write through), B looks
 * up (--remote-timeout 500). GETs are counted on the nodes themselves
 * (INFO commandstats), so a fetch the daemon sends past a cut is seen even
 * when it would fail later.
 *  whole:    a 512-block chain of 64 KiB blocks (32 MiB): B's first lookup
 *            hits all 512, bytes verified, in 8 EXISTS windows of 64 and
 *            exactly 512 GETs.
 *  absent:   a 192-block chain whose key 100-odd was deleted in Redis: B's
 *            lookup is cut there, in the second window: the GETs are the
 *            prefix's, the third window is never asked.
 *  room:     C, with an 8 MiB host tier (128 blocks), looks up the 512-block
 *            chain: a hit of at most 128, bytes verified, never an error,
 *            counted as blocks.lookup_room_cut.
 *  stopped:  a node SIGSTOPped, owning the key where a chain's run on the
 *            other nodes ends: B's lookup is cut at that key, within the
 *            timeout's bound, and the live nodes see exactly the prefix's
 *            GETs (none past the key whose EXISTS timed out).
 * Skips (77) without redis-server.
 */
#include "remote_tier_util.h"

#include <inttypes.h>
#include <signal.h>

#define BLOCK_TOKENS 64 /* 64 KiB blocks */
#define LONG 512
#define MID 192
#define TIMEOUT_MS 500

static th_daemon A, B, C;
static kvs_layout L;
static int8_t owner[KVS_SLOTS];
static kvs_hash H[LONG], M[MID], S[MID];

/* A chain of @n blocks published through A, every publish ended. */
static void publish(kvs_client *ca, uint64_t seed, kvs_hash *h, size_t n)
{
	int64_t ends = rt_publish_ends(&A);

	th_chain(&L, seed, n, 0, 0, h);
	CHECK_RC(th_publish(ca, h, n, NULL), (long long)n);
	CHECK(rt_wait_publish_ends(&A, ends + (int64_t)n, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&A, "tier_remote.published"), rt_publish_ends(&A));
}

static void whole(rc_cluster *c, kvs_client *ca, kvs_client *cb)
{
	long long gets;
	int64_t t0, ms, probes = th_stat_get(&B, "tier_remote.probes");
	size_t bad = 0;
	int hits;

	publish(ca, 21, H, LONG);
	gets = rt_get_calls(c, -1);
	t0 = th_now_ms();
	hits = th_verify(cb, H, LONG, &bad);
	ms = th_now_ms() - t0;
	gets = rt_get_calls(c, -1) - gets;
	th_note("whole: B's first lookup hits %d of %d (%.1f MiB) in %" PRId64
		" ms, %lld GETs, %" PRId64 " windows", hits, LONG,
		LONG * BLOCK_TOKENS / 1024.0, ms, gets,
		th_stat_get(&B, "tier_remote.probes") - probes);
	CHECK_EQ(hits, LONG);
	CHECK_EQ(bad, 0);
	CHECK_EQ(gets, LONG);
	CHECK_EQ(th_stat_get(&B, "tier_remote.hits"), LONG);
	CHECK_EQ(th_stat_get(&B, "tier_remote.probes") - probes, LONG / 64);
	CHECK_EQ(th_stat_get(&B, "tier_remote.corrupt"), 0);
	/* in B's host tier now: the cluster is not asked again */
	CHECK_EQ(th_verify(cb, H, LONG, &bad), LONG);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&B, "tier_remote.hits"), LONG);
}

static void absent(rc_cluster *c, kvs_client *ca, kvs_client *cb)
{
	uint8_t key[KVS_RVAL_KEY_BYTES + 1] = { 0 };
	int64_t keys = th_stat_get(&B, "tier_remote.probe_keys");
	long long gets;
	char out[256];
	size_t m = 0, bad = 0;
	int hits;

	publish(ca, 22, M, MID);
	/* redis-cli takes the key from argv: a block whose key has no NUL */
	for (size_t i = 100; i < 120 && !m; i++) {
		kvs_rval_key(key, rt_fp(&L), M[i]);
		if (memchr(key, 0, KVS_RVAL_KEY_BYTES) == NULL)
			m = i;
	}
	if (!CHECK(m != 0))
		return;
	CHECK_EQ(rc_cli(c, 0, out, sizeof(out), "-c", "DEL", (char *)key, NULL), 0);
	CHECK_EQ(atoll(out), 1);
	gets = rt_get_calls(c, -1);
	hits = th_verify(cb, M, MID, &bad);
	gets = rt_get_calls(c, -1) - gets;
	th_note("absent: key %zu of %d deleted, B hits %d, %lld GETs, %" PRId64
		" keys asked", m, MID, hits, gets,
		th_stat_get(&B, "tier_remote.probe_keys") - keys);
	CHECK_EQ(hits, (long long)m);
	CHECK_EQ(bad, 0);
	CHECK_EQ(gets, (long long)m);
	/* windows 0 and 1 (the cut), never the third */
	CHECK_EQ(th_stat_get(&B, "tier_remote.probe_keys") - keys, 128);
}

static void room(rc_cluster *c)
{
	kvs_client *cc;
	size_t bad = 0;
	int hits;

	th_daemon_up(&C, TH_ARGS("--host-size", "8M", "--page-size", "64K",
				 "--remote", rc_seeds(c), "--remote-timeout", "500"));
	cc = th_connect(&C, &L);
	hits = th_verify(cc, H, LONG, &bad);
	th_note("room: C (8 MiB host tier) hits %d of %d, lookup_room_cut %" PRId64,
		hits, LONG, th_stat_get(&C, "blocks.lookup_room_cut"));
	CHECK_GT(hits, 0);
	CHECK_LE(hits, 128);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&C, "blocks.lookup_room_cut"), 1);
	CHECK_EQ(th_stat_get(&C, "blocks.lookup_hit") + th_stat_get(&C, "blocks.lookup_miss"),
		 LONG);
	CHECK(th_wait_stat(&C, "leases.active", 0, TH_WAIT_MS));
	kvs_close(cc);
}

/* The seed of a chain of @n whose first block on some node other than
 * block 0's is furthest in: *node, *cut. */
static uint64_t far_cut(size_t n, int *node, size_t *cut)
{
	uint64_t best = 0;

	*cut = 0;
	for (uint64_t seed = 1000; seed < 3000; seed++) {
		th_chain(&L, seed, n, 0, 0, S);
		for (int x = 0; x < 3; x++) {
			size_t i = 0;

			while (i < n && owner[rt_slot(&L, S[i])] != x)
				i++;
			if (i < n && i > *cut) {
				*cut = i;
				*node = x;
				best = seed;
			}
		}
	}
	return best;
}

static void stopped(rc_cluster *c, kvs_client *ca, kvs_client *cb)
{
	int64_t t0, ms, timeouts = th_stat_get(&B, "tier_remote.errors_timeout");
	long long gets;
	size_t cut, bad = 0;
	uint64_t seed;
	int node = -1, hits;

	seed = far_cut(MID, &node, &cut);
	publish(ca, seed, S, MID);
	gets = rt_get_calls(c, node);
	CHECK_EQ(kill(rc_pid(c, node), SIGSTOP), 0);
	t0 = th_now_ms();
	hits = th_verify(cb, S, MID, &bad);
	ms = th_now_ms() - t0;
	gets = rt_get_calls(c, node) - gets;
	CHECK_EQ(kill(rc_pid(c, node), SIGCONT), 0);
	th_note("stopped: node %d stopped, its first key %zu: B hits %d in %" PRId64
		" ms, the live nodes ran %lld GETs", node, cut, hits, ms, gets);
	CHECK_EQ(hits, (long long)cut);
	CHECK_EQ(bad, 0);
	CHECK_EQ(gets, (long long)cut);
	CHECK_LT(ms, 4 * TIMEOUT_MS);
	CHECK_GT(th_stat_get(&B, "tier_remote.errors_timeout"), timeouts);
}

int main(void)
{
	rc_cluster *c;
	kvs_client *ca, *cb;
	int ret;

	setenv("TH_TIMEOUT", "240", 0);
	th_init("test_remote_chain");
	c = rt_cluster(&(rc_opts){ .masters = 3 });
	th_daemon_up(&A, TH_ARGS("--host-size", "64M", "--page-size", "64K",
				 "--remote", rc_seeds(c), "--remote-write", "through"));
	th_daemon_up(&B, TH_ARGS("--host-size", "64M", "--page-size", "64K",
				 "--remote", rc_seeds(c), "--remote-timeout", "500"));
	L = th_layout("remote-chain", BLOCK_TOKENS);
	ca = th_connect(&A, &L);
	cb = th_connect(&B, &L);
	if (rt_owners(c, 0, owner) < 0)
		th_fatal("no slot map");

	whole(c, ca, cb);
	absent(c, ca, cb);
	room(c);
	stopped(c, ca, cb);

	CHECK(th_wait_stat(&B, "leases.active", 0, TH_WAIT_MS));
	kvs_close(ca);
	kvs_close(cb);
	ret = th_finish();
	rc_stop(c);
	return ret;
}
