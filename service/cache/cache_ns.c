/* cache_ns.c - trust domains and namespaces (see cache_int.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cache_int.h"
#include "kvs_log.h"

/* ---- trust domains ---------------------------------------------------- */

void cache_dom_destroy(dom *d)
{
	kvs_policy_destroy(d->policy);
	kvs_slab_destroy(d->slab);
	kvs_arena_destroy(d->arena);
	memset(d, 0, sizeof(*d));
}

/* A new trust domain for @uid: its own memfd arena, allocator and policy.
 * Errors: KVS_E_LIMIT (--max-tenants domains exist), -ENOMEM, -errno. */
int cache_dom_create(kvs_cache *c, uint32_t uid, uint32_t *out)
{
	return cache_dom_adopt(c, uid, NULL, out);
}

int cache_dom_adopt(kvs_cache *c, uint32_t uid, kvs_arena *arena,
		    uint32_t *out)
{
	dom *d;
	char name[48];
	int rc = 0;

	if (c->ndoms >= c->maxdoms)
		return KVS_E_LIMIT;
	d = &c->doms[c->ndoms];
	memset(d, 0, sizeof(*d));
	d->uid = uid;
	if (getrandom(&d->arena_id, sizeof(d->arena_id), 0) !=
	    sizeof(d->arena_id))
		d->arena_id = (uint64_t)(uintptr_t)d ^ (uint64_t)getpid() ^
			      ((uint64_t)uid << 32);
	if (c->by_uid)
		snprintf(name, sizeof(name), "kvshare-host-uid%u", uid);
	else
		snprintf(name, sizeof(name), "kvshare-host");
	if (arena)
		d->arena = arena;
	else
		rc = c->hugepages
			     ? kvs_arena_create_huge(name, c->dom_bytes, &d->arena)
			     : kvs_arena_create(name, c->dom_bytes, &d->arena);
	/* A tenant's arena serves at once; the shared one waits for
	 * kvs_cache_reserve_pages(), after any adoption has replaced it. */
	if (rc == 0 && c->by_uid)
		rc = kvs_arena_reserve(d->arena);
	if (rc == 0)
		rc = kvs_slab_create(kvs_arena_bytes(d->arena), c->page_bytes,
				     &d->slab);
	if (rc == 0)
		rc = kvs_policy_create(c->policy_name, c->table, &d->policy);
	if (rc < 0) {
		cache_dom_destroy(d);
		return rc;
	}
	c->leaf_only = kvs_policy_leaf_only(d->policy);
	*out = c->ndoms++;
	cache_persist_dom(c, *out);
	if (c->by_uid)
		kvs_info("tenant domain %u: uid %u, host arena of %llu bytes "
			 "(%u of %u domains)", *out, uid,
			 (unsigned long long)kvs_arena_bytes(d->arena), c->ndoms,
			 c->maxdoms);
	return 0;
}

/* The domain of owner @o, made on the first attach of its uid. */
int cache_dom_of_owner(kvs_cache *c, const kvs_owner *o, uint32_t *out)
{
	if (!c->by_uid) {
		*out = 0;
		return 0;
	}
	/* A peer whose credentials could not be read has no domain: lumping
	 * such peers together would share an arena between strangers. */
	if (o->uid == UINT32_MAX)
		return KVS_E_PERM;
	for (uint32_t i = 0; i < c->ndoms; i++) {
		if (c->doms[i].uid == o->uid) {
			*out = i;
			return 0;
		}
	}
	return cache_dom_create(c, o->uid, out);
}

/* ---- namespaces ------------------------------------------------------- */

static int ns_matches(const ns *s, const kvs_ns_desc *d)
{
	const kvs_ns_info *i = &s->info;

	return i->layers == d->layers && i->kv_heads == d->kv_heads &&
	       i->head_dim == d->head_dim && i->block_tokens == d->block_tokens &&
	       i->tp_rank == d->tp_rank && i->tp_size == d->tp_size &&
	       i->dtype == d->dtype && strcmp(s->model, d->model) == 0 &&
	       strcmp(s->adapter, d->adapter) == 0 &&
	       s->salt_len == d->salt_len &&
	       (d->salt_len == 0 || memcmp(s->salt, d->salt, d->salt_len) == 0);
}

/* Whether @d is a layout a block can have; *bytes: its block bytes.
 * Errors: KVS_E_LAYOUT. */
