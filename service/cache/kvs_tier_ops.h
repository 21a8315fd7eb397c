/*
 * kvs_tier_ops.h - the interface between the block cache and its tiers.
 *
 * The cache (cache*.c) owns blocks: records, prefix links, pins, leases,
 * namespaces and trust domains, and the host tier (one memfd arena per
 * domain). Every other tier is a module that implements kvs_tier_ops and is
 * handed to the cache with kvs_cache_tier_add(); the cache knows it only
 * through that table, as it knows eviction policies through kvs_policy_ops.
 *
 * Two kinds of tier, one table of operations each (kvs_tier_slot_ops,
 * kvs_tier_store_ops) beside the common one (kvs_tier_ops):
 *  - a slot tier (the GPU tier) sits above the host tier and holds bytes
 *    that clients map: the cache allocates its slots, keeps an eviction
 *    policy for it, and demotes its victims to the host tier;
 *  - a store tier (the SSD and remote tiers) sits below the host tier and
 *    holds copies: a block the host tier evicts goes to the first store
 *    tier that admits it, and a lookup that reaches a block held only there
 *    promotes it (a host slot, a read, the deferred reply).
 *
 * What is the cache's, written once for every tier: the record's tier, the
 * child counts per tier and the leaf rule, one make-room loop per (domain,
 * tier), promotion jobs and deferred replies, demotion to the next tier
 * that admits a block. What is the tier's: where its copies are, staging,
 * its indexes, recycling, restore at start, verify, its own counters (its
 * stats section: ops->stats_section describes kvs_tier_mod.counters).
 *
 * A tier keeps per-block state indexed by the record index (rec_new says
 * when an index is handed to a new block). It reads a block's facts through
 * kvs_tier_rec() and changes nothing of the cache except through the
 * kvs_tier_* calls below ("the environment"), so it never sees kvs_cache.
 *
 * Errors: 0 or a count, or a negative KVS_E_* / -errno, as everywhere.
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_TIER_OPS_H
#define KVS_TIER_OPS_H

#include <stdint.h>

#include "kvs_stats.h"
#include "kvs_types.h"

typedef struct kvs_cache kvs_cache;
typedef struct kvs_tier_mod kvs_tier_mod;
typedef struct kvs_tier_ops kvs_tier_ops;

/* A namespace, as the cache and the tiers that persist it know it. */
typedef struct kvs_ns_desc {
	const char *model, *adapter; /* NUL-terminated; adapter "" if none */
	const uint8_t *salt;         /* salt_len bytes (may hold NULs) */
	uint32_t salt_len;
	uint32_t layers, kv_heads, head_dim, block_tokens, tp_rank, tp_size;
	uint32_t dtype;              /* kvs_dtype */
} kvs_ns_desc;

/* One block as a tier sees it (kvs_tier_rec, and the ops' arguments). */
typedef struct kvs_tier_blk {
	uint32_t idx;      /* record index */
	uint32_t ns;       /* namespace id */
	kvs_hash hash;     /* the block's hash, as clients name it */
	kvs_hash parent;   /* the parent's hash, or zero */
	uint64_t bytes;    /* block bytes of its namespace */
	uint64_t host_off; /* its host slot (domain 0), when it has one */
	uint64_t stamp;    /* last access, for the policy (persisted) */
	uint32_t hits;     /* lookups that hit it */
	uint32_t refs;     /* pins */
	uint8_t tier;      /* where clients find its bytes (enum kvs_tier) */
	uint8_t ready;     /* committed and not a ghost */
} kvs_tier_blk;

/* Events counted by the tier they concern (kvs_tier_ops.note). */
enum kvs_tier_note {
	KVS_TIER_NOTE_RESERVED = 1, /* a slot tier took a reserve */
	KVS_TIER_NOTE_RESERVE_FALLBACK, /* it had no room: the host took it */
	KVS_TIER_NOTE_COMMITTED,    /* a block in it was committed */
	KVS_TIER_NOTE_LOOKUP_HIT,   /* @n blocks in it were hits */
	KVS_TIER_NOTE_DEMOTED,      /* a block left it, @n bytes moved down */
	KVS_TIER_NOTE_DROPPED,      /* a block left it and nothing kept it */
	KVS_TIER_NOTE_PROMOTED,     /* a copy of it is in host RAM again */
};

/* Results of kvs_tier_store_ops.demote. */
enum kvs_tier_demote {
	KVS_TIER_REFUSED = 0, /* not admitted: the cache drops the block */
	KVS_TIER_KEPT = 1,    /* the tier has its copy */
	KVS_TIER_WRITING = 2, /* its copy is being written (kvs_tier_stored) */
};

