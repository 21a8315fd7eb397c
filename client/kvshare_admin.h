/*
 * kvshare_admin.h - the operator's side of libkvshare: what is cached
 * (list, inspect), freeing it (evict, flush), keeping it (pin, unpin),
 * checking the SSD tier (verify) and the stream of KV events (watch). kvsctl is built on these alone.
 *
 *   kvs_client *c;
 *   kvs_connect(NULL, NULL, &c);                  // control-only
 *   n = kvs_list(c, 0, 5, &nss);                  // every namespace, top 5
 *   kvs_evict(c, KVS_SCOPE_NAMESPACE, 1, (kvs_hash){0}, 1, &res);
 *
 * Caveats
 *  - Operator verbs want a control-only connection (kvs_connect with a NULL
 *    layout). An attached (worker) connection sees only its own namespace in
 *    list and inspect, and gets -EPERM from evict, flush, pin and unpin.
 *  - They want an operator, too: a process of the daemon's uid, root, or a
 *    uid of kvshared --admin-uid. Any other uid is kept to its own domain
 *    (with --tenant-arenas uid its uid's namespaces: list, inspect, watch
 *    and evict see those only, another uid's namespace is KVS_E_PERM) and
 *    gets KVS_E_PERM from evict/flush of KVS_SCOPE_ALL, pin, unpin, verify
 *    and, with one shared arena, watch (docs/reliability.md, "Operators
 *    and workers").
 *  - Operator pins belong to the daemon, not to the connection: they stay
 *    until kvs_unpin() or a daemon restart. The daemon bounds them to a share
 *    of the host tier (kvshared --max-pinned-share) and answers KVS_E_LIMIT
 *    beyond it.
 *  - A watch is its own connection; events a slow watcher cannot take are
 *    dropped by the daemon (kvs_watch_dropped() counts them), never queued
 *    without bound.
 *  - Every verb has the client's deadline (kvs_set_timeout() in kvshare.h);
 *    kvs_verify() answers only when the SSD tier was read, so give it one
 *    that allows it.
 *
 * Errors, as in kvshare.h: 0 or a count, or a negative number (KVS_E_* or
 * -errno); kvs_strerror() names it.
 * Thread: as kvshare.h: a client or watch belongs to one thread at a time.
 */
#ifndef KVSHARE_ADMIN_H
#define KVSHARE_ADMIN_H

#include <stdint.h>

#include "kvshare.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_LIST_TOP_MAX 16

/* A most-hit prefix, named by its leaf-most cached block. */
typedef struct kvs_prefix_info {
	kvs_hash hash;      /* the leaf-most block */
	uint64_t hits;      /* lookups that reached that block */
	uint64_t root_hits; /* lookups that hit the prefix's first block */
	uint32_t depth;     /* blocks in the chain */
	int pinned;         /* the leaf is pinned by an operator */
} kvs_prefix_info;

/* One namespace as kvs_list() reports it. */
typedef struct kvs_ns_summary {
	uint32_t id;
	char model[KVS_NAME_MAX + 1];
	char adapter[KVS_NAME_MAX + 1]; /* "" when none */
	int salted;
	uint32_t layers, kv_heads, head_dim, block_tokens, tp_rank, tp_size;
	kvs_dtype dtype;
	uint32_t clients;     /* attached connections */
	uint64_t block_bytes;
	uint64_t blocks;      /* committed, in the host tier */
	uint64_t writing;     /* reserved, not committed */
	uint64_t hits;        /* blocks found by its lookups, every path (its
			       * share of blocks.lookup_hit) */
	uint64_t pinned;      /* blocks pinned by operators */
	uint32_t roots;       /* prefix trees (first blocks) */
	uint32_t longest;     /* blocks in the longest cached chain */
	int tenant;           /* in a per-uid tenant arena (kvshared
			       * --tenant-arenas uid) */
	uint32_t uid;         /* tenant: the uid owning that arena; else 0 */
	uint32_t ntop;
	kvs_prefix_info top[KVS_LIST_TOP_MAX]; /* most-hit first */
} kvs_ns_summary;