int cache_ns_check(const kvs_ns_desc *d, uint64_t *bytes)
{
	kvs_layout l = { .layers = d->layers, .kv_heads = d->kv_heads,
			 .head_dim = d->head_dim, .block_tokens = d->block_tokens,
			 .tp_rank = d->tp_rank, .tp_size = d->tp_size,
			 .dtype = (kvs_dtype)d->dtype };

	if (!d->model || !d->model[0] || !d->adapter || d->tp_size == 0 ||
	    d->tp_rank >= d->tp_size || kvs_dtype_bytes(l.dtype) == 0)
		return KVS_E_LAYOUT;
	*bytes = kvs_layout_block_bytes(&l);
	return *bytes ? 0 : KVS_E_LAYOUT;
}

/* A namespace with at most this many blocks, none in use, may have them
 * freed to be reclaimed (ns_drain). */
#define NS_DRAIN_MAX 64

static int ns_reclaim(kvs_cache *c, uint32_t uid);

/* Whether @uid may create one more namespace (--max-namespaces-per-uid):
 * at its cap, its oldest namespace that nothing uses is reclaimed.
 * O(namespaces), as cache_ns_find() that precedes it; the cap keeps both
 * short. Counted and logged (once a second) when it may not. */
static int ns_room_for(kvs_cache *c, uint32_t uid)
{
	struct timespec ts;
	uint32_t n = 0;
	uint64_t held;

	if (!c->max_ns_per_uid)
		return 1;
	for (uint32_t i = 0; i < c->nns; i++)
		n += !c->nss[i].gone && c->nss[i].charged &&
		     c->nss[i].creator == uid;
	if (n < c->max_ns_per_uid || ns_reclaim(c, uid))
		return 1;
	c->stats->namespaces_refused++;
	c->stats->errors_limit++;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (kvs_ratelimit_ok(&c->rl_ns, (uint64_t)ts.tv_sec * 1000u +
				       (uint64_t)ts.tv_nsec / 1000000u,
			     1000, &held))
		kvs_warn("refusing a new namespace for uid %u: it made %u "
			 "(--max-namespaces-per-uid; %" PRIu64 " refusals not "
			 "logged since the last line)", uid, n, held);
	return 0;
}

/* Distinct block sizes of @uid's namespaces in domain @d (at most @cap
 * counted); *has: whether @bytes is one of them. */
static uint32_t ns_sizes_of(const kvs_cache *c, uint32_t uid, uint32_t d,
			    uint64_t bytes, uint32_t cap, int *has)
{
	uint64_t seen[KVS_SLAB_MAX_CLASSES];
	uint32_t n = 0, k;

	*has = 0;
	for (uint32_t i = 0; i < c->nns && n < cap; i++) {
		const ns *s = &c->nss[i];

		if (s->gone || !s->charged || s->creator != uid || s->dom != d)
			continue;
		*has |= s->info.block_bytes == bytes;
		for (k = 0; k < n && seen[k] != s->info.block_bytes; k++)
			;
		if (k == n)
			seen[n++] = s->info.block_bytes;
	}
	return n;
}

/* A namespace refused for its block size: counted; whether to log it
 * (once a second, *held the lines not logged since). */
static int sizes_refused(kvs_cache *c, uint64_t *held)
{
	struct timespec ts;

	c->stats->namespaces_refused_sizes++;
	c->stats->errors_limit++;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return kvs_ratelimit_ok(&c->rl_ns, (uint64_t)ts.tv_sec * 1000u +
					   (uint64_t)ts.tv_nsec / 1000000u,
				1000, held);
}

/* Whether @uid's namespaces in domain @d may have block size @bytes
 * (--max-block-sizes-per-uid): one they have is free; at the budget, its
 * idle namespaces are reclaimed, oldest first, while that helps. Counted
 * and logged (once a second) when they may not. */
static int ns_sizes_room(kvs_cache *c, uint32_t uid, uint32_t d, uint64_t bytes)
{
	uint32_t max = c->max_sizes_per_uid, n;
	uint64_t held;
	int has;

	if (!max)
		return 1;
	do {
		n = ns_sizes_of(c, uid, d, bytes, max, &has);
		if (has || n < max)
			return 1;
	} while (ns_reclaim(c, uid));
	if (sizes_refused(c, &held))
		kvs_warn("refusing a namespace of %llu-byte blocks for uid %u: "
			 "its namespaces have %u block sizes "
			 "(--max-block-sizes-per-uid; %" PRIu64 " refusals not "
			 "logged since the last line)",
			 (unsigned long long)bytes, uid, n, held);
	return 0;
}

