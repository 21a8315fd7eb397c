/* tier_ssd_write.c - the SSD tier's writes: demotion of blocks the host
 * tier evicts and write-through of committed ones (see tier_ssd_int.h,
 * docs/ssd.md "Demotion"). */
#define _GNU_SOURCE
#include "tier_ssd_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_log.h"
#include "kvs_types.h" /* kvs_strerror */

/* A 4 KiB-aligned staging buffer of @bytes (rounded up to 4 KiB). */
static void *stage_get(ssd_tier *t, uint64_t bytes)
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

static void stage_put(ssd_tier *t, void *p, uint64_t bytes)
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
static uint64_t direct_max(const ssd_tier *t)
{
	uint64_t m = kvs_tier_host_bytes(&t->base) / DIRECT_SHARE;

	return m < MAX_STAGED_BYTES ? m : MAX_STAGED_BYTES;
}

/* A free write slot, given back (kvs_pool_free) if the write is not
 * submitted; of no record until then (the scans below see it). Errors:
 * -ENOMEM. */
static int wslot_get(ssd_tier *t, uint32_t *out)
{
	if (kvs_pool_alloc(&t->ws, out) < 0)
		return -ENOMEM;
	*ssd_wslot(t, *out) = (wslot){ .idx = KVS_NONE };
	return 0;
}

/* ---- stalls ---------------------------------------------------------- */

/* A stalled tier asks the store again once completions were reaped (reads
 * ended, promotions finished: what kept every segment) or after this long;
 * in between, writes are dropped without asking (each refusal scans the
 * segments and may scan the records). */
#define STALL_RETRY_MS 1
/* Start and end of an episode are logged at most once per this long; the
 * next start line says how many episodes were not. */
#define STALL_LOG_MS 10000

/* Whether a write now would be refused again: drop it without asking. */
static int stall_skip(ssd_tier *t)
{
	return t->stall_since && !t->stall_poke &&
	       now_ms() - t->stall_tried < STALL_RETRY_MS;
}

/* The store refused a write (-EBUSY): no segment free, every used one being
 * read or written, or holding a block that a lookup is promoting. Not a
 * full disk: demotion stays on, and what cannot be written is dropped (a
 * cache may lose a copy) until a segment can be had. */
static void stall_begin(ssd_tier *t)
{
	uint64_t now = now_ms(), held;

	t->stall_tried = now;
	t->stall_poke = 0;
	if (t->stall_since)
		return;
	t->stall_since = now ? now : 1;
	t->stall_drops = 0;
	t->counts.stalls++;
	t->stall_logged = kvs_ratelimit_ok(&t->rl_stall, now, STALL_LOG_MS, &held);
	if (t->stall_logged)
		kvs_warn("SSD tier: no segment can be recycled now (all %u being "
			 "read or written, or holding blocks being promoted): "
			 "dropping demotions until one is free (%" PRIu64
			 " shorter episodes since the last report)",
			 kvs_ssd_segments(t->ssd), held);
}

/* A write went in: the episode, if any, is over. */
static void stall_end(ssd_tier *t)
{
	uint64_t ms;

	if (!t->stall_since)
		return;
	ms = now_ms() - t->stall_since;
	t->counts.stall_ms += (int64_t)ms;
	if (t->stall_logged)
		kvs_warn("SSD tier: demoting again after %" PRIu64 " ms without a "
			 "segment, %" PRIu64 " writes dropped", ms, t->stall_drops);
	t->stall_since = 0;
}

/* One write not done for the stall. */
static void stall_drop(ssd_tier *t)
{
	t->stall_drops++;
	t->counts.stall_drops++;
}

/* Write @b's block to SSD. @hold: the slot may stay allocated until the
 * write completes (a demotion: the record is leaving RAM); else (write-
 * through: the record stays in RAM and may be evicted, dropped or its slot
 * freed at any time) the bytes are copied first. Returns 0 (in flight), or
 * an error (nothing in flight). The checksum is computed here, from the
 * bytes the store writes (the staging copy, or the slot itself). */
