/*
 * test_pinned_slabs - a few pins cannot deny the host arena to the other
 * block sizes: what a uid's lookups pin is budgeted in slabs
 * (--max-pinned-share-per-uid).
 *
 * The attack: a client fills a 64 MiB arena with 62 KiB blocks (on 64 KiB
 * pages a slab of them is 31 pages, 32 slots, no tail: 33 such slabs and a
 * short one of one page), then keeps one read lease on a block of every
 * slab. A slab is cut again for another size only once all of it is free,
 * so another block size's reserve evicts every unpinned block and still
 * finds no room.
 *
 *  open:    --max-pinned-share-per-uid 0 (no budget): all 34 pins held;
 *           a 16 KiB block's reserve is KVS_E_FULL with the 34 pinned
 *           blocks (2.16 MB) the only ones left in the arena.
 *  budget:  the default (50%): the lookups that would pin a block in one
 *           slab more past half the arena's pages find nothing
 *           (leases.refused_slabs); the slabs held stay within half the
 *           arena (leases.pinned_slab_bytes), and the 16 KiB size is served
 *           bit exact beside the leases kept: reserved, and read back by
 *           that uid within the room its budget leaves (8 blocks), and as
 *           root, by another uid (nobody, a child) whole (64 blocks).
 *
 * The attacker's lookups take the socket (KVS_NO_FASTPATH): the budget
 * counts socket leases; the fast path's pins are bounded per domain
 * (docs/reliability.md, "Bounds and what is left").
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NOBODY 65534

#define A_TOKENS 62   /* 62 KiB blocks */
#define B_TOKENS 16   /* another block size */
#define CHAIN 64
#define CHAINS 40     /* 2,560 blocks: twice what the arena holds */
#define SLAB_BYTES (31u * 65536u)
#define MAX_SLABS 64

struct attack {
	kvs_client *a, *b;
	uint32_t tried, held; /* slabs a pin was asked for, pins held */
	kvs_lease lease[MAX_SLABS];
};

/* Fill the arena with A's blocks, then one single-block lookup, kept, per
 * slab (by offset: slab i is [i, i + 1) x SLAB_BYTES). */
static void attack(th_daemon *d, struct attack *x)
{
	kvs_layout la = th_layout("pins-a", A_TOKENS);
	kvs_layout lb = th_layout("pins-b", B_TOKENS);
	static kvs_hash h[CHAINS][CHAIN];
	static kvs_block blk[CHAIN];
	int pick[MAX_SLABS][2];

	x->a = th_connect(d, &la);
	x->b = th_connect(d, &lb);
	x->tried = x->held = 0;
	for (uint32_t i = 0; i < CHAINS; i++) {
		th_chain(&la, 100 + i, CHAIN, 0, 0, h[i]);
		CHECK_GE(th_publish(x->a, h[i], CHAIN, NULL), 0);
	}
	/* Where the blocks are, all leases let go before any is kept. */
	for (uint32_t s = 0; s < MAX_SLABS; s++)
		pick[s][0] = -1;
	for (int i = 0; i < CHAINS; i++) {
		kvs_lease l = 0;
		int hits = kvs_lookup(x->a, h[i], CHAIN, &l, blk);

		CHECK_GE(hits, 0);
		if (l)
			kvs_release(x->a, l);
		for (int j = 0; j < hits; j++) {
			uint64_t s = blk[j].offset / SLAB_BYTES;

			if (s < MAX_SLABS && pick[s][0] < 0) {
				pick[s][0] = i;
				pick[s][1] = j;
			}
		}
	}
	for (uint32_t s = 0; s < MAX_SLABS; s++) {
		kvs_lease one = 0;
		kvs_block b1;

		if (pick[s][0] < 0)
			continue;
		x->tried++;
		if (kvs_lookup(x->a, &h[pick[s][0]][pick[s][1]], 1, &one, &b1) == 1)
			x->lease[x->held++] = one;
	}
}

static void attack_end(struct attack *x)
{
	for (uint32_t i = 0; i < x->held; i++)
		kvs_release(x->a, x->lease[i]);
	kvs_close(x->a);
	kvs_close(x->b);
}

/* One block of B's size reserved (and aborted): its result. */
static int reserve_b(kvs_client *b)
{
	kvs_layout lb = th_layout("pins-b", B_TOKENS);
	kvs_lease w = 0;
	kvs_block blk;
	kvs_hash h;
	int rc;

	th_chain(&lb, 7, 1, 0, 0, &h);
	rc = kvs_reserve(b, &h, 1, &w, &blk);
	if (w)
		kvs_abort(b, w);
	return rc;
}

