/* tier_ssd.c - the SSD tier under the host tier (see tier_ssd.h, docs/ssd.md). */
#define _GNU_SOURCE
#include "tier_ssd.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvs_index.h"
#include "kvs_log.h"
#include "kvs_ssd.h"
#include "kvs_wire.h"
#include "kvs_wire_admin.h"

#define NONE KVS_REC_NONE
#define DEFAULT_SEGMENTS 4
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
#define NS_FILE "namespaces"
/* Staging buffers are kept for reuse up to this many bytes: a fresh 1 MiB
 * buffer is an mmap, 256 page faults and a munmap. */
#define STAGE_POOL_BYTES (64ull << 20)
#define STAGE_POOL_MAX 256

enum { EXT_SSD = 1, EXT_WRITING = 2, EXT_READING = 4 };

/* Side entry of one record: 24 bytes per record index. */
typedef struct ext {
	uint64_t gen;   /* segment generation of the SSD copy */
	uint32_t seg;   /* segment */
	uint32_t off4k; /* record offset in the segment / 4 KiB */
	uint32_t hkids; /* children in host RAM */
	uint8_t flags;  /* EXT_* */
} ext;

typedef struct wslot {    /* one write in flight */
	uint32_t idx;     /* record, NONE when the slot is free */
	uint32_t next;    /* free list */
	kvs_hash key;     /* the record's table key, to catch a reused index */
	void *buf;        /* staging copy, or NULL: written from a held slot */
	uint64_t held;    /* the host slot the write reads (buf NULL) */
	int released;     /* the held slot was freed before the completion */
	int applied;      /* ... and the write's success recorded then */
	uint64_t bytes;
	uint64_t csum;    /* the payload's checksum, as written in its header */
} wslot;

/* Verify: reads in flight per job, into bounce buffers. */
#define VERIFY_BATCH 32

typedef struct vread {    /* one verify read in flight; free: buf NULL */
	void *buf;
	kvs_hash key;     /* the record's table key, to catch a reused index */
	uint64_t gen;     /* the location read, to catch a moved block */
	uint32_t idx, ns, seg, off4k;
} vread;

typedef struct vjob {     /* one VERIFY request */
	kvs_owner *owner; /* NULL once the connection is gone */
	kvs_cache_verify_fn fn;
	void *arg;
	uint32_t ns, max_failed, cursor, inflight;
	kvs_wire_verify_reply rep;
	kvs_wire_verify_fail *fails; /* max_failed */
	vread r[VERIFY_BATCH];
} vjob;

typedef struct promo {    /* one lookup's reads */
	kvs_owner *owner; /* NULL once the connection is gone */
	uint32_t lease, n, pending, cut, next;
	uint32_t *idx;    /* the lease's records, n */
	int *res;         /* per position: 0, or the read's error */
	kvs_block *out;
} promo;

struct kvs_tier_ssd {
	kvs_ssd *ssd;
	kvs_index *ix;
	char dir[256];
	uint64_t seg_bytes;
	int admit_hit, write_through, enabled;
	ext *ext;
	uint32_t next; /* ext entries */
	wslot *ws;
	uint32_t nws, free_ws, writes_inflight;
	uint64_t staged;
	uint64_t held, nheld; /* bytes and slots held by direct writes */
	struct { void *p; uint64_t bytes; } pool[STAGE_POOL_MAX]; /* idle staging */
	uint32_t npool;
	uint64_t pool_bytes;
	promo *ps;
	uint32_t nps, free_ps;
	uint64_t blocks, ssd_only; /* records with an SSD copy; without RAM */
	vjob **vs;     /* verify jobs by id, NULL when free */
	uint32_t nvs;
};

#define COOKIE_READ (1ull << 63)
/* A verify read: COOKIE_VERIFY | job << 32 | read slot. */
#define COOKIE_VERIFY (1ull << 62)

static ext *ext_of(const kvs_cache *c, uint32_t idx)
{
	static const ext none;

	if (idx >= c->ssd->next)
		return (ext *)&none; /* read-only use: callers check flags */
	return &c->ssd->ext[idx];
}

static int ext_room(kvs_tier_ssd *t, uint32_t idx)
{
	if (idx >= t->next) {
		uint32_t n = t->next ? t->next : 1024;
		ext *ne;

		while (n <= idx)
			n *= 2;
		ne = realloc(t->ext, (size_t)n * sizeof(*ne));
		if (!ne)
			return -ENOMEM;
		memset(ne + t->next, 0, (size_t)(n - t->next) * sizeof(*ne));
		t->ext = ne;
		t->next = n;
	}
	return 0;
}

int tier_ssd_rec_new(kvs_cache *c, uint32_t idx)
{
	int rc = ext_room(c->ssd, idx);

	if (rc == 0)
		memset(&c->ssd->ext[idx], 0, sizeof(ext));
	return rc;
}

uint32_t tier_ssd_kids(const kvs_cache *c, uint32_t idx)
{
	return ext_of(c, idx)->hkids;
}

void tier_ssd_kids_add(kvs_cache *c, uint32_t idx, int delta)
{
	/* Every record that can have children got its entry at insert. */
	if (idx < c->ssd->next)
		c->ssd->ext[idx].hkids += (uint32_t)delta;
}

uint64_t tier_ssd_slots_held(const kvs_cache *c)
{
	return c->ssd ? c->ssd->nheld : 0;
}

int tier_ssd_reading(const kvs_cache *c, uint32_t idx)
{
	return !!(ext_of(c, idx)->flags & EXT_READING);
}

int tier_ssd_promotable(const kvs_cache *c, uint32_t idx)
{
	uint8_t f = ext_of(c, idx)->flags;

	/* On SSD with no I/O in flight, or on its way there: a demotion write
	 * in flight is served from its staging copy. */
	return !(f & EXT_READING) && (f & (EXT_SSD | EXT_WRITING)) != 0 &&
	       (f & (EXT_SSD | EXT_WRITING)) != (EXT_SSD | EXT_WRITING);
}

static kvs_ssd_loc loc_of(const kvs_cache *c, uint32_t idx)
{
	const ext *e = ext_of(c, idx);
	const kvs_rec *r = cache_rec(c, idx);

	return (kvs_ssd_loc){ .seg = e->seg, .gen = e->gen,
			      .off = (uint64_t)e->off4k << 12,
			      .len = (uint32_t)c->nss[r->ns - 1].info.block_bytes };
}

