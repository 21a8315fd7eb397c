/*
 * test_reserve_after - publishing a chain that goes on from a block another
 * client sent (kvs_reserve_after: SGLang hands its pages in batches, each
 * with the keys before it), the opaque-key hashes (kvs_hash_key) and the
 * batched region copies (kvs_block_read_regions / write_regions).
 *  linked:   client A publishes h[0..4); client B, which never sent them,
 *            reserves [h3, h4..h8) after h3: h3 answers EXISTS, the rest
 *            NEW; B writes each block from two scattered regions and
 *            commits. A third client looks up h[0..8) from block 0: 8 hits,
 *            every byte right (read back through read_regions); h3 now
 *            has a child, so it is not a leaf (kvs_inspect).
 *  noparent: after a parent that was never published, or one that is being
 *            written (reserved, not committed), nothing is reserved: every
 *            entry NOPARENT, lease 0, the count 0; blocks.reserve_noparent
 *            counts the blocks refused; the child is not cached.
 *  args:     n 0 is -EINVAL; region copies check everything first: regions
 *            over or under the block's size (a 16-byte target for a whole
 *            block), a write to a block that is not NEW, a NULL region:
 *            -EINVAL and not a byte copied.
 *  ssd:      a parent that went down to the SSD tier is a parent: a daemon
 *            with a 4 MiB host tier (256 blocks) publishes a chain of 512 in
 *            windows, so its first blocks are on SSD; a chain after block 0
 *            links to it (EXISTS, tier SSD), and a lookup from block 0 reads
 *            the parent back from SSD and the new blocks, every byte right.
 *  keys:     kvs_hash_key is a function of the seed and the key only: the
 *            same in two processes' terms (computed twice), another for
 *            another layout's seed or another key.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvshare_admin.h"

#define N 8
#define SPLIT 3 /* the first region of each block: bytes [0, SPLIT * 1024) */

static th_daemon d;
static kvs_hash H[N];

/* Block i's bytes: a pattern of its hash, as th_pattern_fill() makes. */
static uint8_t *pattern(uint64_t bb, int i)
{
	uint8_t *p = malloc(bb);

	if (!p)
		th_fatal("out of memory");
	th_pattern_fill(p, bb, H[i], 0);
	return p;
}

static void linked(const kvs_layout *l)
{
	kvs_client *a = th_connect(&d, l), *b = th_connect(&d, l), *r;
	uint64_t bb = kvs_block_bytes(a);
	kvs_block blk[N + 1], hit[N];
	void *src[2 * (N - 4)], *dst[2 * N];
	uint64_t len[2 * N];
	uint8_t *want[N], *got[N];
	kvs_lease lease;
	int fresh, bad = 0;
	kvs_block_info info;

	CHECK_RC(th_publish(a, H, 4, NULL), 4);
	for (int i = 0; i < N; i++) {
		want[i] = pattern(bb, i);
		got[i] = calloc(1, bb);
		len[2 * i] = SPLIT * 1024;
		len[2 * i + 1] = bb - SPLIT * 1024;
	}
	/* B has sent nothing: the chain goes on from h3, A's. */
	fresh = kvs_reserve_after(b, H + 3, N - 3, &lease, blk);
	CHECK_RC(fresh, N - 4);
	CHECK_EQ(blk[0].status, KVS_BLOCK_EXISTS);
	for (int i = 1; i < N - 3; i++)
		bad += blk[i].status != KVS_BLOCK_NEW;
	CHECK_EQ(bad, 0);
	for (int i = 0; i < N - 4; i++) {
		src[2 * i] = want[4 + i];
		src[2 * i + 1] = want[4 + i] + SPLIT * 1024;
	}
	CHECK_RC(kvs_block_write_regions(b, blk + 1, N - 4, 2,
					 (const void *const *)src, len), 0);
	CHECK_RC(kvs_commit(b, lease), N - 4);

	r = th_connect(&d, l);
	CHECK_RC(kvs_lookup(r, H, N, &lease, hit), N);
	for (int i = 0; i < N; i++) {
		dst[2 * i] = got[i];
		dst[2 * i + 1] = got[i] + SPLIT * 1024;
	}
	CHECK_RC(kvs_block_read_regions(r, hit, N, 2, dst, len), 0);
	bad = 0;
	for (int i = 0; i < N; i++)
		bad += memcmp(got[i], want[i], bb) != 0;
	CHECK_EQ(bad, 0);
	CHECK_RC(kvs_release(r, lease), 0);

	/* h3 is h4's parent now: not a leaf, and h4 is linked to it. */
	if (CHECK_RC(kvs_inspect(r, kvs_namespace_id(r), H[3], &info), 0))
		CHECK_EQ(info.children, 1);
	if (CHECK_RC(kvs_inspect(r, kvs_namespace_id(r), H[4], &info), 0)) {
		CHECK(info.has_parent);
		CHECK(info.parent.lo == H[3].lo && info.parent.hi == H[3].hi);
		CHECK_EQ(info.depth, 5);
	}
	for (int i = 0; i < N; i++) {
		free(want[i]);
		free(got[i]);
	}
	kvs_close(r);
	kvs_close(b);
	kvs_close(a);
}

