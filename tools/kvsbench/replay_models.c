/*
 * replay_models.c - offline LRU, Belady with bypass, S3-FIFO and ARC over a
 * replay trace (see replay_models.h).
 *
 * Ids are first renumbered densely (sorted, deduplicated, binary search),
 * so that every model keeps its per-block state in flat arrays. The list
 * based models (LRU, S3-FIFO, ARC) keep each block in at most one list at a
 * time (a ghost is in no cache list), so one pair of link arrays serves all
 * their lists. Belady keeps a max-heap on next use, with stale entries left
 * in place and skipped when they come to the top.
 */
#include "replay_models.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX
#define NEVER UINT64_MAX

static const char *const names[REPLAY_NMODELS] = {
	[REPLAY_LRU] = "lru", [REPLAY_BELADY] = "belady",
	[REPLAY_S3FIFO] = "s3fifo", [REPLAY_ARC] = "arc",
};

const char *replay_model_name(replay_model m)
{
	return (unsigned)m < REPLAY_NMODELS ? names[m] : NULL;
}

/* ---- dense ids -------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* *dense[i]: the rank of t->ids[i] among the distinct ids; *n: how many. */
static int densify(const replay_trace *t, uint32_t **dense, uint32_t *n)
{
	uint64_t *u = malloc((t->nids ? t->nids : 1) * sizeof(*u));
	uint32_t *d = malloc((t->nids ? t->nids : 1) * sizeof(*d));
	size_t k = 0;

	if (!u || !d) {
		free(u);
		free(d);
		return -ENOMEM;
	}
	memcpy(u, t->ids, t->nids * sizeof(*u));
	qsort(u, t->nids, sizeof(*u), cmp_u64);
	for (size_t i = 0; i < t->nids; i++)
		if (k == 0 || u[k - 1] != u[i])
			u[k++] = u[i];
	for (size_t i = 0; i < t->nids; i++) {
		size_t lo = 0, hi = k;

		while (hi - lo > 1) {
			size_t mid = (lo + hi) / 2;

			if (u[mid] <= t->ids[i])
				lo = mid;
			else
				hi = mid;
		}
		d[i] = (uint32_t)lo;
	}
	free(u);
	*dense = d;
	*n = (uint32_t)k;
	return 0;
}

/* ---- lists: head is the most recent end ------------------------------- */

typedef struct list {
	uint32_t head, tail, n;
} list;

typedef struct links {
	uint32_t *prev, *next;
	uint8_t *where; /* the list a block is in, 0 = none */
} links;

static void l_push(links *k, list *l, uint8_t tag, uint32_t x)
{
	k->prev[x] = NIL;
	k->next[x] = l->head;
	if (l->head != NIL)
		k->prev[l->head] = x;
	l->head = x;
	if (l->tail == NIL)
		l->tail = x;
	l->n++;
	k->where[x] = tag;
}

static void l_del(links *k, list *l, uint32_t x)
{
	if (k->prev[x] != NIL)
		k->next[k->prev[x]] = k->next[x];
	else
		l->head = k->next[x];
	if (k->next[x] != NIL)
		k->prev[k->next[x]] = k->prev[x];
	else
		l->tail = k->prev[x];
	l->n--;
	k->where[x] = 0;
}

/* Remove and return the oldest of @l (which is not empty). */
static uint32_t l_pop(links *k, list *l)
{
	uint32_t x = l->tail;

	l_del(k, l, x);
	return x;
}

static const list EMPTY = { NIL, NIL, 0 };

/* ---- the models ------------------------------------------------------- */

enum { IN_T1 = 1, IN_T2, IN_B1, IN_B2 };   /* ARC; LRU uses IN_T1 */
enum { IN_S = 1, IN_M, IN_G };             /* S3-FIFO */

typedef struct model {
	replay_model kind;
	uint64_t cap;
	links k;
	list l[5];          /* by tag */
	uint8_t *freq;      /* S3-FIFO */
	double p;           /* ARC's target size of T1 */
	/* Belady */
	uint64_t *next_use; /* per position: the next position of its id */
	uint64_t *cur;      /* per id: its cached next use */
	uint8_t *cached;
	uint64_t ncached;
	struct bel { uint64_t next; uint32_t id; } *heap;
	size_t nheap;
} model;

static int cached(const model *m, uint32_t x)
{
	uint8_t w = m->k.where[x];

	switch (m->kind) {
	case REPLAY_LRU: return w == IN_T1;
	case REPLAY_ARC: return w == IN_T1 || w == IN_T2;
	case REPLAY_S3FIFO: return w == IN_S || w == IN_M;
	default: return m->cached[x];
	}
}

static void lru_access(model *m, uint32_t x)
{
	if (m->k.where[x])
		l_del(&m->k, &m->l[IN_T1], x);
	else if (m->l[IN_T1].n >= m->cap)
		l_pop(&m->k, &m->l[IN_T1]);
	l_push(&m->k, &m->l[IN_T1], IN_T1, x);
}

