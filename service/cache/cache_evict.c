/* cache_evict.c - a record's tier, eviction and demotion, the one loop
 * that makes room in a tier, and freeing records for the operator (see
 * cache_int.h; the leaf rule is cache_rec.c's). */
#include <errno.h>

#include "cache_int.h"
#include "kvs_cache_admin.h"
#include "kvs_log.h"
#include "kvs_types.h" /* kvs_strerror */

#define HOST_BATCH KVS_CACHE_HOLD_BATCH /* host victims decided at once, at most */
_Static_assert(KVS_CACHE_FREE_BATCH <= HOST_BATCH,
	       "an operator's batch is decided by cache_evict_batch()");

void cache_free_slot(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = cache_rec(c, idx);

	if (cache_slot_tier(c, r->tier))
		c->tier[r->tier]->ops->slot->free(c->tier[r->tier], r->offset);
	else
		kvs_slab_free(cache_ns_dom(c, r->ns)->slab, r->offset);
}

/* Move record @idx to tier @t, keeping its parent's kept child counts
 * exact, and its place in the policy of its tier. */
void cache_set_tier(kvs_cache *c, uint32_t idx, uint8_t t)
{
	kvs_rec *r = cache_rec(c, idx);
	uint8_t old = r->tier;
	kvs_policy *before = cache_policy_of(c, idx), *after;

	r->tier = t;
	c->in_tier[old] -= old != KVS_TIER_NONE;
	c->in_tier[t] += t != KVS_TIER_NONE;
	after = cache_policy_of(c, idx);
	/* A record is in its tier's policy: leave the old one. */
	if (before != after && r->pol != KVS_NONE)
		kvs_policy_del(before, idx);
	for (uint8_t k = 1; k < KVS_TIER_MAX && r->parent != KVS_NONE; k++) {
		if (!cache_kids_on(c, k) || (old == k) == (t == k))
			continue;
		cache_kids_add(c, k, r->parent, t == k ? 1 : -1);
		cache_sync_evictable(c, r->parent);
		r = cache_rec(c, idx);
	}
	/* In or out of its policy by its new tier. (Not only when the policy
	 * changes: a block on its way down can be put back into the host
	 * policy meanwhile, e.g. by a child dropped in a segment recycled
	 * under its demotion write, and must not stay there as an SSD one.) */
	if (old != t)
		cache_sync_evictable(c, idx);
	r = cache_rec(c, idx);
	/* Its description follows its host bytes (cache_persist.c). */
	if (old == KVS_TIER_HOST && t != KVS_TIER_HOST)
		cache_persist_free(c, idx);
	else if (t == KVS_TIER_HOST && old != KVS_TIER_HOST &&
		 r->state == KVS_REC_READY)
		cache_persist_commit(c, idx);
	if (t == KVS_TIER_HOST && old != KVS_TIER_HOST && r->state == KVS_REC_READY)
		cache_fast_publish(c, idx, r);
	if (old != t)
		cache_resid(c, idx, 0);
}

void cache_child_gone(kvs_cache *c, uint32_t p, uint8_t t)
{
	/* A ghost without children has no reason to stay: drop it, which may
	 * in turn free its own ghost parent. */
	while (p != KVS_NONE) {
		kvs_rec *pr = cache_rec(c, p);
		uint32_t up = pr->parent;

		if (t)
			cache_kids_add(c, t, p, -1);
		t = 0; /* a ghost is in no tier */
		if (--pr->children > 0 || pr->state != KVS_REC_GHOST) {
			cache_sync_evictable(c, p);
			return;
		}
		c->ghosts--;
		cache_ns(c, pr->ns)->recs--;
		cache_resid(c, p, 1);
		kvs_table_remove(c->table, p);
		p = up;
	}
}

/* Remove a record that has no children (its slot is already freed). */
static void drop_record(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = cache_rec(c, idx);
	uint32_t p = r->parent;
	uint8_t t = r->tier;

	if (r->pol != KVS_NONE)
		kvs_policy_del(cache_policy_of(c, idx), idx);
	c->in_tier[t] -= t != KVS_TIER_NONE;
	cache_ns(c, r->ns)->recs--;
	cache_resid(c, idx, 1);
	kvs_table_remove(c->table, idx);
	cache_child_gone(c, p, t);
}

