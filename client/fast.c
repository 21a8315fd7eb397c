/*
 * fast.c - hits without a round trip, the client's side (kvs_fast.h for the
 * layout, service/fast/fastidx.c for the daemon's side and the whole ordering
 * argument, docs/architecture.md for both).
 *
 * A lookup probes the domain's index (read-only, seqlock per entry), stores
 * a pin for each hit in this connection's pin area, issues one full fence
 * and re-reads each hit's sequence: unchanged, the daemon cannot evict the
 * block until the pin is cleared (it marks an entry "going" before it scans
 * the pins, with a full fence between); changed, the pins are cleared and
 * the lookup takes the socket path. A release clears the pins: stores and
 * a fence, no system call. Anything unusual (an entry being written, a miss
 * the index cannot vouch for, a full pin area, more hashes than pins) goes
 * to the socket, so kvs_lookup() answers what the daemon would have
 * answered.
 *
 * Fast lease ids have 0xffff in bits 16..31, a tag of the client in bits
 * 6..15 and the slot in bits 0..5: a daemon lease id carries its lease slot
 * in bits 0..31, and the daemon would need four billion lease slots to hand
 * out such a number. Another client's fast lease is KVS_E_NOTOWNER, as the
 * daemon answers for its leases (unless the 10-bit tags collide: then
 * KVS_E_NOLEASE, an error all the same).
 *
 * A pin area may have a budget (hdr.slab_pages): the pages of distinct
 * host slabs its pins may hold at once. Each index entry says its block's
 * slab; a lookup whose hits would take the area's slabs past the budget
 * goes to the socket, and beside each pin its slab word is written, which
 * the daemon counts the same way: pins past a budget protect nothing
 * (service/fast/fastpins.c), so a client that kept within it is never
 * short of a pin. Since the daemon reads an area while we run, a release
 * that finds a snapshot under way (the index's `snaps` odd) keeps its
 * slabs' pages spent until it is over (unpin, reclaim).
 *
 * fork(): a child shares the pin area (MAP_SHARED) and the socket with its
 * parent, but not the parent's lease bookkeeping, so it must use neither.
 * A pthread_atfork handler counts forks; a client remembers the count at
 * connect, and a call that finds it changed kills the client in the child
 * (our copy of the socket closed, the areas unmapped, nothing written) and
 * answers KVS_E_DISCONNECTED until kvs_reconnect(). A load and a compare:
 * no getpid() system call on the fast path.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvs_client_int.h"
#include "kvs_fast.h"
#include "kvs_wire.h"

#define FAST_LEASES 64 /* fast leases held at once; more go by socket */
#define FAST_TAG 0xffff0000u

typedef struct flease {
	uint32_t gen;   /* 0: free */
	uint32_t start, n;
} flease;

/* The slab words of the pins held, counted (open addressing, deletion by
 * backward shift): what the area's budget is spent on. */
typedef struct fslab {
	uint64_t word; /* kvs_fast_slab_word; 0: empty */
	uint32_t n;    /* pins of it held */
	uint32_t r;    /* pins of it released during a snapshot (retired) */
} fslab;

struct kvs_fastpath {
	const kvs_fast_hdr *hdr;
	const kvs_fast_entry *e;
	uint32_t mask;
	size_t ibytes;
	kvs_fast_pins_hdr *ph;
	uint64_t *touch;            /* KVS_FAST_TOUCHES */
	uint64_t *pins;
	uint64_t *slabs;            /* beside each pin, its slab word */
	uint32_t cap;
	size_t pbytes;
	uint32_t budget;            /* pages, or KVS_FAST_NO_BUDGET */
	uint64_t spent;             /* pages of the words in sm */
	uint32_t rtag;              /* `snaps` when the last pins retired */
	int retired;                /* some sm entry has r > 0 */
	fslab *sm;                  /* sm_mask + 1 of them */
	uint32_t sm_mask;
	uint32_t nwords, wmax;      /* entries of sm; at most (half full) */
	uint64_t *mine;             /* our copy of the slab words, by pin */
	uint64_t *word;             /* per lookup: each hit's slab word */
	flease l[FAST_LEASES];
	uint8_t order[FAST_LEASES]; /* live slots by start */
	uint32_t nlive;
	uint32_t *pos;              /* per lookup: each hit's entry, */
	uint64_t *seq;              /* and its sequence */
};

