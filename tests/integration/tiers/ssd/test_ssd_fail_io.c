/*
 * test_ssd_fail_io - I/O errors on the SSD tier, injected with an LD_PRELOAD
 * shim (fail_io.c, built as a module for this test) in the daemon only.
 *
 * io_uring submissions do not go through libc, so they cannot be intercepted
 * this way: the daemon runs with KVS_SSD_NO_URING=1, whose synchronous
 * pwritev/preadv path delivers completions through the same eventfd and the
 * same completion handlers as io_uring (write_done, read_done in
 * tier_ssd.c). What is tested is the tier's handling of a failed
 * completion, not the io_uring plumbing.
 *
 * 2 MiB host tier of 64 KiB blocks (32) over 8 MiB of SSD in 1 MiB segments.
 * write and read run with --ssd-error-retry 0 (off until restart), the
 * others with 1 (tried again after 1 s, then 2, 4, ...).
 *  write:  pwritev on DIR/seg-* fails with EIO after 6 calls (segment
 *          superblocks and records). Chains are published until demotion
 *          turns off: tier_ssd.enabled 0, io_errors >= 1, an error log; the
 *          daemon keeps running; every lookup hit has identical bytes, the
 *          blocks written before the failure come back from SSD, new chains
 *          are committed and hit from RAM, nothing more is written.
 *  read:   a second daemon whose preadv on DIR/seg-* fails after 4 calls.
 *          32 blocks are demoted with no error; looking them up reads 4 and
 *          then fails: each block whose read failed is dropped (the lookup
 *          answers the chain before it; tier_ssd.blocks falls by exactly
 *          io_errors), is never served, and stays a miss; every hit has
 *          identical bytes; demotion is off, nothing is counted corrupt.
 *  passing: one pwritev fails after 6 (FAIL_IO_COUNT=1), then all pass:
 *          demotion off ("trying again in 1 s"); chains published every
 *          100 ms until demotion is back on by itself (error_retries,
 *          "trying demotion again") and blocks reach SSD again; it stays
 *          on; every block comes back with identical bytes.
 *  lasting: every pwritev fails after 6: off for 1 s, the try fails, off
 *          for 2 s ("trying again in 2 s"); the daemon serves right
 *          throughout.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LEN 4
#define MAX_CHAINS 40
#define NEW_CHAINS 4
#define READ_CHAINS 16

static th_daemon dw, dr, dp, dl;
static kvs_layout L;
static char wdir[160], rdir[160], pdir[160], ldir[160];
static char wpath[200], rpath[200], ppath[200], lpath[200];
static char preload[600], asan[600];
static kvs_hash H[MAX_CHAINS + NEW_CHAINS][LEN];

/* @d with the shim failing @ops ("w" or "r") on its segment files after
 * @after calls (@count of them, NULL: all), synchronous I/O. */
static void arm(th_daemon *d, char *dir, char *path, const char *ops,
		const char *after, const char *count)
{
	static char ops_kv[4][32], after_kv[4][32], count_kv[4][32];
	static int n;

	snprintf(dir, 160, "%s/ssd", d->dir);
	if (mkdir(dir, 0700) < 0)
		th_fatal("mkdir %s", dir);
	snprintf(path, 200, "FAIL_IO_PATH=%s/seg-", dir);
	snprintf(ops_kv[n], sizeof(ops_kv[n]), "FAIL_IO_OPS=%s", ops);
	snprintf(after_kv[n], sizeof(after_kv[n]), "FAIL_IO_AFTER=%s", after);
	th_daemon_setenv(d, "KVS_SSD_NO_URING=1");
	th_daemon_setenv(d, preload);
	th_daemon_setenv(d, asan);
	th_daemon_setenv(d, path);
	th_daemon_setenv(d, ops_kv[n]);
	th_daemon_setenv(d, after_kv[n]);
	if (count) {
		snprintf(count_kv[n], sizeof(count_kv[n]), "FAIL_IO_COUNT=%s", count);
		th_daemon_setenv(d, count_kv[n]);
	}
	n++;
}