void cache_forget(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = cache_rec(c, idx);

	cache_persist_free(c, idx); /* its slot is free already */
	if (r->children > 0) {
		/* Its children stay (unreachable by lookups until it is
		 * written again), so it stays as a ghost for them. */
		cache_set_tier(c, idx, KVS_TIER_NONE);
		r = cache_rec(c, idx);
		r->state = KVS_REC_GHOST;
		r->refs = 0;
		c->ghosts++;
		cache_sync_evictable(c, idx);
		return;
	}
	drop_record(c, idx);
}

void cache_blk(const kvs_cache *c, uint32_t idx, kvs_tier_blk *b)
{
	const kvs_rec *r = cache_rec(c, idx);

	*b = (kvs_tier_blk){ .idx = idx, .ns = r->ns,
			     .hash = cache_ns_key(r->ns, r->hash),
			     .bytes = cache_ns(c, r->ns)->info.block_bytes,
			     .host_off = r->offset, .stamp = r->stamp,
			     .hits = r->hits, .refs = r->refs, .tier = r->tier,
			     .ready = r->state == KVS_REC_READY };
	if (r->parent != KVS_NONE)
		b->parent = cache_ns_key(r->ns, cache_rec(c, r->parent)->hash);
}

/* Record @idx as the store tiers see it when it leaves the host tier. Their
 * admission rule (--ssd-admit hit) asks for evidence of reuse, and the
 * policy may hold more than the hits (leaf-learn: a block written again
 * while its ghost remembered it): such a block counts as hit once. */
static void evict_blk(kvs_cache *c, uint32_t idx, kvs_tier_blk *b)
{
	cache_blk(c, idx, b);
	if (b->hits == 0 && kvs_policy_reused(cache_policy_of(c, idx), idx))
		b->hits = 1;
}

int cache_store_keeps(kvs_cache *c, uint32_t idx)
{
	kvs_tier_blk b;

	evict_blk(c, idx, &b);
	for (uint32_t i = 0; i < c->nstores; i++)
		if (c->stores[i]->ops->store->keeps(c->stores[i], &b))
			return 1;
	return 0;
}

/* Host eviction of READY @idx: the first store tier that admits it keeps
 * it (and frees or holds its slot); returns 0 when none does. */
static int demote_to_store(kvs_cache *c, uint32_t idx)
{
	kvs_tier_blk b;

	evict_blk(c, idx, &b);
	for (uint32_t i = 0; i < c->nstores; i++) {
		kvs_tier_mod *t = c->stores[i];
		int holds = 0, kept = t->ops->store->demote(t, &b, &holds);

		if (kept == KVS_TIER_REFUSED)
			continue;
		if (!holds)
			kvs_slab_free(c->slab, b.host_off);
		cache_set_tier(c, idx, kept == KVS_TIER_KEPT ? t->ops->tier
							     : KVS_TIER_NONE);
		return 1;
	}
	return 0;
}

/* A slot tier's victim @idx (out of its policy) goes to the host tier: a
 * host slot (evicting there as needed, never this block: it is in no
 * policy now), the copy, then its slot goes. Without a host slot the block
 * is dropped (a ghost if it has children). The copy is synchronous: see
 * docs/gpu.md. */
static void demote_to_host(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = cache_rec(c, idx);
	uint8_t from = r->tier;
	kvs_tier_mod *t = c->tier[from];
	uint32_t ns_id = r->ns;
	uint64_t off = r->offset, hoff = 0;
	uint64_t bytes = cache_ns(c, ns_id)->info.block_bytes;
	dom *d = cache_ns_dom(c, ns_id);
	int rc = cache_make_room(c, ns_id, KVS_TIER_HOST, &hoff);

	if (rc == 0) {
		rc = t->ops->slot->copy_to_host(t, off, (uint8_t *)kvs_arena_base(d->arena) + hoff,
					  bytes);
		if (rc < 0) {
			kvs_err("%s tier: demotion copy failed: %s", t->ops->name,
				kvs_strerror(rc));
			kvs_slab_free(d->slab, hoff);
		}
	}
	t->ops->slot->free(t, off);
	if (rc < 0) {
		cache_note(c, from, KVS_TIER_NOTE_DROPPED, bytes);
		c->stats->blocks_evicted++;
		cache_ns(c, ns_id)->info.blocks--;
		cache_forget(c, idx);
		return;
	}
	r = cache_rec(c, idx);
	r->offset = hoff;
	r->cls = (uint16_t)cache_ns(c, ns_id)->cls;
	r->gen = ++c->gen;
	cache_set_tier(c, idx, KVS_TIER_HOST);
	cache_sync_evictable(c, idx);
	cache_note(c, from, KVS_TIER_NOTE_DEMOTED, bytes);
	kvs_debug("%s tier: demoted block %016llx%016llx to host", t->ops->name,
		  (unsigned long long)r->hash.hi, (unsigned long long)r->hash.lo);
}