static uint32_t forks; /* one more in every child of fork() */
static pthread_once_t forks_once = PTHREAD_ONCE_INIT;

static void forked_child(void)
{
	__atomic_add_fetch(&forks, 1, __ATOMIC_RELAXED);
}

static void forks_watch(void)
{
	pthread_atfork(NULL, NULL, forked_child);
}

uint32_t kvs__fork_gen(void)
{
	pthread_once(&forks_once, forks_watch);
	return LD(&forks);
}

int kvs__forked(kvs_client *c)
{
	if (LD(&forks) == c->fork_gen)
		return 0;
	/* Closes our copy of the socket and unmaps the areas (kvs__kill
	 * detaches the fast path), writing nothing: the pins stay the
	 * parent's. */
	kvs__kill(c);
	return 1;
}

/* This client's tag in its fast lease ids: from its address, which no
 * other live client in the process shares. */
static uint32_t tag_of(const kvs_client *c)
{
	uintptr_t a = (uintptr_t)c;

	return (uint32_t)((a >> 4) ^ (a >> 14) ^ (a >> 24)) & 0x3ffu;
}

static void count(struct kvs_fastpath *f, int k, uint64_t v)
{
	ST(&f->ph->counters[k], LD(&f->ph->counters[k]) + v);
}

/* Our pins still count (the daemon has not closed the connection) and the
 * daemon stamped the index lately (it was not killed): else, ask the socket.
 * clock_gettime is a vDSO call: no system call. */
static int fresh(const struct kvs_fastpath *f)
{
	struct timespec now;
	uint64_t ms, hb = __atomic_load_n(&f->hdr->heartbeat_ms, __ATOMIC_ACQUIRE);

	if (LD(&f->ph->revoked))
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
	return ms < hb || ms - hb <= KVS_FAST_STALE_MS;
}

/* Tell the daemon which entries the last lookup hit (see kvs_fast.h). */
static void touch(struct kvs_fastpath *f, uint32_t hits)
{
	uint32_t head = LD(&f->ph->touch_head);

	for (uint32_t i = 0; i < hits; i++)
		ST(&f->touch[(head + i) % KVS_FAST_TOUCHES],
		   (uint64_t)f->pos[i] << 32 | (uint32_t)f->seq[i]);
	__atomic_store_n(&f->ph->touch_head, head + hits, __ATOMIC_RELEASE);
}

void kvs__fast_detach(kvs_client *c)
{
	struct kvs_fastpath *f = c->fast;

	if (!f)
		return;
	if (f->hdr)
		munmap((void *)f->hdr, f->ibytes);
	if (f->ph)
		munmap(f->ph, f->pbytes);
	free(f->pos);
	free(f->seq);
	free(f->sm);
	free(f->mine);
	free(f->word);
	free(f);
	c->fast = NULL;
}

static int wanted(const kvs_client *c)
{
	const char *env = getenv("KVS_NO_FASTPATH");

	if (env && env[0] && strcmp(env, "0") != 0)
		return 0;
	return c->has_layout && c->arena &&
	       !(c->flags & (KVS_CONNECT_GPU | KVS_CONNECT_NO_FASTPATH));
}

