/*
 * test_ssd_enospc - a full filesystem under the SSD tier, through the daemon.
 *
 * --ssd-dir is a 1 MiB tmpfs (th_tmpfs: mounted in its own temp dir,
 * unmounted at every exit of the test; skipped, exit 77, where mounting is
 * not permitted) with --ssd-size 4M in 256 KiB segments: four times the
 * filesystem.
 *  start:   with preallocated segments (the default) the daemon refuses to
 *           start (exit 1, "cannot open segments ... No space left on
 *           device") and leaves no segment file behind.
 *  enospc:  with KVS_SSD_NO_PREALLOC=1 (sparse segment files) it starts; a
 *           2 MiB host tier of 64 KiB blocks (32) is filled past its size
 *           chain by chain until a demotion write fails with ENOSPC: demotion
 *           turns off (tier_ssd.enabled 0), tier_ssd.io_errors counts it, the
 *           log says why, the daemon does not crash.
 *  after:   every chain is looked up: every hit has identical bytes (blocks
 *           that reached SSD before the filesystem filled come back from it:
 *           promotions > 0, corrupt 0); new chains are reserved, committed
 *           and hit from RAM while demotion stays off (evictions are drops:
 *           no new demotion or write); the daemon exits 0 on SIGTERM.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define LEN 4
#define MAX_CHAINS 48
#define NEW_CHAINS 8

static th_daemon d;
static kvs_layout L;
static char ssd_dir[100];
static kvs_hash H[MAX_CHAINS + NEW_CHAINS][LEN];

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
				      "--ssd-size", "4M", NULL };
	int64_t writes;
	kvs_client *c;
	int rc, n = 0;

	th_init("test_ssd_enospc");
	rc = th_tmpfs("1m", ssd_dir, sizeof(ssd_dir));
	if (rc < 0)
		th_skip("cannot mount a 1 MiB tmpfs for --ssd-dir (mount -t tmpfs "
			"needs CAP_SYS_ADMIN): %s", strerror(-rc));
	if (th_daemon_init(&d, args) < 0)
		th_fatal("cannot make a temp dir");

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
	CHECK_LT(writes, 16);          /* 1 MiB holds fewer than 16 records of 68 KiB */
	CHECK(th_log_contains(&d, "demotion turned off, serving from RAM"));
	CHECK(th_log_contains(&d, "No space left on device"));
	CHECK(!th_daemon_exited(&d, NULL));

	/* Every hit is right; what reached SSD comes back from it. */
	th_ssd_off_checks(&d, c, &L, H, n, NEW_CHAINS, 6000, "lookups");
	CHECK(!th_daemon_exited(&d, NULL));
	kvs_close(c);
	return th_finish();
}