void cache_evict(kvs_cache *c, uint32_t idx, int tell_it)
{
	kvs_rec *r = cache_rec(c, idx);

	if (tell_it)
		cache_tell(c, c->evict_kind, idx);
	kvs_policy_del(cache_policy_of(c, idx), idx);
	/* Leaving a slot tier is a demotion to host, not a loss. */
	if (r->tier != KVS_TIER_HOST) {
		demote_to_host(c, idx);
		return;
	}
	cache_ns(c, r->ns)->info.blocks--;
	c->stats->blocks_evicted++;
	kvs_debug("evict block %016llx%016llx ns %u",
		  (unsigned long long)r->hash.hi, (unsigned long long)r->hash.lo,
		  r->ns);
	if (demote_to_store(c, idx))
		return;
	kvs_slab_free(cache_ns_dom(c, r->ns)->slab, r->offset);
	/* Only a flat policy (or a store tier) evicts a parent. */
	cache_forget(c, idx);
}

/* Host slots that store tiers' writes hold come back when those writes
 * finish: wait for one. Returns the slots freed. */
static int wait_held(kvs_cache *c)
{
	int freed = 0;

	for (uint32_t i = 0; i < c->nstores && freed == 0; i++) {
		kvs_tier_mod *t = c->stores[i];

		if (t->ops->store->host_held && t->ops->store->host_held(t) > 0)
			freed += t->ops->store->wait_held(t);
	}
	return freed;
}

void cache_victim_take(kvs_cache *c, kvs_policy *pol, uint32_t x)
{
	/* Out of the policy before it is pinned: a policy tells an eviction
	 * from a pin by the record as it leaves (policy_2q.c remembers
	 * evicted blocks in its ghost). */
	kvs_policy_del(pol, x);
	cache_rec(c, x)->refs++;
}

uint32_t cache_evict_batch(kvs_cache *c, uint64_t arena_id, const uint32_t *v,
			   uint32_t n, uint8_t *kept)
{
	uint8_t keep[HOST_BATCH];
	uint32_t gone = 0;

	cache_fast_hold_batch(c, arena_id, v, n, keep);
	for (uint32_t i = 0; i < n; i++) {
		cache_rec(c, v[i])->refs--; /* ours from cache_victim_take() */
		if (keep[i]) {
			cache_sync_evictable(c, v[i]);
		} else {
			cache_evict(c, v[i], 1);
			gone++;
		}
		if (kept)
			kept[i] = keep[i];
	}
	return gone;
}

/* Up to @want host victims of policy @pol: of class @cls first (their
 * slots are the ones needed), then of any; each taken. */
static uint32_t host_batch(kvs_cache *c, kvs_policy *pol, uint32_t cls,
			   uint32_t want, uint32_t *v)
{
	uint32_t n = 0;

	while (n < want) {
		uint32_t x = kvs_policy_victim(pol, cls);

		if (x == KVS_NONE)
			x = kvs_policy_victim(pol, KVS_CLASS_ANY);
		if (x == KVS_NONE)
			break;
		cache_victim_take(c, pol, x);
		v[n++] = x;
	}
	return n;
}

/* Victims are the domain's own: a tenant never evicts another's blocks,
 * and one tenant's full arena is its own business. A victim of the same
 * class first (its slot is the one needed), else the oldest of any class
 * until a slab empties and its pages can be re-cut.
 *
 * Host victims go in batches, so that the fast path looks at its clients'
 * pins once per batch, not once per victim (service/fast/fastpins.c): the first
 * batch is one victim while the domain's fast-path pins are few (an
 * eviction that makes room takes no more than it did), more when they are
 * many (the fast path's batch hint: the look costs at most 256 pins per victim,
 * the extra slots serve the next reserves), and each batch that did not
 * make room is followed by one twice as large, up to HOST_BATCH. A victim
 * found pinned is held and the next ones are named. */
