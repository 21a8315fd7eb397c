/*
 * policy_2q.c - "leaf-2q": leaf-first eviction in two segments with a ghost
 * history, for prefix caches whose workload mixes a few reused prefixes with
 * many blocks that are written once and never read again.
 *
 * Over the evictable leaves (so prefix closure holds, as under leaf-lru):
 *
 * - probation holds blocks no request has reused yet: written by their first
 *   request and not hit since. Most blocks of a KV cache end there (58% of
 *   the blocks of the Mooncake synthetic trace are used once).
 * - protected holds blocks that proved reuse: hit by a lookup (the record's
 *   hits > 0: some later request shared the whole prefix up to them; a
 *   parent's hits are never below its children's), or written again while
 *   still remembered by the ghost history (evicted, then asked for again).
 *
 * Each segment is ordered by last access (a binary min-heap per slot class,
 * as in policy_lru.c, for the same reason: parents are touched before their
 * leaves). The victim is the oldest probation leaf if it was last accessed
 * more than SMALL_PCT% of the cached records' count of admissions ago
 * (S3-FIFO's small-queue share, as a time window so that no segment sizes
 * need tracking), else the oldest protected leaf, else whatever is left. A
 * block that is written and never read is thus gone after about a tenth of
 * a cache turnover instead of a whole one, while reused prefixes stay until
 * other reused prefixes push them out.
 *
 * The ghost history remembers the hashes of recently evicted blocks (about
 * GHOST_FACTOR times the cached record count): a block written again while
 * remembered comes back protected, so a prefix whose reuse distance exceeds
 * the probation window is kept from its second write on. It is a bucketed
 * array of 32-bit fingerprints, FIFO within each bucket (seg_ghost in
 * policy_seg.c, leaf-learn's too); a false match (about
 * 8 in 2^32 per admission) only protects one block too many.
 *
 * Per record, nothing beside the record: r->stamp holds the access clock
 * and two flag bits, r->pol the heap position. A record is new to the policy
 * (admitted) at its first touch, while its stamp is still 0
 * (kvs_table_insert() zeroes it). Ages are counted in admissions: a ring
 * holds the clock of each of the last ~SMALL_PCT% x records admissions, so
 * "admitted more than W times since it was last accessed" is one lookup.
 * Memory beyond the heaps (4 bytes per evictable leaf, as leaf-lru): the
 * ghost, 2 x 4 + 0.25 bytes, and the ring, 8 x 0.1 to 0.2 bytes: 9.1 to 9.9
 * bytes per cached block.
 *
 * Eviction is told apart from a leaf being pinned or growing a child by the
 * record itself: the cache removes a victim from the policy before it changes
 * anything, so a record that leaves the set while still committed, unpinned
 * and childless is being evicted (cache.c: evict()); only those are
 * remembered. A mistake there would only cost hit ratio, never correctness.
 *
 * Thread: the daemon's loop thread only.
 */
#include <errno.h>
#include <stdlib.h>

#include "kvs_policy.h"
#include "policy_seg.h"

#define SMALL_PCT 10      /* probation window, % of cached records */
#define GHOST_FACTOR 2    /* ghost entries per cached record */

#define F_REMEMBERED (1ull << 63) /* admitted on a ghost match */
#define F_PROT (1ull << 62)       /* a member of the protected heap */
#define CLOCK_MASK (F_PROT - 1)

enum { PROB = 0, PROT = 1 };

typedef struct q2 {
	kvs_table *t;
	uint64_t clock;      /* touches: the access order */
	seg_ring ring;       /* admissions and their clocks */
	seg_heaps hs;        /* [cls * 2 + segment] */
	seg_ghost ghost;     /* fingerprints of evicted blocks */
} q2;

/* ---- ghost history ---------------------------------------------------- */

static uint32_t fingerprint(kvs_hash h)
{
	uint32_t f = (uint32_t)(h.hi ^ (h.hi >> 32));

	return f ? f : 1;
}

static void ghost_put(q2 *q, kvs_hash h)
{
	uint32_t f = fingerprint(h);

	seg_ghost_put(&q->ghost, kvs_table_count(q->t), h, f, f);
}

/* 1 if @h is remembered; the entry is used up. */
static int ghost_take(q2 *q, kvs_hash h)
{
	return seg_ghost_take(&q->ghost, h, fingerprint(h)) != 0;
}

/* ---- admission ages (policy_seg.c) ---------------------------------- */

