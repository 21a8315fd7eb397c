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
 * for one class and O(classes) across all. The heaps are the two-segment
 * policies' (policy_seg.c) with one segment used: the whole stamp is the key.
 */
#include <errno.h>
#include <stdlib.h>

#include "kvs_policy.h"
#include "policy_seg.h"

typedef struct lru {
	seg_heaps hs;
	uint64_t clock;
} lru;

static int lru_create(kvs_table *t, void **state)
{
	lru *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->hs = (seg_heaps){ .t = t, .key_mask = UINT64_MAX, .seg_bit = 0 };
	*state = l;
	return 0;
}

static void lru_destroy(void *state)
{
	lru *l = state;

	seg_heaps_free(&l->hs);
	free(l);
}

static void lru_add(void *state, uint32_t idx)
{
	lru *l = state;

	seg_heaps_add(&l->hs, idx, 0);
}

static void lru_del(void *state, uint32_t idx)
{
	lru *l = state;

	seg_heaps_del(&l->hs, idx);
}

static void lru_touch(void *state, uint32_t idx)
{
	lru *l = state;
	kvs_rec *r = kvs_table_rec(l->hs.t, idx);

	r->stamp = ++l->clock;
	seg_heaps_touched(&l->hs, idx, 0);
}

static uint32_t lru_victim(void *state, uint32_t cls)
{
	lru *l = state;

	return seg_heap_least(&l->hs, cls, 0);
}

/* The two differ only in which records the cache puts in the set. */
#define LRU_OPS(name_, leaf_only_)                                            \
	{                                                                     \
		.name = name_, .leaf_only = leaf_only_, .create = lru_create, \
		.destroy = lru_destroy, .add = lru_add, .del = lru_del,       \
		.touch = lru_touch, .victim = lru_victim,                     \
	}

const kvs_policy_ops kvs_policy_leaf_lru = LRU_OPS("leaf-lru", 1);
const kvs_policy_ops kvs_policy_lru = LRU_OPS("lru", 0);
