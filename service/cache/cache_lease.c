/* cache_lease.c - leases: the pins of a lookup, the slots of a reserve
 * (see kvs_cache.h for the rules, cache_int.h for the layout). */
#include <errno.h>
#include <stdlib.h>

#include "cache_int.h"
#include "kvs_fastidx.h"

uint64_t cache_lease_id(const kvs_cache *c, uint32_t slot)
{
	return kvs_pool_id(&c->leases, slot);
}

int cache_over_pin_limit(kvs_cache *c, kvs_owner *o, uint64_t more)
{
	if (!c->max_pinned || o->pins + more <= c->max_pinned)
		return 0;
	c->stats->errors_limit++;
	return 1;
}

int cache_lease_new(kvs_cache *c, kvs_owner *o, uint8_t kind, uint32_t *out)
{
	lease *l;
	uint32_t s;

	if (o->nleases >= c->max_leases) {
		c->stats->errors_limit++;
		return KVS_E_LIMIT;
	}
	if (kvs_pool_alloc(&c->leases, &s) < 0)
		return -ENOMEM;
	l = cache_lease(c, s);
	l->kind = kind;
	l->owner = o;
	l->n = 0;
	l->prev = KVS_NONE;
	l->next = o->leases;
	if (o->leases != KVS_NONE)
		cache_lease(c, o->leases)->prev = s;
	o->leases = s;
	o->nleases++;
	c->active_leases++;
	*out = s;
	return 0;
}

int cache_lease_room(lease *l, uint32_t more)
{
	if (l->n + more > l->cap) {
		uint32_t cap = l->cap ? l->cap : 16;
		uint32_t *nr;

		while (cap < l->n + more)
			cap *= 2;
		nr = realloc(l->recs, (size_t)cap * sizeof(uint32_t));
		if (!nr)
			return -ENOMEM;
		l->recs = nr;
		nr = realloc(l->held, (size_t)cap * sizeof(uint32_t));
		if (!nr)
			return -ENOMEM; /* recs' room is kept: harmless */
		l->held = nr;
		l->cap = cap;
	}
	return 0;
}

void cache_lease_free(kvs_cache *c, uint32_t s)
{
	lease *l = cache_lease(c, s);
	kvs_owner *o = l->owner;

	if (l->prev != KVS_NONE)
		cache_lease(c, l->prev)->next = l->next;
	else
		o->leases = l->next;
	if (l->next != KVS_NONE)
		cache_lease(c, l->next)->prev = l->prev;
	o->nleases--;
	c->active_leases--;
	l->kind = LEASE_FREE;
	l->owner = NULL;
	l->n = 0;
	/* A big lease's array is not kept around for the next small one. */
	if (l->cap > 1024) {
		free(l->recs);
		free(l->held);
		l->recs = NULL;
		l->held = NULL;
		l->cap = 0;
	}
	kvs_pool_free(&c->leases, s); /* its id is stale from now on */
}

int cache_lease_get(kvs_cache *c, kvs_owner *o, uint64_t id, uint32_t *out)
{
	uint32_t s;

	if (!o->ns) {
		/* No namespace, no leases: say so rather than "no such lease". */
		c->stats->errors_notattached++;
		return KVS_E_NOTATTACHED;
	}
	if (kvs_pool_find(&c->leases, id, &s) < 0) {
		c->stats->errors_lease++;
		return KVS_E_NOLEASE;
	}
	if (cache_lease(c, s)->owner != o) {
		c->stats->errors_lease++;
		return KVS_E_NOTOWNER;
	}
	*out = s;
	return 0;
}

void cache_unpin(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = cache_rec(c, idx);

	r->refs--;
	/* Its bytes were lost in every tier while it was pinned (a store
	 * write that failed): it goes now that nobody holds it. */
	if (r->refs == 0 && r->state == KVS_REC_READY &&
	    r->tier == KVS_TIER_NONE && !cache_store_of(c, idx)) {
		cache_forget(c, idx);
		return;
	}
	cache_sync_evictable(c, idx);
}

void cache_lease_unpin(kvs_cache *c, lease *l, uint32_t i)
{
	cache_pinslab_drop(c, l->owner, l->recs[i], l->held[i]);
	cache_unpin(c, l->recs[i]);
}

uint32_t cache_end_read(kvs_cache *c, uint32_t s)
{
	lease *l = cache_lease(c, s);
	uint32_t n = l->n;

	for (uint32_t i = 0; i < n; i++)
		cache_lease_unpin(c, l, i);
	c->pins -= n;
	l->owner->pins -= n;
	cache_lease_free(c, s);
	return n;
}

/* Commit record @idx of a write lease: visible to lookups from now on. */
static void commit_one(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = cache_rec(c, idx);
	ns *sp = cache_ns(c, r->ns);
	kvs_tier_blk b;

	r->state = KVS_REC_READY;
	r->refs--;
	sp->info.writing--;
	sp->info.blocks++;
	cache_touch_atime(c, idx);
	kvs_policy_touch(cache_policy_of(c, idx), idx);
	cache_sync_evictable(c, idx);
	r = cache_rec(c, idx);
	if (r->tier == KVS_TIER_HOST && c->nstores > 0) {
		cache_blk(c, idx, &b);
		for (uint32_t i = 0; i < c->nstores; i++)
			if (c->stores[i]->ops->store->committed)
				c->stores[i]->ops->store->committed(c->stores[i], &b);
	}
	cache_persist_commit(c, idx);
	cache_note(c, cache_rec(c, idx)->tier, KVS_TIER_NOTE_COMMITTED, 1);
	cache_tell(c, KVS_CACHE_EVENT_STORED, idx);
	r = cache_rec(c, idx);
	kvs_fast_publish(c->fast, cache_ns_dom(c, r->ns)->arena_id, idx, r);
}

uint32_t cache_end_write(kvs_cache *c, uint32_t s, int commit)
{
	lease *l = cache_lease(c, s);
	uint32_t n = l->n;

	if (commit) {
		for (uint32_t i = 0; i < n; i++) {
			cache_pinslab_drop(c, l->owner, l->recs[i], l->held[i]);
			commit_one(c, l->recs[i]);
		}
		c->stats->blocks_committed += n;
	} else {
		/* Children were reserved after their parents: free in reverse. */
		for (uint32_t i = n; i-- > 0;) {
			uint32_t idx = l->recs[i];

			cache_pinslab_drop(c, l->owner, idx, l->held[i]);
			cache_ns(c, cache_rec(c, idx)->ns)->info.writing--;
			cache_free_slot(c, idx);
			/* A ghost being rewritten: its children outside
			 * this lease still need it. */
			cache_forget(c, idx);
		}
		c->stats->blocks_aborted += n;
	}
	c->pins -= n;
	l->owner->pins -= n;
	cache_lease_free(c, s);
	return n;
}