int cache_make_room(kvs_cache *c, uint32_t ns_id, uint8_t t, uint64_t *off)
{
	dom *d = cache_ns_dom(c, ns_id);
	kvs_tier_mod *tt = t == KVS_TIER_HOST ? NULL : c->tier[t];
	kvs_policy *pol = tt ? c->tpol[t] : d->policy;
	uint32_t cls = cache_ns(c, ns_id)->cls;
	uint32_t want = tt ? 1 : cache_fast_batch_hint(c, d->arena_id);
	uint32_t v[HOST_BATCH];
	int rc;

	if (tt && (rc = cache_ns_tier_class(c, ns_id, t, &cls)) < 0)
		return rc;
	for (int n = 0; n <= MAX_EVICTIONS_PER_SLOT;) {
		uint32_t nv;

		rc = tt ? tt->ops->slot->alloc(tt, cls, off)
			: kvs_slab_alloc(d->slab, cls, off);
		if (rc != -ENOSPC)
			return rc;
		/* The fast path (host only): its hits weigh in before a
		 * victim is named, and a block a client pinned there stays. */
		if (!tt && n == 0)
			cache_fast_replay(c);
		if (tt) {
			v[0] = kvs_policy_victim(pol, cls);
			if (v[0] == KVS_NONE)
				v[0] = kvs_policy_victim(pol, KVS_CLASS_ANY);
			nv = v[0] != KVS_NONE;
			if (nv) /* a slot tier's victims move down unannounced */
				cache_evict(c, v[0], 0);
		} else {
			nv = host_batch(c, pol, cls, want, v);
			if (nv)
				cache_evict_batch(c, d->arena_id, v, nv, NULL);
		}
		if (nv > 0) {
			n += (int)nv;
			want = want < HOST_BATCH ? 2 * want : HOST_BATCH;
			continue;
		}
		if (!tt && cache_fast_unhold(c) > 0) {
			n++;
			continue; /* fast-path pins released since held */
		}
		/* Nothing left to evict; slots that demotion writes read
		 * from come back when those writes finish. Rare: a store
		 * tier holds at most a small share of the arena. */
		if (tt || wait_held(c) == 0)
			return KVS_E_FULL;
	}
	return KVS_E_FULL;
}

int kvs_cache_free_rec(kvs_cache *c, uint32_t idx, kvs_cache_event kind)
{
	uint8_t freed;

	return (int)kvs_cache_free_recs(c, &idx, 1, kind, &freed); /* a batch of one */
}

uint32_t kvs_cache_free_recs(kvs_cache *c, const uint32_t *idx, uint32_t n,
			     kvs_cache_event kind, uint8_t *freed)
{
	uint32_t v[KVS_CACHE_FREE_BATCH], pos[KVS_CACHE_FREE_BATCH], total = 0;
	uint8_t kept[KVS_CACHE_FREE_BATCH];

	memset(freed, 0, n);
	c->evict_kind = kind;
	for (uint32_t at = 0; at < n;) {
		uint64_t arena = 0;
		uint32_t m = 0;

		/* One domain's evictable records, each taken until decided
		 * (so a repeat is not evictable twice), as the make-room loop
		 * does. */
		for (; at < n && m < KVS_CACHE_FREE_BATCH; at++) {
			uint32_t x = idx[at];
			uint64_t a;

			if (!cache_evictable(c, x, cache_rec(c, x)))
				continue;
			a = cache_ns_dom(c, cache_rec(c, x)->ns)->arena_id;
			if (m > 0 && a != arena)
				break;
			arena = a;
			cache_victim_take(c, cache_policy_of(c, x), x);
			v[m] = x;
			pos[m++] = at;
		}
		total += cache_evict_batch(c, arena, v, m, kept);
		for (uint32_t i = 0; i < m; i++)
			freed[pos[i]] = !kept[i];
	}
	c->evict_kind = KVS_CACHE_EVENT_EVICTED;
	return total;
}

int cache_ns_tier_class(kvs_cache *c, uint32_t ns_id, uint8_t t, uint32_t *cls)
{
	ns *s = cache_ns(c, ns_id);
	kvs_tier_mod *tt = c->tier[t];
	int rc;

	if (s->tcls[t] == NO_CLASS) {
		rc = tt->ops->slot->class_of(tt, s->info.block_bytes, &s->tcls[t]);
		if (rc < 0) {
			s->tcls[t] = NO_CLASS;
			return rc == -ENOMEM ? rc : KVS_E_LAYOUT;
		}
	}
	*cls = s->tcls[t];
	return 0;
}