/* The id of domain @d's namespace for @desc, or 0. */
uint32_t cache_ns_find(const kvs_cache *c, uint32_t d, const kvs_ns_desc *desc)
{
	for (uint32_t i = 0; i < c->nns; i++)
		if (!c->nss[i].gone && c->nss[i].dom == d &&
		    ns_matches(&c->nss[i], desc))
			return i + 1;
	return 0;
}

/* Tell the store tiers about namespace @id (they persist it, or key
 * blocks by it), all but @except (the tier restoring it, or NULL). */
static kvs_ns_desc ns_desc(const ns *s)
{
	return (kvs_ns_desc){ .model = s->model, .adapter = s->adapter,
			      .salt = (const uint8_t *)s->salt,
			      .salt_len = s->salt_len, .layers = s->info.layers,
			      .kv_heads = s->info.kv_heads,
			      .head_dim = s->info.head_dim,
			      .block_tokens = s->info.block_tokens,
			      .tp_rank = s->info.tp_rank,
			      .tp_size = s->info.tp_size, .dtype = s->info.dtype };
}

static void ns_tell_tiers(kvs_cache *c, uint32_t id, const kvs_tier_mod *except)
{
	kvs_ns_desc d = ns_desc(cache_ns(c, id));

	for (uint32_t i = 0; i < c->nstores; i++)
		if (c->stores[i] != except && c->stores[i]->ops->store->ns_created)
			c->stores[i]->ops->store->ns_created(c->stores[i], id, &d);
}

void cache_ns_tell_store(kvs_cache *c, kvs_tier_mod *t)
{
	kvs_ns_desc d;

	for (uint32_t i = 0; i < c->nns && t->ops->store->ns_created; i++) {
		if (c->nss[i].gone)
			continue;
		d = ns_desc(&c->nss[i]);
		t->ops->store->ns_created(t, i + 1, &d);
	}
}

/* Give up namespace @s's layout: its id is free again (a hole), and its
 * slot class if no other namespace holds it. */
static void ns_release(kvs_cache *c, ns *s)
{
	if (!s->gone)
		kvs_slab_class_put(c->doms[s->dom].slab, s->cls);
	/* And its class in each slot tier (the GPU tier's 256 are shared by
	 * every namespace that reserves there). */
	for (uint8_t t = 0; !s->gone && t < KVS_TIER_MAX; t++)
		if (s->tcls[t] != NO_CLASS && c->tier[t] && c->tier[t]->ops->slot)
			c->tier[t]->ops->slot->class_put(c->tier[t], s->tcls[t]);
	free(s->model);
	free(s->adapter);
	free(s->salt);
	memset(s, 0, sizeof(*s));
	s->gone = 1;
}

/*
 * The slot of namespace id @at (0: the first free id, else a new one at
 * the end). Ids up to @at that do not exist yet are made free (the
 * namespaces file skipped them); @at in use is given up (a later entry of
 * the id in that file: the id was given to another layout, and no block
 * of the first is left).
 */
static int ns_slot(kvs_cache *c, uint32_t at, uint32_t *id)
{
	uint32_t want = at;
	ns *nn;

	for (uint32_t i = 0; !want && i < c->nns; i++)
		if (c->nss[i].gone)
			want = i + 1;
	if (!want)
		want = c->nns + 1;
	if (want > c->nns) {
		nn = realloc(c->nss, (size_t)want * sizeof(*nn));
		if (!nn)
			return -ENOMEM;
		c->nss = nn;
		for (; c->nns < want; c->nns++) {
			memset(&nn[c->nns], 0, sizeof(*nn));
			nn[c->nns].gone = 1;
		}
	}
	if (!c->nss[want - 1].gone)
		ns_release(c, &c->nss[want - 1]);
	*id = want;
	return 0;
}

/* Namespace @id (a free slot) becomes @desc's, in domain @d. */
static int ns_fill(kvs_cache *c, uint32_t id, const kvs_ns_desc *desc,
		   uint32_t d, uint32_t cls, uint64_t bytes)
{
	ns *s = cache_ns(c, id);

	memset(s, 0, sizeof(*s));
	s->model = strdup(desc->model);
	s->adapter = strdup(desc->adapter);
	s->salt = malloc(desc->salt_len + 1u);
	if (!s->model || !s->adapter || !s->salt) {
		free(s->model);
		free(s->adapter);
		free(s->salt);
		memset(s, 0, sizeof(*s));
		s->gone = 1;
		return -ENOMEM;
	}
	if (desc->salt_len)
		memcpy(s->salt, desc->salt, desc->salt_len);
	s->salt[desc->salt_len] = '\0';
	s->salt_len = desc->salt_len;
	s->cls = cls;
	s->dom = d;
	s->born = ++c->ns_born;
	for (uint32_t t = 0; t < KVS_TIER_MAX; t++)
		s->tcls[t] = NO_CLASS;
	s->info = (kvs_ns_info){
		.id = id, .model = s->model, .adapter = s->adapter,
		.salted = desc->salt_len > 0, .layers = desc->layers,
		.kv_heads = desc->kv_heads, .head_dim = desc->head_dim,
		.block_tokens = desc->block_tokens, .tp_rank = desc->tp_rank,
		.tp_size = desc->tp_size, .dtype = desc->dtype,
		.block_bytes = bytes, .tenant = c->by_uid,
		.uid = c->by_uid ? c->doms[d].uid : 0,
	};
	return 0;
}

