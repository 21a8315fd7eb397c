/*
 * test_fastpath - hits without a round trip (docs/architecture.md, "Hits
 * without a round trip"): the shared index and the pin areas, against a
 * real daemon.
 *
 *  - same answers: every prefix length of a chain, looked up on the fast
 *    path and with it forced off (KVS_CONNECT_NO_FASTPATH, and the
 *    KVS_NO_FASTPATH environment variable), gives the same blocks; the fast
 *    lookups send nothing (ops.lookup does not move), misses included;
 *    a fast lease answers commit, release, a second release and another
 *    connection's release as a read lease does; the index is mapped read-only and cannot be made writable;
 *  - with an SSD tier: a chain partly on SSD goes to the socket (a miss in
 *    the index proves nothing then), and once promoted it is a fast hit;
 *  - pins hold: a child's fast-path pins keep its blocks through a flush and
 *    through eviction pressure (fast.held), and kill -9 of the child frees
 *    them (fast.clients back to 0, the blocks flushable);
 *  - race: reader threads on the fast path check every pinned block's bytes
 *    twice while a writer evicts by publishing and an operator flushes, for
 *    a bounded time: no block's bytes ever change under a pin; again with
 *    the readers a worker uid's (root only), whose pin areas have a slab
 *    budget of 2 pages each;
 *  - two domains (--tenant-arenas uid, as root): each uid's index holds its
 *    own blocks only and is a different memfd; a uid's fast lookup never
 *    hits the other's blocks.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"
#include "harness_raw.h"
#include "harness_ssd.h"
#include "kvshare_admin.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvs_fast.h"

#define BT 16 /* 16 KiB blocks */

static kvs_layout L;

static int same_block(const kvs_block *a, const kvs_block *b)
{
	return a->offset == b->offset && a->gen == b->gen &&
	       a->tier == b->tier && a->status == b->status;
}

/* The fast-path index mapped in this process: its address and size. */
static int find_index(uintptr_t *start, size_t *len, int *writable)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	int found = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;
		char perms[8];

		if (!strstr(line, "kvshare-fastidx") ||
		    sscanf(line, "%lx-%lx %7s", &a, &b, perms) != 3)
			continue;
		*start = a;
		*len = b - a;
		*writable = perms[1] == 'w';
		found = 1;
		break;
	}
	fclose(f);
	return found;
}

static int64_t index_entries(void)
{
	uintptr_t a;
	size_t len;
	int w;
	const kvs_fast_hdr *h;
	const kvs_fast_entry *e;
	int64_t n = 0;

	if (!find_index(&a, &len, &w))
		return -1;
	h = (const kvs_fast_hdr *)a;
	e = (const kvs_fast_entry *)(a + KVS_FAST_HDR_SIZE);
	for (uint32_t i = 0; i < h->entries; i++)
		n += e[i].state == KVS_FAST_READY;
	return n;
}

/* Every prefix length of @h (12 of 16 cached) on the fast path, and a
 * chain not cached at all: no lookup request reaches the daemon. */
static void fast_lookups_stay_local(th_daemon *d, kvs_client *fast,
				    const kvs_hash *h)
{
	kvs_block bf[16];
	kvs_lease lf;
	int64_t ops0;

	ops0 = th_stat_get(d, "ops.lookup");
	for (size_t n = 1; n <= 16; n++) {
		int rf = kvs_lookup(fast, h, n, &lf, bf);

		CHECK_EQ(rf, (int)(n < 12 ? n : 12));
		for (int i = 0; i < rf; i++)
			CHECK_EQ(th_pattern_check(kvs_block_ptr(fast, &bf[i]),
						  kvs_block_bytes(fast), h[i], 0), -1);
		CHECK_RC(kvs_release(fast, lf), 0);
	}
	/* A chain that is not cached at all: a miss, still without a trip. */
	{
		kvs_hash other[4];

		th_chain(&L, 78, 4, 0, 0, other);
		CHECK_EQ(kvs_lookup(fast, other, 4, &lf, bf), 0);
		CHECK_EQ(lf, 0);
	}
	CHECK_EQ(th_stat_get(d, "ops.lookup"), ops0);
	CHECK_GE(th_stat_get(d, "fast.lookups"), 17);
	CHECK_EQ(th_stat_get(d, "fast.hit_blocks"), 78 + 4 * 12);
}

