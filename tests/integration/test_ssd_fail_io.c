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

static th_daemon dw, dr;
static kvs_layout L;
static char wdir[160], rdir[160];
static char wpath[200], rpath[200], preload[600], asan[600];
static kvs_hash H[MAX_CHAINS + NEW_CHAINS][LEN];

/* @d with the shim failing @ops ("w" or "r") on its segment files after
 * @after calls, synchronous I/O. */
static void arm(th_daemon *d, char *dir, char *path, const char *ops,
		const char *after)
{
	static char ops_kv[2][32], after_kv[2][32];
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
	n++;
}

static void write_errors(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", wdir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", NULL };
	int64_t writes;
	kvs_client *c;
	int n = 0;

	if (th_daemon_init(&dw, args) < 0)
		th_fatal("cannot make a temp dir");
	arm(&dw, wdir, wpath, "w", "6");
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
				      "--ssd-size", "8M", NULL };
	int64_t blocks0, blocks1, writes0, writes1, errs, reads;
	kvs_client *c;
	int hits, hits2;
	size_t bad;

	if (th_daemon_init(&dr, args) < 0)
		th_fatal("cannot make a temp dir");
	arm(&dr, rdir, rpath, "r", "4");
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
	return th_finish();
}
