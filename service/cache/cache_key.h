/*
 * cache_key.h - the block table's key: (namespace, hash) mixed into one
 * 128-bit value. Its own header so that test_cache can make hash values
 * whose key collides across namespaces without the cache's internals.
 *
 * Thread: reentrant (a pure function).
 */
#ifndef KVS_CACHE_KEY_H
#define KVS_CACHE_KEY_H

#include <stdint.h>

#include "kvs_types.h" /* kvs_hash */

/* The table is keyed by (namespace, hash): a lookup and a reserve
 * (cache.c), the chain probed in a shared tier (cache_promote.c), the key a
 * store tier is given and the parent's (cache_evict.c), a block restored at
 * start (cache_tier.c), inspect and pin (cache_admin.c). The mix is an xor,
 * so it also turns a key back into the block's hash. */
static inline kvs_hash cache_ns_key(uint32_t ns_id, kvs_hash h)
{
	h.lo ^= (uint64_t)ns_id * 0x9e3779b97f4a7c15ull;
	return h;
}

#endif /* KVS_CACHE_KEY_H */