static kvs_index_key key_of(const kvs_rec *r)
{
	return (kvs_index_key){ .ns = r->ns, .hash = cache_ns_key(r->ns, r->hash) };
}

static void disable(kvs_cache *c, int err, const char *what)
{
	c->stats->tier_ssd_io_errors++;
	if (c->ssd->enabled)
		kvs_err("SSD tier: %s failed: %s: demotion turned off, serving "
			"from RAM", what, kvs_strerror(err));
	c->ssd->enabled = 0;
}

/* @idx loses its SSD copy (recycled, corrupt): out of the index; a record
 * in no other tier is forgotten. */
static void drop_ssd(kvs_cache *c, uint32_t idx, int del_index)
{
	kvs_tier_ssd *t = c->ssd;
	ext *e = &t->ext[idx];
	kvs_rec *r = cache_rec(c, idx);

	if (!(e->flags & EXT_SSD))
		return;
	if (del_index) {
		kvs_index_key k = key_of(r);

		kvs_index_del(t->ix, &k);
	}
	e->flags &= (uint8_t)~EXT_SSD;
	t->blocks--;
	if (r->tier == KVS_TIER_SSD) {
		t->ssd_only--;
		cache_set_tier(c, idx, KVS_TIER_NONE);
		cache_forget(c, idx);
	}
}

/* ---- recycling ------------------------------------------------------- */

/* The store reuses segment @seg: every block in it loses its SSD copy. A
 * segment with a pinned or promoting block is kept (-EBUSY). O(records),
 * once per segment's worth of writes. */
static int on_recycle(void *arg, uint32_t seg, uint64_t gen)
{
	kvs_cache *c = arg;
	kvs_tier_ssd *t = c->ssd;
	uint64_t n = 0;

	for (uint32_t i = 0; i < t->next; i++) {
		const ext *e = &t->ext[i];

		if ((e->flags & EXT_SSD) && e->seg == seg && e->gen == gen &&
		    cache_rec(c, i)->state != KVS_REC_FREE &&
		    (cache_rec(c, i)->refs > 0 || (e->flags & EXT_READING)))
			return -EBUSY;
	}
	for (uint32_t i = 0; i < t->next; i++) {
		const ext *e = &t->ext[i];

		if ((e->flags & EXT_SSD) && e->seg == seg && e->gen == gen &&
		    cache_rec(c, i)->state != KVS_REC_FREE) {
			drop_ssd(c, i, 0);
			n++;
		}
	}
	kvs_index_del_segment(t->ix, seg);
	c->stats->tier_ssd_recycled_segments++;
	c->stats->tier_ssd_stale_blocks += (int64_t)n;
	kvs_debug("SSD tier: segment %u recycled, %" PRIu64 " blocks dropped", seg, n);
	return 0;
}

/* ---- demotion and write-through -------------------------------------- */

/* A 4 KiB-aligned staging buffer of @bytes (rounded up to 4 KiB). */
static void *stage_get(kvs_tier_ssd *t, uint64_t bytes)
{
	void *p;

	bytes = (bytes + 4095) & ~4095ull;
	for (uint32_t i = t->npool; i-- > 0;)
		if (t->pool[i].bytes == bytes) {
			p = t->pool[i].p;
			t->pool[i] = t->pool[--t->npool];
			t->pool_bytes -= bytes;
			return p;
		}
	return posix_memalign(&p, 4096, bytes) ? NULL : p;
}

static void stage_put(kvs_tier_ssd *t, void *p, uint64_t bytes)
{
	bytes = (bytes + 4095) & ~4095ull;
	if (!p)
		return;
	if (t->npool < STAGE_POOL_MAX && t->pool_bytes + bytes <= STAGE_POOL_BYTES) {
		t->pool[t->npool].p = p;
		t->pool[t->npool++].bytes = bytes;
		t->pool_bytes += bytes;
		return;
	}
	free(p);
}

/* The bytes direct writes may hold in the host arena (see DIRECT_SHARE). */
static uint64_t direct_max(const kvs_cache *c)
{
	uint64_t m = kvs_cache_arena_bytes(c) / DIRECT_SHARE;

	return m < MAX_STAGED_BYTES ? m : MAX_STAGED_BYTES;
}

/* Write @idx's block to SSD. @hold: the slot may stay allocated until the
 * write completes (a demotion: the record is leaving RAM); else (write-
 * through: the record stays in RAM and may be evicted, dropped or its slot
 * freed at any time) the bytes are copied first. Returns 0 (in flight), or
 * an error (nothing in flight). The checksum is computed here, from the
 * bytes the store writes (the staging copy, or the slot itself). */
static int write_block(kvs_cache *c, uint32_t idx, int hold)
{
	kvs_tier_ssd *t = c->ssd;
	kvs_rec *r = cache_rec(c, idx);
	uint64_t bytes = c->nss[r->ns - 1].info.block_bytes;
	kvs_ssd_blk b = { .ns = r->ns, .len = (uint32_t)bytes,
			  .hash = cache_ns_key(r->ns, r->hash) };
	void *slot = cache_slot_ptr(c, r->offset), *buf = NULL;
	kvs_ssd_loc loc;
	uint32_t w;
	int rc;

	/* Straight from the arena only where O_DIRECT can take the slot as
	 * it is: a 4 KiB-aligned address and whole 4 KiB sectors. */
	hold = hold && ((uintptr_t)slot & 4095) == 0 && (bytes & 4095) == 0 &&
	       direct_max(c) >= DIRECT_MIN_BLOCKS * bytes &&
	       t->held + bytes <= direct_max(c);
	if (!hold && t->staged + bytes > MAX_STAGED_BYTES)
		return -EAGAIN;
	if (t->free_ws == NONE) {
		uint32_t n = t->nws ? t->nws * 2 : 64;
		wslot *nw = realloc(t->ws, (size_t)n * sizeof(*nw));

		if (!nw)
			return -ENOMEM;
		for (uint32_t i = n; i-- > t->nws;) {
			nw[i] = (wslot){ .idx = NONE, .next = t->free_ws };
			t->free_ws = i;
		}
		t->ws = nw;
		t->nws = n;
	}
	if (!hold) {
		buf = stage_get(t, bytes);
		if (!buf)
			return -ENOMEM;
		memcpy(buf, slot, bytes);
	}
	b.csum = kvs_ssd_checksum(hold ? slot : buf, bytes);
	w = t->free_ws;
	/* The store may recycle a segment inside this call (on_recycle):
	 * @idx has no SSD copy, so it is not touched. */
	rc = kvs_ssd_write(t->ssd, &b, hold ? slot : buf, KVS_SSD_CSUM, w, &loc);
	if (rc < 0) {
		stage_put(t, buf, bytes);
		return rc;
	}
	r = cache_rec(c, idx);
	t->free_ws = t->ws[w].next;
	t->ws[w] = (wslot){ .idx = idx, .key = r->hash, .buf = buf,
			    .held = hold ? r->offset : 0, .bytes = bytes,
			    .csum = b.csum };
	t->ext[idx].flags |= EXT_WRITING;
	t->writes_inflight++;
	if (hold) {
		t->held += bytes;
		t->nheld++;
		c->stats->tier_ssd_writes_direct++;
	} else {
		t->staged += bytes;
		c->stats->tier_ssd_writes_staged++;
	}
	return 0;
}