/* ---- S3-FIFO ---------------------------------------------------------- */

static uint64_t s3_small(const model *m)
{
	uint64_t s = m->cap / 10;

	return s ? s : 1;
}

static void s3_ghost(model *m, uint32_t x)
{
	/* The ghost remembers as many blocks as main holds at most. */
	uint64_t gcap = m->cap - s3_small(m);

	if (gcap == 0)
		return;
	while (m->l[IN_G].n >= gcap)
		l_pop(&m->k, &m->l[IN_G]);
	l_push(&m->k, &m->l[IN_G], IN_G, x);
}

static void s3_evict_main(model *m)
{
	while (m->l[IN_M].n) {
		uint32_t t = l_pop(&m->k, &m->l[IN_M]);

		if (m->freq[t] == 0)
			return;
		m->freq[t]--;
		l_push(&m->k, &m->l[IN_M], IN_M, t);
	}
}

static void s3_evict_small(model *m)
{
	while (m->l[IN_S].n) {
		uint32_t t = l_pop(&m->k, &m->l[IN_S]);

		if (m->freq[t] > 1) {
			if (m->l[IN_M].n >= m->cap - s3_small(m))
				s3_evict_main(m);
			l_push(&m->k, &m->l[IN_M], IN_M, t);
			m->freq[t] = 0;
		} else {
			s3_ghost(m, t);
			return;
		}
	}
}

static void s3_access(model *m, uint32_t x)
{
	uint8_t w = m->k.where[x];

	if (w == IN_S || w == IN_M) {
		if (m->freq[x] < 3)
			m->freq[x]++;
		return;
	}
	/* Out of the ghost first: making room may push ghosts out. */
	if (w == IN_G)
		l_del(&m->k, &m->l[IN_G], x);
	while (m->l[IN_S].n + m->l[IN_M].n >= m->cap) {
		if (m->l[IN_S].n >= s3_small(m) || m->l[IN_M].n == 0)
			s3_evict_small(m);
		else
			s3_evict_main(m);
	}
	m->freq[x] = 0;
	if (w == IN_G)
		l_push(&m->k, &m->l[IN_M], IN_M, x);
	else
		l_push(&m->k, &m->l[IN_S], IN_S, x);
}

/* ---- ARC -------------------------------------------------------------- */

static void arc_replace(model *m, int in_b2)
{
	uint64_t t1 = m->l[IN_T1].n;

	if (t1 >= 1 && ((in_b2 && (double)t1 == m->p) || (double)t1 > m->p))
		l_push(&m->k, &m->l[IN_B1], IN_B1, l_pop(&m->k, &m->l[IN_T1]));
	else if (m->l[IN_T2].n)
		l_push(&m->k, &m->l[IN_B2], IN_B2, l_pop(&m->k, &m->l[IN_T2]));
	else
		l_push(&m->k, &m->l[IN_B1], IN_B1, l_pop(&m->k, &m->l[IN_T1]));
}

static void arc_access(model *m, uint32_t x)
{
	list *l = m->l;
	double c = (double)m->cap, b1 = (double)l[IN_B1].n,
	       b2 = (double)l[IN_B2].n, d;

	switch (m->k.where[x]) {
	case IN_T1:
	case IN_T2:
		l_del(&m->k, &l[m->k.where[x]], x);
		break;
	case IN_B1:
		d = b1 >= b2 ? 1.0 : b2 / b1;
		m->p = m->p + d < c ? m->p + d : c;
		arc_replace(m, 0);
		l_del(&m->k, &l[IN_B1], x);
		break;
	case IN_B2:
		d = b2 >= b1 ? 1.0 : b1 / b2;
		m->p = m->p - d > 0 ? m->p - d : 0;
		arc_replace(m, 1);
		l_del(&m->k, &l[IN_B2], x);
		break;
	default:
		if (l[IN_T1].n + l[IN_B1].n == m->cap) {
			if (l[IN_T1].n < m->cap) {
				l_pop(&m->k, &l[IN_B1]);
				arc_replace(m, 0);
			} else {
				l_pop(&m->k, &l[IN_T1]);
			}
		} else if (l[IN_T1].n + l[IN_T2].n + l[IN_B1].n +
			   l[IN_B2].n >= m->cap) {
			if (l[IN_T1].n + l[IN_T2].n + l[IN_B1].n +
			    l[IN_B2].n == 2 * m->cap)
				l_pop(&m->k, &l[IN_B2]);
			if (l[IN_T1].n + l[IN_T2].n >= m->cap)
				arc_replace(m, 0);
		}
		l_push(&m->k, &l[IN_T1], IN_T1, x);
		return;
	}
	l_push(&m->k, &l[IN_T2], IN_T2, x);
}

