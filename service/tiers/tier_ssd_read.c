/* tier_ssd_read.c - the SSD tier's reads: promotion of a copy into the
 * host slot the cache found for it, and verify (see tier_ssd_int.h,
 * docs/ssd.md "Promotion", "Verify"). */
#define _GNU_SOURCE
#include "tier_ssd_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_log.h"
#include "kvs_types.h" /* kvs_strerror */

/* ---- promotion -------------------------------------------------------- */

/* Its demotion write is in flight: its staging copy or the slot it holds
 * has the bytes (checked against the checksum being written); the write
 * completes on its own. */
static int read_from_write(ssd_tier *t, const kvs_tier_blk *b, void *dst)
{
	const wslot *w = ssd_write_of(t, b);

	if (w && w->released)
		w = NULL; /* written; its slot handed out */
	if (w)
		memcpy(dst, w->buf ? w->buf : kvs_tier_host_ptr(&t->base, w->held),
		       b->bytes);
	if (!w || kvs_ssd_checksum(dst, b->bytes) != w->csum) {
		/* Changed since its checksum was taken (a client wrote to a
		 * committed block): a miss, and its SSD copy will fail its
		 * read too. */
		if (w) {
			t->counts.corrupt_blocks++;
			kvs_warn("SSD tier: a block being demoted changed after "
				 "commit: not served");
		}
		return -EAGAIN;
	}
	return 0;
}

int ssd_read(kvs_tier_mod *tt, const kvs_tier_blk *b, void *dst, uint64_t cookie)
{
	ssd_tier *t = ssd_of(tt);
	kvs_ssd_loc sl;
	kvs_ssd_blk want;
	uint32_t r;
	int rc;

	if (loc_flags(ssd_loc(t, b->idx)) & LOC_WRITING)
		return read_from_write(t, b, dst);
	if (kvs_pool_alloc(&t->rs, &r) < 0)
		return -EAGAIN; /* a miss; the copy is fine */
	sl = ssd_loc_of(t, b->idx, b->bytes);
	want = (kvs_ssd_blk){ .ns = b->ns, .len = sl.len, .hash = b->hash };
	rc = kvs_ssd_read(t->ssd, &sl, &want, 0, dst, r);
	if (rc < 0) {
		kvs_pool_free(&t->rs, r);
		ssd_of(tt)->counts.stale_blocks += rc == -ESTALE;
		return rc == -EAGAIN ? -EIO : rc;
	}
	*(rslot *)kvs_pool_at(&t->rs, r) = (rslot){ .idx = b->idx,
						     .cookie = cookie };
	loc_set(&t->loc[b->idx], LOC_READING);
	/* Straight into the slot where O_DIRECT can take it (the store reads
	 * any other through a bounce buffer). */
	if (((uintptr_t)dst & 4095) == 0 && (sl.len & 4095) == 0)
		ssd_of(tt)->counts.reads_direct++;
	else
		ssd_of(tt)->counts.reads_bounced++;
	return 1;
}

void ssd_read_done(ssd_tier *t, const kvs_ssd_cqe *q)
{
	kvs_tier_ssd_stats *st = &t->counts;
	rslot *r = kvs_pool_at(&t->rs, (uint32_t)q->cookie);
	uint64_t cookie = r->cookie;

	loc_clear(&t->loc[r->idx], LOC_READING);
	*r = (rslot){ .idx = KVS_NONE };
	kvs_pool_free(&t->rs, (uint32_t)q->cookie);
	if (q->res == 0) {
		st->reads++;
		st->bytes_read += q->loc.len;
	} else if (q->res == -EBADMSG) {
		st->corrupt_blocks++;
		kvs_warn("SSD tier: block in segment %u at %" PRIu64
			 " failed verification: dropped", q->loc.seg, q->loc.off);
	} else if (q->res == -ESTALE) {
		st->stale_blocks++;
	} else {
		ssd_disable(t, q->res, "read");
	}
	kvs_tier_read_done(&t->base, cookie, q->res);
}

