/*
 * cache_pinslab.c - the host slabs that each uid's leases hold blocks in,
 * and their budget (--max-pinned-share-per-uid).
 *
 * A slab is cut again for another block size only once every slot of it is
 * free (storage/host/kvs_slab.h), so one pinned block holds its whole slab:
 * a uid that pins one block in each slab of an arena denies the arena to
 * every other block size with a few pins. What a uid's pins cost is
 * therefore counted in slabs. One map counts, for each (uid, domain, slab),
 * the uid's pins in that slab; an entry of the same map with no slab
 * (KVS_NONE) sums, for each (uid, domain), the pages of the slabs the uid
 * holds. A lookup's pin that would make its uid hold one slab more, past
 * its share of the domain's pages, is not taken: the lookup's chain is cut
 * there (fewer hits, a miss, never an error; leases.refused_slabs). A pin
 * in a slab the uid holds already is always taken, so the budget costs
 * dense chains nothing. With an arena per uid (--tenant-arenas uid) there
 * is nobody else's block size to deny, and no budget. Nor is there one for
 * an operator (the daemon's uid, root, --admin-uid), who may flush the
 * whole cache anyway: on a private socket (0600, the default) every client
 * is one, and the workers of one uid are never cut by their own pins.
 *
 * A reserve's new host slots are charged the same way, where the slot is
 * had (a client that makes one hole per slab, by evicting its own blocks,
 * then reserves into each and never commits, holds every slab too): past
 * the share the reserve's chain ends there (KVS_BLOCK_FULL), as when the
 * tier is full. A chain's blocks fetched from the remote tier count too.
 *
 * Each lease entry remembers the slab it was charged to (lease.held), so an
 * unpin never asks the allocator: a record may change tiers while pinned.
 * A record promoted into the host tier from a store tier is not charged:
 * it takes its slot where the allocator gives it (the partial slabs first),
 * never one a client picks.
 *
 * The fast path's pins (a client writes them into its pin area, the daemon
 * sees them only when it would evict) cannot be refused when taken, so a
 * worker uid's pin areas are granted pages of its share when they are
 * made (kvs_cache_fast_grant): an area's pins protect blocks in at most its
 * grant's pages of distinct slabs (service/fast/fastpins.c counts them),
 * and what the uid's socket leases may hold is its share less its areas'
 * grants. Two more entries per (uid, domain) hold them: slab PS_FAST_PAGES
 * (pages: the pages granted) and PS_FAST_PINS (pages: the pins granted,
 * which are bounded per uid as well as per domain).
 *
 * Cost: O(1) expected a pin and an unpin (open addressing, linear probes,
 * deletion by backward shift, never a scan of the pins); memory: 20 bytes
 * an entry, at most two entries for every pinned block.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache_int.h"
#include "kvs_log.h"

#define PS_MIN_CAP 64u
/* Entries that are no slab (slab ids are small integers). */
#define PS_FAST_PINS (KVS_NONE - 2)
#define PS_FAST_PAGES (KVS_NONE - 1)
#define PS_IS_SLAB(s) ((s) < PS_FAST_PINS)
/* A pin area's grant: this share of its uid's pages, of which all its
 * areas together have at most a half (the rest is its socket leases'). */
#define PS_FAST_AREA_DIV 8u
#define PS_FAST_UID_DIV 2u

static uint32_t ps_hash(uint32_t uid, uint32_t d, uint32_t slab)
{
	uint64_t x = ((uint64_t)uid << 32 | d) ^
		     ((uint64_t)slab * 0x9e3779b97f4a7c15ull);

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (uint32_t)x;
}

static int ps_is(const struct pin_slab *e, uint32_t uid, uint32_t d,
		 uint32_t slab)
{
	return e->pins && e->uid == uid && e->dom == d && e->slab == slab;
}