/* Whether a direct write of @idx in flight reads slot @off. */
static int held_by_write(const kvs_tier_ssd *t, uint32_t idx, uint64_t off)
{
	if (!(t->ext[idx].flags & EXT_WRITING) || t->nheld == 0)
		return 0;
	for (uint32_t w = 0; w < t->nws; w++)
		if (t->ws[w].idx == idx && !t->ws[w].buf && !t->ws[w].released &&
		    t->ws[w].held == off)
			return 1;
	return 0;
}

int tier_ssd_demote(kvs_cache *c, uint32_t idx)
{
	kvs_tier_ssd *t = c->ssd;
	kvs_rec *r = cache_rec(c, idx);
	ext *e = &t->ext[idx];
	int rc;

	if (!(e->flags & (EXT_SSD | EXT_WRITING))) {
		if (!t->enabled)
			return 0;
		if (t->admit_hit && r->hits == 0) {
			c->stats->tier_ssd_admission_rejected++;
			return 0;
		}
		rc = write_block(c, idx, 1);
		if (rc == -EAGAIN) {
			c->stats->tier_ssd_admission_rejected++;
			return 0;
		}
		if (rc < 0) {
			if (rc == -ENOSPC || rc == -EIO)
				disable(c, rc, "demotion write");
			return 0;
		}
		r = cache_rec(c, idx);
	}
	/* On SSD already (promoted, written through) or on its way there. A
	 * slot that the write reads from is freed by the write's completion. */
	if (!held_by_write(t, idx, r->offset))
		kvs_slab_free(c->slab, r->offset);
	c->stats->tier_ssd_demotions++;
	if (e->flags & EXT_SSD) {
		t->ssd_only++;
		cache_set_tier(c, idx, KVS_TIER_SSD);
	} else {
		cache_set_tier(c, idx, KVS_TIER_NONE);
	}
	return 1;
}

int tier_ssd_keeps(const kvs_cache *c, uint32_t idx)
{
	const kvs_tier_ssd *t = c->ssd;

	if (ext_of(c, idx)->flags & (EXT_SSD | EXT_WRITING))
		return 1;
	return t->enabled && !(t->admit_hit && cache_rec(c, idx)->hits == 0);
}

void tier_ssd_commit(kvs_cache *c, uint32_t idx)
{
	int rc;

	if (!c->ssd->write_through || !c->ssd->enabled)
		return;
	rc = write_block(c, idx, 0);
	if (rc < 0 && rc != -EAGAIN && rc != -ENOMEM)
		disable(c, rc, "write-through");
}

/* Whether @w's record is still the one it writes. A record being written
 * is never dropped (it is READY, has no SSD copy to recycle, and RAM
 * eviction keeps it), so this is a consistency check. */
static int write_rec_ok(kvs_cache *c, const wslot *w)
{
	const kvs_rec *r = cache_rec(c, w->idx);

	if (r->state == KVS_REC_FREE || r->hash.lo != w->key.lo ||
	    r->hash.hi != w->key.hi) {
		kvs_err("SSD tier: write completion for a record that changed");
		return 0;
	}
	return 1;
}

/* The write of @idx succeeded: it has its SSD copy, indexed. */
static void write_ok(kvs_cache *c, uint32_t idx, const kvs_ssd_cqe *q)
{
	kvs_tier_ssd *t = c->ssd;
	kvs_rec *r = cache_rec(c, idx);
	ext *e = &t->ext[idx];
	kvs_index_key k = key_of(r);
	kvs_index_val v = { .seg = q->loc.seg, .len = q->loc.len,
			    .gen = q->loc.gen, .off = q->loc.off,
			    .csum = q->blk.csum, .atime = r->stamp };

	if (r->parent != NONE) {
		const kvs_rec *p = cache_rec(c, r->parent);

		v.parent = cache_ns_key(p->ns, p->hash);
	}
	e->flags &= (uint8_t)~EXT_WRITING;
	e->flags |= EXT_SSD;
	e->seg = q->loc.seg;
	e->gen = q->loc.gen;
	e->off4k = (uint32_t)(q->loc.off >> 12);
	t->blocks++;
	kvs_index_put(t->ix, &k, &v);
	c->stats->tier_ssd_writes++;
	c->stats->tier_ssd_bytes_written += q->loc.len;
	if (r->tier == KVS_TIER_NONE) {
		t->ssd_only++;
		cache_set_tier(c, idx, KVS_TIER_SSD);
	}
}

/* The store has finished reading write @q's payload (kvs_ssd_wait, inside
 * an allocation): a slot it held goes back to the allocator now. A write
 * that succeeded is also recorded now, so that a lookup being promoted
 * around this allocation reads the block from SSD (its slot is gone); the
 * completion, reaped later, then only frees the write's entry. A failed
 * one is left to the completion: forgetting a record is not for the middle
 * of an allocation. */
static void on_release(void *arg, const kvs_ssd_cqe *q)
{
	kvs_cache *c = arg;
	kvs_tier_ssd *t = c->ssd;
	wslot *w = &t->ws[q->cookie];

	if (w->buf || w->released)
		return;
	w->released = 1;
	kvs_slab_free(c->slab, w->held);
	t->held -= w->bytes;
	t->nheld--;
	if (q->res == 0 && write_rec_ok(c, w)) {
		write_ok(c, w->idx, q);
		w->applied = 1;
	}
}