/* ---- verify ----------------------------------------------------------- */

void ssd_vjob_free(ssd_tier *t, uint32_t id)
{
	vjob *j = ssd_vjob(t, id);

	for (uint32_t k = 0; k < VERIFY_BATCH; k++)
		free(j->r[k].buf);
	free(j->fails);
	*j = (vjob){ 0 };
	kvs_pool_free(&t->vs, id);
}

/* Submit the read of record @idx for job @j into read slot @k, if it is
 * eligible: on SSD, no I/O in flight, committed, of the namespace asked
 * for. Returns 1 (submitted), 0 (not eligible or skipped). */
static int verify_one(ssd_tier *t, uint32_t id, uint32_t idx, uint32_t k)
{
	vjob *j = ssd_vjob(t, id);
	const loc *l = ssd_loc(t, idx);
	kvs_tier_blk b;
	kvs_ssd_loc sl;
	kvs_ssd_blk want;
	kvs_index_key key;
	kvs_index_val v;
	unsigned flags = 0;

	if (!(loc_flags(l) & LOC_SSD) || (loc_flags(l) & (LOC_WRITING | LOC_READING)))
		return 0;
	if (kvs_tier_rec(&t->base, idx, &b) < 0 || !b.ready ||
	    (j->ns && b.ns != j->ns))
		return 0;
	sl = ssd_loc_of(t, idx, b.bytes);
	if (posix_memalign(&j->r[k].buf, 4096, ((uint64_t)sl.len + 4095) & ~4095ull)) {
		j->r[k].buf = NULL;
		j->res.skipped++;
		return 0;
	}
	want = (kvs_ssd_blk){ .ns = b.ns, .len = sl.len, .hash = b.hash };
	/* The index's checksum too, when it has this very copy (a write
	 * completed in this loop turn is not committed yet). */
	key = ssd_key_of(&b);
	if (kvs_index_get(t->ix, &key, &v) == 0 && v.seg == sl.seg &&
	    v.gen == sl.gen && v.off == sl.off && v.len == sl.len) {
		want.csum = v.csum;
		flags = KVS_SSD_CSUM;
	}
	if (kvs_ssd_read(t->ssd, &sl, &want, flags, j->r[k].buf,
			 COOKIE_VERIFY | (uint64_t)id << 32 | k) < 0) {
		/* Stale (its segment went) or no memory: not read. */
		free(j->r[k].buf);
		j->r[k].buf = NULL;
		j->res.skipped++;
		return 0;
	}
	j->r[k] = (vread){ .buf = j->r[k].buf, .hash = b.hash, .gen = sl.gen,
			   .idx = idx, .ns = b.ns, .seg = sl.seg,
			   .off4k = loc_off4k(l) };
	return 1;
}

/* Submit reads until the batch is full or the records are all visited. */
static void verify_fill(ssd_tier *t, uint32_t id)
{
	vjob *j = ssd_vjob(t, id);
	uint32_t k = 0;

	while (!j->gone && j->inflight < VERIFY_BATCH && j->cursor < t->nloc) {
		while (j->r[k].buf)
			k++;
		j->inflight += (uint32_t)verify_one(t, id, j->cursor++, k);
	}
}

/* Every read is done and nothing is left to submit. */
static int verify_finished(ssd_tier *t, uint32_t id)
{
	vjob *j = ssd_vjob(t, id);

	if (j->inflight > 0 || (!j->gone && j->cursor < t->nloc))
		return 0;
	t->counts.verify_runs++;
	kvs_info("SSD tier: verify%s: %" PRIu64 " blocks checked, %" PRIu64
		 " ok, %" PRIu64 " failed (dropped), %" PRIu64 " skipped",
		 j->gone ? " (client gone)" : "", j->res.checked, j->res.ok,
		 j->res.failed, j->res.skipped);
	return 1;
}

/* Read @v of job @j failed with @err: count it, and the block leaves the
 * SSD tier as a failed promotion read makes it leave. */
