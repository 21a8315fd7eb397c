/* slab.c - slot allocator over one arena (see kvs_slab.h). */
#include "kvs_slab.h"
#include "kvs_pool.h"
#include "kvs_types.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SLAB_MAX_CLASSES KVS_SLAB_MAX_CLASSES
#define SLAB_WASTE_PCT 2	/* tail waste a slab length aims under */
#define SLAB_SEARCH_PAGES 64	/* lengths tried past the shortest */
#define SHORT_WASTE_PCT 10	/* tail waste allowed to a short slab */
#define SLOT_ALIGN 64
#define RUN_BINS 128		/* runs binned by exact length below this */
#define PAGE_FREE 0x80000000u	/* page_map: in no slab (see below) */

struct slab {
	uint32_t first;		/* first page */
	uint32_t npages;
	uint32_t nslots;
	uint32_t used;
	uint32_t cls;		/* KVS_NONE while the record is unused */
	uint32_t prev, next;	/* the class's partial list */
	uint32_t hint;		/* no bitmap word below it has a free slot */
	/*
	 * Slot bitmap, 1 = allocated; bits past nslots stay 1 so a scan needs
	 * no bound. Up to 64 slots (most KV block sizes) it lives in the
	 * record: no malloc per slab and one cache miss less per free.
	 */
	union {
		uint64_t word;
		uint64_t *words;
	} map;
};

struct slab_class {
	uint64_t block;
	uint64_t stride;	/* block rounded up to SLOT_ALIGN */
	uint32_t npages;	/* slab length */
	uint32_t nslots;	/* slots per slab */
	uint32_t short_npages;	/* slab for when no run fits npages; 0: none */
	uint32_t short_nslots;
	uint32_t partial;	/* slabs with a free slot, most recent first */
	uint32_t nslabs;
	uint32_t refs;		/* kvs_slab_class() calls not put back */
};

struct kvs_slab {
	unsigned shift;		/* log2(page_bytes) */
	uint32_t pages;
	uint32_t pages_free;
	/*
	 * page -> slab record; or PAGE_FREE, and on the first and last page
	 * of a free run PAGE_FREE | its length (boundary tags: a freed slab
	 * finds its free neighbours in O(1), and runs never sit side by side).
	 */
	uint32_t *page_map;

	/*
	 * Free runs on doubly linked lists by length, indexed by first page:
	 * bin[len] for len < RUN_BINS, bin[0] for all longer ones. A slab
	 * takes the shortest run that holds it (best fit), found with the
	 * bitmap of non-empty bins; only the long bin is scanned.
	 */
	uint32_t *run_next, *run_prev;
	uint32_t bin[RUN_BINS];
	uint64_t bin_mask[RUN_BINS / 64];

	kvs_pool recs;		/* of struct slab, by id */
	uint32_t nslabs;

	struct slab_class cls[SLAB_MAX_CLASSES];
	uint32_t nclasses;	/* ids in use or freed (block 0) */
	uint32_t nlive;		/* classes with a block size */

	uint64_t slots_used;
	uint64_t slot_bytes_used;
};

static inline uint64_t *slab_bits(struct slab *sl)
{
	return sl->nslots <= 64 ? &sl->map.word : sl->map.words;
}

static inline uint64_t page_off(const kvs_slab *s, uint32_t page)
{
	return (uint64_t)page << s->shift;
}

/* ---- page runs ---- */

static void run_link(kvs_slab *s, uint32_t start, uint32_t len)
{
	uint32_t b = len < RUN_BINS ? len : 0;

	s->page_map[start] = PAGE_FREE | len;
	s->page_map[start + len - 1] = PAGE_FREE | len;
	s->run_prev[start] = KVS_NONE;
	s->run_next[start] = s->bin[b];
	if (s->bin[b] != KVS_NONE)
		s->run_prev[s->bin[b]] = start;
	s->bin[b] = start;
	s->bin_mask[b / 64] |= 1ULL << (b % 64);
}

static void run_unlink(kvs_slab *s, uint32_t start, uint32_t len)
{
	uint32_t b = len < RUN_BINS ? len : 0;
	uint32_t prev = s->run_prev[start], next = s->run_next[start];

	if (prev != KVS_NONE)
		s->run_next[prev] = next;
	else
		s->bin[b] = next;
	if (next != KVS_NONE)
		s->run_prev[next] = prev;
	if (s->bin[b] == KVS_NONE)
		s->bin_mask[b / 64] &= ~(1ULL << (b % 64));
}

static uint32_t run_len(const kvs_slab *s, uint32_t page)
{
	return s->page_map[page] & ~PAGE_FREE;
}

