/* cache.c - blocks, namespaces, leases, eviction (see kvs_cache.h). */
#define _GNU_SOURCE
#include "kvs_cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "kvs_arena.h"
#include "kvs_cache_admin.h"
#include "kvs_fastidx.h"
#include "kvs_log.h"
#include "kvs_policy.h"
#include "kvs_slab.h"
#include "kvs_table.h"
#include "cache_int.h"
#include "tier_ssd.h"
#include "tier_gpu.h"

static uint32_t clock_s(const kvs_cache *c);
static void tell(kvs_cache *c, uint32_t kind, uint32_t idx);
static void touch_atime(kvs_cache *c, uint32_t idx);

#define NONE KVS_REC_NONE
#define alloc_slot cache_alloc_slot
#define lease_id cache_lease_id
#define lease_new cache_lease_new
#define lease_room cache_lease_room
#define lease_free cache_lease_free

/* The table is keyed by (namespace, hash): blocks of two namespaces never
 * share a record, so a client can neither find nor block (BUSY) another
 * namespace's block even when it presents that block's exact hash. The mix
 * is invertible (xor), so a record's key still names its block. */
static inline kvs_hash ns_key(uint32_t ns_id, kvs_hash h)
{
	return cache_ns_key(ns_id, h);
}

static kvs_rec *rec(const kvs_cache *c, uint32_t idx)
{
	return kvs_table_rec(c->table, idx);
}

/* ---- evictable set ---------------------------------------------------- */

/* A record is evictable when committed, unpinned and (for a leaf-only
 * policy) a leaf; the policy holds exactly the evictable records. Call after
 * any of those changes. */
/* With the SSD tier on, "leaf" means no child in host RAM: children that
 * live only on SSD do not keep a parent in RAM. */
/* With the GPU tier on, a GPU block is a leaf for GPU eviction when no
 * child is in the GPU tier (it is demoted, not dropped: the prefix stays
 * whole across tiers); it sits in the GPU tier's own policy. */
static int evictable(const kvs_cache *c, uint32_t idx, const kvs_rec *r)
{
	uint32_t kids = c->ssd ? tier_ssd_kids(c, idx) : r->children;

	if (r->state != KVS_REC_READY || r->refs != 0)
		return 0;
	if (r->tier == KVS_TIER_GPU)
		return !c->leaf_only || tier_gpu_kids(c, idx) == 0;
	return r->tier == KVS_TIER_HOST && (kids == 0 || !c->leaf_only);
}

/* The policy that orders record @idx: its tier's. */
kvs_policy *cache_policy_of(const kvs_cache *c, uint32_t idx)
{
	const kvs_rec *r = rec(c, idx);

	return r->tier == KVS_TIER_GPU ? tier_gpu_policy(c)
				       : cache_ns_dom(c, r->ns)->policy;
}

void cache_sync_evictable(kvs_cache *c, uint32_t idx)
{
	int want = evictable(c, idx, rec(c, idx));
	kvs_rec *r = rec(c, idx);

	if (want && r->pol == NONE)
		kvs_policy_add(cache_policy_of(c, idx), idx);
	else if (!want && r->pol != NONE)
		kvs_policy_del(cache_policy_of(c, idx), idx);
}

/* Give back record @idx's slot, in the arena of its tier. */
static void free_slot(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = rec(c, idx);

	if (r->tier == KVS_TIER_GPU)
		tier_gpu_free(c, r->offset);
	else
		kvs_slab_free(cache_ns_dom(c, r->ns)->slab, r->offset);
}

#define sync_evictable cache_sync_evictable

/* Move record @idx to tier @t, keeping its parent's count of children in
 * host RAM (the SSD tier's leaf rule) exact. */
void cache_set_tier(kvs_cache *c, uint32_t idx, uint8_t t)
{
	kvs_rec *r = rec(c, idx);
	int was = r->tier == KVS_TIER_HOST, is = t == KVS_TIER_HOST;
	int wasg = r->tier == KVS_TIER_GPU, isg = t == KVS_TIER_GPU;

	/* A record is in its tier's policy: leave it before moving. */
	if (wasg != isg && r->pol != NONE)
		kvs_policy_del(cache_policy_of(c, idx), idx);
	r->tier = t;
	if (c->ssd && r->parent != NONE && was != is) {
		tier_ssd_kids_add(c, r->parent, is ? 1 : -1);
		sync_evictable(c, r->parent);
	}
	if (c->gpu && r->parent != NONE && wasg != isg) {
		tier_gpu_kids_add(c, r->parent, isg ? 1 : -1);
		sync_evictable(c, r->parent);
	}
	if (wasg != isg)
		sync_evictable(c, idx);
	if (is && !was && r->state == KVS_REC_READY) /* fast path: visible */
		kvs_fast_publish(c->fast, cache_ns_dom(c, r->ns)->arena_id, idx, r);
}

/* Record @p lost a child (@host: one in host RAM). A ghost without children
 * has no reason to stay: drop it, which may in turn free its own ghost
 * parent. */
static void child_gone(kvs_cache *c, uint32_t p, int host)
{
	while (p != NONE) {
		kvs_rec *pr = rec(c, p);
		uint32_t up = pr->parent;

		if (c->ssd && host)
			tier_ssd_kids_add(c, p, -1);
		host = 0; /* a ghost is in no tier */
		if (--pr->children > 0 || pr->state != KVS_REC_GHOST) {
			sync_evictable(c, p);
			return;
		}
		c->ghosts--;
		kvs_table_remove(c->table, p);
		p = up;
	}
}