static int map_fd(int fd, uint64_t bytes, int prot, void **out)
{
	struct stat st;
	void *p;

	if (fd < 0 || bytes == 0 || bytes > SIZE_MAX)
		return KVS_E_PROTO;
	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < bytes)
		return KVS_E_PROTO; /* past the end would be SIGBUS */
	p = mmap(NULL, (size_t)bytes, prot, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

/* ---- the slab budget ---------------------------------------------------- */

static int budget_init(struct kvs_fastpath *f)
{
	/* Distinct words held: at most one a pin, and one a page of the
	 * budget. Retired ones (unpin) are kept to that bound too (wmax). */
	uint32_t most = f->budget < f->cap ? f->budget : f->cap, n = 16;

	while (n < 2 * most)
		n <<= 1;
	f->sm = calloc(n, sizeof(*f->sm));
	f->mine = calloc(f->cap, sizeof(*f->mine));
	f->sm_mask = n - 1;
	f->wmax = most;
	return f->sm && f->mine ? 0 : -ENOMEM;
}

static uint32_t sm_home(const struct kvs_fastpath *f, uint64_t w)
{
	w *= 0x9e3779b97f4a7c15ull;
	return (uint32_t)(w >> 32 ^ w) & f->sm_mask;
}

static fslab *sm_find(struct kvs_fastpath *f, uint64_t w)
{
	uint32_t i = sm_home(f, w);

	while (f->sm[i].word && f->sm[i].word != w)
		i = (i + 1) & f->sm_mask;
	return &f->sm[i];
}

/* Entry @i out of sm, its pages back (deletion by backward shift). */
static void sm_drop(struct kvs_fastpath *f, uint32_t i)
{
	uint32_t j;

	f->spent -= (uint32_t)f->sm[i].word;
	f->nwords--;
	for (j = (i + 1) & f->sm_mask; f->sm[j].word; j = (j + 1) & f->sm_mask) {
		uint32_t h = sm_home(f, f->sm[j].word);

		if (i <= j ? (h > i && h <= j) : (h > i || h <= j))
			continue;
		f->sm[i] = f->sm[j];
		i = j;
	}
	f->sm[i] = (fslab){ 0, 0, 0 };
}

/* One pin of @w less; @retire: a snapshot may have read it, so its pages
 * stay spent until that snapshot is over (reclaim). */
static void sm_put(struct kvs_fastpath *f, uint64_t w, int retire)
{
	fslab *e = sm_find(f, w);

	if (!e->word || e->n == 0)
		return;
	e->n--;
	e->r += retire ? 1u : 0u;
	if (e->n == 0 && e->r == 0)
		sm_drop(f, (uint32_t)(e - f->sm));
}

/* The retired pins' pages back once `snaps` has moved on from the value
 * their release saw: the snapshot that may have read them is over, and
 * any later one reads them cleared (service/fast/fastpins.c). */
static void reclaim(struct kvs_fastpath *f)
{
	if (!f->retired ||
	    __atomic_load_n(&f->hdr->snaps, __ATOMIC_ACQUIRE) == f->rtag)
		return;
	for (uint32_t i = 0; i <= f->sm_mask;) {
		fslab *e = &f->sm[i];

		if (e->word && e->r) {
			e->r = 0;
			if (e->n == 0) {
				sm_drop(f, i); /* another entry may move to i */
				continue;
			}
		}
		i++;
	}
	f->retired = 0;
}

/* The last lookup's @hits words counted: 0, or -1 when they would take
 * the area past its budget (nothing counted then). */
static int budget_take(struct kvs_fastpath *f, uint32_t hits)
{
	if (f->budget == KVS_FAST_NO_BUDGET)
		return 0;
	reclaim(f);
	for (uint32_t i = 0; i < hits; i++) {
		fslab *e = sm_find(f, f->word[i]);
		uint32_t pages = (uint32_t)f->word[i];

		if (!e->word) {
			/* A word of 0 pages would protect nothing. */
			/* Retired words take room too: past wmax, the
			 * socket until the snapshot is over. */
			if (pages == 0 || f->spent + pages > f->budget ||
			    f->nwords >= f->wmax) {
				while (i-- > 0)
					sm_put(f, f->word[i], 0);
				return -1;
			}
			*e = (fslab){ f->word[i], 0, 0 };
			f->spent += pages;
			f->nwords++;
		}
		e->n++;
	}
	return 0;
}

static void budget_put(struct kvs_fastpath *f, const uint64_t *w, uint32_t n,
		       int retire)
{
	if (f->budget == KVS_FAST_NO_BUDGET)
		return;
	for (uint32_t i = 0; i < n; i++)
		sm_put(f, w[i], retire);
}

static int map_both(const kvs_client *c, struct kvs_fastpath *f,
		    const int *fds, const kvs_wire_fast_reply *r)
{
	void *p;
	int rc;

	/* The index of the arena we map, or none; sizes that agree with
	 * each other (the index's exactly its entries) before any mapping,
	 * and a header that agrees with them after. */
	if (r->arena_id != c->arena_id || r->version != KVS_FAST_VERSION ||
	    !kvs_fast_grant_ok(r->entries, r->index_bytes, r->pin_cap,
			       r->pins_bytes))
		return KVS_E_PROTO;
	if ((rc = map_fd(fds[0], r->index_bytes, PROT_READ, &p)) < 0)
		return rc;
	f->hdr = p;
	f->ibytes = (size_t)r->index_bytes;
	if ((rc = map_fd(fds[1], r->pins_bytes, PROT_READ | PROT_WRITE, &p)) < 0)
		return rc;
	f->ph = p;
	f->pbytes = (size_t)r->pins_bytes;
	if (!kvs_fast_hdr_ok(f->hdr, r->entries, c->arena_id) ||
	    f->ph->magic != KVS_FAST_PIN_MAGIC)
		return KVS_E_PROTO;
	f->e = (const kvs_fast_entry *)((const uint8_t *)f->hdr + KVS_FAST_HDR_SIZE);
	f->mask = r->entries - 1;
	f->touch = (uint64_t *)((uint8_t *)f->ph + KVS_FAST_PINS_HDR_SIZE);
	f->pins = (uint64_t *)((uint8_t *)f->ph + KVS_FAST_PINS_OFF);
	f->cap = r->pin_cap;
	f->slabs = f->pins + f->cap;
	f->budget = LD(&f->ph->slab_pages);
	f->pos = calloc(f->cap, sizeof(*f->pos));
	f->seq = calloc(f->cap, sizeof(*f->seq));
	f->word = calloc(f->cap, sizeof(*f->word));
	if (!f->pos || !f->seq || !f->word)
		return -ENOMEM;
	return f->budget == KVS_FAST_NO_BUDGET ? 0 : budget_init(f);
}

int kvs__fast_attach(kvs_client *c)
{
	kvs_wire_fast_reply r;
	struct kvs_fastpath *f;
	int fds[2] = { -1, -1 }, rc;
	uint32_t rlen;

	if (!wanted(c))
		return 0;
	if ((rc = kvs__grow(c, KVS_WIRE_FAST_REQ_SIZE)) < 0)
		return 0;
	kvs_wire_fast_req_encode(0, c->buf, c->cap);
	rc = kvs__call(c, KVS_OP_FASTATTACH, KVS_WIRE_FAST_REQ_SIZE, &rlen, fds);
	if (rc == 0 && kvs_wire_fast_reply_decode(c->buf, rlen, &r) < 0)
		rc = KVS_E_PROTO;
	f = rc == 0 ? calloc(1, sizeof(*f)) : NULL;
	if (f) {
		c->fast = f;
		if (map_both(c, f, fds, &r) < 0)
			kvs__fast_detach(c);
	}
	if (fds[0] >= 0)
		close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
	/* An older daemon (KVS_E_OPCODE) or any refusal: the socket path.
	 * Only a lost connection fails the attach. */
	return c->dead ? KVS_E_DISCONNECTED : 0;
}

/* 1: (ns, h) is at entry *pos, copied under sequence *seq; 0: not in the
 * index; -1: an entry on the way was being written. */
static int probe(const struct kvs_fastpath *f, uint32_t ns, kvs_hash h,
		 uint32_t *pos, uint64_t *seq, uint64_t *word, kvs_block *b)
{
	uint32_t home = kvs_fast_home(ns, h.lo, h.hi, f->mask);

	for (uint32_t k = 0; k < KVS_FAST_MAX_PROBE; k++) {
		uint32_t i = (home + k) & f->mask;
		const kvs_fast_entry *e = &f->e[i];
		uint64_t s1 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE), s2;
		uint8_t state = LD(&e->state);
		uint32_t ens = LD(&e->ns), gen = LD(&e->gen);
		uint64_t lo = LD(&e->lo), hi = LD(&e->hi), off = LD(&e->offset);
		uint64_t w = kvs_fast_slab_word(LD(&e->slab), LD(&e->slab_pages));

		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		s2 = LD(&e->seq);
		if ((s1 & 1) || s1 != s2)
			return -1;
		if (state == KVS_FAST_EMPTY)
			return 0;
		if (ens == ns && lo == h.lo && hi == h.hi) {
			*pos = i;
			*seq = s1;
			*word = w;
			*b = (kvs_block){ .offset = off, .gen = gen,
					  .tier = KVS_TIER_HOST,
					  .status = KVS_BLOCK_HIT };
			return 1;
		}
	}
	return 0;
}

