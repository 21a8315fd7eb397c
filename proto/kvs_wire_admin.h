/*
 * kvs_wire_admin.h - the operator's messages (list, inspect, evict/flush,
 * pin/unpin, watch, verify) and their codec. Same rules as kvs_wire.h: little-endian,
 * pure, never reads past the buffer, never allocates; decoded arrays point
 * into the buffer. docs/protocol.md describes every field.
 *
 * Thread: every function is reentrant.
 */
#ifndef KVS_WIRE_ADMIN_H
#define KVS_WIRE_ADMIN_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_wire.h"

/* Operator opcodes follow the worker's (kvs_wire.h); see kvs_wire_opcode_name. */
#define KVS_WIRE_LIST_TOP_MAX 16 /* most-hit prefixes per namespace */
#define KVS_WIRE_NS_FIXED 104
#define KVS_WIRE_PREFIX_SIZE 40
#define KVS_WIRE_INSPECT_REQ_SIZE 24
#define KVS_WIRE_BLOCK_INFO_SIZE 80
#define KVS_WIRE_EVICT_REQ_SIZE 32
#define KVS_WIRE_EVICT_REPLY_SIZE 24
#define KVS_WIRE_EVENT_SIZE 32
#define KVS_WIRE_VERIFY_REQ_SIZE 8
#define KVS_WIRE_VERIFY_REPLY_FIXED 40
#define KVS_WIRE_VERIFY_FAIL_SIZE 24
#define KVS_WIRE_VERIFY_FAILED_MAX 4096 /* failures listed in one reply */

/* LIST request: which namespace (0: all) and how many top prefixes; paged
 * (16 bytes on the wire, else 8): one page of the records, from @cursor
 * (0 to start, then the reply's next). */
typedef struct kvs_wire_list_req {
	uint32_t ns;
	uint32_t top; /* 0..KVS_WIRE_LIST_TOP_MAX */
	uint32_t paged;
	uint64_t cursor;
} kvs_wire_list_req;
#define KVS_WIRE_LIST_PAGED 0x1u /* a paged reply's header flag */

/* One most-hit prefix: named by its leaf-most block. */
typedef struct kvs_wire_prefix {
	kvs_hash hash;      /* the leaf-most block (names the whole prefix) */
	uint64_t hits;      /* lookups that hit that block */
	uint64_t root_hits; /* lookups that hit the prefix's first block */
	uint32_t depth;     /* blocks in the chain */
	uint32_t flags;     /* KVS_WIRE_PREFIX_PINNED */
} kvs_wire_prefix;
#define KVS_WIRE_PREFIX_PINNED 0x1u

/* One namespace in a LIST reply. Strings are not NUL-terminated. */
typedef struct kvs_wire_ns {
	uint32_t id, layers, kv_heads, head_dim, block_tokens, tp_rank, tp_size;
	uint32_t dtype, clients, flags; /* KVS_WIRE_NS_* */
	uint64_t block_bytes, blocks, writing, hits, pinned;
	uint32_t roots, longest;
	uint16_t model_len, adapter_len;
	uint32_t ntop;
	uint32_t uid; /* KVS_WIRE_NS_TENANT: the uid owning its arena; else 0 */
	const char *model, *adapter;
	const uint8_t *top; /* decode: ntop * KVS_WIRE_PREFIX_SIZE bytes */
} kvs_wire_ns;
#define KVS_WIRE_NS_SALTED 0x1u
#define KVS_WIRE_NS_TENANT 0x2u /* in a per-uid tenant arena */
#define KVS_WIRE_NS_FLAGS (KVS_WIRE_NS_SALTED | KVS_WIRE_NS_TENANT)

/* INSPECT request: a block by hash, in namespace @ns (0: any). */
typedef struct kvs_wire_inspect_req {
	uint32_t ns;
	kvs_hash hash;
} kvs_wire_inspect_req;

