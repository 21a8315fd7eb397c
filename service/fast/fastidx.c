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

void fast_client_free(kvs_fast_client *fc)
{
	if (fc->hdr)
		munmap(fc->hdr, fc->bytes);
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
	fast_stamp(d);
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
