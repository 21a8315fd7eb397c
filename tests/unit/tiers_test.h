/*
 * tiers_test.h - what test_tiers and test_tiers_ssd share: a cache with its
 * counters, a namespace attached, chains of uniform hashes published with a
 * pattern of (chain, position) in each block, the SSD tier's directory
 * removed. Static inline: each test takes what it uses.
 */
#ifndef KVS_TIERS_TEST_H
#define KVS_TIERS_TEST_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvs_cache.h"
#include "kvs_check.h"
#include "kvs_log.h"
#include "tier_gpu.h"
#include "tier_ssd.h"

#define PAGE (64u << 10)

static kvs_counters stats;

static inline kvs_cache *mk_cache(uint64_t bytes, const char *policy)
{
	kvs_cache_config cfg = { .host_bytes = bytes, .page_bytes = PAGE,
				 .policy = policy, .max_leases = 64 };
	kvs_cache *c = NULL;

	memset(&stats, 0, sizeof(stats));
	CHECK_EQ(kvs_cache_create(&cfg, &stats, &c), 0);
	return c;
}

static inline kvs_owner *attach(kvs_cache *c, uint32_t head_dim, uint32_t tokens)
{
	kvs_ns_desc d = { .model = "tiers", .adapter = "", .layers = 1,
			  .kv_heads = 1, .head_dim = head_dim,
			  .block_tokens = tokens, .tp_size = 1,
			  .dtype = KVS_DTYPE_FP16 };
	kvs_owner *o = kvs_cache_owner_new(c);
	uint32_t ns;
	uint64_t bb;

	CHECK_EQ(kvs_cache_attach(c, o, &d, 0, &ns, &bb), 0);
	return o;
}

/* Chain @k of @n blocks, its hashes in @h. */
static inline void chain(uint32_t k, uint32_t n, kvs_hash *h)
{
	/* Uniform, as real block hashes are (the table hashes the low word). */
	for (uint32_t i = 0; i < n; i++) {
		uint64_t x = ((uint64_t)k << 8 | i) * 0x9e3779b97f4a7c15ull;

		h[i] = (kvs_hash){ .hi = 0x5157ull << 32 | k, .lo = x ^ (x >> 29) };
	}
}

/* Fill each new block with a pattern of (chain, position). */
static inline int publish(kvs_cache *c, kvs_owner *o, uint32_t k, uint32_t n,
		   uint8_t *base, uint64_t bytes)
{
	kvs_hash hs[64];
	kvs_block b[64];
	uint64_t lease;
	int fresh;

	chain(k, n, hs);
	fresh = kvs_cache_reserve(c, o, hs, n, &lease, b);
	if (fresh <= 0)
		return fresh;
	for (uint32_t i = 0; i < n; i++)
		if (b[i].status == KVS_BLOCK_NEW)
			memset(base + b[i].offset, (int)(k * 31 + i) & 0xff, bytes);
	CHECK_EQ(kvs_cache_commit(c, o, lease), fresh);
	return fresh;
}

/* A fresh directory for an SSD tier under $TMPDIR (else /tmp) in @dir
 * (256 bytes); NULL when it cannot be made. */
static inline char *mk_dir(char dir[256])
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, 256, "%s/kvs-test-tiers-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	return mkdtemp(dir);
}

/* Remove the SSD tier's directory: its files and its index. */
static inline void rm_dir(const char *dir)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_EQ(system(cmd), 0);
}


#endif
