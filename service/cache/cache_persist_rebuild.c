/* cache_persist_rebuild.c - the block table rebuilt from adopted metadata
 * (kvs_persist.h, "Trust"): namespaces first, then each record checked on
 * its own and its slot claimed, then the table loaded at once, then the
 * parent links (a record whose parent was not kept goes too), last the
 * policy. Every record not kept is marked free. */
#define _GNU_SOURCE
#include "kvs_persist.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "cache_int.h"
#include "persist_fmt.h"

int cache_persist_rebuild(kvs_cache *c, kvs_persist_report *r);

typedef struct rebuild {
	kvs_cache *c;
	cache_persist *p;
	uint32_t *gen;     /* by namespace id: the entry's gen, 0: not restored */
	uint32_t n;        /* records looked at: rec_cap, at most the table's */
	kvs_hash *key;     /* by record: its table key */
	kvs_hash *pkey;    /* its parent's key, or zero */
	uint64_t *off;
	uint32_t *ns;      /* its namespace (0: none kept at this index) */
	uint8_t *keep;     /* 1 kept so far; resolution: 2 ok, 3 walking */
	uint32_t *stack;
} rebuild;

static void rec_free(rebuild *b, uint32_t i)
{
	atomic_store_explicit((_Atomic uint32_t *)&cache_persist_rec(b->p, i)->state,
			      PST_FREE, memory_order_release);
}

/* Namespace entry @id: decoded, checked and made at its id, or skipped. */
static void ns_one(rebuild *b, uint32_t id, kvs_persist_report *r)
{
	const persist_ns *e = cache_persist_ns_at(b->p, id);
	char model[KVS_NS_STR_MAX + 1], adapter[KVS_NS_STR_MAX + 1];
	persist_ns copy;
	kvs_ns_layout f;
	kvs_ns_desc d;
	uint32_t got;

	if (atomic_load_explicit((_Atomic uint32_t *)&e->state,
				 memory_order_acquire) != 1)
		return;
	memcpy(&copy, e, sizeof(copy));
	if (copy.len > sizeof(copy.entry) || copy.sum != persist_ns_sum(&copy) ||
	    copy.gen == 0 || copy.dom >= b->c->ndoms ||
	    kvs_ns_decode(copy.entry, copy.len, &f) != (int)copy.len ||
	    f.id != id) {
		kvs_warn("persist: namespace entry %u is not valid: its blocks "
			 "are dropped", id);
		return;
	}
	memcpy(model, f.model, f.model_len);
	model[f.model_len] = '\0';
	memcpy(adapter, f.adapter, f.adapter_len);
	adapter[f.adapter_len] = '\0';
	d = (kvs_ns_desc){ .model = model, .adapter = adapter, .salt = f.salt,
			   .salt_len = f.salt_len, .layers = f.layers,
			   .kv_heads = f.kv_heads, .head_dim = f.head_dim,
			   .block_tokens = f.block_tokens, .tp_rank = f.tp_rank,
			   .tp_size = f.tp_size, .dtype = f.dtype };
	if (strlen(model) != f.model_len || strlen(adapter) != f.adapter_len ||
	    cache_ns_create(b->c, &d, copy.dom, NULL, id, &got) < 0) {
		kvs_warn("persist: namespace %u cannot be restored: its blocks "
			 "are dropped", id);
		return;
	}
	b->gen[id] = copy.gen;
	r->namespaces++;
}

/* XXH3-64 of a block in an adopted arena. The pages of a block of 16 or
 * more are mapped in one call first (MADV_POPULATE_READ, Linux 5.14;
 * ignored where it fails): a page fault each costs more than the checksum;
 * for a smaller one the call would. */
static uint64_t block_sum(const kvs_arena *a, uint64_t off, uint64_t bytes)
{
	uint8_t *base = kvs_arena_base(a);
	uint64_t from = off & ~(uint64_t)4095;
	uint64_t to = (off + bytes + 4095) & ~(uint64_t)4095;

	if (bytes >= 16 * 4096)
		(void)madvise(base + from, (size_t)(to - from),
			      MADV_POPULATE_READ);
	return XXH3_64bits(base + off, (size_t)bytes);
}

/* Record @x (a copy of index @i's) on its own: in bounds, of a restored
 * namespace, its slot claimed in that domain's allocator and its bytes
 * matching. 1: kept (b's arrays filled). */
