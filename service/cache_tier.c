/* cache_tier.c - the cache's side of the tier interface (kvs_tier.h):
 * adding tiers, promotion jobs and their deferred replies, verify, and the
 * environment the tiers call. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "kvs_log.h"
#include "kvshare.h" /* kvs_strerror */

/* ---- adding and closing ----------------------------------------------- */

/* Turn on kids[t] (see struct kvs_cache), sized for every record index. */
static int kids_on(kvs_cache *c, uint8_t t)
{
	c->kids_on[t] = 1;
	return cache_grow((void **)&c->kids[t], &c->nkids[t], sizeof(uint32_t),
			  kvs_table_capacity(c->table));
}

int kvs_cache_tier_add(kvs_cache *c, kvs_tier_mod *t)
{
	const kvs_tier_ops *ops = t->ops;
	int rc = 0;

	if (ops->tier >= KVS_TIER_MAX || ops->tier == KVS_TIER_HOST ||
	    c->tier[ops->tier])
		return -EEXIST;
	if (c->by_uid) {
		/* One tier for every domain would mix tenants. */
		kvs_err("%s tier: not supported yet with --tenant-arenas uid",
			ops->name);
		return -ENODEV;
	}
	t->cache = c;
	t->stats = c->stats;
	c->tier[ops->tier] = t;
	if (ops->kind == KVS_TIER_SLOTS) {
		rc = kvs_policy_create(c->policy_name, c->table, &c->tpol[ops->tier]);
		if (rc == 0)
			rc = kids_on(c, ops->tier);
	} else {
		c->stores[c->nstores++] = t;
		rc = kids_on(c, KVS_TIER_HOST);
		if (rc == 0 && ops->restore)
			rc = ops->restore(t);
	}
	if (rc < 0) {
		/* Restore may have made namespaces and records: those stay
		 * (in no tier they are ghosts-to-be); the tier goes. */
		if (ops->kind == KVS_TIER_STORE)
			c->nstores--;
		kvs_policy_destroy(c->tpol[ops->tier]);
		c->tpol[ops->tier] = NULL;
		c->tier[ops->tier] = NULL;
		ops->close(t);
	}
	return rc;
}

kvs_tier_mod *kvs_cache_tier(const kvs_cache *c, uint8_t tier)
{
	return tier < KVS_TIER_MAX ? c->tier[tier] : NULL;
}

int kvs_cache_tier_map(const kvs_cache *c, uint8_t tier, int *fd,
		       uint64_t *bytes, uint32_t *kind, uint32_t *device)
{
	kvs_tier_mod *t = kvs_cache_tier(c, tier);

	if (!t || t->ops->kind != KVS_TIER_SLOTS)
		return -ENODEV;
	t->ops->map(t, fd, bytes, kind, device);
	return 0;
}

void kvs_cache_tier_poll(kvs_cache *c, kvs_tier_mod *t)
{
	(void)c;
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
		if (c->tier[t] && c->tier[t]->ops->kind == KVS_TIER_SLOTS)
			c->tier[t]->ops->close(c->tier[t]);
		c->tier[t] = NULL;
		kvs_policy_destroy(c->tpol[t]);
		c->tpol[t] = NULL;
		free(c->kids[t]);
		c->kids[t] = NULL;
	}
	for (uint32_t i = 0; i < c->nps; i++) {
		free(c->ps[i].idx);
		free(c->ps[i].res);
		free(c->ps[i].from);
		free(c->ps[i].out);
	}
	free(c->ps);
	c->ps = NULL;
}

void cache_note(kvs_cache *c, uint8_t t, int what, uint64_t n)
{
	if (t < KVS_TIER_MAX && c->tier[t] && c->tier[t]->ops->note)
		c->tier[t]->ops->note(c->tier[t], what, n);
}

kvs_tier_mod *cache_store_of(const kvs_cache *c, uint32_t idx)
{
	for (uint32_t i = 0; i < c->nstores; i++)
		if (c->stores[i]->ops->has(c->stores[i], idx))
			return c->stores[i];
	return NULL;
}