/* ---- Belady with bypass ----------------------------------------------- */

static void bel_push(model *m, uint64_t next, uint32_t id)
{
	size_t i = m->nheap++;

	while (i > 0 && m->heap[(i - 1) / 2].next < next) {
		m->heap[i] = m->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	m->heap[i] = (struct bel){ next, id };
}

static void bel_pop(model *m)
{
	struct bel last = m->heap[--m->nheap];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= m->nheap)
			break;
		if (c + 1 < m->nheap && m->heap[c + 1].next > m->heap[c].next)
			c++;
		if (m->heap[c].next <= last.next)
			break;
		m->heap[i] = m->heap[c];
		i = c;
	}
	if (m->nheap)
		m->heap[i] = last;
}

/* The cached block used furthest ahead (stale heap entries dropped). */
static const struct bel *bel_top(model *m)
{
	while (m->nheap) {
		const struct bel *b = &m->heap[0];

		if (m->cached[b->id] && m->cur[b->id] == b->next)
			return b;
		bel_pop(m);
	}
	return NULL;
}

static void bel_access(model *m, uint32_t x, uint64_t pos)
{
	uint64_t nu = m->next_use[pos];
	const struct bel *top;

	if (!m->cached[x]) {
		if (m->ncached >= m->cap) {
			top = bel_top(m);
			if (!top || nu >= top->next)
				return; /* bypass: nothing cached is used later */
			m->cached[top->id] = 0;
			m->ncached--;
			bel_pop(m);
		}
		m->cached[x] = 1;
		m->ncached++;
	}
	m->cur[x] = nu;
	bel_push(m, nu, x);
}

/* ---- the driver ------------------------------------------------------- */

static void model_free(model *m)
{
	free(m->k.prev);
	free(m->k.next);
	free(m->k.where);
	free(m->freq);
	free(m->next_use);
	free(m->cur);
	free(m->cached);
	free(m->heap);
}

static int model_init(model *m, replay_model kind, uint64_t cap,
		      const uint32_t *d, size_t nids, uint32_t n)
{
	size_t nn = n ? n : 1;

	memset(m, 0, sizeof(*m));
	m->kind = kind;
	m->cap = cap;
	for (int i = 0; i < 5; i++)
		m->l[i] = EMPTY;
	m->k.prev = malloc(nn * sizeof(uint32_t));
	m->k.next = malloc(nn * sizeof(uint32_t));
	m->k.where = calloc(nn, 1);
	m->freq = calloc(nn, 1);
	if (!m->k.prev || !m->k.next || !m->k.where || !m->freq)
		return -ENOMEM;
	if (kind != REPLAY_BELADY)
		return 0;
	m->next_use = malloc((nids ? nids : 1) * sizeof(uint64_t));
	m->cur = malloc(nn * sizeof(uint64_t));
	m->cached = calloc(nn, 1);
	m->heap = malloc((nids ? nids : 1) * sizeof(*m->heap));
	if (!m->next_use || !m->cur || !m->cached || !m->heap)
		return -ENOMEM;
	/* m->cur as "the next position seen so far", scanning backwards. */
	for (uint32_t i = 0; i < n; i++)
		m->cur[i] = NEVER;
	for (size_t i = nids; i-- > 0;) {
		m->next_use[i] = m->cur[d[i]];
		m->cur[d[i]] = i;
	}
	return 0;
}

int replay_model_run(replay_model kind, const replay_trace *t, uint64_t blocks,
		     uint32_t block_tokens, replay_count *out)
{
	uint32_t *d = NULL, n = 0;
	model m;
	int rc;

	memset(out, 0, sizeof(*out));
	if (blocks == 0 || (unsigned)kind >= REPLAY_NMODELS)
		return -EINVAL;
	rc = densify(t, &d, &n);
	if (rc < 0)
		return rc;
	rc = model_init(&m, kind, blocks, d, t->nids, n);
	for (size_t i = 0; rc == 0 && i < t->nreqs; i++) {
		const replay_req *r = &t->reqs[i];
		const uint32_t *x = d + r->first;
		uint64_t k = 0, hit;

		while (k < r->n && cached(&m, x[k]))
			k++;
		hit = k * block_tokens;
		out->hit_tokens += hit < r->input ? hit : r->input;
		out->input_tokens += r->input;
		out->hit_blocks += k;
		for (uint32_t j = 0; j < r->n; j++) {
			switch (kind) {
			case REPLAY_LRU: lru_access(&m, x[j]); break;
			case REPLAY_S3FIFO: s3_access(&m, x[j]); break;
			case REPLAY_ARC: arc_access(&m, x[j]); break;
			default: bel_access(&m, x[j], r->first + j); break;
			}
		}
	}
	model_free(&m);
	free(d);
	return rc;
}
