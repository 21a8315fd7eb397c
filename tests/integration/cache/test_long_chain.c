/*
 * test_long_chain - a prompt longer than the host tier goes through it to the
 * SSD tier behind it when the writer publishes it window by window (16 KiB
 * blocks; a 4 MiB host tier: 256 blocks; a chain of 1024 blocks, 16 MiB).
 *  one reserve: asking for the whole chain at once gets NEW for what fits and
 *            FULL for the rest (counted in blocks.reserve_full), as the
 *            uncommitted slots cannot move; aborted.
 *  windows:  reserve h[0..end) (always the chain from block 0), write the
 *            window's NEW blocks, commit; every window is NEW in full, the
 *            blocks before it EXISTS: the end of the chain so far moves down
 *            to SSD to make room for the next window.
 *  read:     a fresh client looks the chain up window by window (a hash
 *            names its prefix) and every byte of every block is right; the
 *            blocks came back from SSD (promotions), none corrupt.
 *  kvsbench: `kvsbench share` of a 1024-block prefix with a window larger
 *            than the host tier completes: the writer commits what fits and
 *            goes on, FULL is a figure, nothing fails, the reader verifies
 *            every byte (window given so its pins fit). And 4 RAG workers at
 *            once through the same small tier in windows of 4 blocks: blocks
 *            of an earlier window evicted meanwhile answer NEW again and
 *            are written again, so no hit is ever a block committed unwritten
 *            (corrupt_blocks 0), and nothing fails.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 1024      /* blocks in the chain: 16 MiB */
#define WINDOW 64   /* blocks per reserve: 1 MiB */
#define HOST_BLOCKS 256

static th_daemon d;
static char ssd_dir[160];
static kvs_hash H[N];
static kvs_block B[N];

static void one_reserve(kvs_client *c)
{
	kvs_lease lease;
	int fresh = kvs_reserve(c, H, N, &lease, B), full = 0;

	CHECK_GT(fresh, 0);
	CHECK_LE(fresh, HOST_BLOCKS);
	for (int i = 0; i < N; i++)
		full += B[i].status == KVS_BLOCK_FULL;
	CHECK_EQ(full, N - fresh);
	CHECK_EQ(B[fresh].status, KVS_BLOCK_FULL);
	CHECK_GE(th_stat_get(&d, "blocks.reserve_full"), N - fresh);
	CHECK_RC(kvs_abort(c, lease), fresh);
}

static void write_windows(kvs_client *c)
{
	uint64_t bb = kvs_block_bytes(c);
	int bad_status = 0, no_ptr = 0;

	for (int k = 0; k < N; k += WINDOW) {
		int end = k + WINDOW;
		kvs_lease lease;
		int fresh = kvs_reserve(c, H, (size_t)end, &lease, B);

		if (!CHECK_EQ(fresh, WINDOW)) {
			th_note("window at block %d: %d NEW (%s)", k, fresh,
				fresh < 0 ? kvs_strerror(fresh) : "short");
			if (fresh > 0)
				kvs_abort(c, lease);
			return;
		}
		for (int i = 0; i < end; i++) {
			uint8_t *p;

			if (B[i].status != (i < k ? KVS_BLOCK_EXISTS : KVS_BLOCK_NEW)) {
				bad_status++;
				continue;
			}
			if (i < k)
				continue;
			p = kvs_block_ptr(c, &B[i]);
			if (!p) {
				no_ptr++;
				continue;
			}
			th_pattern_fill(p, bb, H[i], 0);
		}
		CHECK_RC(kvs_commit(c, lease), WINDOW);
	}
	CHECK_EQ(bad_status, 0);
	CHECK_EQ(no_ptr, 0);
}

