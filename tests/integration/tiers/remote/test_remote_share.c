/*
 * test_remote_share - two daemons ("two machines": separate sockets and host
 * tiers) share blocks through a private 3-master Redis Cluster on loopback.
 *  through:  a chain published through A (--remote-write through) is a hit
 *            with identical bytes for a client of B, fetched from the
 *            cluster into B's host tier (tier_remote.hits, bytes_in).
 *  demote:   A2 (the default, demote) with a 2 MiB host tier evicts; the
 *            evicted blocks are published and B hits the oldest chains;
 *            B2, in demote mode with a 1 MiB host tier, evicts blocks it
 *            fetched and sends none of them back.
 *  maxmemory: every node capped near its current use with allkeys-lfu;
 *            publishing 8 MiB through A evicts on the Redis side; B's
 *            lookups of those chains are misses where keys went, and never
 *            wrong bytes.
 * Skips (77) without redis-server.
 */
#include "remote_tier_util.h"

#include <inttypes.h>

#define BLOCK_TOKENS 64 /* 64 KiB blocks */
#define LEN 8
#define DCHAINS 16
#define DLEN 4
#define MCHAINS 32
#define MLEN 4

static th_daemon A, A2, A3, B, B2;
static kvs_layout L;
static kvs_hash H[LEN], D[DCHAINS][DLEN], W[DCHAINS][DLEN], M[MCHAINS][MLEN];

/* Cap node @i's memory at its use now plus @extra bytes, allkeys-lfu. */
static void cap_memory(rc_cluster *c, int i, long long extra)
{
	char out[8192], val[32];
	const char *p;
	long long used = 0;

	CHECK_EQ(rc_cli(c, i, out, sizeof(out), "INFO", "memory", NULL), 0);
	p = strstr(out, "used_memory:");
	if (CHECK(p != NULL))
		used = atoll(p + strlen("used_memory:"));
	snprintf(val, sizeof(val), "%lld", used + extra);
	CHECK_EQ(rc_cli(c, i, out, sizeof(out), "CONFIG", "SET", "maxmemory", val, NULL), 0);
	CHECK(!strcmp(out, "OK"));
	CHECK_EQ(rc_cli(c, i, out, sizeof(out), "CONFIG", "SET", "maxmemory-policy",
			"allkeys-lfu", NULL), 0);
	CHECK(!strcmp(out, "OK"));
}

static long long evicted_keys(rc_cluster *c, int i)
{
	char out[8192];
	const char *p;

	if (rc_cli(c, i, out, sizeof(out), "INFO", "stats", NULL) != 0)
		return -1;
	p = strstr(out, "evicted_keys:");
	return p ? atoll(p + strlen("evicted_keys:")) : -1;
}

/* EXISTS commands the cluster's nodes have run. */
static long long exists_calls(rc_cluster *c)
{
	char out[16384];
	const char *p;
	long long sum = 0;

	for (int i = 0; i < rc_nodes(c); i++) {
		CHECK_EQ(rc_cli(c, i, out, sizeof(out), "INFO", "commandstats", NULL), 0);
		p = strstr(out, "cmdstat_exists:calls=");
		sum += p ? atoll(p + strlen("cmdstat_exists:calls=")) : 0;
	}
	return sum;
}

/* through: A publishes at commit, B fetches */
static void publish_through_then_fetch(kvs_client *ca, kvs_client *cb)
{
	size_t bad;
	int hits;
	int64_t t0, ms;

	th_chain(&L, 11, LEN, 0, 0, H);
	CHECK_RC(th_publish(ca, H, LEN, NULL), LEN);
	CHECK(rt_wait_ge(&A, "tier_remote.published", LEN, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&A, "tier_remote.bytes_out"), (int64_t)LEN * BLOCK_TOKENS * 1024);
	t0 = th_now_ms();
	hits = th_verify(cb, H, LEN, &bad);
	ms = th_now_ms() - t0;
	th_note("through: B hits %d of %d in %" PRId64 " ms", hits, LEN, ms);
	CHECK_EQ(hits, LEN);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&B, "tier_remote.hits"), LEN);
	CHECK_EQ(th_stat_get(&B, "tier_remote.bytes_in"), (int64_t)LEN * BLOCK_TOKENS * 1024);
	CHECK_EQ(th_stat_get(&B, "tier_remote.corrupt"), 0);
	CHECK_GE(th_stat_get(&B, "tier_remote.probes"), 1);
	/* now in B's host tier: a hit without asking the cluster again */
	hits = th_verify(cb, H, LEN, &bad);
	CHECK_EQ(hits, LEN);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&B, "tier_remote.hits"), LEN);
	CHECK(th_wait_stat(&B, "leases.active", 0, TH_WAIT_MS));
}

