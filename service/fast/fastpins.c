/*
 * fastpins.c - the fast path's pins, the daemon's side: may a block leave
 * (kvs_fast_hold, kvs_fast_hold_batch) and which held blocks may go
 * (kvs_fast_unhold); the end of a pin area and its grace are fastconn.c's.
 * The memory-ordering argument is at the top of fastidx.c; this
 * file answers it for a whole batch of victims with one look at the pins.
 *
 * One look per batch, not one per victim. The argument needs, for each
 * victim B: B's entry marked going (seq odd), then a full fence, then a
 * read of every pin. So mark every victim of the batch going first, then
 * one fence, then read every pin of the domain once into a hash set (the
 * snapshot), then answer each victim from the set. Each victim's mark is
 * sequenced before the one fence and each pin read after it, which is
 * exactly the order a scan per victim would have had: a client whose fence
 * came first has its pin in the snapshot; one whose fence came later sees
 * the odd seq of every victim of the batch and takes the socket. The cost
 * is O(pins + victims) per batch instead of O(pins x victims), and the pins
 * read are bounded: at most KVS_FAST_DOMAIN_PINS per domain (the sum of its
 * areas' caps, enforced at attach), each area clamped to our own cap.
 *
 * Deciding a batch moves entries: deleting one shifts its cluster back
 * (fastidx.c), which may move another victim of the batch. So the kept
 * ones are restored first, while every victim is where it was marked, and
 * the others are found again by hash before each is deleted; a moved
 * victim stays marked going (fast_delete_at keeps an odd seq odd), so no
 * client validates a pin on it between the snapshot and its deletion.
 *
 * The snapshot's hash is keyed by a random seed: a client chooses its pins
 * and must not be able to choose colliding ones.
 *
 * A worker's area has a slab budget (cache_pinslab.c grants it): the
 * snapshot takes its pins as (pin, slab word) pairs, in the area's order,
 * as long as their distinct words' pages fit (area_add), and a victim is
 * kept only by a pair with its own word, or by a pin of an area without a
 * budget. The library counts the same words before it pins (client/fast.c),
 * and keeps a released pin's words counted while a snapshot may still read
 * it (`snaps`, snapshot()), so its pins all count; a client that ignores
 * its budget holds nothing past it.
 */
#define _GNU_SOURCE
#include "fastidx_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

#include "kvs_cache_admin.h"
#include "kvs_log.h"

/* ---- the snapshot ------------------------------------------------------ */

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* Where (@key, @word) starts probing: both through the seeded mix, one
 * after the other, so that no choice of pairs lands on one slot. */
static uint32_t slot_of(const kvs_fast *f, uint64_t key, uint64_t word)
{
	return (uint32_t)(mix(mix(key ^ f->seed) ^ word) >> f->set_shift);
}

/* A pin is (key, slab word): an area without a budget names its pins
 * with word 0, which protects by key alone. */
static void set_add(kvs_fast *f, uint64_t key, uint64_t word)
{
	for (uint32_t i = slot_of(f, key, word);; i = (i + 1) & f->set_mask) {
		f->counts.pin_probes++;
		if (f->set[i].key == key && f->set[i].word == word)
			return;
		if (f->set[i].key == 0) {
			f->set[i] = (struct fast_pin){ key, word };
			f->set_n++;
			return;
		}
	}
}

static int set_has(kvs_fast *f, uint64_t key, uint64_t word)
{
	if (key == 0 || f->set_n == 0)
		return 0; /* 0 is no pin (kvs_fast.h), whatever fills an area */
	for (uint32_t i = slot_of(f, key, word);; i = (i + 1) & f->set_mask) {
		f->counts.pin_probes++;
		if (f->set[i].key == key && f->set[i].word == word)
			return 1;
		if (f->set[i].key == 0)
			return 0;
	}
}

/* Whether a pin of a block in slab @word (kvs_fast_slab_word) protects it:
 * a pin of an area without a budget, or of one whose budget counted it. */
