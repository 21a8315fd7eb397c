/*
 * kvs_resp.h - RESP2 (the Redis serialization protocol): command encoders
 * and an incremental reply parser. Pure: no sockets, no allocation after
 * the parser grew to the size of the largest reply it kept.
 *
 * The parser is fed bytes as they arrive, split anywhere (one byte at a
 * time works), and builds one top-level reply at a time as a small tree of
 * kvs_resp_val in parser-owned memory. Bulk strings are handled three ways:
 *  - expected: before a reply starts the caller may name destination
 *    buffers (kvs_resp_expect); a top-level bulk string of exactly their
 *    total length is written straight into them, no intermediate copy, and
 *    the caller may read the socket into them itself (kvs_resp_direct) while
 *    the payload streams in. A bulk string of another length is skipped and
 *    flagged KVS_RESP_DROPPED (the destination's content is then
 *    unspecified);
 *  - kept: other bulk strings up to the parser's keep limit are copied into
 *    the parser and NUL-terminated (CLUSTER SLOTS hosts, error texts);
 *  - dropped: longer ones are skipped, flagged KVS_RESP_DROPPED, str NULL.
 *
 * Limits (a reply past one is a protocol error, -EPROTO): a header or
 * simple-string line of KVS_RESP_LINE_MAX bytes, a bulk string of 512 MiB
 * (Redis's own limit), nesting KVS_RESP_DEPTH_MAX deep, KVS_RESP_ELEMS_MAX
 * values in one reply. Tighter limits per reply (kvs_resp_limit) follow
 * the command the reply answers: a caller that sent GET says "no arrays,
 * at most the value's bytes", so that a hostile or broken peer cannot make
 * the parser hold more than the command needs. An array header is refused
 * at once when its elements could not fit the bytes left (each takes 3 at
 * least), so a header alone never reserves more than its budget allows.
 *
 * Memory: the parser keeps what it grew to for the next reply, up to
 * KVS_RESP_KEEP_VALS values and KVS_RESP_KEEP_ARENA bytes of kept strings;
 * past that it frees them when the next reply starts (one large CLUSTER
 * SLOTS reply does not stay resident on every connection).
 *
 * Errors: 0 or a count on success, -errno otherwise: -EPROTO (malformed
 * input; the parser must be reset before more input), -ENOSPC (encoder
 * output does not fit), -ENOMEM, -EINVAL, -EBUSY (expect in mid-reply).
 * Thread: a parser belongs to one thread; the encoders are reentrant.
 */
#ifndef KVS_RESP_H
#define KVS_RESP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define KVS_RESP_LINE_MAX 4096
#define KVS_RESP_DEPTH_MAX 8
#define KVS_RESP_ELEMS_MAX (1u << 20)
#define KVS_RESP_BULK_MAX (512ll << 20)
#define KVS_RESP_IOV_MAX 8 /* destination buffers of one expected bulk */
#define KVS_RESP_KEEP_VALS 256        /* values kept across replies */
#define KVS_RESP_KEEP_ARENA (16u << 10) /* kept-string bytes across replies */

typedef enum kvs_resp_type {
	KVS_RESP_STATUS = 1, /* +OK */
	KVS_RESP_ERROR,      /* -ERR ... */
	KVS_RESP_INT,        /* :42 */
	KVS_RESP_BULK,       /* $3 foo */
	KVS_RESP_ARRAY,      /* *2 ... */
	KVS_RESP_NIL,        /* $-1 or *-1 */
} kvs_resp_type;

/* Value flags. */
#define KVS_RESP_DIRECT 0x1u  /* bulk: payload written to the expected buffers */
#define KVS_RESP_DROPPED 0x2u /* bulk: payload skipped (too long, or not the
			       * expected length); str is NULL */

typedef struct kvs_resp_val {
	int type;        /* kvs_resp_type */
	uint32_t flags;  /* KVS_RESP_DIRECT, KVS_RESP_DROPPED */
	int64_t n;       /* INT: the value; STATUS, ERROR, BULK: length in
			  * bytes; ARRAY: element count; NIL: -1 */
	const char *str; /* STATUS, ERROR, kept BULK: the bytes, NUL-terminated
			  * (a bulk may hold NULs); NULL otherwise */
	uint32_t child;  /* ARRAY: index of element 0 (see kvs_resp_elem) */
} kvs_resp_val;

typedef struct kvs_resp_parser kvs_resp_parser;

/*
 * kvs_resp_parser_create - a parser that keeps bulk strings of up to
 * @keep_max bytes (longer ones are dropped unless expected).
 * Errors: -ENOMEM. Ownership: *out until kvs_resp_parser_free().
 */
