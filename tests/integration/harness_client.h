/*
 * harness_client.h - the integration-test harness: connections to the
 * daemon, its stats, and the blocks tests store (layouts, token chains, byte
 * patterns, publish and verify, mappings). See harness.h.
 *
 * Thread: single-threaded tests only.
 */
#ifndef TH_HARNESS_CLIENT_H
#define TH_HARNESS_CLIENT_H

#include "harness.h"

/* ---- clients and stats ---------------------------------------------------- */

/* th_connect - kvs_connect() to the daemon, or th_fatal(). @layout may be NULL
 * (control-only). */
kvs_client *th_connect(const th_daemon *d, const kvs_layout *layout);

/*
 * th_stat - one stat's value, read through the daemon's control client
 * (opened on first use, reopened after a restart). Returns 0 or an error; a
 * missing name is -ENOENT.
 */
int th_stat(th_daemon *d, const char *name, int64_t *value);

/* th_stat_get - as th_stat(), but returns the value, or INT64_MIN after
 * printing why it could not be read. */
int64_t th_stat_get(th_daemon *d, const char *name);

/*
 * th_wait_stat - poll @name until it equals @expected or @timeout_ms passes.
 * Returns true if it did; otherwise prints the last value seen.
 * Use inside CHECK(): CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS)).
 */
bool th_wait_stat(th_daemon *d, const char *name, int64_t expected,
		  int timeout_ms);

/* A snapshot of the whole stats text, to compare counters before and after. */
typedef struct th_stats {
	char *text;
} th_stats;

/* th_stats_take - fill @s (free with th_stats_free()); th_fatal() on error. */
void th_stats_take(th_daemon *d, th_stats *s);
void th_stats_free(th_stats *s);
/* A value of a snapshot, or INT64_MIN (printed) when missing. */
int64_t th_stats_val(const th_stats *s, const char *name);
/* after - before for one name (INT64_MIN if either is missing). */
int64_t th_stats_delta(const th_stats *before, const th_stats *after,
		       const char *name);

/* ---- layouts, tokens, hashes, block contents ------------------------------- */

/*
 * th_layout - a small layout: @model, 2 layers, 2 KV heads, head_dim 64, fp16,
 * @block_tokens per block (block bytes = 1024 * block_tokens), tp 0 of 1, no
 * adapter, no salt. Tests change fields from there.
 */
kvs_layout th_layout(const char *model, uint32_t block_tokens);

/* th_tokens - @n deterministic token ids from @seed. */
void th_tokens(uint32_t *out, size_t n, uint64_t seed);

/*
 * th_chain - hashes, in namespace @l, of a prompt of @nprefix blocks of tokens
 * from @prefix_seed followed by @nsuffix blocks from @suffix_seed (two prompts
 * with the same prefix seed share their first @nprefix hashes), computed
 * without a connection (kvs_hash_layout_seed + kvs_hash_chain, which must
 * agree with kvs_hash_tokens). @out holds nprefix+nsuffix.
 * Returns the number of hashes, or th_fatal() on error.
 */
size_t th_chain(const kvs_layout *l, uint64_t prefix_seed, size_t nprefix,
		uint64_t suffix_seed, size_t nsuffix, kvs_hash *out);

/* th_pattern_fill / th_pattern_check - the bytes of block @h: a stream
 * seeded by the hash (and @salt, 0 normally, to tell writers apart). check
 * returns the first differing offset, or -1 when all @len bytes match. */
void th_pattern_fill(void *dst, size_t len, kvs_hash h, uint64_t salt);
long th_pattern_check(const void *src, size_t len, kvs_hash h, uint64_t salt);

/*
 * th_publish - reserve a chain, fill every NEW block with its pattern
 * (through kvs_block_ptr) and commit. @blocks (n entries, or NULL) receives
 * the reserve's answer.
 * Returns the number of blocks committed (NEW), or an error from reserve or
 * commit (KVS_E_INTERNAL when commit's count differs from reserve's, or a NEW
 * block has no pointer).
 */
int th_publish(kvs_client *c, const kvs_hash *h, size_t n, kvs_block *blocks);
int th_publish_salted(kvs_client *c, const kvs_hash *h, size_t n,
		      kvs_block *blocks, uint64_t salt);

/*
 * th_verify - lookup a chain, check every hit's bytes against its pattern
 * through kvs_block_ptr, release. *bad (may be NULL) gets the number of hit
 * blocks whose bytes or pointer are wrong.
 * Returns the number of hits, or an error.
 */
int th_verify(kvs_client *c, const kvs_hash *h, size_t n, size_t *bad);
int th_verify_salted(kvs_client *c, const kvs_hash *h, size_t n, size_t *bad,
		     uint64_t salt);

/* th_probe - lookup then release; the number of hits or an error. */
int th_probe(kvs_client *c, const kvs_hash *h, size_t n);

/* th_round_trip - a client is served: publish the chain of @n (at most 64)
 * blocks of layout @l from @seed, all new, and read it back bit exact, as
 * checks. Returns whether they all passed. */
bool th_round_trip(kvs_client *c, const kvs_layout *l, uint64_t seed, size_t n);

/* The mapping of this process that holds an address (from /proc/self/maps). */
typedef struct th_mapping {
	uintptr_t start, end;
	uint64_t file_offset;
	uint64_t inode;
	bool shared;       /* 's' in the permissions: MAP_SHARED */
	bool writable;
	char path[256];    /* e.g. "/memfd:kvshare-host (deleted)" */
} th_mapping;

/* th_mapping_of - find the mapping that holds [addr, addr+len).
 * Returns 0, -ENOENT when no single mapping holds the range, -errno. */
int th_mapping_of(const void *addr, size_t len, th_mapping *m);

#endif /* TH_HARNESS_CLIENT_H */