static void write_errors(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", wdir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", "--ssd-error-retry", "0",
				      NULL };
	int64_t writes;
	kvs_client *c;
	int n = 0;

	if (th_daemon_init(&dw, args) < 0)
		th_fatal("cannot make a temp dir");
	arm(&dw, wdir, wpath, "w", "6", NULL);
	if (th_daemon_start(&dw) < 0)
		th_fatal("daemon did not start with the shim");
	if (!CHECK(th_log_contains(&dw, "fail_io: armed")))
		return;
	CHECK(th_log_contains(&dw, "io_uring unavailable: synchronous I/O"));
	c = th_connect(&dw, &L);
	while (n < MAX_CHAINS && th_stat_get(&dw, "tier_ssd.enabled") == 1) {
		th_chain(&L, 7000 + (uint64_t)n, LEN, 0, 0, H[n]);
		if (!CHECK_RC(th_publish(c, H[n], LEN, NULL), LEN))
			break;
		n++;
		CHECK(th_wait_stat(&dw, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	}
	writes = th_stat_get(&dw, "tier_ssd.writes");
	th_note("write errors: %d chains published, %" PRId64 " blocks written, "
		"then EIO; %" PRId64 " io errors", n, writes,
		th_stat_get(&dw, "tier_ssd.io_errors"));
	CHECK_EQ(th_stat_get(&dw, "tier_ssd.enabled"), 0);
	CHECK_GE(th_stat_get(&dw, "tier_ssd.io_errors"), 1);
	CHECK_GT(writes, 0);
	CHECK_LT(writes, 6); /* a superblock took at least one of the 6 */
	CHECK(th_log_contains(&dw, "fail_io: first failure: pwritev"));
	CHECK(th_log_contains(&dw, "write failed: Input/output error: demotion "
				   "turned off, serving from RAM"));
	CHECK(!th_daemon_exited(&dw, NULL));

	th_ssd_off_checks(&dw, c, &L, H, n, NEW_CHAINS, 7000, "write errors");
	kvs_close(c);
}

static void read_errors(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", rdir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", "--ssd-error-retry", "0",
				      NULL };
	int64_t blocks0, blocks1, writes0, writes1, errs, reads;
	kvs_client *c;
	int hits, hits2;
	size_t bad;

	if (th_daemon_init(&dr, args) < 0)
		th_fatal("cannot make a temp dir");
	arm(&dr, rdir, rpath, "r", "4", NULL);
	if (th_daemon_start(&dr) < 0)
		th_fatal("daemon did not start with the shim");
	if (!CHECK(th_log_contains(&dr, "fail_io: armed")))
		return;
	c = th_connect(&dr, &L);
	for (int i = 0; i < READ_CHAINS; i++) {
		th_chain(&L, 8000 + (uint64_t)i, LEN, 0, 0, H[i]);
		CHECK_RC(th_publish(c, H[i], LEN, NULL), LEN);
	}
	CHECK(th_wait_stat(&dr, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&dr, "tier_ssd.io_errors"), 0);
	CHECK_EQ(th_stat_get(&dr, "tier_ssd.enabled"), 1);
	blocks0 = th_stat_get(&dr, "tier_ssd.blocks");
	writes0 = th_stat_get(&dr, "tier_ssd.writes");
	CHECK_GE(blocks0, READ_CHAINS * LEN - 32);

	hits = th_verify_chains(c, &H[0][0], READ_CHAINS, LEN, &bad);
	blocks1 = th_stat_get(&dr, "tier_ssd.blocks");
	errs = th_stat_get(&dr, "tier_ssd.io_errors");
	writes1 = th_stat_get(&dr, "tier_ssd.writes");
	reads = th_stat_get(&dr, "tier_ssd.reads");
	th_note("read errors: %d hits of %d blocks, %zu wrong; %" PRId64
		" reads verified, %" PRId64 " failed and dropped", hits,
		READ_CHAINS * LEN, bad, reads, errs);
	CHECK_EQ(bad, 0);
	CHECK_EQ(reads, 4);
	CHECK_GE(errs, 1);
	CHECK_LT(hits, READ_CHAINS * LEN);
	/* Each block whose read failed left the tier. (Promotions evicted
	 * blocks until the first error turned demotion off: those writes
	 * succeeded, and their blocks were read and failed too.) */
	CHECK_EQ(blocks0 + (writes1 - writes0) - blocks1, errs);
	CHECK_EQ(th_stat_get(&dr, "blocks.lookup_miss"), errs);
	CHECK_EQ(th_stat_get(&dr, "tier_ssd.enabled"), 0);
	CHECK_EQ(th_stat_get(&dr, "tier_ssd.corrupt_blocks"), 0);
	CHECK(th_log_contains(&dr, "fail_io: first failure: preadv"));
	CHECK(th_log_contains(&dr, "read failed: Input/output error"));
	CHECK(!th_daemon_exited(&dr, NULL));
	CHECK(th_wait_stat(&dr, "leases.active", 0, TH_WAIT_MS));

	/* Again: what failed stays gone, what is served is right. */
	hits2 = th_verify_chains(c, &H[0][0], READ_CHAINS, LEN, &bad);
	th_note("read errors, second pass: %d hits, %zu wrong", hits2, bad);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&dr, "tier_ssd.reads"), 4);
	CHECK_EQ(th_stat_get(&dr, "tier_ssd.writes"), writes1);
	CHECK_EQ(blocks0 + (writes1 - writes0) - th_stat_get(&dr, "tier_ssd.blocks"),
		 th_stat_get(&dr, "tier_ssd.io_errors"));
	CHECK_EQ(hits2, hits);
	CHECK(!th_daemon_exited(&dr, NULL));
	CHECK(th_wait_stat(&dr, "leases.active", 0, TH_WAIT_MS));
	kvs_close(c);
}

