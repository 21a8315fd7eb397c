/*
 * test_fast_hostile - the fast path against what one process can do to a
 * real daemon (docs/architecture.md, "Hits without a round trip"):
 *
 *  - fds: a fast client costs the daemon one fd (its socket), not two: the
 *    pin area's memfd is closed once sent (counted in /proc/PID/fd of the
 *    daemon before and after 15 more fast clients);
 *  - fork(): a child of a process whose client holds a fast lease shares
 *    the pin area and the socket; its calls answer KVS_E_DISCONNECTED and
 *    write nothing (the parent's pin area is byte for byte what it was),
 *    kvs_reconnect() gives it a connection of its own that works, and the
 *    parent's lease and lookups go on as before;
 *  - the domain's pin bound: connections past KVS_FAST_DOMAIN_PINS pins
 *    get no fast path (fast.attach_refused) and still get right answers
 *    over the socket;
 *  - an operator flush while a client's pin area is full of junk looks at
 *    the pins once per batch, not once per block (fast.snapshots: 16 for
 *    512 blocks in chains of 16, where a look per block is 512).
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"
#include "kvshare_admin.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvs_fast.h"

#define BT 16 /* 16 KiB blocks */

static kvs_layout L;

static int daemon_fds(pid_t pid)
{
	char path[64];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

static void test_fds(void)
{
	enum { N = 16 };
	th_daemon d;
	kvs_client *c[N];
	int before, after;


	/* No stats connection in between: each counts an fd until the
	 * daemon sees it close. A FASTATTACH's reply is sent, so its pin
	 * memfd closed, before kvs_connect() returns. */
	th_daemon_up(&d, TH_ARGS("--host-size", "8M"));
	c[0] = th_connect(&d, &L); /* the domain's index is made now */
	before = daemon_fds(d.pid);
	for (int i = 1; i < N; i++)
		c[i] = th_connect(&d, &L);
	after = daemon_fds(d.pid);
	CHECK_EQ(th_stat_get(&d, "fast.clients"), N);
	CHECK_EQ(th_stat_get(&d, "fast.indexes"), 1);
	printf("test_fast_hostile: daemon fds %d with 1 fast client, %d with %d\n",
	       before, after, N);
	CHECK(before > 0);
	/* A socket each, nothing else (two each would be 30; an fd of the
	 * daemon's own that comes or goes meanwhile is one either way). */
	CHECK(after - before >= N - 2 && after - before <= N);
	for (int i = 0; i < N; i++)
		kvs_close(c[i]);
	CHECK_EQ(th_daemon_stop(&d, SIGTERM), 0);
	th_daemon_destroy(&d);
}

/* This process's pin areas (the last one mapped is the newest client's). */
static uint8_t *pin_area(size_t *len)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	uint8_t *at = NULL;

	if (!f)
		return NULL;
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;

		if (strstr(line, "kvshare-pins") &&
		    sscanf(line, "%lx-%lx", &a, &b) == 2) {
			at = (uint8_t *)a;
			*len = b - a;
		}
	}
	fclose(f);
	return at;
}

typedef struct forked {
	kvs_client *c;
	kvs_lease parents;
	kvs_hash h[8];
} forked;

static int child(void *arg, int sync_fd)
{
	forked *x = arg;
	kvs_block b[8];
	kvs_lease l;

	(void)sync_fd;
	/* Everything the parent's client could do is refused here. */
	CHECK_RC(kvs_lookup(x->c, x->h, 8, &l, b), KVS_E_DISCONNECTED);
	CHECK_RC(kvs_release(x->c, x->parents), KVS_E_DISCONNECTED);
	CHECK_RC(kvs_reserve(x->c, x->h, 1, &l, b), KVS_E_DISCONNECTED);
	CHECK_RC(kvs_lookup(x->c, x->h, 8, &l, b), KVS_E_DISCONNECTED);
	/* A connection of its own works, fast path included. */
	CHECK_RC(kvs_reconnect(x->c), 0);
	CHECK_RC(kvs_lookup(x->c, x->h, 8, &l, b), 8);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(th_pattern_check(kvs_block_ptr(x->c, &b[i]),
					  kvs_block_bytes(x->c), x->h[i], 0), -1);
	CHECK_RC(kvs_release(x->c, l), 0);
	kvs_close(x->c);
	return 0;
}