/* demote: A2 publishes what its small host tier evicts, B hits the oldest
 * chains. Returns A2's client (closed at the end). */
static kvs_client *demote_publishes_evicted(rc_cluster *c, kvs_client *cb)
{
	kvs_client *ca2;
	size_t bad;
	int hits, total;

	th_daemon_up(&A2, TH_ARGS("--host-size", "2M", "--page-size", "64K",
				  "--remote", rc_seeds(c), "--remote-write", "demote"));
	ca2 = th_connect(&A2, &L);
	for (int i = 0; i < DCHAINS; i++) {
		th_chain(&L, 2000 + (uint64_t)i, DLEN, 0, 0, D[i]);
		CHECK_RC(th_publish(ca2, D[i], DLEN, NULL), DLEN);
	}
	CHECK_GT(th_stat_get(&A2, "blocks.evicted"), 0);
	CHECK(rt_wait_publish_ends(&A2, th_stat_get(&A2, "blocks.evicted"), TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&A2, "tier_remote.published"), th_stat_get(&A2, "blocks.evicted"));
	th_note("demote: A2 evicted %" PRId64 ", published %" PRId64,
		th_stat_get(&A2, "blocks.evicted"), th_stat_get(&A2, "tier_remote.published"));
	total = 0;
	for (int i = 0; i < DCHAINS; i++) {
		hits = th_verify(cb, D[i], DLEN, &bad);
		CHECK_EQ(bad, 0);
		/* the oldest chains left A2 whole: in the cluster, all of them */
		if (i < 4)
			CHECK_EQ(hits, DLEN);
		total += hits;
	}
	th_note("demote: B hits %d of %d blocks", total, DCHAINS * DLEN);
	CHECK_LE(total, th_stat_get(&A2, "tier_remote.published"));
	return ca2;
}

/* B2 (demote, a 1 MiB host tier: 16 blocks) fetches those chains and
 * evicts what it fetched: nothing is sent back, it came from there */
static void fetched_not_sent_back(rc_cluster *c)
{
	kvs_client *cb2;
	long long exists0;
	size_t bad;
	int hits;

	th_daemon_up(&B2, TH_ARGS("--host-size", "1M", "--page-size", "64K",
				  "--remote", rc_seeds(c)));
	cb2 = th_connect(&B2, &L);
	exists0 = exists_calls(c);
	for (int i = 0; i < DCHAINS; i++) {
		hits = th_verify(cb2, D[i], DLEN, &bad);
		CHECK_EQ(bad, 0);
		if (i < 4)
			CHECK_EQ(hits, DLEN);
	}
	th_note("demote: B2 fetched %" PRId64 ", evicted %" PRId64 ", published %"
		PRId64, th_stat_get(&B2, "tier_remote.hits"),
		th_stat_get(&B2, "blocks.evicted"),
		th_stat_get(&B2, "tier_remote.published"));
	CHECK_GT(th_stat_get(&B2, "blocks.evicted"), 0);
	CHECK_EQ(th_stat_get(&B2, "tier_remote.existed"), th_stat_get(&B2, "blocks.evicted"));
	CHECK_EQ(th_stat_get(&B2, "tier_remote.published"), 0);
	CHECK_EQ(th_stat_get(&B2, "tier_remote.bytes_out"), 0);
	/* not even asked: every EXISTS the cluster saw was a probe's */
	CHECK_EQ(exists_calls(c) - exists0, th_stat_get(&B2, "tier_remote.probe_keys"));
	kvs_close(cb2);
}

