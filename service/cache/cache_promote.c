/* cache_promote.c - promotion jobs: a lookup whose hits are in a store
 * tier only (read back into host slots), or whose chain goes on in a tier
 * that others write to (the remote tier: probed, then fetched into new
 * records); answered when every read is done (see cache_int.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "kvs_log.h"

enum { POS_HOST = 0, POS_READ = 1, POS_FETCH = 2 };
/* The cookie of a probe: its job, with this bit (positions are < 2^31). */
#define PROBE_BIT 0x80000000u

static void promo_arrays_free(promo *p)
{
	free(p->idx);
	free(p->res);
	free(p->from);
	free(p->kind);
	free(p->out);
	free(p->want);
}

static int promo_new(kvs_cache *c, uint32_t n, uint32_t *out)
{
	promo *p;
	uint32_t s;

	if (kvs_pool_alloc(&c->promos, &s) < 0)
		return -ENOMEM;
	p = cache_promo(c, s);
	p->idx = malloc((size_t)n * sizeof(*p->idx));
	p->res = calloc(n, sizeof(*p->res));
	p->from = calloc(n, sizeof(*p->from));
	p->kind = calloc(n, sizeof(*p->kind));
	p->out = malloc((size_t)n * sizeof(*p->out));
	p->want = NULL;
	if (!p->idx || !p->res || !p->from || !p->kind || !p->out) {
		promo_arrays_free(p);
		*p = (promo){ 0 };
		kvs_pool_free(&c->promos, s);
		return -ENOMEM;
	}
	p->n = 0;
	p->cap = n;
	p->pending = 0;
	*out = s;
	return 0;
}

void cache_promos_free(kvs_cache *c)
{
	for (uint32_t i = 0; i < kvs_pool_cap(&c->promos); i++)
		promo_arrays_free(cache_promo(c, i)); /* free ones: NULLs */
	kvs_pool_fini(&c->promos);
}

static void promo_free(kvs_cache *c, uint32_t s)
{
	promo *p = cache_promo(c, s);

	promo_arrays_free(p);
	*p = (promo){ 0 };
	kvs_pool_free(&c->promos, s);
}

/* A job for owner @o with room for @n records, wanting the @nwant block
 * hashes at @want (copied); pending 1 (the caller's own, so that nothing finishes
 * under it). Every other field is zero, as promo_free left it. */