static void verify_failed(ssd_tier *t, vjob *j, const vread *v,
			  const kvs_tier_blk *b, const kvs_ssd_cqe *q)
{
	kvs_tier_ssd_stats *st = &t->counts;

	j->res.checked++;
	j->res.failed++;
	st->verified_blocks++;
	if (j->res.count < j->max_failed)
		j->fails[j->res.count++] = (kvs_verify_fail){
			.hash = b->hash, .ns = b->ns, .error = q->res };
	if (q->res == -EBADMSG) {
		st->corrupt_blocks++;
		kvs_warn("SSD tier: verify: block in segment %u at %" PRIu64
			 " failed verification: dropped", q->loc.seg, q->loc.off);
	} else if (q->res == -ESTALE) {
		st->stale_blocks++;
	} else {
		ssd_disable(t, q->res, "verify read");
	}
	/* A copy in RAM stays. An SSD-only block pinned (by a lease
	 * promoting it, or an operator) stays for now: its next read fails
	 * the same way and drops it then. */
	if (b->tier == KVS_TIER_HOST || b->refs == 0)
		ssd_drop(t, v->idx, 1);
}

void ssd_verify_done(ssd_tier *t, const kvs_ssd_cqe *q)
{
	uint32_t id = (uint32_t)(q->cookie >> 32) & 0x3fffffffu;
	uint32_t k = (uint32_t)q->cookie;
	vjob *j = ssd_vjob(t, id);
	vread *v = &j->r[k];
	const loc *l = ssd_loc(t, v->idx);
	kvs_tier_blk b;

	free(v->buf);
	v->buf = NULL;
	j->inflight--;
	/* The same block, at the same place, still on SSD? */
	if (kvs_tier_rec(&t->base, v->idx, &b) < 0 || !b.ready || b.ns != v->ns ||
	    b.hash.lo != v->hash.lo || b.hash.hi != v->hash.hi ||
	    !(loc_flags(l) & LOC_SSD) || l->seg != v->seg ||
	    kvs_ssd_segment_gen(t->ssd, l->seg) != v->gen ||
	    loc_off4k(l) != v->off4k) {
		j->res.skipped++;
	} else if (q->res == 0) {
		j->res.checked++;
		j->res.ok++;
		t->counts.verified_blocks++;
	} else {
		verify_failed(t, j, v, &b, q);
	}
	verify_fill(t, id);
	if (verify_finished(t, id)) {
		if (!j->gone && j->fn)
			j->fn(j->arg, &j->res, j->fails);
		ssd_vjob_free(t, id);
	}
}

void ssd_verify_cancel(kvs_tier_mod *tt, uint32_t job)
{
	vjob *j = kvs_pool_live_at(&ssd_of(tt)->vs, job);

	if (j)
		j->gone = 1;
}

int ssd_verify(kvs_tier_mod *tt, uint32_t ns, uint32_t max_failed,
	       kvs_verify_fn fn, void *arg, kvs_verify_result *res,
	       uint32_t *job)
{
	ssd_tier *t = ssd_of(tt);
	uint32_t id;
	vjob *j;

	*res = (kvs_verify_result){ .has_tier = 1 };
	if (kvs_pool_alloc(&t->vs, &id) < 0)
		return -ENOMEM;
	j = ssd_vjob(t, id); /* zero: new, or as ssd_vjob_free left it */
	if (!(j->fails = calloc(max_failed ? max_failed : 1, sizeof(*j->fails)))) {
		kvs_pool_free(&t->vs, id);
		return -ENOMEM;
	}
	j->fn = fn;
	j->arg = arg;
	j->ns = ns;
	j->max_failed = max_failed;
	j->res.has_tier = 1;
	verify_fill(t, id);
	if (j->inflight > 0) {
		*job = id;
		return -EINPROGRESS;
	}
	verify_finished(t, id);
	*res = j->res;
	res->count = 0;
	ssd_vjob_free(t, id);
	return 0;
}