static int rec_check(rebuild *b, uint32_t i, const persist_rec *x,
		     kvs_persist_report *r)
{
	const ns *s;
	dom *d;

	if (x->ns == 0 || x->ns > b->p->hdr->ns_cap || !b->gen[x->ns] ||
	    b->gen[x->ns] != x->ns_gen)
		return 0;
	s = cache_ns(b->c, x->ns);
	d = &b->c->doms[s->dom];
	if (x->dom != s->dom || x->bytes != s->info.block_bytes ||
	    x->offset % 64 || x->offset > kvs_arena_bytes(d->arena) ||
	    x->bytes > kvs_arena_bytes(d->arena) - x->offset ||
	    kvs_slab_claim(d->slab, s->cls, x->slab_first, x->slab_pages,
			   x->offset) < 0)
		return 0;
	if (block_sum(d->arena, x->offset, x->bytes) != x->sum) {
		kvs_slab_free(d->slab, x->offset);
		r->bad_sum++;
		return 0;
	}
	b->key[i] = cache_ns_key(x->ns, (kvs_hash){ .lo = x->hash_lo,
						    .hi = x->hash_hi });
	b->pkey[i] = (x->parent_lo || x->parent_hi) ?
		cache_ns_key(x->ns, (kvs_hash){ .lo = x->parent_lo,
						.hi = x->parent_hi }) :
		(kvs_hash){ 0, 0 };
	b->off[i] = x->offset;
	b->ns[i] = x->ns;
	b->keep[i] = 1;
	return 1;
}

/* Record @i: kept as it is, or marked free (a crash of this rebuild
 * loses nothing that was kept). */
static void rec_one(rebuild *b, uint32_t i, kvs_persist_report *r)
{
	persist_rec *e = cache_persist_rec(b->p, i), x;
	uint32_t st = atomic_load_explicit((_Atomic uint32_t *)&e->state,
					   memory_order_acquire);

	if (PST_OF(st) == PST_FREE)
		return;
	memcpy(&x, e, sizeof(x)); /* checked as copied: nothing moves under it */
	if (PST_OF(st) == PST_VERIFIED && x.rsum == persist_rec_sum(&x) &&
	    rec_check(b, i, &x, r))
		return;
	if (PST_OF(st) == PST_COMMITTED && x.rsum == persist_rec_sum(&x))
		r->unverified++; /* its checksum not computed before the end */
	else if (PST_OF(st) != PST_VERIFIED || x.rsum != persist_rec_sum(&x))
		r->torn++;
	r->blocks_dropped++;
	rec_free(b, i);
}

/* The parent record of kept @i: KVS_NONE for a root, @i itself when its
 * parent was not kept (or is itself). */
static uint32_t parent_of(const rebuild *b, uint32_t i)
{
	uint32_t p;

	if (!b->pkey[i].lo && !b->pkey[i].hi)
		return KVS_NONE;
	p = kvs_table_find(b->c->table, b->pkey[i]);
	return p == KVS_NONE || p == i || !b->keep[p] ? i : p;
}

/* Record @i leaves: its slot and record go (it has no child linked yet). */
static void unkeep(rebuild *b, uint32_t i, kvs_persist_report *r)
{
	kvs_cache *c = b->c;

	ns *s = cache_ns(c, b->ns[i]);

	kvs_slab_free(c->doms[s->dom].slab, b->off[i]);
	s->recs--;
	s->info.blocks--;
	kvs_table_remove(c->table, i);
	rec_free(b, i);
	b->keep[i] = 0;
	r->blocks_kept--;
	r->blocks_dropped++;
}

/* Kept @i (its parent @p linked already, or KVS_NONE) joins the tree. */
static void link_one(rebuild *b, uint32_t i, uint32_t p)
{
	kvs_cache *c = b->c;
	kvs_rec *r = cache_rec(c, i);

	b->keep[i] = 2;
	if (p != KVS_NONE) {
		r->parent = p;
		cache_rec(c, p)->children++;
		cache_chain_link(c, i, p);
	}
	cache_set_tier(c, i, KVS_TIER_HOST);
	if (p != KVS_NONE)
		cache_sync_evictable(c, p);
}

/* Resolve kept @i: its chain up to a root or a linked record is linked,
 * root first; a chain that ends at a record not kept, or loops, goes. */