static void test_fork(void)
{
	th_daemon d;
	kvs_client *slow;
	forked x;
	kvs_block b[8];
	kvs_lease l;
	uint8_t *area, *copy;
	size_t len = 0;
	int64_t ops0;

	th_daemon_up(&d, TH_ARGS("--host-size", "8M"));
	x.c = th_connect(&d, &L);
	CHECK_RC(kvs_connect_flags(d.socket, &L, KVS_CONNECT_NO_FASTPATH, &slow), 0);
	th_chain(&L, 91, 8, 0, 0, x.h);
	CHECK_RC(th_publish(slow, x.h, 8, NULL), 8);
	ops0 = th_stat_get(&d, "ops.lookup");
	CHECK_RC(kvs_lookup(x.c, x.h, 8, &x.parents, b), 8);
	CHECK_EQ(th_stat_get(&d, "ops.lookup"), ops0); /* a fast lease */
	area = pin_area(&len);
	if (!CHECK(area != NULL))
		return;
	copy = malloc(len);
	memcpy(copy, area, len);

	CHECK_EQ(th_run_child(child, &x, TH_WAIT_MS), 0);

	/* The child wrote nothing into the area it shared with us. */
	CHECK(memcmp(copy, area, len) == 0);
	free(copy);
	/* The parent goes on: its lease, its fast path, its connection. */
	for (int i = 0; i < 8; i++)
		CHECK_EQ(th_pattern_check(kvs_block_ptr(x.c, &b[i]),
					  kvs_block_bytes(x.c), x.h[i], 0), -1);
	CHECK_RC(kvs_release(x.c, x.parents), 0);
	CHECK_RC(kvs_lookup(x.c, x.h, 8, &l, b), 8);
	CHECK_RC(kvs_release(x.c, l), 0);
	CHECK_EQ(th_stat_get(&d, "ops.lookup"), ops0);
	CHECK_RC(kvs_reserve(x.c, x.h, 8, &l, b), 0); /* the socket: all there */
	CHECK_RC(kvs_abort(x.c, l), 0);
	kvs_close(slow);
	kvs_close(x.c);
	CHECK_EQ(th_daemon_stop(&d, SIGTERM), 0);
	th_daemon_destroy(&d);
}

/* 16 areas of 16384 pins fill a domain's bound (2^18); the 17th client
 * gets none and answers the same over the socket. */
static void test_domain_bound(void)
{
	enum { N = 17 };
	th_daemon d;
	kvs_client *c[N];
	kvs_hash h[4];
	kvs_block b[4];
	kvs_lease l;
	int64_t ops0;

	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--max-pinned-blocks", "16384",
				 "--max-clients", "64"));
	for (int i = 0; i < N; i++)
		c[i] = th_connect(&d, &L);
	CHECK_EQ(th_stat_get(&d, "fast.clients"), N - 1);
	CHECK_EQ(th_stat_get(&d, "fast.attach_refused"), 1);
	th_chain(&L, 92, 4, 0, 0, h);
	CHECK_RC(th_publish(c[0], h, 4, NULL), 4);
	ops0 = th_stat_get(&d, "ops.lookup");
	CHECK_RC(kvs_lookup(c[N - 1], h, 4, &l, b), 4);
	CHECK_RC(kvs_release(c[N - 1], l), 0);
	CHECK_EQ(th_stat_get(&d, "ops.lookup"), ops0 + 1);
	/* One leaves: after its grace, room for the next one. */
	kvs_close(c[0]);
	CHECK(th_wait_stat(&d, "fast.clients", N - 2, TH_WAIT_MS));
	CHECK(th_wait_stat(&d, "fast.revoked", 0, TH_WAIT_MS));
	c[0] = th_connect(&d, &L);
	CHECK_EQ(th_stat_get(&d, "fast.clients"), N - 1);
	for (int i = 0; i < N; i++)
		kvs_close(c[i]);
	CHECK_EQ(th_daemon_stop(&d, SIGTERM), 0);
	th_daemon_destroy(&d);
}

static void test_flush_junk(void)
{
	enum { CHAINS = 32, DEPTH = 16 };
	th_daemon d;
	kvs_client *c, *ctl;
	kvs_evict_result er;
	kvs_hash h[DEPTH];
	kvs_fast_pins_hdr *ph;
	uint64_t *pins;
	int64_t looks;
	size_t len = 0;

	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--max-pinned-blocks", "16384"));
	c = th_connect(&d, &L);
	ctl = th_connect(&d, NULL);
	for (int k = 0; k < CHAINS; k++) {
		th_chain(&L, 300 + (uint64_t)k, DEPTH, 0, 0, h);
		CHECK_RC(th_publish(c, h, DEPTH, NULL), DEPTH);
	}
	/* Our own pin area, written as a hostile client writes it. */
	ph = (kvs_fast_pins_hdr *)pin_area(&len);
	if (!CHECK(ph != NULL))
		return;
	pins = (uint64_t *)((uint8_t *)ph + KVS_FAST_PINS_OFF);
	for (uint32_t p = 0; p < ph->cap; p++)
		pins[p] = (uint64_t)p << 20 | 0x5a5;
	__atomic_store_n(&ph->used, ph->cap, __ATOMIC_RELEASE);
	looks = th_stat_get(&d, "fast.snapshots");
	CHECK_RC(kvs_evict(ctl, KVS_SCOPE_ALL, 0, (kvs_hash){ 0, 0 }, 1, &er), 0);
	looks = th_stat_get(&d, "fast.snapshots") - looks;
	printf("test_fast_hostile: flush of %d blocks under %u junk pins: %lld "
	       "looks at the pins\n", CHAINS * DEPTH, ph->cap, (long long)looks);
	CHECK_EQ(er.freed, CHAINS * DEPTH);
	CHECK(looks <= DEPTH + 2);
	kvs_close(ctl);
	kvs_close(c);
	CHECK_EQ(th_daemon_stop(&d, SIGTERM), 0);
	th_daemon_destroy(&d);
}

int main(void)
{
	th_init("test_fast_hostile");
	L = th_layout("fast-hostile", BT);
	test_fds();
	test_fork();
	test_domain_bound();
	test_flush_junk();
	return th_finish();
}
