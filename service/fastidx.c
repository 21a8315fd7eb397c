/*
 * fastidx.c - the fast path's daemon side (see kvs_fastidx.h, kvs_fast.h).
 *
 * Memory ordering, the one argument everything rests on (docs/architecture.md
 * repeats it with the client's side). A client that found block B in the
 * index at entry e with sequence S:
 *     store pin(B) in its pin area; full fence; load e.seq; use B iff == S.
 * The daemon, before B may leave the host tier:
 *     store e.seq = S + 1 (odd: "going"); full fence; load every pin of
 *     every live client of the domain; B is pinned iff one equals pin(B).
 * Both fences are seq_cst, so one of them comes first in their single total
 * order. If the client's does, the daemon's loads (after its fence) see the
 * client's pin store (before it): the daemon keeps B. If the daemon's does,
 * the client's load of e.seq sees S + 1 (or later): it drops its pin and
 * takes the socket path. Either way no client uses a block that leaves. A
 * pin the daemon sees is kept by restoring e.seq = S (nothing in the entry
 * changed, so readers that copied it under S stay right; and a pin recorded
 * under S keeps matching the next eviction's scan), and the record is held
 * with one pin of its own until a later scan finds no pin naming it.
 *
 * Entries are seqlocks (writer: seq odd, release fence, fields, seq even with
 * release; reader: seq with acquire, fields, acquire fence, seq again), so a
 * torn copy is always detected. Deletion shifts later entries of the cluster
 * back (no tombstones: probe lengths stay those of the live entries and no
 * rebuild is ever needed). A shift makes a key briefly unreachable from its
 * home, so a reader could miss a block that is there: every deletion runs
 * inside hdr.moves odd..even, and a client trusts a miss only when moves was
 * even and unchanged around its probes. A hit needs no such care: it is
 * checked on the entry itself, and a pin names the slot (offset,
 * generation), not the entry, so moving an entry does not move a pin.
 */
#define _GNU_SOURCE
#include "kvs_fastidx.h"

#include <errno.h>
#include <stddef.h>
#include <time.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvs_cache_admin.h"
#include "kvs_fast.h"
#include "kvs_log.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ST_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

typedef struct fdom {
	uint64_t arena_id;
	int fd;               /* the index memfd, sealed read-only for others */
	size_t bytes;
	kvs_fast_hdr *hdr;
	kvs_fast_entry *e;
	uint32_t mask;
	uint32_t used;        /* entries READY */
	uint32_t missing;     /* host blocks left out (no room) */
	uint32_t *recs;       /* by entry: the record it publishes */
	kvs_fast_client *clients;
} fdom;

struct kvs_fast_client {
	fdom *d;
	kvs_fast_client *prev, *next;
	int fd;
	size_t bytes;
	const kvs_fast_pins_hdr *hdr; /* mapped read-only */
	const uint64_t *touch;        /* KVS_FAST_TOUCHES */
	const uint64_t *pins;
	uint32_t cap;                 /* ours, not the area's */
	uint32_t tail;                /* touches replayed */
};

static uint32_t drain(kvs_fast *f, kvs_fast_client *fc);
static void stamp(fdom *d);

typedef struct held {
	uint32_t idx;
	uint64_t key;
	fdom *d;
} held;

struct kvs_fast {
	kvs_cache *cache;
	kvs_counters *st;
	uint32_t entries, pin_cap;
	int complete_ok;
	fdom **doms;
	uint32_t ndoms;
	held *held;
	uint32_t nheld, held_cap;
	uint32_t nclients;
	uint64_t dead[KVS_FAST_NCOUNTERS]; /* counters of closed clients */
	uint64_t folded_hit, folded_miss;  /* already in blocks.lookup_* */
};

