/* cache.c - blocks, namespaces, leases, eviction (see kvs_cache.h): the
 * cache's life cycle and its requests (lookup, reserve, commit, abort,
 * release). The rest is in cache_*.c (see cache_int.h). */
#define _GNU_SOURCE
#include "kvs_cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache_int.h"
#include "kvs_log.h"

/* ---- life cycle ------------------------------------------------------- */

int kvs_cache_reserve_pages(kvs_cache *c)
{
	return c->by_uid || !c->arena ? 0 : kvs_arena_reserve(c->arena);
}

int kvs_cache_create(const kvs_cache_config *cfg, kvs_counters *stats,
		     kvs_cache **out)
{
	kvs_cache *c = calloc(1, sizeof(*c));
	const char *pol = cfg->policy ? cfg->policy : kvs_policy_name_at(0);
	uint32_t d0;
	int rc;

	if (!c)
		return -ENOMEM;
	/* Leases by the 64, promotions by the 16 (the first arrays' sizes
	 * before the pool); a probe's cookie takes the top bit of a job's. */
	if ((rc = kvs_pool_init(&c->leases, sizeof(lease), 6, KVS_POOL_MAX)) < 0 ||
	    (rc = kvs_pool_init(&c->promos, sizeof(promo), 4, KVS_POOL_MAX)) < 0) {
		free(c);
		return rc;
	}
	c->stats = stats;
	c->max_leases = cfg->max_leases;
	c->max_pinned = cfg->max_pinned;
	c->max_ns_per_uid = cfg->max_ns_per_uid;
	c->max_sizes_per_uid = cfg->max_sizes_per_uid;
	c->max_pinned_share = cfg->max_pinned_share_per_uid;
	c->evict_kind = KVS_CACHE_EVENT_EVICTED;
	c->page_bytes = cfg->page_bytes;
	c->by_uid = cfg->max_tenants > 0;
	c->maxdoms = c->by_uid ? cfg->max_tenants : 1;
	c->dom_bytes = c->by_uid ? cfg->tenant_bytes : cfg->host_bytes;
	c->hugepages = cfg->hugepages;
	clock_gettime(CLOCK_MONOTONIC, &c->born);
	if (!kvs_policy_known(pol) || strlen(pol) >= sizeof(c->policy_name) ||
	    (c->by_uid && c->dom_bytes == 0)) {
		free(c);
		return -EINVAL;
	}
	strcpy(c->policy_name, pol);
	c->doms = calloc(c->maxdoms, sizeof(*c->doms));
	rc = c->doms ? kvs_table_create(&c->table) : -ENOMEM;
	if (rc == 0 && cfg->persist)
		rc = cache_persist_open(c);
	/* One domain for everybody, made now; per uid, made on first use. */
	if (rc == 0 && !c->by_uid && (rc = cache_dom_create(c, 0, &d0)) == 0) {
		c->arena = c->doms[0].arena;
		c->slab = c->doms[0].slab;
		c->policy = c->doms[0].policy;
		c->arena_id = c->doms[0].arena_id;
	}
	if (rc == 0 && c->by_uid) {
		/* The policy's leaf rule, before any domain exists. */
		kvs_policy *p;

		if ((rc = kvs_policy_create(pol, c->table, &p)) == 0) {
			c->leaf_only = kvs_policy_leaf_only(p);
			kvs_policy_destroy(p);
		}
	}
	if (rc < 0) {
		kvs_cache_destroy(c);
		return rc;
	}
	*out = c;
	return 0;
}

void kvs_cache_destroy(kvs_cache *c)
{
	if (!c)
		return;
	cache_tiers_close(c); /* before the arenas: reads land in them */
	cache_promos_free(c);
	cache_pw_stop(c->pw);  /* so does the persist worker's hashing */
	for (uint32_t i = 0; i < kvs_pool_cap(&c->leases); i++) {
		free(cache_lease(c, i)->recs); /* free ones keep theirs too */
		free(cache_lease(c, i)->held);
	}
	kvs_pool_fini(&c->leases);
	cache_pinslab_free(c);
	cache_ns_free_all(c);
	free(c->atime);
	free(c->chain);
	for (uint32_t i = 0; i < c->ndoms; i++)
		cache_dom_destroy(&c->doms[i]);
	free(c->doms);
	kvs_table_destroy(c->table);
	cache_persist_unmap(c->persist);
	free(c);
}

