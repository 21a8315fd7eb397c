/* cache_tier.c - the cache's side of the tier interface (kvs_tier_ops.h):
 * adding and closing tiers, verify, owners that go away, and the
 * environment the tiers call. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "kvs_log.h"
#include "kvs_types.h" /* kvs_strerror */

/* ---- adding and closing ----------------------------------------------- */

/* Turn on kids[t] (see struct kvs_cache), sized for every record index,
 * and counted for the records already there (an adoption's,
 * kvs_persist.h): their parents' leaf rule follows. */
static int kids_on(kvs_cache *c, uint8_t t)
{
	uint32_t n = kvs_table_capacity(c->table);
	int rc, was = c->kids_on[t];

	c->kids_on[t] = 1;
	rc = cache_grow((void **)&c->kids[t], &c->nkids[t], sizeof(uint32_t), n);
	for (uint32_t i = 0; rc == 0 && !was && i < n; i++) {
		const kvs_rec *r = cache_rec(c, i);

		if (r->state != KVS_REC_FREE && r->tier == t &&
		    r->parent != KVS_NONE) {
			c->kids[t][r->parent]++;
			cache_sync_evictable(c, r->parent);
		}
	}
	return rc;
}

/* Store tier @t learns of the records and namespaces made before it was
 * added (an adoption's), as if it had been there. */
static int store_catch_up(kvs_cache *c, kvs_tier_mod *t)
{
	uint32_t n = kvs_table_capacity(c->table);
	int rc = 0;

	for (uint32_t i = 0; rc == 0 && i < n; i++)
		if (cache_rec(c, i)->state != KVS_REC_FREE)
			rc = t->ops->store->rec_new(t, i);
	if (rc == 0)
		cache_ns_tell_store(c, t);
	return rc;
}

/* The first member of @o that kvs_tier_ops.h requires and @o lacks (a pair
 * named together: both or neither), or NULL when it has every one. */
static const char *ops_missing(const kvs_tier_ops *o)
{
	const kvs_tier_slot_ops *sl = o->slot;
	const kvs_tier_store_ops *st = o->store;
	const struct {
		const char *name;
		int ok;
	} need[] = {
		{ "name", o->name != NULL },
		{ "close", o->close != NULL },
		{ "stats", o->stats != NULL },
		{ "stats_section (its tier's, <= KVS_STATS_ZERO_MAX values)",
		  o->stats_section && o->stats_section->tier == o->tier &&
		  o->stats_section->n <= KVS_STATS_ZERO_MAX },
		{ "poll (event_fd needs it)", !o->event_fd || o->poll },
		{ "slot or store (exactly one)", !sl != !st },
		{ "slot->class_of", !sl || sl->class_of },
		{ "slot->class_put", !sl || sl->class_put },
		{ "slot->alloc", !sl || sl->alloc },
		{ "slot->free", !sl || sl->free },
		{ "slot->used", !sl || sl->used },
		{ "slot->blocks", !sl || sl->blocks },
		{ "slot->copy_to_host", !sl || sl->copy_to_host },
		{ "slot->map", !sl || sl->map },
		{ "store->rec_new", !st || st->rec_new },
		{ "store->has", !st || st->has },
		{ "store->keeps", !st || st->keeps },
		{ "store->demote", !st || st->demote },
		{ "store->read", !st || st->read },
		{ "store->drop", !st || st->drop },
		{ "store->probe + fetch", !st || !st->probe == !st->fetch },
		{ "store->host_held + wait_held",
		  !st || !st->host_held == !st->wait_held },
		{ "store->verify + verify_cancel",
		  !st || !st->verify == !st->verify_cancel },
	};

	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if (!need[i].ok)
			return need[i].name;
	return NULL;
}

int kvs_cache_tier_add(kvs_cache *c, kvs_tier_mod *t)
{
	const kvs_tier_ops *ops = t->ops;
	const char *missing = ops_missing(ops);
	int rc = 0;

	if (!missing && !t->counters)
		missing = "counters (its section's values, in kvs_tier_mod)";

	if (missing) {
		/* A tier written against the table, not a setting: a bug. */
		kvs_err("%s tier: its operations do not have what kvs_tier_ops.h "
			"requires: %s", ops->name ? ops->name : "a", missing);
		return -EINVAL;
	}
	if (ops->tier == KVS_TIER_NONE || ops->tier >= KVS_TIER_MAX ||
	    ops->tier == KVS_TIER_HOST)
		return -EINVAL;
	if (c->tier[ops->tier])
		return -EEXIST;
	if (c->by_uid) {
		/* One tier for every domain would mix tenants. */
		kvs_err("%s tier: not supported yet with --tenant-arenas uid",
			ops->name);
		return -ENODEV;
	}
	t->cache = c;
	c->tier[ops->tier] = t;
	if (ops->slot) {
		rc = kvs_policy_create(c->policy_name, c->table, &c->tpol[ops->tier]);
		if (rc == 0)
			rc = kids_on(c, ops->tier);
	} else {
		c->stores[c->nstores++] = t;
		rc = kids_on(c, KVS_TIER_HOST);
		if (rc == 0)
			rc = store_catch_up(c, t);
		if (rc == 0 && ops->store->restore)
			rc = ops->store->restore(t);
	}
	if (rc < 0) {
		/* Restore may have made namespaces and records: those stay
		 * (in no tier they are ghosts-to-be); the tier is the
		 * caller's again. */
		if (ops->store)
			c->nstores--;
		kvs_policy_destroy(c->tpol[ops->tier]);
		c->tpol[ops->tier] = NULL;
		c->tier[ops->tier] = NULL;
	}
	return rc;
}

