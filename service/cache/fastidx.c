/*
 * fastidx.c - the fast path's daemon side (see kvs_fastidx.h, kvs_fast.h).
 *
 * Memory ordering, the one argument everything rests on (docs/architecture.md
 * repeats it with the client's side). A client that found block B in the
 * index at entry e with sequence S:
 *     store pin(B) in its pin area; full fence; load e.seq; use B iff == S.
 * The daemon, before B may leave the host tier:
 *     store e.seq = S + 1 (odd: "going"); full fence; load every pin of
 *     every client of the domain; B is pinned iff one equals pin(B).
 * (fastpins.c does this for a batch of victims at once: every mark, then
 * one fence, then one snapshot of the pins; it says why that is the same.)
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
#include "fastidx_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "kvs_cache_admin.h"
#include "kvs_log.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

static void stamp(fdom *d);
static void add_sat(int64_t *to, uint64_t v);

int kvs_fast_create(kvs_cache *cache, kvs_counters *stats, uint32_t entries,
		    uint32_t pin_cap, int complete_ok, kvs_fast **out)
{
	kvs_fast *f = calloc(1, sizeof(*f));
	uint32_t n = 1024;

	if (!f)
		return -ENOMEM;
	while (n < entries && n < KVS_FAST_MAX_ENTRIES)
		n <<= 1;
	if (getrandom(&f->seed, sizeof(f->seed), GRND_NONBLOCK) !=
	    (ssize_t)sizeof(f->seed))
		f->seed = (uint64_t)(uintptr_t)f ^ now_ms() * 0x9e3779b97f4a7c15ull;
	f->cache = cache;
	f->st = stats;
	f->entries = n;
	f->pin_cap = pin_cap < 64 ? 64 : pin_cap > KVS_FAST_MAX_PINS
					       ? KVS_FAST_MAX_PINS : pin_cap;
	f->complete_ok = complete_ok;
	*out = f;
	return 0;
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
			fast_client_free(fc);
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
	free(f->all);
	free(f->set);
	free(f->aset);
	free(f);
}

/* ---- the index (writer side) ------------------------------------------ */

void fast_set_complete(kvs_fast *f, fdom *d)
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
	fast_set_complete(f, d);
	stamp(d);
	return 0;
}

/* The domain of arena @id; made on first use (its first published block or
 * its first FASTATTACH, whichever comes first, so no block predates it). A
 * domain whose index could not be made stays, without one. */
fdom *fast_dom_get(kvs_fast *f, uint64_t id)
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
	uint64_t s = LD(&e->seq);

	if (!(s & 1))
		ST(&e->seq, s + 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void entry_close(kvs_fast_entry *e)
{
	ST_REL(&e->seq, LD(&e->seq) + 1);
}

static void entry_fill(kvs_fast_entry *e, uint32_t ns, kvs_hash h,
		       uint64_t off, uint32_t gen, uint32_t slab, uint32_t pages)
{
	ST(&e->slab, slab);
	ST(&e->slab_pages, pages);
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
int64_t fast_find(const fdom *d, uint32_t ns, kvs_hash h, int64_t *empty)
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
	uint32_t slab, pages;
	fdom *d;
	int64_t i, empty;

	if (!f || r->tier != KVS_TIER_HOST)
		return;
	d = fast_dom_get(f, arena_id);
	if (!d || !d->hdr)
		return;
	i = fast_find(d, r->ns, h, &empty);
	if (i < 0 && empty < 0) {
		/* No room within the probe bound: lookups of it go the
		 * socket way, and a miss is no longer proof of absence. */
		d->missing++;
		f->counts.unpublished++;
		fast_set_complete(f, d);
		return;
	}
	if (i < 0) {
		i = empty;
		d->used++;
	}
	slab = kvs_cache_rec_slab(f->cache, r, &pages);
	entry_open(&d->e[i]);
	entry_fill(&d->e[i], r->ns, h, r->offset, r->gen, slab, pages);
	entry_close(&d->e[i]);
	d->recs[i] = idx;
}

/* Empty entry @i and shift the rest of its cluster back, all inside
 * hdr.moves odd..even (see the top of this file). An entry marked going
 * (odd: a victim of the batch being decided, fastpins.c) stays odd where it
 * moves to, so that no client validates a pin on it meanwhile. */
void fast_delete_at(fdom *d, uint32_t i)
{
	uint32_t m = LD(&d->hdr->moves), j = i;

	ST(&d->hdr->moves, m + 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	entry_fill(&d->e[i], 0, (kvs_hash){ 0, 0 }, 0, 0, 0, 0);
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
			   e->offset, e->gen, e->slab, e->slab_pages);
		if (!(LD(&e->seq) & 1))
			entry_close(&d->e[i]);
		d->recs[i] = d->recs[j];
		entry_open(e);
		entry_fill(e, 0, (kvs_hash){ 0, 0 }, 0, 0, 0, 0);
		entry_close(e);
		i = j;
	}
	ST_REL(&d->hdr->moves, m + 2);
	d->used--;
}