/* Remove a record that has no children (its slot is already freed). */
static void drop_record(kvs_cache *c, uint32_t idx)
{
	uint32_t p = rec(c, idx)->parent;
	int host;

	if (rec(c, idx)->tier == KVS_TIER_GPU)
		cache_set_tier(c, idx, KVS_TIER_NONE); /* parent's GPU count */
	host = rec(c, idx)->tier == KVS_TIER_HOST;

	kvs_table_remove(c->table, idx);
	child_gone(c, p, host);
}

void cache_forget(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = rec(c, idx);

	if (r->children > 0) {
		/* Its children stay (unreachable by lookups until it is
		 * written again), so it stays as a ghost for them. */
		cache_set_tier(c, idx, KVS_TIER_NONE);
		r->state = KVS_REC_GHOST;
		r->refs = 0;
		c->ghosts++;
		sync_evictable(c, idx);
		return;
	}
	drop_record(c, idx);
}

static void evict(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = rec(c, idx);

	tell(c, c->evict_kind, idx);
	kvs_policy_del(cache_policy_of(c, idx), idx);
	/* Leaving the GPU tier is a demotion to host, not a loss. */
	if (r->tier == KVS_TIER_GPU) {
		tier_gpu_demote(c, idx);
		return;
	}
	c->nss[r->ns - 1].info.blocks--;
	c->stats->blocks_evicted++;
	kvs_debug("evict block %016llx%016llx ns %u",
		  (unsigned long long)r->hash.hi, (unsigned long long)r->hash.lo,
		  r->ns);
	/* Demoted: the SSD tier has it (or is writing it) and freed the slot. */
	if (c->ssd && tier_ssd_demote(c, idx))
		return;
	kvs_slab_free(cache_ns_dom(c, r->ns)->slab, rec(c, idx)->offset);
	/* Only a flat policy (or the SSD tier) evicts a parent. */
	cache_forget(c, idx);
}

/* A free slot of namespace @ns_id's class, in its domain's arena, evicting
 * as needed: a victim of the same class first (its slot is the one needed),
 * else the oldest of any class until a slab empties and its pages can be
 * re-cut. Victims are the domain's own: a tenant never evicts another's
 * blocks, and one tenant's full arena is its own business. */
int cache_alloc_slot(kvs_cache *c, uint32_t ns_id, uint64_t *off)
{
	dom *d = cache_ns_dom(c, ns_id);
	uint32_t cls = c->nss[ns_id - 1].cls;

	for (int n = 0; n <= MAX_EVICTIONS_PER_SLOT; n++) {
		uint32_t v;
		int rc = kvs_slab_alloc(d->slab, cls, off);

		if (rc != -ENOSPC)
			return rc;
		if (n == 0) /* fast-path hits weigh in before a victim is named */
			kvs_fast_replay(c->fast);
		v = kvs_policy_victim(d->policy, cls);
		if (v == NONE)
			v = kvs_policy_victim(d->policy, KVS_CLASS_ANY);
		if (v == NONE && kvs_fast_unhold(c->fast) > 0)
			continue; /* fast-path pins released since held */
		if (v != NONE && kvs_fast_hold(c->fast, d->arena_id, v, rec(c, v)))
			continue; /* pinned by a client's fast path: held */
		if (v != NONE) {
			evict(c, v);
			continue;
		}
		/* Nothing left to evict; slots that demotion writes read
		 * from come back when those writes finish. Rare: the tier
		 * holds at most a small share of the arena. */
		if (!c->ssd || tier_ssd_wait_held(c) == 0)
			return KVS_E_FULL;
		n--;
	}
	return KVS_E_FULL;
}

/* ---- leases ----------------------------------------------------------- */

uint64_t cache_lease_id(const kvs_cache *c, uint32_t slot)
{
	return (uint64_t)c->leases[slot].gen << 32 | slot;
}

/* Whether @more pins would take @o past --max-pinned-blocks (counted). */
static int over_pin_limit(kvs_cache *c, kvs_owner *o, uint64_t more)
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
	if (c->free_lease == NONE) {
		uint32_t n = c->nleases ? c->nleases * 2 : 64;
		lease *nl = realloc(c->leases, (size_t)n * sizeof(*nl));

		if (!nl)
			return -ENOMEM;
		for (uint32_t i = n; i-- > c->nleases;) {
			nl[i] = (lease){ .gen = 1, .next = c->free_lease };
			c->free_lease = i;
		}
		c->leases = nl;
		c->nleases = n;
	}
	s = c->free_lease;
	l = &c->leases[s];
	c->free_lease = l->next;
	l->kind = kind;
	l->owner = o;
	l->n = 0;
	l->prev = NONE;
	l->next = o->leases;
	if (o->leases != NONE)
		c->leases[o->leases].prev = s;
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
		l->cap = cap;
	}
	return 0;
}

void cache_lease_free(kvs_cache *c, uint32_t s)
{
	lease *l = &c->leases[s];
	kvs_owner *o = l->owner;

	if (l->prev != NONE)
		c->leases[l->prev].next = l->next;
	else
		o->leases = l->next;
	if (l->next != NONE)
		c->leases[l->next].prev = l->prev;
	o->nleases--;
	c->active_leases--;
	l->kind = LEASE_FREE;
	l->owner = NULL;
	l->n = 0;
	/* A big lease's array is not kept around for the next small one. */
	if (l->cap > 1024) {
		free(l->recs);
		l->recs = NULL;
		l->cap = 0;
	}
	if (++l->gen == 0)
		l->gen = 1;
	l->next = c->free_lease;
	c->free_lease = s;
}