static int pinned(kvs_fast *f, uint64_t key, uint64_t word)
{
	return set_has(f, key, 0) || set_has(f, key, word);
}

/* Room for @n entries of @elem bytes at a load of at most a half in *@v
 * (*@cap entries), the first 2^*@bits zeroed. Errors: -ENOMEM. */
static int room(void **v, size_t *cap, size_t elem, size_t n, uint32_t *bits)
{
	size_t want = 64;

	*bits = 6;
	while (want < 2 * n) {
		want <<= 1;
		(*bits)++;
	}
	if (want > *cap) {
		void *p = realloc(*v, want * elem);

		if (!p)
			return -ENOMEM;
		*v = p;
		*cap = want;
	}
	memset(*v, 0, want * elem);
	return 0;
}

/* Area @fc's pins into the set. Without a budget, every pin. With one,
 * in the area's order, a pin whose slab word is one already counted, or
 * whose pages still fit its budget (counted then); the rest, and words of
 * 0 pages, protect nothing (pins_unbudgeted). A client that keeps within
 * its budget (client/fast.c) has every pin counted: it counts the same
 * words, those of the entries it pinned. Words are the client's: they are
 * only compared (a word that is not its block's protects nothing) and
 * hashed with the seed. Errors: -ENOMEM. */
static int area_add(kvs_fast *f, kvs_fast_client *fc)
{
	uint64_t used = 0;
	uint32_t bits, mask;

	if (fc->slab_pages == KVS_FAST_NO_BUDGET) {
		for (uint32_t k = 0; k < fc->snap_n; k++) {
			uint64_t p = LD(&fc->pins[k]);

			f->counts.pin_reads++;
			if (p)
				set_add(f, p, 0);
		}
		return 0;
	}
	if (room((void **)&f->aset, &f->aset_cap, sizeof(*f->aset), fc->snap_n,
		 &bits) < 0)
		return -ENOMEM;
	mask = (uint32_t)((1ull << bits) - 1);
	for (uint32_t k = 0; k < fc->snap_n; k++) {
		uint64_t p, w;
		uint32_t pages, i;

		if (f->at_pin)
			f->at_pin(f->at_pin_arg, k);
		/* The pin, then its word: the client stores them the other
		 * way round, the pin with release. */
		p = LD_ACQ(&fc->pins[k]);
		f->counts.pin_reads++;
		if (!p)
			continue;
		w = LD(&fc->slabs[k]);
		pages = (uint32_t)w;
		for (i = (uint32_t)mix(w ^ f->seed) & mask;
		     f->aset[i] && f->aset[i] != w; i = (i + 1) & mask)
			f->counts.pin_probes++;
		if (!f->aset[i]) {
			if (pages == 0 || used + pages > fc->slab_pages) {
				f->counts.pins_unbudgeted++;
				continue;
			}
			f->aset[i] = w;
			used += pages;
		}
		set_add(f, p, w);
	}
	return 0;
}

/* Read every pin of @d's areas (live and in their grace) into the set, at
 * most half full. Call after the fence. Everything read was written by a
 * client: `used` is read once and clamped to our copy of the capacity; a
 * pin is only compared, never followed. Returns 0 or -ENOMEM (then the
 * caller keeps every victim: a block kept too long, never one freed under
 * a pin). */
static int snapshot_read(kvs_fast *f, fdom *d)
{
	size_t total = 0;
	uint32_t bits;

	f->set_n = 0;
	for (kvs_fast_client *fc = d->clients; fc; fc = fc->next) {
		uint32_t n = LD(&fc->hdr->used);

		fc->snap_n = n > fc->cap ? fc->cap : n;
		total += fc->snap_n;
	}
	d->last_snap = (uint32_t)total;
	if (total == 0)
		return 0;
	if (room((void **)&f->set, &f->set_cap, sizeof(*f->set), total,
		 &bits) < 0)
		return -ENOMEM;
	f->set_mask = (uint32_t)((1ull << bits) - 1);
	f->set_shift = 64 - bits;
	for (kvs_fast_client *fc = d->clients; fc; fc = fc->next)
		if (area_add(f, fc) < 0)
			return -ENOMEM;
	return 0;
}

