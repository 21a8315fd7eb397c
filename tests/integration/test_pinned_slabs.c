/*
 * test_pinned_slabs - a few pins cannot deny the host arena to the other
 * block sizes: what a worker uid's lookups pin is budgeted in slabs
 * (--max-pinned-share-per-uid).
 *
 * The attack, by a worker (nobody, a child; the daemon's uid and root are
 * operators, not budgeted): it fills a 64 MiB arena with 62 KiB blocks (on
 * 64 KiB pages a slab of them is 31 pages, 32 slots, no tail: 33 such slabs
 * and a short one of one page), then keeps one read lease on a block of
 * every slab. A slab is cut again for another size only once all of it is
 * free, so another block size's reserve evicts every unpinned block and
 * still finds no room.
 *
 *  open:    --max-pinned-share-per-uid 0 (no budget): all 34 pins held; a
 *           16 KiB block's reserve is KVS_E_FULL with tens of MiB free.
 *  budget:  the default (50%): the lookups that would pin a block in one
 *           slab more past half the arena's pages find nothing
 *           (leases.refused_slabs); the slabs held stay within half the
 *           arena (leases.pinned_slab_bytes); the 16 KiB size is reserved,
 *           and another worker uid (65533) publishes and reads back a chain
 *           of 64 of them whole, beside the leases kept.
 *
 * Root only (a worker uid beside the operators); skipped otherwise. The
 * attacker's lookups take the socket (KVS_NO_FASTPATH): this is the socket
 * leases' budget; test_fast_slabs holds the fast path's pins to theirs.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NOBODY 65534
#define OTHER 65533
#define A_TOKENS 62   /* 62 KiB blocks */
#define B_TOKENS 16   /* another block size */
#define CHAIN 64
#define CHAINS 40     /* 2,560 blocks: twice what the arena holds */
#define SLAB_BYTES (31u * 65536u)
#define MAX_SLABS 64

static const char *sock;

static int become(uid_t uid)
{
	return setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
	       setresuid(uid, uid, uid) < 0 ? -1 : 0;
}

/* Child, as nobody: fill the arena with A's blocks, then one single-block
 * lookup, kept, per slab (by offset: slab i is [i, i + 1) x SLAB_BYTES).
 * Sends the slabs tried and the pins held, keeps them until told. */
static int attacker(void *arg, int fd)
{
	kvs_layout la = th_layout("pins-a", A_TOKENS);
	static kvs_hash h[CHAINS][CHAIN];
	static kvs_block blk[CHAIN];
	kvs_lease held[MAX_SLABS];
	uint32_t tried = 0, n = 0;
	int pick[MAX_SLABS][2];
	kvs_client *a = NULL;
	uint64_t go;

	(void)arg;
	if (become(NOBODY) < 0 || kvs_connect(sock, &la, &a) < 0)
		return 3;
	for (uint32_t i = 0; i < CHAINS; i++) {
		th_chain(&la, 100 + i, CHAIN, 0, 0, h[i]);
		CHECK_GE(th_publish(a, h[i], CHAIN, NULL), 0);
	}
	/* Where the blocks are, all leases let go before any is kept. */
	for (uint32_t s = 0; s < MAX_SLABS; s++)
		pick[s][0] = -1;
	for (int i = 0; i < CHAINS; i++) {
		kvs_lease l = 0;
		int hits = kvs_lookup(a, h[i], CHAIN, &l, blk);

		CHECK_GE(hits, 0);
		if (l)
			kvs_release(a, l);
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
		tried++;
		if (kvs_lookup(a, &h[pick[s][0]][pick[s][1]], 1, &one, &b1) == 1)
			held[n++] = one;
	}
	th_send_u64(fd, tried);
	th_send_u64(fd, n);
	th_recv_u64(fd, &go, 60000);
	for (uint32_t i = 0; i < n; i++)
		kvs_release(a, held[i]);
	kvs_close(a);
	return 0;
}

/* Child, as another worker uid: a chain of 64 B blocks (16 slabs of one
 * page) published and read back; sends 0 when it worked. */
static int other_worker(void *arg, int fd)
{
	kvs_layout lb = th_layout("pins-b", B_TOKENS);
	kvs_client *c = NULL;
	int ok;

	(void)arg;
	if (become(OTHER) < 0 || kvs_connect(sock, &lb, &c) < 0)
		return 3;
	ok = th_round_trip(c, &lb, 21, 64);
	th_send_u64(fd, ok ? 0 : 1);
	kvs_close(c);
	return 0;
}

/* One block of B's size reserved (and aborted), by this process: the
 * reserve's result. */
