/*
 * test_persist - the host tier outlives its cache (kvs_persist.h): a cache
 * publishes a chain into real memfds, goes away (the fds held, as an fd
 * store holds them), and a new cache adopts them and serves every block,
 * byte for byte; then the same with what a crash or a hostile holder
 * leaves: bytes changed, a record caught writing or torn, a lease not
 * committed, garbage over every record, a header of another version, an
 * arena of another size or without seals. Nothing wrong is ever served, the
 * cache's invariants hold, and it goes on serving new blocks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvs_cache_admin.h"
#include "kvs_check.h"
#include "kvs_log.h"
#include "kvs_persist.h"
#include "persist_fmt.h"

#define PAGE (64u << 10)
#define BLOCKS 8
#define KIB 4

static kvs_counters stats;

static kvs_layout layout(void)
{
	return (kvs_layout){ .model = "persist-model", .layers = 1,
			     .kv_heads = 1, .head_dim = KIB * 1024 / 64,
			     .block_tokens = 16, .tp_size = 1,
			     .dtype = KVS_DTYPE_FP16 };
}

static kvs_cache *mk(uint64_t bytes)
{
	kvs_cache_config cfg = { .host_bytes = bytes, .page_bytes = PAGE,
				 .policy = "leaf-lru", .max_leases = 64,
				 .persist = 1 };
	kvs_cache *c = NULL;

	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	return c;
}

static kvs_owner *attach(kvs_cache *c)
{
	kvs_layout l = layout();
	kvs_ns_desc d = { .model = l.model, .adapter = "", .layers = l.layers,
			  .kv_heads = l.kv_heads, .head_dim = l.head_dim,
			  .block_tokens = l.block_tokens, .tp_size = 1,
			  .dtype = l.dtype };
	kvs_owner *o = kvs_cache_owner_new(c);
	uint32_t ns;
	uint64_t bb;

	CHECK(kvs_cache_attach(c, o, &d, 0, &ns, &bb) == 0);
	CHECK_EQ(bb, (uint64_t)KIB * 1024);
	return o;
}

static void chain_of(kvs_hash *h, uint32_t stream)
{
	kvs_layout l = layout();
	uint32_t toks[BLOCKS * 16];

	for (uint32_t i = 0; i < BLOCKS * 16; i++)
		toks[i] = stream * 7919u + i;
	CHECK_EQ(kvs_hash_chain(kvs_hash_layout_seed(&l), 16, toks, BLOCKS * 16,
				h, BLOCKS), BLOCKS);
}

static uint64_t arena_bytes;

/* The arena of @o's domain, mapped (arena_bytes long). */
static uint8_t *arena_map(const kvs_cache *c, const kvs_owner *o)
{
	uint64_t id;
	int fd;
	uint8_t *p;

	CHECK_EQ(kvs_cache_owner_arena(c, o, &fd, &arena_bytes, &id), 0);
	p = mmap(NULL, arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p != MAP_FAILED);
	return p;
}

static uint8_t pattern(uint32_t stream, uint32_t k, uint32_t j)
{
	return (uint8_t)(stream * 31u + k * 131u + j);
}

/* Publish chain @stream: @commit 0 leaves the lease open. */
static void publish(kvs_cache *c, kvs_owner *o, uint32_t stream, int commit)
{
	kvs_hash h[BLOCKS];
	kvs_block b[BLOCKS];
	uint64_t lease;
	uint8_t *a = arena_map(c, o);

	chain_of(h, stream);
	CHECK_EQ(kvs_cache_reserve(c, o, h, BLOCKS, &lease, b), BLOCKS);
	for (uint32_t k = 0; k < BLOCKS; k++)
		for (uint32_t j = 0; j < KIB * 1024; j++)
			a[b[k].offset + j] = pattern(stream, k, j);
	if (commit)
		CHECK_EQ(kvs_cache_commit(c, o, lease), BLOCKS);
	munmap(a, arena_bytes);
}

