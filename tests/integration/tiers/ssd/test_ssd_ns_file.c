/*
 * test_ssd_ns_file - a namespace whose entry in the SSD tier's namespaces
 * file could not be written (a full disk at that moment) loses no other
 * namespace's blocks, and its own blocks reach SSD once the entry is
 * written, each under its own namespace after a restart.
 *
 * The shim (fail_io.c, LD_PRELOADed into the daemon) fails the second
 * write() to DIR/namespaces with ENOSPC, once. Three namespaces (a, b, c,
 * in that order) publish chains with --ssd-write-through (every committed
 * block is written to SSD). The entry of a is written, b's write fails,
 * c's is written: b's blocks stay in RAM (tier_ssd.ns_unfiled) until its
 * entry is written again (at a block of b at least 1 s later), then reach
 * SSD like the others. After a restart every block written to SSD loads
 * (tier_ssd.restart_blocks equals the blocks written), and each chain hits
 * whole, with its bytes, under its own namespace (b's from the first one
 * published after its entry was written).
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
#define CHAINS 3    /* per namespace before the restart's checks */
#define MAX_B 120   /* chains of b, one every 100 ms until its entry is in */
#define NNS 3

static th_daemon d;
static kvs_layout L[NNS];
static kvs_hash H[NNS][MAX_B + CHAINS][LEN];
static int nch[NNS];
static char dir[160], path_kv[200], preload[600], asan[600];

static bool publish(kvs_client *c, int ns)
{
	int i = nch[ns]++;

	th_chain(&L[ns], 500u * (uint64_t)ns + (uint64_t)i, LEN, 0, 0, H[ns][i]);
	if (!CHECK_RC(th_publish(c, H[ns][i], LEN, NULL), LEN))
		return false;
	return CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
}

/* Chains of b, one every 100 ms, until one reaches SSD whole (its entry
 * is in; b's blocks evicted from RAM are written then too). */
static int until_filed(kvs_client *b)
{
	int64_t deadline = th_now_ms() + 10000, next = 0, w;
	int before = nch[1];

	while (nch[1] < MAX_B && th_now_ms() < deadline) {
		if (th_now_ms() < next) {
			th_poll_pause();
			continue;
		}
		next = th_now_ms() + 100;
		w = th_stat_get(&d, "tier_ssd.ns_unfiled");
		if (!publish(b, 1))
			break;
		if (th_stat_get(&d, "tier_ssd.ns_unfiled") == w)
			return nch[1] - 1; /* this chain is on SSD */
	}
	CHECK(!"b's entry was never written");
	return before;
}

/* The daemon with the shim armed to fail the second write() to
 * DIR/namespaces with ENOSPC, once. */
static void start_with_shim(const char *const *args)
{
	const char *a = getenv("ASAN_OPTIONS");

	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", KVS_FAIL_IO_SO);
	snprintf(asan, sizeof(asan), "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
		 a && *a ? a : "", a && *a ? ":" : "");
	L[0] = th_layout("nsfile-a", 64);
	L[1] = th_layout("nsfile-b", 64);
	L[2] = th_layout("nsfile-c", 64);
	if (th_daemon_init(&d, args) < 0)
		th_fatal("cannot make a temp dir");
	snprintf(dir, sizeof(dir), "%s/ssd", d.dir);
	if (mkdir(dir, 0700) < 0)
		th_fatal("mkdir %s", dir);
	snprintf(path_kv, sizeof(path_kv), "FAIL_IO_PATH=%s/namespaces", dir);
	th_daemon_setenv(&d, preload);
	th_daemon_setenv(&d, asan);
	th_daemon_setenv(&d, path_kv);
	th_daemon_setenv(&d, "FAIL_IO_OPS=w");
	th_daemon_setenv(&d, "FAIL_IO_AFTER=1");
	th_daemon_setenv(&d, "FAIL_IO_COUNT=1");
	th_daemon_setenv(&d, "FAIL_IO_ERRNO=28"); /* ENOSPC */
	if (th_daemon_start(&d) < 0)
		th_fatal("daemon did not start with the shim");
}

/* The restart: RAM is gone, SSD is all that is left. Every block written
 * loads, and each namespace's chains hit whole under it (b's from
 * @first_b on). */
static void restart_and_verify(int64_t writes, int first_b)
{
	kvs_client *c[NNS];
	int64_t loaded;
	int hits, want;
	size_t bad;

	if (!CHECK_RC(th_daemon_restart(&d), 0))
		return;
	CHECK(th_wait_stat(&d, "tier_ssd.index_loading", 0, TH_WAIT_MS));
	loaded = th_stat_get(&d, "tier_ssd.restart_blocks");
	th_note("after the restart: %" PRId64 " of %" PRId64 " blocks loaded",
		loaded, writes);
	CHECK_EQ(loaded, writes);
	/* c first: its id must not have become b's. */
	for (int ns = NNS - 1; ns >= 0; ns--) {
		int from = ns == 1 ? first_b : 0;

		c[ns] = th_connect(&d, &L[ns]);
		want = (nch[ns] - from) * LEN;
		hits = th_verify_chains(c[ns], &H[ns][from][0], (size_t)(nch[ns] - from),
					LEN, &bad);
		th_note("namespace %c: %d of %d blocks hit, %zu wrong", 'a' + ns,
			hits, want, bad);
		CHECK_EQ(hits, want);
		CHECK_EQ(bad, 0);
		if (ns == 1)
			th_note("b's chains before: %d blocks hit (those still in "
				"RAM when its entry was written)",
				th_verify_chains(c[ns], &H[1][0][0], (size_t)first_b,
						 LEN, &bad));
		CHECK_EQ(bad, 0);
	}
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 0);
	for (int ns = 0; ns < NNS; ns++)
		kvs_close(c[ns]);
}

int main(void)
{
	static const char *args[] = { "--host-size", "4M", "--page-size", "64K",
				      "--ssd-dir", dir, "--ssd-segment", "1M",
				      "--ssd-size", "16M", "--ssd-write-through",
				      NULL };
	kvs_client *c[NNS];
	int64_t writes, unfiled;
	int first_b;

	th_init("test_ssd_ns_file");
	if (access(KVS_FAIL_IO_SO, R_OK) != 0)
		th_skip("the shim %s is not built", KVS_FAIL_IO_SO);
	start_with_shim(args);
	if (!CHECK(th_log_contains(&d, "fail_io: armed")))
		return th_finish();

	for (int ns = 0; ns < NNS; ns++) {
		c[ns] = th_connect(&d, &L[ns]);
		for (int i = 0; i < CHAINS; i++)
			publish(c[ns], ns);
	}
	CHECK(th_log_contains(&d, "fail_io: first failure: write"));
	CHECK_EQ(th_stat_get(&d, "tier_ssd.ns_file_errors"), 1);
	/* All of b's blocks unless its second try came within these chains. */
	unfiled = th_stat_get(&d, "tier_ssd.ns_unfiled");
	CHECK_GE(unfiled, 1);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.writes"), 3 * CHAINS * LEN - unfiled);
	first_b = until_filed(c[1]);
	for (int i = 0; i < CHAINS; i++)
		publish(c[2], 2);
	writes = th_stat_get(&d, "tier_ssd.writes");
	th_note("b's entry written at its chain %d; %" PRId64 " blocks on SSD, "
		"%" PRId64 " kept off it", first_b, writes,
		th_stat_get(&d, "tier_ssd.ns_unfiled"));
	for (int ns = 0; ns < NNS; ns++)
		kvs_close(c[ns]);

	restart_and_verify(writes, first_b);
	return th_finish();
}