/* ---- connections -------------------------------------------------------- */

_Static_assert(KVS_NONE == KVS_FAST_NO_BUDGET, "a grant of KVS_NONE pages");

/* A pin area of @cap pins whose pins may hold @pages pages of slabs: its
 * memfd (for the caller to send and close) and our mapping, read-write so
 * that `revoked` can be written without keeping the fd. Sealed: the client
 * writes it, and must not shrink it under our reads. */
static int make_pins(kvs_fast_client *fc, uint32_t cap, uint32_t pages,
		     int *fdp)
{
	size_t bytes = (size_t)KVS_FAST_PINS_BYTES(cap);
	kvs_fast_pins_hdr *h;
	void *p;
	int fd, rc = 0;

	bytes = (bytes + 4095) & ~(size_t)4095;
	fd = memfd_create("kvshare-pins", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)bytes) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		rc = -errno;
	p = rc == 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
		    : MAP_FAILED;
	if (rc == 0 && p == MAP_FAILED)
		rc = -errno;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	h = p;
	h->magic = KVS_FAST_PIN_MAGIC;
	h->cap = cap;
	h->slab_pages = pages;
	fc->hdr = h;
	fc->touch = (const uint64_t *)((const uint8_t *)p + KVS_FAST_PINS_HDR_SIZE);
	fc->pins = (const uint64_t *)((const uint8_t *)p + KVS_FAST_PINS_OFF);
	fc->slabs = fc->pins + cap;
	fc->bytes = bytes;
	fc->cap = cap;
	fc->slab_pages = pages;
	*fdp = fd;
	return 0;
}

