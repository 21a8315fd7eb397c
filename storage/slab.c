/* slab.c - slot allocator over one arena (see kvs_slab.h). */
#include "kvs_slab.h"
#include "kvshare.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SLAB_MAX_CLASSES 256
#define SLAB_NONE UINT32_MAX
#define SLAB_WASTE_PCT 2	/* tail waste a class's slab length aims under */
#define SLAB_SEARCH_PAGES 64	/* lengths tried past the first that holds a slot */
#define SLOT_ALIGN 64

/* A run of free pages. */
struct extent {
	uint32_t start;
	uint32_t len;
};

struct slab {
	uint32_t first;		/* first page */
	uint32_t npages;
	uint32_t nslots;
	uint32_t used;
	uint32_t cls;		/* SLAB_NONE while the record is unused */
	uint32_t prev, next;	/* class's partial list; next chains unused records */
	uint32_t hint;		/* no bitmap word below this one has a free slot */
	uint64_t *bits;		/* 1 = allocated; bits past nslots stay 1 */
};

struct slab_class {
	uint64_t block;
	uint64_t stride;	/* block rounded up to SLOT_ALIGN */
	uint32_t npages;	/* slab length */
	uint32_t nslots;	/* slots per slab */
	uint32_t partial;	/* slabs with a free slot, most recent first */
	uint32_t nslabs;
};

struct kvs_slab {
	unsigned shift;		/* log2(page_bytes) */
	uint32_t pages;
	uint32_t pages_free;
	uint32_t *page_map;	/* page -> slab record, SLAB_NONE when free */

	/*
	 * Free runs sorted by start and never adjacent (coalesced), so there
	 * are at most (pages + 1) / 2 of them: the array is sized for that at
	 * create and giving pages back can never fail.
	 */
	struct extent *ext;
	uint32_t next;

	struct slab *slabs;	/* records, indexed by id; realloc'd, so ids not pointers */
	uint32_t nrec;
	uint32_t free_rec;
	uint32_t nslabs;

	struct slab_class cls[SLAB_MAX_CLASSES];
	uint32_t nclasses;

	uint64_t slots_used;
	uint64_t slot_bytes_used;
};

static inline uint64_t page_off(const kvs_slab *s, uint32_t page)
{
	return (uint64_t)page << s->shift;
}

/* ---- page runs ---- */

static void ext_remove(kvs_slab *s, uint32_t i)
{
	memmove(&s->ext[i], &s->ext[i + 1], (s->next - i - 1) * sizeof(*s->ext));
	s->next--;
}

/*
 * Best fit: the smallest run that holds @n, the lowest on a tie. It keeps
 * big runs whole for the classes with long slabs; exact fits leave no
 * splinter at all.
 */
static uint32_t pages_take(kvs_slab *s, uint32_t n)
{
	uint32_t i, best = SLAB_NONE, start;

	for (i = 0; i < s->next; i++) {
		if (s->ext[i].len < n)
			continue;
		if (best == SLAB_NONE || s->ext[i].len < s->ext[best].len)
			best = i;
		if (s->ext[i].len == n)
			break;
	}
	if (best == SLAB_NONE)
		return SLAB_NONE;
	start = s->ext[best].start;
	s->ext[best].start += n;
	s->ext[best].len -= n;
	if (s->ext[best].len == 0)
		ext_remove(s, best);
	s->pages_free -= n;
	return start;
}

static void pages_give(kvs_slab *s, uint32_t start, uint32_t n)
{
	uint32_t lo = 0, hi = s->next, mid;
	int prev, next;

	while (lo < hi) {	/* lo: first run that starts after @start */
		mid = lo + (hi - lo) / 2;
		if (s->ext[mid].start < start)
			lo = mid + 1;
		else
			hi = mid;
	}
	prev = lo > 0 && s->ext[lo - 1].start + s->ext[lo - 1].len == start;
	next = lo < s->next && start + n == s->ext[lo].start;
	if (prev && next) {
		s->ext[lo - 1].len += n + s->ext[lo].len;
		ext_remove(s, lo);
	} else if (prev) {
		s->ext[lo - 1].len += n;
	} else if (next) {
		s->ext[lo].start = start;
		s->ext[lo].len += n;
	} else {
		memmove(&s->ext[lo + 1], &s->ext[lo],
			(s->next - lo) * sizeof(*s->ext));
		s->ext[lo].start = start;
		s->ext[lo].len = n;
		s->next++;
	}
	s->pages_free += n;
}