static void open_arena(void)
{
	static th_daemon d;
	struct attack x;
	int rc;

	th_daemon_up(&d, TH_ARGS("--host-size", "64M", "--page-size", "64K",
				 "--max-pinned-share-per-uid", "0"));
	attack(&d, &x);
	rc = reserve_b(x.b);
	th_note("open: %u slabs, %u pins held (%u KiB pinned); a %u KiB "
		"reserve: %s, %lld bytes in use of 64 MiB", x.tried, x.held,
		x.held * A_TOKENS, B_TOKENS, kvs_strerror(rc),
		(long long)th_stat_get(&d, "tier_host.bytes_used"));
	CHECK_EQ(x.tried, 34);
	CHECK_EQ(x.held, x.tried);
	CHECK_RC(rc, KVS_E_FULL);
	/* Free bytes by the tens of MiB, yet no slab for another size. */
	CHECK_LT(th_stat_get(&d, "tier_host.bytes_used"), 48 << 20);
	CHECK_EQ(th_stat_get(&d, "leases.refused_slabs"), 0);
	attack_end(&x);
}

/* Child: nobody attaches B's layout and round-trips a chain of 64 blocks
 * (16 slabs of one page); sends 0 when it worked. */
static int as_nobody(void *arg, int sync_fd)
{
	kvs_layout lb = th_layout("pins-b", B_TOKENS);
	kvs_client *c = NULL;
	int ok;

	(void)arg;
	if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
	    setresuid(NOBODY, NOBODY, NOBODY) < 0)
		return 3;
	if (kvs_connect(getenv("TH_PINNED_SLABS_SOCKET"), &lb, &c) < 0)
		return 4;
	ok = th_round_trip(c, &lb, 21, 64);
	th_send_u64(sync_fd, ok ? 0 : 1);
	kvs_close(c);
	return 0;
}

/* Another uid, whose budget is its own: a whole chain of B hits. */
static void other_uid(th_daemon *d)
{
	uint64_t res = 1;
	th_child ch;

	if (geteuid() != 0) {
		th_skip_part("not root: another uid's lookups beside the attacker's pins");
		return;
	}
	setenv("TH_PINNED_SLABS_SOCKET", d->socket, 1);
	th_spawn(&ch, as_nobody, NULL);
	CHECK_RC(th_recv_u64(ch.fd, &res, TH_WAIT_MS), 0);
	th_note("budget: nobody's 64-block chain of the other size: %s",
		res == 0 ? "published and read back whole" : "failed");
	CHECK_EQ(res, 0);
	CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
}

static void budget(void)
{
	static th_daemon d;
	kvs_layout lb = th_layout("pins-b", B_TOKENS);
	struct attack x;
	int64_t slab_bytes, refused;
	int rc;

	th_daemon_up(&d, TH_ARGS("--host-size", "64M", "--page-size", "64K",
				 "--socket-mode", "0666"));
	th_open_dir_to(&d, NOBODY, NOBODY);
	attack(&d, &x);
	slab_bytes = th_stat_get(&d, "leases.pinned_slab_bytes");
	refused = th_stat_get(&d, "leases.refused_slabs");
	rc = reserve_b(x.b);
	th_note("budget: %u slabs asked, %u pins held, slabs held %lld KiB "
		"(bound 32768), %lld refused; a %u KiB reserve: %s",
		x.tried, x.held, (long long)(slab_bytes >> 10),
		(long long)refused, B_TOKENS, rc >= 0 ? "served" :
		kvs_strerror(rc));
	CHECK_EQ(x.tried, 34);
	CHECK_LT(x.held, x.tried);
	CHECK_GT(x.held, 0);
	CHECK_LE(slab_bytes, 32 << 20);
	CHECK_EQ(refused, (int64_t)(x.tried - x.held));
	CHECK_RC(rc, 1);
	/* The attacker's uid is at its budget: its own reads of another size
	 * get the slabs left (8 blocks: 2 pages), its writes are not cut. */
	CHECK(th_round_trip(x.b, &lb, 11, 8));
	other_uid(&d);
	/* The pins kept are the attacker's still, and end with their leases. */
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), x.held);
	attack_end(&x);
	CHECK(th_wait_stat(&d, "leases.pinned_slab_bytes", 0, TH_WAIT_MS));
	CHECK(th_wait_stat(&d, "leases.pinned_blocks", 0, TH_WAIT_MS));
}

int main(void)
{
	th_init("test_pinned_slabs");
	setenv("KVS_NO_FASTPATH", "1", 1);
	open_arena();
	budget();
	return th_finish();
}
