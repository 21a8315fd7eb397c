/*
 * test_fast_slabs - the fast path's pins are budgeted per worker uid, as
 * its socket leases are (docs/reliability.md, "Hostile clients";
 * docs/architecture.md, "What a pin area may hold").
 *
 *  slabs:  a worker (nobody, a child) fills a 64 MiB arena with 62 KiB
 *          blocks (on 64 KiB pages a slab of them is 31 pages: 33 such
 *          slabs and a short one), then writes one pin per slab straight
 *          into its pin area, with the slab words its index names: 34
 *          pins, no system call. Its area was granted an eighth of its
 *          uid's share (64 of 512 pages): the pins past it protect
 *          nothing (fast.pins_unbudgeted), so a 16 KiB reserve by root is
 *          served and another worker uid (65533, on the fast path) publishes
 *          and reads back a chain of 64 16 KiB blocks whole. Without the
 *          budget every pin held its slab and the reserve was KVS_E_FULL.
 *  uids:   a worker uid opens 17 fast connections (16,384 pins each): 4
 *          get a pin area (KVS_FAST_UID_PINS, 65,536 pins), the others take
 *          the socket, and another worker uid still gets its own. With the
 *          bound per domain only (2^18), 16 got one and the other uid none.
 *
 * Root only (worker uids beside the operators); skipped otherwise.
 */
#include "slab_attack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvs_fast.h"

#define HOGS 17

/* This process's mapping named @name (the last one: the newest client's). */
static uint8_t *mapping(const char *name)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	uint8_t *at = NULL;

	if (!f)
		return NULL;
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;

		if (strstr(line, name) && sscanf(line, "%lx-%lx", &a, &b) == 2)
			at = (uint8_t *)a;
	}
	fclose(f);
	return at;
}

/* The slab word the index gives the block at (@off, @gen), or 0. */
static uint64_t word_of(const kvs_fast_hdr *ih, uint64_t off, uint32_t gen)
{
	const kvs_fast_entry *e = (const void *)((const uint8_t *)ih +
						 KVS_FAST_HDR_SIZE);

	for (uint32_t i = 0; i < ih->entries; i++)
		if (e[i].state == KVS_FAST_READY && e[i].offset == off &&
		    e[i].gen == gen)
			return kvs_fast_slab_word(e[i].slab, e[i].slab_pages);
	return 0;
}

/* Child, as nobody: fill the arena with A's blocks, then one pin per slab
 * written straight into its pin area (words as the index says). Sends the
 * pins written, keeps them until told. */
static int attacker(void *arg, int fd)
{
	kvs_layout la = th_layout("fslab-a", A_TOKENS);
	static kvs_hash h[CHAINS][CHAIN];
	slab_pick pick[MAX_SLABS];
	kvs_fast_pins_hdr *ph;
	const kvs_fast_hdr *ih;
	uint64_t *pins, *slabs, go;
	kvs_client *a = NULL;
	uint32_t n = 0;

	(void)arg;
	if (th_become(NOBODY) < 0 || kvs_connect(sock, &la, &a) < 0)
		return 3;
	slab_fill(a, &la, h);
	slab_one_each(a, h, pick);
	ph = (kvs_fast_pins_hdr *)mapping("kvshare-pins");
	ih = (const kvs_fast_hdr *)mapping("kvshare-fastidx");
	if (!ph || !ih)
		return 4;
	pins = (uint64_t *)((uint8_t *)ph + KVS_FAST_PINS_OFF);
	slabs = pins + ph->cap;
	for (uint32_t s = 0; s < MAX_SLABS; s++) {
		if (pick[s].chain < 0)
			continue;
		slabs[n] = word_of(ih, pick[s].b.offset, pick[s].b.gen);
		pins[n++] = kvs_fast_pin_key(pick[s].b.offset, pick[s].b.gen);
	}
	__atomic_store_n(&ph->used, n, __ATOMIC_SEQ_CST);
	th_send_u64(fd, n);
	th_send_u64(fd, ph->slab_pages);
	th_recv_u64(fd, &go, 60000);
	memset(pins, 0, n * sizeof(*pins));
	kvs_close(a);
	return 0;
}

