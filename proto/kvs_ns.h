/*
 * kvs_ns.h - a namespace's layout in bytes, one codec for every format that
 * stores one.
 *
 * The seven numbers of a layout are stored, little-endian u32, in this
 * order wherever they appear (KVS_LAYOUT_DIMS):
 *
 *   layers, kv_heads, head_dim, block_tokens, tp_rank, tp_size, dtype
 *
 * in the HELLO payload (proto/wire.c) and LIST's namespace entries
 * (proto/wire_admin.c), each at offset 4 of its record, and in a namespace
 * record (kvs_ns_encode() below). A namespace record is a u32 length and
 * that many bytes:
 *
 *   u32 flags, the seven u32, u16 model_len, adapter_len, salt_len,
 *   u16 zero, then, when flags is KVS_NS_F_ID, the u32 namespace id (never
 *   0), then the model, adapter and salt bytes (no NUL, each at most 255
 *   bytes).
 *
 * Flags 0 is the old form, without the id; its bytes after the length word
 * are the HELLO payload of protocol version 1 byte for byte. Records are
 * what the SSD tier's namespaces file holds (storage/ssd/kvs_nsfile.h), what
 * the host tier's persisted metadata keeps of each namespace
 * (service/cache/persist_fmt.h), and, without the id, what names a
 * namespace in the remote tier on every machine (kvs_rval_ns_fp()).
 *
 * Thread: pure functions.
 */
#ifndef KVS_NS_H
#define KVS_NS_H

#include <stddef.h>
#include <stdint.h>

/* The seven numbers of a layout in their stored order: X(field) for each,
 * over any struct with fields of these names. */
#define KVS_LAYOUT_DIMS(X) \
	X(layers) X(kv_heads) X(head_dim) X(block_tokens) X(tp_rank) \
	X(tp_size) X(dtype)
#define KVS_LAYOUT_DIMS_BYTES 28

/* kvs_layout_dims_put - the seven numbers of *@s (any struct with those
 * fields) at @p; kvs_layout_dims_get - the reverse. Need kvs_le.h. */
#define kvs_layout_dims_put(p, s)                                  \
	do {                                                       \
		uint8_t *kvs_p_ = (p);                             \
		const __typeof__(*(s)) *kvs_s_ = (s);              \
		KVS_LAYOUT_DIMS(KVS_LAYOUT_DIM_PUT_)               \
	} while (0)
#define KVS_LAYOUT_DIM_PUT_(f)                \
	put32(kvs_p_, (uint32_t)kvs_s_->f); \
	kvs_p_ += 4;
#define kvs_layout_dims_get(p, s)                                  \
	do {                                                       \
		const uint8_t *kvs_p_ = (p);                       \
		__typeof__(*(s)) *kvs_s_ = (s);                    \
		KVS_LAYOUT_DIMS(KVS_LAYOUT_DIM_GET_)               \
	} while (0)
#define KVS_LAYOUT_DIM_GET_(f)      \
	kvs_s_->f = get32(kvs_p_); \
	kvs_p_ += 4;

#define KVS_NS_STR_MAX 255
/* The largest record, length word included. */
#define KVS_NS_ENTRY_MAX (4 + 40 + 4 + 3 * KVS_NS_STR_MAX)
#define KVS_NS_F_ID 0x1u /* the record carries its namespace id */

/* One namespace's layout (strings are not NUL-terminated). */
typedef struct kvs_ns_layout {
	const char *model, *adapter;
	const uint8_t *salt;
	uint32_t model_len, adapter_len, salt_len;
	uint32_t layers, kv_heads, head_dim, block_tokens, tp_rank, tp_size;
	uint32_t dtype;
	uint32_t id; /* 0: none (encoded as the old form) */
} kvs_ns_layout;

/* kvs_ns_encode - one record (length word included) into @buf, with its
 * id unless @ns->id is 0.
 * Returns its bytes. Errors: -EINVAL (a string over 255 bytes or with a
 * NUL in it), -ENOBUFS. */
int kvs_ns_encode(const kvs_ns_layout *ns, uint8_t *buf, size_t cap);
/* kvs_ns_decode - the record at @p (@n bytes left): fills @out (its
 * strings point into @p) and returns the record's bytes. Errors: -EAGAIN
 * (torn: fewer bytes than the record says), -EBADMSG (not a record). */
int kvs_ns_decode(const uint8_t *p, size_t n, kvs_ns_layout *out);

#endif /* KVS_NS_H */