static struct pin_slab *ps_find(const kvs_cache *c, uint32_t uid, uint32_t d,
				uint32_t slab)
{
	uint32_t m = c->npslab_cap - 1, i;

	if (!c->npslab)
		return NULL;
	for (i = ps_hash(uid, d, slab) & m; c->pslab[i].pins; i = (i + 1) & m)
		if (ps_is(&c->pslab[i], uid, d, slab))
			return &c->pslab[i];
	return NULL;
}

/* A new entry (not there yet), room made beforehand (ps_room). */
static struct pin_slab *ps_insert(kvs_cache *c, uint32_t uid, uint32_t d,
				  uint32_t slab, uint32_t pins, uint32_t pages)
{
	uint32_t m = c->npslab_cap - 1, i;

	for (i = ps_hash(uid, d, slab) & m; c->pslab[i].pins; i = (i + 1) & m)
		;
	c->pslab[i] = (struct pin_slab){ .uid = uid, .dom = d, .slab = slab,
					 .pins = pins, .pages = pages };
	c->npslab++;
	return &c->pslab[i];
}

/* Room for @more entries at a load of at most a half. Errors: -ENOMEM. */
static int ps_room(kvs_cache *c, uint32_t more)
{
	struct pin_slab *old = c->pslab, *e;
	uint32_t cap = c->npslab_cap ? c->npslab_cap : PS_MIN_CAP, ocap;

	while ((uint64_t)(c->npslab + more) * 2 > cap)
		cap *= 2;
	if (cap == c->npslab_cap)
		return 0;
	e = calloc(cap, sizeof(*e));
	if (!e)
		return -ENOMEM;
	ocap = c->npslab_cap;
	c->pslab = e;
	c->npslab_cap = cap;
	c->npslab = 0;
	for (uint32_t i = 0; i < ocap; i++)
		if (old[i].pins)
			ps_insert(c, old[i].uid, old[i].dom, old[i].slab,
				  old[i].pins, old[i].pages);
	free(old);
	return 0;
}

/* Empty @e; the entries after it in its cluster move back to their home or
 * as near it as they can, so no probe ever stops early. */
static void ps_delete(kvs_cache *c, struct pin_slab *e)
{
	uint32_t m = c->npslab_cap - 1, i = (uint32_t)(e - c->pslab), j, h;

	for (j = (i + 1) & m; c->pslab[j].pins; j = (j + 1) & m) {
		h = ps_hash(c->pslab[j].uid, c->pslab[j].dom,
			    c->pslab[j].slab) & m;
		/* j may move to i unless its home lies in (i, j] */
		if (i <= j ? (h > i && h <= j) : (h > i || h <= j))
			continue;
		c->pslab[i] = c->pslab[j];
		i = j;
	}
	c->pslab[i].pins = 0;
	c->npslab--;
}

int cache_pinslab_charge(kvs_cache *c, const kvs_owner *o, uint32_t d,
			 uint64_t off, uint32_t *held)
{
	uint32_t slab, pages = 0, uid = o->uid, have, limit;
	struct pin_slab *e, *t;
	const dom *dm = &c->doms[d];

	*held = KVS_NONE;
	/* With an arena per uid (--tenant-arenas uid) a uid's pins deny
	 * nobody else anything: no budget. */
	if (!c->max_pinned_share || c->by_uid || o->op)
		return 0;
	slab = kvs_slab_of(dm->slab, off, &pages);
	if (slab == KVS_NONE)
		return 0;
	if ((e = ps_find(c, uid, d, slab))) {
		e->pins++;
		*held = slab;
		return 0;
	}
	t = ps_find(c, uid, d, KVS_NONE);
	have = t ? t->pages : 0;
	/* What the uid's pin areas were granted is not the leases'. */
	if ((e = ps_find(c, uid, d, PS_FAST_PAGES)))
		have += e->pages;
	limit = (uint32_t)((uint64_t)kvs_slab_pages(dm->slab) *
			   c->max_pinned_share / 100);
	if (have + pages > limit) {
		c->stats->leases_refused_slabs++;
		return KVS_E_LIMIT;
	}
	if (ps_room(c, 2) < 0)
		return -ENOMEM;
	ps_insert(c, uid, d, slab, 1, pages);
	if ((t = ps_find(c, uid, d, KVS_NONE)))
		t->pages += pages;
	else
		ps_insert(c, uid, d, KVS_NONE, 1, pages);
	c->pslab_pages += pages;
	*held = slab;
	return 0;
}

