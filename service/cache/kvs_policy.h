/*
 * kvs_policy.h - the eviction policy interface.
 *
 * The cache decides which records are evictable (committed, unpinned, and a
 * leaf: no cached longer prefix) and tells the policy when a record enters or
 * leaves that set and when any record is accessed. The policy only orders the
 * evictable set and names a victim; it never frees anything itself. Victims
 * can be asked for within one slot-allocator class (so that an eviction frees
 * a slot of the size that is needed) or across all classes.
 *
 * Policies: "leaf-learn" (the default: leaves in two groups, blocks with no
 * evidence of reuse first, a ghost history that keeps use counts, and an
 * order among reused blocks that learns from which evictions it regretted,
 * see policy_learn.c), "leaf-2q" (leaves in two LRU groups, blocks never
 * reused evicted before blocks that were, see policy_2q.c), "leaf-lru"
 * (least recently used among leaves),
 * "lru" (plain least recently used over all unpinned blocks, leaves or not:
 * the textbook baseline that the trace reference numbers use). New ones
 * implement kvs_policy_ops in their own file and are listed in policy.c.
 *
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_POLICY_H
#define KVS_POLICY_H

#include <stdint.h>

#include "kvs_table.h"

#define KVS_CLASS_ANY UINT32_MAX

/* What a policy learned and how it sorts the set now, for the daemon's
 * policy.* stats (kvs_cache_stats_fill). Counts add up over policies;
 * window_ppm and bonus_milli are those of one policy (the caller's
 * choice: the one with the most members). */
typedef struct kvs_policy_stats {
	int64_t probation;      /* members with no evidence of reuse */
	int64_t protected_;     /* members with evidence */
	int64_t window_ppm;     /* probation window, ppm of the records */
	int64_t bonus_milli[8]; /* key bonus per use count, 1/1000 turnover */
	int64_t ghost_returns;  /* admissions the ghost remembered */
	int64_t window_grew;    /* ... that grew / shrank the window */
	int64_t window_shrank;
} kvs_policy_stats;

typedef struct kvs_policy_ops {
	const char *name;
	/* 1: only leaves are evictable (prefix closure holds). 0: any unpinned
	 * block is; an evicted block with children becomes a ghost record. */
	int leaf_only;
	int (*create)(kvs_table *t, void **state);
	void (*destroy)(void *state);
	void (*add)(void *state, uint32_t idx);
	void (*del)(void *state, uint32_t idx);
	void (*touch)(void *state, uint32_t idx);
	uint32_t (*victim)(void *state, uint32_t cls);
	/* Optional: 1 if the policy holds evidence that @idx is reused beyond
	 * its hits (leaf-learn: written again while its ghost remembered it).
	 * Without it, a block is reused when a lookup hit it. */
	int (*reused)(void *state, uint32_t idx);
	/* Optional: fill @st (zeroed by the caller) with what it learned. */
	void (*stats)(void *state, kvs_policy_stats *st);
} kvs_policy_ops;

typedef struct kvs_policy kvs_policy;

/*
 * kvs_policy_create - a policy by name over table @t.
 * Errors: -EINVAL (unknown name), -ENOMEM.
 * Ownership: *out until kvs_policy_destroy(); @t must outlive it.
 */
int kvs_policy_create(const char *name, kvs_table *t, kvs_policy **out);
void kvs_policy_destroy(kvs_policy *p);
const char *kvs_policy_name(const kvs_policy *p);
/* kvs_policy_leaf_only - the policy's leaf_only (see kvs_policy_ops). */
int kvs_policy_leaf_only(const kvs_policy *p);

/* Record @idx became evictable / stopped being evictable. */
void kvs_policy_add(kvs_policy *p, uint32_t idx);
void kvs_policy_del(kvs_policy *p, uint32_t idx);
/* Record @idx was accessed (looked up, committed); evictable or not. */
void kvs_policy_touch(kvs_policy *p, uint32_t idx);
/* The next victim among evictable records of class @cls (or KVS_CLASS_ANY),
 * or KVS_NONE. The record stays in the set until kvs_policy_del(). */
uint32_t kvs_policy_victim(kvs_policy *p, uint32_t cls);

/* kvs_policy_reused - 1 if record @idx (a member or not) has evidence of
 * reuse: a lookup hit it, or the policy knows more (kvs_policy_ops.reused).
 * The store tiers' admission rule (--ssd-admit hit) asks this through
 * cache_evict.c, so that what the policy judged seen once stays off SSD and
 * what it judged reused goes there. */
int kvs_policy_reused(const kvs_policy *p, uint32_t idx);

/* kvs_policy_stats_get - @p's kvs_policy_stats in *@st: all zeros for a
 * policy without the stats op (lru, leaf-lru: one order, nothing learned). */
void kvs_policy_stats_get(const kvs_policy *p, kvs_policy_stats *st);

/* kvs_policy_name_at - the name of policy @i (from 0), NULL past the last. */
const char *kvs_policy_name_at(unsigned i);
/* kvs_policy_known - 1 if @name names a policy. */
int kvs_policy_known(const char *name);

#endif /* KVS_POLICY_H */