/* The fast and the slow path give the same blocks, and their leases answer
 * commit and release alike. */
static void fast_matches_slow(kvs_client *fast, kvs_client *slow,
			      const kvs_hash *h)
{
	kvs_block bf[16], bs[16];
	kvs_lease lf, ls;

	for (size_t n = 1; n <= 16; n++) {
		int rf = kvs_lookup(fast, h, n, &lf, bf);
		int rs = kvs_lookup(slow, h, n, &ls, bs);

		CHECK_EQ(rf, rs);
		for (int i = 0; i < rf && i < rs; i++)
			CHECK(same_block(&bf[i], &bs[i]));
		/* A fast lease is a read lease: not committable, released
		 * once, then unknown; as the daemon's. */
		CHECK_RC(kvs_commit(fast, lf), KVS_E_LEASEKIND);
		CHECK_RC(kvs_commit(slow, ls), KVS_E_LEASEKIND);
		CHECK_RC(kvs_release(fast, lf), 0);
		CHECK_RC(kvs_release(slow, ls), 0);
		CHECK_RC(kvs_release(fast, lf), KVS_E_NOLEASE);
		CHECK_RC(kvs_release(slow, ls), KVS_E_NOLEASE);
	}
}

/* Another connection's fast lease is not ours to end (the tags of two
 * clients collide once in 1024: then it is unknown, still an error). */
static void foreign_release_refused(kvs_client *fast, kvs_client *slow,
				    const kvs_hash *h)
{
	kvs_block bf[16];
	kvs_lease lf;

	CHECK_RC(kvs_lookup(fast, h, 12, &lf, bf), 12);
	{
		int rc = kvs_release(slow, lf);

		CHECK(rc == KVS_E_NOTOWNER || rc == KVS_E_NOLEASE);
	}
	CHECK_RC(kvs_release_nowait(fast, lf), 0);
}

/* The index is ours to read only, and stays so. */
static void index_read_only(void)
{
	uintptr_t ia;
	size_t ilen;
	int w;

	if (CHECK(find_index(&ia, &ilen, &w))) {
		CHECK(!w);
		CHECK(mprotect((void *)ia, ilen, PROT_READ | PROT_WRITE) != 0);
		CHECK_EQ(index_entries(), 12);
	}
}

/* The environment variable turns it off for the whole process. */
static void env_turns_fastpath_off(th_daemon *d, const kvs_hash *h)
{
	kvs_client *envc;
	kvs_block bs[16];
	kvs_lease ls;
	int64_t ops0;

	setenv("KVS_NO_FASTPATH", "1", 1);
	envc = th_connect(d, &L);
	unsetenv("KVS_NO_FASTPATH");
	ops0 = th_stat_get(d, "ops.lookup");
	CHECK_RC(kvs_lookup(envc, h, 16, &ls, bs), 12);
	CHECK_RC(kvs_release(envc, ls), 0);
	CHECK_EQ(th_stat_get(d, "ops.lookup"), ops0 + 1);
	CHECK_EQ(th_stat_get(d, "fast.clients"), 1);
	kvs_close(envc);
}

static void test_same_answers(void)
{
	th_daemon d;
	kvs_client *fast, *slow;
	kvs_hash h[16];

	th_daemon_up(&d, TH_ARGS("--host-size", "8M"));
	fast = th_connect(&d, &L);
	CHECK_RC(kvs_connect_flags(d.socket, &L, KVS_CONNECT_NO_FASTPATH, &slow), 0);
	CHECK_EQ(th_stat_get(&d, "fast.clients"), 1);
	th_chain(&L, 77, 16, 0, 0, h);
	CHECK_RC(th_publish(slow, h, 12, NULL), 12);
	CHECK_EQ(th_stat_get(&d, "fast.entries"), 12);

	fast_lookups_stay_local(&d, fast, h);
	fast_matches_slow(fast, slow, h);
	foreign_release_refused(fast, slow, h);
	index_read_only();
	env_turns_fastpath_off(&d, h);
	kvs_close(slow);
	kvs_close(fast);
	CHECK(th_wait_stat(&d, "fast.clients", 0, TH_WAIT_MS));
	CHECK(th_stat_get(&d, "fast.lookups") > 0);
	CHECK_EQ(th_daemon_stop(&d, SIGTERM), 0);
	th_daemon_destroy(&d);
}