/*
 * Best fit: the shortest run that holds @n, cut from its front. It keeps
 * long runs whole for the classes with long slabs, and exact fits leave no
 * splinter at all.
 */
static uint32_t pages_take(kvs_slab *s, uint32_t n)
{
	uint32_t w, start = KVS_NONE, len = 0, r, l;
	uint64_t m;

	for (w = n / 64; n < RUN_BINS && w < RUN_BINS / 64; w++) {
		m = s->bin_mask[w];
		if (w == n / 64)
			m &= ~0ULL << (n % 64);
		if (m) {
			len = w * 64 + (uint32_t)__builtin_ctzll(m);
			start = s->bin[len];
			break;
		}
	}
	if (start == KVS_NONE) {
		/* a scan, but runs of RUN_BINS pages or more are few */
		for (r = s->bin[0]; r != KVS_NONE; r = s->run_next[r]) {
			l = run_len(s, r);
			if (l >= n && (start == KVS_NONE || l < len)) {
				start = r;
				len = l;
			}
		}
		if (start == KVS_NONE)
			return KVS_NONE;
	}
	run_unlink(s, start, len);
	if (len > n)
		run_link(s, start + n, len - n);
	s->pages_free -= n;
	return start;
}

/* Pages [start, start+n) are PAGE_FREE already; merge with free neighbours. */
static void pages_give(kvs_slab *s, uint32_t start, uint32_t n)
{
	uint32_t len = n, l;

	if (start > 0 && (s->page_map[start - 1] & PAGE_FREE)) {
		l = run_len(s, start - 1);
		start -= l;
		len += l;
		run_unlink(s, start, l);
	}
	if (start + len < s->pages && (s->page_map[start + len] & PAGE_FREE)) {
		l = run_len(s, start + len);
		run_unlink(s, start + len, l);
		len += l;
	}
	run_link(s, start, len);
	s->pages_free += n;
}

/* ---- slabs ---- */

static struct slab *slab_at(const kvs_slab *s, uint32_t id)
{
	return kvs_pool_at(&s->recs, id);
}

static void partial_add(kvs_slab *s, struct slab_class *c, uint32_t id)
{
	struct slab *sl = slab_at(s, id);

	sl->prev = KVS_NONE;
	sl->next = c->partial;
	if (c->partial != KVS_NONE)
		slab_at(s, c->partial)->prev = id;
	c->partial = id;
}

static void partial_del(kvs_slab *s, struct slab_class *c, uint32_t id)
{
	struct slab *sl = slab_at(s, id);

	if (sl->prev != KVS_NONE)
		slab_at(s, sl->prev)->next = sl->next;
	else
		c->partial = sl->next;
	if (sl->next != KVS_NONE)
		slab_at(s, sl->next)->prev = sl->prev;
}

static int rec_get(kvs_slab *s, uint32_t *id)
{
	/* a slab has a page at least: never more records than pages */
	if (kvs_pool_count(&s->recs) >= s->pages)
		return -ENOMEM;
	return kvs_pool_alloc(&s->recs, id) < 0 ? -ENOMEM : 0;
}

static void rec_put(kvs_slab *s, uint32_t id)
{
	slab_at(s, id)->cls = KVS_NONE;
	kvs_pool_free(&s->recs, id);
}

/* A slab of class @cid on pages [first, first+npages), taken from the free
 * runs already; given back on failure. Sets *out to its id. */
static int slab_init(kvs_slab *s, uint32_t cid, uint32_t first,
		     uint32_t npages, uint32_t nslots, uint32_t *out)
{
	struct slab_class *c = &s->cls[cid];
	uint32_t words, id, i;
	struct slab *sl;
	uint64_t *bits = NULL;
	int err;

	words = (nslots + 63) / 64;
	if (words > 1 && !(bits = calloc(words, sizeof(*bits))))
		err = -ENOMEM;
	else
		err = rec_get(s, &id);
	if (err) {
		free(bits);
		pages_give(s, first, npages);
		return err;
	}
	for (i = 0; i < npages; i++)
		s->page_map[first + i] = id;

	sl = slab_at(s, id);
	sl->first = first;
	sl->npages = npages;
	sl->nslots = nslots;
	sl->used = 0;
	sl->cls = cid;
	sl->hint = 0;
	if (bits)
		sl->map.words = bits;
	else
		sl->map.word = 0;
	bits = slab_bits(sl);
	if (nslots % 64)
		bits[words - 1] = ~0ULL << (nslots % 64);
	partial_add(s, c, id);
	c->nslabs++;
	s->nslabs++;
	*out = id;
	return 0;
}

