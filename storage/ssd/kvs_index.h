/*
 * kvs_index.h - the SSD tier's persistent index, in LMDB:
 * (namespace, block hash) -> (segment, generation, offset, length, checksum,
 * parent hash, last access).
 *
 * The daemon is the only writer and runs one thread. Puts and deletes are
 * queued in memory and kvs_index_flush() applies them, in order, in one
 * write transaction: the daemon calls it once per loop turn. Reads
 * (kvs_index_get, kvs_index_iter, kvs_index_count) see committed state only,
 * not the queue: the daemon's block table is the live truth, the index is
 * what survives a restart.
 *
 * Layout: one LMDB environment in a directory (data.mdb, lock.mdb), three
 * named databases:
 *   "blocks"  key 20 bytes (ns u32, hash lo u64, hash hi u64), value 56
 *             bytes (seg u32, len u32, gen, off, csum, parent lo, parent hi,
 *             atime, u64 each), little-endian.
 *   "segs"    secondary index, segment (u32) -> keys of its blocks
 *             (MDB_DUPSORT | MDB_DUPFIXED). Recycling a segment deletes its
 *             entries in time proportional to the segment's blocks, not to
 *             the whole index: a scan of 1M entries at every recycle would
 *             stall the loop for a large fraction of a second, while the
 *             secondary costs one extra small put per block.
 *   "meta"    "format" -> u32 format version.
 *
 * Durability (the choice and why): the environment is opened MDB_NOSYNC, so
 * a commit writes its pages with pwrite() and does not wait for the device;
 * the loop never blocks on an fsync. That is safe against a crash of the
 * process (kill -9): the pages are in the kernel once the commit returns,
 * and LMDB's copy-on-write pages and two meta pages mean a commit is all or
 * nothing; a process killed mid-commit leaves the previous commit intact.
 * Losing the queued, unflushed batch is fine: a block without an entry is a
 * miss. An entry may point at data that never reached the disk (the power
 * went, or the entry was committed before the write completed): the record
 * header and checksum check on read turns that into a miss.
 * What MDB_NOSYNC gives up is power-loss safety between syncs: the last
 * commits may be lost and, on a filesystem that reorders writes, the file
 * may be inconsistent. So: kvs_index_sync() (an fdatasync) makes the state
 * so far durable: call it from a timer, off the hot path, and at shutdown
 * (kvs_index_close does). Opening with KVS_INDEX_SYNC instead syncs data
 * pages in every flush (MDB_NOMETASYNC: a power loss loses at most the last
 * commit, never the file's integrity), at the cost of an fdatasync per loop
 * turn that writes.
 *
 * Caveats:
 *  - After a power loss with the default flags, an open that fails with
 *    -EBADMSG means the index is unusable: remove it and start cold (the
 *    segment files are still checked block by block on read).
 *  - Map size: set from the SSD size (kvs_index_mapsize_for). When a flush
 *    hits MDB_MAP_FULL the map is doubled and the batch retried, so a full
 *    map never fails a flush while the address space and disk allow.
 *  - A batch too large for one transaction (MDB_TXN_FULL, hundreds of
 *    thousands of puts) is split into several transactions.
 *
 * Errors: 0 or a count on success, -errno otherwise. LMDB's own codes map
 * to: MDB_NOTFOUND -ENOENT, MDB_MAP_FULL -ENOSPC (only if growth fails),
 * MDB_CORRUPTED/MDB_PAGE_NOTFOUND/MDB_INVALID -EBADMSG,
 * MDB_VERSION_MISMATCH -EPROTO, other MDB_* -EIO.
 * Thread: one thread owns a kvs_index (MDB_NOTLS); no locking.
 */
#ifndef KVS_INDEX_H
#define KVS_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_types.h" /* kvs_hash */

typedef struct kvs_index kvs_index;

#define KVS_INDEX_KEY_BYTES 20u
#define KVS_INDEX_VAL_BYTES 56u
/* LMDB's longest key (its default MDB_MAXKEYSIZE): a key of another size
 * is not ours, but a walk must still step over it. */
#define KVS_INDEX_KEY_BYTES_MAX 511u

typedef struct kvs_index_key {
	uint32_t ns;
	kvs_hash hash;
} kvs_index_key;

