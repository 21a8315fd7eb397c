/*
 * test_crash - clients that die never leak slots, pins or leases, and never
 * publish half-written blocks.
 *
 *  writers: a writer process reserves a chain, writes half of it and dies
 *           (SIGKILL; every fifth time it exits without committing instead),
 *           ITERATIONS times over the same chain. While it lives, others see
 *           nothing and are told BUSY; once it is gone, slots_used,
 *           blocks_writing and leases.active return to their baselines, the
 *           chain is still a miss, and the next writer gets it all NEW.
 *  many:    several writers on different chains killed at the same moment.
 *  reader:  a reader killed while holding a lease drops its pins, and the
 *           blocks it pinned become evictable again.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BT 16 /* 16 KiB blocks */
#define NBLK 8
#define ITERATIONS 50
#define MANY 4
#define SEED_W 31

static th_daemon d;
static kvs_layout L;

struct baseline {
	int64_t slots_used, blocks_writing, leases, pins;
};

static struct baseline base;

static void take_baseline(void)
{
	base.slots_used = th_stat_get(&d, "tier_host.slots_used");
	base.blocks_writing = th_stat_get(&d, "tier_host.blocks_writing");
	base.leases = th_stat_get(&d, "leases.active");
	base.pins = th_stat_get(&d, "leases.pinned_blocks");
}

/* The daemon notices a death asynchronously: poll, with a deadline. */
static void check_back_to_baseline(const char *after)
{
	bool ok = true;

	ok &= CHECK(th_wait_stat(&d, "tier_host.slots_used", base.slots_used, TH_WAIT_MS));
	ok &= CHECK(th_wait_stat(&d, "tier_host.blocks_writing", base.blocks_writing, TH_WAIT_MS));
	ok &= CHECK(th_wait_stat(&d, "leases.active", base.leases, TH_WAIT_MS));
	ok &= CHECK(th_wait_stat(&d, "leases.pinned_blocks", base.pins, TH_WAIT_MS));
	/* A dead fast client's pin area counts for a grace of 100 ms after
	 * its connection closed (docs/architecture.md), then goes. */
	ok &= CHECK(th_wait_stat(&d, "fast.revoked", 0, TH_WAIT_MS));
	if (!ok)
		th_note("not back to the baseline after %s", after);
}

enum { DIE_KILLED, DIE_EXIT };

struct writer_arg {
	uint64_t seed;
	int how;
};

/* Reserve the chain, write half of it, report, then wait to be killed (or
 * exit without committing). */
static int half_writer(void *argp, int fd)
{
	const struct writer_arg *arg = argp;
	kvs_client *c = th_connect(&d, &L);
	uint64_t bb = kvs_block_bytes(c), msg;
	kvs_hash h[NBLK];
	kvs_block b[NBLK];
	kvs_lease lease = 0;

	th_chain(&L, arg->seed, NBLK, 0, 0, h);
	CHECK_RC(kvs_reserve(c, h, NBLK, &lease, b), NBLK);
	for (int i = 0; i < NBLK / 2; i++) {
		void *p = kvs_block_ptr(c, &b[i]);

		if (CHECK(p != NULL))
			th_pattern_fill(p, bb, h[i], 0);
	}
	CHECK_RC(th_send_u64(fd, lease), 0);
	if (arg->how == DIE_EXIT) {
		/* Gone without commit, kvs_close or exit handlers. */
		fflush(NULL);
		_exit(th_failures() ? 1 : 0);
	}
	th_recv_u64(fd, &msg, 60000);     /* killed while waiting here */
	return 1;
}