/* The pin area's end in use: the end of the last live lease. */
static void set_used(struct kvs_fastpath *f)
{
	const flease *last = f->nlive ? &f->l[f->order[f->nlive - 1]] : NULL;

	ST(&f->ph->used, last ? last->start + last->n : 0u);
}

/* First fit of @n pins among the live leases: the order position to insert
 * at and the start, or -1. */
static int fit(const struct kvs_fastpath *f, uint32_t n, uint32_t *start)
{
	uint32_t end = 0;

	for (uint32_t k = 0; k <= f->nlive; k++) {
		uint32_t next = k < f->nlive ? f->l[f->order[k]].start : f->cap;

		if (next - end >= n) {
			*start = end;
			return (int)k;
		}
		if (k < f->nlive)
			end = f->l[f->order[k]].start + f->l[f->order[k]].n;
	}
	return -1;
}

/* Pins [start, start + n) cleared, and their slab words @w given back.
 * With a budget, the words are cleared too (a stale word must not count
 * beside a later pin), then a full fence and a load of `snaps`: even, no
 * snapshot is reading, and any later one reads these pins cleared, so
 * their pages are free at once; odd, one may have read them, so they stay
 * spent (retired) until `snaps` moves on (service/fast/fastpins.c). */
static void unpin(struct kvs_fastpath *f, uint32_t start, uint32_t n,
		  const uint64_t *w)
{
	uint32_t s;

	for (uint32_t i = 0; i < n; i++)
		ST(&f->pins[start + i], 0);
	if (!f->mine)
		return;
	for (uint32_t i = 0; i < n; i++)
		ST(&f->slabs[start + i], 0);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	s = LD(&f->hdr->snaps);
	if (s & 1u) {
		f->rtag = s;
		f->retired = 1;
	}
	budget_put(f, w, n, (int)(s & 1u));
}