static void noparent(const kvs_layout *l)
{
	kvs_client *a = th_connect(&d, l), *b = th_connect(&d, l);
	kvs_hash x[4], busy[3];
	kvs_block blk[4];
	kvs_lease lease = 7, wl, rl;
	int64_t before = th_stat_get(&d, "blocks.reserve_noparent");
	int bad = 0;

	th_chain(l, 0x6e6f7061, 4, 0, 0, x);
	CHECK_RC(kvs_reserve_after(b, x, 4, &lease, blk), 0);
	CHECK_EQ(lease, 0);
	for (int i = 0; i < 4; i++)
		bad += blk[i].status != KVS_BLOCK_NOPARENT;
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&d, "blocks.reserve_noparent") - before, 3);
	CHECK_RC(kvs_lookup(b, x + 1, 3, &rl, blk), 0);

	/* A parent being written is not there yet either. */
	th_chain(l, 0x62757379, 3, 0, 0, busy);
	CHECK_RC(kvs_reserve(a, busy, 1, &wl, blk), 1);
	CHECK_RC(kvs_reserve_after(b, busy, 3, &lease, blk), 0);
	CHECK_EQ(blk[0].status, KVS_BLOCK_NOPARENT);
	CHECK_EQ(blk[2].status, KVS_BLOCK_NOPARENT);
	CHECK_RC(kvs_commit(a, wl), 1);
	/* Committed, it is a parent. */
	CHECK_RC(kvs_reserve_after(b, busy, 3, &lease, blk), 2);
	CHECK_RC(kvs_abort(b, lease), 2);
	kvs_close(b);
	kvs_close(a);
}

static void args(const kvs_layout *l)
{
	kvs_client *c = th_connect(&d, l);
	uint64_t bb = kvs_block_bytes(c);
	kvs_hash y[2];
	kvs_block blk[2], hit[2];
	kvs_lease lease = 9, rl;
	uint8_t *buf = calloc(1, 2 * bb);
	void *ptr[2] = { buf, buf + bb };
	uint64_t len[2] = { bb, 1 };

	CHECK_RC(kvs_reserve_after(c, y, 0, &lease, blk), -EINVAL);
	CHECK_EQ(lease, 0);
	th_chain(l, 0x61726773, 2, 0, 0, y);
	CHECK_RC(th_publish(c, y, 1, NULL), 1);
	CHECK_RC(kvs_reserve_after(c, y, 2, &lease, blk), 1);
	memset(buf, 0x5a, 2 * bb);
	/* bb + 1 bytes into one block: too many, nothing written. */
	CHECK_RC(kvs_block_write_regions(c, blk + 1, 1, 2,
					 (const void *const *)ptr, len), -EINVAL);
	CHECK(memcmp(kvs_block_ptr(c, &blk[1]), buf, bb) != 0);
	/* EXISTS is not ours to write. */
	CHECK_RC(kvs_block_write_regions(c, blk, 1, 1,
					 (const void *const *)ptr, len), -EINVAL);
	len[1] = 0;
	ptr[0] = NULL;
	CHECK_RC(kvs_block_write_regions(c, blk + 1, 1, 2,
					 (const void *const *)ptr, len), -EINVAL);
	CHECK_RC(kvs_block_write_regions(c, blk + 1, 1, 0,
					 (const void *const *)ptr, len), -EINVAL);
	/* A block's regions short of its size: it would be published with
	 * bytes nobody wrote. */
	ptr[0] = buf;
	len[0] = bb - 1;
	len[1] = 0;
	CHECK_RC(kvs_block_write_regions(c, blk + 1, 1, 2,
					 (const void *const *)ptr, len), -EINVAL);
	CHECK(memcmp(kvs_block_ptr(c, &blk[1]), buf, bb - 1) != 0);
	CHECK_RC(kvs_abort(c, lease), 1);
	/* A read of more than a block is refused too, and of less (a target
	 * of 16 bytes is not a block loaded): not a byte copied. */
	len[0] = bb;
	len[1] = 1;
	CHECK_RC(kvs_lookup(c, y, 1, &rl, hit), 1);
	CHECK_RC(kvs_block_read_regions(c, hit, 1, 2, ptr, len), -EINVAL);
	memset(buf, 0xa5, 2 * bb);
	len[0] = 16;
	len[1] = 0;
	CHECK_RC(kvs_block_read_regions(c, hit, 1, 2, ptr, len), -EINVAL);
	CHECK_EQ(buf[0], 0xa5);
	len[0] = bb;
	CHECK_RC(kvs_block_read_regions(c, hit, 1, 2, ptr, len), 0);
	CHECK(memcmp(buf, kvs_block_ptr(c, &hit[0]), bb) == 0);
	CHECK_RC(kvs_release(c, rl), 0);
	free(buf);
	kvs_close(c);
}