static void write_done(kvs_cache *c, const kvs_ssd_cqe *q)
{
	kvs_tier_ssd *t = c->ssd;
	wslot *w = &t->ws[q->cookie];
	uint32_t idx = w->idx;
	int applied = w->applied;

	if (w->buf) {
		stage_put(t, w->buf, w->bytes);
		t->staged -= w->bytes;
	} else if (!w->released) {
		/* The store is done with the slot: it can be handed out. */
		kvs_slab_free(c->slab, w->held);
		t->held -= w->bytes;
		t->nheld--;
	}
	t->writes_inflight--;
	if (applied || !write_rec_ok(c, w))
		goto out;
	if (q->res == 0) {
		write_ok(c, idx, q);
		goto out;
	}
	t->ext[idx].flags &= (uint8_t)~EXT_WRITING;
	disable(c, q->res, "write");
	if (cache_rec(c, idx)->tier == KVS_TIER_NONE)
		cache_forget(c, idx);
out:
	w->idx = NONE;
	w->buf = NULL;
	w->next = t->free_ws;
	t->free_ws = (uint32_t)q->cookie;
}

int tier_ssd_wait_held(kvs_cache *c)
{
	kvs_tier_ssd *t = c->ssd;
	uint64_t before = t->nheld;
	int rc = 0;

	if (before == 0)
		return 0;

	/* Each wait returns once some write has finished; a staged one frees
	 * no slot, so wait again until a held one does or none is left. */
	while (t->nheld == before && (rc = kvs_ssd_wait(t->ssd, on_release, c)) > 0)
		;
	if (rc < 0)
		kvs_err("SSD tier: waiting for a demotion write failed: %s",
			kvs_strerror(rc));
	c->stats->tier_ssd_held_waits++;
	return (int)(before - t->nheld);
}

/* ---- promotion -------------------------------------------------------- */

/* The write in flight of @idx, or NULL. */
static const wslot *write_of(const kvs_tier_ssd *t, uint32_t idx, const kvs_hash *key)
{
	for (uint32_t w = 0; w < t->nws; w++)
		if (t->ws[w].idx == idx && t->ws[w].key.lo == key->lo &&
		    t->ws[w].key.hi == key->hi)
			return &t->ws[w];
	return NULL;
}

/* @idx now has its bytes in its host slot again: back in RAM. */
static void promoted(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = cache_rec(c, idx);

	c->stats->tier_ssd_promotions++;
	r->gen = ++c->gen;
	c->nss[r->ns - 1].info.blocks++;
	if (r->tier == KVS_TIER_SSD)
		c->ssd->ssd_only--;
	cache_set_tier(c, idx, KVS_TIER_HOST);
	kvs_policy_touch(c->policy, idx);
	cache_sync_evictable(c, idx);
}

static int promo_new(kvs_tier_ssd *t, uint32_t n, uint32_t *out)
{
	promo *p;
	uint32_t s;

	if (t->free_ps == NONE) {
		uint32_t m = t->nps ? t->nps * 2 : 16;
		promo *np = realloc(t->ps, (size_t)m * sizeof(*np));

		if (!np)
			return -ENOMEM;
		for (uint32_t i = m; i-- > t->nps;) {
			np[i] = (promo){ .next = t->free_ps };
			t->free_ps = i;
		}
		t->ps = np;
		t->nps = m;
	}
	s = t->free_ps;
	p = &t->ps[s];
	p->idx = malloc((size_t)n * sizeof(*p->idx));
	p->res = calloc(n, sizeof(*p->res));
	p->out = malloc((size_t)n * sizeof(*p->out));
	if (!p->idx || !p->res || !p->out) {
		free(p->idx);
		free(p->res);
		free(p->out);
		return -ENOMEM;
	}
	t->free_ps = p->next;
	p->n = n;
	p->pending = 0;
	*out = s;
	return 0;
}

static void promo_free(kvs_tier_ssd *t, uint32_t s)
{
	promo *p = &t->ps[s];

	free(p->idx);
	free(p->res);
	free(p->out);
	*p = (promo){ .next = t->free_ps };
	t->free_ps = s;
}

/* Every read of promotion @s is done: answer with the chain up to the first
 * block that failed, drop the failed ones. */
static void promo_finish(kvs_cache *c, uint32_t s)
{
	kvs_tier_ssd *t = c->ssd;
	promo *p = &t->ps[s];
	kvs_owner *o = p->owner;
	uint32_t hits = p->cut;
	uint64_t lid = 0;

	for (uint32_t i = 0; i < p->cut; i++)
		if (p->res[i] < 0) {
			hits = i;
			break;
		}
	if (o) {
		lid = cache_lookup_finish(c, p->lease, hits, p->out);
		o->promo = NONE;
	}
	/* Unpinned now: a block that failed verification leaves the index
	 * and the table; its descendants become unreachable. */
	for (uint32_t i = 0; i < p->n; i++)
		if (p->res[i] < 0)
			drop_ssd(c, p->idx[i], 1);
	c->stats->tier_ssd_lookup_hits += hits;
	if (o && o->done)
		o->done(o->done_arg, (int)hits, lid, p->out);
	promo_free(t, s);
}

static void read_done(kvs_cache *c, const kvs_ssd_cqe *q)
{
	kvs_tier_ssd *t = c->ssd;
	uint32_t s = (uint32_t)(q->cookie >> 32) & 0x7fffffffu;
	uint32_t pos = (uint32_t)q->cookie;
	promo *p = &t->ps[s];
	uint32_t idx = p->idx[pos];
	kvs_rec *r = cache_rec(c, idx);

	t->ext[idx].flags &= (uint8_t)~EXT_READING;
	if (q->res == 0) {
		c->stats->tier_ssd_reads++;
		c->stats->tier_ssd_bytes_read += q->loc.len;
		promoted(c, idx);
	} else {
		kvs_slab_free(c->slab, r->offset);
		p->res[pos] = q->res;
		if (q->res == -EBADMSG) {
			c->stats->tier_ssd_corrupt_blocks++;
			kvs_warn("SSD tier: block in segment %u at %" PRIu64
				 " failed verification: dropped", q->loc.seg,
				 q->loc.off);
		} else if (q->res == -ESTALE) {
			c->stats->tier_ssd_stale_blocks++;
		} else {
			disable(c, q->res, "read");
		}
	}
	if (--p->pending == 0)
		promo_finish(c, s);
}