static int promo_start(kvs_cache *c, kvs_owner *o, uint32_t n,
		       const kvs_hash *want, uint32_t nwant, uint32_t *out)
{
	int rc = promo_new(c, n, out);
	promo *p;

	if (rc < 0)
		return rc;
	p = cache_promo(c, *out);
	if (nwant && !(p->want = malloc(nwant * sizeof(kvs_hash)))) {
		promo_free(c, *out);
		return -ENOMEM;
	}
	if (nwant)
		memcpy(p->want, want, nwant * sizeof(kvs_hash));
	p->owner = o;
	p->ns = o->ns;
	p->nwant = nwant;
	p->pending = 1;
	return 0;
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

/* Fetched block @idx (a record made for it, pinned by the lookup) has its
 * bytes: committed, as if its writer had committed it here. */
static void fetched(kvs_cache *c, uint32_t idx, uint8_t from)
{
	kvs_rec *r = cache_rec(c, idx);
	ns *sp = cache_ns(c, r->ns);

	cache_note(c, from, KVS_TIER_NOTE_PROMOTED, 1);
	r->state = KVS_REC_READY;
	r->hits++;
	sp->info.writing--;
	sp->info.blocks++;
	cache_touch_atime(c, idx);
	kvs_policy_touch(cache_policy_of(c, idx), idx);
	cache_sync_evictable(c, idx);
	cache_persist_commit(c, idx);
	cache_tell(c, KVS_CACHE_EVENT_STORED, idx);
	r = cache_rec(c, idx);
	cache_fast_publish(c, idx, r);
}

/* A copy that failed its read (corrupt, stale, an I/O error) leaves its
 * tier, once unpinned; a block in no other tier goes with it. */
static void drop_copy(kvs_cache *c, uint32_t idx, uint8_t from)
{
	kvs_tier_mod *t = c->tier[from];
	kvs_tier_blk b;

	cache_blk(c, idx, &b);
	t->ops->store->drop(t, &b);
	if (cache_rec(c, idx)->tier == from) {
		cache_set_tier(c, idx, KVS_TIER_NONE);
		cache_forget(c, idx);
	}
}

/* A record made for a fetch that did not arrive (unpinned by now): its
 * slot and record go, as an aborted reserve's. */
static void drop_fetch(kvs_cache *c, uint32_t idx)
{
	cache_ns(c, cache_rec(c, idx)->ns)->info.writing--;
	cache_free_slot(c, idx);
	cache_forget(c, idx);
}

/* Every read of promotion @s is done: answer with the chain up to the first
 * block that failed; drop the failed ones. @answer: the owner's done
 * callback answers (a lookup that returned -EINPROGRESS). Returns the
 * hits, *lease the lease id. */
static int promo_finish(kvs_cache *c, uint32_t s, int answer, kvs_block *out,
			uint64_t *lid)
{
	promo *p = cache_promo(c, s);
	kvs_owner *o = p->owner;
	uint32_t hits = p->cut, nfetch = 0;
	int waited = p->waited;

	*lid = 0;
	if (p->query) {
		hits = p->qcount;
		if (o)
			o->promo = KVS_NONE;
		promo_free(c, s);
		if (answer && o && o->done)
			o->done(o->done_arg, (int)hits, 0, NULL);
		return (int)hits;
	}
	/* The wanted blocks never asked for or absent are misses (those with
	 * a record, below, as the lease ends). */
	for (uint32_t i = 0; i < p->n; i++)
		nfetch += p->kind[i] == POS_FETCH;
	cache_count_lookup(c, p->ns, 0, p->nwant - nfetch);
	for (uint32_t i = 0; i < p->cut; i++)
		if (p->res[i] < 0) {
			hits = i;
			break;
		}
	if (o) {
		*lid = cache_lookup_finish(c, p->lease, hits, out);
		o->promo = KVS_NONE;
	}
	/* Unpinned now: a block that failed verification leaves its tier
	 * and the table; its descendants become unreachable. */
	for (uint32_t i = 0; i < p->n; i++) {
		if (p->kind[i] == POS_READ && p->res[i] < 0)
			drop_copy(c, p->idx[i], p->from[i]);
		else if (p->kind[i] == POS_FETCH && p->res[i] != 0)
			drop_fetch(c, p->idx[i]);
	}
	/* Counted as before the tier interface: a lookup that waited for a
	 * store tier counts all its hits there. */
	for (uint32_t i = 0; i < p->n && waited; i++)
		if (p->from[i]) {
			cache_note(c, p->from[i], KVS_TIER_NOTE_LOOKUP_HIT, hits);
			break;
		}
	if (answer && o && o->done)
		o->done(o->done_arg, (int)hits, *lid, out);
	promo_free(c, s);
	return (int)hits;
}

/* One read or fetch of job @s is done. */
static void one_done(kvs_cache *c, uint32_t s)
{
	promo *p = cache_promo(c, s);
	uint64_t lid;

	if (--p->pending == 0)
		promo_finish(c, s, 1, p->out, &lid);
}

void kvs_tier_read_done(kvs_tier_mod *t, uint64_t cookie, int res)
{
	kvs_cache *c = t->cache;
	uint32_t s = (uint32_t)(cookie >> 32), pos = (uint32_t)cookie;
	promo *p = cache_promo(c, s);
	uint32_t idx = p->idx[pos];

	if (p->kind[pos] == POS_FETCH) {
		p->res[pos] = res;
		if (res == 0)
			fetched(c, idx, p->from[pos]);
		else
			p->stop = 1; /* the chain ends here: no further window */
	} else if (res == 0) {
		promoted(c, idx, p->from[pos]);
	} else {
		kvs_slab_free(c->slab, cache_rec(c, idx)->offset);
		p->res[pos] = res;
	}
	one_done(c, s);
}

/* Position @i of job @ps: a host slot, and the read of the record's copy
 * into it. Returns 1 (read in flight), 0 (in RAM now), or -1: the chain
 * is cut here. */
static int promote_one(kvs_cache *c, uint32_t ps, uint32_t i)
{
	promo *p = cache_promo(c, ps);
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
	cache_rec(c, idx)->offset = off;
	p->kind[i] = POS_READ;
	p->from[i] = t->ops->tier;
	cache_blk(c, idx, &b);
	rc = t->ops->store->read(t, &b, cache_host_ptr(c, off), (uint64_t)ps << 32 | i);
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

/* ---- the chain beyond the hits, from a shared tier --------------------- */

/* The facts of block @j of @p's wanted chain, which has no record. */
static void want_blk(const kvs_cache *c, const promo *p, uint32_t j,
		     kvs_tier_blk *b)
{
	*b = (kvs_tier_blk){ .idx = KVS_NONE, .ns = p->ns, .hash = p->want[j],
			     .bytes = cache_ns(c, p->ns)->info.block_bytes };
	if (j > 0)
		b->parent = p->want[j - 1];
	else if (p->n > 0)
		b->parent = cache_ns_key(p->ns, cache_rec(c, p->idx[p->n - 1])->hash);
}

static void probe(kvs_cache *c, uint32_t ps);

/* The tier holds the first @count blocks of the window of job @s's wanted
 * chain that its last probe asked about (none, @count < 0): records for
 * them, pinned by the lookup, in host slots, and their fetches; then the
 * next window's probe, if this one was whole, while they are in flight.
 * Nothing is fetched past a block the tier lacks or failed to answer for. */
void kvs_tier_probe_done(kvs_tier_mod *t, uint64_t cookie, int count)
{
	kvs_cache *c = t->cache;
	uint32_t s = (uint32_t)cookie & ~PROBE_BIT;
	promo *p = cache_promo(c, s);
	uint32_t prev = p->n ? p->idx[p->n - 1] : KVS_NONE;
	uint32_t from = p->wfrom, j;

	if (p->query) {
		/* Counted, nothing fetched: the next window if this one was
		 * whole, while the asker still waits. */
		if (count > 0)
			p->qcount += (uint32_t)count;
		if (count == (int)(p->probed - from) && p->owner)
			probe(c, s);
		one_done(c, s);
		return;
	}
	/* (stop: a fetch of an earlier window failed since this was sent) */
	for (j = from; p->owner && !p->stop && count > 0 &&
		       j < from + (uint32_t)count && j < p->probed; j++) {
		kvs_hash h = cache_ns_key(p->ns, p->want[j]);
		uint32_t idx = kvs_table_find(c->table, h), pos = p->n;
		kvs_tier_blk b;
		int rc;

		/* Made meanwhile by a writer here (BUSY or READY): stop. */
		if (idx != KVS_NONE && (cache_rec(c, idx)->ns != p->ns ||
					cache_rec(c, idx)->state != KVS_REC_GHOST))
			break;
		/* No room (the host tier's slots all pinned, the lease): the
		 * chain is cut at the room there is. */
		if (cache_reserve_one(c, p->owner, p->lease, h, prev, idx, 1, &idx) < 0) {
			c->stats->blocks_lookup_room_cut++;
			break;
		}
		p->idx[pos] = idx;
		p->kind[pos] = POS_FETCH;
		p->from[pos] = t->ops->tier;
		p->res[pos] = -EAGAIN; /* until it arrives */
		p->n++;
		p->cut = p->n;
		want_blk(c, p, j, &b);
		b.idx = idx;
		p->pending++; /* before: the fetch may complete at once */
		rc = t->ops->store->fetch(t, &b, cache_host_ptr(c, cache_rec(c, idx)->offset),
				   (uint64_t)s << 32 | pos);
		if (rc != 1) {
			p->pending--;
			break;
		}
		prev = idx;
	}
	if (j < p->probed || count < 0)
		p->stop = 1;
	else if (p->probed == p->nwant)
		c->stats->blocks_lookup_room_cut += p->clipped;
	else if (!p->stop)
		probe(c, s); /* window whole: the next, overlapping its fetches */
	one_done(c, s);
}

/* The lookup's chain goes on past its hits: ask the shared tier (the first
 * store tier that probes) whether it has the next window of blocks. */
static void probe(kvs_cache *c, uint32_t ps)
{
	promo *p = cache_promo(c, ps);
	kvs_tier_blk b[KVS_PROBE_WINDOW];
	kvs_tier_mod *t = NULL;
	uint32_t from = p->probed, k;

	for (uint32_t i = 0; i < c->nstores && !t; i++)
		if (c->stores[i]->ops->store->probe)
			t = c->stores[i];
	if (!t || from >= p->nwant || !p->owner)
		return;
	k = p->nwant - from < KVS_PROBE_WINDOW ? p->nwant - from : KVS_PROBE_WINDOW;
	for (uint32_t j = 0; j < k; j++)
		want_blk(c, p, from + j, &b[j]);
	p->wfrom = from;
	p->probed = from + k;
	p->pending++; /* before: the probe may answer at once */
	if (t->ops->store->probe(t, b, k, (uint64_t)(ps | PROBE_BIT)) != 1) {
		p->pending--;
		p->stop = 1;
	}
}

int cache_promote(kvs_cache *c, kvs_owner *o, uint32_t s, kvs_block *out,
		  const kvs_hash *want, uint32_t nwant, int clipped,
		  uint64_t *lease_out)
{
	lease *l = cache_lease(c, s);
	uint32_t n = l->n, ps;
	promo *p;
	int rc = promo_start(c, o, n + nwant, want, nwant, &ps);

	if (rc < 0) {
		cache_lookup_finish(c, s, 0, out);
		return rc;
	}
	p = cache_promo(c, ps);
	memcpy(p->idx, l->recs, (size_t)n * sizeof(uint32_t));
	p->lease = s;
	p->n = p->cut = n;
	p->clipped = clipped;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t t = cache_rec(c, p->idx[i])->tier;

		/* In RAM, or in the slot tier the owner maps: a hit as it is. */
		if (t == KVS_TIER_HOST || c->tpol[t])
			continue;
		rc = promote_one(c, ps, i);
		if (rc < 0) {
			p->cut = i;
			break;
		}
		p->pending += (uint32_t)rc;
	}
	if (p->cut == n)
		probe(c, ps);
	if (--p->pending > 0) {
		p->waited = 1;
		o->promo = ps;
		return -EINPROGRESS;
	}
	/* Nothing to wait for: in RAM already, or the slot or the read could
	 * not be had. */
	return promo_finish(c, ps, 0, out, lease_out);
}

int cache_query_remote(kvs_cache *c, kvs_owner *o, const kvs_hash *want,
		       uint32_t nwant, uint32_t local)
{
	uint32_t ps;
	promo *p;
	int rc = promo_start(c, o, 1, want, nwant, &ps);

	if (rc < 0)
		return rc;
	p = cache_promo(c, ps);
	p->query = 1;
	p->qcount = local;
	probe(c, ps);
	if (--p->pending > 0) {
		p->waited = 1;
		o->promo = ps;
		return -EINPROGRESS;
	}
	return promo_finish(c, ps, 0, NULL, &(uint64_t){ 0 });
}

void kvs_cache_query_expire(kvs_cache *c, kvs_owner *o)
{
	promo *p;

	if (o->promo == KVS_NONE || !(p = cache_promo(c, o->promo))->query)
		return;
	/* The job lives on until its probe answers (at the latest at
	 * --remote-timeout), unseen. */
	p->owner = NULL;
	o->promo = KVS_NONE;
	c->stats->blocks_query_bounded++;
	if (o->done)
		o->done(o->done_arg, (int)p->qcount, 0, NULL);
}
