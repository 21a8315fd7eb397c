/*
 * cache_test.h - what test_cache and test_cache_random share: a cache with
 * its counters (the policy and the pinned share per uid as the test sets
 * them), a layout of a given block size, a namespace attached, chains of
 * hashes published and looked up. Static inline: each test takes what it
 * uses.
 */
#ifndef KVS_CACHE_TEST_H
#define KVS_CACHE_TEST_H

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cache_key.h" /* cache_ns_key: the table key of a block */
#include "kvs_cache.h"
#include "kvs_check.h"
#include "kvs_log.h"
#include "tier_gpu.h"

#define PAGE (64u << 10)

static kvs_counters stats;
static const char *policy = "leaf-lru";
static uint32_t pinned_share; /* mk_cache's --max-pinned-share-per-uid */

/* A layout whose block is exactly `kib` KiB: 1 layer, 1 head, fp16,
 * 16 tokens, head_dim chosen to fit. */
static inline kvs_layout layout(const char *model, const char *salt, uint32_t kib)
{
	return (kvs_layout){ .model = model, .salt = salt, .layers = 1,
			     .kv_heads = 1, .head_dim = kib * 1024 / 64,
			     .block_tokens = 16, .tp_size = 1,
			     .dtype = KVS_DTYPE_FP16 };
}

/* The namespace of layout @l, as the cache's callers describe it. */
static inline kvs_ns_desc desc_of(const kvs_layout *l)
{
	return (kvs_ns_desc){ .model = l->model, .adapter = l->adapter ? l->adapter : "",
			      .salt = (const uint8_t *)l->salt,
			      .salt_len = l->salt ? (uint32_t)strlen(l->salt) : 0,
			      .layers = l->layers, .kv_heads = l->kv_heads,
			      .head_dim = l->head_dim, .block_tokens = l->block_tokens,
			      .tp_rank = l->tp_rank, .tp_size = l->tp_size,
			      .dtype = l->dtype };
}

static inline kvs_cache *mk_cache(uint64_t bytes, uint32_t max_leases)
{
	kvs_cache_config cfg = { .host_bytes = bytes, .page_bytes = PAGE,
				 .policy = policy, .max_leases = max_leases,
				 .max_pinned_share_per_uid = pinned_share };
	kvs_cache *c = NULL;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	return c;
}

static inline kvs_owner *attach(kvs_cache *c, const kvs_layout *l)
{
	kvs_ns_desc h = desc_of(l);
	kvs_owner *o = kvs_cache_owner_new(c);
	uint32_t ns;
	uint64_t bb;

	CHECK(kvs_cache_attach(c, o, &h, 0, &ns, &bb) == 0);
	CHECK_EQ(bb, kvs_layout_block_bytes(l));
	return o;
}

/* A chain of n hashes for token stream `stream` in layout l. */
typedef struct chain {
	kvs_hash h[64];
	uint32_t n;
} chain;

static inline void mk_chain(chain *ch, const kvs_layout *l, uint32_t stream, uint32_t n)
{
	uint32_t toks[64 * 16];

	for (uint32_t i = 0; i < n * 16; i++)
		toks[i] = stream * 1000003u + i;
	ch->n = (uint32_t)kvs_hash_chain(kvs_hash_layout_seed(l), 16, toks,
					 n * 16, ch->h, 64);
}

static inline const kvs_hash *H(const chain *ch, uint32_t from)
{
	return ch->h + from;
}

static inline int publish(kvs_cache *c, kvs_owner *o, const chain *ch)
{
	kvs_block b[64];
	uint64_t lease;
	int n = kvs_cache_reserve(c, o, H(ch, 0), ch->n, &lease, b);

	if (n > 0)
		CHECK_EQ(kvs_cache_commit(c, o, lease), n);
	return n;
}

static inline int hits(kvs_cache *c, kvs_owner *o, const chain *ch, uint32_t from,
		uint32_t n)
{
	kvs_block b[64];
	uint64_t lease;
	int h = kvs_cache_lookup(c, o, H(ch, from), n, &lease, b);

	if (h > 0)
		CHECK(kvs_cache_release(c, o, lease) >= 0);
	return h;
}

#endif