int tier_ssd_promote(kvs_cache *c, kvs_owner *o, uint32_t s, kvs_block *out,
		     uint64_t *lease_out)
{
	kvs_tier_ssd *t = c->ssd;
	lease *l = &c->leases[s];
	uint32_t n = l->n, ps, reads = 0;
	promo *p;
	int rc = promo_new(t, n, &ps);

	if (rc < 0) {
		cache_lookup_finish(c, s, 0, out);
		return rc;
	}
	p = &t->ps[ps];
	memcpy(p->idx, l->recs, (size_t)n * sizeof(uint32_t));
	p->owner = o;
	p->lease = s;
	p->cut = n;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t idx = p->idx[i];
		kvs_rec *r = cache_rec(c, idx);
		kvs_ssd_loc loc;
		kvs_ssd_blk want;
		uint64_t off;

		if (r->tier == KVS_TIER_HOST)
			continue;
		/* The chain so far is pinned: this eviction cannot take it. */
		rc = cache_alloc_slot(c, r->ns, &off);
		if (rc < 0) {
			p->cut = i;
			break;
		}
		r = cache_rec(c, idx);
		r->offset = off;
		if (t->ext[idx].flags & EXT_WRITING) {
			/* Its demotion write is in flight: its staging copy
			 * or the slot it holds has the bytes (checked against
			 * the checksum being written); the write completes
			 * on its own. */
			const wslot *w = write_of(t, idx, &r->hash);
			uint64_t bytes = c->nss[r->ns - 1].info.block_bytes;
			void *dst = cache_slot_ptr(c, off);

			if (w && w->released)
				w = NULL; /* written; its slot handed out */
			if (w)
				memcpy(dst, w->buf ? w->buf : cache_slot_ptr(c, w->held),
				       bytes);
			if (!w || kvs_ssd_checksum(dst, bytes) != w->csum) {
				/* Changed since its checksum was taken (a
				 * client wrote to a committed block): a miss,
				 * and its SSD copy will fail its read too. */
				if (w) {
					c->stats->tier_ssd_corrupt_blocks++;
					kvs_warn("SSD tier: a block being demoted "
						 "changed after commit: not served");
				}
				kvs_slab_free(c->slab, off);
				p->cut = i;
				break;
			}
			promoted(c, idx);
			continue;
		}
		loc = loc_of(c, idx);
		want = (kvs_ssd_blk){ .ns = r->ns, .len = loc.len,
				      .hash = cache_ns_key(r->ns, r->hash) };
		t->ext[idx].flags |= EXT_READING;
		rc = kvs_ssd_read(t->ssd, &loc, &want, 0, cache_slot_ptr(c, off),
				  COOKIE_READ | (uint64_t)ps << 32 | i);
		/* Straight into the slot where O_DIRECT can take it (the
		 * store reads any other through a bounce buffer). */
		if (rc == 0 && ((uintptr_t)cache_slot_ptr(c, off) & 4095) == 0 &&
		    (loc.len & 4095) == 0)
			c->stats->tier_ssd_reads_direct++;
		else if (rc == 0)
			c->stats->tier_ssd_reads_bounced++;
		if (rc < 0) {
			t->ext[idx].flags &= (uint8_t)~EXT_READING;
			kvs_slab_free(c->slab, off);
			p->res[i] = rc;
			c->stats->tier_ssd_stale_blocks += rc == -ESTALE;
			p->cut = i;
			break;
		}
		reads++;
	}
	if (reads > 0) {
		p->pending = reads;
		o->promo = ps;
		return -EINPROGRESS;
	}
	/* Nothing to wait for: the slot or the read could not be had. */
	p->owner = NULL;
	*lease_out = cache_lookup_finish(c, s, p->cut, out);
	for (uint32_t i = 0; i < n; i++)
		if (p->res[i] < 0)
			drop_ssd(c, p->idx[i], 1);
	rc = (int)p->cut;
	promo_free(t, ps);
	return rc;
}

void tier_ssd_owner_gone(kvs_cache *c, kvs_owner *o)
{
	if (o->promo != NONE) {
		/* Its lease ends with the owner; the reads finish without it. */
		c->ssd->ps[o->promo].owner = NULL;
		o->promo = NONE;
	}
	if (o->verify != NONE) {
		/* No more reads; those in flight finish without it. */
		c->ssd->vs[o->verify]->owner = NULL;
		o->verify = NONE;
	}
}

/* ---- verify ----------------------------------------------------------- */

static void vjob_free(kvs_tier_ssd *t, uint32_t id)
{
	vjob *j = t->vs[id];

	for (uint32_t k = 0; k < VERIFY_BATCH; k++)
		free(j->r[k].buf);
	free(j->fails);
	free(j);
	t->vs[id] = NULL;
}

/* Submit reads of the next eligible records until the batch is full or the
 * records are all visited: on SSD, no I/O in flight, committed, of the
 * namespace asked for. */
static void verify_fill(kvs_cache *c, uint32_t id)
{
	kvs_tier_ssd *t = c->ssd;
	vjob *j = t->vs[id];
	uint32_t k = 0;

	while (j->owner && j->inflight < VERIFY_BATCH && j->cursor < t->next) {
		uint32_t idx = j->cursor++;
		const ext *e = &t->ext[idx];
		kvs_rec *r;
		kvs_ssd_loc loc;
		kvs_ssd_blk want;
		kvs_index_key key;
		kvs_index_val v;
		unsigned flags = 0;
		int rc;

		if (!(e->flags & EXT_SSD) || (e->flags & (EXT_WRITING | EXT_READING)))
			continue;
		r = cache_rec(c, idx);
		if (r->state != KVS_REC_READY || (j->ns && r->ns != j->ns))
			continue;
		while (j->r[k].buf)
			k++;
		loc = loc_of(c, idx);
		if (posix_memalign(&j->r[k].buf, 4096, ((uint64_t)loc.len + 4095) & ~4095ull)) {
			j->r[k].buf = NULL;
			j->rep.skipped++;
			continue;
		}
		want = (kvs_ssd_blk){ .ns = r->ns, .len = loc.len,
				      .hash = cache_ns_key(r->ns, r->hash) };
		/* The index's checksum too, when it has this very copy (a
		 * write completed in this loop turn is not committed yet). */
		key = key_of(r);
		if (kvs_index_get(t->ix, &key, &v) == 0 && v.seg == loc.seg &&
		    v.gen == loc.gen && v.off == loc.off && v.len == loc.len) {
			want.csum = v.csum;
			flags = KVS_SSD_CSUM;
		}
		rc = kvs_ssd_read(t->ssd, &loc, &want, flags, j->r[k].buf,
				  COOKIE_VERIFY | (uint64_t)id << 32 | k);
		if (rc < 0) {
			/* Stale (its segment went) or no memory: not read. */
			free(j->r[k].buf);
			j->r[k].buf = NULL;
			j->rep.skipped++;
			continue;
		}
		j->r[k] = (vread){ .buf = j->r[k].buf, .key = r->hash,
				   .gen = loc.gen, .idx = idx, .ns = r->ns,
				   .seg = loc.seg, .off4k = e->off4k };
		j->inflight++;
	}
}