static void slabs(void)
{
	static th_daemon d;
	uint64_t n = 0, grant = 0, res = 1;
	int64_t over, held;
	th_child ch, other;
	int rc;

	th_daemon_up(&d, TH_ARGS("--host-size", "64M", "--page-size", "64K",
				 "--socket-mode", "0666"));
	th_open_dir_to(&d, NOBODY, NOBODY);
	sock = d.socket;
	th_spawn(&ch, attacker, NULL);
	CHECK_RC(th_recv_u64(ch.fd, &n, 60000), 0);
	CHECK_RC(th_recv_u64(ch.fd, &grant, TH_WAIT_MS), 0);
	rc = slab_reserve_b(&d, "fslab-b");
	over = th_stat_get(&d, "fast.pins_unbudgeted");
	held = th_stat_get(&d, "fast.held");
	th_note("slabs: %llu pins written, one a slab, area budget %llu pages; "
		"a %u KiB reserve: %s; %lld pins past the budget, %lld blocks "
		"held", (unsigned long long)n, (unsigned long long)grant,
		B_TOKENS, rc >= 0 ? "served" : kvs_strerror(rc),
		(long long)over, (long long)held);
	CHECK_EQ(n, 34);
	CHECK_EQ(grant, 64); /* 1024 pages x 50% / 8 */
	CHECK_RC(rc, 1);
	CHECK_GT(over, 0);
	/* What is held fits the budget: 31-page slabs, two at most and the
	 * short one. */
	CHECK_LE(held, 3);
	th_spawn(&other, slab_other_worker, "fslab-b");
	CHECK_RC(th_recv_u64(other.fd, &res, TH_WAIT_MS), 0);
	th_note("slabs: uid %u's 64-block chain of the other size: %s", OTHER,
		res == 0 ? "published and read back whole" : "failed");
	CHECK_EQ(res, 0);
	CHECK_EQ(th_child_wait(&other, TH_WAIT_MS), 0);
	th_send_u64(ch.fd, 1);
	CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
	CHECK(th_wait_stat(&d, "fast.clients", 0, TH_WAIT_MS));
}

/* Child, as nobody: HOGS fast connections, held until told. */
static int hog(void *arg, int fd)
{
	kvs_layout l = th_layout("fslab-hog", B_TOKENS);
	kvs_client *c[HOGS];
	uint64_t go;

	(void)arg;
	if (th_become(NOBODY) < 0)
		return 3;
	for (int i = 0; i < HOGS; i++)
		if (kvs_connect(sock, &l, &c[i]) < 0)
			return 4;
	th_send_u64(fd, HOGS);
	th_recv_u64(fd, &go, 60000);
	for (int i = 0; i < HOGS; i++)
		kvs_close(c[i]);
	return 0;
}

/* Child, as another worker uid: one fast connection, held until told. */
static int late(void *arg, int fd)
{
	kvs_layout l = th_layout("fslab-hog", B_TOKENS);
	kvs_client *c = NULL;
	uint64_t go;

	(void)arg;
	if (th_become(OTHER) < 0 || kvs_connect(sock, &l, &c) < 0)
		return 3;
	th_send_u64(fd, 1);
	th_recv_u64(fd, &go, 60000);
	kvs_close(c);
	return 0;
}

static void uids(void)
{
	static th_daemon d;
	int64_t hogs, refused, all;
	th_child ch, other;
	uint64_t one;

	/* No slab budget: the pin bound alone. */
	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--socket-mode", "0666",
				 "--max-clients-per-uid", "32",
				 "--max-pinned-share-per-uid", "0"));
	th_open_dir_to(&d, NOBODY, NOBODY);
	sock = d.socket;
	th_spawn(&ch, hog, NULL);
	CHECK_RC(th_recv_u64(ch.fd, &one, TH_WAIT_MS), 0);
	hogs = th_stat_get(&d, "fast.clients");
	refused = th_stat_get(&d, "fast.attach_refused");
	th_spawn(&other, late, NULL);
	CHECK_RC(th_recv_u64(other.fd, &one, TH_WAIT_MS), 0);
	all = th_stat_get(&d, "fast.clients");
	th_note("uids: %d fast connections of one uid: %lld pin areas, %lld "
		"refused; another uid's connection: %s", HOGS, (long long)hogs,
		(long long)refused, all > hogs ? "a pin area" : "refused");
	CHECK_EQ(hogs, 4);
	CHECK_EQ(refused, HOGS - 4);
	CHECK_EQ(all, hogs + 1);
	th_send_u64(other.fd, 1);
	CHECK_EQ(th_child_wait(&other, TH_WAIT_MS), 0);
	th_send_u64(ch.fd, 1);
	CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
}

int main(void)
{
	th_init("test_fast_slabs");
	if (geteuid() != 0) {
		th_skip_part("not root: the attacker must be a worker uid (the "
			     "daemon's uid and root are operators, not budgeted)");
		return th_finish();
	}
	unsetenv("KVS_NO_FASTPATH");
	slabs();
	uids();
	return th_finish();
}
