/*
 * test_ssd_inflight - a lookup of blocks whose demotion write to SSD is
 * still in flight: they are promoted from what the write reads (a staging
 * copy, or the block's own slot, held until the write completes), not read
 * from SSD, and every byte must be right.
 *
 * How the window is reached without timing: the daemon reaps SSD
 * completions only in its SSD event callback, and handles every complete
 * message of one connection's input in one read callback. So a RESERVE that
 * evicts blocks (their demotion writes submitted) and a LOOKUP of those
 * blocks, sent in one write on one raw connection, are handled before any
 * of those writes can complete, with io_uring or the synchronous fallback
 * alike. (A slowed write through the fault shim would need the same
 * ordering and adds nothing.)
 *
 * staged: host tier of 8 blocks of 64 KiB, leaf-lru eviction. Demotion
 *  writes may hold 1/16 of the host arena only where that is at least 8
 *  blocks: here every demotion goes through a staging copy.
 *  - chains Y then Z (4 blocks each) fill it; nothing is demoted;
 *  - one write: RESERVE X (4 new blocks: evicts Y, writes in flight) +
 *    LOOKUP Y: all 4 hit, in the host tier; 4 promotions, no SSD read, and
 *    Z demoted to make room (8 demotions, 8 staged writes);
 *  - Y read back through a library client: every byte of every block;
 *  - with the raw connection gone (X aborted) and the writes done, Z comes
 *    back from SSD with every byte right, Y still right, nothing corrupt.
 * direct: host tier of 128 blocks: demotion writes may hold 8 slots (512
 *  KiB). Y, Z and 30 filler chains F fill it. RESERVE X evicts Y and Z,
 *  written straight from their slots (8 direct writes: the slots stay
 *  allocated), then 4 F blocks, staged (the held share is used up), for
 *  X's slots; LOOKUP Y copies Y from the held slots (checked against the
 *  checksum being written) into 4 new ones, evicting 4 more F blocks
 *  (staged). Then as above, and every F block too.
 * wait: the same 128-block host tier, Y and 31 filler chains in it. One
 *  write: RESERVE W (120 new blocks: evicts Y and F0, direct, 8 slots held,
 *  then every other F block, staged) + LOOKUP Y. Now no slot is free and nothing can
 *  be evicted (W is being written, Y's slots are held), so the lookup's
 *  first allocation waits for Y's writes to finish with their slots
 *  (tier_ssd.held_waits); those that finished are recorded then and read
 *  back from SSD (all 4 with the synchronous store; with io_uring, a write
 *  still in flight after the wait is copied from its held slot): all 4
 *  hit, every byte right. Without the wait this lookup answered a short
 *  chain.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_raw.h"
#include "harness_ssd.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEN 4
#define WMAX 120 /* the longest reservation */

static th_daemon d;
static kvs_layout L;
static char ssd_dir[160];

/* Append one message (@opcode, @req_id, the hashes @h) to @buf at *off. */
static void put_hashes_msg(uint8_t *buf, size_t cap, size_t *off,
			   uint16_t opcode, uint64_t req_id, const kvs_hash *h,
			   uint32_t n)
{
	kvs_wire_hdr hdr = { .magic = KVS_WIRE_MAGIC, .version = KVS_WIRE_VERSION,
			     .opcode = opcode, .req_id = req_id };
	int len = kvs_wire_hashes_encode(h, n, 0, buf + *off + KVS_WIRE_HDR_SIZE,
					 cap - *off - KVS_WIRE_HDR_SIZE);

	if (len < 0)
		th_fatal("kvs_wire_hashes_encode: %d", len);
	hdr.len = (uint32_t)len;
	kvs_wire_hdr_encode(&hdr, buf + *off);
	*off += KVS_WIRE_HDR_SIZE + (size_t)len;
}

/* Receive the reply to @req_id (@opcode) and decode its blocks into @b;
 * returns the count, or -1 after a failed check. */
static int recv_blocks(int fd, uint16_t opcode, uint64_t req_id, kvs_block *b)
{
	static uint8_t payload[16384];
	kvs_wire_hdr h;
	kvs_wire_blocks wb;
	int n = th_raw_recv(fd, &h, payload, sizeof(payload), TH_WAIT_MS);

	if (!CHECK_GE(n, 0) || !CHECK_EQ(h.opcode, opcode) ||
	    !CHECK_EQ(h.req_id, req_id) || !CHECK_EQ(h.status, 0))
		return -1;
	if (!CHECK_RC(kvs_wire_blocks_decode(payload, (size_t)n, &wb), 0) ||
	    !CHECK_LE(wb.count, WMAX))
		return -1;
	for (uint32_t i = 0; i < wb.count; i++)
		b[i] = kvs_wire_block_at(wb.blocks, i);
	return (int)wb.count;
}