/* Every read is done and nothing is left to submit: answer, free. */
static int verify_finished(kvs_cache *c, uint32_t id)
{
	kvs_tier_ssd *t = c->ssd;
	vjob *j = t->vs[id];

	if (j->inflight > 0 || (j->owner && j->cursor < t->next))
		return 0;
	c->stats->tier_ssd_verify_runs++;
	kvs_info("SSD tier: verify%s: %" PRIu64 " blocks checked, %" PRIu64
		 " ok, %" PRIu64 " failed (dropped), %" PRIu64 " skipped",
		 j->owner ? "" : " (client gone)", j->rep.checked, j->rep.ok,
		 j->rep.failed, j->rep.skipped);
	return 1;
}

static void verify_done(kvs_cache *c, const kvs_ssd_cqe *q)
{
	kvs_tier_ssd *t = c->ssd;
	uint32_t id = (uint32_t)(q->cookie >> 32) & 0x3fffffffu;
	uint32_t k = (uint32_t)q->cookie;
	vjob *j = t->vs[id];
	vread *v = &j->r[k];
	uint32_t idx = v->idx;
	const ext *e = &t->ext[idx];
	kvs_rec *r = cache_rec(c, idx);

	free(v->buf);
	v->buf = NULL;
	j->inflight--;
	/* The same block, at the same place, still on SSD? */
	if (r->state != KVS_REC_READY || r->ns != v->ns ||
	    r->hash.lo != v->key.lo || r->hash.hi != v->key.hi ||
	    !(e->flags & EXT_SSD) || e->seg != v->seg || e->gen != v->gen ||
	    e->off4k != v->off4k) {
		j->rep.skipped++;
	} else if (q->res == 0) {
		j->rep.checked++;
		j->rep.ok++;
		c->stats->tier_ssd_verified_blocks++;
	} else {
		j->rep.checked++;
		j->rep.failed++;
		c->stats->tier_ssd_verified_blocks++;
		if (j->rep.count < j->max_failed)
			j->fails[j->rep.count++] = (kvs_wire_verify_fail){
				.hash = kvs_cache_rec_hash(r), .ns = r->ns,
				.error = q->res };
		/* As read_done: count it, and the block leaves the SSD tier. */
		if (q->res == -EBADMSG) {
			c->stats->tier_ssd_corrupt_blocks++;
			kvs_warn("SSD tier: verify: block in segment %u at %" PRIu64
				 " failed verification: dropped", q->loc.seg,
				 q->loc.off);
		} else if (q->res == -ESTALE) {
			c->stats->tier_ssd_stale_blocks++;
		} else {
			disable(c, q->res, "verify read");
		}
		/* A copy in RAM stays. An SSD-only block pinned (by a lease
		 * promoting it, or an operator) stays for now: its next read
		 * fails the same way and drops it then. */
		if (r->tier == KVS_TIER_HOST || r->refs == 0)
			drop_ssd(c, idx, 1);
	}
	verify_fill(c, id);
	if (verify_finished(c, id)) {
		kvs_owner *o = j->owner;

		if (o) {
			o->verify = NONE;
			if (j->fn)
				j->fn(j->arg, &j->rep, j->fails);
		}
		vjob_free(t, id);
	}
}

int kvs_cache_verify(kvs_cache *c, kvs_owner *o, uint32_t ns_id,
		     uint32_t max_failed, kvs_cache_verify_fn fn, void *arg,
		     kvs_wire_verify_reply *rep)
{
	kvs_tier_ssd *t = c->ssd;
	uint32_t id = 0;
	vjob *j;

	*rep = (kvs_wire_verify_reply){ 0 };
	if (!t)
		return 0; /* no SSD tier: flags 0, nothing checked */
	if (o->verify != NONE)
		return -EBUSY;
	while (id < t->nvs && t->vs[id])
		id++;
	if (id == t->nvs) {
		uint32_t n = t->nvs ? t->nvs * 2 : 4;
		vjob **nv = realloc(t->vs, (size_t)n * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		memset(nv + t->nvs, 0, (size_t)(n - t->nvs) * sizeof(*nv));
		t->vs = nv;
		t->nvs = n;
	}
	j = calloc(1, sizeof(*j));
	if (!j || !(j->fails = calloc(max_failed ? max_failed : 1, sizeof(*j->fails)))) {
		free(j);
		return -ENOMEM;
	}
	j->owner = o;
	j->fn = fn;
	j->arg = arg;
	j->ns = ns_id;
	j->max_failed = max_failed;
	j->rep.flags = KVS_WIRE_VERIFY_SSD;
	t->vs[id] = j;
	verify_fill(c, id);
	if (j->inflight > 0) {
		o->verify = id;
		return -EINPROGRESS;
	}
	verify_finished(c, id);
	*rep = j->rep;
	rep->count = 0;
	vjob_free(t, id);
	return 0;
}

/* ---- the loop's side -------------------------------------------------- */

static void on_cqe(void *arg, const kvs_ssd_cqe *q)
{
	kvs_cache *c = arg;

	if (q->op == KVS_SSD_OP_WRITE)
		write_done(c, q);
	else if (q->cookie & COOKIE_VERIFY)
		verify_done(c, q);
	else
		read_done(c, q);
}

int kvs_cache_ssd_fd(const kvs_cache *c)
{
	return c->ssd ? kvs_ssd_event_fd(c->ssd->ssd) : -1;
}

void kvs_cache_ssd_poll(kvs_cache *c)
{
	int rc;

	if (!c->ssd)
		return;
	kvs_ssd_reap(c->ssd->ssd, on_cqe, c);
	/* One index transaction per loop turn that has changes. */
	rc = kvs_index_flush(c->ssd->ix);
	if (rc < 0)
		kvs_err("SSD tier: index flush failed: %s", kvs_strerror(rc));
}

/* ---- namespaces and warm restart -------------------------------------- */

/* Namespace ids are handed out in order of first attach; the index names
 * blocks by id, so the ids are persisted: DIR/namespaces holds each
 * namespace's HELLO payload (u32 length, bytes), in id order. */
void tier_ssd_ns_created(kvs_cache *c, uint32_t id)
{
	const ns *s = &c->nss[id - 1];
	kvs_layout l = { .model = s->model, .adapter = s->adapter,
			 .salt = s->salt_len ? s->salt : NULL,
			 .layers = s->info.layers, .kv_heads = s->info.kv_heads,
			 .head_dim = s->info.head_dim,
			 .block_tokens = s->info.block_tokens,
			 .tp_rank = s->info.tp_rank, .tp_size = s->info.tp_size,
			 .dtype = (kvs_dtype)s->info.dtype };
	uint8_t buf[4 + 64 + 3 * 256];
	char path[300];
	int n = kvs_wire_hello_encode(&l, buf + 4, sizeof(buf) - 4), fd;
	uint32_t len = (uint32_t)n;

	if (n < 0 || strlen(s->salt) != s->salt_len) {
		kvs_warn("SSD tier: namespace %u cannot be persisted: its blocks "
			 "will not survive a restart", id);
		return;
	}
	memcpy(buf, &len, 4);
	snprintf(path, sizeof(path), "%s/" NS_FILE, c->ssd->dir);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, buf, 4 + len) != (ssize_t)(4 + len) ||
	    fdatasync(fd) < 0)
		kvs_err("SSD tier: cannot persist namespace %u in %s: %s", id,
			path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

static int ns_load(kvs_cache *c)
{
	char path[300];
	uint8_t *buf;
	FILE *f;
	long size;
	size_t at = 0;

	snprintf(path, sizeof(path), "%s/" NS_FILE, c->ssd->dir);
	f = fopen(path, "rb");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	rewind(f);
	buf = malloc(size > 0 ? (size_t)size : 1);
	if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
		free(buf);
		fclose(f);
		return -EIO;
	}
	fclose(f);
	while (at + 4 <= (size_t)size) {
		kvs_wire_hello h;
		uint32_t len, id;

		memcpy(&len, buf + at, 4);
		/* A torn last entry (killed mid-append) ends the list. */
		if (at + 4 + len > (size_t)size ||
		    kvs_wire_hello_decode(buf + at + 4, len, &h) < 0 ||
		    cache_ns_restore(c, &h, &id) < 0)
			break;
		at += 4 + len;
	}
	free(buf);
	if (at < (size_t)size && truncate(path, (off_t)at) < 0)
		kvs_warn("SSD tier: cannot trim %s: %s", path, strerror(errno));
	return 0;
}