static int slab_new(kvs_slab *s, uint32_t cid)
{
	struct slab_class *c = &s->cls[cid];
	uint32_t npages = c->npages, nslots = c->nslots, first, id;

	first = pages_take(s, npages);
	if (first == KVS_NONE && c->short_npages) {
		/*
		 * Runs shorter than the slab but longer than a short one are
		 * otherwise lost until a neighbour frees: a little more tail
		 * beats -ENOSPC and an eviction.
		 */
		npages = c->short_npages;
		nslots = c->short_nslots;
		first = pages_take(s, npages);
	}
	if (first == KVS_NONE)
		return -ENOSPC;
	return slab_init(s, cid, first, npages, nslots, &id);
}

/* Pages [first, first+n) out of the free run that holds them all, or
 * -EEXIST when one of them is not free. The run's start is found by walking
 * back to the page after a slab's (O(distance)). */
static int pages_take_at(kvs_slab *s, uint32_t first, uint32_t n)
{
	uint32_t start = first, len;

	for (uint32_t i = 0; i < n; i++)
		if (!(s->page_map[first + i] & PAGE_FREE))
			return -EEXIST;
	while (start > 0 && (s->page_map[start - 1] & PAGE_FREE))
		start--;
	len = run_len(s, start);
	if (start + len < first + n)
		return -EEXIST; /* not one run: a slab sits between */
	run_unlink(s, start, len);
	if (first > start)
		run_link(s, start, first - start);
	if (start + len > first + n)
		run_link(s, first + n, start + len - (first + n));
	s->pages_free -= n;
	return 0;
}

/* A class nobody holds and with no slab is free again (block 0): its id
 * may serve another block size. */
static void class_gone_if_unused(kvs_slab *s, struct slab_class *c)
{
	if (c->refs || c->nslabs || !c->block)
		return;
	c->block = 0;
	s->nlive--;
}

static void slab_release(kvs_slab *s, uint32_t id)
{
	struct slab *sl = slab_at(s, id);
	struct slab_class *c = &s->cls[sl->cls];
	uint32_t i;

	partial_del(s, c, id);
	for (i = 0; i < sl->npages; i++)
		s->page_map[sl->first + i] = PAGE_FREE;
	pages_give(s, sl->first, sl->npages);
	if (sl->nslots > 64)
		free(sl->map.words);
	c->nslabs--;
	s->nslabs--;
	rec_put(s, id);
	class_gone_if_unused(s, c);
}

/* ---- public ---- */

int kvs_slab_create(uint64_t arena_bytes, uint32_t page_bytes, kvs_slab **out)
{
	uint64_t pages;
	kvs_slab *s;
	uint32_t i;

	if (page_bytes < 4096 || (page_bytes & (page_bytes - 1)))
		return -EINVAL;
	pages = arena_bytes / page_bytes;
	if (pages == 0 || pages >= PAGE_FREE)
		return -EINVAL;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	/* Records by the 64 (the first array's size before the pool). */
	if (kvs_pool_init(&s->recs, sizeof(struct slab), 6, (uint32_t)pages) < 0) {
		free(s);
		return -EINVAL;
	}
	s->shift = (unsigned)__builtin_ctz(page_bytes);
	s->pages = (uint32_t)pages;
	s->page_map = malloc(pages * sizeof(*s->page_map));
	s->run_next = malloc(pages * sizeof(*s->run_next));
	s->run_prev = malloc(pages * sizeof(*s->run_prev));
	if (!s->page_map || !s->run_next || !s->run_prev) {
		kvs_slab_destroy(s);
		return -ENOMEM;
	}
	for (i = 0; i < s->pages; i++)
		s->page_map[i] = PAGE_FREE;
	for (i = 0; i < RUN_BINS; i++)
		s->bin[i] = KVS_NONE;
	run_link(s, 0, s->pages);
	s->pages_free = s->pages;
	*out = s;
	return 0;
}

void kvs_slab_destroy(kvs_slab *s)
{
	uint32_t i;

	if (!s)
		return;
	for (i = 0; i < kvs_pool_cap(&s->recs); i++) {
		struct slab *sl = kvs_pool_live_at(&s->recs, i);

		if (sl && sl->nslots > 64)
			free(sl->map.words);
	}
	kvs_pool_fini(&s->recs);
	free(s->run_prev);
	free(s->run_next);
	free(s->page_map);
	free(s);
}

