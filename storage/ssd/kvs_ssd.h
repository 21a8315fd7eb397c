/*
 * kvs_ssd.h - the SSD segment store: blocks appended to preallocated segment
 * files, written and read asynchronously (io_uring, O_DIRECT), completions
 * delivered through an eventfd that the caller's event loop watches.
 *
 * The store knows segments, offsets and generations, nothing of the block
 * table, leases or connections (memcached's extstore is the model). A block
 * is named on disk by a location (segment, generation, offset, length); the
 * caller keeps locations in its own index (kvs_index.h).
 *
 * On-disk layout (little-endian, every offset and length a multiple of
 * 4 KiB, so that O_DIRECT works from aligned buffers):
 *   DIR/seg-NNNNN.kvs  one file per segment, segment_bytes long, allocated
 *                      with fallocate() at open.
 *   offset 0           superblock (4 KiB): magic, format, segment index,
 *                      state (free/used), segment bytes, generation.
 *   offset 4096...     records, appended: a 4 KiB header sector (magic,
 *                      format, namespace, block hash, payload length, XXH3-64
 *                      of the payload, segment generation, segment index and
 *                      record offset, XXH3-64 of the header itself) followed
 *                      by the payload, padded to 4 KiB.
 * The header has a sector of its own so that the payload is sector-aligned
 * in the file: a block that sits 4 KiB-aligned in the host arena is written
 * and read straight from and into the arena, with no copy (writev/readv of
 * header sector + payload). KV blocks are tens of KiB to MBs, so the 4 KiB
 * header costs under 6% at 64 KiB and under 0.2% at 2 MiB. For the same
 * reason there is no write-combining buffer: one block is already one large
 * sequential I/O.
 *
 * Generations: every time a segment starts a new life (first use or recycle)
 * it gets a new generation, unique over the store's life (a counter seeded
 * from the largest generation on disk and the wall clock), written to its
 * superblock and to every record header. A read whose location carries
 * another generation than the segment's is refused with -ESTALE without
 * I/O; a read whose header names another generation, namespace, hash,
 * length or position, or whose payload checksum differs, fails with
 * -EBADMSG. Success is never reported for data that did not verify.
 *
 * Space: segments are filled one at a time. When the current one is full the
 * store takes a free segment, else recycles the oldest used one (FIFO by
 * generation). Before it reuses a segment it calls the recycle callback
 * (kvs_ssd_set_recycle) with the segment and its old generation: the caller
 * drops its index entries for it and returns 0, or returns -EBUSY (pinned
 * blocks) to make the store try the next oldest. A segment with I/O in
 * flight is never recycled. When no segment can be had now (none free,
 * every used one under I/O or vetoed), the write fails with -EBUSY and
 * nothing is changed: a transient condition, not a full disk (the I/O
 * ends, the pins go); the next write tries again.
 *
 * Caveats:
 *  - A location is handed out by kvs_ssd_write() at once, but its data is
 *    on disk only when the write's completion reports 0. Index it and read
 *    it only after that.
 *  - Completions report that the kernel has the data (O_DIRECT: the device
 *    has it, without a cache flush). There is no fsync: after a power loss,
 *    recent blocks may read back as garbage, which the checksums turn into
 *    -EBADMSG, never into data. A kill -9 of the process loses nothing that
 *    completed.
 *  - On reopen, every used segment is sealed: the one that was being filled
 *    keeps its blocks but is not appended to; its free tail is lost until
 *    it is recycled (at most one segment's worth per restart).
 *  - Segment files of an index >= the segment count (a smaller size than
 *    last time) are deleted at open; a file whose superblock is invalid or
 *    of another segment size is reinitialized as free.
 *  - One process per directory: open takes an flock on DIR (-EBUSY if held).
 *  - One open file per segment: 1 TiB in 256 MiB segments is 4096 fds, past
 *    the usual soft RLIMIT_NOFILE of 1024; the daemon raises the limit.
 *
 * Errors: 0 or a count on success, -errno otherwise. Codes specific to the
 * store: -ESTALE (location of a recycled segment), -EBADMSG (header or
 * checksum mismatch: corrupt, torn or misplaced data), -EBUSY (no segment
 * can be had now: try again later), -ENOSPC (the filesystem is full, in a
 * write's completion), -EIO.
 * Thread: a kvs_ssd belongs to one thread (the daemon's loop); no locking.
 * Nothing blocks on I/O after open, except kvs_ssd_wait() and the
 * synchronous fallback (no io_uring), where each submit does the
 * pread/pwrite itself.
 */