typedef struct load {
	kvs_cache *c;
	uint32_t *recs;
	kvs_hash *parents;
	uint64_t n, cap, dropped;
} load;

static int load_one(void *arg, const kvs_index_key *k, const kvs_index_val *v)
{
	load *ld = arg;
	kvs_cache *c = ld->c;
	kvs_tier_ssd *t = c->ssd;
	uint32_t idx;
	kvs_rec *r;

	if (k->ns == 0 || k->ns > c->nns ||
	    v->len != c->nss[k->ns - 1].info.block_bytes ||
	    v->gen == 0 || kvs_ssd_segment_gen(t->ssd, v->seg) != v->gen ||
	    (v->off & 4095) ||
	    kvs_table_insert(c->table, cache_ns_key(k->ns, k->hash), &idx) < 0) {
		kvs_index_del(t->ix, k);
		ld->dropped++;
		return 0;
	}
	if (ld->n == ld->cap) {
		uint64_t cap = ld->cap ? ld->cap * 2 : 4096;
		uint32_t *nr = realloc(ld->recs, cap * sizeof(*nr));
		kvs_hash *np = nr ? realloc(ld->parents, cap * sizeof(*np)) : NULL;

		if (nr)
			ld->recs = nr;
		if (!nr || !np) {
			kvs_table_remove(c->table, idx);
			return -ENOMEM;
		}
		ld->parents = np;
		ld->cap = cap;
	}
	if (tier_ssd_rec_new(c, idx) < 0) {
		kvs_table_remove(c->table, idx);
		return -ENOMEM;
	}
	r = cache_rec(c, idx);
	r->state = KVS_REC_READY;
	r->tier = KVS_TIER_SSD;
	r->ns = k->ns;
	r->cls = (uint16_t)c->nss[k->ns - 1].cls;
	r->stamp = v->atime;
	t->ext[idx] = (ext){ .gen = v->gen, .seg = v->seg,
			     .off4k = (uint32_t)(v->off >> 12), .flags = EXT_SSD };
	t->blocks++;
	t->ssd_only++;
	ld->recs[ld->n] = idx;
	ld->parents[ld->n++] = v->parent;
	return 0;
}

/* Every valid index entry becomes an SSD-only READY record, linked to its
 * parent when the parent was loaded too. No data is read. */
