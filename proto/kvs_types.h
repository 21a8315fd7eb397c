/*
 * kvs_types.h - kvshare's shared vocabulary, the one public header of proto/:
 * the block hash, the error codes and kvs_strerror(), the stored element
 * types, the tiers and KVS_NONE; a worker's layout, a block and its status,
 * the lease and the request's limit; and the functions of no connection (the
 * default socket path, a layout's sizes, the chained hashes). kvshare.h
 * includes it; storage/ and kernels/ include only this header of the
 * installed ones, never kvshare.h (see docs/architecture.md, "Dependency
 * rules"). Needs only <stddef.h> and <stdint.h>.
 *
 * Thread: types and constants; the functions are pure (any thread).
 */
#ifndef KVS_TYPES_H
#define KVS_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The API's version, which kvs_version() returns and `kvshared --version`
 * prints. */
#define KVSHARE_VERSION_MAJOR 0
#define KVSHARE_VERSION_MINOR 4 /* 3: kvs_connect_timeout, kvs_set_timeout;
				 * 4: kvs_reserve_after, kvs_hash_key,
				 * kvs_block_read_regions/write_regions */

/* kvshare's own error codes: one reserved negative range. */
enum {
	KVS_E_BASE = -2000,
	KVS_E_PROTO = -2001,        /* malformed or truncated message */
	KVS_E_VERSION = -2002,      /* protocol version not supported */
	KVS_E_OPCODE = -2003,       /* unknown opcode */
	KVS_E_TOOBIG = -2004,       /* message length over the limit */
	KVS_E_TOOMANY = -2005,      /* hash count over the limit */
	KVS_E_LAYOUT = -2006,       /* invalid layout (zero sizes, block too large) */
	KVS_E_ATTACHED = -2007,     /* already attached with another layout */
	KVS_E_NOTATTACHED = -2008,  /* operation needs a namespace (attach a layout) */
	KVS_E_NOLEASE = -2009,      /* no such lease */
	KVS_E_NOTOWNER = -2010,     /* the lease belongs to another connection */
	KVS_E_LEASEKIND = -2011,    /* commit/abort of a read lease */
	KVS_E_FULL = -2012,         /* cache full: every evictable block is pinned */
	KVS_E_LIMIT = -2013,        /* a per-client limit (leases, pins) is reached */
	KVS_E_DISCONNECTED = -2014, /* the daemon went away; kvs_reconnect() */
	KVS_E_NODAEMON = -2015,     /* nothing listens on the socket */
	KVS_E_DAEMON_RUNNING = -2016, /* another daemon already serves this socket */
	KVS_E_CONFIG = -2017,       /* bad configuration value */
	KVS_E_INTERNAL = -2018,     /* a bug: reported, never silently ignored */
	KVS_E_PERM = -2019,         /* the daemon does not serve this peer's uid/gid */
	KVS_E_LAST = -2020
};

/*
 * kvs_strerror - name an error code.
 * @err: a negative KVS_E_* code or -errno.
 * Returns a static string; never NULL.
 * Ownership: static storage. Thread: any.
 */
const char *kvs_strerror(int err);

/* Element types of the KV cache as stored. */
typedef enum kvs_dtype {
	KVS_DTYPE_FP16 = 1,
	KVS_DTYPE_BF16 = 2,
	KVS_DTYPE_FP32 = 3,
	KVS_DTYPE_FP8_E4M3 = 4,
	KVS_DTYPE_INT8 = 5,
	KVS_DTYPE_INT4 = 6,     /* two 4-bit codes per byte, group scales */
} kvs_dtype;

/* Tiers a block's bytes can be in. */
typedef enum kvs_tier {
	KVS_TIER_NONE = 0,
	KVS_TIER_GPU = 1,
	KVS_TIER_HOST = 2,
	KVS_TIER_SSD = 3,
	KVS_TIER_REMOTE = 4, /* shared with other machines: a lookup's blocks
			      * from it arrive in host, never served from it */
} kvs_tier;

/* No index: a uint32_t index or id (a record, a slot, a job) that names
 * nothing, as in an empty list's head or a free entry's link. */
#define KVS_NONE UINT32_MAX

