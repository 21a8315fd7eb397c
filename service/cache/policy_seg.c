/* policy_seg.c - heaps, the admission ring, the ghost history and the
 * shared hooks of the two-segment policies (see policy_seg.h). */
#include "policy_seg.h"

#include <errno.h>
#include <stdlib.h>

uint64_t seg_key(const seg_heaps *s, uint32_t idx)
{
	return kvs_table_rec(s->t, idx)->stamp & s->key_mask;
}

static inline void set(seg_heaps *s, seg_heap *h, uint32_t pos, uint32_t idx)
{
	h->idx[pos] = idx;
	kvs_table_rec(s->t, idx)->pol = pos;
}

static void sift_up(seg_heaps *s, seg_heap *h, uint32_t pos)
{
	uint32_t idx = h->idx[pos];
	uint64_t k = seg_key(s, idx);

	while (pos > 0) {
		uint32_t up = (pos - 1) / 2;

		if (seg_key(s, h->idx[up]) <= k)
			break;
		set(s, h, pos, h->idx[up]);
		pos = up;
	}
	set(s, h, pos, idx);
}

static void sift_down(seg_heaps *s, seg_heap *h, uint32_t pos)
{
	uint32_t idx = h->idx[pos];
	uint64_t k = seg_key(s, idx);

	for (;;) {
		uint32_t c = 2 * pos + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n &&
		    seg_key(s, h->idx[c + 1]) < seg_key(s, h->idx[c]))
			c++;
		if (seg_key(s, h->idx[c]) >= k)
			break;
		set(s, h, pos, h->idx[c]);
		pos = c;
	}
	set(s, h, pos, idx);
}

seg_heap *seg_heap_of(seg_heaps *s, uint32_t cls, int seg)
{
	if (cls >= s->nclasses) {
		uint32_t n = cls + 1;
		seg_heap *nh = realloc(s->h, (size_t)n * 2 * sizeof(*nh));

		if (!nh)
			return NULL;
		for (uint32_t i = s->nclasses * 2; i < n * 2; i++)
			nh[i] = (seg_heap){ 0 };
		s->h = nh;
		s->nclasses = n;
	}
	return &s->h[cls * 2 + seg];
}

int seg_heap_push(seg_heaps *s, seg_heap *h, uint32_t idx)
{
	if (h->n == h->cap) {
		uint32_t cap = h->cap ? h->cap * 2 : 256;
		uint32_t *ni = realloc(h->idx, (size_t)cap * sizeof(uint32_t));

		if (!ni)
			return -ENOMEM;
		h->idx = ni;
		h->cap = cap;
	}
	h->n++;
	set(s, h, h->n - 1, idx);
	sift_up(s, h, h->n - 1);
	return 0;
}

void seg_heap_remove(seg_heaps *s, seg_heap *h, uint32_t pos)
{
	uint32_t last = h->idx[--h->n];

	if (pos == h->n)
		return;
	set(s, h, pos, last);
	sift_up(s, h, pos);
	sift_down(s, h, kvs_table_rec(s->t, last)->pol);
}

void seg_heap_fix(seg_heaps *s, seg_heap *h, uint32_t pos)
{
	uint32_t idx = h->idx[pos];

	sift_up(s, h, pos);
	sift_down(s, h, kvs_table_rec(s->t, idx)->pol);
}

seg_heap *seg_heap_member(seg_heaps *s, uint32_t idx, const kvs_rec *r)
{
	seg_heap *h;

	if (r->pol == KVS_NONE || r->cls >= s->nclasses)
		return NULL;
	h = &s->h[r->cls * 2 + (r->stamp & s->seg_bit ? 1 : 0)];
	return r->pol < h->n && h->idx[r->pol] == idx ? h : NULL;
}

uint32_t seg_heap_least(const seg_heaps *s, uint32_t cls, int seg)
{
	uint32_t best = KVS_NONE;

	if (cls != KVS_CLASS_ANY) {
		const seg_heap *h;

		if (cls >= s->nclasses)
			return KVS_NONE;
		h = &s->h[cls * 2 + seg];
		return h->n ? h->idx[0] : KVS_NONE;
	}
	for (uint32_t c = 0; c < s->nclasses; c++) {
		const seg_heap *h = &s->h[c * 2 + seg];

		if (h->n && (best == KVS_NONE ||
			     seg_key(s, h->idx[0]) < seg_key(s, best)))
			best = h->idx[0];
	}
	return best;
}

