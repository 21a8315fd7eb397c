/*
 * ssd_write.c - the segment store's write path (see kvs_ssd.h): a record at
 * the end of the active segment, and the rotation that seals it and starts
 * another: a free segment, else the oldest one the caller lets go.
 */
#define _GNU_SOURCE
#include "ssd_int.h"

#include <errno.h>
#include <stdlib.h>
#include <xxhash.h>

static int cmp_gen(const void *a, const void *b, void *arg)
{
	const struct seg *g = arg;
	uint64_t x = g[*(const uint32_t *)a].gen, y = g[*(const uint32_t *)b].gen;

	return x < y ? -1 : x > y;
}

/* seg_next - seal the segment being filled and start another: a free one,
 * else the oldest used one (FIFO) without I/O that the caller lets go.
 * -EBUSY when there is none now: every sealed segment has I/O in flight or
 * was vetoed. That is not a full disk: the reads end, the pins go, and the
 * next write tries again (the caller drops what it cannot write meanwhile). */
static int seg_next(kvs_ssd *s)
{
	uint32_t i, n = 0, pick = KVS_NONE;
	struct seg *g;
	struct op *o;

	if (s->active != KVS_NONE)
		s->segs[s->active].state = SEG_SEALED;
	s->active = KVS_NONE;
	for (i = 0; i < s->nseg && pick == KVS_NONE; i++)
		if (s->segs[i].state == SEG_FREE)
			pick = i;
	if (pick == KVS_NONE) {
		for (i = 0; i < s->nseg; i++)
			if (s->segs[i].state == SEG_SEALED && !s->segs[i].inflight)
				s->cand[n++] = i;
		qsort_r(s->cand, n, sizeof(*s->cand), cmp_gen, s->segs);
		for (i = 0; i < n && pick == KVS_NONE; i++) {
			g = &s->segs[s->cand[i]];
			if (!s->recycle || s->recycle(s->recycle_arg, s->cand[i], g->gen) == 0)
				pick = s->cand[i];
			else
				s->st.recycle_vetoed++;
		}
		if (pick == KVS_NONE)
			return -EBUSY;
		s->st.recycled++;
	}
	g = &s->segs[pick];
	g->state = SEG_ACTIVE;
	g->gen = s->gen_next++;
	g->fill = SECT;
	s->active = pick;
	/* The superblock tells a restart the segment's new generation. Not
	 * waited for: record headers carry the generation too, so a lost
	 * superblock write only makes a restart drop this segment's entries. */
	o = ssd_op_new(s, KVS_SSD_OP_WRITE, pick, 0);
	if (!o)
		return 0;
	o->internal = 1;
	o->fd = g->fd;
	ssd_sb_put(o->pg, pick, s->seg_bytes, g->gen);
	o->iov[0] = (struct iovec){ o->pg, SECT };
	o->niov = 1;
	o->total = SECT;
	ssd_op_submit(s, o);
	return 0;
}

int kvs_ssd_write(kvs_ssd *s, const kvs_ssd_blk *b, const void *payload,
		  unsigned flags, uint64_t cookie, kvs_ssd_loc *loc)
{
	uint64_t rec = kvs_ssd_record_bytes(b->len);
	struct seg *g;
	struct op *o;
	int rc = 0;

	if (!s->opened)
		return -EBADF;
	if (b->len == 0 || !payload || rec > s->seg_bytes - SECT)
		return -EINVAL;
	if (s->active == KVS_NONE || s->segs[s->active].fill + rec > s->seg_bytes)
		rc = seg_next(s);
	if (rc < 0) {
		s->st.no_segment++;
		return rc;
	}
	g = &s->segs[s->active];
	o = ssd_op_new(s, KVS_SSD_OP_WRITE, s->active, cookie);
	if (!o)
		return -ENOMEM;
	o->c.loc = (kvs_ssd_loc){ .seg = s->active, .len = b->len, .gen = g->gen, .off = g->fill };
	o->c.blk = *b;
	if (!(flags & KVS_SSD_CSUM))
		o->c.blk.csum = XXH3_64bits(payload, b->len);
	if (ssd_op_layout(o, &o->c.loc, (void *)payload, 1) < 0) {
		ssd_op_drop(s, o);
		return -ENOMEM;
	}
	kvs_ssd_header_encode(o->pg, &o->c.blk, &o->c.loc);
	o->fd = g->fd;
	g->fill += rec;
	*loc = o->c.loc;
	ssd_op_submit(s, o);
	return 0;
}