/* The pins of @d's areas, read while the index's `snaps` is odd: odd, a
 * full fence, the reads, a fence, even again. A client that releases pins
 * clears them, fences and loads `snaps`: even, no snapshot that starts
 * later can read them, so their slabs' pages are free at once; odd, it
 * spends them again only once `snaps` has moved on (client/fast.c). So
 * the words one snapshot reads were all in the client's count at once,
 * within its budget, and an honest client's pins all fit it here. */
static int snapshot(kvs_fast *f, fdom *d)
{
	uint32_t s = LD(&d->hdr->snaps);
	int rc;

	f->counts.snapshots++;
	ST(&d->hdr->snaps, s | 1u);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	rc = snapshot_read(f, d);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	ST(&d->hdr->snaps, (s | 1u) + 1u);
	return rc;
}

/* ---- hold: may these blocks leave? -------------------------------------- */

typedef struct victim {
	int64_t at;     /* its entry, or -1: not in the index */
	uint64_t seq;   /* the entry's seq before we marked it going */
	uint64_t key, key2;
	uint64_t word, word2; /* their slabs' words (kvs_fast_slab_word) */
} victim;

static int hold_one(kvs_fast *f, fdom *d, uint32_t idx, uint64_t key,
		    uint64_t word)
{
	if (f->nheld == f->held_cap) {
		uint32_t cap = f->held_cap ? 2 * f->held_cap : 64;
		fast_held *v = realloc(f->held, cap * sizeof(*v));

		if (!v)
			return 0; /* kept this time, not held: asked again later */
		f->held = v;
		f->held_cap = cap;
	}
	f->held[f->nheld++] = (fast_held){ idx, key, word, d };
	d->nheld++;
	kvs_cache_pin_rec(f->cache, idx, 1);
	f->counts.evict_skipped++;
	return 1;
}

/* The batch @idx[0..n) of domain @d, their records @r, at most
 * KVS_FAST_BATCH: keep[i] = 1 for each one a pin names (held). */
static uint32_t hold_many(kvs_fast *f, fdom *d, uint32_t n,
			  const uint32_t *idx, const kvs_rec *const *r,
			  uint8_t *keep)
{
	victim v[KVS_FAST_BATCH];
	uint32_t marked = 0, kept = 0;

	for (uint32_t i = 0; i < n; i++) {
		kvs_hash h = kvs_cache_rec_hash(r[i]);
		uint32_t slab, pages;
		int64_t empty;

		keep[i] = 0;
		v[i].at = r[i]->tier == KVS_TIER_HOST
				  ? fast_find(d, r[i]->ns, h, &empty) : -1;
		if (v[i].at < 0) {
			/* Never published (no room): nobody can have
			 * pinned it. */
			if (r[i]->tier == KVS_TIER_HOST && d->missing > 0) {
				d->missing--;
				fast_set_complete(f, d);
			}
			continue;
		}
		/* What clients pinned is what the entry says (the record's
		 * own slot too, should the two ever differ: keep the block
		 * if either is pinned). */
		v[i].key = kvs_fast_pin_key(d->e[v[i].at].offset,
					    d->e[v[i].at].gen);
		v[i].word = kvs_fast_slab_word(d->e[v[i].at].slab,
					       d->e[v[i].at].slab_pages);
		v[i].key2 = kvs_fast_pin_key(r[i]->offset, r[i]->gen);
		slab = kvs_cache_rec_slab(f->cache, r[i], &pages);
		v[i].word2 = kvs_fast_slab_word(slab, pages);
		v[i].seq = LD(&d->e[v[i].at].seq);
		ST(&d->e[v[i].at].seq, v[i].seq + 1); /* going */
		marked++;
	}
	if (marked == 0)
		return 0;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (d->clients && snapshot(f, d) < 0) {
		/* No snapshot: keep them all, unheld (asked again later). */
		for (uint32_t i = 0; i < n; i++)
			if (v[i].at >= 0) {
				ST_REL(&d->e[v[i].at].seq, v[i].seq);
				keep[i] = 1;
				kept++;
			}
		return kept;
	}
	if (f->after_snapshot)
		f->after_snapshot(f->after_snapshot_arg);
	/* Kept ones first, while every victim is where it was marked. */
	for (uint32_t i = 0; i < n; i++) {
		int by2;

		if (v[i].at < 0 || !d->clients)
			continue;
		by2 = !pinned(f, v[i].key, v[i].word);
		if (by2 && !(v[i].key2 != v[i].key &&
			     pinned(f, v[i].key2, v[i].word2)))
			continue;
		ST_REL(&d->e[v[i].at].seq, v[i].seq); /* unchanged: fastidx.c */
		hold_one(f, d, idx[i], by2 ? v[i].key2 : v[i].key,
			 by2 ? v[i].word2 : v[i].word);
		keep[i] = 1;
		kept++;
	}
	for (uint32_t i = 0; i < n; i++) {
		int64_t empty, at;

		if (v[i].at < 0 || keep[i])
			continue;
		at = fast_find(d, r[i]->ns, kvs_cache_rec_hash(r[i]), &empty);
		if (at >= 0)
			fast_delete_at(d, (uint32_t)at);
	}
	return kept;
}