uint64_t seg_heaps_count(const seg_heaps *s, int seg)
{
	uint64_t n = 0;

	for (uint32_t c = 0; c < s->nclasses; c++)
		n += s->h[c * 2 + seg].n;
	return n;
}

void seg_heaps_free(seg_heaps *s)
{
	for (uint32_t i = 0; i < s->nclasses * 2; i++)
		free(s->h[i].idx);
	free(s->h);
	s->h = NULL;
	s->nclasses = 0;
}

void seg_heaps_add(seg_heaps *s, uint32_t idx, int seg)
{
	kvs_rec *r = kvs_table_rec(s->t, idx);
	seg_heap *h = seg_heap_of(s, r->cls, seg);

	r->stamp = (r->stamp & ~s->seg_bit) | (seg ? s->seg_bit : 0);
	if (!h || seg_heap_push(s, h, idx) < 0)
		/* Out of memory: the record stays unevictable; still correct,
		 * only less of the cache can be reclaimed. */
		r->pol = KVS_NONE;
}

int seg_heaps_del(seg_heaps *s, uint32_t idx)
{
	kvs_rec *r = kvs_table_rec(s->t, idx);
	seg_heap *h = seg_heap_member(s, idx, r);

	if (!h)
		return 0;
	seg_heap_remove(s, h, r->pol);
	r->pol = KVS_NONE;
	/* Still evictable as it leaves the set: it is being evicted. */
	return r->state == KVS_REC_READY && r->refs == 0 && r->children == 0;
}

void seg_heaps_touched(seg_heaps *s, uint32_t idx, int seg)
{
	kvs_rec *r = kvs_table_rec(s->t, idx);
	seg_heap *h = seg_heap_member(s, idx, r);

	/* A pinned or non-leaf record is in no heap; only members move
	 * (membership is tracked by pol, which add and del keep exact). */
	if (!h)
		return;
	if ((seg ? s->seg_bit : 0) != (r->stamp & s->seg_bit)) {
		/* It earned protection while in the set: move it. */
		seg_heap_remove(s, h, r->pol);
		r->pol = KVS_NONE;
		seg_heaps_add(s, idx, seg);
		return;
	}
	/* A key can fall as well as rise (leaf-learn's bonus): both ways. */
	seg_heap_fix(s, h, r->pol);
}

/* ---- admission ages --------------------------------------------------- */

/* Make the ring hold at least @n admissions, keeping those it has. Without
 * memory it stays as it is. */
static void ring_reach(seg_ring *a, uint64_t n)
{
	uint64_t cap = n * 2, from;
	uint64_t *nr;

	if (n <= a->cap)
		return;
	nr = malloc(cap * sizeof(*nr));
	if (!nr)
		return;
	from = a->admitted > a->cap ? a->admitted - a->cap : 0;
	if (from < a->lo)
		from = a->lo;
	for (uint64_t i = from; i < a->admitted; i++)
		nr[i % cap] = a->ring[i % a->cap];
	free(a->ring);
	a->ring = nr;
	a->cap = cap;
	a->lo = from;
}

void seg_ring_admit(seg_ring *a, uint64_t stamp, uint64_t keep)
{
	ring_reach(a, keep);
	if (a->cap) {
		a->ring[a->admitted % a->cap] = stamp;
		if (a->admitted + 1 > a->cap + a->lo)
			a->lo = a->admitted + 1 - a->cap;
	}
	a->admitted++;
}

int seg_ring_older(seg_ring *a, uint64_t stamp, uint64_t w)
{
	uint64_t i;

	if (a->admitted <= w)
		return 0;
	ring_reach(a, w + 1);
	i = a->admitted - 1 - w; /* the (w+1)-th most recent admission */
	if (i < a->lo || a->admitted - i > a->cap)
		return 1; /* beyond what the ring remembers */
	return a->ring[i % a->cap] > stamp;
}