static int lease_get(kvs_cache *c, kvs_owner *o, uint64_t id, uint32_t *out)
{
	uint32_t s = (uint32_t)id, gen = (uint32_t)(id >> 32);

	if (!o->ns) {
		/* No namespace, no leases: say so rather than "no such lease". */
		c->stats->errors_notattached++;
		return KVS_E_NOTATTACHED;
	}
	if (s >= c->nleases || c->leases[s].kind == LEASE_FREE ||
	    c->leases[s].gen != gen) {
		c->stats->errors_lease++;
		return KVS_E_NOLEASE;
	}
	if (c->leases[s].owner != o) {
		c->stats->errors_lease++;
		return KVS_E_NOTOWNER;
	}
	*out = s;
	return 0;
}

static uint32_t end_read(kvs_cache *c, uint32_t s)
{
	lease *l = &c->leases[s];
	uint32_t n = l->n;

	for (uint32_t i = 0; i < n; i++) {
		rec(c, l->recs[i])->refs--;
		sync_evictable(c, l->recs[i]);
	}
	c->pins -= n;
	l->owner->pins -= n;
	lease_free(c, s);
	return n;
}

static uint32_t end_write(kvs_cache *c, uint32_t s, int commit)
{
	lease *l = &c->leases[s];
	uint32_t n = l->n;

	if (commit) {
		for (uint32_t i = 0; i < n; i++) {
			uint32_t idx = l->recs[i];
			kvs_rec *r = rec(c, idx);
			ns *sp = &c->nss[r->ns - 1];

			r->state = KVS_REC_READY;
			r->refs--;
			sp->info.writing--;
			sp->info.blocks++;
			touch_atime(c, idx);
			kvs_policy_touch(cache_policy_of(c, idx), idx);
			sync_evictable(c, idx);
			if (c->ssd && r->tier == KVS_TIER_HOST)
				tier_ssd_commit(c, idx);
			c->stats->tier_gpu_blocks += r->tier == KVS_TIER_GPU;
			tell(c, KVS_EVENT_STORED, idx);
			kvs_fast_publish(c->fast, cache_ns_dom(c, r->ns)->arena_id,
					 idx, rec(c, idx));
		}
		c->stats->blocks_committed += n;
	} else {
		/* Children were reserved after their parents: free in reverse. */
		for (uint32_t i = n; i-- > 0;) {
			uint32_t idx = l->recs[i];
			kvs_rec *r = rec(c, idx);

			c->nss[r->ns - 1].info.writing--;
			free_slot(c, idx);
			/* A ghost being rewritten: its children outside
			 * this lease still need it. */
			cache_forget(c, idx);
		}
		c->stats->blocks_aborted += n;
	}
	c->pins -= n;
	l->owner->pins -= n;
	lease_free(c, s);
	return n;
}

/* ---- life cycle ------------------------------------------------------- */

static void dom_destroy(dom *d)
{
	kvs_policy_destroy(d->policy);
	kvs_slab_destroy(d->slab);
	kvs_arena_destroy(d->arena);
	memset(d, 0, sizeof(*d));
}

/* A new trust domain for @uid: its own memfd arena, allocator and policy.
 * Errors: KVS_E_LIMIT (--max-tenants domains exist), -ENOMEM, -errno. */
static int dom_create(kvs_cache *c, uint32_t uid, uint32_t *out)
{
	dom *d;
	char name[48];
	int rc;

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
	rc = kvs_arena_create(name, c->dom_bytes, &d->arena);
	if (rc == 0)
		rc = kvs_slab_create(kvs_arena_bytes(d->arena), c->page_bytes,
				     &d->slab);
	if (rc == 0)
		rc = kvs_policy_create(c->policy_name, c->table, &d->policy);
	if (rc < 0) {
		dom_destroy(d);
		return rc;
	}
	c->leaf_only = kvs_policy_leaf_only(d->policy);
	*out = c->ndoms++;
	if (c->by_uid)
		kvs_info("tenant domain %u: uid %u, host arena of %llu bytes "
			 "(%u of %u domains)", *out, uid,
			 (unsigned long long)kvs_arena_bytes(d->arena), c->ndoms,
			 c->maxdoms);
	return 0;
}

/* The domain of owner @o, made on the first attach of its uid. */
static int dom_of_owner(kvs_cache *c, const kvs_owner *o, uint32_t *out)
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
	return dom_create(c, o->uid, out);
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
	c->stats = stats;
	c->max_leases = cfg->max_leases;
	c->max_pinned = cfg->max_pinned;
	c->free_lease = NONE;
	c->evict_kind = KVS_EVENT_EVICTED;
	c->page_bytes = cfg->page_bytes;
	c->by_uid = cfg->max_tenants > 0;
	c->maxdoms = c->by_uid ? cfg->max_tenants : 1;
	c->dom_bytes = c->by_uid ? cfg->tenant_bytes : cfg->host_bytes;
	clock_gettime(CLOCK_MONOTONIC, &c->born);
	if (!kvs_policy_known(pol) || strlen(pol) >= sizeof(c->policy_name) ||
	    (c->by_uid && c->dom_bytes == 0)) {
		free(c);
		return -EINVAL;
	}
	strcpy(c->policy_name, pol);
	c->doms = calloc(c->maxdoms, sizeof(*c->doms));
	rc = c->doms ? kvs_table_create(&c->table) : -ENOMEM;
	/* One domain for everybody, made now; per uid, made on first use. */
	if (rc == 0 && !c->by_uid && (rc = dom_create(c, 0, &d0)) == 0) {
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
	tier_ssd_close(c); /* before the arena: reads land in it */
	tier_gpu_close(c);
	for (uint32_t i = 0; i < c->nleases; i++)
		free(c->leases[i].recs);
	free(c->leases);
	for (uint32_t i = 0; i < c->nns; i++) {
		free(c->nss[i].model);
		free(c->nss[i].adapter);
		free(c->nss[i].salt);
	}
	free(c->nss);
	free(c->atime);
	for (uint32_t i = 0; i < c->ndoms; i++)
		dom_destroy(&c->doms[i]);
	free(c->doms);
	kvs_table_destroy(c->table);
	free(c);
}

