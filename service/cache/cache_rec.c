/* cache_rec.c - the record-state core, under every other file of the cache:
 * room for a new record, its last access, whether it is evictable and in
 * which policy, its children by tier, which store tier holds it, and the
 * hooks that hear of it (events, residency, the fast path). It calls no
 * other cache_*.c file (layering.calls); see cache_int.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache_int.h"

/* ---- room for a record -------------------------------------------------- */

int cache_grow(void **arr, uint32_t *cap, size_t elem, uint32_t n)
{
	uint8_t *na;

	if (n <= *cap)
		return 0;
	na = realloc(*arr, (size_t)n * elem);
	if (!na)
		return -ENOMEM;
	memset(na + (size_t)*cap * elem, 0, (size_t)(n - *cap) * elem);
	*arr = na;
	*cap = n;
	return 0;
}

int cache_rec_room(kvs_cache *c, uint32_t idx)
{
	uint32_t n = kvs_table_capacity(c->table);
	int rc = cache_grow((void **)&c->chain, &c->nchain, sizeof(*c->chain), n);

	if (rc < 0)
		return rc;
	cache_chain_link(c, idx, KVS_NONE);

	for (uint8_t t = 0; t < KVS_TIER_MAX && rc == 0; t++) {
		if (!cache_kids_on(c, t))
			continue;
		rc = cache_grow((void **)&c->kids[t], &c->nkids[t],
				sizeof(uint32_t), n);
		if (rc == 0)
			c->kids[t][idx] = 0;
	}
	for (uint32_t i = 0; i < c->nstores && rc == 0; i++)
		rc = c->stores[i]->ops->store->rec_new(c->stores[i], idx);
	return rc;
}

/* ---- last access, and the hooks that hear of records -------------------- */

uint32_t cache_clock_s(const kvs_cache *c)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint32_t)(now.tv_sec - c->born.tv_sec);
}

/* Best effort: without memory for the array an age reads as 0. */
void cache_touch_atime(kvs_cache *c, uint32_t idx)
{
	if (idx >= c->natime &&
	    cache_grow((void **)&c->atime, &c->natime, sizeof(*c->atime),
		       kvs_table_capacity(c->table)) < 0)
		return;
	c->atime[idx] = cache_clock_s(c);
}

void cache_tell(kvs_cache *c, kvs_cache_event kind, uint32_t idx)
{
	if (c->on_event)
		c->on_event(c->event_arg, kind, cache_rec(c, idx));
	cache_resid(c, idx, 0);
}

void cache_resid(kvs_cache *c, uint32_t idx, int gone)
{
	if (c->on_resid)
		c->on_resid(c->resid_arg, idx, cache_rec(c, idx), gone);
}

void kvs_cache_set_resid_hook(kvs_cache *c, kvs_cache_resid_fn fn, void *arg)
{
	c->on_resid = fn;
	c->resid_arg = arg;
}

void kvs_cache_set_event_hook(kvs_cache *c, kvs_cache_event_fn fn, void *arg)
{
	c->on_event = fn;
	c->event_arg = arg;
}

void kvs_cache_set_fast(kvs_cache *c, const kvs_cache_fast_ops *ops, void *f)
{
	uint32_t cap = kvs_table_capacity(c->table);

	c->fast_ops = ops;
	c->fast = f;
	/* Blocks already in the table (adopted from the daemon before,
	 * kvs_persist.h) go into the index too: an index that claims every
	 * host block must have them. Once, at start. */
	for (uint32_t i = 0; ops && i < cap; i++) {
		const kvs_rec *r = cache_rec(c, i);

		if (r->state == KVS_REC_READY && r->tier == KVS_TIER_HOST)
			cache_fast_publish(c, i, r);
	}
}

/* ---- records as the operator and the fast path read them ---------------- */

uint32_t kvs_cache_rec_span(const kvs_cache *c)
{
	uint32_t count = kvs_table_count(c->table), hi = 0;

	for (uint32_t found = 0; found < count; hi++)
		found += cache_rec(c, hi)->state != KVS_REC_FREE;
	return hi;
}

uint32_t kvs_cache_rec_end(const kvs_cache *c)
{
	return kvs_table_capacity(c->table);
}

const kvs_rec *kvs_cache_rec_at(const kvs_cache *c, uint32_t idx)
{
	return cache_rec(c, idx);
}

kvs_hash kvs_cache_rec_hash(const kvs_rec *r)
{
	return cache_ns_key(r->ns, r->hash); /* the mix is its own inverse */
}

/* ---- tiers of a record, and the leaf rule ------------------------------- */

void cache_note(kvs_cache *c, uint8_t t, int what, uint64_t n)
{
	if (t < KVS_TIER_MAX && c->tier[t] && c->tier[t]->ops->note)
		c->tier[t]->ops->note(c->tier[t], what, n);
}

kvs_tier_mod *cache_store_of(const kvs_cache *c, uint32_t idx)
{
	for (uint32_t i = 0; i < c->nstores; i++)
		if (c->stores[i]->ops->store->has(c->stores[i], idx))
			return c->stores[i];
	return NULL;
}

/* A record is evictable when committed, unpinned, in a tier with a policy
 * (host, or a slot tier) and (for a leaf-only policy) a leaf; the policy
 * holds exactly the evictable records. Call after any of those changes.
 * "Leaf" counts the children in the record's own tier where that count is
 * kept (a slot tier; the host tier with a store tier below it): a parent
 * whose children moved down may move down too, and the prefix stays whole
 * across the tiers. Elsewhere it counts every child. */
int cache_evictable(const kvs_cache *c, uint32_t idx, const kvs_rec *r)
{
	uint32_t kids;

	if (r->state != KVS_REC_READY || r->refs != 0)
		return 0;
	if (r->tier != KVS_TIER_HOST && !cache_slot_tier(c, r->tier))
		return 0;
	kids = cache_kids_on(c, r->tier) ? cache_kids(c, r->tier, idx)
					 : r->children;
	return !c->leaf_only || kids == 0;
}

/* The policy that orders record @idx: its slot tier's, else its domain's. */
kvs_policy *cache_policy_of(const kvs_cache *c, uint32_t idx)
{
	const kvs_rec *r = cache_rec(c, idx);

	return cache_slot_tier(c, r->tier) ? c->tpol[r->tier]
				     : cache_ns_dom(c, r->ns)->policy;
}

void cache_sync_evictable(kvs_cache *c, uint32_t idx)
{
	int want = cache_evictable(c, idx, cache_rec(c, idx));
	kvs_rec *r = cache_rec(c, idx);

	if (want && r->pol == KVS_NONE)
		kvs_policy_add(cache_policy_of(c, idx), idx);
	else if (!want && r->pol != KVS_NONE)
		kvs_policy_del(cache_policy_of(c, idx), idx);
}

uint32_t cache_kids(const kvs_cache *c, uint8_t t, uint32_t idx)
{
	return idx < c->nkids[t] ? c->kids[t][idx] : 0;
}

/* Every record index has room in the kept counts (cache_rec_room at
 * insert), so this never allocates. */
void cache_kids_add(kvs_cache *c, uint8_t t, uint32_t idx, int delta)
{
	if (cache_kids_on(c, t) && idx < c->nkids[t])
		c->kids[t][idx] += (uint32_t)delta;
}