int kvs_cache_arena_fd(const kvs_cache *c)
{
	return c->arena ? kvs_arena_fd(c->arena) : -1;
}

uint64_t kvs_cache_arena_bytes(const kvs_cache *c)
{
	return c->arena ? kvs_arena_bytes(c->arena)
			: c->dom_bytes * (uint64_t)c->maxdoms;
}

uint64_t kvs_cache_arena_id(const kvs_cache *c) { return c->arena_id; }

int kvs_cache_owner_arena(const kvs_cache *c, const kvs_owner *o, int *fd,
			  uint64_t *bytes, uint64_t *id)
{
	const dom *d;

	if (!o->ns)
		return KVS_E_NOTATTACHED;
	d = cache_ns_dom(c, o->ns);
	*fd = kvs_arena_fd(d->arena);
	*bytes = kvs_arena_bytes(d->arena);
	*id = d->arena_id;
	return 0;
}

uint32_t kvs_cache_tenants(const kvs_cache *c) { return c->ndoms; }

kvs_owner *kvs_cache_owner_new(kvs_cache *c)
{
	kvs_owner *o = calloc(1, sizeof(*o));

	if (o) {
		o->leases = KVS_NONE;
		o->promo = KVS_NONE;
		o->verify = KVS_NONE;
	}
	return o;
}

void kvs_cache_owner_set_uid(kvs_owner *o, uint32_t uid)
{
	o->uid = uid;
}

void kvs_cache_owner_set_operator(kvs_owner *o, int op)
{
	o->op = op != 0;
}

uint32_t kvs_cache_owner_ns(const kvs_owner *o)
{
	return o->ns;
}

void kvs_cache_owner_set_done(kvs_owner *o, kvs_cache_done_fn fn, void *arg)
{
	o->done = fn;
	o->done_arg = arg;
}

void kvs_cache_owner_free(kvs_cache *c, kvs_owner *o)
{
	if (!o)
		return;
	cache_tiers_owner_gone(c, o);
	while (o->leases != KVS_NONE) {
		uint32_t s = o->leases;

		if (cache_lease(c, s)->kind == LEASE_WRITE)
			cache_end_write(c, s, 0);
		else
			cache_end_read(c, s);
	}
	if (o->ns) {
		cache_ns(c, o->ns)->info.clients--;
		cache_ns_dom(c, o->ns)->clients--;
	}
	free(o);
}

/* ---- operations ------------------------------------------------------- */

/* The longest present prefix of @hashes for @o: its records in
 * out[i].offset (@out may be NULL: a query), *promote the ones to read back from a store tier, and
 * *more: whether the chain ends at a block this daemon has no record of
 * (or only a ghost), which a shared tier may have. */
static uint32_t find_hits(kvs_cache *c, kvs_owner *o, const kvs_hash *hashes,
			  uint32_t n, kvs_block *out, uint32_t *promote, int *more)
{
	uint32_t hits = 0;

	*promote = 0;
	*more = 0;
	/* Blocks of another namespace (another salt) are never matched: a
	 * tenant cannot probe another's prefixes through the table. */
	for (; hits < n; hits++) {
		uint32_t idx = cache_find(c, o->ns, hashes[hits]);
		uint8_t t;

		if (idx == KVS_NONE || cache_rec(c, idx)->ns != o->ns ||
		    cache_rec(c, idx)->state != KVS_REC_READY) {
			*more = idx == KVS_NONE ||
				(cache_rec(c, idx)->ns == o->ns &&
				 cache_rec(c, idx)->state == KVS_REC_GHOST);
			break;
		}
		t = cache_rec(c, idx)->tier;
		/* In a slot tier: a hit for an owner that maps it only
		 * (promotion to host for the others is not built). */
		if (c->tpol[t]) {
			if (t != o->above)
				break;
		} else if (t != KVS_TIER_HOST) {
			/* Not in RAM: it counts only if it can be read back. */
			if (!cache_store_of(c, idx))
				break;
			(*promote)++;
		}
		if (out)
			out[hits].offset = idx; /* remembered; filled below */
	}
	return hits;
}

/* Whether a store tier can tell what others published (the remote tier). */
static int shared_tier(const kvs_cache *c)
{
	for (uint32_t i = 0; i < c->nstores; i++)
		if (c->stores[i]->ops->store->probe)
			return 1;
	return 0;
}