/*
 * kvs_list - namespaces with their layout, counts and a summary of their
 * prefix trees.
 * @ns: one namespace id, or 0 for all.
 * @top: most-hit prefixes wanted per namespace (0..KVS_LIST_TOP_MAX), ranked
 *       by the hits of their leaf-most block, then of their first block.
 * @out: set to an array of the returned count; free() it.
 * The daemon answers a page of its records at a time (docs/protocol.md,
 * LIST): this follows the cursor to the last page and sums the pages, so
 * the counts are not one snapshot (blocks stored or freed meanwhile may be
 * counted or missed). A daemon older than paging is asked in one request.
 * Returns the number of namespaces.
 * Errors: -ENOENT (no namespace @ns), -EINVAL, -EPERM (another namespace
 *         from an attached connection), KVS_E_PERM (another uid's namespace
 *         for a worker), KVS_E_DISCONNECTED, -ENOMEM.
 * Thread: the client's.
 */
int kvs_list(kvs_client *c, uint32_t ns, uint32_t top, kvs_ns_summary **out);

typedef enum kvs_block_state {
	KVS_STATE_WRITING = 1, /* reserved, not committed */
	KVS_STATE_READY = 2,   /* committed */
	KVS_STATE_GHOST = 3,   /* evicted; kept only as its children's parent */
} kvs_block_state;

/* One block as kvs_inspect() reports it. */
typedef struct kvs_block_info {
	kvs_hash hash;
	uint32_t ns;
	kvs_tier tier;       /* KVS_TIER_NONE for a ghost */
	kvs_block_state state;
	int pinned;          /* by an operator */
	uint64_t offset;     /* in the tier's arena */
	uint32_t gen;        /* slot generation */
	uint32_t refs;       /* pins: lease entries plus an operator pin */
	uint32_t children;   /* cached blocks whose parent this is */
	uint32_t hits;       /* lookups that hit it */
	uint64_t age_s;      /* seconds since it was stored or last hit */
	uint32_t depth;      /* its position in the chain, 1 for a first block */
	int has_parent;
	kvs_hash parent;     /* the block one shorter, when has_parent */
} kvs_block_info;

/*
 * kvs_inspect - one block by hash.
 * @ns: its namespace, or 0 for whichever has it (a control-only connection
 *      may look into every namespace; an attached one only into its own).
 * Errors: -ENOENT (not cached, or not in the caller's domain), -EPERM,
 *         KVS_E_PERM (another uid's namespace), KVS_E_DISCONNECTED.
 * Thread: the client's.
 */
int kvs_inspect(kvs_client *c, uint32_t ns, kvs_hash hash, kvs_block_info *out);

typedef enum kvs_evict_scope {
	KVS_SCOPE_NAMESPACE = 1, /* every block of a namespace */
	KVS_SCOPE_PREFIX = 2,    /* a block and every block under it */
	KVS_SCOPE_ALL = 3,
} kvs_evict_scope;

typedef struct kvs_evict_result {
	uint64_t freed;  /* blocks freed */
	uint64_t pinned; /* kept: pinned by a lease or an operator */
	uint64_t kept;   /* kept: the prefix of a kept block */
} kvs_evict_result;

/*
 * kvs_evict - free the unpinned committed blocks of a scope, leaves first
 * (a block stays while a longer prefix of it stays).
 * @ns: the namespace (NAMESPACE: required; PREFIX: 0 for any).
 * @prefix: the block for KVS_SCOPE_PREFIX, else ignored.
 * @flush: 0 evict (events say "evicted"; a lower tier would keep the block
 *         once there is one), 1 flush (gone from every tier; "flushed").
 * Errors: -ENOENT (no such namespace or block), -EPERM (attached
 *         connection), KVS_E_PERM (not an operator: scope all, or another
 *         uid's namespace), -EINVAL, KVS_E_DISCONNECTED.
 * Thread: the client's.
 */
int kvs_evict(kvs_client *c, kvs_evict_scope scope, uint32_t ns,
	      kvs_hash prefix, int flush, kvs_evict_result *out);

/*
 * kvs_pin / kvs_unpin - keep (or stop keeping) a cached prefix.
 * @ns: the namespace, or 0 for the one that holds hashes[0].
 * @hashes, @n: the chain from block 0 (n <= KVS_MAX_HASHES).
 * Pin pins every cached block of the chain up to the first that is not
 * cached, all or none; returns how many blocks of the chain are pinned now.
 * Unpin returns how many blocks it unpinned.
 * Errors: KVS_E_LIMIT (pin: over --max-pinned-share), -ENOENT (no namespace
 *         @ns), -EPERM, KVS_E_PERM (not an operator), KVS_E_TOOMANY,
 *         KVS_E_DISCONNECTED.
 * Thread: the client's.
 */
int kvs_pin(kvs_client *c, uint32_t ns, const kvs_hash *hashes, size_t n);
int kvs_unpin(kvs_client *c, uint32_t ns, const kvs_hash *hashes, size_t n);

