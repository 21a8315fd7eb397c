/* cache_lease.c - leases: the pins of a lookup, the slots of a reserve
 * (one block reserved into a write lease), commit and the end of a lease
 * (see kvs_cache.h for the rules, cache_int.h for the layout). */
#include <errno.h>
#include <stdlib.h>

#include "cache_int.h"

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
	cache_fast_publish(c, idx, r);
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

uint64_t cache_lookup_finish(kvs_cache *c, uint32_t s, uint32_t hits,
			     kvs_block *out)
{
	lease *l = cache_lease(c, s);

	/* Blocks past the first that could not be read back are not hits. */
	for (uint32_t i = hits; i < l->n; i++)
		cache_lease_unpin(c, l, i);
	c->pins -= l->n - hits;
	l->owner->pins -= l->n - hits;
	cache_count_lookup(c, l->owner->ns, hits, l->n - hits);
	l->n = hits;
	if (hits == 0) {
		cache_lease_free(c, s);
		return 0;
	}
	for (uint32_t i = 0; i < hits; i++)
		out[i] = cache_located(cache_rec(c, l->recs[i]), KVS_BLOCK_HIT);
	return cache_lease_id(c, s);
}

/* A slot for a block of @o (in the slot tier it maps first, else in host)
 * and, unless it has a ghost record (@ghost), a new record for key @h.
 * *in_above: the slot is in o->above. */
static int reserve_slot(kvs_cache *c, kvs_owner *o, kvs_hash h, uint32_t ghost,
			uint8_t above, uint64_t *off, uint32_t *idx, int *in_above,
			uint32_t *held)
{
	uint32_t d = cache_ns(c, o->ns)->dom;
	int rc;

	/* When the slot tier has no room (everything there pinned): host. */
	*in_above = 0;
	if (above) {
		*in_above = cache_make_room(c, o->ns, above, off) == 0;
		if (!*in_above)
			cache_note(c, above, KVS_TIER_NOTE_RESERVE_FALLBACK, 1);
	}
	*held = KVS_NONE;
	rc = *in_above ? 0 : cache_make_room(c, o->ns, KVS_TIER_HOST, off);
	if (rc < 0)
		return rc;
	/* Its host slab counts for the uid (cache_pinslab.c). */
	if (!*in_above && (rc = cache_pinslab_charge(c, o, d, *off, held)) < 0) {
		kvs_slab_free(c->doms[d].slab, *off);
		return rc;
	}
	if (ghost != KVS_NONE)
		return 0;
	rc = kvs_table_insert(c->table, h, idx);
	if (rc == 0 && (rc = cache_rec_room(c, *idx)) < 0)
		kvs_table_remove(c->table, *idx);
	if (rc < 0)
		cache_pinslab_uncharge(c, o, d, *held);
	if (rc < 0 && *in_above)
		c->tier[above]->ops->slot->free(c->tier[above], *off);
	else if (rc < 0)
		kvs_slab_free(c->doms[d].slab, *off);
	return rc;
}

/* Reserve one missing block after @prev: a slot, a record, a lease entry.
 * @ghost is the block's ghost record when it has one (it is rewritten in
 * place, keeping its children), else KVS_NONE. */
int cache_reserve_one(kvs_cache *c, kvs_owner *o, uint32_t s, kvs_hash h,
		      uint32_t prev, uint32_t ghost, int host_only, uint32_t *idx_out)
{
	ns *sp = cache_ns(c, o->ns);
	lease *l;
	/* The record that holds the new block's place in the tree while a slot
	 * is found: its parent gains a child now, so that the eviction making
	 * room can neither take the parent as a leaf nor drop a ghost. With
	 * a store tier that would keep the parent, the child counts as in host
	 * RAM only once it has a slot: the end of the chain so far may move
	 * down to that tier to make that room (it stays in the tree), so that
	 * a chain published window by window passes through a host tier
	 * smaller than itself (the pins of the open window alone must fit). */
	uint32_t hold = ghost != KVS_NONE ? ghost : prev;
	int lower = cache_kids_on(c, KVS_TIER_HOST);
	int hold_in_ram = hold != KVS_NONE && lower &&
			  (hold != prev || !cache_store_keeps(c, hold));
	uint8_t above = host_only ? 0 : o->above;
	uint64_t off = 0;
	uint32_t idx = ghost, cls, held;
	int in_above = 0;
	kvs_rec *r;
	int rc;

	if ((rc = cache_lease_room(cache_lease(c, s), 1)) < 0)
		return rc;
	if (hold != KVS_NONE) {
		cache_rec(c, hold)->children++;
		if (hold_in_ram)
			cache_kids_add(c, KVS_TIER_HOST, hold, 1);
		cache_sync_evictable(c, hold);
	}
	rc = reserve_slot(c, o, h, ghost, above, &off, &idx, &in_above, &held);
	if (rc < 0) {
		cache_child_gone(c, hold, hold_in_ram ? KVS_TIER_HOST : 0);
		return rc;
	}
	r = cache_rec(c, idx);
	if (ghost != KVS_NONE) {
		r->children--; /* the hold; it keeps its real children */
		if (hold_in_ram)
			cache_kids_add(c, KVS_TIER_HOST, ghost, -1);
		c->ghosts--;
		r->state = KVS_REC_WRITING;
		cache_set_tier(c, idx, KVS_TIER_HOST);
		r = cache_rec(c, idx);
	} else {
		r->parent = prev; /* prev keeps the child counted above */
		cache_chain_link(c, idx, prev);
		r->tier = KVS_TIER_HOST; /* counted in prev's host children */
		c->in_tier[KVS_TIER_HOST]++;
		sp->recs++;
		if (lower && prev != KVS_NONE && !hold_in_ram) {
			/* Only now (prev may have moved down by now). */
			cache_kids_add(c, KVS_TIER_HOST, prev, 1);
			cache_sync_evictable(c, prev);
		}
	}
	r->offset = off;
	r->gen = ++c->gen;
	r->refs = 1;
	r->ns = o->ns;
	r->cls = (uint16_t)sp->cls;
	if (in_above) {
		cache_set_tier(c, idx, above);
		cache_ns_tier_class(c, o->ns, above, &cls); /* made above */
		r = cache_rec(c, idx);
		r->cls = (uint16_t)cls;
		cache_note(c, above, KVS_TIER_NOTE_RESERVED, 1);
	}
	if (in_above)
		cache_persist_free(c, idx);
	else
		cache_persist_writing(c, idx);
	l = cache_lease(c, s);
	l->held[l->n] = held;
	l->recs[l->n++] = idx;
	c->pins++;
	o->pins++;
	sp->info.writing++;
	*idx_out = idx;
	return 0;
}