/* The same fields as kvs_ssd_loc, plus what the daemon needs at restart. */
typedef struct kvs_index_val {
	uint32_t seg;    /* segment index */
	uint32_t len;    /* payload bytes */
	uint64_t gen;    /* segment generation */
	uint64_t off;    /* record offset in the segment */
	uint64_t csum;   /* XXH3-64 of the payload */
	kvs_hash parent; /* the block one shorter; {0,0} for a first block */
	uint64_t atime;  /* last access, in the daemon's clock */
} kvs_index_val;

#define KVS_INDEX_SYNC 0x1u /* fdatasync data pages in every flush */

typedef struct kvs_index_stats {
	uint64_t entries;        /* committed entries */
	uint64_t map_bytes;      /* map size now */
	uint64_t map_used_bytes; /* pages in use */
	uint64_t map_grows;      /* MDB_MAP_FULL recoveries */
	uint64_t commits;        /* write transactions committed */
	uint64_t ops_committed;  /* puts and deletes applied */
	uint64_t ops_pending;    /* queued, not yet flushed */
	uint64_t flush_failed;   /* flushes whose batch was dropped */
	uint64_t flush_us_last;  /* duration of the last flush */
	uint64_t flush_us_max;
} kvs_index_stats;

/*
 * kvs_index_create - a handle with defaults: map size 64 MiB, flags 0.
 * Errors: -ENOMEM. Ownership: *out until kvs_index_close().
 */
int kvs_index_create(kvs_index **out);

/*
 * kvs_index_set_mapsize - the initial map size, rounded up to 1 MiB (at
 * least 1 MiB); before open (-EBUSY after). LMDB raises it to the data's
 * size if an existing environment holds more.
 */
int kvs_index_set_mapsize(kvs_index *ix, uint64_t bytes);
/* kvs_index_set_flags - KVS_INDEX_SYNC; before open (-EBUSY after). */
int kvs_index_set_flags(kvs_index *ix, unsigned flags);

/*
 * kvs_index_mapsize_for - a map size for an SSD tier of @ssd_bytes holding
 * blocks of at least @block_bytes: ~256 bytes per possible entry (both
 * databases, half-full pages) times 2 headroom, at least 16 MiB.
 */
uint64_t kvs_index_mapsize_for(uint64_t ssd_bytes, uint64_t block_bytes);

/*
 * kvs_index_open - open or create the environment in @dir (created, mode
 * 0700, if missing; its parent must exist). Clears reader slots left by
 * dead processes.
 * Errors: -ENOENT (no parent), -EACCES, -EROFS, -EBADMSG (not an index or
 * damaged), -EPROTO (another format version), -EBUSY (already open),
 * -ENOMEM, other -errno. On error the handle stays unopened.
 * Thread: blocking; call at start-up.
 */
int kvs_index_open(kvs_index *ix, const char *dir);

/*
 * kvs_index_close - flush the queue, sync, close and free @ix. NULL is a
 * no-op. Blocking (one fdatasync).
 */
void kvs_index_close(kvs_index *ix);

/*
 * kvs_index_put - queue (key -> val), replacing any entry of the key.
 * kvs_index_del - queue the deletion of @key (absent: no-op at flush).
 * kvs_index_del_segment - queue the deletion of every entry whose value
 *   names segment @seg (whatever its generation), as they are at that point
 *   of the batch: puts queued after it for the same segment survive.
 * Errors: -ENOMEM (nothing queued), -EBADF (not open).
 */
int kvs_index_put(kvs_index *ix, const kvs_index_key *key, const kvs_index_val *val);
int kvs_index_del(kvs_index *ix, const kvs_index_key *key);
int kvs_index_del_segment(kvs_index *ix, uint32_t seg);

/* kvs_index_pending - operations queued and not yet flushed. */
uint64_t kvs_index_pending(const kvs_index *ix);

/*
 * kvs_index_flush - apply the queue in order in one write transaction
 * (several only past MDB_TXN_FULL), growing the map on MDB_MAP_FULL.
 * Returns the number of operations applied (0 for an empty queue: no
 * transaction). On any other error the batch is dropped (counted in
 * flush_failed) and the error returned: the index then lacks some entries
 * (misses) or keeps some stale ones (caught by generation and checksum).
 * Errors: -ENOMEM, -ENOSPC (map could not grow), -EIO, -EBADMSG.
 */