static int write_block(ssd_tier *t, const kvs_tier_blk *b, int hold)
{
	uint64_t bytes = b->bytes;
	kvs_ssd_blk sb = { .ns = b->ns, .len = (uint32_t)bytes, .hash = b->hash };
	void *slot = kvs_tier_host_ptr(&t->base, b->host_off), *buf = NULL;
	kvs_ssd_loc where;
	uint32_t w;
	int rc;

	/* Straight from the arena only where O_DIRECT can take the slot as
	 * it is: a 4 KiB-aligned address and whole 4 KiB sectors. */
	hold = hold && ((uintptr_t)slot & 4095) == 0 && (bytes & 4095) == 0 &&
	       direct_max(t) >= DIRECT_MIN_BLOCKS * bytes &&
	       t->held + bytes <= direct_max(t);
	if (!hold && t->staged + bytes > MAX_STAGED_BYTES)
		return -EAGAIN;
	if (b->idx >= t->nloc)
		return -ENOMEM; /* no entry (rec_new failed): not admitted */
	if (stall_skip(t))
		return -EBUSY;
	if ((rc = wslot_get(t, &w)) < 0)
		return rc;
	if (!hold) {
		buf = stage_get(t, bytes);
		if (!buf) {
			kvs_pool_free(&t->ws, w);
			return -ENOMEM;
		}
		memcpy(buf, slot, bytes);
	}
	sb.csum = kvs_ssd_checksum(hold ? slot : buf, bytes);
	/* The store may recycle a segment inside this call (on_recycle):
	 * this block has no SSD copy, so it is not touched. */
	rc = kvs_ssd_write(t->ssd, &sb, hold ? slot : buf, KVS_SSD_CSUM, w, &where);
	if (rc == -EBUSY)
		stall_begin(t);
	if (rc < 0) {
		stage_put(t, buf, bytes);
		kvs_pool_free(&t->ws, w);
		return rc;
	}
	stall_end(t);
	*ssd_wslot(t, w) = (wslot){ .idx = b->idx, .ns = b->ns, .hash = b->hash,
			    .parent = b->parent, .stamp = b->stamp, .buf = buf,
			    .held = hold ? b->host_off : 0, .bytes = bytes,
			    .csum = sb.csum };
	loc_set(&t->loc[b->idx], LOC_WRITING);
	t->writes_inflight++;
	if (hold) {
		t->held += bytes;
		t->nheld++;
		t->counts.writes_direct++;
	} else {
		t->staged += bytes;
		t->counts.writes_staged++;
	}
	return 0;
}

/* Whether a direct write of @idx in flight reads slot @off. */
static int held_by_write(const ssd_tier *t, uint32_t idx, uint64_t off)
{
	if (!(loc_flags(ssd_loc(t, idx)) & LOC_WRITING) || t->nheld == 0)
		return 0;
	for (uint32_t i = 0; i < kvs_pool_cap(&t->ws); i++) {
		const wslot *w = kvs_pool_live_at(&t->ws, i);

		if (w && w->idx == idx && !w->buf && !w->released && w->held == off)
			return 1;
	}
	return 0;
}

int ssd_demote(kvs_tier_mod *tt, const kvs_tier_blk *b, int *holds)
{
	ssd_tier *t = ssd_of(tt);
	kvs_tier_ssd_stats *st = &ssd_of(tt)->counts;
	int rc;

	if (!(loc_flags(ssd_loc(t, b->idx)) & (LOC_SSD | LOC_WRITING))) {
		if (!ssd_enabled(t))
			return KVS_TIER_REFUSED;
		if (t->admit_hit && b->hits == 0) {
			st->admission_rejected++;
			return KVS_TIER_REFUSED;
		}
		if (!ssd_ns_filed(t, b->ns))
			return KVS_TIER_REFUSED;
		rc = write_block(t, b, 1);
		if (rc == -EAGAIN) {
			st->admission_rejected++;
			return KVS_TIER_REFUSED;
		}
		if (rc == -EBUSY) {
			stall_drop(t);
			return KVS_TIER_REFUSED;
		}
		if (rc < 0) {
			if (rc == -ENOSPC || rc == -EIO)
				ssd_disable(t, rc, "demotion write");
			return KVS_TIER_REFUSED;
		}
	}
	/* On SSD already (promoted, written through) or on its way there. A
	 * slot that the write reads from is freed by the write's completion. */
	*holds = held_by_write(t, b->idx, b->host_off);
	st->demotions++;
	return (loc_flags(&t->loc[b->idx]) & LOC_SSD) ? KVS_TIER_KEPT
						      : KVS_TIER_WRITING;
}

int ssd_keeps(const kvs_tier_mod *tt, const kvs_tier_blk *b)
{
	const ssd_tier *t = ssd_of(tt);

	if (loc_flags(ssd_loc(t, b->idx)) & (LOC_SSD | LOC_WRITING))
		return 1;
	return ssd_enabled_now(t) && !(t->admit_hit && b->hits == 0);
}

void ssd_committed(kvs_tier_mod *tt, const kvs_tier_blk *b)
{
	ssd_tier *t = ssd_of(tt);
	int rc;

	if (!t->write_through || !ssd_enabled(t) || !ssd_ns_filed(t, b->ns))
		return;
	rc = write_block(t, b, 0);
	if (rc == -EBUSY)
		stall_drop(t);
	else if (rc < 0 && rc != -EAGAIN && rc != -ENOMEM)
		ssd_disable(t, rc, "write-through");
}

