/*
 * policy_run.h - a leaf-only eviction policy driving a real cache
 * (service/cache/cache.c), for the policy tests (test_policy_2q,
 * test_policy_learn): requests that share prefixes, with evictions, pins
 * held a while and aborts; every cache invariant holds after each step
 * (kvs_cache_check: a pinned block stays, a parent never goes before its
 * children), and prefix closure too: no block of a chain is present after
 * its first missing one. Include after kvs_check.h.
 */
#ifndef KVS_TEST_POLICY_RUN_H
#define KVS_TEST_POLICY_RUN_H

#include <stdlib.h>

#include "kvs_cache.h"

/* ---- through the cache ------------------------------------------------ */

#define CPAGE (64u << 10)
#define CSLOTS 32
#define CMAXN 12

/* Request d's chain: block i is shared by the documents d >> (3 - i) groups
 * (8, 4, 2 of them for blocks 0, 1, 2), unique from block 3 on. */
static uint32_t make_chain(uint32_t d, uint32_t n, const kvs_layout *l,
			   kvs_hash *h)
{
	uint32_t toks[CMAXN * 16];

	for (uint32_t i = 0; i < n; i++) {
		uint32_t g = i < 3 ? d >> (3 - i) : d;

		for (uint32_t j = 0; j < 16; j++)
			toks[i * 16 + j] = g * 7919u + i * 104729u + j;
	}
	n = (uint32_t)kvs_hash_chain(kvs_hash_layout_seed(l), 16, toks, n * 16,
				     h, CMAXN);
	return n;
}

static void policy_cache_run(const char *name, const char *policy,
			     unsigned seed)
{
	kvs_counters st = { 0 };
	kvs_cache_config cfg = { .host_bytes = CSLOTS * CPAGE, .page_bytes = CPAGE,
				 .policy = policy, .max_leases = 64 };
	kvs_layout l = { .model = "m", .layers = 1, .kv_heads = 1,
			 .head_dim = CPAGE / 64, .block_tokens = 16,
			 .tp_size = 1, .dtype = KVS_DTYPE_FP16 };
	kvs_hash h[CMAXN];
	kvs_block b[CMAXN];
	kvs_owner *o[2];
	kvs_cache *c = NULL;
	kvs_ns_desc hello = { .model = l.model, .adapter = "", .layers = l.layers,
			      .kv_heads = l.kv_heads, .head_dim = l.head_dim,
			      .block_tokens = l.block_tokens, .tp_rank = l.tp_rank,
			      .tp_size = l.tp_size, .dtype = l.dtype };
	uint64_t held = 0, lease, bb;
	uint32_t ns;
	int n, hits = 0;

	srand(seed);
	CHECK(kvs_cache_create(&cfg, &st, &c) == 0);
	if (!c)
		return;
	for (int i = 0; i < 2; i++) {
		o[i] = kvs_cache_owner_new(c);
		CHECK(kvs_cache_attach(c, o[i], &hello, 0, &ns, &bb) == 0);
	}
	for (int step = 0; step < 20000; step++) {
		/* Skewed: low documents are popular. */
		uint32_t d = (uint32_t)(rand() % 64);
		uint32_t len = 1 + (uint32_t)(rand() % CMAXN), k;

		d = d * d / 64;
		len = make_chain(d, len, &l, h);
		n = kvs_cache_lookup(c, o[0], h, len, &lease, b);
		CHECK(n >= 0);
		k = n > 0 ? (uint32_t)n : 0;
		hits += (int)k;
		/* Closure: nothing after the first miss is cached. */
		for (uint32_t j = k + 1; j < len; j++) {
			uint64_t l2;

			CHECK_EQ(kvs_cache_lookup(c, o[1], &h[j], 1, &l2, b), 0);
		}
		/* Sometimes the read lease is kept a while, so that pinned
		 * blocks sit in the way of evictions. */
		if (n > 0 && !held && rand() % 4 == 0) {
			held = lease;
		} else if (n > 0) {
			CHECK(kvs_cache_release(c, o[0], lease) >= 0);
		}
		if (held && rand() % 8 == 0) {
			CHECK(kvs_cache_release(c, o[0], held) >= 0);
			held = 0;
		}
		n = kvs_cache_reserve(c, o[0], h, len, &lease, b);
		CHECK(n >= 0 || n == KVS_E_FULL);
		if (n > 0) {
			if (rand() % 10 == 0)
				CHECK_EQ(kvs_cache_abort(c, o[0], lease), n);
			else
				CHECK_EQ(kvs_cache_commit(c, o[0], lease), n);
		}
		if (kvs_cache_check(c) != 0) {
			CHECK(!"cache invariants");
			break;
		}
	}
	printf("%s: cache run: %d blocks hit, %lld evicted\n", name, hits,
	       (long long)st.blocks_evicted);
	CHECK(st.blocks_evicted > 0 && hits > 0);
	if (held)
		CHECK(kvs_cache_release(c, o[0], held) >= 0);
	CHECK(kvs_cache_check(c) == 0);
	kvs_cache_owner_free(c, o[0]);
	kvs_cache_owner_free(c, o[1]);
	kvs_cache_destroy(c);
}

#endif /* KVS_TEST_POLICY_RUN_H */