/* A namespace belongs to domain @d: its blocks live in that arena only. */
int cache_ns_create(kvs_cache *c, const kvs_ns_desc *desc, uint32_t d,
		    const kvs_tier_mod *from, uint32_t at, uint32_t *id)
{
	uint64_t bytes, held;
	uint32_t cls;
	int rc = cache_ns_check(desc, &bytes);

	if (rc < 0)
		return rc;
	rc = kvs_slab_class(c->doms[d].slab, bytes, &cls);
	if (rc == -ENOSPC) {
		if (sizes_refused(c, &held))
			kvs_warn("refusing a namespace of %llu-byte blocks: the "
				 "host tier serves %u block sizes already (%"
				 PRIu64 " refusals not logged since the last "
				 "line)", (unsigned long long)bytes,
				 KVS_SLAB_MAX_CLASSES, held);
		return KVS_E_LIMIT;
	}
	if (rc < 0)
		return rc == -ENOMEM ? rc : KVS_E_LAYOUT;
	if ((rc = ns_slot(c, at, id)) < 0 ||
	    (rc = ns_fill(c, *id, desc, d, cls, bytes)) < 0) {
		kvs_slab_class_put(c->doms[d].slab, cls);
		return rc;
	}
	ns_tell_tiers(c, *id, from);
	cache_persist_ns(c, *id);
	kvs_info("namespace %u: model '%s'%s%s, %u layers x %u kv heads x %u dim, "
		 "%u tokens/block, tp %u/%u, %llu bytes/block",
		 *id, desc->model, *desc->adapter ? " adapter " : "",
		 desc->adapter, desc->layers, desc->kv_heads, desc->head_dim,
		 desc->block_tokens, desc->tp_rank, desc->tp_size,
		 (unsigned long long)bytes);
	return 0;
}

/* Whether a promotion in flight (its client may be gone) is of @id. */
static int ns_promoting(const kvs_cache *c, uint32_t id)
{
	for (uint32_t i = 0; i < kvs_pool_cap(&c->promos); i++) {
		const promo *p = kvs_pool_live_at(&c->promos, i);

		if (p && p->ns == id)
			return 1;
	}
	return 0;
}

/* Whether namespace @s (of id @id) may be reclaimed for its creator @uid:
 * made by an attach of @uid, no client, no promotion in flight. */
static int ns_idle(const kvs_cache *c, const ns *s, uint32_t id, uint32_t uid)
{
	return !s->gone && s->charged && s->creator == uid && !s->info.clients &&
	       !ns_promoting(c, id);
}

/*
 * ns_drain - free every block of namespace @id, when they are few
 * (NS_DRAIN_MAX), all committed, unpinned and in host RAM only (no store
 * tier: an eviction there is a demotion, which keeps the block). Leaves
 * first, a pass per level, until a pass frees none. O(records) for the
 * scan. Returns whether none is left.
 */
static int ns_drain(kvs_cache *c, uint32_t id)
{
	uint32_t v[NS_DRAIN_MAX], n = 0, span = kvs_cache_rec_span(c), m;
	uint8_t freed[NS_DRAIN_MAX];
	ns *s = cache_ns(c, id);

	if (c->nstores || s->recs > NS_DRAIN_MAX)
		return 0;
	for (uint32_t i = 0; i < span; i++) {
		const kvs_rec *r = cache_rec(c, i);

		if (r->state == KVS_REC_FREE || r->ns != id ||
		    r->state == KVS_REC_GHOST)
			continue; /* a ghost goes with its last child */
		if (r->state != KVS_REC_READY || r->refs || r->tier != KVS_TIER_HOST)
			return 0;
		v[n++] = i;
	}
	for (uint32_t pass = 0; n && pass < NS_DRAIN_MAX; pass++, n = m) {
		kvs_cache_free_recs(c, v, n, KVS_CACHE_EVENT_EVICTED, freed);
		m = 0;
		for (uint32_t k = 0; k < n; k++)
			if (!freed[k])
				v[m++] = v[k];
		if (m == n)
			break; /* held (a fast-path pin): it stays */
	}
	return s->recs == 0;
}