/* Whether @w's record is still the one it writes. A record being written
 * is never dropped (it is READY, has no SSD copy to recycle, and RAM
 * eviction keeps it), so this is a consistency check. */
static int write_rec_ok(ssd_tier *t, const wslot *w)
{
	kvs_tier_blk b;

	if (kvs_tier_rec(&t->base, w->idx, &b) < 0 || b.ns != w->ns ||
	    b.hash.lo != w->hash.lo || b.hash.hi != w->hash.hi) {
		kvs_err("SSD tier: write completion for a record that changed");
		return 0;
	}
	return 1;
}

/* The write of @w succeeded: the block has its SSD copy, indexed. */
static void write_ok(ssd_tier *t, const wslot *w, const kvs_ssd_cqe *q)
{
	kvs_index_key k = { .ns = w->ns, .hash = w->hash };
	kvs_index_val v = { .seg = q->loc.seg, .len = q->loc.len,
			    .gen = q->loc.gen, .off = q->loc.off,
			    .csum = q->blk.csum, .atime = w->stamp,
			    .parent = w->parent };
	loc *l = &t->loc[w->idx];
	kvs_tier_blk b;

	/* The last access as of now (the block may have been hit while its
	 * write was in flight). */
	if (kvs_tier_rec(&t->base, w->idx, &b) == 0)
		v.atime = b.stamp;

	*l = (loc){ .seg = q->loc.seg,
		    .word = (uint32_t)(q->loc.off >> 12) << LOC_FLAG_BITS |
			    (loc_flags(l) & ~(uint32_t)LOC_WRITING) | LOC_SSD };
	t->blocks++;
	if (t->enabled)
		t->retry_s = 0; /* well again: the next error waits the least */
	kvs_index_put(t->ix, &k, &v);
	t->counts.writes++;
	t->counts.bytes_written += q->loc.len;
	kvs_tier_stored(&t->base, w->idx, 1);
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
	ssd_tier *t = arg;
	wslot *w = ssd_wslot(t, (uint32_t)q->cookie);

	if (w->buf || w->released)
		return;
	w->released = 1;
	kvs_tier_host_free(&t->base, w->held);
	t->held -= w->bytes;
	t->nheld--;
	if (q->res == 0 && write_rec_ok(t, w)) {
		write_ok(t, w, q);
		w->applied = 1;
	}
}

void ssd_write_done(ssd_tier *t, const kvs_ssd_cqe *q)
{
	wslot *w = ssd_wslot(t, (uint32_t)q->cookie);
	uint32_t idx = w->idx;

	if (w->buf) {
		stage_put(t, w->buf, w->bytes);
		t->staged -= w->bytes;
	} else if (!w->released) {
		/* The store is done with the slot: it can be handed out. */
		kvs_tier_host_free(&t->base, w->held);
		t->held -= w->bytes;
		t->nheld--;
	}
	t->writes_inflight--;
	if (!w->applied && write_rec_ok(t, w)) {
		if (q->res == 0) {
			write_ok(t, w, q);
		} else {
			loc_clear(&t->loc[idx], LOC_WRITING);
			ssd_disable(t, q->res, "write");
			kvs_tier_stored(&t->base, idx, 0);
		}
	}
	w->idx = KVS_NONE;
	w->buf = NULL;
	kvs_pool_free(&t->ws, (uint32_t)q->cookie);
}

uint64_t ssd_host_held(const kvs_tier_mod *tt)
{
	return ssd_of(tt)->nheld;
}

int ssd_wait_held(kvs_tier_mod *tt)
{
	ssd_tier *t = ssd_of(tt);
	uint64_t before = t->nheld;
	int rc = 0;

	if (before == 0)
		return 0;
	/* Each wait returns once some write has finished; a staged one frees
	 * no slot, so wait again until a held one does or none is left. */
	while (t->nheld == before && (rc = kvs_ssd_wait(t->ssd, on_release, t)) > 0)
		;
	if (rc < 0)
		kvs_err("SSD tier: waiting for a demotion write failed: %s",
			kvs_strerror(rc));
	ssd_of(tt)->counts.held_waits++;
	return (int)(before - t->nheld);
}

const wslot *ssd_write_of(const ssd_tier *t, const kvs_tier_blk *b)
{
	for (uint32_t i = 0; i < kvs_pool_cap(&t->ws); i++) {
		const wslot *w = kvs_pool_live_at(&t->ws, i);

		if (w && w->idx == b->idx && w->ns == b->ns &&
		    w->hash.lo == b->hash.lo && w->hash.hi == b->hash.hi)
			return w;
	}
	return NULL;
}
