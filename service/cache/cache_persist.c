/* cache_persist.c - the metadata memfd's writer (kvs_persist.h,
 * persist_fmt.h): made with the cache, kept up to date at every host
 * reserve, commit and free (the bytes' checksums are the persist worker's,
 * cache_persist_worker.c); cache_persist_adopt.c reads one back. */
#define _GNU_SOURCE
#include "kvs_persist.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache_int.h"
#include "kvs_memfd.h"
#include "persist_fmt.h"

persist_rec *cache_persist_rec(const cache_persist *p, uint32_t idx)
{
	return (persist_rec *)(p->base + p->hdr->rec_off +
			       (uint64_t)idx * PERSIST_REC_BYTES);
}

persist_ns *cache_persist_ns_at(const cache_persist *p, uint32_t id)
{
	return (persist_ns *)(p->base + p->hdr->ns_off +
			      (uint64_t)(id - 1) * PERSIST_NS_BYTES);
}

/* The geometry the cache @c would write (the adopter compares it). */
void cache_persist_geometry(const kvs_cache *c, persist_hdr *h)
{
	uint64_t host = c->dom_bytes * c->maxdoms, cap = host / PERSIST_BYTES_PER_REC;

	if (cap < 4096)
		cap = 4096;
	if (cap > PERSIST_REC_CAP_MAX)
		cap = PERSIST_REC_CAP_MAX;
	memset(h, 0, sizeof(*h));
	h->magic = PERSIST_MAGIC;
	h->version = PERSIST_VERSION;
	h->hdr_bytes = PERSIST_HDR_BYTES;
	h->rec_bytes = PERSIST_REC_BYTES;
	h->ns_bytes = PERSIST_NS_BYTES;
	h->page_bytes = c->page_bytes;
	h->by_uid = (uint32_t)c->by_uid;
	h->dom_bytes = kvs_arena_size(c->dom_bytes);
	h->maxdoms = c->maxdoms;
	h->ns_cap = PERSIST_NS_CAP;
	h->rec_cap = cap;
	h->ns_off = PERSIST_HDR_BYTES;
	h->rec_off = h->ns_off + (uint64_t)PERSIST_NS_CAP * PERSIST_NS_BYTES;
	h->total_bytes = h->rec_off + cap * PERSIST_REC_BYTES;
	h->sum = XXH3_64bits(h, offsetof(persist_hdr, sum));
}

int cache_persist_map(int fd, uint64_t bytes, cache_persist **out)
{
	cache_persist *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p->base == MAP_FAILED) {
		free(p);
		return -errno;
	}
	p->fd = fd;
	p->bytes = bytes;
	p->hdr = (persist_hdr *)p->base;
	*out = p;
	return 0;
}

void cache_persist_unmap(cache_persist *p)
{
	if (!p)
		return;
	munmap(p->base, p->bytes);
	close(p->fd);
	free(p);
}

int cache_persist_open(kvs_cache *c)
{
	persist_hdr h;
	int fd, rc;

	if (c->maxdoms > PERSIST_MAX_DOMS) {
		kvs_warn("host tier persistence off: %u tenant arenas, at most "
			 "%u are described", c->maxdoms, PERSIST_MAX_DOMS);
		return 0;
	}
	cache_persist_geometry(c, &h);
	/* Pages are touched as records are written: resident memory grows
	 * with the blocks, not with the cap. */
	fd = kvs_memfd_sealed(KVS_PERSIST_META_NAME, h.total_bytes);
	if (fd < 0)
		return fd;
	if ((rc = cache_persist_map(fd, h.total_bytes, &c->persist)) < 0) {
		close(fd);
		return rc;
	}
	memcpy(c->persist->hdr, &h, sizeof(h));
	c->persist->hdr->state = PHS_DIRTY;
	return cache_pw_start(&c->pw);
}

