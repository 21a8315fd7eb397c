/*
 * policy_lru.c - least recently used: "leaf-lru" among evictable leaves, and
 * "lru" over every unpinned block (the cache decides which records are in the
 * evictable set; the ordering is the same).
 *
 * A chain's parents are always touched before their children (a lookup walks
 * from block 0), so a plain LRU list would put every parent ahead of its
 * leaves and an eviction would scan whole chains to find a leaf. Instead the
 * evictable set (leaves only) is a binary min-heap on the last-access stamp,
 * one heap per slot class: add, del and touch are O(log n), victim is O(1)
 * for one class and O(classes) across all.
 */
#include <errno.h>
#include <stdlib.h>

#include "kvs_policy.h"

typedef struct lru_heap {
	uint32_t *idx;
	uint32_t n, cap;
} lru_heap;

typedef struct lru {
	kvs_table *t;
	uint64_t clock;
	lru_heap *heaps; /* by class */
	uint32_t nheaps;
} lru;

#define NOT_IN_HEAP UINT32_MAX

static inline uint64_t key(const lru *l, uint32_t idx)
{
	return kvs_table_rec(l->t, idx)->stamp;
}

static inline void set(lru *l, lru_heap *h, uint32_t pos, uint32_t idx)
{
	h->idx[pos] = idx;
	kvs_table_rec(l->t, idx)->pol = pos;
}

static void sift_up(lru *l, lru_heap *h, uint32_t pos)
{
	uint32_t idx = h->idx[pos];
	uint64_t k = key(l, idx);

	while (pos > 0) {
		uint32_t up = (pos - 1) / 2;

		if (key(l, h->idx[up]) <= k)
			break;
		set(l, h, pos, h->idx[up]);
		pos = up;
	}
	set(l, h, pos, idx);
}

static void sift_down(lru *l, lru_heap *h, uint32_t pos)
{
	uint32_t idx = h->idx[pos];
	uint64_t k = key(l, idx);

	for (;;) {
		uint32_t c = 2 * pos + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && key(l, h->idx[c + 1]) < key(l, h->idx[c]))
			c++;
		if (key(l, h->idx[c]) >= k)
			break;
		set(l, h, pos, h->idx[c]);
		pos = c;
	}
	set(l, h, pos, idx);
}

static lru_heap *heap_of(lru *l, uint32_t cls)
{
	if (cls >= l->nheaps) {
		uint32_t n = cls + 1;
		lru_heap *nh = realloc(l->heaps, n * sizeof(*nh));

		if (!nh)
			return NULL;
		for (uint32_t i = l->nheaps; i < n; i++)
			nh[i] = (lru_heap){ 0 };
		l->heaps = nh;
		l->nheaps = n;
	}
	return &l->heaps[cls];
}

static int lru_create(kvs_table *t, void **state)
{
	lru *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->t = t;
	*state = l;
	return 0;
}

static void lru_destroy(void *state)
{
	lru *l = state;

	for (uint32_t i = 0; i < l->nheaps; i++)
		free(l->heaps[i].idx);
	free(l->heaps);
	free(l);
}

static void lru_add(void *state, uint32_t idx)
{
	lru *l = state;
	lru_heap *h = heap_of(l, kvs_table_rec(l->t, idx)->cls);

	if (!h)
		goto oom;
	if (h->n == h->cap) {
		uint32_t cap = h->cap ? h->cap * 2 : 256;
		uint32_t *ni = realloc(h->idx, cap * sizeof(uint32_t));

		if (!ni)
			goto oom;
		h->idx = ni;
		h->cap = cap;
	}
	h->n++;
	set(l, h, h->n - 1, idx);
	sift_up(l, h, h->n - 1);
	return;
oom:
	/* Out of memory: the record simply stays unevictable; it is still
	 * correct, only less of the cache can be reclaimed. */
	kvs_table_rec(l->t, idx)->pol = NOT_IN_HEAP;
}

static void lru_del(void *state, uint32_t idx)
{
	lru *l = state;
	kvs_rec *r = kvs_table_rec(l->t, idx);
	lru_heap *h;
	uint32_t pos = r->pol, last;

	if (pos == NOT_IN_HEAP || r->cls >= l->nheaps)
		return;
	h = &l->heaps[r->cls];
	r->pol = NOT_IN_HEAP;
	last = h->idx[--h->n];
	if (pos == h->n)
		return;
	set(l, h, pos, last);
	sift_up(l, h, pos);
	sift_down(l, h, kvs_table_rec(l->t, last)->pol);
}

static void lru_touch(void *state, uint32_t idx)
{
	lru *l = state;
	kvs_rec *r = kvs_table_rec(l->t, idx);

	r->stamp = ++l->clock;
	/* A pinned or non-leaf record is not in a heap; only reorder members.
	 * Membership is tracked by pol, which add/del keep exact. */
	if (r->pol != NOT_IN_HEAP && r->cls < l->nheaps &&
	    r->pol < l->heaps[r->cls].n && l->heaps[r->cls].idx[r->pol] == idx)
		sift_down(l, &l->heaps[r->cls], r->pol);
}

static uint32_t lru_victim(void *state, uint32_t cls)
{
	lru *l = state;
	uint32_t best = KVS_NONE;

	if (cls != KVS_CLASS_ANY)
		return cls < l->nheaps && l->heaps[cls].n ? l->heaps[cls].idx[0]
							  : KVS_NONE;
	for (uint32_t c = 0; c < l->nheaps; c++) {
		uint32_t top;

		if (!l->heaps[c].n)
			continue;
		top = l->heaps[c].idx[0];
		if (best == KVS_NONE || key(l, top) < key(l, best))
			best = top;
	}
	return best;
}

const kvs_policy_ops kvs_policy_leaf_lru = {
	.name = "leaf-lru",
	.leaf_only = 1,
	.create = lru_create,
	.destroy = lru_destroy,
	.add = lru_add,
	.del = lru_del,
	.touch = lru_touch,
	.victim = lru_victim,
};

const kvs_policy_ops kvs_policy_lru = {
	.name = "lru",
	.leaf_only = 0,
	.create = lru_create,
	.destroy = lru_destroy,
	.add = lru_add,
	.del = lru_del,
	.touch = lru_touch,
	.victim = lru_victim,
};