/* The index's hits for @hashes[0..n): *hits of them in @blocks (positions
 * and sequence numbers kept for the re-check). Returns 0, or -1: the
 * lookup goes to the socket (counted). */
static int probe_chain(kvs_client *c, struct kvs_fastpath *f,
		       const kvs_hash *hashes, size_t n, kvs_block *blocks,
		       uint32_t *out)
{
	uint32_t flags, m1, hits = 0;

	flags = LD(&f->hdr->flags);
	m1 = __atomic_load_n(&f->hdr->moves, __ATOMIC_ACQUIRE);
	for (; hits < n; hits++) {
		int r = probe(f, c->ns_id, hashes[hits], &f->pos[hits],
			      &f->seq[hits], &f->word[hits], &blocks[hits]);

		if (r < 0) {
			count(f, KVS_FAST_CTR_fallback_busy, 1);
			return -1;
		}
		if (r == 0)
			break;
		if (blocks[hits].offset > c->arena_bytes ||
		    c->block_bytes > c->arena_bytes - blocks[hits].offset ||
		    kvs_fast_pin_key(blocks[hits].offset, blocks[hits].gen) == 0) {
			count(f, KVS_FAST_CTR_fallback_other, 1);
			return -1;
		}
	}
	*out = hits;
	if (hits < n) {
		/* A miss is the answer only if the index has every host block,
		 * no other tier could answer, and no deletion shifted entries
		 * (which can hide a present key for a moment) meanwhile. */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (!(flags & KVS_FAST_COMPLETE) || (m1 & 1) ||
		    LD(&f->hdr->moves) != m1) {
			count(f, KVS_FAST_CTR_fallback_miss, 1);
			return -1;
		}
	}
	return 0;
}

