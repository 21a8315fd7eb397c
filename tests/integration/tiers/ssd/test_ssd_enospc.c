/*
 * test_ssd_enospc - a full filesystem under the SSD tier, through the daemon.
 *
 * --ssd-dir is a 2 MiB tmpfs (th_tmpfs: mounted in its own temp dir,
 * unmounted at every exit of the test; skipped, exit 77, where mounting is
 * not permitted) of which a file of the test's takes 1.25 MiB, with
 * --ssd-size 1M in 256 KiB segments: more than the 0.75 MiB left.
 *  start:   with preallocated segments (the default) the daemon refuses to
 *           start (exit 1, "cannot open segments ... No space left on
 *           device") and leaves no segment file behind.
 *  enospc:  with KVS_SSD_NO_PREALLOC=1 (sparse segment files) and
 *           --ssd-error-retry 0 (off until restart) it starts; a
 *           2 MiB host tier of 64 KiB blocks (32) is filled past its size
 *           chain by chain until a demotion write fails with ENOSPC: demotion
 *           turns off (tier_ssd.enabled 0), tier_ssd.io_errors counts it, the
 *           log says why, the daemon does not crash.
 *  after:   every chain is looked up: every hit has identical bytes (blocks
 *           that reached SSD before the filesystem filled come back from it:
 *           promotions > 0, corrupt 0); new chains are reserved, committed
 *           and hit from RAM while demotion stays off (evictions are drops:
 *           no new demotion or write); the daemon exits 0 on SIGTERM.
 *  recover: restarted with --ssd-error-retry 1, new chains fill the
 *           filesystem again: demotion off, "trying again in 1 s". The
 *           test's file is deleted (now the segments and the index fit)
 *           and a chain is published every 100 ms until demotion is back
 *           on by itself (tier_ssd.error_retries, "trying demotion again")
 *           and blocks are written to SSD again; 8 chains more (the tier
 *           stays on, writes go on); blocks come back from SSD with every
 *           byte right.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEN 4
#define MAX_CHAINS 48
#define NEW_CHAINS 8
#define RETRY_ARG 11 /* the value of --ssd-error-retry in args */
#define B_CHAINS 128
#define FILLER (1280 << 10)

static th_daemon d;
static kvs_layout L;
static char ssd_dir[100];
static kvs_hash H[MAX_CHAINS + NEW_CHAINS][LEN];
static kvs_hash B[B_CHAINS][LEN];
static char filler[200];

/* A file of @bytes in the filesystem under test (to delete later). */
static int fill_file(const char *path, size_t bytes)
{
	char *buf = calloc(1, bytes);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600), rc = -1;

	if (fd >= 0 && buf && write(fd, buf, bytes) == (ssize_t)bytes)
		rc = 0;
	if (fd >= 0)
		close(fd);
	free(buf);
	return rc;
}

/* Publish chain @i of B (seed 6500 + i); false after a failed check. */
static bool publish_b(kvs_client *c, int i)
{
	th_chain(&L, 6500 + (uint64_t)i, LEN, 0, 0, B[i]);
	if (!CHECK_RC(th_publish(c, B[i], LEN, NULL), LEN))
		return false;
	return CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
}

/* After the fault: restarted with retries, the filesystem fills again, gets
 * room, and demotion comes back on by itself. */
static void recover(void)
{
	int64_t writes, prom, deadline;
	kvs_client *c;
	size_t bad;
	int n = 0, hits;

	d.args[RETRY_ARG] = "1";
	if (!CHECK_EQ(th_daemon_restart(&d), 0))
		return;
	c = th_connect(&d, &L);
	while (n < 16 && th_stat_get(&d, "tier_ssd.enabled") == 1)
		if (!publish_b(c, n++))
			break;
	CHECK_EQ(th_stat_get(&d, "tier_ssd.enabled"), 0);
	CHECK(th_log_contains(&d, "serving from RAM; trying again in 1 s"));
	th_note("recover: full again after %d chains, %" PRId64 " blocks written",
		n, th_stat_get(&d, "tier_ssd.writes"));
	writes = th_stat_get(&d, "tier_ssd.writes");
	CHECK_EQ(unlink(filler), 0);
	/* A demotion after the wait tries again: one chain every 100 ms
	 * (each evicts older blocks) until blocks reach SSD again. */
	deadline = th_now_ms() + 10000;
	for (int64_t next = 0; n < B_CHAINS - 8 && th_now_ms() < deadline &&
	     (th_stat_get(&d, "tier_ssd.enabled") == 0 ||
	      th_stat_get(&d, "tier_ssd.writes") == writes);) {
		if (th_now_ms() < next) {
			th_poll_pause();
			continue;
		}
		next = th_now_ms() + 100;
		if (!publish_b(c, n++))
			break;
	}
	th_note("recover: %" PRId64 " tries, enabled %" PRId64 ", %" PRId64
		" blocks written since the filesystem got room, %d chains",
		th_stat_get(&d, "tier_ssd.error_retries"),
		th_stat_get(&d, "tier_ssd.enabled"),
		th_stat_get(&d, "tier_ssd.writes") - writes, n);
	CHECK_GE(th_stat_get(&d, "tier_ssd.error_retries"), 1);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.enabled"), 1);
	CHECK_GT(th_stat_get(&d, "tier_ssd.writes"), writes);
	CHECK(th_log_contains(&d, "trying demotion again"));
	/* It stays on: 8 chains more go to SSD as the next evict them. */
	writes = th_stat_get(&d, "tier_ssd.writes");
	for (int i = 0; i < 8; i++)
		publish_b(c, n++);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.enabled"), 1);
	CHECK_GE(th_stat_get(&d, "tier_ssd.writes"), writes + 8 * LEN);
	/* What went to SSD since comes back right (and nothing else is
	 * served wrong). */
	prom = th_stat_get(&d, "tier_ssd.promotions");
	hits = th_verify_chains(c, &B[0][0], (size_t)n, LEN, &bad);
	th_note("recover: %d hits of %d blocks, %zu wrong, %" PRId64
		" promoted from SSD", hits, n * LEN, bad,
		th_stat_get(&d, "tier_ssd.promotions") - prom);
	CHECK_EQ(bad, 0);
	CHECK_GT(th_stat_get(&d, "tier_ssd.promotions"), prom);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 0);
	kvs_close(c);
}

