/*
 * test_arena_seal - no client can crash the daemon through the arena fds its
 * HELLO hands out (DESIGN.md: every fd a client receives is sealed against
 * shrink and grow; the daemon reads those pages itself).
 *
 * A raw client sends the HELLO a worker sends, keeps the arena fds that come
 * with the reply, and does what a hostile worker could: ftruncate() each fd
 * to twice its size and to 0. Both must fail with EPERM, F_GET_SEALS must
 * show F_SEAL_SHRINK | F_SEAL_GROW (and F_SEAL_SEAL, so that no one can
 * lift them), and the size must be what the reply said. Then the daemon is
 * made to read slots with its CPU, where a truncated memfd is SIGBUS:
 *
 *  - host arena + SSD tier: reserves past a small host tier demote committed
 *    blocks to SSD (their checksums are computed from the slots); the daemon
 *    stays up, and a new client reads every block back bit exact;
 *  - GPU stand-in arena (KVS_GPU_FAKE=1, the "kvshare-gpu-fake" memfd):
 *    reserves past the GPU tier demote its blocks to the host tier (a copy
 *    out of the GPU arena); the daemon stays up and serves;
 *  - tenant arenas (--tenant-arenas uid): the per-uid arena is sealed the
 *    same way. That mode runs no store and no GPU tier, so nothing in the
 *    daemon reads its slots: only the seals are checked, then a round trip.
 *
 * Without the seals the ftruncate(fd, 0) succeeds and the first demotion
 * kills the daemon with SIGBUS. The CUDA engine's fds are driver handles,
 * not memfds: nothing to seal there (and no CUDA here).
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_raw.h"
#include "harness_ssd.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BT 64 /* 64 KiB blocks */
#define CHAIN 8

static kvs_layout L;

/* A hostile worker's try at fd @fd of @bytes: grow it, shrink it. */
static void try_truncate(int fd, uint64_t bytes, const char *what)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	th_note("%s: seals %#x", what, seals);
	CHECK(seals >= 0);
	CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
	      (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
	CHECK_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1); /* sealed for good */
	CHECK(fstat(fd, &st) == 0 && (uint64_t)st.st_size == bytes);
	errno = 0;
	if (!CHECK_EQ(ftruncate(fd, (off_t)(bytes * 2)), -1))
		(void)!ftruncate(fd, (off_t)bytes); /* grown: shrink it below */
	CHECK_EQ(errno, EPERM);
	errno = 0;
	CHECK_EQ(ftruncate(fd, 0), -1);
	CHECK_EQ(errno, EPERM);
	CHECK(fstat(fd, &st) == 0 && (uint64_t)st.st_size == bytes);
}

/* The raw HELLO: *fds gets the arenas' fds (host, then GPU), the reply
 * the sizes. Returns how many fds came. */
static int raw_worker(th_daemon *d, uint32_t flags, kvs_wire_hello_reply *r,
		      int *fds)
{
	int fd = th_raw_connect(d), n = 2;

	if (!CHECK(fd >= 0))
		return 0;
	CHECK_RC(th_raw_hello_fds(fd, &L, flags, r, fds, &n), 0);
	/* The connection may go: the fds keep the memfds. */
	close(fd);
	return n;
}

/* Whether the daemon is still up: it answers a stats request. If not, the
 * failure says how it died. */
static bool alive(th_daemon *d)
{
	int64_t deadline = th_now_ms() + TH_WAIT_MS, pid;
	int st = -1;

	if (th_stat(d, "server.pid", &pid) == 0)
		return true;
	while (!th_daemon_exited(d, &st) && th_now_ms() < deadline)
		th_poll_pause();
	th_note("kvshared does not answer: exit status %d%s", st,
		st == 128 + SIGBUS ? " (SIGBUS)" : "");
	CHECK(!"kvshared is alive");
	return false;
}

/* Reserve @n chains of fresh hashes (seeds from @seed) and abort them:
 * each reserve makes room, which moves committed blocks down a tier. */
static void reserve_past(kvs_client *c, uint64_t seed, int n)
{
	kvs_block b[CHAIN];
	kvs_hash h[CHAIN];

	for (int i = 0; i < n; i++) {
		kvs_lease lease = 0;
		int rc;

		th_chain(&L, seed + (uint64_t)i, CHAIN, 0, 0, h);
		rc = kvs_reserve(c, h, CHAIN, &lease, b);
		if (rc < 0) {
			th_note("reserve %d: %s", i, kvs_strerror(rc));
			return;
		}
		if (lease)
			kvs_abort(c, lease);
	}
}