/*
 * The shortest slab whose tail (what no whole slot covers, plus the rounding
 * of each slot to SLOT_ALIGN) is within SLAB_WASTE_PCT; failing that, the
 * least waste ratio among the lengths tried. Shorter is better beyond the
 * waste: a short slab empties (and gives its pages back) sooner and fits in
 * smaller holes. The first length within SHORT_WASTE_PCT, if shorter, is
 * kept as the fallback for runs too short for the real one.
 */
static int class_layout(const kvs_slab *s, struct slab_class *c)
{
	uint64_t n, n0, nmax, bytes, slots, waste;
	double ratio, best = 2.0;

	n0 = (c->block + page_off(s, 1) - 1) >> s->shift;
	nmax = n0 + SLAB_SEARCH_PAGES;
	if (nmax > s->pages)
		nmax = s->pages;
	for (n = n0; n <= nmax; n++) {
		bytes = page_off(s, (uint32_t)n);
		slots = bytes / c->stride;
		if (slots >= KVS_NONE)
			break;
		waste = bytes - slots * c->block;
		ratio = (double)waste / (double)bytes;
		if (ratio < best) {
			best = ratio;
			c->npages = (uint32_t)n;
			c->nslots = (uint32_t)slots;
		}
		if (!c->short_npages &&
		    waste * 100 <= bytes * SHORT_WASTE_PCT) {
			c->short_npages = (uint32_t)n;
			c->short_nslots = (uint32_t)slots;
		}
		if (waste * 100 <= bytes * SLAB_WASTE_PCT)
			break;
	}
	if (c->short_npages >= c->npages)
		c->short_npages = 0;
	return best <= 1.0 ? 0 : KVS_E_LAYOUT;
}