/* The window: on a raw connection, RESERVE @w (@nw blocks, all of them
 * NEW: their slots evict blocks, whose demotion writes start) and LOOKUP
 * @y in one write, so that the daemon handles the lookup before any of
 * those writes completes; every block of @y hits in the host tier.
 * @before is taken just before the write. Returns the connection (its
 * leases pin @w's slots and @y until it is closed). */
static int reserve_then_lookup(const kvs_hash *w, uint32_t nw, const kvs_hash *y,
			       th_stats *before)
{
	static kvs_block b[WMAX];
	uint8_t buf[4096];
	size_t off = 0;
	int fd = th_raw_connect(&d), n;

	if (fd < 0)
		th_fatal("raw connect: %d", fd);
	CHECK_RC(th_raw_hello(fd, &L, 1), 0);
	put_hashes_msg(buf, sizeof(buf), &off, KVS_OP_RESERVE, 2, w, nw);
	put_hashes_msg(buf, sizeof(buf), &off, KVS_OP_LOOKUP, 3, y, LEN);
	th_stats_take(&d, before);
	CHECK_RC(th_raw_send(fd, buf, off), 0);

	n = recv_blocks(fd, KVS_OP_RESERVE, 2, b);
	CHECK_EQ(n, nw);
	for (int i = 0; i < n; i++)
		CHECK_EQ(b[i].status, KVS_BLOCK_NEW);
	n = recv_blocks(fd, KVS_OP_LOOKUP, 3, b);
	CHECK_EQ(n, LEN);
	for (int i = 0; i < n; i++) {
		CHECK_EQ(b[i].status, KVS_BLOCK_HIT);
		CHECK_EQ(b[i].tier, KVS_TIER_HOST);
	}
	return fd;
}

/* One scenario: a host tier of @host_blocks blocks, of which demotion
 * writes may hold @direct. */