static uint64_t window(const q2 *q)
{
	return (uint64_t)kvs_table_count(q->t) * SMALL_PCT / 100;
}

static void admit(q2 *q, uint64_t stamp)
{
	seg_ring_admit(&q->ring, stamp, window(q) + 1);
}

/* ---- the policy ------------------------------------------------------- */

static int is_protected(const kvs_rec *r)
{
	return r->hits > 0 || (r->stamp & F_REMEMBERED);
}

static int q2_create(kvs_table *t, void **state)
{
	q2 *q = calloc(1, sizeof(*q));

	if (!q)
		return -ENOMEM;
	q->t = t;
	q->hs = (seg_heaps){ .t = t, .key_mask = CLOCK_MASK, .seg_bit = F_PROT };
	q->ghost = (seg_ghost){ .factor = GHOST_FACTOR, .fp_shift = 0 };
	*state = q;
	return 0;
}

static void q2_destroy(void *state)
{
	q2 *q = state;

	seg_heaps_free(&q->hs);
	seg_ghost_free(&q->ghost);
	seg_ring_free(&q->ring);
	free(q);
}

static void q2_add(void *state, uint32_t idx)
{
	q2 *q = state;
	kvs_rec *r = kvs_table_rec(q->t, idx);
	int seg = is_protected(r) ? PROT : PROB;
	seg_heap *h = seg_heap_of(&q->hs, r->cls, seg);

	r->stamp = (r->stamp & ~F_PROT) | (seg == PROT ? F_PROT : 0);
	if (!h || seg_heap_push(&q->hs, h, idx) < 0)
		/* Out of memory: the record stays unevictable; still correct,
		 * only less of the cache can be reclaimed. */
		r->pol = KVS_NONE;
}

static void q2_del(void *state, uint32_t idx)
{
	q2 *q = state;
	kvs_rec *r = kvs_table_rec(q->t, idx);
	seg_heap *h = seg_heap_member(&q->hs, idx, r);

	if (!h)
		return;
	seg_heap_remove(&q->hs, h, r->pol);
	r->pol = KVS_NONE;
	/* Still evictable as it leaves the set: it is being evicted. */
	if (r->state == KVS_REC_READY && r->refs == 0 && r->children == 0)
		ghost_put(q, r->hash);
}

static void q2_touch(void *state, uint32_t idx)
{
	q2 *q = state;
	kvs_rec *r = kvs_table_rec(q->t, idx);
	seg_heap *h = seg_heap_member(&q->hs, idx, r);
	uint64_t flags;

	if (r->stamp == 0) {
		/* Admitted: its first access since it was written. */
		flags = ghost_take(q, r->hash) ? F_REMEMBERED : 0;
		r->stamp = flags | ++q->clock;
		admit(q, q->clock);
	} else {
		flags = r->stamp & (F_REMEMBERED | F_PROT);
		r->stamp = flags | ++q->clock;
	}
	if (!h)
		return;
	if ((is_protected(r) ? F_PROT : 0) != (r->stamp & F_PROT)) {
		/* It earned protection while in the set: move it. */
		seg_heap_remove(&q->hs, h, r->pol);
		r->pol = KVS_NONE;
		q2_add(q, idx);
		return;
	}
	seg_heap_fix(&q->hs, h, r->pol);
}

static uint32_t q2_victim(void *state, uint32_t cls)
{
	q2 *q = state;
	uint32_t prob = seg_heap_least(&q->hs, cls, PROB), prot = seg_heap_least(&q->hs, cls, PROT);

	if (prob == KVS_NONE || prot == KVS_NONE)
		return prob != KVS_NONE ? prob : prot;
	return seg_ring_older(&q->ring, seg_key(&q->hs, prob), window(q)) ? prob : prot;
}

static void q2_stats(void *state, kvs_policy_stats *st)
{
	q2 *q = state;

	st->probation = (int64_t)seg_heaps_count(&q->hs, PROB);
	st->protected_ = (int64_t)seg_heaps_count(&q->hs, PROT);
	st->window_ppm = SMALL_PCT * 10000;
}

const kvs_policy_ops kvs_policy_leaf_2q = {
	.name = "leaf-2q",
	.leaf_only = 1,
	.create = q2_create,
	.destroy = q2_destroy,
	.add = q2_add,
	.del = q2_del,
	.touch = q2_touch,
	.victim = q2_victim,
	.stats = q2_stats,
};