int kvs_cache_has_stores(const kvs_cache *c)
{
	return c->nstores > 0;
}

kvs_tier_mod *kvs_cache_tier(const kvs_cache *c, uint8_t tier)
{
	return tier < KVS_TIER_MAX ? c->tier[tier] : NULL;
}

int kvs_cache_tier_map(const kvs_cache *c, uint8_t tier, int *fd,
		       uint64_t *bytes, uint32_t *kind, uint32_t *device)
{
	kvs_tier_mod *t = kvs_cache_tier(c, tier);

	if (!t || !t->ops->slot)
		return -ENODEV;
	t->ops->slot->map(t, fd, bytes, kind, device);
	return 0;
}

void kvs_cache_tier_poll(kvs_tier_mod *t)
{
	if (t->ops->poll)
		t->ops->poll(t);
}

/* Stores first (their I/O lands in host slots), before the arenas go. */
void cache_tiers_close(kvs_cache *c)
{
	for (uint32_t i = 0; i < c->nstores; i++) {
		c->tier[c->stores[i]->ops->tier] = NULL;
		c->stores[i]->ops->close(c->stores[i]);
	}
	c->nstores = 0;
	for (uint8_t t = 0; t < KVS_TIER_MAX; t++) {
		if (c->tier[t] && c->tier[t]->ops->slot)
			c->tier[t]->ops->close(c->tier[t]);
		c->tier[t] = NULL;
		kvs_policy_destroy(c->tpol[t]);
		c->tpol[t] = NULL;
		free(c->kids[t]);
		c->kids[t] = NULL;
	}
}

/* ---- verify, and owners that go away ---------------------------------- */

void cache_tiers_owner_gone(kvs_cache *c, kvs_owner *o)
{
	if (o->promo != KVS_NONE) {
		/* Its lease ends with the owner; the reads finish without it. */
		cache_promo(c, o->promo)->owner = NULL;
		o->promo = KVS_NONE;
	}
	if (o->verify != KVS_NONE) {
		/* No more reads; those in flight finish without it. */
		o->vtier->ops->store->verify_cancel(o->vtier, o->verify);
		o->verify = KVS_NONE;
	}
}

static void verify_done(void *arg, const kvs_verify_result *res,
			const kvs_verify_fail *fails)
{
	kvs_owner *o = arg;

	o->verify = KVS_NONE;
	if (o->verify_fn)
		o->verify_fn(o->verify_arg, res, fails);
}

int kvs_cache_verify(kvs_cache *c, kvs_owner *o, uint32_t ns_id,
		     uint32_t max_failed, kvs_cache_verify_fn fn, void *arg,
		     kvs_verify_result *res)
{
	uint32_t job = KVS_NONE;
	int rc;

	*res = (kvs_verify_result){ 0 };
	if (o->verify != KVS_NONE)
		return -EBUSY;
	for (uint32_t i = 0; i < c->nstores; i++) {
		kvs_tier_mod *t = c->stores[i];

		if (!t->ops->store->verify)
			continue;
		o->verify_fn = fn;
		o->verify_arg = arg;
		rc = t->ops->store->verify(t, ns_id, max_failed, verify_done, o, res, &job);
		if (rc == -EINPROGRESS) {
			o->verify = job;
			o->vtier = t;
		}
		return rc;
	}
	return 0; /* no tier to verify: has_tier 0, nothing checked */
}

/* ---- the environment (kvs_tier_ops.h) ------------------------------------- */

void *kvs_tier_host_ptr(const kvs_tier_mod *t, uint64_t off)
{
	return cache_host_ptr(t->cache, off);
}

uint64_t kvs_tier_host_bytes(const kvs_tier_mod *t)
{
	return kvs_arena_bytes(t->cache->arena);
}

void kvs_tier_host_free(kvs_tier_mod *t, uint64_t off)
{
	kvs_slab_free(t->cache->slab, off);
}

int kvs_tier_rec(const kvs_tier_mod *t, uint32_t idx, kvs_tier_blk *out)
{
	const kvs_cache *c = t->cache;

	if (idx >= kvs_table_capacity(c->table) ||
	    cache_rec(c, idx)->state == KVS_REC_FREE)
		return -ENOENT;
	cache_blk(c, idx, out);
	return 0;
}

uint32_t kvs_tier_rec_span(const kvs_tier_mod *t)
{
	return kvs_table_capacity(t->cache->table);
}