static int segment_files(void)
{
	DIR *dir = opendir(ssd_dir);
	struct dirent *e;
	int n = 0;

	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		n += strncmp(e->d_name, "seg-", 4) == 0;
	closedir(dir);
	return n;
}

int main(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "256K",
				      "--ssd-size", "1M", "--ssd-error-retry", "0",
				      NULL };
	int64_t writes;
	kvs_client *c;
	int rc, n = 0;

	th_init("test_ssd_enospc");
	rc = th_tmpfs("2m", ssd_dir, sizeof(ssd_dir));
	if (rc < 0)
		th_skip("cannot mount a 2 MiB tmpfs for --ssd-dir (mount -t tmpfs "
			"needs CAP_SYS_ADMIN): %s", strerror(-rc));
	if (th_daemon_init(&d, args) < 0)
		th_fatal("cannot make a temp dir");
	snprintf(filler, sizeof(filler), "%s/filler", ssd_dir);
	if (fill_file(filler, FILLER) < 0)
		th_fatal("cannot write %s", filler);

	/* Preallocated segments do not fit: a clear error at start (the
	 * harness prints the failed start; it is expected). */
	th_note("expected: kvshared refuses to start on a full filesystem");
	rc = th_daemon_start(&d);
	CHECK_EQ(rc, -ECHILD);
	CHECK_EQ(d.last_status, 1);
	CHECK(th_log_contains(&d, "cannot open segments"));
	CHECK(th_log_contains(&d, "No space left on device"));
	CHECK_EQ(segment_files(), 0);

	/* Sparse segments: the filesystem fills under demotion. */
	th_daemon_setenv(&d, "KVS_SSD_NO_PREALLOC=1");
	if (th_daemon_start(&d) < 0)
		th_fatal("daemon did not start with sparse segments");
	CHECK(th_log_contains(&d, "KVS_SSD_NO_PREALLOC"));
	CHECK_EQ(th_stat_get(&d, "tier_ssd.enabled"), 1);
	L = th_layout("ssd-enospc", 64);
	c = th_connect(&d, &L);
	while (n < MAX_CHAINS && th_stat_get(&d, "tier_ssd.enabled") == 1) {
		th_chain(&L, 6000 + (uint64_t)n, LEN, 0, 0, H[n]);
		if (!CHECK_RC(th_publish(c, H[n], LEN, NULL), LEN))
			break;
		n++;
		CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	}
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	writes = th_stat_get(&d, "tier_ssd.writes");
	th_note("%d chains published: %" PRId64 " blocks written to SSD, then "
		"ENOSPC; %" PRId64 " io errors, %" PRId64 " SSD-only blocks", n,
		writes, th_stat_get(&d, "tier_ssd.io_errors"),
		th_stat_get(&d, "tier_ssd.blocks_ssd_only"));
	CHECK_EQ(th_stat_get(&d, "tier_ssd.enabled"), 0);
	CHECK_GE(th_stat_get(&d, "tier_ssd.io_errors"), 1);
	CHECK_GT(writes, 0);           /* some blocks made it before it filled */
	CHECK_LT(writes, 12);          /* 0.75 MiB holds fewer than 12 records of 68 KiB */
	CHECK(th_log_contains(&d, "demotion turned off, serving from RAM"));
	CHECK(th_log_contains(&d, "No space left on device"));
	CHECK(!th_daemon_exited(&d, NULL));

	/* Every hit is right; what reached SSD comes back from it. */
	th_ssd_off_checks(&d, c, &L, H, n, NEW_CHAINS, 6000, "lookups");
	CHECK(!th_daemon_exited(&d, NULL));
	kvs_close(c);

	recover();
	CHECK(!th_daemon_exited(&d, NULL));
	return th_finish();
}
