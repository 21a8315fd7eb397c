/*
 * kvs_types.h - kvshare's shared vocabulary: the block hash, the error codes
 * and kvs_strerror(), the stored element types, the tiers and KVS_NONE. kvshare.h includes it; storage/
 * and kernels/ include only this header, never kvshare.h (see
 * docs/architecture.md, "Dependency rules"). Needs only <stdint.h>.
 *
 * Thread: types and constants only.
 */
#ifndef KVS_TYPES_H
#define KVS_TYPES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* KVS_TYPES_H */