/* With an SSD tier a miss in the index is no proof (the block may be on
 * SSD): the socket answers it, promotes, and the promoted blocks are in the
 * index from then on. */
static void test_with_ssd(void)
{
	static char ssd_dir[256];
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
				      "--ssd-size", "16M", NULL };
	th_daemon d;
	kvs_client *fast, *slow, *ctl;
	kvs_evict_result er;
	kvs_hash h[8];
	kvs_block bf[8];
	kvs_lease lf;
	size_t bad = 1;
	int64_t ops0, hit0;

	th_daemon_up_ssd(&d, args, ssd_dir, sizeof(ssd_dir));
	fast = th_connect(&d, &L);
	CHECK_RC(kvs_connect_flags(d.socket, &L, KVS_CONNECT_NO_FASTPATH, &slow), 0);
	th_chain(&L, 9, 8, 0, 0, h);
	CHECK_RC(th_publish(slow, h, 8, NULL), 8);
	CHECK_RC(th_verify(fast, h, 8, &bad), 8); /* a hit: admitted to SSD */
	CHECK_EQ(bad, 0);
	/* Evict (not flush): out of RAM, kept on SSD. */
	ctl = th_connect(&d, NULL);
	CHECK_RC(kvs_evict(ctl, KVS_SCOPE_PREFIX, 0, h[0], 0, &er), 0);
	CHECK_EQ(er.freed, 8);
	kvs_close(ctl);
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&d, "fast.entries"), 0);
	ops0 = th_stat_get(&d, "ops.lookup");
	/* Not all of it in RAM now: the socket answers, and promotes. */
	CHECK_RC(kvs_lookup(fast, h, 8, &lf, bf), 8);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(th_pattern_check(kvs_block_ptr(fast, &bf[i]),
					  kvs_block_bytes(fast), h[i], 0), -1);
	CHECK_RC(kvs_release(fast, lf), 0);
	CHECK_EQ(th_stat_get(&d, "ops.lookup"), ops0 + 1);
	CHECK_GT(th_stat_get(&d, "fast.fallback_miss"), 0);
	/* Promoted into RAM, so into the index: the fast path has it. */
	hit0 = th_stat_get(&d, "fast.hit_blocks");
	CHECK_RC(th_verify(fast, h, 8, &bad), 8);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&d, "ops.lookup"), ops0 + 1);
	CHECK_EQ(th_stat_get(&d, "fast.hit_blocks"), hit0 + 8);
	kvs_close(slow);
	kvs_close(fast);
	CHECK_EQ(th_daemon_stop(&d, SIGTERM), 0);
	th_daemon_destroy(&d);
}

/* ---- pins, and a pinning client killed ------------------------------- */

static const th_daemon *pin_d;

static int pin_child(void *arg, int sync_fd)
{
	kvs_hash *h = arg;
	kvs_client *c = th_connect(pin_d, &L);
	kvs_block b[8];
	kvs_lease lease;
	uint64_t x;
	int n = kvs_lookup(c, h, 8, &lease, b);

	th_send_u64(sync_fd, (uint64_t)n);
	th_recv_u64(sync_fd, &x, 60000); /* killed while waiting */
	return 0;
}