void *cache_slot_ptr(kvs_cache *c, uint64_t off)
{
	return (uint8_t *)kvs_arena_base(c->arena) + off;
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
		o->leases = NONE;
		o->promo = NONE;
		o->verify = NONE;
	}
	return o;
}

void kvs_cache_owner_set_uid(kvs_owner *o, uint32_t uid)
{
	o->uid = uid;
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
	if (c->ssd)
		tier_ssd_owner_gone(c, o);
	while (o->leases != NONE) {
		uint32_t s = o->leases;

		if (c->leases[s].kind == LEASE_WRITE)
			end_write(c, s, 0);
		else
			end_read(c, s);
	}
	if (o->ns) {
		c->nss[o->ns - 1].info.clients--;
		cache_ns_dom(c, o->ns)->clients--;
	}
	free(o);
}

/* ---- namespaces ------------------------------------------------------- */

static int ns_create(kvs_cache *c, const kvs_wire_hello *h, uint32_t d,
		     uint32_t *id);

static int str_eq(const char *a, const char *b, uint32_t blen)
{
	return strlen(a) == blen && memcmp(a, b, blen) == 0;
}

static int ns_matches(const ns *s, const kvs_wire_hello *h)
{
	const kvs_ns_info *i = &s->info;

	return i->layers == h->layers && i->kv_heads == h->kv_heads &&
	       i->head_dim == h->head_dim && i->block_tokens == h->block_tokens &&
	       i->tp_rank == h->tp_rank && i->tp_size == h->tp_size &&
	       i->dtype == h->dtype && str_eq(s->model, h->model, h->model_len) &&
	       str_eq(s->adapter, h->adapter, h->adapter_len) &&
	       s->salt_len == h->salt_len &&
	       memcmp(s->salt, h->salt, h->salt_len) == 0;
}

static int layout_of(const kvs_wire_hello *h, kvs_layout *l)
{
	memset(l, 0, sizeof(*l));
	l->layers = h->layers;
	l->kv_heads = h->kv_heads;
	l->head_dim = h->head_dim;
	l->block_tokens = h->block_tokens;
	l->tp_rank = h->tp_rank;
	l->tp_size = h->tp_size;
	l->dtype = (kvs_dtype)h->dtype;
	if (h->model_len == 0 || h->tp_size == 0 || h->tp_rank >= h->tp_size ||
	    kvs_dtype_bytes(l->dtype) == 0)
		return KVS_E_LAYOUT;
	return kvs_layout_block_bytes(l) ? 0 : KVS_E_LAYOUT;
}

int cache_ns_restore(kvs_cache *c, const kvs_wire_hello *h, uint32_t *id)
{
	return ns_create(c, h, 0, id); /* the SSD tier: domain 0 only */
}

/* A namespace belongs to domain @d: its blocks live in that arena only. */
static int ns_create(kvs_cache *c, const kvs_wire_hello *h, uint32_t d,
		     uint32_t *id)
{
	kvs_layout l;
	uint64_t bytes;
	uint32_t cls;
	ns *nn, *s;
	int rc = layout_of(h, &l);

	if (rc < 0)
		return rc;
	bytes = kvs_layout_block_bytes(&l);
	rc = kvs_slab_class(c->doms[d].slab, bytes, &cls);
	if (rc < 0)
		return rc == -ENOMEM ? rc : KVS_E_LAYOUT;
	nn = realloc(c->nss, (size_t)(c->nns + 1) * sizeof(*nn));
	if (!nn)
		return -ENOMEM;
	c->nss = nn;
	s = &c->nss[c->nns];
	memset(s, 0, sizeof(*s));
	s->model = strndup(h->model, h->model_len);
	s->adapter = strndup(h->adapter, h->adapter_len);
	s->salt = malloc(h->salt_len + 1u);
	if (!s->model || !s->adapter || !s->salt) {
		free(s->model);
		free(s->adapter);
		free(s->salt);
		return -ENOMEM;
	}
	memcpy(s->salt, h->salt, h->salt_len);
	s->salt[h->salt_len] = '\0';
	s->salt_len = h->salt_len;
	s->cls = cls;
	s->dom = d;
	s->info = (kvs_ns_info){
		.id = c->nns + 1, .model = s->model, .adapter = s->adapter,
		.salted = h->salt_len > 0, .layers = h->layers,
		.kv_heads = h->kv_heads, .head_dim = h->head_dim,
		.block_tokens = h->block_tokens, .tp_rank = h->tp_rank,
		.tp_size = h->tp_size, .dtype = h->dtype, .block_bytes = bytes,
		.tenant = c->by_uid, .uid = c->by_uid ? c->doms[d].uid : 0,
	};
	c->nns++;
	*id = s->info.id;
	if (c->ssd)
		tier_ssd_ns_created(c, *id);
	kvs_info("namespace %u: model '%s'%s%s, %u layers x %u kv heads x %u dim, "
		 "%u tokens/block, tp %u/%u, %llu bytes/block",
		 *id, s->model, *s->adapter ? " adapter " : "", s->adapter,
		 h->layers, h->kv_heads, h->head_dim, h->block_tokens, h->tp_rank,
		 h->tp_size, (unsigned long long)bytes);
	return 0;
}