void cache_persist_dom(kvs_cache *c, uint32_t d)
{
	persist_hdr *h = c->persist ? c->persist->hdr : NULL;

	if (!h || d >= PERSIST_MAX_DOMS)
		return;
	h->dom_uid[d] = c->doms[d].uid;
	atomic_store_explicit((_Atomic uint32_t *)&h->ndoms, d + 1,
			      memory_order_release);
}

static void set_state(uint32_t *state, uint32_t v)
{
	atomic_store_explicit((_Atomic uint32_t *)state, v, memory_order_release);
	/* The writes after it (the record's fields, a client's bytes) are
	 * not seen before it. */
	atomic_thread_fence(memory_order_seq_cst);
}

/* Record @e's state word to @st at a new generation: a check of the
 * worker's for the word before it fails. Returns the word stored. */
static uint32_t rec_state(persist_rec *e, uint32_t st)
{
	uint32_t w = PST_WORD(atomic_load_explicit((_Atomic uint32_t *)&e->state,
						   memory_order_relaxed), st);

	set_state(&e->state, w);
	return w;
}

static void set_dirty(cache_persist *p)
{
	if (p->hdr->state != PHS_DIRTY)
		set_state(&p->hdr->state, PHS_DIRTY);
}

void cache_persist_ns(kvs_cache *c, uint32_t id)
{
	cache_persist *p = c->persist;
	const ns *s;
	persist_ns *e;
	kvs_ns_layout f;
	int len;

	if (!p || p->adopting || id == 0 || id > p->hdr->ns_cap)
		return;
	s = cache_ns(c, id);
	e = cache_persist_ns_at(p, id);
	set_dirty(p);
	if (p->hdr->ns_hwm < id)
		set_state(&p->hdr->ns_hwm, id);
	set_state(&e->state, 0);
	f = (kvs_ns_layout){
		.model = s->model, .adapter = s->adapter,
		.salt = (const uint8_t *)s->salt,
		.model_len = (uint32_t)strlen(s->model),
		.adapter_len = (uint32_t)strlen(s->adapter),
		.salt_len = s->salt_len, .layers = s->info.layers,
		.kv_heads = s->info.kv_heads, .head_dim = s->info.head_dim,
		.block_tokens = s->info.block_tokens, .tp_rank = s->info.tp_rank,
		.tp_size = s->info.tp_size, .dtype = s->info.dtype, .id = id };
	len = kvs_ns_encode(&f, e->entry, sizeof(e->entry));
	if (len < 0) {
		kvs_warn("namespace %u: not persisted (%s): its host blocks are "
			 "lost at a restart", id, kvs_strerror(len));
		return;
	}
	e->dom = s->dom;
	e->gen++; /* records of the id's last layout no longer match */
	e->len = (uint32_t)len;
	e->sum = persist_ns_sum(e);
	set_state(&e->state, 1);
}

/* Record @idx is about to be written: the high-water mark covers it. */
static void rec_hwm(cache_persist *p, uint32_t idx)
{
	if (p->hdr->rec_hwm <= idx) {
		p->hdr->rec_hwm = (uint64_t)idx + 1;
		atomic_thread_fence(memory_order_seq_cst);
	}
}

void cache_persist_writing(kvs_cache *c, uint32_t idx)
{
	cache_persist *p = c->persist;

	if (!p || idx >= p->hdr->rec_cap)
		return;
	rec_hwm(p, idx);
	rec_state(cache_persist_rec(p, idx), PST_WRITING);
}

void cache_persist_free(kvs_cache *c, uint32_t idx)
{
	cache_persist *p = c->persist;
	persist_rec *e;

	if (!p || idx >= p->hdr->rec_cap)
		return;
	e = cache_persist_rec(p, idx);
	if (PST_OF(e->state) != PST_FREE)
		rec_state(e, PST_FREE);
}