int kvs_cache_lookup(kvs_cache *c, kvs_owner *o, const kvs_hash *hashes,
		     uint32_t n, uint64_t *lease_out, kvs_block *out)
{
	uint32_t hits, promote, want = 0, s, cut = 0;
	int rc, more, clipped = 0;
	lease *l;

	*lease_out = 0;
	if (!o->ns) {
		c->stats->errors_notattached++;
		return KVS_E_NOTATTACHED;
	}
	hits = find_hits(c, o, hashes, n, out, &promote, &more);
	if (cache_over_pin_limit(c, o, hits))
		return KVS_E_LIMIT;
	/* The rest of the chain may be in a tier others write to: all of it
	 * that the owner may pin (the host tier's room is found block by
	 * block as they arrive). */
	if (more && shared_tier(c)) {
		want = n - hits;
		if (c->max_pinned && o->pins + hits + want > c->max_pinned) {
			want = (uint32_t)(c->max_pinned - o->pins - hits);
			clipped = 1;
		}
	}
	cache_count_lookup(c, o->ns, 0, n - hits - want);
	if (hits == 0 && want == 0)
		return 0;
	if ((rc = cache_lease_new(c, o, LEASE_READ, &s)) < 0)
		return rc;
	l = cache_lease(c, s); /* stays put: the pool never moves it */
	if ((rc = cache_lease_room(l, hits + want)) < 0) {
		cache_lease_free(c, s);
		return rc;
	}
	for (uint32_t i = 0; i < hits; i++) {
		uint32_t idx = (uint32_t)out[i].offset;
		kvs_rec *r = cache_rec(c, idx);

		/* Past the uid's pinned slabs: the chain ends here. */
		if (cache_pinslab_take(c, o, idx, &l->held[l->n]) < 0) {
			cut = hits - i;
			break;
		}
		r->refs++;
		r->hits++;
		cache_touch_atime(c, idx);
		cache_sync_evictable(c, idx);
		kvs_policy_touch(cache_policy_of(c, idx), idx);
		l->recs[l->n++] = idx;
		if (c->tpol[r->tier])
			cache_note(c, r->tier, KVS_TIER_NOTE_LOOKUP_HIT, 1);
	}
	if (cut) {
		hits -= cut;
		want = 0;
		promote = 0;
		for (uint32_t i = 0; i < hits; i++)
			promote += cache_rec(c, l->recs[i])->tier != KVS_TIER_HOST &&
				   !c->tpol[cache_rec(c, l->recs[i])->tier];
		cache_count_lookup(c, o->ns, 0, cut);
	}
	c->pins += hits;
	o->pins += hits;
	if (hits == 0 && !want) {
		cache_lease_free(c, s);
		return 0;
	}
	if (promote || want)
		return cache_promote(c, o, s, out, hashes + hits,
				     want, clipped, lease_out);
	*lease_out = cache_lookup_finish(c, s, hits, out);
	return (int)hits;
}

int kvs_cache_query(kvs_cache *c, kvs_owner *o, const kvs_hash *hashes,
		    uint32_t n, int remote)
{
	uint32_t hits, promote;
	int more;

	if (!o->ns) {
		c->stats->errors_notattached++;
		return KVS_E_NOTATTACHED;
	}
	c->stats->blocks_query_asked += n;
	hits = find_hits(c, o, hashes, n, NULL, &promote, &more);
	if (!remote || !more || !shared_tier(c))
		return (int)hits;
	return cache_query_remote(c, o, hashes + hits, n - hits, hits);
}