/* Publish chain @i (seed @seed + i) into H and wait for its writes. */
static bool publish_one(th_daemon *d, kvs_client *c, uint64_t seed, int i)
{
	th_chain(&L, seed + (uint64_t)i, LEN, 0, 0, H[i]);
	if (!CHECK_RC(th_publish(c, H[i], LEN, NULL), LEN))
		return false;
	return CHECK(th_wait_stat(d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
}

/* Publish chains from *n on until demotion turns off; true if it did. */
static bool until_off(th_daemon *d, kvs_client *c, uint64_t seed, int *n)
{
	while (*n < MAX_CHAINS && th_stat_get(d, "tier_ssd.enabled") == 1)
		if (!publish_one(d, c, seed, (*n)++))
			return false;
	return CHECK_EQ(th_stat_get(d, "tier_ssd.enabled"), 0);
}

/* A chain every 100 ms (each evicts older blocks: a demotion, which tries
 * again once the wait is over) until @done(d) or 10 s. */
static void every_100ms(th_daemon *d, kvs_client *c, uint64_t seed, int *n,
			bool (*done)(th_daemon *d))
{
	int64_t deadline = th_now_ms() + 10000, next = 0;

	while (*n < MAX_CHAINS && th_now_ms() < deadline && !done(d)) {
		if (th_now_ms() < next) {
			th_poll_pause();
			continue;
		}
		next = th_now_ms() + 100;
		if (!publish_one(d, c, seed, (*n)++))
			return;
	}
}

static int64_t p_writes;

static bool writing_again(th_daemon *d)
{
	return th_stat_get(d, "tier_ssd.enabled") == 1 &&
	       th_stat_get(d, "tier_ssd.writes") > p_writes;
}

static void passing_error(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", pdir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", "--ssd-error-retry", "1",
				      NULL };
	int64_t writes, prom;
	kvs_client *c;
	size_t bad;
	int n = 0, hits;

	if (th_daemon_init(&dp, args) < 0)
		th_fatal("cannot make a temp dir");
	arm(&dp, pdir, ppath, "w", "6", "1");
	if (th_daemon_start(&dp) < 0)
		th_fatal("daemon did not start with the shim");
	c = th_connect(&dp, &L);
	if (!until_off(&dp, c, 9000, &n))
		return;
	CHECK(th_log_contains(&dp, "serving from RAM; trying again in 1 s"));
	p_writes = th_stat_get(&dp, "tier_ssd.writes");
	every_100ms(&dp, c, 9000, &n, writing_again);
	th_note("passing error: %" PRId64 " tries, enabled %" PRId64 ", %" PRId64
		" blocks written after it, %d chains", th_stat_get(&dp,
		"tier_ssd.error_retries"), th_stat_get(&dp, "tier_ssd.enabled"),
		th_stat_get(&dp, "tier_ssd.writes") - p_writes, n);
	CHECK_EQ(th_stat_get(&dp, "tier_ssd.error_retries"), 1);
	CHECK_EQ(th_stat_get(&dp, "tier_ssd.io_errors"), 1);
	CHECK(writing_again(&dp));
	CHECK(th_log_contains(&dp, "trying demotion again"));
	/* It stays on: 4 chains more, each evicting the one before. */
	writes = th_stat_get(&dp, "tier_ssd.writes");
	for (int i = 0; i < 4 && n < MAX_CHAINS; i++)
		publish_one(&dp, c, 9000, n++);
	CHECK_EQ(th_stat_get(&dp, "tier_ssd.enabled"), 1);
	CHECK_GE(th_stat_get(&dp, "tier_ssd.writes"), writes + 4 * LEN);
	prom = th_stat_get(&dp, "tier_ssd.promotions");
	hits = th_verify_chains(c, &H[0][0], (size_t)n, LEN, &bad);
	th_note("passing error: %d hits of %d blocks, %zu wrong, %" PRId64
		" promoted from SSD", hits, n * LEN, bad,
		th_stat_get(&dp, "tier_ssd.promotions") - prom);
	CHECK_EQ(bad, 0);
	CHECK_GT(th_stat_get(&dp, "tier_ssd.promotions"), prom);
	CHECK_EQ(th_stat_get(&dp, "tier_ssd.corrupt_blocks"), 0);
	kvs_close(c);
}

/* Tried again, and that try failed (its write completed: off again). */
static bool tried_failed(th_daemon *d)
{
	return th_stat_get(d, "tier_ssd.error_retries") >= 1 &&
	       th_stat_get(d, "tier_ssd.enabled") == 0;
}

static void lasting_error(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", ldir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", "--ssd-error-retry", "1",
				      NULL };
	kvs_client *c;
	size_t bad;
	int n = 0;

	if (th_daemon_init(&dl, args) < 0)
		th_fatal("cannot make a temp dir");
	arm(&dl, ldir, lpath, "w", "6", NULL);
	if (th_daemon_start(&dl) < 0)
		th_fatal("daemon did not start with the shim");
	c = th_connect(&dl, &L);
	if (!until_off(&dl, c, 9500, &n))
		return;
	CHECK(th_log_contains(&dl, "serving from RAM; trying again in 1 s"));
	every_100ms(&dl, c, 9500, &n, tried_failed);
	th_note("lasting error: %" PRId64 " tries, %" PRId64 " io errors, "
		"%d chains", th_stat_get(&dl, "tier_ssd.error_retries"),
		th_stat_get(&dl, "tier_ssd.io_errors"), n);
	CHECK(tried_failed(&dl));
	CHECK(th_log_contains(&dl, "trying demotion again"));
	CHECK(th_log_contains(&dl, "serving from RAM; trying again in 2 s"));
	CHECK(th_wait_stat(&dl, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&dl, "tier_ssd.enabled"), 0);
	CHECK_GE(th_verify_chains(c, &H[0][0], (size_t)n, LEN, &bad), 32 - 4);
	CHECK_EQ(bad, 0);
	CHECK(!th_daemon_exited(&dl, NULL));
	kvs_close(c);
}

int main(void)
{
	const char *a = getenv("ASAN_OPTIONS");

	th_init("test_ssd_fail_io");
	if (access(KVS_FAIL_IO_SO, R_OK) != 0)
		th_skip("the shim %s is not built", KVS_FAIL_IO_SO);
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", KVS_FAIL_IO_SO);
	/* Under ASan the shim comes before the ASan runtime in the link map. */
	snprintf(asan, sizeof(asan), "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
		 a && *a ? a : "", a && *a ? ":" : "");
	L = th_layout("ssd-fail-io", 64);
	write_errors();
	read_errors();
	passing_error();
	lasting_error();
	return th_finish();
}