#define SSD_N 512
#define SSD_W 64

static void ssd(void)
{
	static const char *args[] = { "--host-size", "4M", "--ssd-dir", NULL,
				      "--ssd-segment", "4M", "--ssd-size", "48M",
				      "--gpu", "off", NULL };
	static kvs_hash h[SSD_N];
	static char dir[160];
	kvs_layout l = th_layout("reserve-after-ssd", 16);
	kvs_hash after[3];
	kvs_block blk[3];
	kvs_lease lease;
	th_daemon sd;
	kvs_client *c;
	size_t bad = 99;

	args[3] = dir;
	th_daemon_up_ssd(&sd, args, dir, sizeof(dir));
	th_chain(&l, 0x737364, SSD_N, 0, 0, h);
	c = th_connect(&sd, &l);
	for (int k = 0; k < SSD_N; k += SSD_W)
		if (!CHECK_RC(th_publish(c, h, (size_t)k + SSD_W, NULL), SSD_W))
			break;
	/* Block 0's demotion written (in flight, it is in no tier). */
	CHECK(th_wait_stat(&sd, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	/* A second chain from block 0: [h0, x1, x2]. */
	after[0] = h[0];
	th_chain(&l, 0x78787878, 2, 0, 0, after + 1);
	if (CHECK_RC(kvs_reserve_after(c, after, 3, &lease, blk), 2)) {
		CHECK_EQ(blk[0].status, KVS_BLOCK_EXISTS);
		CHECK_EQ(blk[0].tier, KVS_TIER_SSD);
		for (int i = 1; i < 3; i++)
			th_pattern_fill(kvs_block_ptr(c, &blk[i]), kvs_block_bytes(c),
					after[i], 0);
		CHECK_RC(kvs_commit(c, lease), 2);
	}
	CHECK_RC(th_verify(c, after, 3, &bad), 3);
	CHECK_EQ(bad, 0);
	CHECK_GE(th_stat_get(&sd, "tier_ssd.promotions"), 1);
	kvs_close(c);
	th_daemon_destroy(&sd);
}

static void keys(void)
{
	kvs_layout l1 = th_layout("keys", 16), l2 = th_layout("keys", 16);
	static const char k[] = "0123456789abcdef0123456789abcdef"
				"0123456789abcdef0123456789abcdef";
	kvs_hash s1, s2, a, b;

	l2.tp_rank = 1;
	l2.tp_size = 2;
	s1 = kvs_hash_layout_seed(&l1);
	s2 = kvs_hash_layout_seed(&l2);
	a = kvs_hash_key(s1, k, sizeof(k) - 1);
	b = kvs_hash_key(s1, k, sizeof(k) - 1);
	CHECK(a.lo == b.lo && a.hi == b.hi);
	b = kvs_hash_key(s2, k, sizeof(k) - 1);
	CHECK(a.lo != b.lo || a.hi != b.hi);
	b = kvs_hash_key(s1, k, sizeof(k) - 2);
	CHECK(a.lo != b.lo || a.hi != b.hi);
	b = kvs_hash_key(s1, NULL, 0);
	CHECK(a.lo != b.lo || a.hi != b.hi);
}

int main(void)
{
	kvs_layout l = th_layout("reserve-after", 16);

	th_init("test_reserve_after");
	th_daemon_up(&d, TH_ARGS("--host-size", "16M", "--gpu", "off"));
	th_chain(&l, 0x61667465, N, 0, 0, H);
	linked(&l);
	noparent(&l);
	args(&l);
	ssd();
	keys();
	return th_finish();
}