static void read_windows(kvs_client *c)
{
	size_t bad = 0, hits = 0;

	for (int k = 0; k < N; k += WINDOW) {
		size_t b = 0;
		int rc = th_verify(c, H + k, WINDOW, &b);

		if (!CHECK_EQ(rc, WINDOW)) {
			th_note("read window at block %d: %d hits", k, rc);
			break;
		}
		hits += (size_t)rc;
		bad += b;
	}
	CHECK_EQ(hits, N);
	CHECK_EQ(bad, 0);
}

/* Runs kvsbench share; its last line (JSON) into @out. */
static int bench(const char *args, char *out, size_t cap)
{
	const char *bin = getenv("KVSBENCH");
	char cmd[1024], line[4096];
	FILE *f;
	int st;

	out[0] = '\0';
	if (!bin || !*bin)
		return -1;
	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' share %s 2>&1", bin,
		 d.socket, args);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		fputs(line, stderr);
		if (line[0] == '{')
			snprintf(out, cap, "%s", line);
	}
	st = pclose(f);
	return st;
}

/* The value of "name": in a flat JSON line, or -1. */
static long long json_num(const char *j, const char *name)
{
	char key[64];
	const char *p;

	snprintf(key, sizeof(key), "\"%s\":", name);
	p = strstr(j, key);
	return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

int main(void)
{
	static const char *args[] = { "--host-size", "4M", "--ssd-dir", ssd_dir,
				      "--ssd-segment", "4M", "--ssd-size", "48M",
				      "--gpu", "off", NULL };
	kvs_layout l = th_layout("long-chain", 16);
	kvs_client *w, *r;
	char json[4096];

	th_init("test_long_chain");
	th_daemon_up_ssd(&d, args, ssd_dir, sizeof(ssd_dir));
	CHECK_EQ(kvs_layout_block_bytes(&l), 16384);
	th_chain(&l, 0x6c6f6e67, N, 0, 0, H);

	w = th_connect(&d, &l);
	one_reserve(w);
	write_windows(w);
	CHECK_GE(th_stat_get(&d, "tier_ssd.demotions"), N - HOST_BLOCKS);
	kvs_close(w);

	r = th_connect(&d, &l);
	read_windows(r);
	kvs_close(r);
	CHECK_GE(th_stat_get(&d, "tier_ssd.promotions"), N - HOST_BLOCKS);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 0);

	/* The benchmark: a prefix of 1024 blocks of the same size, written
	 * with windows of 512 blocks (8 MiB, twice the host tier) by worker
	 * 1, read by worker 2 in windows of 128 (its pins must fit). */
	if (getenv("KVSBENCH")) {
		int st = bench("--workers 1 --prefix-tokens 16384 --suffix-tokens 0 "
			       "--layers 2 --kv-heads 2 --head-dim 64 --salt w "
			       "--window 512 --json-only", json, sizeof(json));

		CHECK_EQ(st, 0);
		CHECK_EQ(json_num(json, "new_blocks"), N);
		CHECK_EQ(json_num(json, "failed_workers"), 0);
		st = bench("--workers 1 --prefix-tokens 16384 --suffix-tokens 0 "
			   "--layers 2 --kv-heads 2 --head-dim 64 --salt w "
			   "--window 128 --json-only", json, sizeof(json));
		CHECK_EQ(st, 0);
		CHECK_EQ(json_num(json, "hit_blocks"), N);
		CHECK_EQ(json_num(json, "verified_bytes"), (long long)N * 16384);
		CHECK_EQ(json_num(json, "corrupt_blocks"), 0);
		CHECK_EQ(json_num(json, "failed_workers"), 0);
		st = bench("--rag --workers 4 --requests 24 --docs 8 --layers 1 --window 4 "
			   "--salt rag --json-only", json, sizeof(json));
		CHECK_EQ(st, 0);
		CHECK_GT(json_num(json, "hit_blocks"), 0);
		CHECK_EQ(json_num(json, "corrupt_blocks"), 0);
		CHECK_EQ(json_num(json, "failed_workers"), 0);
	} else {
		th_note("KVSBENCH not set: the kvsbench part is not run");
	}
	return th_finish();
}