/* A 128-bit chained block hash: names a whole token prefix in one namespace. */
typedef struct kvs_hash {
	uint64_t lo, hi;
} kvs_hash;

/* Per-block status in a reserve reply. */
typedef enum kvs_block_status {
	KVS_BLOCK_HIT = 0,    /* lookup: present, pinned under the lease */
	KVS_BLOCK_NEW = 1,    /* reserve: a slot is yours to write, then commit */
	KVS_BLOCK_EXISTS = 2, /* reserve: already committed by someone */
	KVS_BLOCK_BUSY = 3,   /* reserve: another client is writing it now */
	KVS_BLOCK_FULL = 4,   /* reserve: no slot could be made (all pinned) */
	KVS_BLOCK_NOPARENT = 5, /* kvs_reserve_after: the parent is not cached */
} kvs_block_status;

/* The layout of a worker's KV cache. Identical layouts share one namespace;
 * any difference (including the salt) isolates. Strings are NUL-terminated,
 * at most KVS_NAME_MAX bytes; adapter and salt may be NULL (none). */
#define KVS_NAME_MAX 255
typedef struct kvs_layout {
	const char *model;    /* model id, required */
	const char *adapter;  /* LoRA/adapter id, or NULL */
	const char *salt;     /* tenant salt, or NULL */
	uint32_t layers;      /* transformer layers in this rank */
	uint32_t kv_heads;    /* KV heads in this rank */
	uint32_t head_dim;
	uint32_t block_tokens; /* tokens per cache block */
	uint32_t tp_rank;     /* tensor-parallel rank (0 if none) */
	uint32_t tp_size;     /* tensor-parallel size (1 if none) */
	kvs_dtype dtype;      /* stored element type */
} kvs_layout;

/* One block in a lookup or reserve reply. */
typedef struct kvs_block {
	uint64_t offset;  /* byte offset of the block in its tier's arena */
	uint32_t gen;     /* slot generation: detects stale references */
	uint8_t tier;     /* kvs_tier */
	uint8_t status;   /* kvs_block_status */
} kvs_block;

typedef uint64_t kvs_lease;

/* Limits of one request. */
#define KVS_MAX_HASHES 16384

/*
 * kvs_default_socket_path - the daemon's default socket path:
 * $XDG_RUNTIME_DIR/kvshare/kvshared.sock, else /tmp/kvshare-$UID/kvshared.sock.
 * @buf, @len: where to write it, NUL-terminated.
 * Errors: -ENAMETOOLONG if it does not fit.
 * Ownership: caller's buffer. Thread: any.
 */
int kvs_default_socket_path(char *buf, size_t len);

/*
 * kvs_dtype_bytes - bytes of one stored element of @dtype, 0 if unknown;
 * INT4 packs two elements per byte and says 1. The size of a block, scales
 * included, is kvs_layout_block_bytes().
 * Thread: any.
 */
size_t kvs_dtype_bytes(kvs_dtype dtype);

/*
 * kvs_dtype_name - @dtype as the tools, the daemon's HTTP API and the docs
 * spell it: fp16, bf16, fp32, fp8, int8, int4; "unknown" for any other
 * value. kvs_dtype_parse - the reverse into *@out, "fp8_e4m3" also naming
 * fp8. Errors: -EINVAL (no such name; *@out unchanged).
 * Thread: any.
 */
const char *kvs_dtype_name(kvs_dtype dtype);
int kvs_dtype_parse(const char *name, kvs_dtype *out);

/*
 * kvs_layout_block_bytes - bytes of one block of @layout:
 * layers * 2 (K and V) * block_tokens * kv_heads * head_dim * dtype bytes
 * for the plain dtypes; the quantized ones (INT8, FP8_E4M3, INT4) add their
 * scales, zero points and K's fp16 outlier channels after the codes
 * (quantization scheme 2). docs/architecture.md shows the block's byte
 * layout for each dtype.
 * Returns 0 if any factor is zero or the product overflows.
 * Thread: any.
 */
uint64_t kvs_layout_block_bytes(const kvs_layout *layout);

/*
 * kvs_hash_layout_seed - h_{-1} for a layout, as kvs_hash_tokens() uses it;
 * and kvs_hash_chain - the same chaining from an explicit seed. Exposed so
 * that tools and tests can compute hashes without a connection.
 * Thread: any.
 */