#ifndef KVS_SSD_H
#define KVS_SSD_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_types.h" /* kvs_hash */

typedef struct kvs_ssd kvs_ssd;

/* Where a block is: what the caller keeps in its index. */
typedef struct kvs_ssd_loc {
	uint32_t seg; /* segment index */
	uint32_t len; /* payload bytes */
	uint64_t gen; /* segment generation the block was written under */
	uint64_t off; /* record offset in the segment (4 KiB aligned) */
} kvs_ssd_loc;

/* What a block is: its identity and checksum, as written in its header. */
typedef struct kvs_ssd_blk {
	uint32_t ns;   /* namespace id */
	uint32_t len;  /* payload bytes */
	kvs_hash hash; /* block hash */
	uint64_t csum; /* XXH3-64 of the payload (see KVS_SSD_CSUM) */
} kvs_ssd_blk;

enum kvs_ssd_op { KVS_SSD_OP_WRITE = 1, KVS_SSD_OP_READ = 2 };

/* One completion, as handed to the reap callback. */
typedef struct kvs_ssd_cqe {
	uint64_t cookie;  /* the caller's, from the submit */
	int res;          /* 0, or -EBADMSG, -EIO, -ENOSPC, other -errno */
	int op;           /* enum kvs_ssd_op */
	kvs_ssd_loc loc;  /* the block's location */
	kvs_ssd_blk blk;  /* write: what was written (csum filled in);
			   * read, res 0: the verified header */
	uint64_t lat_us;  /* submit to completion */
} kvs_ssd_cqe;

/* Store settings (kvs_ssd_set_flags). */
#define KVS_SSD_NO_URING 0x1u   /* synchronous pread/pwrite (tests, sandboxes) */
#define KVS_SSD_NO_DIRECT 0x2u  /* buffered I/O even where O_DIRECT works */
#define KVS_SSD_NO_PREALLOC 0x4u /* sparse segment files (ftruncate, no fallocate) */

/* Per-I/O flag (kvs_ssd_write, kvs_ssd_read). */
#define KVS_SSD_CSUM 0x1u /* blk->csum is the payload's XXH3-64, computed by the
			   * caller (at commit): written as is; on read, the
			   * header's checksum must also equal it */

/* Counters, one list for the struct and for rendering (memcached style). */
#define KVS_SSD_STATS(X)                                                     \
	X(bytes_written, "payload bytes written")                            \
	X(bytes_read, "payload bytes read and verified")                     \
	X(blocks_written, "blocks written")                                  \
	X(blocks_read, "blocks read and verified")                           \
	X(segments_total, "segments")                                        \
	X(segments_used, "segments holding blocks")                          \
	X(segments_free, "segments holding no blocks")                   \
	X(bytes_used, "bytes of used segments up to their fill point")      \
	X(recycled, "segments recycled")                                     \
	X(recycle_vetoed, "recycle callbacks that answered -EBUSY")          \
	X(write_lat_avg_us, "average write latency, us")                     \
	X(write_lat_p99_us, "p99 write latency, us (12.5% buckets)")         \
	X(read_lat_avg_us, "average read latency, us")                       \
	X(read_lat_p99_us, "p99 read latency, us (12.5% buckets)")           \
	X(corrupt_reads, "reads failed verification (-EBADMSG)")             \
	X(stale_reads, "reads of a recycled segment refused (-ESTALE)")      \
	X(enospc, "writes failed with -ENOSPC (the filesystem is full)")     \
	X(no_segment, "writes refused with -EBUSY: no segment could be had")  \
	X(eio, "I/O errors other than ENOSPC")                               \
	X(retries, "short or -EAGAIN transfers reissued")                    \
	X(inflight, "operations not yet reaped")                             \
	X(inflight_max, "most operations in the kernel at once")