int kvs_resp_parser_create(size_t keep_max, kvs_resp_parser **out);
void kvs_resp_parser_free(kvs_resp_parser *p);

/* kvs_resp_reset - forget any partial reply and the expectation (after a
 * protocol error, or when the connection is new). */
void kvs_resp_reset(kvs_resp_parser *p);

/*
 * kvs_resp_expect - the next top-level reply, if it is a bulk string of
 * exactly the total length of @iov (@iovcnt <= KVS_RESP_IOV_MAX buffers),
 * is written into @iov. @iovcnt 0 clears the expectation. Cleared when
 * that reply completes (or by reset). Call between replies only.
 * Errors: -EBUSY (a reply is partly parsed), -EINVAL (too many buffers).
 * Ownership: @iov (the array and the buffers) must stay valid until that
 * reply completes or the parser is reset; the array is not copied.
 */
int kvs_resp_expect(kvs_resp_parser *p, const struct iovec *iov, int iovcnt);

/*
 * kvs_resp_limits - what one reply may take: @bytes on the wire (header
 * lines, payloads and CRLFs; 0: no budget but the fixed limits), @elems
 * values (a reply that is one value counts 1; an array counts itself and
 * every element; 0: KVS_RESP_ELEMS_MAX), @depth levels of arrays (0: an
 * array reply is a protocol error; at most KVS_RESP_DEPTH_MAX).
 */
typedef struct kvs_resp_limits {
	uint64_t bytes;
	uint32_t elems;
	uint32_t depth;
} kvs_resp_limits;

/*
 * kvs_resp_limit - the limits of the next replies (kept until changed;
 * @l NULL: the fixed limits only). Call between replies only.
 * Errors: -EBUSY (a reply is partly parsed), -EINVAL (depth too large).
 */
int kvs_resp_limit(kvs_resp_parser *p, const kvs_resp_limits *l);

/* kvs_resp_parser_mem - bytes the parser holds now (for tests and stats). */
size_t kvs_resp_parser_mem(const kvs_resp_parser *p);

/*
 * kvs_resp_parse - consume bytes of @buf[@len]. *@used is set to the bytes
 * consumed. Returns 1 when a top-level reply is complete (it ended at
 * *@used; the rest of @buf belongs to later replies), 0 when every byte was
 * consumed and the reply is still partial, -EPROTO on malformed input.
 * Ownership: the reply (kvs_resp_reply) is the parser's, valid until the
 * next kvs_resp_parse, kvs_resp_expect or kvs_resp_reset.
 */
int kvs_resp_parse(kvs_resp_parser *p, const uint8_t *buf, size_t len,
		   size_t *used);

/* kvs_resp_reply - the complete reply after kvs_resp_parse returned 1. */
const kvs_resp_val *kvs_resp_reply(const kvs_resp_parser *p);

/* kvs_resp_elem - element @i of array @v, or NULL when out of range or
 * @v is not an array. Valid as long as the reply. */
const kvs_resp_val *kvs_resp_elem(const kvs_resp_parser *p,
				  const kvs_resp_val *v, size_t i);

/*
 * kvs_resp_direct - while an expected bulk payload streams in, the part of
 * the destination still to fill, as up to @max iovecs in @iov, for the
 * caller to read the socket straight into (readv). Returns the iovec count,
 * 0 when the parser is not inside an expected payload.
 * kvs_resp_direct_done - @n bytes (at most what kvs_resp_direct offered)
 * were written there; the parser moves on as if it had parsed them.
 */
int kvs_resp_direct(const kvs_resp_parser *p, struct iovec *iov, int max);
void kvs_resp_direct_done(kvs_resp_parser *p, size_t n);

/*
 * Encoders: each writes into @buf[@cap] and returns the bytes written, or
 * -ENOSPC when they do not fit (nothing useful is written then).
 * kvs_resp_encode_cmd: a whole command, @argc bulk strings (@lens NULL:
 * strlen of each).
 * kvs_resp_encode_array: "*N\r\n", the header of an N-argument command.
 * kvs_resp_encode_bulk: "$len\r\n<s>\r\n".
 * kvs_resp_encode_bulk_hdr: "$len\r\n" only; the caller sends the @len
 * payload bytes and "\r\n" itself (a writev of caller memory).
 */
int kvs_resp_encode_cmd(uint8_t *buf, size_t cap, int argc,
			const char *const *argv, const size_t *lens);
int kvs_resp_encode_array(uint8_t *buf, size_t cap, size_t n);
int kvs_resp_encode_bulk(uint8_t *buf, size_t cap, const void *s, size_t len);
int kvs_resp_encode_bulk_hdr(uint8_t *buf, size_t cap, size_t len);

#endif /* KVS_RESP_H */