/* ---- promotion -------------------------------------------------------- */

static int promo_new(kvs_cache *c, uint32_t n, uint32_t *out)
{
	promo *p;
	uint32_t s;

	if (c->free_ps == NONE) {
		uint32_t m = c->nps ? c->nps * 2 : 16;
		promo *np = realloc(c->ps, (size_t)m * sizeof(*np));

		if (!np)
			return -ENOMEM;
		for (uint32_t i = m; i-- > c->nps;) {
			np[i] = (promo){ .next = c->free_ps };
			c->free_ps = i;
		}
		c->ps = np;
		c->nps = m;
	}
	s = c->free_ps;
	p = &c->ps[s];
	p->idx = malloc((size_t)n * sizeof(*p->idx));
	p->res = calloc(n, sizeof(*p->res));
	p->from = calloc(n, sizeof(*p->from));
	p->out = malloc((size_t)n * sizeof(*p->out));
	if (!p->idx || !p->res || !p->from || !p->out) {
		free(p->idx);
		free(p->res);
		free(p->from);
		free(p->out);
		return -ENOMEM;
	}
	c->free_ps = p->next;
	p->n = n;
	p->pending = 0;
	*out = s;
	return 0;
}

static void promo_free(kvs_cache *c, uint32_t s)
{
	promo *p = &c->ps[s];

	free(p->idx);
	free(p->res);
	free(p->from);
	free(p->out);
	*p = (promo){ .next = c->free_ps };
	c->free_ps = s;
}

/* @idx now has its bytes in its host slot again: back in RAM. */
static void promoted(kvs_cache *c, uint32_t idx, uint8_t from)
{
	kvs_rec *r = cache_rec(c, idx);

	cache_note(c, from, KVS_TIER_NOTE_PROMOTED, 1);
	r->gen = ++c->gen;
	cache_ns(c, r->ns)->info.blocks++;
	cache_set_tier(c, idx, KVS_TIER_HOST);
	kvs_policy_touch(c->policy, idx);
	cache_sync_evictable(c, idx);
}

/* A copy that failed its read (corrupt, stale, an I/O error) leaves its
 * tier, once unpinned; a block in no other tier goes with it. */
static void drop_copy(kvs_cache *c, uint32_t idx, uint8_t from)
{
	kvs_tier_mod *t = c->tier[from];
	kvs_tier_blk b;

	cache_blk(c, idx, &b);
	t->ops->drop(t, &b);
	if (cache_rec(c, idx)->tier == from) {
		cache_set_tier(c, idx, KVS_TIER_NONE);
		cache_forget(c, idx);
	}
}

/* Every read of promotion @s is done: answer with the chain up to the first
 * block that failed, drop the failed ones. */
static void promo_finish(kvs_cache *c, uint32_t s)
{
	promo *p = &c->ps[s];
	kvs_owner *o = p->owner;
	uint32_t hits = p->cut;
	uint64_t lid = 0;

	for (uint32_t i = 0; i < p->cut; i++)
		if (p->res[i] < 0) {
			hits = i;
			break;
		}
	if (o) {
		lid = cache_lookup_finish(c, p->lease, hits, p->out);
		o->promo = NONE;
	}
	/* Unpinned now: a block that failed verification leaves its tier
	 * and the table; its descendants become unreachable. */
	for (uint32_t i = 0; i < p->n; i++)
		if (p->res[i] < 0)
			drop_copy(c, p->idx[i], p->from[i]);
	/* Counted as before the tier interface: a lookup that waited for a
	 * store tier counts all its hits there. */
	for (uint32_t i = 0; i < p->n; i++)
		if (p->from[i]) {
			cache_note(c, p->from[i], KVS_TIER_NOTE_LOOKUP_HIT, hits);
			break;
		}
	if (o && o->done)
		o->done(o->done_arg, (int)hits, lid, p->out);
	promo_free(c, s);
}