int kvs_cache_attach(kvs_cache *c, kvs_owner *o, const kvs_wire_hello *h,
		     uint32_t *ns_id, uint64_t *block_bytes)
{
	uint32_t id = 0, d;
	kvs_layout l;
	int rc;

	/* The namespace key includes the domain: two uids with the same
	 * layout and salt get two namespaces, and never share a block.
	 * A bad layout makes no domain. */
	if (o->ns) {
		d = c->nss[o->ns - 1].dom;
	} else if ((rc = layout_of(h, &l)) < 0) {
		c->stats->errors_layout++;
		return rc;
	} else if ((rc = dom_of_owner(c, o, &d)) < 0) {
		if (rc == KVS_E_LIMIT) {
			c->stats->errors_limit++;
			kvs_warn("refusing uid %u: %u tenant domains exist "
				 "(--max-tenants)", o->uid, c->maxdoms);
		}
		return rc;
	}
	for (uint32_t i = 0; i < c->nns; i++) {
		if (c->nss[i].dom == d && ns_matches(&c->nss[i], h)) {
			id = i + 1;
			break;
		}
	}
	if (o->ns && o->ns != id) {
		c->stats->errors_layout++;
		return KVS_E_ATTACHED;
	}
	if (!id) {
		rc = ns_create(c, h, d, &id);
		if (rc < 0) {
			if (rc == KVS_E_LAYOUT)
				c->stats->errors_layout++;
			return rc;
		}
	}
	if (!o->ns) {
		o->ns = id;
		c->nss[id - 1].info.clients++;
		c->doms[d].clients++;
	}
	o->gpu = c->gpu && (h->flags & KVS_HELLO_GPU);
	*ns_id = id;
	*block_bytes = c->nss[id - 1].info.block_bytes;
	return 0;
}

/* ---- operations ------------------------------------------------------- */

static kvs_block located(const kvs_rec *r, uint8_t status)
{
	return (kvs_block){ .offset = r->offset, .gen = r->gen,
			    .tier = r->tier, .status = status };
}

int kvs_cache_lookup(kvs_cache *c, kvs_owner *o, const uint8_t *hashes,
		     uint32_t n, uint64_t *lease_out, kvs_block *out)
{
	uint32_t hits = 0, promote = 0, s;
	int rc;

	*lease_out = 0;
	if (!o->ns) {
		c->stats->errors_notattached++;
		return KVS_E_NOTATTACHED;
	}
	/* Blocks of another namespace (another salt) are never matched: a
	 * tenant cannot probe another's prefixes through the table. */
	for (; hits < n; hits++) {
		uint32_t idx = kvs_table_find(c->table,
					      ns_key(o->ns, kvs_wire_hash_at(hashes, hits)));

		if (idx == NONE || rec(c, idx)->ns != o->ns ||
		    rec(c, idx)->state != KVS_REC_READY)
			break;
		/* In the GPU tier: a hit for an owner that maps the GPU arena
		 * only (promotion to host for the others is not built). */
		if (rec(c, idx)->tier == KVS_TIER_GPU) {
			if (!o->gpu)
				break;
		} else if (rec(c, idx)->tier != KVS_TIER_HOST) {
			/* Not in RAM: it counts only if it can be read back. */
			if (!c->ssd || !tier_ssd_promotable(c, idx))
				break;
			promote++;
		}
		out[hits].offset = idx; /* remembered; filled below */
	}
	c->stats->blocks_lookup_miss += n - hits;
	if (hits == 0)
		return 0;
	if (over_pin_limit(c, o, hits))
		return KVS_E_LIMIT;
	if ((rc = lease_new(c, o, LEASE_READ, &s)) < 0)
		return rc;
	if ((rc = lease_room(&c->leases[s], hits)) < 0) {
		lease_free(c, s);
		return rc;
	}
	for (uint32_t i = 0; i < hits; i++) {
		uint32_t idx = (uint32_t)out[i].offset;
		kvs_rec *r = rec(c, idx);

		r->refs++;
		r->hits++;
		touch_atime(c, idx);
		sync_evictable(c, idx);
		kvs_policy_touch(cache_policy_of(c, idx), idx);
		c->leases[s].recs[c->leases[s].n++] = idx;
		c->stats->tier_gpu_lookup_hits += r->tier == KVS_TIER_GPU;
	}
	c->pins += hits;
	o->pins += hits;
	if (promote)
		return tier_ssd_promote(c, o, s, out, lease_out);
	*lease_out = cache_lookup_finish(c, s, hits, out);
	return (int)hits;
}

uint64_t cache_lookup_finish(kvs_cache *c, uint32_t s, uint32_t hits,
			     kvs_block *out)
{
	lease *l = &c->leases[s];

	/* Blocks past the first that could not be read back are not hits. */
	for (uint32_t i = hits; i < l->n; i++) {
		rec(c, l->recs[i])->refs--;
		sync_evictable(c, l->recs[i]);
	}
	c->pins -= l->n - hits;
	l->owner->pins -= l->n - hits;
	c->stats->blocks_lookup_miss += l->n - hits;
	l->n = hits;
	if (hits == 0) {
		lease_free(c, s);
		return 0;
	}
	for (uint32_t i = 0; i < hits; i++)
		out[i] = located(rec(c, l->recs[i]), KVS_BLOCK_HIT);
	c->stats->blocks_lookup_hit += hits;
	return lease_id(c, s);
}

/* Reserve one missing block after @prev: a slot, a record, a lease entry.
 * @ghost is the block's ghost record when it has one (it is rewritten in
 * place, keeping its children), else NONE. */