int cache_pinslab_take(kvs_cache *c, const kvs_owner *o, uint32_t idx,
		       uint32_t *held)
{
	const kvs_rec *r = cache_rec(c, idx);

	*held = KVS_NONE;
	if (r->tier != KVS_TIER_HOST)
		return 0;
	return cache_pinslab_charge(c, o, cache_ns(c, r->ns)->dom, r->offset,
				    held);
}

void cache_pinslab_drop(kvs_cache *c, const kvs_owner *o, uint32_t idx,
			uint32_t held)
{
	if (held != KVS_NONE)
		cache_pinslab_uncharge(c, o, cache_ns(c, cache_rec(c, idx)->ns)->dom,
				       held);
}

void cache_pinslab_uncharge(kvs_cache *c, const kvs_owner *o, uint32_t d,
			    uint32_t held)
{
	uint32_t pages;
	struct pin_slab *e, *t;

	if (held == KVS_NONE)
		return;
	e = ps_find(c, o->uid, d, held);
	if (!e || --e->pins)
		return;
	pages = e->pages;
	ps_delete(c, e);
	t = ps_find(c, o->uid, d, KVS_NONE);
	if (!t)
		return;
	t->pages -= pages;
	c->pslab_pages -= pages;
	if (!t->pages)
		ps_delete(c, t);
}

/* Every lease entry's charge is one pin of its entry, each total the pages
 * of its uid's slabs, within the budget (tests only: O(pins + entries^2)). */
int cache_pinslab_check(const kvs_cache *c)
{
	uint32_t *pins = calloc(c->npslab_cap + 1, sizeof(*pins)), j;
	uint64_t pages, all = 0, limit;
	int rc = pins ? 0 : -ENOMEM;

	for (uint32_t s = 0; s < kvs_pool_cap(&c->leases) && rc == 0; s++) {
		const lease *l = kvs_pool_live_at(&c->leases, s);

		for (uint32_t i = 0; l && i < l->n; i++) {
			const struct pin_slab *e;

			if (l->held[i] == KVS_NONE)
				continue;
			e = ps_find(c, l->owner->uid,
				    cache_ns(c, cache_rec(c, l->recs[i])->ns)->dom,
				    l->held[i]);
			if (!e)
				rc = KVS_E_INTERNAL;
			else
				pins[e - c->pslab]++;
		}
	}
	for (j = 0; j < c->npslab_cap && rc == 0; j++) {
		const struct pin_slab *t = &c->pslab[j];

		if (t->pins && !PS_IS_SLAB(t->slab) && t->slab != KVS_NONE)
			continue; /* a fast grant (kvs_cache_fast_grant) */
		if (!t->pins || t->slab != KVS_NONE) {
			if (t->pins && pins[j] != t->pins)
				rc = KVS_E_INTERNAL;
			continue;
		}
		pages = 0;
		for (uint32_t k = 0; k < c->npslab_cap; k++)
			if (c->pslab[k].pins && PS_IS_SLAB(c->pslab[k].slab) &&
			    c->pslab[k].uid == t->uid && c->pslab[k].dom == t->dom)
				pages += c->pslab[k].pages;
		limit = (uint64_t)kvs_slab_pages(c->doms[t->dom].slab) *
			c->max_pinned_share / 100;
		if (pages != t->pages || pages > limit)
			rc = KVS_E_INTERNAL;
		all += pages;
	}
	if (rc == 0 && all != c->pslab_pages)
		rc = KVS_E_INTERNAL;
	if (rc)
		kvs_err("cache invariant failed: the pinned slabs' counts");
	free(pins);
	return rc;
}

