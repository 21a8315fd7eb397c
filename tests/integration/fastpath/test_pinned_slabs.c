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
#include "slab_attack.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Child, as nobody: fill the arena with A's blocks, then one single-block
 * lookup, kept, per slab (by offset: slab i is [i, i + 1) x SLAB_BYTES).
 * Sends the slabs tried and the pins held, keeps them until told. */
static int attacker(void *arg, int fd)
{
	kvs_layout la = th_layout("pins-a", A_TOKENS);
	static kvs_hash h[CHAINS][CHAIN];
	kvs_lease held[MAX_SLABS];
	uint32_t tried = 0, n = 0;
	slab_pick pick[MAX_SLABS];
	kvs_client *a = NULL;
	uint64_t go;

	(void)arg;
	if (th_become(NOBODY) < 0 || kvs_connect(sock, &la, &a) < 0)
		return 3;
	slab_fill(a, &la, h);
	slab_one_each(a, h, pick);
	for (uint32_t s = 0; s < MAX_SLABS; s++) {
		kvs_lease one = 0;
		kvs_block b1;

		if (pick[s].chain < 0)
			continue;
		tried++;
		if (kvs_lookup(a, &h[pick[s].chain][pick[s].idx], 1, &one, &b1) == 1)
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
	rc = slab_reserve_b(&d, "pins-b");
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
	rc = slab_reserve_b(&d, "pins-b");
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
	th_spawn(&other, slab_other_worker, "pins-b");
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