static int reserve_one(kvs_cache *c, kvs_owner *o, uint32_t s, kvs_hash h,
		       uint32_t prev, uint32_t ghost, uint32_t *idx_out)
{
	ns *sp = &c->nss[o->ns - 1];
	/* The record that holds the new block's place in the tree while a slot
	 * is found: its parent gains a child now, so that the eviction making
	 * room can neither take the parent as a leaf nor drop a ghost. With
	 * an SSD tier that would keep the parent, the child counts as in host
	 * RAM only once it has a slot: the end of the chain so far may move
	 * down to SSD to make that room (it stays in the tree), so that a
	 * chain published window by window passes through a host tier smaller
	 * than itself (the pins of the open window alone must fit). */
	uint32_t hold = ghost != NONE ? ghost : prev;
	int hold_in_ram = hold != NONE && c->ssd &&
			  (hold != prev || !tier_ssd_keeps(c, hold));
	uint64_t off;
	uint32_t idx = ghost;
	uint16_t gcls = 0;
	int in_gpu = 0;
	kvs_rec *r;
	int rc;

	if ((rc = lease_room(&c->leases[s], 1)) < 0)
		return rc;
	if (hold != NONE) {
		rec(c, hold)->children++;
		if (hold_in_ram)
			tier_ssd_kids_add(c, hold, 1);
		sync_evictable(c, hold);
	}
	/* A GPU worker's blocks go to the GPU tier first; when it has no
	 * room (everything there pinned), to the host tier. */
	if (o->gpu) {
		in_gpu = tier_gpu_alloc(c, o->ns, &off, &gcls) == 0;
		c->stats->tier_gpu_reserve_fallbacks += !in_gpu;
	}
	rc = in_gpu ? 0 : alloc_slot(c, o->ns, &off);
	if (rc == 0 && ghost == NONE) {
		rc = kvs_table_insert(c->table, h, &idx);
		if (rc == 0 && c->ssd && (rc = tier_ssd_rec_new(c, idx)) < 0)
			kvs_table_remove(c->table, idx);
		if (rc < 0 && in_gpu)
			tier_gpu_free(c, off);
		else if (rc < 0)
			kvs_slab_free(cache_ns_dom(c, o->ns)->slab, off);
	}
	if (rc < 0) {
		child_gone(c, hold, hold_in_ram);
		return rc;
	}
	r = rec(c, idx);
	if (ghost != NONE) {
		r->children--; /* the hold; it keeps its real children */
		if (hold_in_ram)
			tier_ssd_kids_add(c, ghost, -1);
		c->ghosts--;
		r->state = KVS_REC_WRITING;
		cache_set_tier(c, idx, KVS_TIER_HOST);
		r = rec(c, idx);
	} else {
		r->parent = prev; /* prev keeps the child counted above */
		r->tier = KVS_TIER_HOST; /* counted in prev's host children */
		if (c->ssd && prev != NONE && !hold_in_ram) {
			/* Only now (prev may be on SSD by now). */
			tier_ssd_kids_add(c, prev, 1);
			sync_evictable(c, prev);
		}
	}
	r->offset = off;
	r->gen = ++c->gen;
	r->refs = 1;
	r->ns = o->ns;
	r->cls = (uint16_t)sp->cls;
	if (in_gpu) {
		cache_set_tier(c, idx, KVS_TIER_GPU);
		r = rec(c, idx);
		r->cls = gcls;
		c->stats->tier_gpu_reserved++;
	}
	c->leases[s].recs[c->leases[s].n++] = idx;
	c->pins++;
	o->pins++;
	sp->info.writing++;
	*idx_out = idx;
	return 0;
}