typedef struct kvs_ssd_stats {
#define KVS_SSD_STATS_X(name, help) uint64_t name;
	KVS_SSD_STATS(KVS_SSD_STATS_X)
#undef KVS_SSD_STATS_X
} kvs_ssd_stats;

/*
 * kvs_ssd_recycle_fn - called from kvs_ssd_write() before segment @seg, last
 * written under generation @gen, is reused. Return 0 once every index entry
 * of (seg, gen) is dropped; -EBUSY to keep the segment (pinned blocks) and
 * make the store try the next oldest. Any other value counts as -EBUSY.
 * The callback must not call kvs_ssd_write, kvs_ssd_read or kvs_ssd_reap.
 */
typedef int (*kvs_ssd_recycle_fn)(void *arg, uint32_t seg, uint64_t gen);

/*
 * kvs_ssd_reap_fn - one completion. @c is valid during the call only. The
 * callback may submit new I/O (kvs_ssd_write/read), not call kvs_ssd_reap.
 */
typedef void (*kvs_ssd_reap_fn)(void *arg, const kvs_ssd_cqe *c);

/*
 * kvs_ssd_create - a store handle with defaults: segments of 256 MiB, size
 * 0 (must be set), queue depth 32, flags 0, no recycle callback (recycling
 * never asks).
 * Errors: -ENOMEM. Ownership: *out until kvs_ssd_close().
 */
int kvs_ssd_create(kvs_ssd **out);

/*
 * Settings, before kvs_ssd_open() only (-EBUSY after).
 * segment_bytes: a multiple of 4096, at least 64 KiB (-EINVAL).
 * size: total bytes; segments = size / segment_bytes, at least 2 (checked
 *       at open: -EINVAL).
 * queue_depth: operations in the kernel at once, 1..4096 (-EINVAL); more are
 *       queued in the store and issued as earlier ones complete.
 * flags: KVS_SSD_NO_URING | KVS_SSD_NO_DIRECT | KVS_SSD_NO_PREALLOC.
 */
int kvs_ssd_set_segment_bytes(kvs_ssd *s, uint64_t bytes);
int kvs_ssd_set_size(kvs_ssd *s, uint64_t bytes);
int kvs_ssd_set_queue_depth(kvs_ssd *s, unsigned depth);
int kvs_ssd_set_flags(kvs_ssd *s, unsigned flags);
/* kvs_ssd_set_recycle - the recycle callback (may be set at any time). */
void kvs_ssd_set_recycle(kvs_ssd *s, kvs_ssd_recycle_fn fn, void *arg);

/*
 * kvs_ssd_open - open or create the segment files under the existing
 * directory @dir. Existing valid segments keep their generations (see
 * kvs_ssd_segment_gen) and data; missing ones are created and preallocated.
 * Where O_DIRECT is refused (EINVAL: tmpfs before Linux 6.6, some FUSE) the
 * files are opened buffered: kvs_ssd_direct() says so, for the caller to
 * log. Where io_uring cannot be set up (ENOSYS, EPERM in a sandbox) the
 * store does synchronous I/O with completions still through the eventfd:
 * kvs_ssd_uring() says so.
 * Errors: -ENOENT, -ENOTDIR, -EACCES, -EROFS (dir missing or unwritable),
 * -EBUSY (another process has the directory open), -ENOSPC (the filesystem
 * cannot hold size bytes; the files this call created are removed),
 * -EINVAL (settings), -ENOMEM, other -errno. On error the handle stays
 * unopened and may be opened again or closed.
 * Thread: blocking; call at start-up.
 */
int kvs_ssd_open(kvs_ssd *s, const char *dir);

/*
 * kvs_ssd_close - wait for the I/O in flight (completions are discarded,
 * the callback is not called), close the files and free @s. NULL is a no-op.
 */
void kvs_ssd_close(kvs_ssd *s);

/* kvs_ssd_event_fd - readable when kvs_ssd_reap() has work; -1 before open.
 * Ownership: the store's; do not close it. */