int kvs_index_flush(kvs_index *ix);

/*
 * kvs_index_sync - make every committed transaction durable (fdatasync).
 * Blocking. Errors: -errno.
 */
int kvs_index_sync(kvs_index *ix);

/*
 * kvs_index_get - the committed value of @key into *val.
 * Errors: -ENOENT, -EBADF, other mapped LMDB errors.
 */
int kvs_index_get(kvs_index *ix, const kvs_index_key *key, kvs_index_val *val);

/*
 * kvs_index_iter_fn - one entry; return 0 to go on, anything else to stop
 * (kvs_index_iter then returns that value). @key and @val are valid during
 * the call only. The callback must not write to the index (put/del queue
 * fine; flush does not).
 */
typedef int (*kvs_index_iter_fn)(void *arg, const kvs_index_key *key,
				 const kvs_index_val *val);

/*
 * kvs_index_iter - every committed entry, in key order, in one read
 * transaction with one cursor (for warm restart: load the block table).
 * Returns the number of entries visited, or the callback's nonzero value,
 * or -errno.
 */
int64_t kvs_index_iter(kvs_index *ix, kvs_index_iter_fn fn, void *arg);

/*
 * kvs_index_pos - where a walk (kvs_index_walk) goes on: the key of the
 * next entry to visit; zeroed: the first entry. Plain bytes, so a walk can
 * be resumed in a later read transaction (each sees the committed state of
 * its own time: entries put or deleted behind the position are not seen).
 */
typedef struct kvs_index_pos {
	uint8_t key[KVS_INDEX_KEY_BYTES_MAX];
	uint32_t len; /* 0: from the first entry */
	int done;     /* the walk passed the last entry */
} kvs_index_pos;

/*
 * kvs_index_walk - visit at most @max committed entries, in key order, from
 * *@pos on, in one read transaction (a slice of a warm load that runs
 * between other work: the daemon's background restore). @fn is called for
 * every entry that decodes (others are skipped, counted as visited); it
 * returns 0 to go on or a negative error, which stops the walk and is
 * returned. *@pos is moved past what was visited, and pos->done set once
 * the last entry was passed. The callback may queue puts and deletes.
 * Returns the entries visited (0 with pos->done: nothing left), or -errno.
 * Thread: the one exception to the owner thread: one other thread may
 * walk while the owner uses the index (its own read transaction,
 * MDB_NOTLS; its callback must then not touch the index); a flush that
 * grows the map waits for the walk's transaction to end.
 */
int64_t kvs_index_walk(kvs_index *ix, kvs_index_pos *pos, uint64_t max,
		       kvs_index_iter_fn fn, void *arg);

/* kvs_index_count - committed entries (0 on error or before open). */
uint64_t kvs_index_count(kvs_index *ix);

/* kvs_index_stats_get - fill the index's counters. */
void kvs_index_stats_get(kvs_index *ix, kvs_index_stats *out);

/* ---- record encoding (pure functions, for the index and its tests) ---- */

/* KVS_INDEX_KEY_BYTES and KVS_INDEX_VAL_BYTES: at the top (the walk's
 * position holds a key). */

/* kvs_index_key_encode / kvs_index_val_encode - the stored bytes of a key
 * (KVS_INDEX_KEY_BYTES) or a value (KVS_INDEX_VAL_BYTES) into @buf. */
void kvs_index_key_encode(uint8_t *buf, const kvs_index_key *key);
void kvs_index_val_encode(uint8_t *buf, const kvs_index_val *val);

/*
 * kvs_index_key_decode - parse a stored key of exactly KVS_INDEX_KEY_BYTES.
 * kvs_index_val_decode - parse a stored value of exactly KVS_INDEX_VAL_BYTES
 *   that could name a record: nonzero length and generation, an offset that
 *   is a multiple of 4 KiB past the superblock.
 * Errors: -EBADMSG (wrong size or impossible value; *out untouched).
 * kvs_index_get answers -EBADMSG for such an entry; kvs_index_iter skips it.
 * Thread: any (pure).
 */
int kvs_index_key_decode(const uint8_t *buf, size_t n, kvs_index_key *out);
int kvs_index_val_decode(const uint8_t *buf, size_t n, kvs_index_val *out);

#endif /* KVS_INDEX_H */
