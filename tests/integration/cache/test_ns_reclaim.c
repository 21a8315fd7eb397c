/*
 * test_ns_reclaim - namespaces come back: an API user that sends a new
 * cache salt with every request cannot use up its uid's namespaces for
 * the salts and adapters that share.
 *
 *  salts:   300 clients, each with a random salt, publish one block and
 *           leave (the default --max-namespaces-per-uid, 256). Every attach
 *           succeeds: at the cap the oldest idle namespace (no client, its
 *           blocks freed) is reclaimed (namespaces.reclaimed), and the count
 *           stays at the cap. A namespace with a client is never reclaimed
 *           (the first salt's client stays, and still hits its block). Then
 *           20 new salted users and a new adapter attach and share: a second
 *           client of each finds the first one's chain whole.
 *  ssd:     with an SSD tier (write-through) and a cap of 2, a namespace
 *           that never had a block is reclaimed and its id given to a new
 *           salt, whose chain goes to SSD; after a restart both chains on
 *           SSD hit whole under their own namespaces, none under another's.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#define RANDOM 300
#define USERS 20
#define LEN 4

static kvs_layout L;

static kvs_layout salted(const char *salt)
{
	kvs_layout l = L;

	l.salt = salt;
	return l;
}

/* A client of @l publishes a chain of LEN from @seed, another of @l finds
 * it: the second's hits. */
static int share(th_daemon *d, const kvs_layout *l, uint64_t seed)
{
	kvs_hash h[LEN];
	kvs_client *a = th_connect(d, l), *b;
	size_t bad = 1;
	int hits;

	th_chain(l, seed, LEN, 0, 0, h);
	CHECK_RC(th_publish(a, h, LEN, NULL), LEN);
	b = th_connect(d, l);
	hits = th_verify(b, h, LEN, &bad);
	CHECK_EQ(bad, 0);
	kvs_close(a);
	kvs_close(b);
	return hits;
}

static void salts(void)
{
	static th_daemon d;
	static char salt[RANDOM + USERS][40];
	kvs_client *keep = NULL, *c;
	kvs_layout l;
	kvs_hash h0;
	uint64_t r;
	int ok = 0, hits = 0;
	size_t bad = 1;

	th_daemon_up(&d, TH_ARGS("--host-size", "16M"));
	for (int i = 0; i < RANDOM + USERS; i++) {
		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (uint64_t)i * 0x9e3779b97f4a7c15ull;
		snprintf(salt[i], sizeof(salt[i]), "random-%016" PRIx64, r);
	}
	for (int i = 0; i < RANDOM; i++) {
		l = salted(salt[i]);
		c = NULL;
		if (kvs_connect(d.socket, &l, &c) != 0)
			continue;
		ok++;
		if (i == 0) {
			th_chain(&l, 1, 1, 0, 0, &h0);
			CHECK_RC(th_publish(c, &h0, 1, NULL), 1);
			keep = c;
			continue;
		}
		th_round_trip(c, &l, (uint64_t)i, 1);
		kvs_close(c);
	}
	th_note("salts: %d of %d one-block attaches served, %" PRId64
		" namespaces reclaimed, %" PRId64 " now", ok, RANDOM,
		th_stat_get(&d, "namespaces.reclaimed"),
		th_stat_get(&d, "namespaces.count"));
	CHECK_EQ(ok, RANDOM);
	CHECK_EQ(th_stat_get(&d, "namespaces.refused"), 0);
	CHECK_EQ(th_stat_get(&d, "namespaces.count"), 256);
	CHECK_EQ(th_stat_get(&d, "namespaces.reclaimed"), RANDOM - 256);
	for (int i = 0; i < USERS; i++) {
		l = salted(salt[RANDOM + i]);
		hits += share(&d, &l, 1000 + (uint64_t)i);
	}
	l = L;
	l.adapter = "lora-new";
	hits += share(&d, &l, 2000);
	th_note("salts: then %d of %d blocks of %d new users and an adapter hit",
		hits, (USERS + 1) * LEN, USERS);
	CHECK_EQ(hits, (USERS + 1) * LEN);
	CHECK_EQ(th_stat_get(&d, "namespaces.count"), 256);
	/* The first salt kept its client: its namespace and block stayed. */
	l = salted(salt[0]);
	CHECK_RC(th_verify(keep, &h0, 1, &bad), 1);
	CHECK_EQ(bad, 0);
	kvs_close(keep);
}

static void ssd(void)
{
	static th_daemon d;
	static char dir[200];
	static const char *args[] = { "--host-size", "4M", "--page-size", "64K",
				      "--ssd-dir", dir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", "--ssd-write-through",
				      "--max-namespaces-per-uid", "2", NULL };
	kvs_layout la, lb, lc;
	kvs_hash ha[LEN], hc[LEN];
	kvs_client *a, *b, *c;
	size_t bad = 1;

	L = th_layout("reclaim-ssd", 64);
	la = salted("kept");
	lb = salted("never");
	lc = salted("reused");
	th_daemon_up_ssd(&d, args, dir, sizeof(dir));
	b = th_connect(&d, &lb); /* namespace 1: never a block */
	a = th_connect(&d, &la); /* namespace 2 */
	th_chain(&la, 1, LEN, 0, 0, ha);
	CHECK_RC(th_publish(a, ha, LEN, NULL), LEN);
	kvs_close(b);
	CHECK(th_wait_stat(&d, "clients.connected", 2, TH_WAIT_MS));
	c = th_connect(&d, &lc); /* id 1 again */
	CHECK_EQ(th_stat_get(&d, "namespaces.reclaimed"), 1);
	th_chain(&lc, 1, LEN, 0, 0, hc);
	CHECK_RC(th_publish(c, hc, LEN, NULL), LEN);
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&d, "tier_ssd.writes"), 2 * LEN);
	kvs_close(a);
	kvs_close(c);
	if (!CHECK_RC(th_daemon_restart(&d), 0))
		return;
	CHECK(th_wait_stat(&d, "tier_ssd.index_loading", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&d, "tier_ssd.restart_blocks"), 2 * LEN);
	c = th_connect(&d, &lc);
	a = th_connect(&d, &la);
	b = th_connect(&d, &lb);
	CHECK_EQ(th_verify(c, hc, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_verify(a, ha, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_verify(b, hc, LEN, &bad), 0);
	CHECK_EQ(th_verify(b, ha, LEN, &bad), 0);
	kvs_close(a);
	kvs_close(b);
	kvs_close(c);
}

int main(void)
{
	th_init("test_ns_reclaim");
	L = th_layout("reclaim", 16);
	salts();
	ssd();
	return th_finish();
}