int kvs__fast_lookup(kvs_client *c, const kvs_hash *hashes, size_t n,
		     kvs_lease *lease, kvs_block *blocks, int *rc)
{
	struct kvs_fastpath *f = c->fast;
	uint32_t hits = 0, start, slot = FAST_LEASES;
	int at;

	if (kvs__forked(c)) {
		*rc = KVS_E_DISCONNECTED;
		return 1;
	}
	if (!f)
		return 0;
	if (n > f->cap || !fresh(f)) {
		count(f, KVS_FAST_CTR_fallback_other, 1);
		return 0;
	}
	if (probe_chain(c, f, hashes, n, blocks, &hits) < 0)
		return 0;
	/* Misses are counted only when this path answers: a lookup that
	 * goes on to the socket is counted there (blocks.lookup_miss). */
	if (hits == 0) {
		*lease = 0;
		*rc = 0;
		count(f, KVS_FAST_CTR_lookups, 1);
		count(f, KVS_FAST_CTR_miss_blocks, n);
		return 1;
	}
	for (uint32_t s = 0; s < FAST_LEASES && slot == FAST_LEASES; s++)
		if (f->l[s].gen == 0)
			slot = s;
	at = slot < FAST_LEASES ? fit(f, hits, &start) : -1;
	if (at < 0 || budget_take(f, hits) < 0) {
		count(f, KVS_FAST_CTR_fallback_pins, 1);
		return 0;
	}
	if (start + hits > LD(&f->ph->used))
		ST(&f->ph->used, start + hits);
	/* A pin's slab word before the pin: both before the fence. */
	for (uint32_t i = 0; f->mine && i < hits; i++) {
		f->mine[start + i] = f->word[i];
		ST(&f->slabs[start + i], f->word[i]);
	}
	/* Release: a snapshot that reads the pin reads its word. */
	for (uint32_t i = 0; i < hits; i++)
		__atomic_store_n(&f->pins[start + i],
				 kvs_fast_pin_key(blocks[i].offset, blocks[i].gen),
				 __ATOMIC_RELEASE);
	/* Pins before the re-check; the daemon marks before it scans. And
	 * `revoked` again: the daemon stores it, fences, and counts the
	 * area's pins for a grace period after, so pins validated here
	 * while it still reads 0 are counted (service/fast/fastpins.c). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (uint32_t i = 0; i <= hits; i++) {
		if (i == hits ? LD(&f->ph->revoked) != 0
			      : LD(&f->e[f->pos[i]].seq) != f->seq[i]) {
			unpin(f, start, hits, f->word);
			set_used(f);
			count(f, i == hits ? KVS_FAST_CTR_fallback_other
					   : KVS_FAST_CTR_fallback_busy, 1);
			return 0;
		}
	}
	memmove(&f->order[at + 1], &f->order[at], f->nlive - (uint32_t)at);
	f->order[at] = (uint8_t)slot;
	f->nlive++;
	/* Never reused across reconnects: a stale id stays stale. */
	c->fast_gen = c->fast_gen + 1 ? c->fast_gen + 1 : 1;
	f->l[slot] = (flease){ .gen = c->fast_gen, .start = start, .n = hits };
	touch(f, hits);
	ST(&f->ph->pins_live, LD(&f->ph->pins_live) + hits);
	ST(&f->ph->leases_live, f->nlive);
	*lease = (uint64_t)c->fast_gen << 32 | FAST_TAG | tag_of(c) << 6 | slot;
	*rc = (int)hits;
	count(f, KVS_FAST_CTR_lookups, 1);
	count(f, KVS_FAST_CTR_hit_blocks, hits);
	count(f, KVS_FAST_CTR_miss_blocks, n - hits);
	return 1;
}

int kvs__fast_release(kvs_client *c, kvs_lease lease, int commit, int *rc)
{
	struct kvs_fastpath *f = c->fast;
	uint32_t slot = (uint32_t)lease & 0x3fu;
	flease *l;

	if (kvs__forked(c)) {
		*rc = KVS_E_DISCONNECTED;
		return 1;
	}
	if (((uint32_t)lease & FAST_TAG) != FAST_TAG)
		return 0;
	if ((((uint32_t)lease >> 6) & 0x3ffu) != tag_of(c)) {
		*rc = KVS_E_NOTOWNER;
		return 1;
	}
	if (!f || slot >= FAST_LEASES || f->l[slot].gen == 0 ||
	    f->l[slot].gen != (uint32_t)(lease >> 32)) {
		*rc = KVS_E_NOLEASE;
		return 1;
	}
	if (commit) {
		*rc = KVS_E_LEASEKIND;
		return 1;
	}
	l = &f->l[slot];
	unpin(f, l->start, l->n, f->mine ? &f->mine[l->start] : NULL);
	for (uint32_t k = 0; k < f->nlive; k++) {
		if (f->order[k] == slot) {
			memmove(&f->order[k], &f->order[k + 1], f->nlive - k - 1);
			f->nlive--;
			break;
		}
	}
	set_used(f);
	ST(&f->ph->pins_live, LD(&f->ph->pins_live) - l->n);
	ST(&f->ph->leases_live, f->nlive);
	*rc = (int)l->n;
	l->gen = 0;
	return 1;
}
