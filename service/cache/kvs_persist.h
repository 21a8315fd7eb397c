/*
 * kvs_persist.h - the host tier outlives the daemon: its arenas (memfds)
 * and one metadata memfd that describes every committed block in them are
 * handed to the next daemon (a hand-over socket, systemd's fd store), which
 * rebuilds its block table from them before it serves.
 *
 * The metadata memfd ("kvs-meta") holds a header (magic, format version,
 * the geometry it was made for, clean or dirty), the namespace table (each
 * namespace's layout, in the SSD tier's namespaces-file codec, with its id
 * and trust domain) and one record per block-table index: state (free,
 * writing, committed), namespace, chained hash, parent hash, slot (offset,
 * slab), and XXH3-64 of the block's bytes, with a checksum of the record
 * itself. A slot is marked writing before its client can write it; a commit
 * writes the record, then the committed state last (a release store); the
 * persist worker, a thread of the cache's, then hashes the bytes off the
 * loop and marks the record verified (persist_fmt.h: a generation in the
 * state word keeps a slot that went meanwhile from being marked).
 * docs/architecture.md, "Host tier persistence", is the format and the
 * rule for changing it.
 *
 * Trust: the next daemon trusts nothing it is handed. A record is kept only
 * when it is verified (a committed one not yet verified when the daemon
 * died is dropped), its own checksum holds, every field is in bounds,
 * its namespace is in the table, its slot fits the slab it names and does
 * not overlap a kept one, its parent was kept, and its bytes' checksum
 * matches; every other slot is freed. A header of another magic, version or
 * geometry is a cold start (the reason is logged and reported). The GPU
 * tier is not persisted.
 *
 * Thread: the daemon's loop thread only, as the cache (the worker is
 * internal).
 */
#ifndef KVS_PERSIST_H
#define KVS_PERSIST_H

#include <stdint.h>

#include "kvs_cache.h"

/* The names of the fds, as the fd store keeps them (FDNAME=, LISTEN_FDNAMES):
 * the metadata memfd, and the arena of each trust domain i ("kvs-arena-0",
 * "kvs-arena-1", ...: one with --tenant-arenas off). */
#define KVS_PERSIST_META_NAME "kvs-meta"
#define KVS_PERSIST_ARENA_PREFIX "kvs-arena-"

/* An fd with the name it is stored and passed under (FDNAME=): at most
 * KVS_FDNAME_MAX bytes of letters, digits and "._-". */
#define KVS_FDNAME_MAX 31
typedef struct kvs_named_fd {
	int fd;
	char name[KVS_FDNAME_MAX + 1];
} kvs_named_fd;

/* How a daemon started. */
typedef enum kvs_start_mode {
	KVS_START_COLD = 0,        /* an empty table */
	KVS_START_HANDED_OVER = 1, /* fds of a daemon that left cleanly */
	KVS_START_RECOVERED = 2,   /* fds of a daemon that did not (a crash) */
} kvs_start_mode;

typedef struct kvs_persist_report {
	kvs_start_mode mode;
	uint64_t blocks_kept;    /* in the table, ready to serve */
	uint64_t blocks_dropped; /* records not kept (any reason) */
	uint64_t torn;           /* of dropped: caught writing, or a bad record */
	uint64_t unverified;     /* of dropped: committed, not yet verified */
	uint64_t bad_sum;        /* of dropped: bytes that fail their checksum */
	uint32_t namespaces;     /* restored */
	uint32_t domains;        /* arenas adopted */
	uint64_t elapsed_ns;     /* time the adoption took */
	char reason[320];        /* cold: why ("" when nothing was handed) */
} kvs_persist_report;

/*
 * kvs_persist_fds - the fds the next daemon needs: "kvs-meta" first, then
 * "kvs-arena-<i>" for each trust domain made so far. With --tenant-arenas
 * uid the set grows when a domain is made: ask again before handing over.
 * Returns how many were written to @out (0: persistence is off).
 * Errors: -ENOSPC (@max too small: nothing written).
 * Ownership: the fds stay the cache's (dup them to keep them past it).
 */
int kvs_persist_fds(kvs_cache *c, kvs_named_fd *out, uint32_t max);

/*
 * kvs_persist_adopt - take the arenas and metadata of a daemon before this
 * one and rebuild the block table from them: every kept block is a READY
 * host block in its namespace, linked to its parent, evictable, with no pin
 * and no lease; the slots of the others are free. Call it after
 * kvs_cache_create, before any tier is added and before serving. With @n
 * 0, or anything wrong with what was handed (see "Trust"), the start is
 * cold: r->mode KVS_START_COLD and r->reason says why (also logged).
 * From then on the adopted memfds are the cache's, and the metadata is
 * marked dirty until kvs_persist_leave().
 * Returns 0 (a cold start included). Errors: -EBUSY (the cache has served
 * already: a namespace or a block exists), -ENOMEM (the table is partly
 * rebuilt: the daemon must not serve from this cache; the records not yet
 * read are untouched, so a next start can adopt again).
 * Ownership: every fd of @in is the cache's from the call on, kept or
 * closed by it, whatever the result; @in's array is read during the call.
 */
int kvs_persist_adopt(kvs_cache *c, kvs_named_fd *in, uint32_t n,
		      kvs_persist_report *r);

/*
 * kvs_persist_sync - wait until the persist worker has verified (or found
 * gone) every block committed so far: a crash after it keeps them. A block
 * the worker's full queue left out (persist.queue_full) stays unverified.
 * Returns 0 (also with persistence off).
 */
int kvs_persist_sync(kvs_cache *c);

/* kvs_persist_pending - blocks committed and not yet verified by the
 * worker (queued or being hashed); 0 with persistence off. */
uint32_t kvs_persist_pending(kvs_cache *c);

/* kvs_persist_test_hook - tests: @fn(@arg) runs in the worker between a
 * block's hash and the recheck of its record (NULL: none). */
void kvs_persist_test_hook(kvs_cache *c, void (*fn)(void *), void *arg);

/*
 * kvs_persist_leave - mark the metadata left cleanly: this daemon has
 * drained (no client connected, nothing being written) and is stopping or
 * handing over; call it last. It waits for the worker, then verifies in
 * the calling thread every record still committed (those a full queue left
 * out): every committed block is kept by the next daemon. The next daemon reports
 * KVS_START_HANDED_OVER; the blocks are checked the same way. A commit
 * after it marks the metadata dirty again. Returns 0 (also with
 * persistence off).
 */
int kvs_persist_leave(kvs_cache *c);

#endif /* KVS_PERSIST_H */
