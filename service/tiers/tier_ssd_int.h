/*
 * tier_ssd_int.h - the SSD tier's internals, shared by its files only:
 * tier_ssd.c (open, close, the ops table, recycling, stats, completions),
 * tier_ssd_write.c (demotion and write-through), tier_ssd_read.c
 * (promotion reads and verify) and tier_ssd_restore.c (namespaces file and
 * warm restart: the index loads in slices on the loop after READY).
 *
 * Per record index the tier keeps one 8-byte entry (loc): the segment and
 * 4 KiB offset of the block's SSD copy and what I/O it has in flight. The
 * copy's generation is its segment's: recycling a segment drops every copy
 * in it first (on_recycle), so a copy that is still listed is of the
 * segment's current generation (and a read checks the block's header
 * anyway).
 *
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_TIER_SSD_INT_H
#define KVS_TIER_SSD_INT_H

#include <pthread.h>
#include <time.h>

#include "kvs_clock.h"
#include "kvs_index.h"
#include "kvs_nsfile.h"
#include "kvs_log.h" /* kvs_ratelimit */
#include "kvs_ssd.h"
#include "kvs_tier_ops.h"
#include "kvs_pool.h"
#include "tier_ssd.h"

/* A demotion write goes straight from the block's slot, which stays
 * allocated (held by the write) until the write completes: the store may
 * DMA from it until then. Held slots are host-tier capacity that the
 * allocator cannot hand out, so they are capped at 1/DIRECT_SHARE of the
 * host arena (and MAX_STAGED_BYTES); past that, and for a slot that is not
 * 4 KiB-aligned, the block is copied into a staging buffer and its slot is
 * freed at once (the reserve that evicted it needs it now). Past
 * MAX_STAGED_BYTES of staging in flight, an evicted block is dropped
 * (counted as not admitted). */
#define MAX_STAGED_BYTES (256ull << 20)
#define DIRECT_SHARE 16
/* A held slot frees nothing for the allocation that evicted its block, so
 * the allocator evicts one block more, and gets that slot back only when
 * the write completes: how many blocks a small host tier holds would then
 * depend on I/O timing. Below a share of this many blocks, the few copies
 * saved are not worth it: every demotion is staged. */
#define DIRECT_MIN_BLOCKS 8
/* Staging buffers are kept for reuse up to this many bytes: a fresh 1 MiB
 * buffer is an mmap, 256 page faults and a munmap. */
#define STAGE_POOL_BYTES (64ull << 20)
#define STAGE_POOL_MAX 256
/* Verify: reads in flight per job, into bounce buffers. */
#define VERIFY_BATCH 32

/* Cookies: a write's is its wslot, a promotion read's its rslot; a verify
 * read: COOKIE_VERIFY | job << 32 | read slot. */
#define COOKIE_VERIFY (1ull << 62)

enum { LOC_SSD = 1, LOC_WRITING = 2, LOC_READING = 4 };
#define LOC_FLAG_BITS 3
/* Offsets in 4 KiB units take the other 29 bits: segments up to 2 TiB. */
#define LOC_MAX_OFF4K ((1u << (32 - LOC_FLAG_BITS)) - 1)

typedef struct loc {
	uint32_t seg;  /* segment of the copy */
	uint32_t word; /* offset / 4 KiB << LOC_FLAG_BITS | flags */
} loc;

static inline uint32_t loc_flags(const loc *l)
{
	return l->word & ((1u << LOC_FLAG_BITS) - 1);
}

static inline uint32_t loc_off4k(const loc *l)
{
	return l->word >> LOC_FLAG_BITS;
}

static inline void loc_set(loc *l, uint32_t f)
{
	l->word |= f;
}

static inline void loc_clear(loc *l, uint32_t f)
{
	l->word &= ~f;
}

typedef struct wslot {    /* one write in flight */
	uint32_t idx;     /* record, KVS_NONE when the slot is free */
	uint32_t ns;      /* the record's block, to catch a reused index */
	kvs_hash hash;
	kvs_hash parent;  /* for the index entry */
	uint64_t stamp;
	void *buf;        /* staging copy, or NULL: written from a held slot */
	uint64_t held;    /* the host slot the write reads (buf NULL) */
	int released;     /* the held slot was freed before the completion */
	int applied;      /* ... and the write's success recorded then */
	uint64_t bytes;
	uint64_t csum;    /* the payload's checksum, as written in its header */
} wslot;

typedef struct rslot {    /* one promotion read in flight */
	uint32_t idx;     /* record, KVS_NONE when free */
	uint64_t cookie;  /* the cache's */
} rslot;

typedef struct vread {    /* one verify read in flight; free: buf NULL */
	void *buf;
	kvs_hash hash;    /* the record's block, to catch a reused index */
	uint64_t gen;     /* the location read, to catch a moved block */
	uint32_t idx, ns, seg, off4k;
} vread;

