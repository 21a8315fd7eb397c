/*
 * kvs_wire.h - the wire format between libkvshare and kvshared, and its codec.
 *
 * Every message, request or reply, is a fixed 24-byte header followed by
 * `len` bytes of payload. All integers are little-endian. A reply carries the
 * request's opcode and req_id, and a status (0 or a negative error code);
 * replies come in request order, so clients may pipeline. docs/protocol.md
 * describes every message field by field.
 *
 * The codec is pure: it turns bytes into structs and back, knows nothing of
 * sockets, and is what the fuzz targets exercise. Decoders never read past the
 * buffer they are given and never allocate; decoded hash arrays point into
 * that buffer (possibly unaligned: read them with kvs_wire_hash_at()).
 *
 * Thread: every function is reentrant.
 */
#ifndef KVS_WIRE_H
#define KVS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_types.h"

#define KVS_WIRE_MAGIC 0x3153564bu /* "KVS1" */
#define KVS_WIRE_VERSION 1
#define KVS_WIRE_HDR_SIZE 24
#define KVS_WIRE_MAX_PAYLOAD (1u << 20) /* 1 MiB: fits KVS_MAX_HASHES hashes */
#define KVS_WIRE_HASH_SIZE 16
#define KVS_WIRE_BLOCK_SIZE 16 /* one kvs_block entry in a reply */

/* Every opcode once: X(NAME, number, "name"). The enum and
 * kvs_wire_opcode_name() are made from this list; what the daemon does with
 * each is its command table (service/server/command.c). */
#define KVS_WIRE_OPCODES(X)                                                   \
	X(HELLO, 1, "hello")                                                  \
	X(LOOKUP, 2, "lookup")                                                \
	X(RESERVE, 3, "reserve")                                              \
	X(COMMIT, 4, "commit")                                                \
	X(ABORT, 5, "abort")                                                  \
	X(RELEASE, 6, "release")                                              \
	X(STATS, 7, "stats")                                                  \
	/* operator messages: kvs_wire_admin.h */                             \
	X(LIST, 8, "list")                                                    \
	X(INSPECT, 9, "inspect")                                              \
	X(EVICT, 10, "evict")                                                 \
	X(PIN, 11, "pin")                                                     \
	X(UNPIN, 12, "unpin")                                                 \
	X(WATCH, 13, "watch")                                                 \
	X(EVENT, 14, "event") /* daemon to a WATCH subscriber, unasked */     \
	X(VERIFY, 15, "verify")                                               \
	X(REPORT, 16, "report")                                               \
	X(FASTATTACH, 17, "fastattach")                                        \
	X(HANDOVER, 18, "handover")                                            \
	X(DESCRIBE, 19, "describe")

enum kvs_opcode {
#define KVS_WIRE_OP_ENUM(op, num, name) KVS_OP_##op = num,
	KVS_WIRE_OPCODES(KVS_WIRE_OP_ENUM)
#undef KVS_WIRE_OP_ENUM
	KVS_OP__COUNT
};

/* HELLO flags */
#define KVS_HELLO_CONTROL 0x1u /* no layout: control-only connection */
#define KVS_HELLO_GPU 0x2u     /* the worker maps the GPU arena and wants its
				* reserves in the GPU tier (needs a layout) */

/* LOOKUP flags (the request's flags word). Any other bit, or REMOTE
 * without QUERY, is refused (KVS_E_PROTO). */
#define KVS_LOOKUP_QUERY 0x1u  /* count only: nothing pinned, promoted or
				* fetched, no lease; the reply is a u64 count */
#define KVS_LOOKUP_REMOTE 0x2u /* with QUERY: also how far the chain goes on
				* in the remote tier (EXISTS, no bytes),
				* within --remote-query-timeout */
/* RESERVE flags. Any other bit, or AFTER with count 0, is KVS_E_PROTO. */
#define KVS_RESERVE_AFTER 0x1u /* hashes[0] is the parent: a committed block
				* that is linked to, never reserved */

typedef struct kvs_wire_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t opcode;
	uint32_t len;    /* payload bytes after the header */
	int32_t status;  /* replies: 0 or a negative error; requests: 0 */
	uint64_t req_id; /* chosen by the client, echoed in the reply */
} kvs_wire_hdr;

/* HELLO request payload, decoded. Strings point into the buffer and are NOT
 * NUL-terminated: use the lengths. */
typedef struct kvs_wire_hello {
	uint32_t flags;
	uint32_t layers, kv_heads, head_dim, block_tokens, tp_rank, tp_size;
	uint32_t dtype;
	const char *model;
	const char *adapter;
	const char *salt;
	uint16_t model_len, adapter_len, salt_len;
} kvs_wire_hello;

