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
 * policy_seg.c, leaf-learn's too, as are the heaps, the ring and the hooks'
 * common parts: seg_pol); a false match (about
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

/* ---- ghost history ---------------------------------------------------- */

static uint32_t fingerprint(kvs_hash h)
{
	uint32_t f = (uint32_t)(h.hi ^ (h.hi >> 32));

	return f ? f : 1;
}

static void ghost_put(seg_pol *q, kvs_hash h)
{
	uint32_t f = fingerprint(h);

	seg_ghost_put(&q->ghost, kvs_table_count(q->t), h, f, f);
}

/* 1 if @h is remembered; the entry is used up. */
static int ghost_take(seg_pol *q, kvs_hash h)
{
	return seg_ghost_take(&q->ghost, h, fingerprint(h)) != 0;
}

/* The probation window, in admissions (policy_seg.c counts the ages). */
static uint64_t window(const seg_pol *q)
{
	return (uint64_t)kvs_table_count(q->t) * SMALL_PCT / 100;
}

/* ---- the policy ------------------------------------------------------- */

static int segment(const kvs_rec *r)
{
	return r->hits > 0 || (r->stamp & F_REMEMBERED) ? SEG_PROT : SEG_PROB;
}

static int q2_create(kvs_table *t, void **state)
{
	seg_pol *q = malloc(sizeof(*q));

	if (!q)
		return -ENOMEM;
	seg_pol_init(q, t, CLOCK_MASK, F_PROT, GHOST_FACTOR, 0);
	*state = q;
	return 0;
}

static void q2_destroy(void *state)
{
	seg_pol_free(state);
	free(state);
}

static void q2_add(void *state, uint32_t idx)
{
	seg_pol *q = state;

	seg_heaps_add(&q->hs, idx, segment(kvs_table_rec(q->t, idx)));
}

static void q2_del(void *state, uint32_t idx)
{
	seg_pol *q = state;

	if (seg_heaps_del(&q->hs, idx))
		ghost_put(q, kvs_table_rec(q->t, idx)->hash);
}

static void q2_touch(void *state, uint32_t idx)
{
	seg_pol *q = state;
	kvs_rec *r = kvs_table_rec(q->t, idx);
	uint64_t flags;

	if (r->stamp == 0) {
		/* Admitted: its first access since it was written. */
		flags = ghost_take(q, r->hash) ? F_REMEMBERED : 0;
		r->stamp = flags | ++q->clock;
		seg_ring_admit(&q->ring, q->clock, window(q) + 1);
	} else {
		flags = r->stamp & (F_REMEMBERED | F_PROT);
		r->stamp = flags | ++q->clock;
	}
	seg_heaps_touched(&q->hs, idx, segment(r));
}

static uint32_t q2_victim(void *state, uint32_t cls)
{
	return seg_pol_victim(state, cls, window(state));
}

static void q2_stats(void *state, kvs_policy_stats *st)
{
	seg_pol_counts(state, st);
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
