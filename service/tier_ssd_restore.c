/* tier_ssd_restore.c - what makes the SSD tier survive a restart: the
 * namespaces file (storage/nsfile.c) and the warm load of the index (see
 * tier_ssd_int.h, docs/ssd.md "Index"). */
#define _GNU_SOURCE
#include "tier_ssd_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvs_log.h"
#include "kvs_types.h" /* kvs_strerror */
#include "kvs_nsfile.h"

/* Namespace ids are handed out in order of first attach; the index names
 * blocks by id, so the ids are persisted in that order. */
void ssd_ns_created(kvs_tier_mod *tt, uint32_t id, const kvs_ns_desc *d)
{
	ssd_tier *t = ssd_of(tt);
	kvs_nsfile_ns ns = {
		.model = d->model, .adapter = d->adapter, .salt = d->salt,
		.model_len = (uint32_t)strlen(d->model),
		.adapter_len = (uint32_t)strlen(d->adapter),
		.salt_len = d->salt_len, .layers = d->layers,
		.kv_heads = d->kv_heads, .head_dim = d->head_dim,
		.block_tokens = d->block_tokens, .tp_rank = d->tp_rank,
		.tp_size = d->tp_size, .dtype = d->dtype };
	int rc = kvs_nsfile_append(t->dir, &ns);

	if (rc == -EINVAL)
		kvs_warn("SSD tier: namespace %u cannot be persisted: its blocks "
			 "will not survive a restart", id);
	else if (rc < 0)
		kvs_err("SSD tier: cannot persist namespace %u in %s/%s: %s", id,
			t->dir, KVS_NSFILE_NAME, kvs_strerror(rc));
}

/* One entry of the namespaces file: the next namespace id. */
static int ns_restore_one(void *arg, const kvs_nsfile_ns *f)
{
	ssd_tier *t = arg;
	char model[KVS_NSFILE_STR_MAX + 1], adapter[KVS_NSFILE_STR_MAX + 1];
	kvs_ns_desc d = { .model = model, .adapter = adapter, .salt = f->salt,
			  .salt_len = f->salt_len, .layers = f->layers,
			  .kv_heads = f->kv_heads, .head_dim = f->head_dim,
			  .block_tokens = f->block_tokens, .tp_rank = f->tp_rank,
			  .tp_size = f->tp_size, .dtype = f->dtype };
	uint32_t id;

	memcpy(model, f->model, f->model_len);
	model[f->model_len] = '\0';
	memcpy(adapter, f->adapter, f->adapter_len);
	adapter[f->adapter_len] = '\0';
	return kvs_tier_ns_restore(&t->base, &d, &id) < 0;
}

typedef struct load {
	ssd_tier *t;
	uint32_t *recs;
	kvs_hash *parents;
	uint64_t n, cap, dropped;
} load;

static int load_room(load *ld)
{
	uint64_t cap = ld->cap ? ld->cap * 2 : 4096;
	uint32_t *nr = realloc(ld->recs, cap * sizeof(*nr));
	kvs_hash *np = nr ? realloc(ld->parents, cap * sizeof(*np)) : NULL;

	if (nr)
		ld->recs = nr;
	if (!nr || !np)
		return -ENOMEM;
	ld->parents = np;
	ld->cap = cap;
	return 0;
}

static int load_one(void *arg, const kvs_index_key *k, const kvs_index_val *v)
{
	load *ld = arg;
	ssd_tier *t = ld->t;
	uint32_t idx;
	int rc = -EINVAL;

	if (ld->n == ld->cap && load_room(ld) < 0)
		return -ENOMEM;
	if (v->gen != 0 && kvs_ssd_segment_gen(t->ssd, v->seg) == v->gen &&
	    !(v->off & 4095) && (v->off >> 12) <= LOC_MAX_OFF4K)
		rc = kvs_tier_rec_restore(&t->base, k->ns, k->hash, v->len,
					  v->atime, &idx);
	if (rc == -ENOMEM)
		return rc;
	if (rc < 0) {
		/* Stale, of no known namespace, or a duplicate. */
		kvs_index_del(t->ix, k);
		ld->dropped++;
		return 0;
	}
	t->loc[idx] = (loc){ .seg = v->seg,
			     .word = (uint32_t)(v->off >> 12) << LOC_FLAG_BITS | LOC_SSD };
	t->blocks++;
	ld->recs[ld->n] = idx;
	ld->parents[ld->n++] = v->parent;
	return 0;
}

/* Every valid index entry becomes an SSD-only READY record, linked to its
 * parent when the parent was loaded too. No data is read. */
static int warm_load(ssd_tier *t)
{
	struct timespec t0, t1;
	load ld = { .t = t };
	int64_t rc;
	uint64_t ms;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = kvs_index_iter(t->ix, load_one, &ld);
	for (uint64_t i = 0; rc >= 0 && i < ld.n; i++)
		kvs_tier_rec_link(&t->base, ld.recs[i], ld.parents[i]);
	free(ld.recs);
	free(ld.parents);
	if (rc < 0)
		return (int)rc;
	kvs_index_flush(t->ix);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* Signed: the nanosecond part of the difference may be negative. */
	ms = (uint64_t)(((int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 +
			 (t1.tv_nsec - t0.tv_nsec)) / 1000000);
	t->counts.restart_blocks = (int64_t)ld.n;
	t->counts.restart_ms = (int64_t)ms;
	kvs_info("SSD tier: loaded %" PRIu64 " indexed blocks in %" PRIu64
		 " ms (%" PRIu64 " stale entries dropped)", ld.n, ms, ld.dropped);
	return 0;
}

int ssd_restore(kvs_tier_mod *tt)
{
	ssd_tier *t = ssd_of(tt);
	int rc = kvs_nsfile_load(t->dir, ns_restore_one, t);

	if (rc >= 0)
		rc = warm_load(t);
	if (rc < 0)
		kvs_err("SSD tier: warm restart failed: %s", kvs_strerror(rc));
	return rc < 0 ? rc : 0;
}