/* Wait until stat @name is at least @min. */
static bool wait_at_least(th_daemon *d, const char *name, int64_t min)
{
	int64_t deadline = th_now_ms() + TH_WAIT_MS, v = 0;

	while (th_now_ms() < deadline) {
		if (th_stat(d, name, &v) == 0 && v >= min)
			return true;
		th_poll_pause();
	}
	th_note("%s: %lld, wanted at least %lld", name, (long long)v,
		(long long)min);
	return false;
}

static void host_ssd(void)
{
	static th_daemon d;
	static char ssd[160];
	kvs_wire_hello_reply r = { 0 };
	kvs_hash h[2][CHAIN];
	kvs_client *a, *b;
	size_t bad = 1;
	int fds[2], n;

	/* 1 MiB of host tier: 16 blocks, two chains. */
	th_daemon_up_ssd(&d, TH_ARGS("--host-size", "1M", "--ssd-dir", ssd,
				     "--ssd-size", "8M", "--ssd-segment", "1M"),
			 ssd, sizeof(ssd));
	a = th_connect(&d, &L);
	for (int i = 0; i < 2; i++) {
		th_chain(&L, 100 + (uint64_t)i, CHAIN, 0, 0, h[i]);
		CHECK_RC(th_publish(a, h[i], CHAIN, NULL), CHAIN);
	}
	n = raw_worker(&d, 0, &r, fds);
	if (!CHECK_EQ(n, 1))
		goto out;
	try_truncate(fds[0], r.host_arena_bytes, "host arena");
	/* The host tier is full: a chain of room moves a chain to SSD. */
	reserve_past(a, 200, 4);
	if (!alive(&d))
		goto out;
	CHECK(wait_at_least(&d, "tier_ssd.writes", CHAIN));
	b = th_connect(&d, &L);
	for (int i = 0; i < 2; i++) {
		CHECK_RC(th_verify(b, h[i], CHAIN, &bad), CHAIN);
		CHECK_EQ(bad, 0);
	}
	CHECK_GT(th_stat_get(&d, "tier_ssd.promotions"), 0);
	kvs_close(b);
	close(fds[0]);
out:
	kvs_close(a);
}

static void gpu_fake(void)
{
	static th_daemon d;
	kvs_wire_hello_reply r = { 0 };
	kvs_client *a = NULL, *b;
	kvs_block blk[CHAIN];
	kvs_hash h[CHAIN];
	int fds[2], n, rc;

	/* 2 MiB of GPU tier: 32 blocks, four chains. */
	setenv("KVS_GPU_FAKE", "1", 1);
	th_daemon_up(&d, TH_ARGS("--gpu", "0", "--gpu-size", "2M",
				 "--host-size", "16M"));
	unsetenv("KVS_GPU_FAKE");
	rc = kvs_connect_flags(d.socket, &L, KVS_CONNECT_GPU, &a);
	if (!CHECK_RC(rc, 0))
		return;
	/* Committed in the GPU tier (the bytes do not matter here). */
	for (int i = 0; i < 4; i++) {
		kvs_lease lease = 0;

		th_chain(&L, 300 + (uint64_t)i, CHAIN, 0, 0, h);
		CHECK_RC(kvs_reserve(a, h, CHAIN, &lease, blk), CHAIN);
		CHECK_EQ(blk[0].tier, KVS_TIER_GPU);
		CHECK_RC(kvs_commit(a, lease), CHAIN);
	}
	n = raw_worker(&d, KVS_HELLO_GPU, &r, fds);
	if (!CHECK_EQ(n, 2))
		goto out;
	CHECK_EQ(r.gpu_kind, 2); /* the fake device's memfd */
	try_truncate(fds[1], r.gpu_arena_bytes, "GPU stand-in arena");
	reserve_past(a, 400, 4);
	if (!alive(&d))
		goto out;
	CHECK(wait_at_least(&d, "tier_gpu.demotions", CHAIN));
	/* Still serving: a host client publishes and reads back. */
	b = th_connect(&d, &L);
	th_round_trip(b, &L, 500, CHAIN);
	kvs_close(b);
	close(fds[0]);
	close(fds[1]);
out:
	kvs_close(a);
}

static void tenant(void)
{
	static th_daemon d;
	kvs_wire_hello_reply r = { 0 };
	kvs_client *b;
	int fds[2], n;

	th_daemon_up(&d, TH_ARGS("--host-size", "16M", "--tenant-arenas", "uid",
				 "--max-tenants", "2"));
	n = raw_worker(&d, 0, &r, fds);
	if (!CHECK_EQ(n, 1))
		return;
	try_truncate(fds[0], r.host_arena_bytes, "tenant arena");
	b = th_connect(&d, &L);
	th_round_trip(b, &L, 600, CHAIN);
	kvs_close(b);
	close(fds[0]);
}

int main(void)
{
	th_init("test_arena_seal");
	L = th_layout("arena-seal-model", BT);
	host_ssd();
	gpu_fake();
	tenant();
	return th_finish();
}