static int warm_load(kvs_cache *c)
{
	struct timespec t0, t1;
	load ld = { .c = c };
	int64_t rc;
	uint64_t ms;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = kvs_index_iter(c->ssd->ix, load_one, &ld);
	for (uint64_t i = 0; rc >= 0 && i < ld.n; i++) {
		kvs_rec *r = cache_rec(c, ld.recs[i]);
		uint32_t p;

		if (!ld.parents[i].lo && !ld.parents[i].hi)
			continue;
		p = kvs_table_find(c->table, cache_ns_key(r->ns, ld.parents[i]));
		if (p == NONE || cache_rec(c, p)->ns != r->ns)
			continue;
		r->parent = p;
		cache_rec(c, p)->children++;
	}
	free(ld.recs);
	free(ld.parents);
	if (rc < 0)
		return (int)rc;
	kvs_index_flush(c->ssd->ix);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* Signed: the nanosecond part of the difference may be negative. */
	ms = (uint64_t)(((int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 +
			 (t1.tv_nsec - t0.tv_nsec)) / 1000000);
	c->stats->tier_ssd_restart_blocks = (int64_t)ld.n;
	c->stats->tier_ssd_restart_ms = (int64_t)ms;
	kvs_info("SSD tier: loaded %" PRIu64 " indexed blocks in %" PRIu64
		 " ms (%" PRIu64 " stale entries dropped)", ld.n, ms, ld.dropped);
	return 0;
}

/* Whether the env var @name is set (to anything but "" or "0"). */
static int env_flag(const char *name)
{
	const char *v = getenv(name);

	return v && *v && strcmp(v, "0") != 0;
}

int kvs_cache_ssd_open(kvs_cache *c, const kvs_cache_ssd_config *cfg)
{
	kvs_tier_ssd *t;
	struct stat st;
	char ixdir[300];
	uint64_t bytes = cfg->bytes ? cfg->bytes
				    : cfg->segment_bytes * DEFAULT_SEGMENTS;
	int rc;

	if (c->by_uid) {
		/* One segment store for every domain would mix tenants. */
		kvs_err("--ssd-dir: not supported yet with --tenant-arenas uid");
		return -EINVAL;
	}
	if (stat(cfg->dir, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    access(cfg->dir, W_OK | X_OK) < 0) {
		rc = stat(cfg->dir, &st) < 0 ? -errno
		     : !S_ISDIR(st.st_mode) ? -ENOTDIR : -errno;
		kvs_err("--ssd-dir %s: %s", cfg->dir, kvs_strerror(rc));
		return rc;
	}
	if (strlen(cfg->dir) >= sizeof(t->dir))
		return -ENAMETOOLONG;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	strcpy(t->dir, cfg->dir);
	t->seg_bytes = cfg->segment_bytes;
	t->admit_hit = cfg->admit_hit;
	t->write_through = cfg->write_through;
	t->enabled = 1;
	t->free_ws = t->free_ps = NONE;
	c->ssd = t;
	rc = kvs_ssd_create(&t->ssd);
	if (rc == 0)
		rc = kvs_ssd_set_segment_bytes(t->ssd, cfg->segment_bytes);
	if (rc == 0)
		rc = kvs_ssd_set_size(t->ssd, bytes);
	if (rc == 0 && cfg->queue_depth)
		rc = kvs_ssd_set_queue_depth(t->ssd, cfg->queue_depth);
	/* Test and sandbox knobs (docs/ssd.md): synchronous I/O; sparse
	 * segment files, so that a full filesystem shows up as ENOSPC on
	 * writes rather than at start. */
	if (rc == 0 && (env_flag("KVS_SSD_NO_URING") || env_flag("KVS_SSD_NO_PREALLOC")))
		rc = kvs_ssd_set_flags(t->ssd,
				       (env_flag("KVS_SSD_NO_URING") ? KVS_SSD_NO_URING : 0) |
				       (env_flag("KVS_SSD_NO_PREALLOC") ? KVS_SSD_NO_PREALLOC : 0));
	if (rc < 0)
		goto fail;
	kvs_ssd_set_recycle(t->ssd, on_recycle, c);
	rc = kvs_ssd_open(t->ssd, cfg->dir);
	if (rc < 0) {
		kvs_err("SSD tier: cannot open segments in %s (%" PRIu64
			" bytes, segments of %" PRIu64 "): %s", cfg->dir, bytes,
			cfg->segment_bytes, kvs_strerror(rc));
		goto fail;
	}
	if (!kvs_ssd_direct(t->ssd))
		kvs_warn("SSD tier: O_DIRECT refused by the filesystem of %s: "
			 "buffered I/O", cfg->dir);
	if (!kvs_ssd_uring(t->ssd))
		kvs_warn("SSD tier: io_uring unavailable: synchronous I/O");
	if (env_flag("KVS_SSD_NO_PREALLOC"))
		kvs_warn("SSD tier: KVS_SSD_NO_PREALLOC: sparse segment files, "
			 "a full filesystem fails demotion writes");
	snprintf(ixdir, sizeof(ixdir), "%s/index", cfg->dir);
	rc = kvs_index_create(&t->ix);
	if (rc == 0)
		rc = kvs_index_set_mapsize(t->ix, kvs_index_mapsize_for(bytes, 64u << 10));
	if (rc == 0)
		rc = kvs_index_open(t->ix, ixdir);
	if (rc < 0) {
		kvs_err("SSD tier: cannot open the index %s: %s", ixdir,
			kvs_strerror(rc));
		goto fail;
	}
	rc = ns_load(c);
	if (rc == 0)
		rc = warm_load(c);
	if (rc < 0) {
		kvs_err("SSD tier: warm restart failed: %s", kvs_strerror(rc));
		goto fail;
	}
	kvs_info("SSD tier: %s, %u segments of %" PRIu64 " MiB, queue depth "
		 "%u, admit %s%s", cfg->dir, kvs_ssd_segments(t->ssd),
		 cfg->segment_bytes >> 20, cfg->queue_depth ? cfg->queue_depth : 32,
		 t->admit_hit ? "hit" : "all",
		 t->write_through ? ", write-through" : "");
	return 0;
fail:
	tier_ssd_close(c);
	return rc;
}

void tier_ssd_close(kvs_cache *c)
{
	kvs_tier_ssd *t = c->ssd;

	if (!t)
		return;
	kvs_ssd_close(t->ssd); /* waits for I/O; completions discarded */
	kvs_index_close(t->ix);
	for (uint32_t i = 0; i < t->nws; i++)
		free(t->ws[i].buf);
	for (uint32_t i = 0; i < t->npool; i++)
		free(t->pool[i].p);
	for (uint32_t i = 0; i < t->nps; i++) {
		free(t->ps[i].idx);
		free(t->ps[i].res);
		free(t->ps[i].out);
	}
	for (uint32_t i = 0; i < t->nvs; i++)
		if (t->vs[i])
			vjob_free(t, i);
	free(t->vs);
	free(t->ws);
	free(t->ps);
	free(t->ext);
	free(t);
	c->ssd = NULL;
}

void tier_ssd_stats_fill(kvs_cache *c)
{
	kvs_tier_ssd *t = c->ssd;
	kvs_counters *st = c->stats;
	kvs_ssd_stats ss;
	kvs_index_stats is;
	uint64_t total;

	kvs_ssd_stats_get(t->ssd, &ss);
	kvs_index_stats_get(t->ix, &is);
	total = (uint64_t)kvs_ssd_segments(t->ssd) * t->seg_bytes;
	st->tier_ssd_bytes_total = (int64_t)total;
	st->tier_ssd_bytes_free = (int64_t)(total - ss.bytes_used);
	st->tier_ssd_enabled = t->enabled;
	st->tier_ssd_bytes_used = (int64_t)ss.bytes_used;
	st->tier_ssd_blocks = (int64_t)t->blocks;
	st->tier_ssd_blocks_ssd_only = (int64_t)t->ssd_only;
	st->tier_ssd_writes_inflight = t->writes_inflight;
	st->tier_ssd_write_lat_avg_us = (int64_t)ss.write_lat_avg_us;
	st->tier_ssd_write_lat_p99_us = (int64_t)ss.write_lat_p99_us;
	st->tier_ssd_read_lat_avg_us = (int64_t)ss.read_lat_avg_us;
	st->tier_ssd_read_lat_p99_us = (int64_t)ss.read_lat_p99_us;
	st->tier_ssd_index_entries = (int64_t)is.entries;
}