static void run(const char *host_size, int host_blocks, int direct)
{
	const char *args[] = { "--host-size", host_size, "--page-size", "64K",
			       "--eviction-policy", "leaf-lru",
			       "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
			       "--ssd-size", "16M", NULL };
	int nfill = (host_blocks - 2 * LEN) / LEN;
	kvs_hash X[LEN], Y[LEN], Z[LEN], (*F)[LEN] = calloc((size_t)nfill + 1, sizeof(*F));
	size_t bad;
	th_stats before, after;
	kvs_client *c;
	int fd;

	if (!F)
		th_fatal("out of memory");
	th_note("%s: host tier of %d blocks, %d may be held by writes",
		direct ? "direct" : "staged", host_blocks, direct);
	th_daemon_up_ssd(&d, args, ssd_dir, sizeof(ssd_dir));
	L = th_layout("inflight-model", 64);
	th_chain(&L, 1, LEN, 0, 0, Y);
	th_chain(&L, 2, LEN, 0, 0, Z);
	th_chain(&L, 3, LEN, 0, 0, X);
	for (int i = 0; i < nfill; i++)
		th_chain(&L, 100 + (uint64_t)i, LEN, 0, 0, F[i]);
	c = th_connect(&d, &L);
	CHECK_RC(th_publish(c, Y, LEN, NULL), LEN);
	CHECK_RC(th_publish(c, Z, LEN, NULL), LEN);
	for (int i = 0; i < nfill; i++)
		CHECK_RC(th_publish(c, F[i], LEN, NULL), LEN);
	if (th_stat_get(&d, "tier_ssd.demotions") != 0)
		th_fatal("the host tier does not hold %d blocks of 64 KiB: the "
			 "setup is wrong, nothing was tested", host_blocks);

	fd = reserve_then_lookup(X, LEN, Y, &before);
	th_stats_take(&d, &after);
	/* Y from what its writes read: promoted, none read from SSD. */
	CHECK_EQ(th_stats_delta(&before, &after, "tier_ssd.promotions"), LEN);
	CHECK_EQ(th_stats_delta(&before, &after, "tier_ssd.reads"), 0);
	/* X: @direct evictions that free nothing (held), then LEN staged for
	 * its slots; Y's lookup: LEN more, staged (the held share is full). */
	CHECK_EQ(th_stats_delta(&before, &after, "tier_ssd.demotions"), direct + 2 * LEN);
	CHECK_EQ(th_stats_delta(&before, &after, "tier_ssd.writes_direct"), direct);
	CHECK_EQ(th_stats_delta(&before, &after, "tier_ssd.writes_staged"), 2 * LEN);
	th_stats_free(&before);
	th_stats_free(&after);

	/* Every byte of the promoted blocks, while the raw lease still pins
	 * them in RAM. */
	CHECK_RC(th_verify(c, Y, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);

	/* The raw client leaves: X's reservation is aborted, Y's lease ends.
	 * The writes complete (held slots go back); Z comes back from SSD. */
	close(fd);
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS));
	CHECK_RC(th_verify(c, Z, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	CHECK_RC(th_verify(c, Y, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	for (int i = 0; i < nfill; i++) {
		CHECK_RC(th_verify(c, F[i], LEN, &bad), LEN);
		CHECK_EQ(bad, 0);
	}
	CHECK_GE(th_stat_get(&d, "tier_ssd.reads"), 1);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.io_errors"), 0);
	kvs_close(c);
	th_daemon_destroy(&d);
	free(F);
}

static void run_wait(void)
{
	const char *args[] = { "--host-size", "8M", "--page-size", "64K",
			       "--eviction-policy", "leaf-lru",
			       "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
			       "--ssd-size", "16M", NULL };
	enum { NFILL = 31, HELD = 8 };
	kvs_hash W[WMAX], Y[LEN], F[NFILL][LEN];
	size_t bad;
	th_stats before, after;
	kvs_client *c;
	int fd;

	th_note("wait: a lookup that needs the slots demotion writes hold");
	th_daemon_up_ssd(&d, args, ssd_dir, sizeof(ssd_dir));
	L = th_layout("inflight-model", 64);
	th_chain(&L, 1, LEN, 0, 0, Y);
	th_chain(&L, 4, WMAX, 0, 0, W);
	for (int i = 0; i < NFILL; i++)
		th_chain(&L, 100 + (uint64_t)i, LEN, 0, 0, F[i]);
	c = th_connect(&d, &L);
	CHECK_RC(th_publish(c, Y, LEN, NULL), LEN);
	for (int i = 0; i < NFILL; i++)
		CHECK_RC(th_publish(c, F[i], LEN, NULL), LEN);
	if (th_stat_get(&d, "tier_ssd.demotions") != 0)
		th_fatal("the host tier does not hold 128 blocks of 64 KiB: the "
			 "setup is wrong, nothing was tested");

	fd = reserve_then_lookup(W, WMAX, Y, &before);
	th_stats_take(&d, &after);
	CHECK_EQ(th_stats_delta(&before, &after, "tier_ssd.demotions"), 128);
	CHECK_EQ(th_stats_delta(&before, &after, "tier_ssd.writes_direct"), HELD);
	CHECK_EQ(th_stats_delta(&before, &after, "tier_ssd.writes_staged"), WMAX);
	CHECK_GE(th_stats_delta(&before, &after, "tier_ssd.held_waits"), 1);
	CHECK_EQ(th_stats_delta(&before, &after, "tier_ssd.promotions"), LEN);
	/* Those whose writes finished during the wait are read from SSD; any
	 * still in flight by then are copied from their held slots. */
	CHECK_GE(th_stats_delta(&before, &after, "tier_ssd.reads"), 1);
	CHECK_LE(th_stats_delta(&before, &after, "tier_ssd.reads"), LEN);
	th_stats_free(&before);
	th_stats_free(&after);
	CHECK_RC(th_verify(c, Y, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);

	close(fd);
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS));
	for (int i = 0; i < NFILL; i++) {
		CHECK_RC(th_verify(c, F[i], LEN, &bad), LEN);
		CHECK_EQ(bad, 0);
	}
	CHECK_RC(th_verify(c, Y, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.io_errors"), 0);
	kvs_close(c);
	th_daemon_destroy(&d);
}

int main(void)
{
	th_init("test_ssd_inflight");
	run("512K", 2 * LEN, 0);
	run("8M", 128, 2 * LEN);
	run_wait();
	return th_finish();
}