static void test_pins_and_kill(void)
{
	th_daemon d;
	kvs_client *slow, *ctl;
	kvs_hash h[8], fill[16];
	kvs_evict_result er;
	kvs_lease ls;
	kvs_block bs[16];
	th_child ch;
	uint64_t n = 0;

	th_daemon_up(&d, TH_ARGS("--host-size", "2M"));
	pin_d = &d;
	CHECK_RC(kvs_connect_flags(d.socket, &L, KVS_CONNECT_NO_FASTPATH, &slow), 0);
	ctl = th_connect(&d, NULL);
	th_chain(&L, 5, 8, 0, 0, h);
	CHECK_RC(th_publish(slow, h, 8, NULL), 8);

	th_spawn(&ch, pin_child, h);
	CHECK_RC(th_recv_u64(ch.fd, &n, TH_WAIT_MS), 0);
	CHECK_EQ(n, 8);
	CHECK_EQ(th_stat_get(&d, "fast.clients"), 1);
	CHECK_EQ(th_stat_get(&d, "fast.hit_blocks"), 8);

	/* A flush keeps the pinned leaf (held) and its prefix. */
	CHECK_RC(kvs_evict(ctl, KVS_SCOPE_ALL, 0, (kvs_hash){ 0, 0 }, 1, &er), 0);
	CHECK_EQ(er.freed, 0);
	CHECK_EQ(th_stat_get(&d, "fast.held"), 1);
	/* Pressure: more than the arena holds, published through others. */
	for (uint64_t s = 100; s < 100 + 16; s++) {
		th_chain(&L, s, 16, 0, 0, fill);
		th_publish(slow, fill, 16, NULL);
	}
	CHECK_GT(th_stat_get(&d, "blocks.evicted"), 0);
	if (CHECK_EQ(kvs_lookup(slow, h, 8, &ls, bs), 8))
		for (int i = 0; i < 8; i++)
			CHECK_EQ(th_pattern_check(kvs_block_ptr(slow, &bs[i]),
						  kvs_block_bytes(slow), h[i], 0), -1);
	CHECK_RC(kvs_release(slow, ls), 0);

	/* kill -9: its connection closes, its pin area is revoked and goes
	 * after its grace (2 heartbeats), so do the holds. */
	CHECK_EQ(th_child_kill(&ch, SIGKILL), 128 + SIGKILL);
	CHECK(th_wait_stat(&d, "fast.clients", 0, TH_WAIT_MS));
	CHECK(th_wait_stat(&d, "fast.revoked", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&d, "fast.held"), 0);
	CHECK_RC(kvs_evict(ctl, KVS_SCOPE_ALL, 0, (kvs_hash){ 0, 0 }, 1, &er), 0);
	CHECK_EQ(er.pinned, 0);
	CHECK_EQ(kvs_lookup(slow, h, 8, &ls, bs), 0);
	CHECK_EQ(th_stat_get(&d, "fast.entries"), 0);
	kvs_close(ctl);
	kvs_close(slow);
	CHECK_EQ(th_daemon_stop(&d, SIGTERM), 0);
	th_daemon_destroy(&d);
}

/* ---- the race --------------------------------------------------------- */

#define SEEDS 48
#define CHAIN 8
#define RACE_MS 3000
#define READERS 3

typedef struct race {
	const th_daemon *d;
	int64_t deadline;
	int64_t lookups, hits, bad, errors;
} race;