/* Verify results (kvs_tier_store_ops.verify), the cache's types. */
typedef struct kvs_verify_fail {
	kvs_hash hash; /* the block's hash (not the table key) */
	uint32_t ns;
	int32_t error;
} kvs_verify_fail;

typedef struct kvs_verify_result {
	uint64_t checked, ok, failed, skipped;
	uint32_t count;    /* failures listed, <= failed */
	uint32_t has_tier; /* a tier that can verify is on */
} kvs_verify_result;

typedef void (*kvs_verify_fn)(void *arg, const kvs_verify_result *res,
			      const kvs_verify_fail *fails);

/*
 * The operations: one table every tier fills (name, tier, close, stats and
 * its events), and exactly one of a slot table (a slot tier) and a store
 * table (a store tier). Which members are required is checked by
 * kvs_cache_tier_add() (it refuses a tier lacking one, naming it), so an
 * unset optional member is the only NULL the cache ever tests for.
 */

/* A slot tier's operations: every member is required. */
typedef struct kvs_tier_slot_ops {
	/* The allocator class for blocks of @bytes. Errors: KVS_E_LAYOUT
	 * (does not fit), -ENOMEM. */
	int (*class_of)(kvs_tier_mod *t, uint64_t bytes, uint32_t *cls);
	/* Give back one class_of() of @cls: the namespace that asked is gone
	 * (reclaimed, or its id given to another layout). */
	void (*class_put)(kvs_tier_mod *t, uint32_t cls);
	/* -ENOSPC: the cache evicts and asks again. */
	int (*alloc)(kvs_tier_mod *t, uint32_t cls, uint64_t *off);
	void (*free)(kvs_tier_mod *t, uint64_t off);
	uint64_t (*used)(const kvs_tier_mod *t);
	/* Committed blocks whose bytes are in it. */
	uint64_t (*blocks)(const kvs_tier_mod *t);
	/* Copy @bytes of the slot at @off to host memory @dst (demotion). */
	int (*copy_to_host)(kvs_tier_mod *t, uint64_t off, void *dst,
			    uint64_t bytes);
	/* The arena clients map: its fd, size, engine kind and device. */
	void (*map)(const kvs_tier_mod *t, int *fd, uint64_t *bytes,
		    uint32_t *kind, uint32_t *device);
} kvs_tier_slot_ops;

/*
 * A store tier's operations. Required: rec_new, has, keeps, demote, read,
 * drop. Optional: committed (write-through), ns_created and restore
 * (persistence), find (a restore that goes on in the background), reading,
 * and three pairs, both or neither: probe + fetch
 * (a tier others write to), host_held + wait_held (copies written straight
 * from host slots), verify + verify_cancel.
 */