int kvs_fast_create(kvs_cache *cache, kvs_counters *stats, uint32_t entries,
		    uint32_t pin_cap, int complete_ok, kvs_fast **out)
{
	kvs_fast *f = calloc(1, sizeof(*f));
	uint32_t n = 1024;

	if (!f)
		return -ENOMEM;
	while (n < entries && n < (1u << 24))
		n <<= 1;
	f->cache = cache;
	f->st = stats;
	f->entries = n;
	f->pin_cap = pin_cap < 64 ? 64 : pin_cap > KVS_FAST_MAX_PINS
					       ? KVS_FAST_MAX_PINS : pin_cap;
	f->complete_ok = complete_ok;
	*out = f;
	return 0;
}

static void client_free(kvs_fast_client *fc)
{
	if (fc->hdr)
		munmap((void *)fc->hdr, fc->bytes);
	if (fc->fd >= 0)
		close(fc->fd);
	free(fc);
}

void kvs_fast_destroy(kvs_fast *f)
{
	if (!f)
		return;
	for (uint32_t i = 0; i < f->ndoms; i++) {
		fdom *d = f->doms[i];

		while (d->clients) {
			kvs_fast_client *fc = d->clients;

			d->clients = fc->next;
			client_free(fc);
		}
		if (d->hdr)
			munmap(d->hdr, d->bytes);
		if (d->fd >= 0)
			close(d->fd);
		free(d->recs);
		free(d);
	}
	free(f->doms);
	free(f->held);
	free(f);
}

/* ---- the index (writer side) ------------------------------------------ */

static void set_complete(kvs_fast *f, fdom *d)
{
	ST(&d->hdr->flags, f->complete_ok && d->missing == 0
				   ? KVS_FAST_COMPLETE : 0u);
}

/* A memfd that others can map read-only only: F_SEAL_FUTURE_WRITE refuses
 * every writable mapping made from now on, ours stays writable; SHRINK and
 * GROW keep a client from truncating it under the daemon (SIGBUS). */