int kvs_cache_reserve(kvs_cache *c, kvs_owner *o, const uint8_t *hashes,
		      uint32_t n, uint64_t *lease_out, kvs_block *out)
{
	uint32_t prev = NONE, s = NONE, fresh = 0, missing = 0;
	uint8_t stop = 0; /* BUSY or FULL once the chain cannot continue */
	int rc;

	*lease_out = 0;
	if (!o->ns) {
		c->stats->errors_notattached++;
		return KVS_E_NOTATTACHED;
	}
	for (uint32_t i = 0; i < n; i++) {
		kvs_hash h = ns_key(o->ns, kvs_wire_hash_at(hashes, i));
		uint32_t idx;

		out[i] = (kvs_block){ .status = stop };
		if (stop)
			continue;
		idx = kvs_table_find(c->table, h);
		if (idx != NONE && (rec(c, idx)->ns != o->ns ||
				    rec(c, idx)->state != KVS_REC_GHOST)) {
			kvs_rec *r = rec(c, idx);

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
		if (over_pin_limit(c, o, 1)) {
			/* All or nothing: undo this request's NEW blocks. */
			if (s != NONE) {
				end_write(c, s, 0);
				c->stats->blocks_aborted -= fresh;
			}
			return KVS_E_LIMIT;
		}
		if (s == NONE && (rc = lease_new(c, o, LEASE_WRITE, &s)) < 0) {
			if (rc == KVS_E_LIMIT)
				return rc; /* nothing reserved yet */
			out[i].status = stop = KVS_BLOCK_FULL;
			continue;
		}
		rc = reserve_one(c, o, s, h, prev, idx, &idx);
		if (rc < 0) {
			out[i].status = stop = KVS_BLOCK_FULL;
			continue;
		}
		out[i] = located(rec(c, idx), KVS_BLOCK_NEW);
		prev = idx;
		fresh++;
	}
	for (uint32_t i = 0; i < n; i++) {
		c->stats->blocks_reserve_exists += out[i].status == KVS_BLOCK_EXISTS;
		c->stats->blocks_reserve_busy += out[i].status == KVS_BLOCK_BUSY;
		c->stats->blocks_reserve_full += out[i].status == KVS_BLOCK_FULL;
	}
	c->stats->blocks_reserved += fresh;
	if (s != NONE && fresh == 0)
		lease_free(c, s);
	else if (s != NONE)
		*lease_out = lease_id(c, s);
	if (fresh == 0 && missing > 0 && stop == KVS_BLOCK_FULL) {
		c->stats->errors_full++;
		return KVS_E_FULL;
	}
	return (int)fresh;
}

/* End write lease @id of @o: publish it (commit) or free its slots. */
static int write_lease_end(kvs_cache *c, kvs_owner *o, uint64_t id, int commit)
{
	uint32_t s;
	int rc = lease_get(c, o, id, &s);

	if (rc < 0)
		return rc;
	if (c->leases[s].kind != LEASE_WRITE) {
		c->stats->errors_lease++;
		return KVS_E_LEASEKIND;
	}
	return (int)end_write(c, s, commit);
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
	int rc = lease_get(c, o, id, &s);

	if (rc < 0)
		return rc;
	if (c->leases[s].kind == LEASE_WRITE)
		return (int)end_write(c, s, 0);
	return (int)end_read(c, s);
}

/* ---- introspection ---------------------------------------------------- */

/* The slot allocators of every domain, summed; *bytes, *resident: their
 * arenas'. */
static void host_stats(const kvs_cache *c, kvs_slab_stats *ss, uint64_t *bytes,
		       uint64_t *resident)
{
	memset(ss, 0, sizeof(*ss));
	*bytes = *resident = 0;
	for (uint32_t i = 0; i < c->ndoms; i++) {
		kvs_slab_stats one;

		kvs_slab_stats_get(c->doms[i].slab, &one);
		ss->slots_used += one.slots_used;
		ss->slot_bytes_used += one.slot_bytes_used;
		ss->slab_bytes += one.slab_bytes;
		*bytes += kvs_arena_bytes(c->doms[i].arena);
		*resident += kvs_arena_resident(c->doms[i].arena);
	}
}

void kvs_cache_stats_fill(kvs_cache *c)
{
	kvs_counters *st = c->stats;
	kvs_slab_stats ss;
	uint64_t blocks = 0, writing = 0, lease_bytes = 0, bytes, resident;

	host_stats(c, &ss, &bytes, &resident);
	for (uint32_t i = 0; i < c->nns; i++) {
		blocks += c->nss[i].info.blocks;
		writing += c->nss[i].info.writing;
	}
	for (uint32_t i = 0; i < c->nleases; i++)
		lease_bytes += c->leases[i].cap * sizeof(uint32_t);
	st->tier_host_bytes_total = (int64_t)bytes;
	st->tier_host_bytes_resident = (int64_t)resident;
	st->tier_host_bytes_used = (int64_t)ss.slot_bytes_used;
	st->tier_host_bytes_free =
		(int64_t)(bytes - ss.slot_bytes_used);
	st->tier_host_slots_used = (int64_t)ss.slots_used;
	st->tier_host_blocks = (int64_t)blocks - st->tier_gpu_blocks;
	st->tier_host_blocks_writing = (int64_t)writing;
	st->tier_host_utilization_permille =
		ss.slab_bytes ? (int64_t)(ss.slot_bytes_used * 1000 / ss.slab_bytes) : 0;
	st->leases_active = c->active_leases;
	st->leases_pinned_blocks = (int64_t)c->pins;
	st->namespaces_count = c->nns;
	st->tenants_domains = c->by_uid ? c->ndoms : 0;
	st->table_records = kvs_table_count(c->table);
	st->table_ghosts = c->ghosts;
	if (c->ssd)
		tier_ssd_stats_fill(c);
	if (c->gpu)
		tier_gpu_stats_fill(c);
	st->table_metadata_bytes =
		(int64_t)(kvs_table_bytes(c->table) + lease_bytes +
			  (uint64_t)c->nleases * sizeof(lease));
}

void kvs_cache_ns_foreach(const kvs_cache *c,
			  void (*fn)(const kvs_ns_info *ns, void *arg), void *arg)
{
	for (uint32_t i = 0; i < c->nns; i++)
		fn(&c->nss[i].info, arg);
}

#define CHECK(cond)                                                        \
	do {                                                               \
		if (!(cond)) {                                             \
			kvs_err("cache invariant failed: %s (record %u)", \
				#cond, idx);                               \
			rc = KVS_E_INTERNAL;                               \
			goto out;                                          \
		}                                                          \
	} while (0)

int kvs_cache_check(kvs_cache *c)
{
	uint32_t count = kvs_table_count(c->table), hi = 0, idx = 0, ghosts = 0;
	uint64_t pins = 0, slotted = 0, gslotted = 0;
	uint32_t *children, *hkids, *gkids;
	kvs_slab_stats ss;
	uint64_t bytes, resident;
	int rc = 0;

	for (uint32_t s = 0; s < c->nleases; s++)
		if (c->leases[s].kind != LEASE_FREE)
			pins += c->leases[s].n;
	host_stats(c, &ss, &bytes, &resident);
	if (pins != c->pins) {
		kvs_err("cache invariant failed: pins %llu/%llu",
			(unsigned long long)pins, (unsigned long long)c->pins);
		return KVS_E_INTERNAL;
	}
	/* Records in use are spread over [0, hi]: find hi, then count every
	 * record's children from the parent links and compare. */
	for (uint32_t found = 0; found < count; hi++)
		found += rec(c, hi)->state != KVS_REC_FREE;
	children = calloc((size_t)hi + 1, sizeof(uint32_t));
	hkids = calloc((size_t)hi + 1, sizeof(uint32_t));
	gkids = calloc((size_t)hi + 1, sizeof(uint32_t));
	if (!children || !hkids || !gkids) {
		free(children);
		free(hkids);
		free(gkids);
		return -ENOMEM;
	}
	for (idx = 0; idx < hi; idx++) {
		kvs_rec *r = rec(c, idx);

		if (r->state == KVS_REC_FREE)
			continue;
		ghosts += r->state == KVS_REC_GHOST;
		CHECK(kvs_table_find(c->table, r->hash) == idx);
		CHECK(r->ns >= 1 && r->ns <= c->nns);
		CHECK(c->nss[r->ns - 1].dom < c->ndoms);
		CHECK(r->state != KVS_REC_WRITING || r->refs >= 1);
		/* A leaf-only policy makes ghosts only when the SSD tier
		 * loses a parent (corrupt, recycled). */
		CHECK(r->state != KVS_REC_GHOST ||
		      (r->refs == 0 && r->children > 0 &&
		       (!c->leaf_only || c->ssd || c->gpu)));
		CHECK(r->state != KVS_REC_GHOST || r->tier == KVS_TIER_NONE);
		CHECK(evictable(c, idx, r) == (r->pol != NONE));
		slotted += r->tier == KVS_TIER_HOST ||
			   (c->ssd && tier_ssd_reading(c, idx));
		gslotted += r->tier == KVS_TIER_GPU;
		if (r->parent != NONE) {
			CHECK(r->parent < hi);
			CHECK(rec(c, r->parent)->state != KVS_REC_FREE);
			CHECK(rec(c, r->parent)->ns == r->ns);
			children[r->parent]++;
			hkids[r->parent] += r->tier == KVS_TIER_HOST;
			gkids[r->parent] += r->tier == KVS_TIER_GPU;
		}
	}
	for (idx = 0; idx < hi; idx++) {
		if (rec(c, idx)->state == KVS_REC_FREE)
			continue;
		CHECK(rec(c, idx)->children == children[idx]);
		CHECK(!c->ssd || tier_ssd_kids(c, idx) == hkids[idx]);
		CHECK(!c->gpu || tier_gpu_kids(c, idx) == gkids[idx]);
	}
	idx = 0;
	CHECK(ghosts == c->ghosts);
	CHECK(ss.slots_used == slotted + (c->ssd ? tier_ssd_slots_held(c) : 0));
	CHECK(!c->gpu || tier_gpu_slots_used(c) == gslotted);
out:
	free(children);
	free(hkids);
	free(gkids);
	return rc;
}

/* ---- operator primitives (kvs_cache_admin.h) -------------------------- */

static uint32_t clock_s(const kvs_cache *c)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint32_t)(now.tv_sec - c->born.tv_sec);
}