/* kvs_hash_format, kvs_hash_parse: kvshare.h. */

#define KVS_VERIFY_FAILED_MAX 4096

/* One block that failed kvs_verify(). */
typedef struct kvs_verify_failure {
	kvs_hash hash;
	uint32_t ns;
	int error; /* -EBADMSG: checksum or header mismatch; -EIO, ... */
} kvs_verify_failure;

typedef struct kvs_verify_result {
	int ssd_tier;     /* 0: the daemon has no SSD tier (all counts 0) */
	uint64_t checked; /* blocks read back: ok + failed */
	uint64_t ok;
	uint64_t failed;  /* each dropped from the SSD tier (see kvs_verify) */
	uint64_t skipped; /* freed, recycled or moved while being read */
	uint32_t listed;  /* failures in the array, min(failed, max_failed) */
} kvs_verify_result;

/*
 * kvs_verify - have the daemon read back every block of its SSD tier (of
 * namespace @ns, 0: all) and check each against its header and checksums.
 * A block that fails is dropped from the SSD tier (a copy in host RAM
 * stays) and counted in the daemon's tier_ssd.corrupt_blocks. The call
 * waits until every block was read: seconds per GB of SSD tier, which the
 * client's deadline (kvs_set_timeout(), 5 s by default) must allow, or the
 * call returns KVS_E_DISCONNECTED and the connection is closed (which
 * stops the verify; kvsctl verify lifts the deadline unless told one).
 * @max_failed: failures listed, at most KVS_VERIFY_FAILED_MAX.
 * @failures: set to an array of out->listed entries (free() it), or NULL
 *            when none.
 * Returns 0. A daemon without an SSD tier answers 0 with ssd_tier 0.
 * Errors: -ENOENT (no namespace @ns), -EPERM (attached connection),
 *         KVS_E_PERM (not an operator), -EINVAL, -EBUSY, KVS_E_DISCONNECTED,
 *         -ENOMEM.
 * Thread: the client's.
 */
int kvs_verify(kvs_client *c, uint32_t ns, uint32_t max_failed,
	       kvs_verify_result *out, kvs_verify_failure **failures);

typedef enum kvs_event_kind {
	KVS_EV_STORED = 1,   /* a block was committed */
	KVS_EV_EVICTED = 2,  /* freed to make room, or by kvs_evict() */
	KVS_EV_PINNED = 3,   /* pinned by an operator */
	KVS_EV_UNPINNED = 4,
	KVS_EV_FLUSHED = 5,  /* freed by a flush */
} kvs_event_kind;

typedef struct kvs_event {
	kvs_event_kind kind;
	uint32_t ns;
	kvs_hash hash;
	uint64_t seq; /* from 1 per daemon; a gap: events were dropped */
} kvs_event;

/* kvs_event_name - "stored", "evicted", ...; "unknown". Thread: any. */
const char *kvs_event_name(kvs_event_kind kind);

typedef struct kvs_watch kvs_watch;

/*
 * kvs_watch_open - a connection that receives the daemon's KV events from
 * now on. Opening it (connect, HELLO, WATCH) has the default deadline of
 * kvs_connect(); waiting for events is kvs_watch_next()'s @timeout_ms.
 * @socket_path: as kvs_connect().
 * Errors: as kvs_connect(), KVS_E_PERM (not an operator, with one shared
 *         arena: a worker's watch would be every namespace's), -ENOMEM.
 * Ownership: *out until kvs_watch_close().
 */
int kvs_watch_open(const char *socket_path, kvs_watch **out);

/*
 * kvs_watch_next - the next event.
 * @timeout_ms: -1 waits for ever, 0 does not wait.
 * Returns 1 (an event in *ev), 0 (none within the timeout).
 * Errors: KVS_E_DISCONNECTED (the daemon went away), KVS_E_PROTO, -ENOMEM.
 * Thread: the watch's.
 */
int kvs_watch_next(kvs_watch *w, kvs_event *ev, int timeout_ms);

/* kvs_watch_fd - the socket, to poll for input (events may also be buffered
 * already: call kvs_watch_next(w, ev, 0) until it returns 0). */
int kvs_watch_fd(const kvs_watch *w);

/* kvs_watch_dropped - events the daemon dropped for this watch so far. */
uint64_t kvs_watch_dropped(const kvs_watch *w);

void kvs_watch_close(kvs_watch *w);

#ifdef __cplusplus
}
#endif
#endif /* KVSHARE_ADMIN_H */
