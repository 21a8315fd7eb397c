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
		cache_dom_destroy(d);
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

/* Whether @uid may create one more namespace (--max-namespaces-per-uid).
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
		n += c->nss[i].charged && c->nss[i].creator == uid;
	if (n < c->max_ns_per_uid)
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

/* The id of domain @d's namespace for @desc, or 0. */
uint32_t cache_ns_find(const kvs_cache *c, uint32_t d, const kvs_ns_desc *desc)
{
	for (uint32_t i = 0; i < c->nns; i++)
		if (c->nss[i].dom == d && ns_matches(&c->nss[i], desc))
			return i + 1;
	return 0;
}

/* Tell the store tiers about namespace @id (they persist it, or key
 * blocks by it), all but @except (the tier restoring it, or NULL). */
static void ns_tell_tiers(kvs_cache *c, uint32_t id, const kvs_tier_mod *except)
{
	const ns *s = cache_ns(c, id);
	kvs_ns_desc d = { .model = s->model, .adapter = s->adapter,
			  .salt = (const uint8_t *)s->salt,
			  .salt_len = s->salt_len, .layers = s->info.layers,
			  .kv_heads = s->info.kv_heads,
			  .head_dim = s->info.head_dim,
			  .block_tokens = s->info.block_tokens,
			  .tp_rank = s->info.tp_rank, .tp_size = s->info.tp_size,
			  .dtype = s->info.dtype };

	for (uint32_t i = 0; i < c->nstores; i++)
		if (c->stores[i] != except && c->stores[i]->ops->store->ns_created)
			c->stores[i]->ops->store->ns_created(c->stores[i], id, &d);
}

/* A namespace belongs to domain @d: its blocks live in that arena only. */
int cache_ns_create(kvs_cache *c, const kvs_ns_desc *desc, uint32_t d,
		    const kvs_tier_mod *from, uint32_t *id)
{
	uint64_t bytes;
	uint32_t cls;
	ns *nn, *s;
	int rc = cache_ns_check(desc, &bytes);

	if (rc < 0)
		return rc;
	rc = kvs_slab_class(c->doms[d].slab, bytes, &cls);
	if (rc < 0)
		return rc == -ENOMEM ? rc : KVS_E_LAYOUT;
	nn = realloc(c->nss, (size_t)(c->nns + 1) * sizeof(*nn));
	if (!nn)
		return -ENOMEM;
	c->nss = nn;
	s = &c->nss[c->nns];
	memset(s, 0, sizeof(*s));
	s->model = strdup(desc->model);
	s->adapter = strdup(desc->adapter);
	s->salt = malloc(desc->salt_len + 1u);
	if (!s->model || !s->adapter || !s->salt) {
		free(s->model);
		free(s->adapter);
		free(s->salt);
		return -ENOMEM;
	}
	if (desc->salt_len)
		memcpy(s->salt, desc->salt, desc->salt_len);
	s->salt[desc->salt_len] = '\0';
	s->salt_len = desc->salt_len;
	s->cls = cls;
	s->dom = d;
	for (uint32_t t = 0; t < KVS_TIER_MAX; t++)
		s->tcls[t] = NO_CLASS;
	s->info = (kvs_ns_info){
		.id = c->nns + 1, .model = s->model, .adapter = s->adapter,
		.salted = desc->salt_len > 0, .layers = desc->layers,
		.kv_heads = desc->kv_heads, .head_dim = desc->head_dim,
		.block_tokens = desc->block_tokens, .tp_rank = desc->tp_rank,
		.tp_size = desc->tp_size, .dtype = desc->dtype,
		.block_bytes = bytes, .tenant = c->by_uid,
		.uid = c->by_uid ? c->doms[d].uid : 0,
	};
	c->nns++;
	*id = s->info.id;
	ns_tell_tiers(c, *id, from);
	kvs_info("namespace %u: model '%s'%s%s, %u layers x %u kv heads x %u dim, "
		 "%u tokens/block, tp %u/%u, %llu bytes/block",
		 *id, s->model, *s->adapter ? " adapter " : "", s->adapter,
		 desc->layers, desc->kv_heads, desc->head_dim, desc->block_tokens,
		 desc->tp_rank, desc->tp_size, (unsigned long long)bytes);
	return 0;
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
		if (!ns_room_for(c, o->uid))
			return KVS_E_LIMIT;
		rc = cache_ns_create(c, desc, d, NULL, &id);
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