/* ---- slabs ---- */

static void partial_add(kvs_slab *s, struct slab_class *c, uint32_t id)
{
	struct slab *sl = &s->slabs[id];

	sl->prev = SLAB_NONE;
	sl->next = c->partial;
	if (c->partial != SLAB_NONE)
		s->slabs[c->partial].prev = id;
	c->partial = id;
}

static void partial_del(kvs_slab *s, struct slab_class *c, uint32_t id)
{
	struct slab *sl = &s->slabs[id];

	if (sl->prev != SLAB_NONE)
		s->slabs[sl->prev].next = sl->next;
	else
		c->partial = sl->next;
	if (sl->next != SLAB_NONE)
		s->slabs[sl->next].prev = sl->prev;
}

static int rec_get(kvs_slab *s, uint32_t *id)
{
	struct slab *n;
	uint64_t cap;
	uint32_t i;

	if (s->free_rec == SLAB_NONE) {
		/* A slab has at least one page: never more records than pages. */
		cap = s->nrec ? (uint64_t)s->nrec * 2 : 64;
		if (cap > s->pages)
			cap = s->pages;
		if (cap <= s->nrec)
			return -ENOMEM;
		n = realloc(s->slabs, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->slabs = n;
		for (i = (uint32_t)cap; i-- > s->nrec;) {
			n[i].cls = SLAB_NONE;
			n[i].bits = NULL;
			n[i].next = s->free_rec;
			s->free_rec = i;
		}
		s->nrec = (uint32_t)cap;
	}
	*id = s->free_rec;
	s->free_rec = s->slabs[*id].next;
	return 0;
}

static void rec_put(kvs_slab *s, uint32_t id)
{
	s->slabs[id].cls = SLAB_NONE;
	s->slabs[id].next = s->free_rec;
	s->free_rec = id;
}

static int slab_new(kvs_slab *s, uint32_t cid)
{
	struct slab_class *c = &s->cls[cid];
	uint32_t words = (c->nslots + 63) / 64, id, first, i;
	struct slab *sl;
	uint64_t *bits;
	int err;

	first = pages_take(s, c->npages);
	if (first == SLAB_NONE)
		return -ENOSPC;
	bits = calloc(words, sizeof(*bits));
	err = bits ? rec_get(s, &id) : -ENOMEM;
	if (err) {
		free(bits);
		pages_give(s, first, c->npages);
		return err;
	}
	if (c->nslots % 64)
		bits[words - 1] = ~0ULL << (c->nslots % 64);
	for (i = 0; i < c->npages; i++)
		s->page_map[first + i] = id;

	sl = &s->slabs[id];
	sl->first = first;
	sl->npages = c->npages;
	sl->nslots = c->nslots;
	sl->used = 0;
	sl->cls = cid;
	sl->hint = 0;
	sl->bits = bits;
	partial_add(s, c, id);
	c->nslabs++;
	s->nslabs++;
	return 0;
}

static void slab_release(kvs_slab *s, uint32_t id)
{
	struct slab *sl = &s->slabs[id];
	struct slab_class *c = &s->cls[sl->cls];
	uint32_t i;

	partial_del(s, c, id);
	for (i = 0; i < sl->npages; i++)
		s->page_map[sl->first + i] = SLAB_NONE;
	pages_give(s, sl->first, sl->npages);
	free(sl->bits);
	sl->bits = NULL;
	c->nslabs--;
	s->nslabs--;
	rec_put(s, id);
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
	if (pages == 0 || pages >= SLAB_NONE)
		return -EINVAL;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->shift = (unsigned)__builtin_ctz(page_bytes);
	s->pages = (uint32_t)pages;
	s->page_map = malloc(pages * sizeof(*s->page_map));
	s->ext = malloc((pages + 1) / 2 * sizeof(*s->ext));
	if (!s->page_map || !s->ext) {
		kvs_slab_destroy(s);
		return -ENOMEM;
	}
	for (i = 0; i < s->pages; i++)
		s->page_map[i] = SLAB_NONE;
	s->ext[0].start = 0;
	s->ext[0].len = s->pages;
	s->next = 1;
	s->pages_free = s->pages;
	s->free_rec = SLAB_NONE;
	*out = s;
	return 0;
}

void kvs_slab_destroy(kvs_slab *s)
{
	uint32_t i;

	if (!s)
		return;
	for (i = 0; i < s->nrec; i++)
		free(s->slabs[i].bits);
	free(s->slabs);
	free(s->ext);
	free(s->page_map);
	free(s);
}

/*
 * The shortest slab whose tail (what no whole slot covers, plus the rounding
 * of each slot to SLOT_ALIGN) is within SLAB_WASTE_PCT; failing that, the
 * least waste ratio among the lengths tried. Shorter is better beyond the
 * waste: a short slab empties (and gives its pages back) sooner and fits in
 * smaller holes.
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
		if (slots >= SLAB_NONE)
			break;
		waste = bytes - slots * c->block;
		ratio = (double)waste / (double)bytes;
		if (ratio < best) {
			best = ratio;
			c->npages = (uint32_t)n;
			c->nslots = (uint32_t)slots;
		}
		if (waste * 100 <= bytes * SLAB_WASTE_PCT)
			break;
	}
	return best <= 1.0 ? 0 : KVS_E_LAYOUT;
}

int kvs_slab_class(kvs_slab *s, uint64_t block_bytes, uint32_t *class_id)
{
	struct slab_class *c;
	uint32_t i;
	int err;

	if (block_bytes == 0 || block_bytes > page_off(s, s->pages))
		return KVS_E_LAYOUT;
	for (i = 0; i < s->nclasses; i++) {
		if (s->cls[i].block == block_bytes) {
			*class_id = i;
			return 0;
		}
	}
	if (s->nclasses == SLAB_MAX_CLASSES)
		return -ENOSPC;
	c = &s->cls[s->nclasses];
	memset(c, 0, sizeof(*c));
	c->block = block_bytes;
	c->stride = (block_bytes + SLOT_ALIGN - 1) & ~(uint64_t)(SLOT_ALIGN - 1);
	c->partial = SLAB_NONE;
	err = class_layout(s, c);
	if (err)
		return err;
	*class_id = s->nclasses++;
	return 0;
}

int kvs_slab_alloc(kvs_slab *s, uint32_t class_id, uint64_t *offset)
{
	struct slab_class *c;
	struct slab *sl;
	uint32_t w, idx;
	int err;

	if (class_id >= s->nclasses)
		return -EINVAL;
	c = &s->cls[class_id];
	if (c->partial == SLAB_NONE) {
		err = slab_new(s, class_id);
		if (err)
			return err;
	}
	sl = &s->slabs[c->partial];
	/* A partial slab has a zero bit at or past hint: the scan stops. */
	for (w = sl->hint; sl->bits[w] == ~0ULL; w++)
		;
	sl->hint = w;
	idx = (uint32_t)__builtin_ctzll(~sl->bits[w]);
	sl->bits[w] |= 1ULL << idx;
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
	uint64_t rel, idx, bit;
	uint32_t id, w;

	if (offset >= page_off(s, s->pages))
		return -EINVAL;
	id = s->page_map[offset >> s->shift];
	if (id == SLAB_NONE)
		return -EINVAL;
	sl = &s->slabs[id];
	c = &s->cls[sl->cls];
	rel = offset - page_off(s, sl->first);
	idx = rel / c->stride;
	if (rel % c->stride || idx >= sl->nslots)
		return -EINVAL;
	w = (uint32_t)(idx / 64);
	bit = 1ULL << (idx % 64);
	if (!(sl->bits[w] & bit))
		return -EINVAL;

	sl->bits[w] &= ~bit;
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

uint64_t kvs_slab_class_bytes(const kvs_slab *s, uint32_t class_id)
{
	return class_id < s->nclasses ? s->cls[class_id].block : 0;
}

uint32_t kvs_slab_class_slabs(const kvs_slab *s, uint32_t class_id)
{
	return class_id < s->nclasses ? s->cls[class_id].nslabs : 0;
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
	out->classes = s->nclasses;
	out->slabs = s->nslabs;
}