/* HELLO reply payload. The arenas' fds travel with it by SCM_RIGHTS, in
 * this order: the host arena memfd (unless control-only), then the GPU
 * arena's fd (only to a KVS_HELLO_GPU client of a daemon whose GPU tier is
 * on). 32 bytes with arena_count 0 or 1, 48 with arena_count 2 (the gpu_*
 * fields), so a reply to a client that did not ask for the GPU arena is
 * the same as before the GPU tier existed. */
typedef struct kvs_wire_hello_reply {
	uint32_t ns_id;
	uint32_t arena_count;  /* fds attached: 0, 1 (host) or 2 (host, gpu) */
	uint64_t block_bytes;
	uint64_t host_arena_bytes;
	uint64_t host_arena_id; /* changes with every daemon start */
	/* arena_count 2 only */
	uint64_t gpu_arena_bytes; /* a multiple of the device's granularity */
	uint32_t gpu_kind;      /* how to import the fd: 1 CUDA VMM POSIX fd,
				 * 2 the fake device (a memfd; tests only) */
	uint32_t gpu_device;    /* the daemon's device ordinal */
} kvs_wire_hello_reply;

/* LOOKUP and RESERVE request payload. */
typedef struct kvs_wire_hashes {
	uint32_t count;
	uint32_t flags;
	const uint8_t *hashes; /* count * 16 bytes, points into the buffer */
} kvs_wire_hashes;

/* LOOKUP and RESERVE reply payload: a lease and count block entries. */
typedef struct kvs_wire_blocks {
	uint64_t lease;
	uint32_t count;
	const uint8_t *blocks; /* count * 16 bytes, points into the buffer */
} kvs_wire_blocks;

/* COMMIT, ABORT and RELEASE: request carries a lease, reply a count. */

/* REPORT request payload: a kvs_engine_report, its fields as u64 in this
 * order; the reply is a count (0). */
#define KVS_WIRE_REPORT_FIELDS(X)                                             \
	X(hit_tokens) X(loaded_blocks) X(loaded_bytes) X(load_us)             \
	X(load_errors) X(published_blocks) X(publish_us) X(skipped_blocks)
#define KVS_WIRE_REPORT_SIZE 64

/* FASTATTACH: the request is u32 flags (0), u32 0; the reply carries two
 * fds (the domain's index, then the connection's pin area) and this. */
#define KVS_WIRE_FAST_REQ_SIZE 8
#define KVS_WIRE_FAST_REPLY_SIZE 40
typedef struct kvs_wire_fast_reply {
	uint64_t index_bytes; /* map this much of the index fd, read-only */
	uint64_t pins_bytes;  /* map this much of the pin area fd, read-write */
	uint64_t arena_id;    /* the host arena the index describes */
	uint32_t entries;     /* index entries, a power of two */
	uint32_t pin_cap;     /* pins in the pin area */
	uint32_t version;     /* KVS_FAST_VERSION of kvs_fast.h */
} kvs_wire_fast_reply;

/*
 * kvs_wire_hdr_encode - write @h into @buf (KVS_WIRE_HDR_SIZE bytes).
 */
void kvs_wire_hdr_encode(const kvs_wire_hdr *h, uint8_t *buf);

/*
 * kvs_wire_hdr_decode - parse a header from @buf (@n bytes available).
 * Returns 0; -EAGAIN when n < KVS_WIRE_HDR_SIZE; KVS_E_PROTO for a bad magic;
 * KVS_E_VERSION for an unsupported version; KVS_E_TOOBIG when len is over
 * @max_payload. The header is filled even on KVS_E_VERSION and KVS_E_TOOBIG,
 * so the caller can answer with the request's id.
 */
int kvs_wire_hdr_decode(const uint8_t *buf, size_t n, uint32_t max_payload,
			kvs_wire_hdr *h);

/*
 * Payload encoders: each writes into @buf (of @cap bytes) and returns the
 * number of bytes written, or -ENOBUFS if @cap is too small, or -EINVAL /
 * KVS_E_TOOMANY for arguments that cannot be encoded.
 */
int kvs_wire_hello_encode(const kvs_layout *layout, uint8_t *buf, size_t cap);
/* kvs_wire_hello_encode_flags - the same with extra HELLO flags (only
 * KVS_HELLO_GPU, and only with a layout; else -EINVAL). */
int kvs_wire_hello_encode_flags(const kvs_layout *layout, uint32_t flags,
				uint8_t *buf, size_t cap);
int kvs_wire_hello_reply_encode(const kvs_wire_hello_reply *r, uint8_t *buf,
				size_t cap);
int kvs_wire_hashes_encode(const kvs_hash *hashes, uint32_t count,
			   uint32_t flags, uint8_t *buf, size_t cap);
int kvs_wire_blocks_encode(uint64_t lease, const kvs_block *blocks,
			   uint32_t count, uint8_t *buf, size_t cap);