static void *reader(void *arg)
{
	race *r = arg;
	kvs_client *c;
	kvs_hash h[CHAIN];
	kvs_block b[CHAIN];
	unsigned seed = (unsigned)(uintptr_t)&c;

	if (kvs_connect(r->d->socket, &L, &c) < 0) {
		__atomic_add_fetch(&r->errors, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	while (th_now_ms() < r->deadline) {
		kvs_lease lease;
		int n;

		th_chain(&L, (uint64_t)(rand_r(&seed) % SEEDS), CHAIN, 0, 0, h);
		n = kvs_lookup(c, h, CHAIN, &lease, b);
		if (n < 0) {
			__atomic_add_fetch(&r->errors, 1, __ATOMIC_RELAXED);
			continue;
		}
		for (int pass = 0; pass < 2; pass++) {
			for (int i = 0; i < n; i++) {
				const void *p = kvs_block_ptr(c, &b[i]);

				if (!p || th_pattern_check(p, kvs_block_bytes(c),
							   h[i], 0) != -1)
					__atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
			}
			for (volatile int spin = 0; spin < 20000; spin++)
				;
		}
		if (kvs_release(c, lease) < 0)
			__atomic_add_fetch(&r->errors, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&r->lookups, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&r->hits, n, __ATOMIC_RELAXED);
	}
	kvs_close(c);
	return NULL;
}

static void *writer(void *arg)
{
	race *r = arg;
	kvs_client *c;
	kvs_hash h[CHAIN];
	unsigned seed = 12345;

	if (kvs_connect_flags(r->d->socket, &L, KVS_CONNECT_NO_FASTPATH, &c) < 0)
		return NULL;
	while (th_now_ms() < r->deadline) {
		th_chain(&L, (uint64_t)(rand_r(&seed) % SEEDS), CHAIN, 0, 0, h);
		/* Never full: the readers pin a few dozen blocks at most. */
		if (th_publish(c, h, CHAIN, NULL) < 0)
			__atomic_add_fetch(&r->errors, 1, __ATOMIC_RELAXED);
	}
	kvs_close(c);
	return NULL;
}

static void *flusher(void *arg)
{
	race *r = arg;
	kvs_client *c;
	kvs_evict_result er;

	if (kvs_connect(r->d->socket, NULL, &c) < 0)
		return NULL;
	while (th_now_ms() < r->deadline) {
		kvs_evict(c, KVS_SCOPE_ALL, 0, (kvs_hash){ 0, 0 }, 1, &er);
		usleep(20000);
	}
	kvs_close(c);
	return NULL;
}

/* Child, as a worker uid (nobody): the readers, their counts sent back. */
static int worker_readers(void *arg, int sync_fd)
{
	race *r = arg;
	pthread_t t[READERS];

	if (th_become(65534) < 0)
		return 3;
	for (int i = 0; i < READERS; i++)
		pthread_create(&t[i], NULL, reader, r);
	for (int i = 0; i < READERS; i++)
		pthread_join(t[i], NULL);
	th_send_u64(sync_fd, (uint64_t)r->lookups);
	th_send_u64(sync_fd, (uint64_t)r->hits);
	th_send_u64(sync_fd, (uint64_t)r->bad);
	th_send_u64(sync_fd, (uint64_t)r->errors);
	return 0;
}

/* @worker: the readers are a worker uid's (root only), so their pin areas
 * have a slab budget (2 pages each of the 2 MiB arena's 32): lookups past
 * it take the socket, and what they pin on the fast path must hold all
 * the same. */
static void test_race(int worker)
{
	th_daemon d;
	race r = { 0 };
	pthread_t t[READERS + 2];
	th_child ch;
	int first = worker ? READERS : 0;

	/* 2 MiB: ~120 slots for 48 chains of 8: constant eviction. */
	if (worker) {
		th_daemon_up(&d, TH_ARGS("--host-size", "2M", "--socket-mode", "0666"));
		th_open_dir_to(&d, 65534, 65534);
	} else {
		th_daemon_up(&d, TH_ARGS("--host-size", "2M"));
	}
	r.d = &d;
	r.deadline = th_now_ms() + RACE_MS;
	if (worker)
		th_spawn(&ch, worker_readers, &r);
	for (int i = 0; i < READERS && !worker; i++)
		pthread_create(&t[i], NULL, reader, &r);
	pthread_create(&t[READERS], NULL, writer, &r);
	pthread_create(&t[READERS + 1], NULL, flusher, &r);
	for (int i = first; i < READERS + 2; i++)
		pthread_join(t[i], NULL);
	if (worker) {
		CHECK_RC(th_recv_u64(ch.fd, (uint64_t *)&r.lookups, TH_WAIT_MS), 0);
		CHECK_RC(th_recv_u64(ch.fd, (uint64_t *)&r.hits, TH_WAIT_MS), 0);
		CHECK_RC(th_recv_u64(ch.fd, (uint64_t *)&r.bad, TH_WAIT_MS), 0);
		CHECK_RC(th_recv_u64(ch.fd, (uint64_t *)&r.errors, TH_WAIT_MS), 0);
		CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
	}
	th_note("race%s: %lld lookups, %lld blocks hit, %lld evicted, %lld "
		"evictions skipped for fast pins, fallbacks busy %lld miss %lld "
		"pins %lld", worker ? " (a worker uid's readers)" : "",
		(long long)r.lookups, (long long)r.hits,
		(long long)th_stat_get(&d, "blocks.evicted"),
		(long long)th_stat_get(&d, "fast.evict_skipped"),
		(long long)th_stat_get(&d, "fast.fallback_busy"),
		(long long)th_stat_get(&d, "fast.fallback_miss"),
		(long long)th_stat_get(&d, "fast.fallback_pins"));
	CHECK_EQ(r.bad, 0);
	CHECK_EQ(r.errors, 0);
	CHECK_GT(r.hits, 0);
	CHECK_GT(th_stat_get(&d, "fast.hit_blocks"), 0);
	CHECK_GT(th_stat_get(&d, "blocks.evicted"), 0);
	CHECK(th_wait_stat(&d, "fast.clients", 0, TH_WAIT_MS));
	CHECK(th_wait_stat(&d, "fast.held", 0, TH_WAIT_MS));
	CHECK_EQ(th_daemon_stop(&d, SIGTERM), 0);
	th_daemon_destroy(&d);
}

/* ---- two domains -------------------------------------------------------- */

typedef struct dseen {
	int64_t before, published, after, entries, inode;
} dseen;

static const th_daemon *dom_d;

static int as_uid(void *arg, int sync_fd)
{
	uint32_t uid = (uint32_t)(uintptr_t)arg;
	kvs_client *c;
	kvs_hash h[4];
	dseen s = { -1, -1, -1, -1, -1 };
	uintptr_t a;
	size_t len;
	int w;
	th_mapping m;

	if (th_become(uid) < 0)
		return 3;
	if (kvs_connect(dom_d->socket, &L, &c) == 0) {
		th_chain(&L, 4242, 4, 0, 0, h);
		s.before = th_probe(c, h, 4);
		s.published = th_publish(c, h, 4, NULL);
		s.after = th_probe(c, h, 4);
		s.entries = index_entries();
		if (find_index(&a, &len, &w) &&
		    th_mapping_of((void *)a, 1, &m) == 0)
			s.inode = (int64_t)m.inode;
		kvs_close(c);
	}
	for (size_t i = 0; i < sizeof(s) / 8; i++)
		th_send_u64(sync_fd, (uint64_t)((int64_t *)&s)[i]);
	return 0;
}

static dseen run_as(uint32_t uid)
{
	dseen s;
	th_child ch;

	memset(&s, 0xff, sizeof(s));
	th_spawn(&ch, as_uid, (void *)(uintptr_t)uid);
	for (size_t i = 0; i < sizeof(s) / 8; i++)
		if (!CHECK_RC(th_recv_u64(ch.fd, (uint64_t *)&((int64_t *)&s)[i],
					  TH_WAIT_MS), 0))
			break;
	CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
	return s;
}

static void test_domains(void)
{
	th_daemon d;
	dseen a, b;

	if (geteuid() != 0) {
		th_skip_part("needs root to run clients as two uids; NOT TESTED: "
			     "one index per --tenant-arenas uid domain");
		return;
	}
	th_daemon_up(&d, TH_ARGS("--host-size", "16M", "--socket-mode", "0666",
				 "--tenant-arenas", "uid"));
	th_open_dir_to(&d, 65534, 65534);
	dom_d = &d;
	a = run_as(65534);
	b = run_as(65533);
	CHECK_EQ(a.before, 0);
	CHECK_EQ(a.published, 4);
	CHECK_EQ(a.after, 4);
	CHECK_EQ(a.entries, 4);
	/* The same hashes from another uid: not visible, not in its index. */
	CHECK_EQ(b.before, 0);
	CHECK_EQ(b.published, 4);
	CHECK_EQ(b.after, 4);
	CHECK_EQ(b.entries, 4);
	CHECK(a.inode > 0 && b.inode > 0 && a.inode != b.inode);
	CHECK_EQ(th_stat_get(&d, "fast.entries"), 8);
	CHECK_GE(th_stat_get(&d, "fast.lookups"), 4);
	CHECK_EQ(th_daemon_stop(&d, SIGTERM), 0);
	th_daemon_destroy(&d);
}

int main(void)
{
	th_init("test_fastpath");
	L = th_layout("fast-model", BT);
	test_same_answers();
	test_with_ssd();
	test_pins_and_kill();
	test_race(0);
	if (geteuid() == 0)
		test_race(1);
	else
		th_skip_part("needs root to run the readers as a worker uid; NOT "
			     "TESTED: the race with slab-budgeted pin areas");
	test_domains();
	return th_finish();
}
