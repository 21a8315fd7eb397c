/*
 * fast_test.h - what test_fastidx and test_fastpins share: a namespace
 * attached to a cache, the index mapped and probed as a client reads it
 * (proto/kvs_fast.h), two hashes of one home. Static inline: each test
 * takes what it uses.
 */
#ifndef KVS_FAST_TEST_H
#define KVS_FAST_TEST_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cache_key.h"
#include "kvs_cache.h"
#include "kvs_cache_admin.h"
#include "kvs_check.h"
#include "kvs_fast.h"
#include "kvs_fastidx.h"
#include "fastidx_int.h" /* fast_dom_get, fast_delete_at: step tests */
#include "kvs_log.h"

static kvs_counters stats;

typedef struct view {
	const kvs_fast_hdr *hdr;
	const kvs_fast_entry *e;
	size_t bytes;
} view;

static inline kvs_layout layout(void)
{
	return (kvs_layout){ .model = "fastidx", .layers = 1, .kv_heads = 1,
			     .head_dim = 4096 / 64, .block_tokens = 16,
			     .tp_size = 1, .dtype = KVS_DTYPE_FP16 };
}

static inline kvs_owner *attach(kvs_cache *c, uint32_t *ns)
{
	kvs_layout l = layout();
	kvs_ns_desc d = { .model = l.model, .adapter = "", .layers = l.layers,
			  .kv_heads = l.kv_heads, .head_dim = l.head_dim,
			  .block_tokens = l.block_tokens, .tp_size = l.tp_size,
			  .dtype = l.dtype };
	kvs_owner *o = kvs_cache_owner_new(c);
	uint64_t bb;

	CHECK(kvs_cache_attach(c, o, &d, 0, ns, &bb) == 0);
	return o;
}

static inline view map_index(const kvs_fast_grant *g)
{
	view v = { 0 };
	void *p = mmap(NULL, g->index_bytes, PROT_READ, MAP_SHARED,
		       g->index_fd, 0);

	CHECK(p != MAP_FAILED);
	/* Sealed: nobody but the daemon may map it writable. */
	CHECK(mmap(NULL, g->index_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		   g->index_fd, 0) == MAP_FAILED);
	CHECK(ftruncate(g->index_fd, 0) < 0);
	v.hdr = p;
	v.e = (const kvs_fast_entry *)((const uint8_t *)p + KVS_FAST_HDR_SIZE);
	v.bytes = g->index_bytes;
	return v;
}

/* A client's probe (no concurrency here): the entry of (ns, h) or -1. */
static inline int64_t probe(const view *v, uint32_t ns, kvs_hash h)
{
	uint32_t mask = v->hdr->entries - 1, home = kvs_fast_home(ns, h.lo, h.hi, mask);

	for (uint32_t k = 0; k < v->hdr->max_probe; k++) {
		const kvs_fast_entry *e = &v->e[(home + k) & mask];

		CHECK(!(e->seq & 1));
		if (e->state == KVS_FAST_EMPTY)
			return -1;
		if (e->ns == ns && e->lo == h.lo && e->hi == h.hi)
			return (home + k) & mask;
	}
	return -1;
}

/* A hash of namespace @ns with the same home as @h in 1024 entries. */
static inline kvs_hash same_home(uint32_t ns, kvs_hash h)
{
	uint32_t home = kvs_fast_home(ns, h.lo, h.hi, 1023);

	for (uint64_t i = 1;; i++) {
		kvs_hash o = { h.lo + i * 0x10001u, h.hi };

		if (kvs_fast_home(ns, o.lo, o.hi, 1023) == home)
			return o;
	}
}

#endif /* KVS_FAST_TEST_H */