int kvs_ssd_event_fd(const kvs_ssd *s);
/* kvs_ssd_direct - 1 when segment files are open with O_DIRECT. */
int kvs_ssd_direct(const kvs_ssd *s);
/* kvs_ssd_uring - 1 when I/O goes through io_uring, 0 for the sync fallback. */
int kvs_ssd_uring(const kvs_ssd *s);
/* kvs_ssd_segments - the segment count (0 before open). */
uint32_t kvs_ssd_segments(const kvs_ssd *s);
/*
 * kvs_ssd_segment_gen - the generation of segment @seg if it holds blocks
 * (used), else 0 (free, out of range). For warm restart: an index entry is
 * valid only if its generation equals its segment's.
 */
uint64_t kvs_ssd_segment_gen(const kvs_ssd *s, uint32_t seg);
/*
 * kvs_ssd_check - 0 if @loc may be read: segment used, same generation,
 * record inside the segment. Errors: -ESTALE, -EINVAL. No I/O.
 */
int kvs_ssd_check(const kvs_ssd *s, const kvs_ssd_loc *loc);
/* kvs_ssd_record_bytes - disk bytes a block of @len payload bytes takes. */
uint64_t kvs_ssd_record_bytes(uint64_t len);
/* kvs_ssd_checksum - XXH3-64 of @len bytes: the payload checksum used here. */
uint64_t kvs_ssd_checksum(const void *buf, size_t len);

/*
 * kvs_ssd_write - append block @b with @b->len bytes of @payload; sets *loc
 * at once and completes through kvs_ssd_reap() with @cookie.
 * A payload at a 4 KiB-aligned address is written from where it is (its
 * last partial sector, if any, is copied); any other is copied first.
 * @flags: KVS_SSD_CSUM when b->csum already holds the payload's checksum
 * (then a payload changed since is caught on read); else it is computed here.
 * Errors: -EINVAL (len 0, or a record larger than a segment can hold),
 * -EBUSY (no free segment, and every used one has I/O in flight or was
 * vetoed: transient, nothing changed; stats no_segment), -ENOMEM.
 * Completion errors: -ENOSPC, -EIO, other -errno.
 * Ownership: @payload must stay valid and unchanged until the completion
 * (or until kvs_ssd_wait() releases it).
 */
int kvs_ssd_write(kvs_ssd *s, const kvs_ssd_blk *b, const void *payload,
		  unsigned flags, uint64_t cookie, kvs_ssd_loc *loc);

/*
 * kvs_ssd_read - read the block at @loc into @dst (loc->len bytes) and
 * verify it against @expect (ns, hash, len; csum too with KVS_SSD_CSUM) and
 * against its own header and checksum. A 4 KiB-aligned @dst is read into
 * directly (its last partial sector through a copy); any other through a
 * bounce buffer.
 * Errors: -ESTALE (generation mismatch: segment recycled; no I/O),
 * -EINVAL (loc out of the segment, expect->len != loc->len), -ENOMEM.
 * Completion errors: -EBADMSG (verification failed), -EIO, other -errno.
 * Ownership: @dst belongs to the store until the completion; on error its
 * contents are undefined.
 */
int kvs_ssd_read(kvs_ssd *s, const kvs_ssd_loc *loc, const kvs_ssd_blk *expect,
		 unsigned flags, void *dst, uint64_t cookie);

/*
 * kvs_ssd_reap - deliver every finished operation to @cb (may be NULL to
 * discard); call it when kvs_ssd_event_fd() is readable. Never blocks.
 * Returns the number of completions delivered.
 */
int kvs_ssd_reap(kvs_ssd *s, kvs_ssd_reap_fn cb, void *arg);

/*
 * kvs_ssd_kick - make kvs_ssd_event_fd() readable once more (the next reap
 * resets it), so that an owner polling it comes back for work of its own
 * that goes on in slices: the daemon's background load of its index. The
 * reap that follows may deliver nothing.
 * Thread: the store's.
 */
void kvs_ssd_kick(kvs_ssd *s);