/*
 * ns_reclaim - give up @uid's oldest namespace that nothing uses: no
 * client, no record in any tier (ghosts included), no promotion in flight;
 * failing that, its oldest idle one whose few blocks can all be freed
 * (ns_drain: one-block namespaces of random salts). Its id is free for the
 * next namespace: nothing keyed by it is left here, and a store tier is
 * told the new layout of the id before it keeps a block of it (the SSD
 * tier files it first, tier_ssd_restore.c). Only namespaces an attach made
 * are reclaimed; those a tier restored stay. Returns 1 when one was given
 * up.
 */
static int ns_reclaim(kvs_cache *c, uint32_t uid)
{
	ns *empty = NULL, *few = NULL;

	for (uint32_t i = 0; i < c->nns; i++) {
		ns *s = &c->nss[i];

		if (!ns_idle(c, s, i + 1, uid))
			continue;
		if (!s->recs && (!empty || s->born < empty->born))
			empty = s;
		else if (s->recs && s->recs <= NS_DRAIN_MAX &&
			 (!few || s->born < few->born))
			few = s;
	}
	if (!empty && few && ns_drain(c, few->info.id))
		empty = few;
	if (!empty)
		return 0;
	kvs_debug("namespace %u of uid %u reclaimed (no client, no block)",
		  empty->info.id, uid);
	ns_release(c, empty);
	c->stats->namespaces_reclaimed++;
	return 1;
}

void cache_ns_free_all(kvs_cache *c)
{
	for (uint32_t i = 0; i < c->nns; i++) {
		free(c->nss[i].model);
		free(c->nss[i].adapter);
		free(c->nss[i].salt);
	}
	free(c->nss);
	c->nss = NULL;
	c->nns = 0;
}

int kvs_cache_attach(kvs_cache *c, kvs_owner *o, const kvs_ns_desc *desc,
		     int maps_slots, uint32_t *ns_id, uint64_t *block_bytes)
{
	uint32_t id = 0, d;
	uint64_t bytes;
	int rc;

	/* The namespace key includes the domain: two uids with the same
	 * layout and salt get two namespaces, and never share a block.
	 * A bad layout makes no domain. */
	if (o->ns) {
		d = cache_ns(c, o->ns)->dom;
	} else if ((rc = cache_ns_check(desc, &bytes)) < 0 ||
		   bytes > c->dom_bytes) {
		/* A block no domain's arena can hold is refused before its
		 * uid's arena is made for it (the slab allocator would only
		 * refuse it after). */
		c->stats->errors_layout++;
		return rc < 0 ? rc : KVS_E_LAYOUT;
	} else if ((rc = cache_dom_of_owner(c, o, &d)) < 0) {
		if (rc == KVS_E_LIMIT) {
			c->stats->errors_limit++;
			kvs_warn("refusing uid %u: %u tenant domains exist "
				 "(--max-tenants)", o->uid, c->maxdoms);
		}
		return rc;
	}
	id = cache_ns_find(c, d, desc);
	if (o->ns && o->ns != id) {
		c->stats->errors_layout++;
		return KVS_E_ATTACHED;
	}
	if (!id) {
		/* One namespace per distinct salt: an API user that picks
		 * salts must not make them without bound. */
		if (!ns_room_for(c, o->uid) ||
		    (cache_ns_check(desc, &bytes) == 0 &&
		     !ns_sizes_room(c, o->uid, d, bytes)))
			return KVS_E_LIMIT;
		rc = cache_ns_create(c, desc, d, NULL, 0, &id);
		if (rc < 0) {
			if (rc == KVS_E_LAYOUT)
				c->stats->errors_layout++;
			return rc;
		}
		cache_ns(c, id)->creator = o->uid;
		cache_ns(c, id)->charged = 1;
	}
	if (!o->ns) {
		o->ns = id;
		cache_ns(c, id)->info.clients++;
		c->doms[d].clients++;
	}
	/* The slot tier (one at most: the GPU tier) serves owners that map it. */
	o->above = 0;
	for (uint8_t t = 1; t < KVS_TIER_MAX && maps_slots; t++)
		if (c->tier[t] && c->tier[t]->ops->slot)
			o->above = t;
	*ns_id = id;
	*block_bytes = cache_ns(c, id)->info.block_bytes;
	return 0;
}