void kvs_tier_read_done(kvs_tier_mod *t, uint64_t cookie, int res)
{
	kvs_cache *c = t->cache;
	uint32_t s = (uint32_t)(cookie >> 32), pos = (uint32_t)cookie;
	promo *p = &c->ps[s];
	uint32_t idx = p->idx[pos];

	if (res == 0) {
		promoted(c, idx, p->from[pos]);
	} else {
		kvs_slab_free(c->slab, cache_rec(c, idx)->offset);
		p->res[pos] = res;
	}
	if (--p->pending == 0)
		promo_finish(c, s);
}

/* Position @i of promotion @p: a host slot, and the read of the record's
 * copy into it. Returns 1 (read in flight), 0 (in RAM now), or -1: the
 * chain is cut here. */
static int promote_one(kvs_cache *c, uint32_t ps, uint32_t i)
{
	promo *p = &c->ps[ps];
	uint32_t idx = p->idx[i];
	kvs_tier_mod *t = cache_store_of(c, idx);
	kvs_tier_blk b;
	uint64_t off;
	int rc;

	if (!t)
		return -1;
	/* The chain so far is pinned: this eviction cannot take it. */
	if (cache_make_room(c, cache_rec(c, idx)->ns, KVS_TIER_HOST, &off) < 0)
		return -1;
	p = &c->ps[ps];
	cache_rec(c, idx)->offset = off;
	p->from[i] = t->ops->tier;
	cache_blk(c, idx, &b);
	rc = t->ops->read(t, &b, kvs_tier_host_ptr(t, off),
			  (uint64_t)ps << 32 | i);
	if (rc == 0) {
		promoted(c, idx, p->from[i]);
		return 0;
	}
	if (rc == 1)
		return 1;
	kvs_slab_free(c->slab, off);
	if (rc != -EAGAIN)
		p->res[i] = rc;
	return -1;
}

int cache_promote(kvs_cache *c, kvs_owner *o, uint32_t s, kvs_block *out,
		  uint64_t *lease_out)
{
	lease *l = &c->leases[s];
	uint32_t n = l->n, ps, reads = 0;
	promo *p;
	int rc = promo_new(c, n, &ps);

	if (rc < 0) {
		cache_lookup_finish(c, s, 0, out);
		return rc;
	}
	p = &c->ps[ps];
	memcpy(p->idx, l->recs, (size_t)n * sizeof(uint32_t));
	p->owner = o;
	p->lease = s;
	p->cut = n;
	for (uint32_t i = 0; i < n; i++) {
		if (cache_rec(c, c->ps[ps].idx[i])->tier == KVS_TIER_HOST)
			continue;
		rc = promote_one(c, ps, i);
		if (rc < 0) {
			c->ps[ps].cut = i;
			break;
		}
		reads += (uint32_t)rc;
	}
	p = &c->ps[ps];
	if (reads > 0) {
		p->pending = reads;
		o->promo = ps;
		return -EINPROGRESS;
	}
	/* Nothing to wait for: the slot or the read could not be had. */
	p->owner = NULL;
	p->pending = 0;
	*lease_out = cache_lookup_finish(c, s, p->cut, out);
	for (uint32_t i = 0; i < n; i++) {
		if (c->ps[ps].res[i] < 0)
			drop_copy(c, c->ps[ps].idx[i], c->ps[ps].from[i]);
	}
	rc = (int)c->ps[ps].cut;
	promo_free(c, ps);
	return rc;
}

void cache_tiers_owner_gone(kvs_cache *c, kvs_owner *o)
{
	if (o->promo != NONE) {
		/* Its lease ends with the owner; the reads finish without it. */
		c->ps[o->promo].owner = NULL;
		o->promo = NONE;
	}
	if (o->verify != NONE) {
		/* No more reads; those in flight finish without it. */
		o->vtier->ops->verify_cancel(o->vtier, o->verify);
		o->verify = NONE;
	}
}