int kvs_slab_class(kvs_slab *s, uint64_t block_bytes, uint32_t *class_id)
{
	struct slab_class *c;
	uint32_t i, slot = s->nclasses;
	int err;

	if (block_bytes == 0 || block_bytes > page_off(s, s->pages))
		return KVS_E_LAYOUT;
	for (i = 0; i < s->nclasses; i++) {
		if (s->cls[i].block == block_bytes) {
			s->cls[i].refs++;
			*class_id = i;
			return 0;
		}
		if (!s->cls[i].block && slot == s->nclasses)
			slot = i;
	}
	if (slot == SLAB_MAX_CLASSES)
		return -ENOSPC;
	c = &s->cls[slot];
	memset(c, 0, sizeof(*c));
	c->block = block_bytes;
	c->stride = (block_bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
	c->partial = KVS_NONE;
	err = class_layout(s, c);
	if (err) {
		c->block = 0;
		return err;
	}
	c->refs = 1;
	s->nlive++;
	if (slot == s->nclasses)
		s->nclasses++;
	*class_id = slot;
	return 0;
}

void kvs_slab_class_put(kvs_slab *s, uint32_t class_id)
{
	struct slab_class *c;

	if (class_id >= s->nclasses || !s->cls[class_id].block ||
	    !s->cls[class_id].refs)
		return;
	c = &s->cls[class_id];
	c->refs--;
	class_gone_if_unused(s, c);
}

int kvs_slab_alloc(kvs_slab *s, uint32_t class_id, uint64_t *offset)
{
	struct slab_class *c;
	struct slab *sl;
	uint32_t w, idx;
	uint64_t *bits;
	int err;

	if (class_id >= s->nclasses || !s->cls[class_id].block)
		return -EINVAL;
	c = &s->cls[class_id];
	if (c->partial == KVS_NONE) {
		err = slab_new(s, class_id);
		if (err)
			return err;
	}
	sl = slab_at(s, c->partial);
	bits = slab_bits(sl);
	/* A partial slab has a zero bit at or past hint: the scan stops. */
	for (w = sl->hint; bits[w] == ~0ULL; w++)
		;
	sl->hint = w;
	idx = (uint32_t)__builtin_ctzll(~bits[w]);
	bits[w] |= 1ULL << idx;
	idx += w * 64;
	if (++sl->used == sl->nslots)
		partial_del(s, c, c->partial);
	s->slots_used++;
	s->slot_bytes_used += c->block;
	*offset = page_off(s, sl->first) + idx * c->stride;
	return 0;
}

int kvs_slab_free(kvs_slab *s, uint64_t offset)
{
	struct slab_class *c;
	struct slab *sl;
	uint64_t rel, idx, bit, *bits;
	uint32_t id, w;

	if (offset >= page_off(s, s->pages))
		return -EINVAL;
	id = s->page_map[offset >> s->shift];
	if (id & PAGE_FREE)
		return -EINVAL;
	sl = slab_at(s, id);
	c = &s->cls[sl->cls];
	rel = offset - page_off(s, sl->first);
	idx = rel / c->stride;
	if (rel % c->stride || idx >= sl->nslots)
		return -EINVAL;
	w = (uint32_t)(idx / 64);
	bit = 1ULL << (idx % 64);
	bits = slab_bits(sl);
	if (!(bits[w] & bit))
		return -EINVAL;

	bits[w] &= ~bit;
	if (w < sl->hint)
		sl->hint = w;
	if (sl->used-- == sl->nslots)
		partial_add(s, c, id);
	s->slots_used--;
	s->slot_bytes_used -= c->block;
	if (sl->used == 0)
		slab_release(s, id);
	return 0;
}

/* The slab of @cid on [first, first+npages) (an existing one, or cut there
 * from free pages), for kvs_slab_claim. */
static int claim_slab(kvs_slab *s, uint32_t cid, uint32_t first,
		      uint32_t npages, struct slab **out)
{
	struct slab_class *c = &s->cls[cid];
	uint32_t id = s->page_map[first], nslots;
	int err;

	if (!(id & PAGE_FREE)) {
		*out = slab_at(s, id);
		return (*out)->cls == cid && (*out)->first == first &&
		       (*out)->npages == npages ? 0 : -EEXIST;
	}
	if (npages == c->npages)
		nslots = c->nslots;
	else if (c->short_npages && npages == c->short_npages)
		nslots = c->short_nslots;
	else
		return -EINVAL; /* a length this class never cuts */
	if ((err = pages_take_at(s, first, npages)) < 0)
		return err;
	if ((err = slab_init(s, cid, first, npages, nslots, &id)) < 0)
		return err;
	*out = slab_at(s, id);
	return 0;
}

int kvs_slab_claim(kvs_slab *s, uint32_t class_id, uint32_t first,
		   uint32_t npages, uint64_t offset)
{
	struct slab_class *c;
	struct slab *sl;
	uint64_t rel, idx, bit, *bits;
	int err;

	if (class_id >= s->nclasses || !s->cls[class_id].block || npages == 0 ||
	    first >= s->pages || npages > s->pages - first)
		return -EINVAL;
	c = &s->cls[class_id];
	if (offset < page_off(s, first) ||
	    offset >= page_off(s, first) + page_off(s, npages))
		return -EINVAL;
	if ((err = claim_slab(s, class_id, first, npages, &sl)) < 0)
		return err;
	rel = offset - page_off(s, first);
	idx = rel / c->stride;
	bits = slab_bits(sl);
	bit = 1ULL << (idx % 64);
	if (rel % c->stride || idx >= sl->nslots || (bits[idx / 64] & bit)) {
		if (sl->used == 0)
			slab_release(s, s->page_map[first]);
		return rel % c->stride || idx >= sl->nslots ? -EINVAL : -EEXIST;
	}
	bits[idx / 64] |= bit;
	if (++sl->used == sl->nslots)
		partial_del(s, c, s->page_map[first]);
	s->slots_used++;
	s->slot_bytes_used += c->block;
	return 0;
}

uint64_t kvs_slab_class_bytes(const kvs_slab *s, uint32_t class_id)
{
	return class_id < s->nclasses ? s->cls[class_id].block : 0;
}

uint32_t kvs_slab_class_slabs(const kvs_slab *s, uint32_t class_id)
{
	return class_id < s->nclasses ? s->cls[class_id].nslabs : 0;
}

uint32_t kvs_slab_of(const kvs_slab *s, uint64_t offset, uint32_t *npages)
{
	uint32_t id;

	if (offset >= page_off(s, s->pages))
		return KVS_NONE;
	id = s->page_map[offset >> s->shift];
	if (id & PAGE_FREE)
		return KVS_NONE;
	if (npages)
		*npages = slab_at(s, id)->npages;
	return id;
}

uint32_t kvs_slab_first(const kvs_slab *s, uint32_t id)
{
	return slab_at(s, id)->first;
}

uint32_t kvs_slab_pages(const kvs_slab *s)
{
	return s->pages;
}

void kvs_slab_stats_get(const kvs_slab *s, kvs_slab_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->page_bytes = page_off(s, 1);
	out->pages_total = s->pages;
	out->arena_bytes = page_off(s, s->pages);
	out->pages_free = s->pages_free;
	out->slots_used = s->slots_used;
	out->slot_bytes_used = s->slot_bytes_used;
	out->slab_bytes = page_off(s, s->pages - s->pages_free);
	out->classes = s->nlive;
	out->slabs = s->nslabs;
}