/* maxmemory: about 1 MiB of room per node, 8 MiB published */
static void maxmemory_evicts(rc_cluster *c, kvs_client *ca, kvs_client *cb)
{
	long long evicted = 0;
	size_t bad;
	int hits, total;

	for (int i = 0; i < rc_nodes(c); i++)
		cap_memory(c, i, 1 << 20);
	for (int i = 0; i < MCHAINS; i++) {
		int64_t ends = rt_publish_ends(&A);

		th_chain(&L, 3000 + (uint64_t)i, MLEN, 0, 0, M[i]);
		CHECK_RC(th_publish(ca, M[i], MLEN, NULL), MLEN);
		CHECK(rt_wait_publish_ends(&A, ends + MLEN, TH_WAIT_MS));
	}
	for (int i = 0; i < rc_nodes(c); i++)
		evicted += evicted_keys(c, i);
	th_note("maxmemory: %lld keys evicted by Redis, A published %" PRId64
		", errors_other %" PRId64, evicted,
		th_stat_get(&A, "tier_remote.published"),
		th_stat_get(&A, "tier_remote.errors_other"));
	CHECK_GT(evicted, 0);
	total = 0;
	for (int i = 0; i < MCHAINS; i++) {
		hits = th_verify(cb, M[i], MLEN, &bad);
		CHECK_EQ(bad, 0);
		CHECK_GE(hits, 0);
		total += hits > 0 ? hits : 0;
	}
	th_note("maxmemory: B hits %d of %d blocks, tier_remote.misses %" PRId64,
		total, MCHAINS * MLEN, th_stat_get(&B, "tier_remote.misses"));
	CHECK_LT(total, MCHAINS * MLEN);
	CHECK_GT(th_stat_get(&B, "tier_remote.misses"), 0);
	CHECK_EQ(th_stat_get(&B, "tier_remote.corrupt"), 0);
}

/* through, under eviction (the cluster's memory uncapped again): A3's
 * 2 MiB host tier (32 blocks) turns over
 * while SETs are in flight; each goes straight from its block's slot,
 * which its pin keeps from reuse until the SET is answered, so what B
 * fetches is every block, bit exact (a slot reused under its SET
 * would arrive with a checksum that does not match: a miss). */
static void through_under_eviction(rc_cluster *c, kvs_client *cb)
{
	kvs_client *ca3;
	int committed = 0, whole[DCHAINS];
	size_t bad;

	for (int i = 0; i < rc_nodes(c); i++) {
		char out[256];

		CHECK_EQ(rc_cli(c, i, out, sizeof(out), "CONFIG", "SET", "maxmemory",
				"0", NULL), 0);
	}
	th_daemon_up(&A3, TH_ARGS("--host-size", "2M", "--page-size", "64K",
				  "--remote", rc_seeds(c), "--remote-write", "through"));
	ca3 = th_connect(&A3, &L);
	for (int i = 0; i < DCHAINS; i++) {
		th_chain(&L, 5000 + (uint64_t)i, DLEN, 0, 0, W[i]);
		whole[i] = th_publish(ca3, W[i], DLEN, NULL) == DLEN;
		committed += whole[i] * DLEN;
	}
	CHECK_GT(th_stat_get(&A3, "blocks.evicted"), 0);
	CHECK_GE(committed, DLEN * DCHAINS / 2);
	CHECK(rt_wait_ge(&A3, "tier_remote.published", committed, TH_WAIT_MS));
	for (int i = 0; i < DCHAINS; i++) {
		if (!whole[i])
			continue;
		CHECK_EQ(th_verify(cb, W[i], DLEN, &bad), DLEN);
		CHECK_EQ(bad, 0);
	}
	CHECK_EQ(th_stat_get(&B, "tier_remote.corrupt"), 0);
	th_note("through under eviction: A3 committed %d, evicted %" PRId64
		", published %" PRId64, committed,
		th_stat_get(&A3, "blocks.evicted"),
		th_stat_get(&A3, "tier_remote.published"));
	kvs_close(ca3);
}

int main(void)
{
	rc_cluster *c;
	kvs_client *ca, *ca2, *cb;
	int ret;

	setenv("TH_TIMEOUT", "240", 0);
	th_init("test_remote_share");
	c = rt_cluster(&(rc_opts){ .masters = 3 });
	th_note("cluster %s", rc_seeds(c));
	th_daemon_up(&A, TH_ARGS("--host-size", "16M", "--page-size", "64K",
				 "--remote", rc_seeds(c), "--remote-write", "through"));
	th_daemon_up(&B, TH_ARGS("--host-size", "16M", "--page-size", "64K",
				 "--remote", rc_seeds(c)));
	CHECK_EQ(th_stat_get(&A, "tier_remote.enabled"), 1);
	CHECK_EQ(th_stat_get(&A, "tier_remote.cluster"), 1);
	CHECK_EQ(th_stat_get(&B, "tier_remote.nodes"), 3);
	L = th_layout("remote-model", BLOCK_TOKENS);
	ca = th_connect(&A, &L);
	cb = th_connect(&B, &L);

	publish_through_then_fetch(ca, cb);
	ca2 = demote_publishes_evicted(c, cb);
	fetched_not_sent_back(c);
	maxmemory_evicts(c, ca, cb);
	through_under_eviction(c, cb);

	kvs_close(ca);
	kvs_close(ca2);
	kvs_close(cb);
	ret = th_finish();
	rc_stop(c);
	return ret;
}