uint64_t kvs_tier_only_here(const kvs_tier_mod *t)
{
	return t->cache->in_tier[t->ops->tier];
}

void kvs_tier_pin(kvs_tier_mod *t, uint32_t idx, int delta)
{
	kvs_cache *c = t->cache;

	if (delta < 0) {
		cache_unpin(c, idx);
		return;
	}
	cache_rec(c, idx)->refs++;
	cache_sync_evictable(c, idx);
}

void kvs_tier_stored(kvs_tier_mod *t, uint32_t idx, int ok)
{
	kvs_cache *c = t->cache;

	if (cache_rec(c, idx)->tier != KVS_TIER_NONE)
		return; /* in RAM too: nothing moves */
	if (ok)
		cache_set_tier(c, idx, t->ops->tier);
	else if (cache_rec(c, idx)->refs == 0)
		cache_forget(c, idx);
	/* else: pinned by a lookup that will miss it; the unpin forgets it */
}

void kvs_tier_lost(kvs_tier_mod *t, uint32_t idx)
{
	kvs_cache *c = t->cache;

	if (cache_rec(c, idx)->tier == t->ops->tier) {
		cache_set_tier(c, idx, KVS_TIER_NONE);
		cache_forget(c, idx);
	}
}

int kvs_tier_ns_restore(kvs_tier_mod *t, const kvs_ns_desc *d, uint32_t id)
{
	uint32_t got;

	/* Domain 0 only; the restoring tier has it already (telling it
	 * again appended every namespace to the SSD tier's file at each
	 * start, doubling it). */
	if (!id)
		return -EINVAL;
	/* Adopted with the host arena (kvs_persist_adopt) already. */
	if (cache_ns_find(t->cache, 0, d) == id)
		return 0;
	/* Another layout: the host blocks of the id's are not given up. */
	if (id <= t->cache->nns && !cache_ns(t->cache, id)->gone &&
	    t->cache->persist)
		return -EEXIST;
	return cache_ns_create(t->cache, d, 0, t, id, &got);
}

int kvs_tier_rec_restore(kvs_tier_mod *t, uint32_t ns_id, kvs_hash hash,
			 uint64_t bytes, uint64_t stamp, uint32_t *out)
{
	kvs_cache *c = t->cache;
	uint32_t idx;
	kvs_rec *r;
	int rc;

	if (ns_id == 0 || ns_id > c->nns || cache_ns(c, ns_id)->gone ||
	    bytes != cache_ns(c, ns_id)->info.block_bytes)
		return -EINVAL;
	rc = kvs_table_insert(c->table, cache_ns_key(ns_id, hash), &idx);
	if (rc == 0 && (rc = cache_rec_room(c, idx)) < 0)
		kvs_table_remove(c->table, idx);
	if (rc < 0)
		return rc;
	cache_persist_free(c, idx); /* a record index's last host block's */
	r = cache_rec(c, idx);
	r->state = KVS_REC_READY;
	r->ns = ns_id;
	cache_ns(c, ns_id)->recs++;
	r->cls = (uint16_t)cache_ns(c, ns_id)->cls;
	r->stamp = stamp;
	cache_set_tier(c, idx, t->ops->tier);
	*out = idx;
	return 0;
}

uint32_t kvs_tier_rec_find(const kvs_tier_mod *t, uint32_t ns_id, kvs_hash hash)
{
	const kvs_cache *c = t->cache;
	uint32_t idx = kvs_table_find(c->table, cache_ns_key(ns_id, hash));

	return idx != KVS_NONE && cache_rec(c, idx)->ns == ns_id ? idx : KVS_NONE;
}

int kvs_tier_rec_has(const kvs_tier_mod *t, uint32_t ns_id, kvs_hash hash)
{
	return kvs_tier_rec_find(t, ns_id, hash) != KVS_NONE;
}

uint32_t cache_find(kvs_cache *c, uint32_t ns_id, kvs_hash hash)
{
	uint32_t idx = kvs_table_find(c->table, cache_ns_key(ns_id, hash));

	for (uint32_t i = 0; idx == KVS_NONE && i < c->nstores; i++) {
		kvs_tier_mod *t = c->stores[i];
		const kvs_tier_store_ops *so = t->ops->store;

		if (so->find && so->find(t, ns_id, hash, &idx) < 0)
			idx = KVS_NONE;
	}
	return idx;
}

int kvs_tier_rec_link(kvs_tier_mod *t, uint32_t idx, kvs_hash parent)
{
	kvs_cache *c = t->cache;
	kvs_rec *r = cache_rec(c, idx);
	uint32_t p;

	if (!parent.lo && !parent.hi)
		return 0;
	p = kvs_table_find(c->table, cache_ns_key(r->ns, parent));
	if (p == KVS_NONE || cache_rec(c, p)->ns != r->ns)
		return 0;
	r->parent = p;
	cache_chain_link(c, idx, p);
	cache_rec(c, p)->children++;
	return 1;
}