static int all_add(kvs_fast *f, kvs_fast_client *fc)
{
	if (f->nall == f->all_cap) {
		uint32_t cap = f->all_cap ? 2 * f->all_cap : 16;
		kvs_fast_client **v = realloc(f->all, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		f->all = v;
		f->all_cap = cap;
	}
	fc->at = f->nall;
	f->all[f->nall++] = fc;
	return 0;
}

int kvs_fast_attach(kvs_fast *f, kvs_owner *o, kvs_fast_client **pfc,
		    kvs_fast_grant *g)
{
	kvs_fast_client *fc;
	kvs_cache_grant gr;
	uint64_t bytes, id;
	uint32_t cap;
	int afd, rc, pfd = -1;
	fdom *d;

	if (!f)
		return -EOPNOTSUPP;
	/* One pin area per connection: its fd went to the client and is
	 * closed here, so there is nothing to hand out a second time. */
	if (*pfc)
		return KVS_E_ATTACHED;
	/* The index of the client's own domain (arena), never another's. */
	rc = kvs_cache_owner_arena(f->cache, o, &afd, &bytes, &id);
	if (rc < 0)
		return rc;
	d = fast_dom_get(f, id);
	if (!d)
		return -ENOMEM;
	if (!d->hdr)
		return -EOPNOTSUPP;
	/* The domain's pins are bounded (what a snapshot reads): a client
	 * past the bound gets a smaller area, or none (the socket path). */
	cap = KVS_FAST_DOMAIN_PINS - d->pins;
	if (cap > f->pin_cap)
		cap = f->pin_cap;
	/* And a worker uid's, of pins and of slab pages (its budget,
	 * cache_pinslab.c): what its area's pins may protect. */
	rc = cap < KVS_FAST_MIN_PINS
		     ? KVS_E_LIMIT
		     : kvs_cache_fast_grant(f->cache, o, cap, KVS_FAST_UID_PINS,
					    &gr);
	if (rc == 0 && gr.pins < KVS_FAST_MIN_PINS) {
		kvs_cache_fast_ungrant(f->cache, &gr);
		rc = KVS_E_LIMIT;
	}
	if (rc == KVS_E_LIMIT)
		f->counts.attach_refused++;
	if (rc < 0)
		return rc;
	fc = calloc(1, sizeof(*fc));
	rc = fc ? make_pins(fc, gr.pins, gr.pages, &pfd) : -ENOMEM;
	if (rc == 0)
		rc = all_add(f, fc);
	if (rc < 0) {
		if (pfd >= 0)
			close(pfd);
		if (fc)
			fast_client_free(fc);
		kvs_cache_fast_ungrant(f->cache, &gr);
		return rc;
	}
	fc->grant = gr;
	fc->d = d;
	fc->ns = kvs_cache_owner_ns(o);
	fc->next = d->clients;
	if (d->clients)
		d->clients->prev = fc;
	d->clients = fc;
	d->pins += fc->cap;
	f->nclients++;
	*pfc = fc;
	*g = (kvs_fast_grant){ .index_fd = d->fd, .pins_fd = pfd,
			       .index_bytes = d->bytes, .pins_bytes = fc->bytes,
			       .arena_id = id, .entries = f->entries,
			       .pin_cap = fc->cap };
	return 0;
}

/* Replay at most @max of a client's touches: what a LOOKUP request does to
 * its hits at once (hit count, last access, the policy's order, and
 * blocks.lookup_hit). A touch names an entry and (the low half of) the
 * sequence of its publication; one that does not match any more (moved,
 * evicted, or junk: the client writes them) is skipped (touches_stale). A
 * client that laps the ring loses its oldest touches, nothing else
 * (touches_lost: hits that were not counted). Returns the touches read. */
uint32_t fast_drain(kvs_fast *f, kvs_fast_client *fc, uint32_t max)
{
	const fdom *d = fc->d;
	uint32_t head = __atomic_load_n(&fc->hdr->touch_head, __ATOMIC_ACQUIRE);
	uint32_t n = 0;

	if (head - fc->tail > KVS_FAST_TOUCHES) {
		/* head is the client's word: saturate, never overflow. */
		add_sat(&f->counts.touches_lost, head - fc->tail - KVS_FAST_TOUCHES);
		fc->tail = head - KVS_FAST_TOUCHES;
	}
	for (; fc->tail != head && n < max; fc->tail++, n++) {
		uint64_t t = LD(&fc->touch[fc->tail % KVS_FAST_TOUCHES]);
		uint32_t pos = (uint32_t)(t >> 32), seq = (uint32_t)t;
		const kvs_rec *r = NULL;

		if (pos <= d->mask && (uint32_t)d->e[pos].seq == seq &&
		    d->e[pos].state == KVS_FAST_READY)
			r = kvs_cache_rec_at(f->cache, d->recs[pos]);
		if (r && r->tier == KVS_TIER_HOST && r->offset == d->e[pos].offset &&
		    r->gen == d->e[pos].gen &&
		    kvs_cache_touch_rec(f->cache, d->recs[pos]))
			f->counts.replayed++;
		else
			f->counts.touches_stale++;
	}
	return n;
}

/* KVS_FAST_REPLAY_BUDGET touches at most per call, shared by all clients:
 * each gets an equal share (at least KVS_FAST_REPLAY_SHARE), and the turn
 * goes round, so a client that writes touches as fast as it can costs the
 * loop no more than the budget and starves nobody. */
uint32_t kvs_fast_replay(kvs_fast *f)
{
	uint32_t left = KVS_FAST_REPLAY_BUDGET, share, k = 0, n = 0;

	if (!f || f->nall == 0)
		return 0;
	share = left / f->nall;
	if (share < KVS_FAST_REPLAY_SHARE)
		share = KVS_FAST_REPLAY_SHARE;
	for (; k < f->nall && left > 0; k++) {
		uint32_t r = fast_drain(f, f->all[(f->rr + k) % f->nall],
				   share < left ? share : left);

		left -= r;
		n += r;
	}
	f->rr = (f->rr + k) % f->nall;
	return n;
}

static void stamp(fdom *d)
{
	__atomic_store_n(&d->hdr->heartbeat_ms, now_ms(), __ATOMIC_RELEASE);
}

void kvs_fast_tick(kvs_fast *f)
{
	if (!f)
		return;
	for (uint32_t i = 0; i < f->ndoms; i++)
		if (f->doms[i]->hdr)
			stamp(f->doms[i]);
	kvs_fast_replay(f);
	fast_reap(f);
}

static void add_sat(int64_t *to, uint64_t v)
{
	*to = v > (uint64_t)(INT64_MAX - *to) ? INT64_MAX : *to + (int64_t)v;
}

/* A live client's own counts, as we keep them: each monotone and capped at
 * KVS_FAST_CLIENT_MAX, so that no client can move a counter back or fill
 * it (a revoked area's counts were read at its revocation). What its
 * miss_blocks grew by goes to blocks.lookup_miss (and its namespace's):
 * a fast-path miss is known only as the client reports it, and a false
 * report can only make its own namespace's ratio look worse. */
void fast_seen_update(kvs_fast *f, kvs_fast_client *fc)
{
	for (int k = 0; k < KVS_FAST_NCOUNTERS && !fc->revoked_ms; k++) {
		uint64_t v = LD(&fc->hdr->counters[k]);

		if (v > KVS_FAST_CLIENT_MAX)
			v = KVS_FAST_CLIENT_MAX;
		if (v <= fc->seen[k])
			continue;
		if (k == KVS_FAST_CTR_miss_blocks)
			kvs_cache_count_miss(f->cache, fc->ns, v - fc->seen[k]);
		fc->seen[k] = v;
	}
}

/* The clients' counts go to `fast.*` (client-reported), and their misses
 * to blocks.lookup_miss (fast_seen_update); their hits reach blocks.* only
 * as replayed touches, which the daemon checks. The leases and
 * pins they hold are held too: the gauges leases.active and
 * leases.pinned_blocks count them as the clients say, at most each area's
 * cap (and fast.leases_live, fast.pins_live show that share). */
void kvs_fast_stats_fill(kvs_fast *f)
{
	kvs_counters *st;
	uint64_t sum[KVS_FAST_NCOUNTERS];
	int64_t entries = 0, pins = 0, leases = 0;

	if (!f)
		return;
	kvs_fast_tick(f);
	st = f->st;
	memcpy(sum, f->dead, sizeof(sum));
	for (uint32_t i = 0; i < f->nall; i++) {
		kvs_fast_client *fc = f->all[i];

		fast_seen_update(f, fc);
		for (int k = 0; k < KVS_FAST_NCOUNTERS; k++)
			sum[k] = fc->seen[k] > UINT64_MAX - sum[k]
					 ? UINT64_MAX : sum[k] + fc->seen[k];
		if (!fc->revoked_ms) {
			uint32_t p = LD(&fc->hdr->pins_live);
			uint32_t l = LD(&fc->hdr->leases_live);

			pins += p > fc->cap ? fc->cap : p;
			leases += l > fc->cap ? fc->cap : l;
		}
	}
#define FILL(n, kind, help)                                                   \
	f->counts.n = 0;                                                       \
	add_sat(&f->counts.n, sum[KVS_FAST_CTR_##n]);
	KVS_FAST_COUNTERS(FILL)
#undef FILL
	for (uint32_t i = 0; i < f->ndoms; i++)
		entries += f->doms[i]->used;
	f->counts.clients = f->nclients;
	f->counts.revoked = f->nall - f->nclients;
	f->counts.indexes = 0;
	for (uint32_t i = 0; i < f->ndoms; i++)
		f->counts.indexes += f->doms[i]->fd >= 0;
	f->counts.entries = entries;
	f->counts.held = f->nheld;
	f->counts.pins_live = pins;
	f->counts.leases_live = leases;
	st->leases_pinned_blocks += pins;
	st->leases_active += leases;
}

const kvs_fast_stats *kvs_fast_counters(const kvs_fast *f)
{
	return f ? &f->counts : NULL;
}

#define KVS_STAT_TYPE kvs_fast_stats
KVS_STATS_SECTION_DEFINE(kvs_fast_section, "fast", 0, KVS_FAST_STATS);
#undef KVS_STAT_TYPE