void seg_ring_free(seg_ring *a)
{
	free(a->ring);
	a->ring = NULL;
	a->cap = 0;
}

/* ---- ghost history ---------------------------------------------------- */

static uint32_t *ghost_bucket(const seg_ghost *g, kvs_hash h)
{
	/* Multiply-shift: a bucket from the low word, any bucket count. */
	uint64_t b = (uint64_t)(((unsigned __int128)h.lo * g->buckets) >> 64);

	return &g->e[b * SEG_GHOST_WAYS];
}

static void ghost_size(seg_ghost *g, uint32_t records)
{
	uint64_t want = (uint64_t)records * g->factor;
	uint64_t buckets;
	uint32_t *e;
	uint8_t *nx;

	if (g->buckets && want <= g->basis * 2 * g->factor)
		return;
	if (want < SEG_GHOST_MIN)
		want = SEG_GHOST_MIN;
	buckets = (want + SEG_GHOST_WAYS - 1) / SEG_GHOST_WAYS;
	e = calloc(buckets * SEG_GHOST_WAYS, sizeof(*e));
	nx = calloc(buckets, 1);
	if (!e || !nx) {
		free(e);
		free(nx);
		return;
	}
	free(g->e);
	free(g->next);
	g->e = e;
	g->next = nx;
	g->buckets = buckets;
	g->basis = want / g->factor;
}

int seg_ghost_put(seg_ghost *g, uint32_t records, kvs_hash h, uint32_t fp,
		  uint32_t entry)
{
	uint32_t *b;
	uint64_t bi;

	ghost_size(g, records);
	if (!g->buckets)
		return 0;
	b = ghost_bucket(g, h);
	for (int w = 0; w < SEG_GHOST_WAYS; w++)
		if (b[w] >> g->fp_shift == fp) {
			b[w] = entry;
			return 1;
		}
	bi = (uint64_t)(b - g->e) / SEG_GHOST_WAYS;
	b[g->next[bi]] = entry;
	g->next[bi] = (uint8_t)((g->next[bi] + 1) % SEG_GHOST_WAYS);
	return 1;
}

uint32_t seg_ghost_take(seg_ghost *g, kvs_hash h, uint32_t fp)
{
	uint32_t *b;

	if (!g->buckets)
		return 0;
	b = ghost_bucket(g, h);
	for (int w = 0; w < SEG_GHOST_WAYS; w++) {
		if (b[w] && b[w] >> g->fp_shift == fp) {
			uint32_t e = b[w];

			b[w] = 0;
			return e;
		}
	}
	return 0;
}

void seg_ghost_free(seg_ghost *g)
{
	free(g->e);
	free(g->next);
	g->e = NULL;
	g->next = NULL;
	g->buckets = 0;
}

/* ---- the two-segment policies' state ---------------------------------- */

void seg_pol_init(seg_pol *p, kvs_table *t, uint64_t key_mask,
		  uint64_t seg_bit, uint32_t ghost_factor, uint32_t fp_shift)
{
	*p = (seg_pol){
		.t = t,
		.hs = { .t = t, .key_mask = key_mask, .seg_bit = seg_bit },
		.ghost = { .factor = ghost_factor, .fp_shift = fp_shift },
	};
}

void seg_pol_free(seg_pol *p)
{
	seg_heaps_free(&p->hs);
	seg_ghost_free(&p->ghost);
	seg_ring_free(&p->ring);
}

uint32_t seg_pol_victim(seg_pol *p, uint32_t cls, uint64_t window)
{
	uint32_t prob = seg_heap_least(&p->hs, cls, SEG_PROB);
	uint32_t prot = seg_heap_least(&p->hs, cls, SEG_PROT);

	if (prob == KVS_NONE || prot == KVS_NONE)
		return prob != KVS_NONE ? prob : prot;
	return seg_ring_older(&p->ring, seg_key(&p->hs, prob), window) ? prob : prot;
}

void seg_pol_counts(const seg_pol *p, kvs_policy_stats *st)
{
	st->probation = (int64_t)seg_heaps_count(&p->hs, SEG_PROB);
	st->protected_ = (int64_t)seg_heaps_count(&p->hs, SEG_PROT);
}
