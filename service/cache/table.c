/* table.c - block table (see kvs_table.h). */
#include "kvs_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct kvs_table {
	kvs_rec *recs;     /* record array */
	uint32_t nrecs;    /* records allocated in the array */
	uint32_t used;     /* records in use */
	uint32_t free_head; /* free list through rec.parent */
	uint32_t *slots;   /* index: record number or KVS_NONE */
	uint32_t mask;     /* index capacity - 1 (a power of two) */
};

#define INITIAL_SLOTS 1024u

/* Block hashes are already uniform: their low word is a fine index hash. */
static inline uint32_t home(const kvs_table *t, kvs_hash h)
{
	return (uint32_t)(h.lo ^ (h.lo >> 32)) & t->mask;
}

static inline int hash_eq(kvs_hash a, kvs_hash b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

int kvs_table_create(kvs_table **out)
{
	kvs_table *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->slots = malloc(INITIAL_SLOTS * sizeof(uint32_t));
	if (!t->slots) {
		free(t);
		return -ENOMEM;
	}
	memset(t->slots, 0xff, INITIAL_SLOTS * sizeof(uint32_t));
	t->mask = INITIAL_SLOTS - 1;
	t->free_head = KVS_NONE;
	*out = t;
	return 0;
}

void kvs_table_destroy(kvs_table *t)
{
	if (!t)
		return;
	free(t->recs);
	free(t->slots);
	free(t);
}

uint32_t kvs_table_find(const kvs_table *t, kvs_hash h)
{
	for (uint32_t i = home(t, h);; i = (i + 1) & t->mask) {
		uint32_t r = t->slots[i];

		if (r == KVS_NONE)
			return KVS_NONE;
		if (hash_eq(t->recs[r].hash, h))
			return r;
	}
}

static void place(kvs_table *t, uint32_t r)
{
	uint32_t i = home(t, t->recs[r].hash);

	while (t->slots[i] != KVS_NONE)
		i = (i + 1) & t->mask;
	t->slots[i] = r;
}

static int grow_index(kvs_table *t)
{
	uint32_t ncap = (t->mask + 1) * 2;
	uint32_t *old = t->slots, oldcap = t->mask + 1;
	uint32_t *ns;

	if (ncap == 0)
		return -ENOMEM;
	ns = malloc((size_t)ncap * sizeof(uint32_t));
	if (!ns)
		return -ENOMEM;
	memset(ns, 0xff, (size_t)ncap * sizeof(uint32_t));
	t->slots = ns;
	t->mask = ncap - 1;
	for (uint32_t i = 0; i < oldcap; i++)
		if (old[i] != KVS_NONE)
			place(t, old[i]);
	free(old);
	return 0;
}

static int grow_recs(kvs_table *t)
{
	/* Grow by a quarter, not double: records are most of the table's
	 * memory, and this keeps the slack (and so bytes per block) bounded. */
	uint32_t n = t->nrecs < 1024 ? 1024 : t->nrecs + t->nrecs / 4;
	kvs_rec *nr;

	if (n <= t->nrecs || n >= KVS_NONE)
		return -ENOMEM;
	nr = realloc(t->recs, (size_t)n * sizeof(kvs_rec));
	if (!nr)
		return -ENOMEM;
	/* New records go on the free list in index order. */
	for (uint32_t i = n; i-- > t->nrecs;) {
		nr[i].state = KVS_REC_FREE;
		nr[i].parent = t->free_head;
		t->free_head = i;
	}
	t->recs = nr;
	t->nrecs = n;
	return 0;
}

int kvs_table_insert(kvs_table *t, kvs_hash h, uint32_t *idx)
{
	uint32_t r;
	int rc;

	if (kvs_table_find(t, h) != KVS_NONE)
		return -EEXIST;
	if ((uint64_t)(t->used + 1) * 2 > (uint64_t)t->mask + 1 &&
	    (rc = grow_index(t)) < 0)
		return rc;
	if (t->free_head == KVS_NONE && (rc = grow_recs(t)) < 0)
		return rc;
	r = t->free_head;
	t->free_head = t->recs[r].parent;
	memset(&t->recs[r], 0, sizeof(kvs_rec));
	t->recs[r].hash = h;
	t->recs[r].parent = KVS_NONE;
	t->recs[r].pol = KVS_NONE;
	t->recs[r].state = KVS_REC_WRITING;
	t->used++;
	place(t, r);
	*idx = r;
	return 0;
}

void kvs_table_remove(kvs_table *t, uint32_t r)
{
	uint32_t i = home(t, t->recs[r].hash);

	while (t->slots[i] != r)
		i = (i + 1) & t->mask;
	/* Backward-shift: pull later entries of the probe run into the hole so
	 * that every lookup still finds its record without tombstones. */
	for (uint32_t j = (i + 1) & t->mask;; j = (j + 1) & t->mask) {
		uint32_t s = t->slots[j], k;

		if (s == KVS_NONE)
			break;
		k = home(t, t->recs[s].hash);
		/* Move s into the hole i unless its home lies cyclically in (i, j]. */
		if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
			t->slots[i] = s;
			i = j;
		}
	}
	t->slots[i] = KVS_NONE;
	t->recs[r].state = KVS_REC_FREE;
	t->recs[r].parent = t->free_head;
	t->free_head = r;
	t->used--;
}

int kvs_table_load(kvs_table *t, const kvs_hash *keys, uint8_t *keep,
		   uint32_t n)
{
	uint32_t cap = n < 1024 ? 1024 : n, want = 0, isz = INITIAL_SLOTS;
	kvs_rec *nr;
	uint32_t *ns;

	if (t->used || n >= KVS_NONE)
		return t->used ? -EBUSY : -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		want += keep[i] != 0;
	while ((uint64_t)want * 2 > isz)
		isz *= 2;
	nr = realloc(t->recs, (size_t)cap * sizeof(kvs_rec));
	ns = nr ? malloc((size_t)isz * sizeof(uint32_t)) : NULL;
	if (!nr || !ns) {
		if (nr)
			t->recs = nr;
		return -ENOMEM;
	}
	free(t->slots);
	memset(ns, 0xff, (size_t)isz * sizeof(uint32_t));
	memset(nr, 0, (size_t)cap * sizeof(kvs_rec));
	t->recs = nr;
	t->nrecs = cap;
	t->slots = ns;
	t->mask = isz - 1;
	for (uint32_t i = 0; i < n; i++) {
		if (!keep[i] || kvs_table_find(t, keys[i]) != KVS_NONE) {
			keep[i] = 0;
			continue;
		}
		nr[i].hash = keys[i];
		nr[i].parent = KVS_NONE;
		nr[i].pol = KVS_NONE;
		nr[i].state = KVS_REC_WRITING;
		t->used++;
		place(t, i);
	}
	/* The free ones on the free list in index order, as grow_recs does. */
	t->free_head = KVS_NONE;
	for (uint32_t i = cap; i-- > 0;) {
		if (i < n && keep[i])
			continue;
		nr[i].state = KVS_REC_FREE;
		nr[i].parent = t->free_head;
		t->free_head = i;
	}
	return 0;
}

kvs_rec *kvs_table_rec(const kvs_table *t, uint32_t idx)
{
	return &t->recs[idx];
}

uint32_t kvs_table_capacity(const kvs_table *t)
{
	return t->nrecs;
}

uint32_t kvs_table_count(const kvs_table *t)
{
	return t->used;
}

uint64_t kvs_table_bytes(const kvs_table *t)
{
	return (uint64_t)t->nrecs * sizeof(kvs_rec) +
	       ((uint64_t)t->mask + 1) * sizeof(uint32_t);
}