static void writers_die(kvs_client *obs)
{
	kvs_hash h[NBLK];
	kvs_block b[NBLK];
	th_stats s0, s1;
	size_t bad;

	th_chain(&L, SEED_W, NBLK, 0, 0, h);
	th_stats_take(&d, &s0);
	for (int i = 0; i < ITERATIONS; i++) {
		struct writer_arg arg = { SEED_W, i % 5 == 4 ? DIE_EXIT : DIE_KILLED };
		kvs_lease wl = 0, theirs = 0;
		th_child kid;

		th_spawn(&kid, half_writer, &arg);
		if (!CHECK_RC(th_recv_u64(kid.fd, &theirs, 10000), 0)) {
			th_child_kill(&kid, SIGKILL);
			break;
		}
		if (arg.how == DIE_KILLED) {
			/* Being written: invisible, and BUSY to another writer. */
			CHECK_RC(th_probe(obs, h, NBLK), 0);
			CHECK_RC(kvs_reserve(obs, h, NBLK, &wl, b), 0);
			CHECK_EQ(wl, 0);
			CHECK_EQ(b[0].status, KVS_BLOCK_BUSY);
			CHECK_RC(kvs_commit(obs, theirs), KVS_E_NOTOWNER);
			CHECK_EQ(th_stat_get(&d, "tier_host.blocks_writing"),
				 base.blocks_writing + NBLK);
			CHECK_EQ(th_stat_get(&d, "leases.active"), base.leases + 1);
			CHECK_RC(th_child_kill(&kid, SIGKILL), 128 + SIGKILL);
		} else {
			CHECK_RC(th_child_wait(&kid, 10000), 0);
		}
		check_back_to_baseline(arg.how == DIE_KILLED ? "SIGKILL" : "exit");
		CHECK_RC(th_probe(obs, h, NBLK), 0);
		if (th_failures())
			break; /* one broken iteration says it all */
	}
	th_stats_take(&d, &s1);
	CHECK_EQ(th_stats_delta(&s0, &s1, "blocks.reserved"), ITERATIONS * NBLK);
	CHECK_EQ(th_stats_delta(&s0, &s1, "blocks.aborted"), ITERATIONS * NBLK);
	CHECK_EQ(th_stats_delta(&s0, &s1, "blocks.committed"), 0);
	CHECK_GE(th_stats_delta(&s0, &s1, "clients.disconnected"), ITERATIONS);
	th_stats_free(&s0);
	th_stats_free(&s1);

	/* Nothing of theirs is left: the chain is all NEW, and ours. */
	CHECK_RC(th_publish(obs, h, NBLK, b), NBLK);
	CHECK_RC(th_verify(obs, h, NBLK, &bad), NBLK);
	CHECK_EQ(bad, 0);
}

static void many_die_at_once(kvs_client *obs)
{
	struct writer_arg args[MANY];
	th_child kids[MANY];
	uint64_t lease;

	take_baseline();
	for (int i = 0; i < MANY; i++) {
		args[i] = (struct writer_arg){ 100 + (uint64_t)i, DIE_KILLED };
		th_spawn(&kids[i], half_writer, &args[i]);
	}
	for (int i = 0; i < MANY; i++)
		CHECK_RC(th_recv_u64(kids[i].fd, &lease, 10000), 0);
	CHECK_EQ(th_stat_get(&d, "tier_host.blocks_writing"),
		 base.blocks_writing + MANY * NBLK);
	for (int i = 0; i < MANY; i++)
		kill(kids[i].pid, SIGKILL);
	for (int i = 0; i < MANY; i++)
		CHECK_RC(th_child_wait(&kids[i], 10000), 128 + SIGKILL);
	check_back_to_baseline("killing several writers");
	for (int i = 0; i < MANY; i++) {
		kvs_hash h[NBLK];

		th_chain(&L, args[i].seed, NBLK, 0, 0, h);
		CHECK_RC(th_probe(obs, h, NBLK), 0);
	}
}

/* Pin the published chain and wait to be killed. */
static int pinning_reader(void *arg, int fd)
{
	kvs_client *c = th_connect(&d, &L);
	kvs_hash h[NBLK];
	kvs_block b[NBLK];
	kvs_lease lease = 0;
	uint64_t msg;

	(void)arg;
	th_chain(&L, SEED_W, NBLK, 0, 0, h);
	CHECK_RC(kvs_lookup(c, h, NBLK, &lease, b), NBLK);
	CHECK_RC(th_send_u64(fd, lease), 0);
	th_recv_u64(fd, &msg, 60000);
	return 1;
}

static void reader_dies(kvs_client *obs)
{
	int64_t capacity = th_stat_get(&d, "tier_host.bytes_total") /
			   (int64_t)kvs_block_bytes(obs);
	kvs_hash h[NBLK], other[NBLK];
	th_child kid;
	uint64_t lease;

	take_baseline();
	th_chain(&L, SEED_W, NBLK, 0, 0, h);
	th_spawn(&kid, pinning_reader, NULL);
	CHECK_RC(th_recv_u64(kid.fd, &lease, 10000), 0);
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), base.pins + NBLK);
	CHECK_EQ(th_stat_get(&d, "leases.active"), base.leases + 1);
	CHECK_RC(th_child_kill(&kid, SIGKILL), 128 + SIGKILL);
	check_back_to_baseline("killing a reader");

	/* Unpinned and the oldest: pressure evicts it. */
	for (int64_t i = 0; i < 2 * capacity / NBLK; i++) {
		th_chain(&L, 1000 + (uint64_t)i, NBLK, 0, 0, other);
		if (!CHECK_RC(th_publish(obs, other, NBLK, NULL), NBLK))
			break;
	}
	CHECK_LT(th_probe(obs, h, NBLK), NBLK);
	CHECK_GT(th_stat_get(&d, "blocks.evicted"), 0);
}

int main(void)
{
	kvs_client *obs;

	th_init("test_crash");
	L = th_layout("crash-model", BT);
	/* The eviction-order checks below are LRU's. */
	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--eviction-policy", "leaf-lru"));
	obs = th_connect(&d, &L);
	take_baseline();
	writers_die(obs);
	many_die_at_once(obs);
	reader_dies(obs);
	kvs_close(obs);
	return th_finish();
}