typedef struct kvs_tier_store_ops {
	/* Index @idx now names a new block: forget any state of it.
	 * Errors: -ENOMEM (the cache does not insert the block). */
	int (*rec_new)(kvs_tier_mod *t, uint32_t idx);
	/* Whether it holds a copy of @idx that can be read now. */
	int (*has)(const kvs_tier_mod *t, uint32_t idx);
	/* Whether demote(@b) would keep it, as far as known before a write
	 * (admitted, or held already). */
	int (*keeps)(const kvs_tier_mod *t, const kvs_tier_blk *b);
	/* The host tier evicts @b (READY, out of every policy): keep a copy?
	 * *holds: the write reads the host slot, which the tier gives back
	 * with kvs_tier_host_free() when done (else the cache frees it). */
	int (*demote)(kvs_tier_mod *t, const kvs_tier_blk *b, int *holds);
	/* @b was committed in host RAM (write-through, when configured). */
	void (*committed)(kvs_tier_mod *t, const kvs_tier_blk *b);
	/* Read @b's copy into host memory @dst: 0 (done, @dst filled), 1 (in
	 * flight: kvs_tier_read_done(@cookie) follows), -EAGAIN (not now:
	 * a miss, the copy stays), another error (a miss, and the copy is
	 * bad: the cache drops it with drop()). @cookie < 2^62. */
	int (*read)(kvs_tier_mod *t, const kvs_tier_blk *b, void *dst,
		    uint64_t cookie);
	/* A tier others write to (the remote tier): how many of the chain
	 * @b[0..n) (blocks this daemon has no record of, idx NONE; the
	 * blocks past a lookup's hits, a window of at most KVS_PROBE_WINDOW
	 * = 64; one window per lookup in flight) it holds, counted from the
	 * first: answered by kvs_tier_probe_done(@cookie). Returns 1 (in
	 * flight) or an error (none). Then fetch() reads one into a new record's host
	 * slot @dst, as read() does (1 or an error; done with
	 * kvs_tier_read_done). */
	int (*probe)(kvs_tier_mod *t, const kvs_tier_blk *b, uint32_t n,
		     uint64_t cookie);
	int (*fetch)(kvs_tier_mod *t, const kvs_tier_blk *b, void *dst,
		     uint64_t cookie);
	/* Whether a read of @idx is in flight (it then fills a host slot):
	 * kvs_cache_check() counts those slots; unset, none is. */
	int (*reading)(const kvs_tier_mod *t, uint32_t idx);
	/* Forget the copy of @b (corrupt, or the block is gone). */
	void (*drop)(kvs_tier_mod *t, const kvs_tier_blk *b);
	/* Host slots held by writes in flight; wait until at least one is
	 * free again (blocking), returning the slots freed (0: none held). */
	uint64_t (*host_held)(const kvs_tier_mod *t);
	int (*wait_held)(kvs_tier_mod *t);
	/* Namespace @id was created (persist it); restore at start: the
	 * namespaces (kvs_tier_ns_restore) and blocks (kvs_tier_rec_restore)
	 * that survived, before serving; the blocks may go on being restored
	 * from poll after that (with find below). */
	void (*ns_created)(kvs_tier_mod *t, uint32_t id, const kvs_ns_desc *d);
	int (*restore)(kvs_tier_mod *t);
	/* A restore that goes on after start (the SSD tier loads its index
	 * in slices from poll): the block (@ns, @hash), which the cache has no
	 * record of, restored now if the tier holds it (a lookup or reserve
	 * must not miss what the load has not come to yet): 0 with *idx, or
	 * -ENOENT (not held, or the restore is over), -ENOMEM. Optional. */
	int (*find)(kvs_tier_mod *t, uint32_t ns, kvs_hash hash, uint32_t *idx);
	/* Read back and check every copy (of namespace @ns, 0: all):
	 * 0 with *res filled (nothing to read), or -EINPROGRESS: @fn(@arg)
	 * answers from poll(); *job names it for verify_cancel(). */
	int (*verify)(kvs_tier_mod *t, uint32_t ns, uint32_t max_failed,
		      kvs_verify_fn fn, void *arg, kvs_verify_result *res,
		      uint32_t *job);
	/* The asker of @job is gone: finish without answering. */
	void (*verify_cancel)(kvs_tier_mod *t, uint32_t job);
} kvs_tier_store_ops;

/*
 * What every tier has. Required: name, tier, close, stats, stats_section
 * (and kvs_tier_mod.counters set), and one of slot (a slot tier,
 * KVS_TIER_GPU) or store (a store tier). Optional: note, and
 * poll, with event_fd when its completions wake the loop (event_fd needs
 * poll; a poll without event_fd is called by whoever drives it).
 */
struct kvs_tier_ops {
	const char *name; /* "gpu", "ssd": logs */
	uint8_t tier;     /* the kvs_tier value of blocks held only here */

	void (*close)(kvs_tier_mod *t); /* waits for its I/O, frees everything */
	/* Readable when poll() has completions to reap; -1 if none. */
	int (*event_fd)(const kvs_tier_mod *t);
	void (*poll)(kvs_tier_mod *t);
	void (*note)(kvs_tier_mod *t, int what, uint64_t n);
	/* Refresh the gauges of its section (t->counters) before a render;
	 * add its per-record memory to st->table_metadata_bytes. */
	void (*stats)(kvs_tier_mod *t, kvs_counters *st);
	/* Its stats section (kvs_stats.h), its tier value in ->tier; listed
	 * for rendering, on or off, by kvs_tiers_stats(). */
	const kvs_stats_section *stats_section;

	const kvs_tier_slot_ops *slot;   /* above host: clients map its slots */
	const kvs_tier_store_ops *store; /* below host: copies, promoted on a hit */
};

/* The common head of every tier's state (its struct starts with it). */
struct kvs_tier_mod {
	const kvs_tier_ops *ops;
	kvs_cache *cache;     /* set by kvs_cache_tier_add */
	const void *counters; /* its section's values (set by the tier) */
};

/* ---- the environment: what a tier may ask of the cache ---------------- */