/* Hits of chain @stream, every byte checked (a wrong one fails). */
static int served(kvs_cache *c, kvs_owner *o, uint32_t stream)
{
	kvs_hash h[BLOCKS];
	kvs_block b[BLOCKS];
	uint64_t lease;
	uint8_t *a = arena_map(c, o);
	int n;

	chain_of(h, stream);
	n = kvs_cache_lookup(c, o, h, BLOCKS, &lease, b);
	CHECK(n >= 0);
	for (int k = 0; k < n; k++) {
		uint32_t bad = 0;

		for (uint32_t j = 0; j < KIB * 1024; j++)
			bad += a[b[k].offset + j] != pattern(stream, (uint32_t)k, j);
		CHECK_EQ(bad, 0u);
	}
	if (n > 0)
		CHECK(kvs_cache_release(c, o, lease) >= 0);
	munmap(a, arena_bytes);
	return n;
}

/* The cache's fds, dup'ed as an fd store holds them. */
static int hold(kvs_cache *c, kvs_named_fd *fds)
{
	int n = kvs_persist_fds(c, fds, 4);

	CHECK_EQ(n, 2);
	for (int i = 0; i < n; i++)
		fds[i].fd = dup(fds[i].fd);
	return n;
}

static void *meta_map(const kvs_named_fd *fds, uint64_t *bytes)
{
	off_t sz = lseek(fds[0].fd, 0, SEEK_END);
	void *p = mmap(NULL, (size_t)sz, PROT_READ | PROT_WRITE, MAP_SHARED,
		       fds[0].fd, 0);

	CHECK(p != MAP_FAILED);
	*bytes = (uint64_t)sz;
	return p;
}

/* The record of block @k of chain @stream, in the metadata at @m. */
static persist_rec *rec_of(void *m, uint32_t stream, uint32_t k)
{
	persist_hdr *h = m;
	kvs_hash ch[BLOCKS];

	chain_of(ch, stream);
	for (uint64_t i = 0; i < h->rec_cap; i++) {
		persist_rec *e = (persist_rec *)((uint8_t *)m + h->rec_off +
						 i * PERSIST_REC_BYTES);

		if (e->state && e->hash_lo == ch[k].lo && e->hash_hi == ch[k].hi)
			return e;
	}
	CHECK(0);
	return NULL;
}

/* The metadata as it is now, in a memfd of its own: what a crash at this
 * instant leaves (the cache goes on, and ends its leases, after it). */