/* INSPECT reply. */
typedef struct kvs_wire_block_info {
	kvs_hash hash;
	uint32_t ns;
	uint8_t tier, state;   /* kvs_tier; 1 writing, 2 ready, 3 ghost */
	uint16_t flags;        /* KVS_WIRE_INFO_* */
	uint64_t offset;
	uint32_t gen, refs, children, hits;
	uint64_t age_s;        /* seconds since the last access */
	uint32_t depth;        /* blocks from the root, 1 for a root */
	kvs_hash parent;       /* valid with KVS_WIRE_INFO_PARENT */
} kvs_wire_block_info;
#define KVS_WIRE_INFO_PINNED 0x1u /* pinned by an operator */
#define KVS_WIRE_INFO_PARENT 0x2u /* has a parent */

/* EVICT request: what to free. */
enum kvs_wire_evict_scope {
	KVS_EVICT_NAMESPACE = 1, /* every block of ns */
	KVS_EVICT_PREFIX = 2,    /* the block @hash (in ns, 0: any) and below */
	KVS_EVICT_ALL = 3,
};
#define KVS_WIRE_EVICT_FLUSH 0x1u /* flush: every tier (events say flushed) */
typedef struct kvs_wire_evict_req {
	uint32_t scope, flags, ns;
	kvs_hash hash;
} kvs_wire_evict_req;

/* EVICT reply: blocks freed, and committed blocks kept: pinned (by a lease
 * or an operator) or the prefix of a kept block. */
typedef struct kvs_wire_evict_reply {
	uint64_t freed, pinned, kept;
} kvs_wire_evict_reply;

/* PIN / UNPIN request: u32 ns (0: the namespace that holds the first hash),
 * then a kvs_wire_hashes payload (the chain from block 0). The reply is a
 * u64: blocks of the chain that are pinned (unpinned) now, from block 0 to
 * the first that is not cached. */

/* One event of an EVENT message. */
enum kvs_wire_event_kind {
	KVS_EVENT_STORED = 1,   /* committed */
	KVS_EVENT_EVICTED = 2,  /* freed to make room, or by evict */
	KVS_EVENT_PINNED = 3,
	KVS_EVENT_UNPINNED = 4,
	KVS_EVENT_FLUSHED = 5,  /* freed by flush */
};
typedef struct kvs_wire_event {
	uint32_t kind, ns;
	kvs_hash hash;
	uint64_t seq; /* per daemon, from 1; a gap means events were dropped */
} kvs_wire_event;

/* EVENT message (daemon to a subscriber, req_id of its WATCH): u32 count,
 * u32 zero, u64 dropped (events lost for this subscriber since the previous
 * message), then count events. */
typedef struct kvs_wire_events {
	uint32_t count;
	uint64_t dropped;
	const uint8_t *events; /* count * KVS_WIRE_EVENT_SIZE bytes */
} kvs_wire_events;
#define KVS_WIRE_EVENTS_MAX ((KVS_WIRE_MAX_PAYLOAD - 16) / KVS_WIRE_EVENT_SIZE)

/* VERIFY request: read back the SSD tier's blocks of namespace @ns (0: all)
 * and check them; list at most @max_failed of the failures. */
typedef struct kvs_wire_verify_req {
	uint32_t ns;
	uint32_t max_failed; /* 0..KVS_WIRE_VERIFY_FAILED_MAX */
} kvs_wire_verify_req;

/* One block that failed verification. */
typedef struct kvs_wire_verify_fail {
	kvs_hash hash;
	uint32_t ns;
	int32_t error; /* -EBADMSG: checksum or header mismatch; -EIO, ... */
} kvs_wire_verify_fail;

/* VERIFY reply: u64 checked, ok, failed, skipped, u32 count, u32 flags,
 * then count failures of KVS_WIRE_VERIFY_FAIL_SIZE bytes. */
typedef struct kvs_wire_verify_reply {
	uint64_t checked, ok, failed, skipped;
	uint32_t count; /* failures listed, <= failed */
	uint32_t flags; /* KVS_WIRE_VERIFY_SSD */
	const uint8_t *fails; /* decode: count * KVS_WIRE_VERIFY_FAIL_SIZE bytes */
} kvs_wire_verify_reply;
#define KVS_WIRE_VERIFY_SSD 0x1u /* the daemon has an SSD tier */