/* The host address of host slot @off (domain 0's arena). */
void *kvs_tier_host_ptr(const kvs_tier_mod *t, uint64_t off);
/* Host arena bytes (domain 0's). */
uint64_t kvs_tier_host_bytes(const kvs_tier_mod *t);
/* Give back host slot @off that a held write no longer reads. */
void kvs_tier_host_free(kvs_tier_mod *t, uint64_t off);
/* Block @idx's facts; returns 0, or -ENOENT for a free index. */
int kvs_tier_rec(const kvs_tier_mod *t, uint32_t idx, kvs_tier_blk *out);
/* Every record index is below this (the table's capacity). O(1). */
uint32_t kvs_tier_rec_span(const kvs_tier_mod *t);
/* Records whose bytes are in this tier only (r->tier is this tier's). */
uint64_t kvs_tier_only_here(const kvs_tier_mod *t);
/* The copy of @idx is written (after KVS_TIER_WRITING), or failed (@ok
 * 0: a block in no tier now is dropped). */
void kvs_tier_stored(kvs_tier_mod *t, uint32_t idx, int ok);
/* The tier lost its copy of @idx (recycled, corrupt): a block that was
 * only there is dropped. */
void kvs_tier_lost(kvs_tier_mod *t, uint32_t idx);
/* Pin (@delta 1) or unpin (-1) block @idx: while pinned it is not evicted
 * and its slot keeps its bytes (a tier sending them from the slot). */
void kvs_tier_pin(kvs_tier_mod *t, uint32_t idx, int delta);
/* A read started by ops->read() finished: 0, or an error (a miss). */
void kvs_tier_read_done(kvs_tier_mod *t, uint64_t cookie, int res);
/* A probe finished: the tier holds the first @count blocks it was asked
 * about (0, or an error: none). */
void kvs_tier_probe_done(kvs_tier_mod *t, uint64_t cookie, int count);
/* Restore: namespace @d with id @id (the one it had: a later restore of
 * the same id replaces the layout, ids not restored stay free); a block of namespace @ns held only in this tier, READY,
 * with its access stamp; then its parent link, once its parent is in:
 * rec_link returns 1 when linked, 0 when the table has no such parent (yet)
 * or @parent is zero. Call it once per block that links.
 * Errors: KVS_E_LAYOUT, -EEXIST, -EINVAL (bytes differ from the
 * namespace's), -ENOMEM. */
int kvs_tier_ns_restore(kvs_tier_mod *t, const kvs_ns_desc *d, uint32_t id);
int kvs_tier_rec_restore(kvs_tier_mod *t, uint32_t ns, kvs_hash hash,
			 uint64_t bytes, uint64_t stamp, uint32_t *idx);
int kvs_tier_rec_link(kvs_tier_mod *t, uint32_t idx, kvs_hash parent);
/* Whether the table has a record of block @hash of namespace @ns;
 * rec_find also gives its index (KVS_NONE when it has none). */
int kvs_tier_rec_has(const kvs_tier_mod *t, uint32_t ns, kvs_hash hash);
uint32_t kvs_tier_rec_find(const kvs_tier_mod *t, uint32_t ns, kvs_hash hash);

/* ---- the cache's side -------------------------------------------------- */

/*
 * kvs_cache_tier_add - hand tier @t to the cache (at most one per kvs_tier
 * value), before serving: a store tier restores what it kept. From then on
 * the cache owns it (closed by kvs_cache_destroy); on failure it stays the
 * caller's (to close with its ops->close). A slot tier serves
 * owners that attach asking for it (kvs_cache_attach @maps_slots).
 * Errors: -EINVAL (its tier value is none or host, or its ops lack a
 * required member or have both tables or neither: logged, naming it),
 * -EEXIST (that tier is on), -ENODEV (per-uid domains: one tier
 * shared by every domain would mix tenants), -ENOMEM, the restore's error
 * (what it restored stays in the cache: a daemon stops then).
 */
int kvs_cache_tier_add(kvs_cache *c, kvs_tier_mod *t);
/* Whether a store tier is on (a lookup may find more than host RAM has). */
int kvs_cache_has_stores(const kvs_cache *c);
/* The tier of kvs_tier value @tier, or NULL when it is off. */
kvs_tier_mod *kvs_cache_tier(const kvs_cache *c, uint8_t tier);
/* kvs_cache_tier_map - the arena of slot tier @tier that clients map: its
 * fd, bytes, engine kind and device. Errors: -ENODEV (the tier is off). */
int kvs_cache_tier_map(const kvs_cache *c, uint8_t tier, int *fd,
		       uint64_t *bytes, uint32_t *kind, uint32_t *device);
/* kvs_cache_tier_poll - reap @t's completions (event_fd readable). */
void kvs_cache_tier_poll(kvs_tier_mod *t);

#endif /* KVS_TIER_OPS_H */