kvs_hash kvs_hash_layout_seed(const kvs_layout *layout);
size_t kvs_hash_chain(kvs_hash seed, uint32_t block_tokens,
		      const uint32_t *tokens, size_t ntokens, kvs_hash *out,
		      size_t max);

/*
 * kvs_hash_key - the block hash of an opaque key that an engine computed
 * itself (SGLang's chained SHA-256 of a page, as hex): XXH3_128 of @seed
 * and the key's bytes, so that the same key under two layouts (model,
 * ranks, block size, dtype, salt: kvs_hash_layout_seed()) names two
 * blocks, here and in the remote tier shared with other hosts. The key
 * must name its whole prefix, as a chained hash does: kvshare looks
 * chains up by their hashes alone.
 * @seed: kvs_hash_layout_seed() of the client's layout.
 * @key, @len: the key's bytes (@key may be NULL when @len is 0).
 * Thread: any.
 */
kvs_hash kvs_hash_key(kvs_hash seed, const void *key, size_t len);

/*
 * kvs_hash_format - 32 lower-case hex digits (hi then lo) and a NUL.
 * kvs_hash_parse - the reverse; 32 hex digits exactly. Errors: -EINVAL.
 * Thread: any.
 */
void kvs_hash_format(kvs_hash h, char out[33]);
int kvs_hash_parse(const char *s, kvs_hash *out);

/* An engine's own description of a block it publishes (kvs_describe()):
 * what a router keying blocks by the engine's hashes needs (vLLM's KV
 * events). Bounds: KVS_DESC_*_MAX; the daemon refuses more. */
#define KVS_DESC_HASH_MAX 64     /* bytes of an engine block hash */
#define KVS_DESC_TOKENS_MAX 4096 /* token ids of one block */
#define KVS_DESC_LORA_MAX 255    /* bytes of the LoRA name */
#define KVS_DESC_EXTRA_MAX 4096  /* bytes of the extra keys (msgpack) */

typedef enum kvs_desc_hash_kind {
	KVS_DESC_HASH_NONE = 0,  /* no hash (a parent: the chain's first block) */
	KVS_DESC_HASH_BYTES = 1, /* bytes, as vLLM's sha256 block hashes */
	KVS_DESC_HASH_INT = 2,   /* an unsigned 64-bit integer, 8 bytes big-endian */
} kvs_desc_hash_kind;

typedef struct kvs_block_desc {
	uint64_t hash_lo, hash_hi; /* kvshare's hash of the block (kvs_hash) */
	uint32_t hash_kind;    /* kvs_desc_hash_kind, not NONE */
	uint32_t hash_len;     /* 1..KVS_DESC_HASH_MAX; INT: 8 */
	uint32_t parent_kind;  /* kvs_desc_hash_kind; NONE: no parent */
	uint32_t parent_len;   /* NONE: 0 */
	const uint8_t *engine_hash; /* hash_len bytes (INT: big-endian) */
	const uint8_t *parent_hash; /* parent_len bytes */
	uint32_t block_size;   /* tokens per block, as the engine counts them */
	uint32_t ntokens;      /* 0..KVS_DESC_TOKENS_MAX */
	const uint32_t *tokens;
	uint32_t lora_len;     /* 0: none */
	uint32_t extra_len;    /* 0: none; else one msgpack array or nil */
	const char *lora;
	const uint8_t *extra;  /* the block's extra keys (cache salt, ...) */
} kvs_block_desc;

/* An engine's counters, added to the daemon's by kvs_report(). */
typedef struct kvs_engine_report {
	uint64_t hit_tokens;       /* tokens a scheduler was told are cached */
	uint64_t loaded_blocks;    /* blocks copied into the engine's cache */
	uint64_t loaded_bytes;
	uint64_t load_us;          /* microseconds the loads took */
	uint64_t load_errors;      /* blocks that could not be loaded */
	uint64_t published_blocks; /* blocks stored and committed */
	uint64_t publish_us;       /* microseconds the publishes took */
	uint64_t skipped_blocks;   /* not published: BUSY or FULL at reserve */
} kvs_engine_report;

#ifdef __cplusplus
}
#endif
#endif /* KVS_TYPES_H */