typedef struct vjob {     /* one verify */
	int gone;         /* the asker went away: finish without answering */
	kvs_verify_fn fn;
	void *arg;
	uint32_t ns, max_failed, cursor, inflight;
	kvs_verify_result res;
	kvs_verify_fail *fails; /* max_failed */
	vread r[VERIFY_BATCH];
} vjob;

/* A namespace whose append to the namespaces file failed is tried again
 * no sooner. */
#define NS_RETRY_MS 1000

/* The background load of the index at start (tier_ssd_restore.c): a
 * reader thread walks LMDB (page faults and all) into batches of entries,
 * the loop applies one batch a turn (memory only). */
#define LOAD_SLICE 1024 /* entries per slice: about 2 ms of the loop */
#define LOAD_SLICE_MAX 65536u
#define LOAD_BATCHES 2  /* read ahead of the loop */
#define LOAD_REWINDS 4  /* stale batches in a row before the loop walks */

typedef struct ssd_entry {
	kvs_index_key k;
	kvs_index_val v;
} ssd_entry;

typedef struct ssd_batch {
	kvs_index_pos from; /* where its walk began */
	uint64_t seq;       /* the loop's drops flushed when it was read */
	uint32_t n;
	int done;           /* the walk passed the last entry */
	int err;            /* the walk's error, or 0 */
	ssd_entry *e;       /* slice entries */
} ssd_batch;

typedef struct ssd_pend { /* a block loaded before its parent */
	uint32_t idx, ns;
	kvs_hash hash, parent;
} ssd_pend;

typedef struct ssd_load {
	int on;               /* loading: slices run from poll */
	kvs_index_pos pos;    /* the walk's next entry */
	uint32_t slice;       /* entries per slice */
	uint32_t pause_us;    /* test knob: a pause after each slice */
	uint64_t loaded, dropped, faults;
	uint64_t slice_max_us; /* the longest slice (the load's stall) */
	uint64_t slice_max_majflt; /* most page faults from disk in one */
	uint64_t slice_max_cpu_us; /* most CPU time of the loop in one */
	ssd_pend *pend;       /* links to make once the walk is done */
	uint64_t n, cap, linked;
	struct timespec t0;
	/* The reader thread; without it (it could not start, or batches kept
	 * going stale) the loop walks @pos itself. The loop owns the rest but
	 * for what @mu guards. */
	int reader_on, walked; /* walked: the last batch is applied */
	pthread_t reader;
	uint64_t drops;       /* index entries the loop deleted meanwhile */
	uint32_t stale;       /* batches in a row found stale */
	uint64_t rewinds;
	pthread_mutex_t mu;   /* guards from here on */
	pthread_cond_t cv;
	ssd_batch b[LOAD_BATCHES];
	uint32_t head, nready; /* ready batches: b[head], b[head + 1] .. */
	kvs_index_pos next;   /* where the reader goes on */
	uint64_t epoch;       /* a rewind voids the batch being read */
	uint64_t flushed;     /* drops committed to the index */
	int stop;
} ssd_load;

/* What the tier knows of a namespace id (tier_ssd_restore.c). A block
 * goes to SSD only once its namespace's entry is in the namespaces file:
 * a restart must give it its id back, or its blocks are lost. */
enum {
	NSF_NONE = 0, /* not told of it: no block of it is written */
	NSF_PENDING,  /* told, not in the file yet (filed at its first block) */
	NSF_FILED,    /* in the file, filed since the start */
	NSF_RESTORED, /* in the file at the start: the index may hold its blocks */
	NSF_NEVER,    /* cannot be encoded: never on SSD */
};

typedef struct ssd_ns {
	int state;
	kvs_ns_layout entry; /* NSF_PENDING: what to file (strings in buf) */
	uint8_t *buf;
	uint64_t retry_at;   /* ms (now_ms): its next append, after one failed */
} ssd_ns;

typedef struct ssd_tier {
	kvs_tier_mod base;    /* first: the cache's handle */
	kvs_tier_ssd_stats counts; /* its section, tier_ssd.* (base.counters) */
	kvs_ssd *ssd;
	kvs_index *ix;
	char dir[256];
	uint64_t seg_bytes;
	int admit_hit, write_through, enabled;
	loc *loc;         /* by record index */
	uint32_t nloc;
	kvs_pool ws;      /* of wslot, by the write's cookie */
	uint32_t writes_inflight;
	kvs_pool rs;      /* of rslot, by the read's cookie */
	uint64_t staged;
	uint64_t held, nheld; /* bytes and slots held by direct writes */
	struct { void *p; uint64_t bytes; } pool[STAGE_POOL_MAX]; /* idle staging */
	uint32_t npool;
	uint64_t pool_bytes;
	uint64_t blocks;  /* records with an SSD copy */
	kvs_pool vs;      /* of vjob, by id (a cookie's 30 bits) */
	/* A stall: the store has no segment to write now (-EBUSY). Writes are
	 * dropped until it has one (see stall_begin in tier_ssd_write.c). */
	uint64_t stall_since;  /* ms (now_ms) the episode began; 0: none */
	uint64_t stall_tried;  /* ms of the store's last refusal */
	uint64_t stall_drops;  /* writes dropped in this episode */
	int stall_poke;        /* completions reaped since that refusal */
	int stall_logged;      /* this episode's start was logged */
	kvs_ratelimit rl_stall;
	/* Off after an I/O error (enabled 0) until retry_at (now_ms; 0:
	 * for good); retry_s the last wait, doubled by each failed try. */
	uint64_t retry_at;
	uint32_t retry_first_s, retry_s;
	ssd_load ld;
	ssd_ns *nsv;      /* by namespace id - 1 */
	uint32_t nnsv;
	kvs_ratelimit rl_ns;
} ssd_tier;

