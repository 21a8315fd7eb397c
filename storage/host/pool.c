/* pool.c - the id pool (see kvs_pool.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_pool.h"

/* Per element, after the chunk's elements: its generation and its link in
 * the free list (LIVE while allocated). */
struct meta {
	uint32_t gen;
	uint32_t next;
};

#define LIVE (KVS_NONE - 1)

static struct meta *meta_of(const kvs_pool *p, uint32_t idx)
{
	uint32_t mask = (1u << p->shift) - 1;
	uint8_t *chunk = p->chunks[idx >> p->shift];

	return (struct meta *)(chunk + ((size_t)p->elem << p->shift)) + (idx & mask);
}

int kvs_pool_init(kvs_pool *p, size_t elem_bytes, uint32_t shift, uint32_t max)
{
	uint32_t per;

	if (!elem_bytes || elem_bytes > UINT32_MAX / 2 || shift > 16 || !max ||
	    max > KVS_POOL_MAX)
		return -EINVAL;
	per = 1u << shift;
	*p = (kvs_pool){
		.shift = shift,
		/* 8-aligned, so that the meta after the elements is aligned
		 * and each element is as aligned as malloc's memory allows. */
		.elem = (uint32_t)((elem_bytes + 7) & ~(size_t)7),
		.max = max > KVS_POOL_MAX - (per - 1) ? KVS_POOL_MAX
						      : (max + per - 1) & ~(per - 1),
		.free_head = KVS_NONE,
	};
	return 0;
}

void kvs_pool_fini(kvs_pool *p)
{
	for (uint32_t i = 0; i < p->nchunks; i++)
		free(p->chunks[i]);
	free(p->chunks);
	p->chunks = NULL;
	p->nchunks = p->chunk_slots = 0;
	p->free_head = KVS_NONE;
	p->live = 0;
}

/* One more chunk, its elements the free list (lowest index first): called
 * with the list empty. */
static int grow(kvs_pool *p)
{
	uint32_t per = 1u << p->shift, base = kvs_pool_cap(p);
	uint8_t *chunk;

	if (base >= p->max)
		return -ENOSPC;
	if (p->nchunks == p->chunk_slots) {
		uint32_t n = p->chunk_slots ? p->chunk_slots * 2 : 4;
		uint8_t **nc = realloc(p->chunks, (size_t)n * sizeof(*nc));

		if (!nc)
			return -ENOMEM;
		p->chunks = nc;
		p->chunk_slots = n;
	}
	chunk = calloc(per, (size_t)p->elem + sizeof(struct meta));
	if (!chunk)
		return -ENOMEM;
	p->chunks[p->nchunks++] = chunk;
	for (uint32_t i = 0; i < per; i++)
		*meta_of(p, base + i) = (struct meta){
			.gen = 1, .next = i + 1 < per ? base + i + 1 : KVS_NONE };
	p->free_head = base;
	return 0;
}

int kvs_pool_alloc(kvs_pool *p, uint32_t *idx)
{
	struct meta *m;
	int rc;

	if (p->free_head == KVS_NONE && (rc = grow(p)) < 0)
		return rc;
	*idx = p->free_head;
	m = meta_of(p, *idx);
	p->free_head = m->next;
	m->next = LIVE;
	p->live++;
	return 0;
}

void kvs_pool_free(kvs_pool *p, uint32_t idx)
{
	struct meta *m = meta_of(p, idx);

	if (++m->gen == 0)
		m->gen = 1;
	m->next = p->free_head;
	p->free_head = idx;
	p->live--;
}

void *kvs_pool_live_at(const kvs_pool *p, uint32_t idx)
{
	if (idx >= kvs_pool_cap(p) || meta_of(p, idx)->next != LIVE)
		return NULL;
	return kvs_pool_at(p, idx);
}

uint64_t kvs_pool_id(const kvs_pool *p, uint32_t idx)
{
	return (uint64_t)meta_of(p, idx)->gen << 32 | idx;
}

int kvs_pool_find(const kvs_pool *p, uint64_t id, uint32_t *idx)
{
	uint32_t i = (uint32_t)id;
	const struct meta *m;

	if (i >= kvs_pool_cap(p))
		return -ENOENT;
	m = meta_of(p, i);
	if ((uint32_t)(id >> 32) == 0)
		return -ENOENT; /* never an id */
	if (m->gen != (uint32_t)(id >> 32))
		return -ESTALE;
	if (m->next != LIVE)
		return -ENOENT;
	*idx = i;
	return 0;
}
