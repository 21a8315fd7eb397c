/*
 * kvs_nsfile.h - the SSD tier's namespaces file: the layouts of the
 * namespaces whose blocks are on SSD, each with its id, so that a
 * restarted daemon gives the same layouts the same ids (its index names
 * blocks by namespace id).
 *
 * The file is a sequence of entries, each a u32 length and that many bytes:
 *   u32 flags, u32 layers, kv_heads, head_dim, block_tokens, tp_rank,
 *   tp_size, dtype, u16 model_len, adapter_len, salt_len, u16 zero, then,
 *   when flags is KVS_NSFILE_F_ID, the u32 namespace id (never 0), then the
 *   model, adapter and salt bytes (no NUL, each at most 255 bytes),
 * little-endian. Flags 0 is the old format, without the id: such an entry
 * has the id after the entry before it (1 for the first), as ids were
 * positional then; a file may mix both. A later entry of an id replaces
 * the earlier one (the id was given to another layout). This codec is the
 * only writer and reader (the daemon's SSD tier, the SSD filling tool): the
 * format is its own, not the wire's (an entry without the id matches the
 * HELLO payload of protocol version 1 byte for byte, so files written
 * before this codec existed load as they are). Entries are appended and
 * fdatasync'ed one at a time; a torn last entry (a crash mid append) ends
 * the list and is trimmed at the next load.
 *
 * Thread: reentrant (no state but the file).
 */
#ifndef KVS_NSFILE_H
#define KVS_NSFILE_H

#include <stddef.h>
#include <stdint.h>

#define KVS_NSFILE_NAME "namespaces"
#define KVS_NSFILE_STR_MAX 255
/* The largest entry, length word included. */
#define KVS_NSFILE_ENTRY_MAX (4 + 40 + 4 + 3 * KVS_NSFILE_STR_MAX)
#define KVS_NSFILE_F_ID 0x1u /* the entry carries its namespace id */

/* One namespace's layout (strings are not NUL-terminated). */
typedef struct kvs_nsfile_ns {
	const char *model, *adapter;
	const uint8_t *salt;
	uint32_t model_len, adapter_len, salt_len;
	uint32_t layers, kv_heads, head_dim, block_tokens, tp_rank, tp_size;
	uint32_t dtype;
	uint32_t id; /* 0: none (encoded as the old format) */
} kvs_nsfile_ns;

/* kvs_nsfile_encode - one entry (length word included) into @buf, with
 * its id unless @ns->id is 0.
 * Returns its bytes. Errors: -EINVAL (a string over 255 bytes), -ENOBUFS. */
int kvs_nsfile_encode(const kvs_nsfile_ns *ns, uint8_t *buf, size_t cap);
/* kvs_nsfile_decode - the entry at @p (@n bytes left): fills @out (its
 * strings point into @p) and returns the entry's bytes. Errors: -EAGAIN
 * (torn: fewer bytes than the entry says), -EBADMSG (not an entry). */
int kvs_nsfile_decode(const uint8_t *p, size_t n, kvs_nsfile_ns *out);

/* kvs_nsfile_append - append @ns to the file @dir/namespaces (created
 * 0600) and fdatasync it. Errors: -errno, -EINVAL. */
int kvs_nsfile_append(const char *dir, const kvs_nsfile_ns *ns);
/*
 * kvs_nsfile_load - call @fn(@arg, ns) for each entry of @dir/namespaces in
 * order (ns->id set: the entry's, or for an old one the id after the last),
 * until @fn returns nonzero or an entry is torn or bad; what follows
 * that entry is trimmed from the file. No file: 0 entries.
 * Returns the entries passed to @fn. Errors: -errno (reading), -ENOMEM.
 */
int kvs_nsfile_load(const char *dir,
		    int (*fn)(void *arg, const kvs_nsfile_ns *ns), void *arg);

#endif /* KVS_NSFILE_H */