/* Host record @idx has its bytes: describe it, the committed state last. */
void cache_persist_commit(kvs_cache *c, uint32_t idx)
{
	cache_persist *p = c->persist;
	const kvs_rec *r = cache_rec(c, idx);
	const ns *s;
	const dom *d;
	persist_rec *e;
	kvs_hash h, ph = { 0, 0 };
	uint32_t slab, w, npages = 0;

	if (!p || p->adopting || idx >= p->hdr->rec_cap)
		return;
	e = cache_persist_rec(p, idx);
	if (r->tier != KVS_TIER_HOST || r->state != KVS_REC_READY ||
	    r->ns > p->hdr->ns_cap ||
	    cache_persist_ns_at(p, r->ns)->state != 1) {
		cache_persist_free(c, idx);
		return;
	}
	s = cache_ns(c, r->ns);
	d = &c->doms[s->dom];
	slab = kvs_slab_of(d->slab, r->offset, &npages);
	if (slab == KVS_NONE)
		return;
	set_dirty(p);
	rec_hwm(p, idx);
	rec_state(e, PST_WRITING); /* a check queued for the index fails */
	h = cache_ns_key(r->ns, r->hash);
	if (r->parent != KVS_NONE)
		ph = cache_ns_key(r->ns, cache_rec(c, r->parent)->hash);
	e->ns = r->ns;
	e->ns_gen = cache_persist_ns_at(p, r->ns)->gen;
	e->dom = s->dom;
	e->hash_lo = h.lo;
	e->hash_hi = h.hi;
	e->parent_lo = ph.lo;
	e->parent_hi = ph.hi;
	e->offset = r->offset;
	e->bytes = s->info.block_bytes;
	e->slab_first = kvs_slab_first(d->slab, slab);
	e->slab_pages = npages;
	memset(e->zero, 0, sizeof(e->zero));
	e->rsum = persist_rec_sum(e);
	/* The bytes' sum is the worker's: kept after a crash once verified. */
	w = rec_state(e, PST_COMMITTED);
	if (cache_pw_queue(c->pw, e, w, (const uint8_t *)kvs_arena_base(d->arena) +
			   r->offset, e->bytes) < 0)
		c->stats->persist_queue_full++;
}

int kvs_persist_fds(kvs_cache *c, kvs_named_fd *out, uint32_t max)
{
	uint32_t n = c->persist ? 1 + c->ndoms : 0;

	if (n > max)
		return -ENOSPC;
	if (n == 0)
		return 0;
	out[0].fd = c->persist->fd;
	snprintf(out[0].name, sizeof(out[0].name), "%s", KVS_PERSIST_META_NAME);
	for (uint32_t i = 0; i < c->ndoms; i++) {
		out[1 + i].fd = kvs_arena_fd(c->doms[i].arena);
		snprintf(out[1 + i].name, sizeof(out[1 + i].name), "%s%u",
			 KVS_PERSIST_ARENA_PREFIX, i);
	}
	return (int)n;
}

void cache_persist_settle(kvs_cache *c)
{
	cache_persist *p = c->persist;
	persist_rec *e;
	uint32_t w;

	if (!p)
		return;
	cache_pw_drain(c->pw);
	for (uint64_t i = 0; i < p->hdr->rec_hwm && i < p->hdr->rec_cap; i++) {
		e = cache_persist_rec(p, (uint32_t)i);
		w = e->state;
		if (PST_OF(w) == PST_COMMITTED && e->dom < c->ndoms)
			cache_persist_verify(e, w, (const uint8_t *)kvs_arena_base(
				c->doms[e->dom].arena) + e->offset, e->bytes,
				NULL, NULL);
	}
}

int kvs_persist_sync(kvs_cache *c)
{
	if (c->persist)
		cache_pw_drain(c->pw);
	return 0;
}

uint32_t kvs_persist_pending(kvs_cache *c)
{
	return c->persist ? cache_pw_pending(c->pw) : 0;
}

void kvs_persist_test_hook(kvs_cache *c, void (*fn)(void *), void *arg)
{
	if (c->persist)
		cache_pw_set_hook(c->pw, fn, arg);
}

int kvs_persist_leave(kvs_cache *c)
{
	if (!c->persist)
		return 0;
	cache_persist_settle(c);
	set_state(&c->persist->hdr->state, PHS_CLEAN);
	return 0;
}