uint32_t kvs_fast_batch_hint(kvs_fast *f, uint64_t arena_id)
{
	fdom *d = f ? fast_dom_get(f, arena_id) : NULL;
	uint32_t n = d ? d->last_snap / KVS_FAST_PINS_PER_VICTIM : 0;

	return n < 1 ? 1 : n > KVS_FAST_BATCH ? KVS_FAST_BATCH : n;
}

int kvs_fast_hold(kvs_fast *f, uint64_t arena_id, uint32_t idx,
		  const kvs_rec *r)
{
	uint8_t keep = 0;
	fdom *d;

	if (!f || r->tier != KVS_TIER_HOST)
		return 0;
	d = fast_dom_get(f, arena_id);
	if (!d || !d->hdr)
		return 0;
	hold_many(f, d, 1, &idx, &r, &keep);
	return keep;
}

uint32_t kvs_fast_hold_batch(kvs_fast *f, uint64_t arena_id,
			     const uint32_t *idx, uint32_t n, uint8_t *keep)
{
	const kvs_rec *r[KVS_FAST_BATCH];
	uint32_t kept = 0;
	fdom *d;

	memset(keep, 0, n);
	if (!f || n == 0)
		return 0;
	d = fast_dom_get(f, arena_id);
	if (!d || !d->hdr)
		return 0;
	for (uint32_t at = 0; at < n; at += KVS_FAST_BATCH) {
		uint32_t m = n - at < KVS_FAST_BATCH ? n - at : KVS_FAST_BATCH;

		for (uint32_t i = 0; i < m; i++)
			r[i] = kvs_cache_rec_at(f->cache, idx[at + i]);
		kept += hold_many(f, d, m, idx + at, r, keep + at);
	}
	return kept;
}

/* The held records are asked again with one snapshot per domain that holds
 * any. No fence is needed here: letting go of a hold only makes the block
 * evictable, and its eviction goes through hold_many() again. */
uint32_t kvs_fast_unhold(kvs_fast *f)
{
	uint32_t let = 0;

	if (!f)
		return 0;
	for (uint32_t i = 0; i < f->ndoms && f->nheld > 0; i++) {
		fdom *d = f->doms[i];

		if (d->nheld == 0)
			continue;
		if (d->clients && snapshot(f, d) < 0)
			continue;
		for (uint32_t k = 0; k < f->nheld;) {
			fast_held *hd = &f->held[k];

			if (hd->d != d ||
			    (d->clients && pinned(f, hd->key, hd->word))) {
				k++;
				continue;
			}
			kvs_cache_pin_rec(f->cache, hd->idx, -1);
			d->nheld--;
			*hd = f->held[--f->nheld];
			let++;
		}
	}
	return let;
}