/*
 * kvs_ssd_release_fn - write @c->cookie has finished with its payload: the
 * caller may reuse the buffer now. @c is the write's completion as the reap
 * will deliver it (res final: 0 means the block is on disk and may be
 * indexed and read now); the completion itself still comes later, through
 * kvs_ssd_reap(). @c is valid during the call only. The callback may call
 * kvs_ssd_read, not kvs_ssd_write, kvs_ssd_wait or kvs_ssd_reap.
 */
typedef void (*kvs_ssd_release_fn)(void *arg, const kvs_ssd_cqe *c);

/*
 * kvs_ssd_wait - block until at least one write of the caller's has
 * finished with its payload, and tell @fn about every such write found
 * (each once); their completions (and those of any reads finished while
 * waiting) are delivered by the next kvs_ssd_reap() as usual, and the
 * event fd is signalled for it. For a caller that needs a write's buffer
 * back now (the daemon: a host slot that a demotion write reads from, when
 * no other slot can be had).
 * Returns the number of writes released; 0 when no write of the caller's
 * is in flight (having waited for the reads in flight, if any). Errors: -EBADF (not open), other -errno from io_uring.
 * Thread: the store's; this is the one call that waits for the device
 * (at most until the first of the operations in flight finishes).
 */
int kvs_ssd_wait(kvs_ssd *s, kvs_ssd_release_fn fn, void *arg);

/* kvs_ssd_inflight - operations submitted and not yet reaped. */
unsigned kvs_ssd_inflight(const kvs_ssd *s);

/* kvs_ssd_stats_get - fill the store's counters. */
void kvs_ssd_stats_get(const kvs_ssd *s, kvs_ssd_stats *out);

/* ---- on-disk encoding (pure functions: no store, no I/O) ---------------
 * For the read path and the open path, and for tests and fuzzers that check
 * them on arbitrary bytes. */

#define KVS_SSD_SECTOR 4096u   /* a header sector, a superblock */
#define KVS_SSD_HDR_BYTES 72u  /* the record header at the start of its sector */
#define KVS_SSD_SB_BYTES 40u   /* the superblock at the start of its sector */

/* A segment's superblock, decoded. */
typedef struct kvs_ssd_sb {
	uint32_t seg;       /* segment index, as written */
	uint32_t used;      /* 1: holds blocks of generation gen; 0: free */
	uint64_t seg_bytes; /* segment file size */
	uint64_t gen;       /* generation of its current life */
} kvs_ssd_sb;

/*
 * kvs_ssd_header_encode - write the record header of block @b at @l into
 * @sector (KVS_SSD_SECTOR bytes: the header, then zeros). The header's
 * length is @l->len; @b->csum is written as the payload checksum.
 */
void kvs_ssd_header_encode(uint8_t *sector, const kvs_ssd_blk *b,
			   const kvs_ssd_loc *l);

/*
 * kvs_ssd_header_decode - parse the record header at @buf (@n bytes, at
 * least KVS_SSD_HDR_BYTES used): magic, format, header size, header checksum,
 * zero padding, a nonzero length and a sector-aligned offset past the
 * superblock. Fills *b (csum: the payload checksum the header names) and *l
 * (the position the header claims); the caller compares them with what it
 * asked for. The bytes after the header in its sector are not looked at.
 * Errors: -EBADMSG (anything wrong; *b and *l untouched).
 * Thread: any (pure).
 */
int kvs_ssd_header_decode(const uint8_t *buf, size_t n, kvs_ssd_blk *b,
			  kvs_ssd_loc *l);

/* kvs_ssd_sb_encode - write superblock @sb into @sector (KVS_SSD_SECTOR bytes). */
void kvs_ssd_sb_encode(uint8_t *sector, const kvs_ssd_sb *sb);

/*
 * kvs_ssd_sb_decode - parse the superblock at @buf (@n bytes, at least
 * KVS_SSD_SB_BYTES used): magic, format, size, checksum, state, a segment
 * size that is a multiple of 4 KiB and at least 64 KiB. Whether it is the
 * right segment, of the right size, is the caller's to compare.
 * Errors: -EBADMSG (*out untouched). Thread: any (pure).
 */
int kvs_ssd_sb_decode(const uint8_t *buf, size_t n, kvs_ssd_sb *out);

#endif /* KVS_SSD_H */