static inline ssd_tier *ssd_of(const kvs_tier_mod *t)
{
	return (ssd_tier *)t;
}

static inline wslot *ssd_wslot(const ssd_tier *t, uint32_t w)
{
	return kvs_pool_at(&t->ws, w);
}

static inline vjob *ssd_vjob(const ssd_tier *t, uint32_t id)
{
	return kvs_pool_at(&t->vs, id);
}

/* The entry of @idx, or a zero one past the end (read-only use). */
static inline const loc *ssd_loc(const ssd_tier *t, uint32_t idx)
{
	static const loc none;

	return idx < t->nloc ? &t->loc[idx] : &none;
}

/* tier_ssd.c */
kvs_ssd_loc ssd_loc_of(const ssd_tier *t, uint32_t idx, uint64_t bytes);
kvs_index_key ssd_key_of(const kvs_tier_blk *b);
/* An I/O error: count it and stop admitting (serving from RAM) for a
 * while (retry_s). */
void ssd_disable(ssd_tier *t, int err, const char *what);
/* Whether demotion is on; one that is off comes back on (logged, counted)
 * once its retry time has passed. */
int ssd_enabled(ssd_tier *t);
/* ssd_enabled() without turning anything on. */
int ssd_enabled_now(const ssd_tier *t);
/* @idx loses its SSD copy: out of the index (@del_index), and the cache
 * told (a block only here is dropped). */
void ssd_drop(ssd_tier *t, uint32_t idx, int del_index);

/* tier_ssd_write.c */
int ssd_demote(kvs_tier_mod *tt, const kvs_tier_blk *b, int *holds);
int ssd_keeps(const kvs_tier_mod *tt, const kvs_tier_blk *b);
void ssd_committed(kvs_tier_mod *tt, const kvs_tier_blk *b);
void ssd_write_done(ssd_tier *t, const kvs_ssd_cqe *q);
uint64_t ssd_host_held(const kvs_tier_mod *tt);
int ssd_wait_held(kvs_tier_mod *tt);
/* The write in flight of @b, or NULL. */
const wslot *ssd_write_of(const ssd_tier *t, const kvs_tier_blk *b);

/* tier_ssd_read.c */
int ssd_read(kvs_tier_mod *tt, const kvs_tier_blk *b, void *dst, uint64_t cookie);
void ssd_read_done(ssd_tier *t, const kvs_ssd_cqe *q);
int ssd_verify(kvs_tier_mod *tt, uint32_t ns, uint32_t max_failed,
	       kvs_verify_fn fn, void *arg, kvs_verify_result *res,
	       uint32_t *job);
void ssd_verify_cancel(kvs_tier_mod *tt, uint32_t job);
void ssd_verify_done(ssd_tier *t, const kvs_ssd_cqe *q);
void ssd_vjob_free(ssd_tier *t, uint32_t id);

/* tier_ssd_restore.c */
void ssd_ns_created(kvs_tier_mod *tt, uint32_t id, const kvs_ns_desc *d);
/* Whether blocks of namespace @id may go to SSD: its entry is in the
 * namespaces file, appended now if it was not (a failed append is tried
 * again at a later block, NS_RETRY_MS apart; refusals are counted). */
int ssd_ns_filed(ssd_tier *t, uint32_t id);
void ssd_ns_free(ssd_tier *t);
/* Restore the namespaces and start loading the index: the blocks come in
 * slices (ssd_load_step, from poll, which it keeps readable until done). */
int ssd_restore(kvs_tier_mod *tt);
void ssd_load_step(ssd_tier *t);
/* Stop the load's reader thread, if it runs (the load ends, or the tier
 * closes). */
void ssd_load_stop(ssd_tier *t);
/* While loading: load the entry of (@ns, @hash) now, if it is valid. */
int ssd_find(kvs_tier_mod *tt, uint32_t ns, kvs_hash hash, uint32_t *idx);

#endif /* KVS_TIER_SSD_INT_H */