static void snapshot_meta(kvs_named_fd *fds)
{
	uint64_t bytes;
	void *m = meta_map(fds, &bytes), *s;
	int fd = memfd_create("snap", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	CHECK(fd >= 0 && ftruncate(fd, (off_t)bytes) == 0);
	CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
	s = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(s != MAP_FAILED);
	memcpy(s, m, bytes);
	munmap(s, bytes);
	munmap(m, bytes);
	close(fds[0].fd);
	fds[0].fd = fd;
}

enum { OPEN_LEASE = 1, CLEAN = 2 };
typedef void (*mutate_fn)(kvs_named_fd *fds, void *meta);

typedef struct outcome {
	kvs_persist_report r;
	int hits[2];
} outcome;

/* Chains 1 and 2 published (2 left open with OPEN_LEASE), the cache gone
 * with the fds held, @fn applied, a cache of @bytes adopting them. */
static outcome run(mutate_fn fn, uint64_t bytes, int flags)
{
	kvs_cache *c = mk(64 * PAGE), *c2;
	kvs_owner *o = attach(c), *o2;
	kvs_named_fd fds[4];
	uint64_t mb;
	void *m;
	outcome out;
	int n;

	publish(c, o, 1, 1);
	publish(c, o, 2, !(flags & OPEN_LEASE));
	kvs_persist_sync(c); /* a crash after the worker's turn */
	if (flags & CLEAN)
		kvs_persist_leave(c);
	n = hold(c, fds);
	snapshot_meta(fds);
	kvs_cache_owner_free(c, o);
	kvs_cache_destroy(c);
	m = meta_map(fds, &mb);
	if (fn)
		fn(fds, m);
	munmap(m, mb);
	c2 = mk(bytes);
	CHECK_EQ(kvs_persist_adopt(c2, fds, n, &out.r), 0);
	CHECK_EQ(kvs_cache_check(c2), 0);
	o2 = attach(c2);
	out.hits[0] = served(c2, o2, 1);
	out.hits[1] = served(c2, o2, 2);
	/* It goes on serving, in the slots of what was dropped too. */
	publish(c2, o2, 3, 1);
	CHECK_EQ(served(c2, o2, 3), BLOCKS);
	CHECK_EQ(kvs_cache_check(c2), 0);
	kvs_cache_owner_free(c2, o2);
	kvs_cache_destroy(c2);
	return out;
}

static void flip_byte(kvs_named_fd *fds, void *m)
{
	persist_rec *e = rec_of(m, 1, 3);
	uint8_t *a = mmap(NULL, (size_t)(e->offset + 4096), PROT_READ | PROT_WRITE,
			  MAP_SHARED, fds[1].fd, 0);

	CHECK(a != MAP_FAILED);
	a[e->offset + 100] ^= 1;
	munmap(a, (size_t)(e->offset + 4096));
}

static void caught_writing(kvs_named_fd *fds, void *m)
{
	(void)fds;
	rec_of(m, 2, 5)->state = PST_WRITING;
}

static void torn_record(kvs_named_fd *fds, void *m)
{
	(void)fds;
	rec_of(m, 1, 2)->offset += 64; /* its record checksum no longer holds */
}

/* A holder that knows the format: records that check, naming the wrong
 * bytes, or a parent loop. */
static void hostile_offset(kvs_named_fd *fds, void *m)
{
	persist_rec *e = rec_of(m, 1, 4);

	(void)fds;
	e->offset = rec_of(m, 2, 4)->offset;
	e->rsum = persist_rec_sum(e);
}

static void hostile_loop(kvs_named_fd *fds, void *m)
{
	persist_rec *e = rec_of(m, 1, 0), *last = rec_of(m, 1, BLOCKS - 1);

	(void)fds;
	e->parent_lo = last->hash_lo;
	e->parent_hi = last->hash_hi;
	e->rsum = persist_rec_sum(e);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Garbage over every record (states included), or over all but the header. */
static void garbage_records(kvs_named_fd *fds, void *m)
{
	persist_hdr *h = m;
	uint8_t *p = (uint8_t *)m + h->rec_off;

	(void)fds;
	for (uint64_t i = 0; i < 64 * PERSIST_REC_BYTES; i++)
		p[i] = (uint8_t)next();
	/* and states that say committed, over the rest of them */
	for (uint64_t i = 64; i < h->rec_cap; i += 7)
		((persist_rec *)(p + i * PERSIST_REC_BYTES))->state = PST_COMMITTED;
}

static void garbage_all(kvs_named_fd *fds, void *m)
{
	persist_hdr *h = m;
	uint8_t *p = m;

	(void)fds;
	for (uint64_t i = PERSIST_HDR_BYTES; i < h->rec_off + 64 * PERSIST_REC_BYTES; i++)
		p[i] = (uint8_t)next();
}

/* A few random bytes flipped anywhere a daemon reads: the header's
 * mutable part, namespace 1, the records in use. */
static void flip_random(kvs_named_fd *fds, void *m)
{
	persist_hdr *h = m;
	uint8_t *p = m;

	(void)fds;
	for (int k = 0; k < 8; k++) {
		uint64_t where = next() % 3, at;

		if (where == 0)
			at = offsetof(persist_hdr, state) + next() % 24;
		else if (where == 1)
			at = h->ns_off + next() % PERSIST_NS_BYTES;
		else
			at = h->rec_off + next() % (64 * PERSIST_REC_BYTES);
		p[at] ^= (uint8_t)(1u << (next() % 8));
	}
}

static void new_version(kvs_named_fd *fds, void *m)
{
	(void)fds;
	((persist_hdr *)m)->version = PERSIST_VERSION + 1;
}

static void header_changed(kvs_named_fd *fds, void *m)
{
	(void)fds;
	((persist_hdr *)m)->page_bytes *= 2; /* without its checksum */
}

static void unsealed_arena(kvs_named_fd *fds, void *m)
{
	off_t sz = lseek(fds[1].fd, 0, SEEK_END);
	int fd = memfd_create("unsealed", MFD_CLOEXEC);

	(void)m;
	CHECK(fd >= 0 && ftruncate(fd, sz) == 0);
	close(fds[1].fd);
	fds[1].fd = fd;
}

/* The metadata in a memfd anyone holding it could shrink. */
static void unsealed_meta(kvs_named_fd *fds, void *m)
{
	off_t sz = lseek(fds[0].fd, 0, SEEK_END);
	int fd = memfd_create("unsealed-meta", MFD_CLOEXEC);
	void *s;

	CHECK(fd >= 0 && ftruncate(fd, sz) == 0);
	s = mmap(NULL, (size_t)sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(s != MAP_FAILED);
	memcpy(s, m, (size_t)sz);
	munmap(s, (size_t)sz);
	close(fds[0].fd);
	fds[0].fd = fd;
}

static void test_scenarios(void)
{
	outcome o;

	o = run(NULL, 64 * PAGE, 0);
	CHECK_EQ(o.r.mode, KVS_START_RECOVERED);
	CHECK_EQ(o.r.blocks_kept, 2u * BLOCKS);
	CHECK_EQ(o.r.blocks_dropped, 0u);
	CHECK_EQ(o.r.namespaces, 1u);
	CHECK(o.hits[0] == BLOCKS && o.hits[1] == BLOCKS);

	o = run(NULL, 64 * PAGE, CLEAN);
	CHECK_EQ(o.r.mode, KVS_START_HANDED_OVER);
	CHECK_EQ(o.r.blocks_kept, 2u * BLOCKS);

	o = run(NULL, 64 * PAGE, OPEN_LEASE);
	CHECK(o.hits[0] == BLOCKS && o.hits[1] == 0);
	CHECK_EQ(o.r.torn, (uint64_t)BLOCKS);

	o = run(flip_byte, 64 * PAGE, 0);
	CHECK(o.hits[0] == 3 && o.hits[1] == BLOCKS);
	CHECK_EQ(o.r.bad_sum, 1u);
	CHECK_EQ(o.r.blocks_kept, (uint64_t)BLOCKS + 3);
	CHECK_EQ(o.r.blocks_dropped, (uint64_t)BLOCKS - 3);

	o = run(caught_writing, 64 * PAGE, 0);
	CHECK(o.hits[0] == BLOCKS && o.hits[1] == 5);
	CHECK_EQ(o.r.torn, 1u);

	o = run(torn_record, 64 * PAGE, 0);
	CHECK(o.hits[0] == 2 && o.hits[1] == BLOCKS);
	CHECK_EQ(o.r.torn, 1u);

	o = run(hostile_offset, 64 * PAGE, 0);
	CHECK(o.hits[0] == 4 && o.hits[1] == BLOCKS);

	o = run(hostile_loop, 64 * PAGE, 0);
	CHECK(o.hits[0] == 0 && o.hits[1] == BLOCKS);

	o = run(garbage_records, 64 * PAGE, 0);
	CHECK(o.r.blocks_kept < 2u * BLOCKS);
	o = run(garbage_all, 64 * PAGE, 0);
	CHECK_EQ(o.r.blocks_kept, 0u);
	CHECK(o.hits[0] == 0 && o.hits[1] == 0);

	/* served() checks every byte of every hit, run() the invariants */
	for (int k = 0; k < 40; k++) {
		o = run(flip_random, 64 * PAGE, 0);
		CHECK(o.r.blocks_kept <= 2u * BLOCKS);
	}

	o = run(new_version, 64 * PAGE, 0);
	CHECK_EQ(o.r.mode, KVS_START_COLD);
	CHECK(strstr(o.r.reason, "version") != NULL);
	CHECK(o.hits[0] == 0 && o.hits[1] == 0);

	o = run(header_changed, 64 * PAGE, 0);
	CHECK_EQ(o.r.mode, KVS_START_COLD);
	CHECK(strstr(o.r.reason, "checksum") != NULL);

	o = run(NULL, 128 * PAGE, 0); /* another --host-size */
	CHECK_EQ(o.r.mode, KVS_START_COLD);
	CHECK(strstr(o.r.reason, "geometry") != NULL);

	o = run(unsealed_meta, 64 * PAGE, 0);
	CHECK_EQ(o.r.mode, KVS_START_COLD);
	CHECK(strstr(o.r.reason, "sealed") != NULL);

	o = run(unsealed_arena, 64 * PAGE, 0);
	CHECK_EQ(o.r.mode, KVS_START_COLD);
	CHECK(strstr(o.r.reason, "adopted") != NULL);
}

/* Per-uid arenas: each domain's arena comes back under its uid, and each
 * uid's blocks in its own domain only. */
static void test_tenants(void)
{
	kvs_cache_config cfg = { .host_bytes = 128 * PAGE, .page_bytes = PAGE,
				 .policy = "leaf-lru", .max_leases = 64,
				 .max_tenants = 3, .tenant_bytes = 32 * PAGE,
				 .persist = 1 };
	kvs_cache *c = NULL;
	kvs_owner *o[2];
	kvs_named_fd fds[8];
	kvs_persist_report r;
	int n;

	for (int round = 0; round < 2; round++) {
		CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
		if (round)
			CHECK_EQ(kvs_persist_adopt(c, fds, (uint32_t)n, &r), 0);
		for (int u = 0; u < 2; u++) {
			o[u] = kvs_cache_owner_new(c);
			kvs_cache_owner_set_uid(o[u], 2000u + (uint32_t)u * 7);
		}
		/* attached in the other order: the domains are the adopted
		 * ones, by uid, whatever order their owners come in */
		for (int k = 0; k < 2; k++) {
			int u = round ? 1 - k : k;
			kvs_layout l = layout();
			kvs_ns_desc d = { .model = l.model, .adapter = "",
					  .layers = 1, .kv_heads = 1,
					  .head_dim = l.head_dim, .block_tokens = 16,
					  .tp_size = 1, .dtype = l.dtype };
			uint32_t ns;
			uint64_t bb;

			CHECK_EQ(kvs_cache_attach(c, o[u], &d, 0, &ns, &bb), 0);
		}
		if (!round) {
			publish(c, o[0], 1, 1);
			publish(c, o[1], 2, 1);
			kvs_persist_sync(c);
			n = kvs_persist_fds(c, fds, 8);
			CHECK_EQ(n, 3);
			for (int i = 0; i < n; i++)
				fds[i].fd = dup(fds[i].fd);
		} else {
			CHECK_EQ(r.mode, KVS_START_RECOVERED);
			CHECK_EQ(r.domains, 2u);
			CHECK_EQ(r.blocks_kept, 2u * BLOCKS);
			CHECK_EQ(served(c, o[0], 1), BLOCKS);
			CHECK_EQ(served(c, o[1], 2), BLOCKS);
			CHECK_EQ(served(c, o[0], 2), 0); /* not another uid's */
			CHECK_EQ(served(c, o[1], 1), 0);
			CHECK_EQ(kvs_cache_check(c), 0);
		}
		for (int u = 0; u < 2; u++)
			kvs_cache_owner_free(c, o[u]);
		kvs_cache_destroy(c);
	}
}

/* Twice in a row (the second cache's own records), and nothing handed. */
static void test_twice(void)
{
	kvs_cache *c = mk(64 * PAGE);
	kvs_owner *o;
	kvs_named_fd fds[4];
	kvs_persist_report r;
	int n;

	CHECK_EQ(kvs_persist_adopt(c, NULL, 0, &r), 0);
	CHECK_EQ(r.mode, KVS_START_COLD);
	CHECK_EQ(r.reason[0], '\0');
	o = attach(c);
	publish(c, o, 1, 1);
	for (int round = 0; round < 2; round++) {
		kvs_persist_sync(c);
		n = hold(c, fds);
		kvs_cache_owner_free(c, o);
		kvs_cache_destroy(c);
		c = mk(64 * PAGE);
		CHECK_EQ(kvs_persist_adopt(c, fds, n, &r), 0);
		CHECK_EQ(r.blocks_kept, (uint64_t)BLOCKS * (uint64_t)(round + 1));
		o = attach(c);
		CHECK_EQ(served(c, o, 1), BLOCKS);
		publish(c, o, 2 + (uint32_t)round, 1);
		CHECK_EQ(kvs_persist_adopt(c, NULL, 0, &r), -EBUSY);
	}
	kvs_cache_owner_free(c, o);
	kvs_cache_destroy(c);
}

static sem_t hashed, resume;

static void hold_worker(void *arg)
{
	(void)arg;
	sem_post(&hashed);
	sem_wait(&resume);
}

/* A chain forgotten, its slots given to another chain whose bytes differ,
 * while the worker hashes its first block: no record of it is marked
 * verified, a crash after keeps the other chain alone, byte for byte. */
static void test_forgotten_while_hashed(void)
{
	kvs_cache *c = mk(64 * PAGE), *c2;
	kvs_owner *o = attach(c), *o2;
	kvs_named_fd fds[4];
	kvs_persist_report r;
	kvs_hash h[BLOCKS];
	int n;

	CHECK(sem_init(&hashed, 0, 0) == 0 && sem_init(&resume, 0, 0) == 0);
	kvs_persist_test_hook(c, hold_worker, NULL);
	publish(c, o, 1, 1);
	sem_wait(&hashed); /* block 0 of chain 1 hashed, not yet marked */
	kvs_persist_test_hook(c, NULL, NULL);
	chain_of(h, 1);
	for (int k = BLOCKS - 1; k >= 0; k--)
		CHECK_EQ(kvs_cache_free_rec(c, kvs_cache_find(c, 0, h[k]),
					    KVS_CACHE_EVENT_EVICTED), 1);
	publish(c, o, 2, 1); /* the same slots, other bytes */
	sem_post(&resume);
	kvs_persist_sync(c);
	n = hold(c, fds);
	snapshot_meta(fds);
	kvs_cache_owner_free(c, o);
	kvs_cache_destroy(c);
	c2 = mk(64 * PAGE);
	CHECK_EQ(kvs_persist_adopt(c2, fds, (uint32_t)n, &r), 0);
	CHECK_EQ(r.blocks_kept, (uint64_t)BLOCKS);
	CHECK_EQ(r.bad_sum, 0u);
	o2 = attach(c2);
	CHECK_EQ(served(c2, o2, 1), 0);
	CHECK_EQ(served(c2, o2, 2), BLOCKS);
	kvs_cache_owner_free(c2, o2);
	kvs_cache_destroy(c2);
	sem_destroy(&hashed);
	sem_destroy(&resume);
}

/* Committed, not yet verified when the daemon dies: dropped, counted;
 * after kvs_persist_leave every one is kept. */
static void test_unverified(void)
{
	outcome o;

	kvs_cache *c = mk(64 * PAGE);
	kvs_owner *ow = attach(c);

	CHECK(sem_init(&hashed, 0, 0) == 0 && sem_init(&resume, 0, 0) == 0);
	kvs_persist_test_hook(c, hold_worker, NULL);
	publish(c, ow, 1, 1);
	sem_wait(&hashed);
	kvs_persist_test_hook(c, NULL, NULL);
	{
		kvs_named_fd fds[4];
		kvs_persist_report r;
		int n = hold(c, fds);
		kvs_cache *c2;

		snapshot_meta(fds); /* the crash: the worker held mid-chain */
		sem_post(&resume);
		kvs_cache_owner_free(c, ow);
		kvs_cache_destroy(c);
		c2 = mk(64 * PAGE);
		CHECK_EQ(kvs_persist_adopt(c2, fds, (uint32_t)n, &r), 0);
		CHECK_EQ(r.blocks_kept, 0u); /* block 0 not yet marked */
		CHECK_EQ(r.unverified, (uint64_t)BLOCKS);
		kvs_cache_destroy(c2);
	}
	sem_destroy(&hashed);
	sem_destroy(&resume);
	o = run(NULL, 64 * PAGE, CLEAN);
	CHECK_EQ(o.r.blocks_kept, 2u * BLOCKS);
}

int main(void)
{
	kvs_log_set_level(KVS_LOG_ERROR);
	test_scenarios();
	test_twice();
	test_tenants();
	test_forgotten_while_hashed();
	test_unverified();
	return check_summary("test_persist");
}