/* ---- verify ----------------------------------------------------------- */

static void verify_done(void *arg, const kvs_verify_result *res,
			const kvs_verify_fail *fails)
{
	kvs_owner *o = arg;

	o->verify = NONE;
	if (o->verify_fn)
		o->verify_fn(o->verify_arg, res, fails);
}

int kvs_cache_verify(kvs_cache *c, kvs_owner *o, uint32_t ns_id,
		     uint32_t max_failed, kvs_cache_verify_fn fn, void *arg,
		     kvs_verify_result *res)
{
	uint32_t job = NONE;
	int rc;

	*res = (kvs_verify_result){ 0 };
	if (o->verify != NONE)
		return -EBUSY;
	for (uint32_t i = 0; i < c->nstores; i++) {
		kvs_tier_mod *t = c->stores[i];

		if (!t->ops->verify)
			continue;
		o->verify_fn = fn;
		o->verify_arg = arg;
		rc = t->ops->verify(t, ns_id, max_failed, verify_done, o, res, &job);
		if (rc == -EINPROGRESS) {
			o->verify = job;
			o->vtier = t;
		}
		return rc;
	}
	return 0; /* no tier to verify: has_tier 0, nothing checked */
}

/* ---- the environment (kvs_tier.h) ------------------------------------- */

void *kvs_tier_host_ptr(const kvs_tier_mod *t, uint64_t off)
{
	return (uint8_t *)kvs_arena_base(t->cache->arena) + off;
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

void kvs_tier_stored(kvs_tier_mod *t, uint32_t idx, int ok)
{
	kvs_cache *c = t->cache;

	if (cache_rec(c, idx)->tier != KVS_TIER_NONE)
		return; /* in RAM too: nothing moves */
	if (ok)
		cache_set_tier(c, idx, t->ops->tier);
	else
		cache_forget(c, idx);
}

void kvs_tier_lost(kvs_tier_mod *t, uint32_t idx)
{
	kvs_cache *c = t->cache;

	if (cache_rec(c, idx)->tier == t->ops->tier) {
		cache_set_tier(c, idx, KVS_TIER_NONE);
		cache_forget(c, idx);
	}
}

int kvs_tier_ns_restore(kvs_tier_mod *t, const kvs_ns_desc *d, uint32_t *id)
{
	return cache_ns_create(t->cache, d, 0, id); /* domain 0 only */
}

int kvs_tier_rec_restore(kvs_tier_mod *t, uint32_t ns_id, kvs_hash hash,
			 uint64_t bytes, uint64_t stamp, uint32_t *out)
{
	kvs_cache *c = t->cache;
	uint32_t idx;
	kvs_rec *r;
	int rc;

	if (ns_id == 0 || ns_id > c->nns ||
	    bytes != cache_ns(c, ns_id)->info.block_bytes)
		return -EINVAL;
	rc = kvs_table_insert(c->table, cache_ns_key(ns_id, hash), &idx);
	if (rc == 0 && (rc = cache_rec_room(c, idx)) < 0)
		kvs_table_remove(c->table, idx);
	if (rc < 0)
		return rc;
	r = cache_rec(c, idx);
	r->state = KVS_REC_READY;
	r->ns = ns_id;
	r->cls = (uint16_t)cache_ns(c, ns_id)->cls;
	r->stamp = stamp;
	cache_set_tier(c, idx, t->ops->tier);
	*out = idx;
	return 0;
}

void kvs_tier_rec_link(kvs_tier_mod *t, uint32_t idx, kvs_hash parent)
{
	kvs_cache *c = t->cache;
	kvs_rec *r = cache_rec(c, idx);
	uint32_t p;

	if (!parent.lo && !parent.hi)
		return;
	p = kvs_table_find(c->table, cache_ns_key(r->ns, parent));
	if (p == NONE || cache_rec(c, p)->ns != r->ns)
		return;
	r->parent = p;
	cache_rec(c, p)->children++;
}