/* Add @delta (may be negative) to entry @slab of (@uid, @d), which is
 * made on the way up and dropped at 0. Errors: -ENOMEM (unchanged). */
static int ps_add(kvs_cache *c, uint32_t uid, uint32_t d, uint32_t slab,
		  int64_t delta)
{
	struct pin_slab *e = ps_find(c, uid, d, slab);

	if (delta == 0)
		return 0;
	if (!e) {
		if (delta < 0 || ps_room(c, 1) < 0)
			return delta < 0 ? 0 : -ENOMEM;
		ps_insert(c, uid, d, slab, 1, (uint32_t)delta);
		return 0;
	}
	e->pages = (uint32_t)((int64_t)e->pages + delta);
	if (e->pages == 0)
		ps_delete(c, e);
	return 0;
}

int kvs_cache_fast_grant(kvs_cache *c, const kvs_owner *o, uint32_t want,
			 uint32_t uid_pins, kvs_cache_grant *g)
{
	uint32_t d, limit, pins = want, pages = KVS_NONE, had;
	const struct pin_slab *e;

	*g = (kvs_cache_grant){ .uid = o->uid, .pins = 0, .pages = KVS_NONE };
	if (!o->ns)
		return KVS_E_NOTATTACHED;
	d = cache_ns(c, o->ns)->dom;
	g->dom = d;
	/* An arena per uid is a domain per uid: its bound is the uid's. */
	if (o->op || c->by_uid) {
		g->pins = want;
		return 0;
	}
	e = ps_find(c, o->uid, d, PS_FAST_PINS);
	had = e ? e->pages : 0;
	if (had >= uid_pins)
		return KVS_E_LIMIT;
	if (pins > uid_pins - had)
		pins = uid_pins - had;
	if (c->max_pinned_share) {
		limit = (uint32_t)((uint64_t)kvs_slab_pages(c->doms[d].slab) *
				   c->max_pinned_share / 100);
		e = ps_find(c, o->uid, d, PS_FAST_PAGES);
		had = e ? e->pages : 0;
		if (had >= limit / PS_FAST_UID_DIV)
			return KVS_E_LIMIT;
		pages = limit / PS_FAST_AREA_DIV;
		if (pages > limit / PS_FAST_UID_DIV - had)
			pages = limit / PS_FAST_UID_DIV - had;
		if (pages == 0)
			return KVS_E_LIMIT;
	}
	if (ps_room(c, 2) < 0)
		return -ENOMEM;
	ps_add(c, o->uid, d, PS_FAST_PINS, pins);
	if (pages != KVS_NONE)
		ps_add(c, o->uid, d, PS_FAST_PAGES, pages);
	g->pins = pins;
	g->pages = pages;
	g->charged = 1;
	return 0;
}

void kvs_cache_fast_ungrant(kvs_cache *c, kvs_cache_grant *g)
{
	if (!g->charged)
		return;
	ps_add(c, g->uid, g->dom, PS_FAST_PINS, -(int64_t)g->pins);
	if (g->pages != KVS_NONE)
		ps_add(c, g->uid, g->dom, PS_FAST_PAGES, -(int64_t)g->pages);
	g->charged = 0;
}

uint32_t kvs_cache_rec_slab(const kvs_cache *c, const kvs_rec *r,
			    uint32_t *pages)
{
	*pages = 0;
	if (r->tier != KVS_TIER_HOST || r->ns == 0 || r->ns > c->nns)
		return KVS_NONE;
	return kvs_slab_of(c->doms[cache_ns(c, r->ns)->dom].slab, r->offset,
			   pages);
}

void cache_pinslab_free(kvs_cache *c)
{
	free(c->pslab);
	c->pslab = NULL;
	c->npslab = c->npslab_cap = 0;
}