static int reserve_b(th_daemon *d)
{
	kvs_layout lb = th_layout("pins-b", B_TOKENS);
	kvs_client *b = th_connect(d, &lb);
	kvs_lease w = 0;
	kvs_block blk;
	kvs_hash h;
	int rc;

	th_chain(&lb, 7, 1, 0, 0, &h);
	rc = kvs_reserve(b, &h, 1, &w, &blk);
	if (w)
		kvs_abort(b, w);
	kvs_close(b);
	return rc;
}

/* Start the attacker on @d; *tried, *held from it. */
static void attack(th_daemon *d, th_child *ch, uint64_t *tried, uint64_t *held)
{
	th_open_dir_to(d, NOBODY, NOBODY);
	sock = d->socket;
	*tried = *held = 0;
	th_spawn(ch, attacker, NULL);
	CHECK_RC(th_recv_u64(ch->fd, tried, 60000), 0);
	CHECK_RC(th_recv_u64(ch->fd, held, TH_WAIT_MS), 0);
}

static void attack_end(th_child *ch)
{
	th_send_u64(ch->fd, 1);
	CHECK_EQ(th_child_wait(ch, TH_WAIT_MS), 0);
}

static void open_arena(void)
{
	static th_daemon d;
	uint64_t tried, held;
	th_child ch;
	int rc;

	th_daemon_up(&d, TH_ARGS("--host-size", "64M", "--page-size", "64K",
				 "--socket-mode", "0666",
				 "--max-pinned-share-per-uid", "0"));
	attack(&d, &ch, &tried, &held);
	rc = reserve_b(&d);
	th_note("open: %llu slabs, %llu pins held (%llu KiB pinned); a %u KiB "
		"reserve: %s, %lld bytes in use of 64 MiB",
		(unsigned long long)tried, (unsigned long long)held,
		(unsigned long long)held * A_TOKENS, B_TOKENS, kvs_strerror(rc),
		(long long)th_stat_get(&d, "tier_host.bytes_used"));
	CHECK_EQ(tried, 34);
	CHECK_EQ(held, tried);
	CHECK_RC(rc, KVS_E_FULL);
	/* Free bytes by the tens of MiB, yet no slab for another size. */
	CHECK_LT(th_stat_get(&d, "tier_host.bytes_used"), 48 << 20);
	CHECK_EQ(th_stat_get(&d, "leases.refused_slabs"), 0);
	attack_end(&ch);
}

static void budget(void)
{
	static th_daemon d;
	int64_t slab_bytes, refused;
	uint64_t tried, held, res = 1;
	th_child ch, other;
	int rc;

	th_daemon_up(&d, TH_ARGS("--host-size", "64M", "--page-size", "64K",
				 "--socket-mode", "0666"));
	attack(&d, &ch, &tried, &held);
	slab_bytes = th_stat_get(&d, "leases.pinned_slab_bytes");
	refused = th_stat_get(&d, "leases.refused_slabs");
	rc = reserve_b(&d);
	th_note("budget: %llu slabs asked, %llu pins held, slabs held %lld KiB "
		"(bound 32768), %lld refused; a %u KiB reserve: %s",
		(unsigned long long)tried, (unsigned long long)held,
		(long long)(slab_bytes >> 10), (long long)refused, B_TOKENS,
		rc >= 0 ? "served" : kvs_strerror(rc));
	CHECK_EQ(tried, 34);
	CHECK_LT(held, tried);
	CHECK_GT(held, 0);
	CHECK_LE(slab_bytes, 32 << 20);
	CHECK_EQ(refused, (int64_t)(tried - held));
	CHECK_RC(rc, 1);
	th_spawn(&other, other_worker, NULL);
	CHECK_RC(th_recv_u64(other.fd, &res, TH_WAIT_MS), 0);
	th_note("budget: uid %u's 64-block chain of the other size: %s", OTHER,
		res == 0 ? "published and read back whole" : "failed");
	CHECK_EQ(res, 0);
	CHECK_EQ(th_child_wait(&other, TH_WAIT_MS), 0);
	/* The pins kept are the attacker's still, and end with its leases. */
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), (int64_t)held);
	attack_end(&ch);
	CHECK(th_wait_stat(&d, "leases.pinned_slab_bytes", 0, TH_WAIT_MS));
	CHECK(th_wait_stat(&d, "leases.pinned_blocks", 0, TH_WAIT_MS));
}

int main(void)
{
	th_init("test_pinned_slabs");
	if (geteuid() != 0) {
		th_skip_part("not root: the attacker must be a worker uid (the "
			     "daemon's uid and root are operators, not budgeted)");
		return th_finish();
	}
	setenv("KVS_NO_FASTPATH", "1", 1);
	open_arena();
	budget();
	return th_finish();
}