/* Best effort: without memory for the array an age reads as 0. */
static void touch_atime(kvs_cache *c, uint32_t idx)
{
	if (idx >= c->natime) {
		uint32_t n = c->natime ? c->natime : 1024;
		uint32_t *na;

		while (n <= idx)
			n *= 2;
		na = realloc(c->atime, (size_t)n * sizeof(*na));
		if (!na)
			return;
		memset(na + c->natime, 0, (size_t)(n - c->natime) * sizeof(*na));
		c->atime = na;
		c->natime = n;
	}
	c->atime[idx] = clock_s(c);
}

static void tell(kvs_cache *c, uint32_t kind, uint32_t idx)
{
	if (c->on_event)
		c->on_event(c->event_arg, kind, rec(c, idx));
}

void kvs_cache_set_event_hook(kvs_cache *c, kvs_cache_event_fn fn, void *arg)
{
	c->on_event = fn;
	c->event_arg = arg;
}

uint32_t kvs_cache_rec_span(const kvs_cache *c)
{
	uint32_t count = kvs_table_count(c->table), hi = 0;

	for (uint32_t found = 0; found < count; hi++)
		found += rec(c, hi)->state != KVS_REC_FREE;
	return hi;
}

const kvs_rec *kvs_cache_rec_at(const kvs_cache *c, uint32_t idx)
{
	return rec(c, idx);
}

kvs_hash kvs_cache_rec_hash(const kvs_rec *r)
{
	return ns_key(r->ns, r->hash); /* the mix is its own inverse */
}

uint64_t kvs_cache_rec_age_s(const kvs_cache *c, uint32_t idx)
{
	uint32_t now = clock_s(c), t = idx < c->natime ? c->atime[idx] : now;

	return now > t ? now - t : 0;
}

uint32_t kvs_cache_find(const kvs_cache *c, uint32_t ns_id, kvs_hash h)
{
	for (uint32_t id = ns_id ? ns_id : 1; id <= c->nns; id++) {
		uint32_t idx = kvs_table_find(c->table, ns_key(id, h));

		if (idx != NONE && rec(c, idx)->ns == id)
			return idx;
		if (ns_id)
			break;
	}
	return NONE;
}

const kvs_ns_info *kvs_cache_ns_at(const kvs_cache *c, uint32_t id)
{
	return id >= 1 && id <= c->nns ? &c->nss[id - 1].info : NULL;
}

uint32_t kvs_cache_ns_count(const kvs_cache *c)
{
	return c->nns;
}

int kvs_cache_free_rec(kvs_cache *c, uint32_t idx, uint32_t kind)
{
	if (!evictable(c, idx, rec(c, idx)))
		return 0;
	if (kvs_fast_hold(c->fast, cache_ns_dom(c, rec(c, idx)->ns)->arena_id,
			  idx, rec(c, idx)))
		return 0; /* pinned by a client's fast path */
	c->evict_kind = kind;
	evict(c, idx);
	c->evict_kind = KVS_EVENT_EVICTED;
	return 1;
}

void kvs_cache_touch_rec(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = rec(c, idx);

	if (r->state != KVS_REC_READY)
		return;
	r->hits++;
	touch_atime(c, idx);
	kvs_policy_touch(cache_policy_of(c, idx), idx);
}

void kvs_cache_set_fast(kvs_cache *c, struct kvs_fast *f)
{
	c->fast = f;
}

void kvs_cache_pin_rec(kvs_cache *c, uint32_t idx, int delta)
{
	rec(c, idx)->refs += (uint32_t)delta;
	sync_evictable(c, idx);
}