int kvs_wire_u64_encode(uint64_t v, uint8_t *buf, size_t cap);
int kvs_wire_report_encode(const kvs_engine_report *r, uint8_t *buf,
			   size_t cap);

/*
 * Payload decoders: parse exactly @n bytes. Return 0, or KVS_E_PROTO when the
 * payload is truncated, has trailing bytes, or a field is out of range
 * (string over KVS_NAME_MAX, unknown flags); KVS_E_TOOMANY when a count is over
 * KVS_MAX_HASHES.
 */
int kvs_wire_hello_decode(const uint8_t *p, size_t n, kvs_wire_hello *out);
int kvs_wire_hello_reply_decode(const uint8_t *p, size_t n,
				kvs_wire_hello_reply *out);
int kvs_wire_hashes_decode(const uint8_t *p, size_t n, kvs_wire_hashes *out);
/* LOOKUP's: the same, its flags KVS_LOOKUP_* (out->flags). */
int kvs_wire_lookup_decode(const uint8_t *p, size_t n, kvs_wire_hashes *out);
/* RESERVE's: the same, its flags KVS_RESERVE_* (out->flags). */
int kvs_wire_reserve_decode(const uint8_t *p, size_t n, kvs_wire_hashes *out);
int kvs_wire_blocks_decode(const uint8_t *p, size_t n, kvs_wire_blocks *out);
int kvs_wire_u64_decode(const uint8_t *p, size_t n, uint64_t *out);
int kvs_wire_report_decode(const uint8_t *p, size_t n, kvs_engine_report *out);
/* FASTATTACH: request flags (must be 0), reply fields. KVS_E_PROTO for a
 * wrong length, a nonzero reserved field or flag, entries not a power of
 * two or pin_cap 0. Encoders return the bytes written or -ENOBUFS. */
int kvs_wire_fast_req_encode(uint32_t flags, uint8_t *buf, size_t cap);
int kvs_wire_fast_req_decode(const uint8_t *p, size_t n, uint32_t *flags);
int kvs_wire_fast_reply_encode(const kvs_wire_fast_reply *r, uint8_t *buf,
			       size_t cap);
int kvs_wire_fast_reply_decode(const uint8_t *p, size_t n,
			       kvs_wire_fast_reply *r);

/*
 * DESCRIBE: an engine's side records of blocks of its namespace (wire_desc.c,
 * docs/protocol.md). The request is u16 version (KVS_WIRE_DESC_VERSION),
 * u16 flags (0), u32 count (1..KVS_WIRE_DESC_MAX), then count records of
 * KVS_WIRE_DESC_FIXED bytes (hash lo, hi; u8 hash_kind, hash_len,
 * parent_kind, parent_len; u32 block_size, ntokens; u16 lora_len, extra_len)
 * each followed by the engine hash, the parent hash, the u32 tokens, the
 * LoRA name and the extra keys. The reply is a count (records kept).
 */
#define KVS_WIRE_DESC_VERSION 1
#define KVS_WIRE_DESC_MAX 1024u
#define KVS_WIRE_DESC_HEAD 8
#define KVS_WIRE_DESC_FIXED 32
typedef struct kvs_wire_describe {
	uint32_t count;
	const uint8_t *recs; /* the records, checked whole by the decoder */
	size_t len;
} kvs_wire_describe;
/* kvs_wire_desc_size - bytes @d takes on the wire (its bounds unchecked). */
size_t kvs_wire_desc_size(const kvs_block_desc *d);
/* kvs_wire_describe_encode - the request for @d[0..n): bytes written, or
 * -EINVAL (n 0 or over KVS_WIRE_DESC_MAX, a record out of its bounds),
 * -ENOBUFS. */
int kvs_wire_describe_encode(const kvs_block_desc *d, uint32_t n, uint8_t *buf,
			     size_t cap);
/* kvs_wire_describe_decode - KVS_E_VERSION for another version, KVS_E_TOOBIG
 * for a record past KVS_DESC_*_MAX, KVS_E_TOOMANY past KVS_WIRE_DESC_MAX,
 * KVS_E_PROTO for anything else malformed. */
int kvs_wire_describe_decode(const uint8_t *p, size_t n, kvs_wire_describe *out);
/* kvs_wire_desc_next - the record at *@p of a decoded request, *@p moved
 * past it. Its pointers are into the payload; its tokens are little-endian
 * u32s, maybe unaligned (read them as bytes). */
void kvs_wire_desc_next(const uint8_t **p, kvs_block_desc *d);

/* Element accessors for decoded arrays (which may be unaligned). */
kvs_hash kvs_wire_hash_at(const uint8_t *hashes, uint32_t i);
kvs_block kvs_wire_block_at(const uint8_t *blocks, uint32_t i);

/* The opcode's name ("lookup"), or "unknown". */
const char *kvs_wire_opcode_name(uint32_t opcode);

#endif /* KVS_WIRE_H */