static void resolve(rebuild *b, uint32_t i, kvs_persist_report *r)
{
	uint32_t top = 0, cur = i, p;
	int ok;

	b->stack[top++] = i;
	b->keep[i] = 3;
	for (;;) {
		p = parent_of(b, cur);
		if (p == KVS_NONE || b->keep[p] == 2) {
			ok = 1;
			break;
		}
		if (p == cur || b->keep[p] == 3) {
			ok = 0;
			break;
		}
		b->stack[top++] = p;
		b->keep[p] = 3;
		cur = p;
	}
	while (top-- > 0) {
		cur = b->stack[top];
		if (ok)
			link_one(b, cur, parent_of(b, cur));
		else
			unkeep(b, cur, r);
	}
}

static int rebuild_alloc(rebuild *b)
{
	uint32_t n = b->n;

	b->gen = calloc((size_t)b->p->hdr->ns_cap + 1, sizeof(*b->gen));
	b->key = calloc(n, sizeof(*b->key));
	b->pkey = calloc(n, sizeof(*b->pkey));
	b->off = calloc(n, sizeof(*b->off));
	b->ns = calloc(n, sizeof(*b->ns));
	b->keep = calloc(n, 1);
	b->stack = calloc(n, sizeof(*b->stack));
	return b->gen && b->key && b->pkey && b->off && b->ns && b->keep && b->stack ?
	       0 : -ENOMEM;
}

static void rebuild_free(rebuild *b)
{
	free(b->gen);
	free(b->key);
	free(b->pkey);
	free(b->off);
	free(b->ns);
	free(b->keep);
	free(b->stack);
}

/* The kept records' fields, from what was checked (the table has them at
 * their indices, as kvs_table_insert leaves a record). */
static int fill(rebuild *b, kvs_persist_report *r)
{
	kvs_cache *c = b->c;
	int rc;

	for (uint32_t i = 0; i < b->n; i++) {
		kvs_rec *x;
		ns *s;

		if (!b->ns[i])
			continue;
		s = cache_ns(c, b->ns[i]);
		if (!b->keep[i]) {
			/* A second record of a key: its slot goes. */
			kvs_slab_free(c->doms[s->dom].slab, b->off[i]);
			rec_free(b, i);
			r->blocks_dropped++;
			continue;
		}
		if ((rc = cache_rec_room(c, i)) < 0)
			return rc;
		x = cache_rec(c, i);
		x->state = KVS_REC_READY;
		x->ns = b->ns[i];
		x->cls = (uint16_t)s->cls;
		x->offset = b->off[i];
		x->gen = ++c->gen;
		s->recs++;
		s->info.blocks++;
		cache_touch_atime(c, i);
		r->blocks_kept++;
	}
	return 0;
}

int cache_persist_rebuild(kvs_cache *c, kvs_persist_report *r)
{
	rebuild b = { .c = c, .p = c->persist };
	persist_hdr *h = c->persist->hdr;
	int rc;

	/* Past the high-water marks nothing was written (a garbage mark is
	 * only a longer read, within the caps). */
	uint64_t n = h->rec_hwm < h->rec_cap ? h->rec_hwm : h->rec_cap;
	uint32_t nns = h->ns_hwm < h->ns_cap ? h->ns_hwm : h->ns_cap;

	b.n = n < KVS_NONE - 1 ? (uint32_t)n : KVS_NONE - 1;
	h->state = PHS_DIRTY;
	b.p->adopting = 1;
	if ((rc = rebuild_alloc(&b)) < 0)
		goto out;
	/* The records up to the mark, mapped in one call (as block_sum). */
	(void)madvise(cache_persist_rec(b.p, 0),
		      (size_t)b.n * PERSIST_REC_BYTES, MADV_POPULATE_READ);
	for (uint32_t id = 1; id <= nns; id++)
		ns_one(&b, id, r);
	for (uint32_t i = 0; i < b.n; i++)
		rec_one(&b, i, r);
	if ((rc = kvs_table_load(c->table, b.key, b.keep, b.n)) < 0)
		goto out;
	rc = fill(&b, r);
	for (uint32_t i = 0; rc == 0 && i < b.n; i++) {
		if (b.keep[i] == 1)
			resolve(&b, i, r);
	}
out:
	b.p->adopting = 0;
	rebuild_free(&b);
	return rc;
}
