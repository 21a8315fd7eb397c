/* cache_check.c - kvs_cache_check(): every invariant the cache keeps,
 * recounted from scratch (tests only: O(records)). */
#include <errno.h>
#include <stdlib.h>

#include "cache_int.h"
#include "kvs_log.h"

#define CHECK(cond)                                                        \
	do {                                                               \
		if (!(cond)) {                                             \
			kvs_err("cache invariant failed: %s (record %u)", \
				#cond, idx);                               \
			rc = KVS_E_INTERNAL;                               \
			goto out;                                          \
		}                                                          \
	} while (0)

/* Whether a store tier's read fills @idx's host slot now. */
static int reading(const kvs_cache *c, uint32_t idx)
{
	for (uint32_t i = 0; i < c->nstores; i++)
		if (c->stores[i]->ops->store->reading &&
		    c->stores[i]->ops->store->reading(c->stores[i], idx))
			return 1;
	return 0;
}

/* Host slots that store tiers' writes hold (freed when they complete). */
static uint64_t held(const kvs_cache *c)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < c->nstores; i++)
		if (c->stores[i]->ops->store->host_held)
			n += c->stores[i]->ops->store->host_held(c->stores[i]);
	return n;
}

/* Whether any tier other than host is on. */
static int tiers_on(const kvs_cache *c)
{
	for (uint8_t t = 0; t < KVS_TIER_MAX; t++)
		if (c->tier[t])
			return 1;
	return 0;
}

/* The last record index in use + 1. */
static uint32_t span(const kvs_cache *c)
{
	uint32_t count = kvs_table_count(c->table), hi = 0;

	for (uint32_t found = 0; found < count; hi++)
		found += cache_rec(c, hi)->state != KVS_REC_FREE;
	return hi;
}

/* One record's own invariants; counts what is summed over all. */
static int check_rec(kvs_cache *c, uint32_t idx, uint32_t hi, uint32_t *children,
		     uint32_t **tkids, uint64_t *slotted, uint64_t *in_tier)
{
	kvs_rec *r = cache_rec(c, idx);
	int rc = 0;

	CHECK(kvs_table_find(c->table, r->hash) == idx);
	CHECK(r->ns >= 1 && r->ns <= c->nns && !c->nss[r->ns - 1].gone);
	CHECK(c->nss[r->ns - 1].dom < c->ndoms);
	CHECK(r->state != KVS_REC_WRITING || r->refs >= 1);
	/* A leaf-only policy makes ghosts only when a tier other than host
	 * loses a parent (corrupt, recycled, a failed demotion). */
	CHECK(r->state != KVS_REC_GHOST ||
	      (r->refs == 0 && r->children > 0 &&
	       (!c->leaf_only || tiers_on(c))));
	CHECK(r->state != KVS_REC_GHOST || r->tier == KVS_TIER_NONE);
	CHECK(r->tier < KVS_TIER_MAX);
	CHECK(cache_evictable(c, idx, r) == (r->pol != KVS_NONE));
	slotted[KVS_TIER_HOST] += r->tier == KVS_TIER_HOST || reading(c, idx);
	if (r->tier != KVS_TIER_HOST && c->tpol[r->tier])
		slotted[r->tier]++;
	in_tier[r->tier]++;
	if (r->parent != KVS_NONE) {
		CHECK(r->parent < hi);
		CHECK(cache_rec(c, r->parent)->state != KVS_REC_FREE);
		CHECK(cache_rec(c, r->parent)->ns == r->ns);
		children[r->parent]++;
		if (tkids[r->tier])
			tkids[r->tier][r->parent]++;
	}
out:
	return rc;
}

/* Each namespace's record count (what reclaim goes by) is its records. */
static int check_ns_recs(const kvs_cache *c, uint32_t hi)
{
	uint64_t *n = calloc((size_t)c->nns + 1, sizeof(*n));
	int rc = n ? 0 : -ENOMEM;

	for (uint32_t idx = 0; idx < hi && n; idx++)
		if (cache_rec(c, idx)->state != KVS_REC_FREE)
			n[cache_rec(c, idx)->ns]++;
	for (uint32_t i = 0; i < c->nns && rc == 0; i++) {
		if (c->nss[i].recs != n[i + 1] || (c->nss[i].gone && n[i + 1])) {
			kvs_err("cache invariant failed: namespace %u has %llu "
				"records, counted %llu", i + 1,
				(unsigned long long)n[i + 1],
				(unsigned long long)c->nss[i].recs);
			rc = KVS_E_INTERNAL;
		}
	}
	free(n);
	return rc;
}

int kvs_cache_check(kvs_cache *c)
{
	uint32_t hi = span(c), idx = 0, ghosts = 0;
	uint64_t pins = 0, slotted[KVS_TIER_MAX] = { 0 }, in_tier[KVS_TIER_MAX] = { 0 };
	uint32_t *children = calloc((size_t)hi + 1, sizeof(uint32_t));
	uint32_t *tkids[KVS_TIER_MAX] = { 0 };
	kvs_slab_stats ss;
	uint64_t bytes, resident;
	int rc = children ? 0 : -ENOMEM;

	for (uint8_t t = 0; t < KVS_TIER_MAX && rc == 0; t++)
		if (cache_kids_on(c, t) &&
		    !(tkids[t] = calloc((size_t)hi + 1, sizeof(uint32_t))))
			rc = -ENOMEM;
	for (uint32_t s = 0; s < kvs_pool_cap(&c->leases); s++)
		if (kvs_pool_live_at(&c->leases, s))
			pins += cache_lease(c, s)->n;
	if (rc == 0 && pins != c->pins) {
		kvs_err("cache invariant failed: pins %llu/%llu",
			(unsigned long long)pins, (unsigned long long)c->pins);
		rc = KVS_E_INTERNAL;
	}
	/* Count every record's children from the parent links, compare. */
	for (idx = 0; idx < hi && rc == 0; idx++) {
		if (cache_rec(c, idx)->state == KVS_REC_FREE)
			continue;
		ghosts += cache_rec(c, idx)->state == KVS_REC_GHOST;
		rc = check_rec(c, idx, hi, children, tkids, slotted, in_tier);
	}
	for (idx = 0; idx < hi && rc == 0; idx++) {
		if (cache_rec(c, idx)->state == KVS_REC_FREE)
			continue;
		CHECK(cache_rec(c, idx)->children == children[idx]);
		for (uint8_t t = 0; t < KVS_TIER_MAX; t++)
			CHECK(!tkids[t] || cache_kids(c, t, idx) == tkids[t][idx]);
	}
	if (rc < 0 || (rc = check_ns_recs(c, hi)) < 0 ||
	    (rc = cache_pinslab_check(c)) < 0)
		goto out;
	idx = 0;
	cache_host_stats(c, &ss, &bytes, &resident);
	CHECK(ghosts == c->ghosts);
	CHECK(ss.slots_used == slotted[KVS_TIER_HOST] + held(c));
	for (uint8_t t = 1; t < KVS_TIER_MAX; t++) {
		CHECK(c->in_tier[t] == in_tier[t]);
		CHECK(!c->tpol[t] || c->tier[t]->ops->slot->used(c->tier[t]) == slotted[t]);
	}
out:
	free(children);
	for (uint8_t t = 0; t < KVS_TIER_MAX; t++)
		free(tkids[t]);
	return rc;
}