static int make_index(kvs_fast *f, fdom *d)
{
	size_t bytes = KVS_FAST_HDR_SIZE + (size_t)f->entries * KVS_FAST_ENTRY_SIZE;
	void *p;

	d->fd = memfd_create("kvshare-fastidx", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (d->fd < 0)
		return -errno;
	if (ftruncate(d->fd, (off_t)bytes) < 0)
		return -errno;
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, d->fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	d->hdr = p;
	d->bytes = bytes;
	d->e = (kvs_fast_entry *)((uint8_t *)p + KVS_FAST_HDR_SIZE);
	d->mask = f->entries - 1;
	d->recs = calloc(f->entries, sizeof(uint32_t));
	if (!d->recs)
		return -ENOMEM;
	if (fcntl(d->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
				    F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0)
		return errno == EINVAL ? -EOPNOTSUPP : -errno;
	d->hdr->magic = KVS_FAST_MAGIC;
	d->hdr->version = KVS_FAST_VERSION;
	d->hdr->entries = f->entries;
	d->hdr->max_probe = KVS_FAST_MAX_PROBE;
	d->hdr->arena_id = d->arena_id;
	set_complete(f, d);
	stamp(d);
	return 0;
}

/* The domain of arena @id; made on first use (its first published block or
 * its first FASTATTACH, whichever comes first, so no block predates it). A
 * domain whose index could not be made stays, without one. */
static fdom *dom_get(kvs_fast *f, uint64_t id)
{
	fdom **v, *d;
	int rc;

	for (uint32_t i = 0; i < f->ndoms; i++)
		if (f->doms[i]->arena_id == id)
			return f->doms[i];
	v = realloc(f->doms, (f->ndoms + 1) * sizeof(*v));
	if (!v)
		return NULL;
	f->doms = v;
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->arena_id = id;
	d->fd = -1;
	rc = make_index(f, d);
	if (rc < 0) {
		kvs_warn("fast path: no index for arena %llx: %s",
			 (unsigned long long)id, kvs_strerror(rc));
		if (d->hdr)
			munmap(d->hdr, d->bytes);
		if (d->fd >= 0)
			close(d->fd);
		d->hdr = NULL;
		d->fd = -1;
	}
	f->doms[f->ndoms++] = d;
	return d;
}

static void entry_open(kvs_fast_entry *e)
{
	uint32_t s = LD(&e->seq);

	if (!(s & 1))
		ST(&e->seq, s + 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void entry_close(kvs_fast_entry *e)
{
	ST_REL(&e->seq, LD(&e->seq) + 1);
}

static void entry_fill(kvs_fast_entry *e, uint32_t ns, kvs_hash h,
		       uint64_t off, uint32_t gen)
{
	ST(&e->ns, ns);
	ST(&e->lo, h.lo);
	ST(&e->hi, h.hi);
	ST(&e->offset, off);
	ST(&e->gen, gen);
	ST(&e->tier, (uint8_t)KVS_TIER_HOST);
	ST(&e->state, (uint8_t)(ns ? KVS_FAST_READY : KVS_FAST_EMPTY));
}

static int entry_is(const kvs_fast_entry *e, uint32_t ns, kvs_hash h)
{
	return e->state == KVS_FAST_READY && e->ns == ns && e->lo == h.lo &&
	       e->hi == h.hi;
}

/* The entry of (ns, h), or -1; *empty: the first empty entry on the way. */
static int64_t find(const fdom *d, uint32_t ns, kvs_hash h, int64_t *empty)
{
	uint32_t home = kvs_fast_home(ns, h.lo, h.hi, d->mask);

	*empty = -1;
	for (uint32_t k = 0; k < KVS_FAST_MAX_PROBE; k++) {
		uint32_t i = (home + k) & d->mask;

		if (d->e[i].state == KVS_FAST_EMPTY) {
			*empty = i;
			return -1;
		}
		if (entry_is(&d->e[i], ns, h))
			return i;
	}
	return -1;
}

void kvs_fast_publish(kvs_fast *f, uint64_t arena_id, uint32_t idx,
		      const kvs_rec *r)
{
	kvs_hash h = kvs_cache_rec_hash(r);
	fdom *d;
	int64_t i, empty;

	if (!f || r->tier != KVS_TIER_HOST)
		return;
	d = dom_get(f, arena_id);
	if (!d || !d->hdr)
		return;
	i = find(d, r->ns, h, &empty);
	if (i < 0 && empty < 0) {
		/* No room within the probe bound: lookups of it go the
		 * socket way, and a miss is no longer proof of absence. */
		d->missing++;
		f->st->fast_unpublished++;
		set_complete(f, d);
		return;
	}
	if (i < 0) {
		i = empty;
		d->used++;
	}
	entry_open(&d->e[i]);
	entry_fill(&d->e[i], r->ns, h, r->offset, r->gen);
	entry_close(&d->e[i]);
	d->recs[i] = idx;
}

/* Empty entry @i (already open) and shift the rest of its cluster back,
 * all inside hdr.moves odd..even (see the top of this file). */
static void delete_at(fdom *d, uint32_t i)
{
	uint32_t m = LD(&d->hdr->moves), j = i;

	ST(&d->hdr->moves, m + 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	entry_fill(&d->e[i], 0, (kvs_hash){ 0, 0 }, 0, 0);
	entry_close(&d->e[i]);
	for (;;) {
		kvs_fast_entry *e;
		uint32_t home;

		j = (j + 1) & d->mask;
		e = &d->e[j];
		if (e->state == KVS_FAST_EMPTY)
			break;
		home = kvs_fast_home(e->ns, e->lo, e->hi, d->mask);
		/* e may move into the hole when the hole lies between its
		 * home and where it is now. */
		if (((j - home) & d->mask) < ((j - i) & d->mask))
			continue;
		entry_open(&d->e[i]);
		entry_fill(&d->e[i], e->ns, (kvs_hash){ e->lo, e->hi },
			   e->offset, e->gen);
		entry_close(&d->e[i]);
		d->recs[i] = d->recs[j];
		entry_open(e);
		entry_fill(e, 0, (kvs_hash){ 0, 0 }, 0, 0);
		entry_close(e);
		i = j;
	}
	ST_REL(&d->hdr->moves, m + 2);
	d->used--;
}

/* ---- pins (reader side: the client writes them) ------------------------ */

/* Does a live client of @d pin @key? Everything read here was written by a
 * client: `used` is clamped to our own copy of the capacity, and a pin is
 * only compared, never followed. A bogus pin can keep a block of the
 * client's own domain (which it can already write) for as long as its
 * connection lives, at most `cap` of them. */
static int pinned(const fdom *d, uint64_t key)
{
	for (const kvs_fast_client *fc = d->clients; fc; fc = fc->next) {
		uint32_t n = LD(&fc->hdr->used);

		if (n > fc->cap)
			n = fc->cap;
		for (uint32_t k = 0; k < n; k++)
			if (LD(&fc->pins[k]) == key)
				return 1;
	}
	return 0;
}

int kvs_fast_hold(kvs_fast *f, uint64_t arena_id, uint32_t idx,
		  const kvs_rec *r)
{
	kvs_hash h;
	fdom *d;
	int64_t i, empty;
	uint32_t s;
	uint64_t key;

	if (!f || r->tier != KVS_TIER_HOST)
		return 0;
	d = dom_get(f, arena_id);
	if (!d || !d->hdr)
		return 0;
	h = kvs_cache_rec_hash(r);
	i = find(d, r->ns, h, &empty);
	if (i < 0) {
		/* Never published (no room): nobody can have pinned it. */
		if (d->missing > 0) {
			d->missing--;
			set_complete(f, d);
		}
		return 0;
	}
	/* What clients pinned is what the entry says (the record's own slot
	 * too, should the two ever differ: keep the block if either is). */
	key = kvs_fast_pin_key(d->e[i].offset, d->e[i].gen);
	s = LD(&d->e[i].seq);
	ST(&d->e[i].seq, s + 1); /* going */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (d->clients &&
	    (pinned(d, key) ||
	     (key != kvs_fast_pin_key(r->offset, r->gen) &&
	      pinned(d, kvs_fast_pin_key(r->offset, r->gen))))) {
		ST_REL(&d->e[i].seq, s); /* unchanged: see the top */
		if (f->nheld == f->held_cap) {
			uint32_t cap = f->held_cap ? 2 * f->held_cap : 64;
			held *v = realloc(f->held, cap * sizeof(*v));

			if (!v)
				return 1; /* kept this time; asked again later */
			f->held = v;
			f->held_cap = cap;
		}
		f->held[f->nheld++] = (held){ idx, key, d };
		kvs_cache_pin_rec(f->cache, idx, 1);
		f->st->fast_evict_skipped++;
		return 1;
	}
	delete_at(d, (uint32_t)i);
	return 0;
}

uint32_t kvs_fast_unhold(kvs_fast *f)
{
	uint32_t let = 0;

	if (!f)
		return 0;
	for (uint32_t k = 0; k < f->nheld;) {
		held *hd = &f->held[k];

		if (pinned(hd->d, hd->key)) {
			k++;
			continue;
		}
		kvs_cache_pin_rec(f->cache, hd->idx, -1);
		*hd = f->held[--f->nheld];
		let++;
	}
	return let;
}

/* ---- connections -------------------------------------------------------- */

static int make_pins(kvs_fast *f, kvs_fast_client *fc)
{
	size_t bytes = KVS_FAST_PINS_OFF + (size_t)f->pin_cap * 8;
	kvs_fast_pins_hdr h = { .magic = KVS_FAST_PIN_MAGIC, .cap = f->pin_cap };
	void *p;

	bytes = (bytes + 4095) & ~(size_t)4095;
	fc->fd = memfd_create("kvshare-pins", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fc->fd < 0)
		return -errno;
	if (ftruncate(fc->fd, (off_t)bytes) < 0 ||
	    pwrite(fc->fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		return -errno;
	/* The client writes it; it must not shrink it under our reads. */
	if (fcntl(fc->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		return -errno;
	p = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fc->fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	fc->hdr = p;
	fc->touch = (const uint64_t *)((const uint8_t *)p + KVS_FAST_PINS_HDR_SIZE);
	fc->pins = (const uint64_t *)((const uint8_t *)p + KVS_FAST_PINS_OFF);
	fc->bytes = bytes;
	fc->cap = f->pin_cap;
	return 0;
}

int kvs_fast_attach(kvs_fast *f, kvs_owner *o, kvs_fast_client **pfc,
		    kvs_fast_grant *g)
{
	kvs_fast_client *fc = *pfc;
	uint64_t bytes, id;
	int afd, rc;
	fdom *d;

	if (!f)
		return -EOPNOTSUPP;
	/* The index of the client's own domain (arena), never another's. */
	rc = kvs_cache_owner_arena(f->cache, o, &afd, &bytes, &id);
	if (rc < 0)
		return rc;
	d = dom_get(f, id);
	if (!d)
		return -ENOMEM;
	if (!d->hdr)
		return -EOPNOTSUPP;
	if (!fc) {
		fc = calloc(1, sizeof(*fc));
		if (!fc)
			return -ENOMEM;
		rc = make_pins(f, fc);
		if (rc < 0) {
			client_free(fc);
			return rc;
		}
		fc->d = d;
		fc->next = d->clients;
		if (d->clients)
			d->clients->prev = fc;
		d->clients = fc;
		f->nclients++;
		*pfc = fc;
	}
	*g = (kvs_fast_grant){ .index_fd = d->fd, .pins_fd = fc->fd,
			       .index_bytes = d->bytes, .pins_bytes = fc->bytes,
			       .arena_id = id, .entries = f->entries,
			       .pin_cap = fc->cap };
	return 0;
}

/* Replay a client's touches: what a LOOKUP request does to its hits at
 * once (hit count, last access, the policy's order). A touch names an entry
 * and the sequence of its publication; one that does not match any more
 * (moved, evicted, or junk: the client writes them) is skipped. A client
 * that laps the ring loses its oldest touches, nothing else. */
static uint32_t drain(kvs_fast *f, kvs_fast_client *fc)
{
	const fdom *d = fc->d;
	uint32_t head = __atomic_load_n(&fc->hdr->touch_head, __ATOMIC_ACQUIRE);
	uint32_t n = 0;

	if (head - fc->tail > KVS_FAST_TOUCHES)
		fc->tail = head - KVS_FAST_TOUCHES;
	for (; fc->tail != head; fc->tail++) {
		uint64_t t = LD(&fc->touch[fc->tail % KVS_FAST_TOUCHES]);
		uint32_t pos = (uint32_t)(t >> 32), seq = (uint32_t)t;

		const kvs_rec *r;

		if (pos > d->mask || d->e[pos].seq != seq ||
		    d->e[pos].state != KVS_FAST_READY)
			continue;
		r = kvs_cache_rec_at(f->cache, d->recs[pos]);
		if (r && r->tier == KVS_TIER_HOST && r->offset == d->e[pos].offset &&
		    r->gen == d->e[pos].gen) {
			kvs_cache_touch_rec(f->cache, d->recs[pos]);
			n++;
		}
	}
	return n;
}

uint32_t kvs_fast_replay(kvs_fast *f)
{
	uint32_t n = 0;

	if (!f)
		return 0;
	for (uint32_t i = 0; i < f->ndoms; i++)
		for (kvs_fast_client *fc = f->doms[i]->clients; fc; fc = fc->next)
			n += drain(f, fc);
	return n;
}

static void stamp(fdom *d)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	__atomic_store_n(&d->hdr->heartbeat_ms,
			 (uint64_t)now.tv_sec * 1000u +
				 (uint64_t)now.tv_nsec / 1000000u,
			 __ATOMIC_RELEASE);
}

void kvs_fast_tick(kvs_fast *f)
{
	if (!f)
		return;
	for (uint32_t i = 0; i < f->ndoms; i++) {
		fdom *d = f->doms[i];

		if (!d->hdr)
			continue;
		stamp(d);
		for (kvs_fast_client *fc = d->clients; fc; fc = fc->next)
			drain(f, fc);
	}
}

static void add_sat(int64_t *to, uint64_t v)
{
	*to = v > (uint64_t)(INT64_MAX - *to) ? INT64_MAX : *to + (int64_t)v;
}

void kvs_fast_detach(kvs_fast *f, kvs_fast_client *fc)
{
	uint32_t one = 1;

	if (!f || !fc)
		return;
	/* Tell the client (if it still lives: the daemon closed it) that
	 * these pins count no more, as its leases would be gone: its next
	 * fast lookup goes to the socket, and learns. */
	if (pwrite(fc->fd, &one, sizeof(one),
		   offsetof(kvs_fast_pins_hdr, revoked)) != sizeof(one))
		kvs_debug("fast path: cannot revoke a pin area: %s",
			  kvs_strerror(-errno));
	drain(f, fc);
	for (int k = 0; k < KVS_FAST_NCOUNTERS; k++) {
		uint64_t v = LD(&fc->hdr->counters[k]);

		f->dead[k] = v > UINT64_MAX - f->dead[k] ? UINT64_MAX : f->dead[k] + v;
	}
	if (fc->prev)
		fc->prev->next = fc->next;
	else
		fc->d->clients = fc->next;
	if (fc->next)
		fc->next->prev = fc->prev;
	f->nclients--;
	client_free(fc);
	/* Its pins are gone with it: what only it held may go now. */
	kvs_fast_unhold(f);
}

void kvs_fast_stats_fill(kvs_fast *f)
{
	kvs_counters *st;
	uint64_t sum[KVS_FAST_NCOUNTERS];
	int64_t entries = 0;

	if (!f)
		return;
	kvs_fast_tick(f);
	st = f->st;
	memcpy(sum, f->dead, sizeof(sum));
	for (uint32_t i = 0; i < f->ndoms; i++) {
		entries += f->doms[i]->used;
		for (kvs_fast_client *fc = f->doms[i]->clients; fc; fc = fc->next)
			for (int k = 0; k < KVS_FAST_NCOUNTERS; k++) {
				uint64_t v = LD(&fc->hdr->counters[k]);

				sum[k] = v > UINT64_MAX - sum[k] ? UINT64_MAX
								 : sum[k] + v;
			}
	}
#define FILL(n) st->fast_##n = 0; add_sat(&st->fast_##n, sum[KVS_FAST_CTR_##n]);
	KVS_FAST_COUNTERS(FILL)
#undef FILL
	st->fast_clients = f->nclients;
	st->fast_indexes = 0;
	for (uint32_t i = 0; i < f->ndoms; i++)
		st->fast_indexes += f->doms[i]->fd >= 0;
	st->fast_entries = entries;
	st->fast_held = f->nheld;
	/* Blocks hit or missed on the fast path are lookups' blocks too; the
	 * leases and pins clients hold there are held too (gauges, as the
	 * clients say: only ever a number in the stats). */
	if (sum[KVS_FAST_CTR_hit_blocks] > f->folded_hit) {
		add_sat(&st->blocks_lookup_hit,
			sum[KVS_FAST_CTR_hit_blocks] - f->folded_hit);
		f->folded_hit = sum[KVS_FAST_CTR_hit_blocks];
	}
	if (sum[KVS_FAST_CTR_miss_blocks] > f->folded_miss) {
		add_sat(&st->blocks_lookup_miss,
			sum[KVS_FAST_CTR_miss_blocks] - f->folded_miss);
		f->folded_miss = sum[KVS_FAST_CTR_miss_blocks];
	}
	for (uint32_t i = 0; i < f->ndoms; i++)
		for (kvs_fast_client *fc = f->doms[i]->clients; fc; fc = fc->next) {
			uint32_t p = LD(&fc->hdr->pins_live), l = LD(&fc->hdr->leases_live);

			st->leases_pinned_blocks += p > fc->cap ? fc->cap : p;
			st->leases_active += l > fc->cap ? fc->cap : l;
		}
}