/* Encoders: bytes written, or -ENOBUFS / -EINVAL / KVS_E_TOOMANY. */
int kvs_wire_list_req_encode(const kvs_wire_list_req *r, uint8_t *buf, size_t cap);
/* The LIST reply is u32 count, u32 zero, then count namespace entries. */
int kvs_wire_list_hdr_encode(uint32_t count, uint8_t *buf, size_t cap);
/* A paged LIST reply's header: u32 count, u32 KVS_WIRE_LIST_PAGED, u64 next
 * (the cursor of the next page, 0 after the last); 16 bytes. */
int kvs_wire_list_page_encode(uint32_t count, uint64_t next, uint8_t *buf,
			      size_t cap);
int kvs_wire_ns_encode(const kvs_wire_ns *e, const kvs_wire_prefix *top,
		       uint8_t *buf, size_t cap);
int kvs_wire_inspect_req_encode(const kvs_wire_inspect_req *r, uint8_t *buf,
				size_t cap);
int kvs_wire_block_info_encode(const kvs_wire_block_info *i, uint8_t *buf,
			       size_t cap);
int kvs_wire_evict_req_encode(const kvs_wire_evict_req *r, uint8_t *buf,
			      size_t cap);
int kvs_wire_evict_reply_encode(const kvs_wire_evict_reply *r, uint8_t *buf,
				size_t cap);
int kvs_wire_events_hdr_encode(uint32_t count, uint64_t dropped, uint8_t *buf,
			       size_t cap);
int kvs_wire_event_encode(const kvs_wire_event *e, uint8_t *buf, size_t cap);

int kvs_wire_verify_req_encode(const kvs_wire_verify_req *r, uint8_t *buf,
			       size_t cap);
/* The reply: @r's counts and flags, then @fails[0..r->count). */
int kvs_wire_verify_reply_encode(const kvs_wire_verify_reply *r,
				 const kvs_wire_verify_fail *fails, uint8_t *buf,
				 size_t cap);

/* Decoders: exactly @n bytes, except kvs_wire_ns_decode, which decodes one
 * entry from the front of @n bytes and sets *used. 0 or KVS_E_PROTO
 * (truncated, trailing bytes, a field out of range). */
int kvs_wire_list_req_decode(const uint8_t *p, size_t n, kvs_wire_list_req *o);
int kvs_wire_list_hdr_decode(const uint8_t *p, size_t n, uint32_t *count);
/* From the front of @n bytes (16 are used). */
int kvs_wire_list_page_decode(const uint8_t *p, size_t n, uint32_t *count,
			      uint64_t *next);
int kvs_wire_ns_decode(const uint8_t *p, size_t n, kvs_wire_ns *o, size_t *used);
int kvs_wire_inspect_req_decode(const uint8_t *p, size_t n,
				kvs_wire_inspect_req *o);
int kvs_wire_block_info_decode(const uint8_t *p, size_t n,
			       kvs_wire_block_info *o);
int kvs_wire_evict_req_decode(const uint8_t *p, size_t n, kvs_wire_evict_req *o);
int kvs_wire_evict_reply_decode(const uint8_t *p, size_t n,
				kvs_wire_evict_reply *o);
int kvs_wire_events_decode(const uint8_t *p, size_t n, kvs_wire_events *o);

int kvs_wire_verify_req_decode(const uint8_t *p, size_t n,
			       kvs_wire_verify_req *o);
int kvs_wire_verify_reply_decode(const uint8_t *p, size_t n,
				 kvs_wire_verify_reply *o);

int kvs_wire_pin_req_encode(uint32_t ns, const kvs_hash *hashes,
			    uint32_t count, uint8_t *buf, size_t cap);
int kvs_wire_pin_req_decode(const uint8_t *p, size_t n, uint32_t *ns,
			    kvs_wire_hashes *o);

/* Element accessors of decoded arrays. */
kvs_wire_prefix kvs_wire_prefix_at(const uint8_t *top, uint32_t i);
kvs_wire_event kvs_wire_event_at(const uint8_t *events, uint32_t i);
kvs_wire_verify_fail kvs_wire_verify_fail_at(const uint8_t *fails, uint32_t i);

#endif /* KVS_WIRE_ADMIN_H */