int kvs_cache_reserve(kvs_cache *c, kvs_owner *o, const kvs_hash *hashes,
		      uint32_t n, uint64_t *lease_out, kvs_block *out)
{
	uint32_t prev = KVS_NONE, s = KVS_NONE, fresh = 0, missing = 0;
	uint8_t stop = 0; /* BUSY or FULL once the chain cannot continue */
	int rc;

	*lease_out = 0;
	if (!o->ns) {
		c->stats->errors_notattached++;
		return KVS_E_NOTATTACHED;
	}
	for (uint32_t i = 0; i < n; i++) {
		kvs_hash h = cache_ns_key(o->ns, hashes[i]);
		uint32_t idx;

		out[i] = (kvs_block){ .status = stop };
		if (stop)
			continue;
		idx = cache_find(c, o->ns, hashes[i]);
		if (idx != KVS_NONE && (cache_rec(c, idx)->ns != o->ns ||
					cache_rec(c, idx)->state != KVS_REC_GHOST)) {
			kvs_rec *r = cache_rec(c, idx);

			if (r->ns == o->ns && r->state == KVS_REC_READY) {
				/* The request uses this block (it just
				 * computed it): that is an access. */
				kvs_policy_touch(cache_policy_of(c, idx), idx);
				out[i].status = KVS_BLOCK_EXISTS;
				out[i].tier = r->tier;
				prev = idx;
			} else {
				out[i].status = stop = KVS_BLOCK_BUSY;
			}
			continue;
		}
		missing++;
		if (cache_over_pin_limit(c, o, 1)) {
			/* All or nothing: undo this request's NEW blocks. */
			if (s != KVS_NONE) {
				cache_end_write(c, s, 0);
				c->stats->blocks_aborted -= fresh;
			}
			return KVS_E_LIMIT;
		}
		if (s == KVS_NONE && (rc = cache_lease_new(c, o, LEASE_WRITE, &s)) < 0) {
			if (rc == KVS_E_LIMIT)
				return rc; /* nothing reserved yet */
			out[i].status = stop = KVS_BLOCK_FULL;
			continue;
		}
		rc = cache_reserve_one(c, o, s, h, prev, idx, 0, &idx);
		if (rc < 0) {
			out[i].status = stop = KVS_BLOCK_FULL;
			continue;
		}
		out[i] = cache_located(cache_rec(c, idx), KVS_BLOCK_NEW);
		prev = idx;
		fresh++;
	}
	for (uint32_t i = 0; i < n; i++) {
		c->stats->blocks_reserve_exists += out[i].status == KVS_BLOCK_EXISTS;
		c->stats->blocks_reserve_busy += out[i].status == KVS_BLOCK_BUSY;
		c->stats->blocks_reserve_full += out[i].status == KVS_BLOCK_FULL;
	}
	c->stats->blocks_reserved += fresh;
	if (s != KVS_NONE && fresh == 0)
		cache_lease_free(c, s);
	else if (s != KVS_NONE)
		*lease_out = cache_lease_id(c, s);
	if (fresh == 0 && missing > 0 && stop == KVS_BLOCK_FULL) {
		c->stats->errors_full++;
		return KVS_E_FULL;
	}
	return (int)fresh;
}

int kvs_cache_reserve_after(kvs_cache *c, kvs_owner *o, const kvs_hash *hashes,
			    uint32_t n, uint64_t *lease_out, kvs_block *out)
{
	uint32_t idx;

	*lease_out = 0;
	if (!o->ns || n == 0)
		return kvs_cache_reserve(c, o, hashes, n, lease_out, out);
	/* Through the store tiers too: a parent the SSD tier's background
	 * load has not reached yet is a parent (docs/ssd.md, Warm restart). */
	idx = cache_find(c, o->ns, hashes[0]);
	if (idx != KVS_NONE && cache_rec(c, idx)->ns == o->ns &&
	    cache_rec(c, idx)->state == KVS_REC_READY)
		return kvs_cache_reserve(c, o, hashes, n, lease_out, out);
	for (uint32_t i = 0; i < n; i++)
		out[i] = (kvs_block){ .status = KVS_BLOCK_NOPARENT };
	c->stats->blocks_reserve_noparent += n - 1;
	return 0;
}

/* End write lease @id of @o: publish it (commit) or free its slots. */
static int write_lease_end(kvs_cache *c, kvs_owner *o, uint64_t id, int commit)
{
	uint32_t s;
	int rc = cache_lease_get(c, o, id, &s);

	if (rc < 0)
		return rc;
	if (cache_lease(c, s)->kind != LEASE_WRITE) {
		c->stats->errors_lease++;
		return KVS_E_LEASEKIND;
	}
	return (int)cache_end_write(c, s, commit);
}

int kvs_cache_commit(kvs_cache *c, kvs_owner *o, uint64_t id)
{
	return write_lease_end(c, o, id, 1);
}

int kvs_cache_abort(kvs_cache *c, kvs_owner *o, uint64_t id)
{
	return write_lease_end(c, o, id, 0);
}

int kvs_cache_release(kvs_cache *c, kvs_owner *o, uint64_t id)
{
	uint32_t s;
	int rc = cache_lease_get(c, o, id, &s);

	if (rc < 0)
		return rc;
	if (cache_lease(c, s)->kind == LEASE_WRITE)
		return (int)cache_end_write(c, s, 0);
	return (int)cache_end_read(c, s);
}

