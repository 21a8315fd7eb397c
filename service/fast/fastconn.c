/*
 * fastconn.c - the fast path's connections, the daemon's side: a pin area
 * for each connection that asks (kvs_fast_attach), the touches its clients
 * report replayed into the cache (kvs_fast_replay, kvs_fast_tick), their
 * counters (kvs_fast_stats_fill), and the end of a pin area
 * (kvs_fast_detach and its grace). Above the index (fastidx.c) and the
 * pins (fastpins.c), which never call it (layering.calls).
 */
#define _GNU_SOURCE
#include "fastidx_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvs_cache_admin.h"
#include "kvs_log.h"

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

static void add_sat(int64_t *to, uint64_t v)
{
	*to = v > (uint64_t)(INT64_MAX - *to) ? INT64_MAX : *to + (int64_t)v;
}

/* Replay at most @max of a client's touches: what a LOOKUP request does to
 * its hits at once (hit count, last access, the policy's order, and
 * blocks.lookup_hit). A touch names an entry and (the low half of) the
 * sequence of its publication; one that does not match any more (moved,
 * evicted, or junk: the client writes them) is skipped (touches_stale). A
 * client that laps the ring loses its oldest touches, nothing else
 * (touches_lost: hits that were not counted). Returns the touches read. */
static uint32_t fast_drain(kvs_fast *f, kvs_fast_client *fc, uint32_t max)
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

/* A live client's own counts, as we keep them: each monotone and capped at
 * KVS_FAST_CLIENT_MAX, so that no client can move a counter back or fill
 * it (a revoked area's counts were read at its revocation). What its
 * miss_blocks grew by goes to blocks.lookup_miss (and its namespace's):
 * a fast-path miss is known only as the client reports it, and a false
 * report can only make its own namespace's ratio look worse. */
static void fast_seen_update(kvs_fast *f, kvs_fast_client *fc)
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


/* ---- the end of a pin area --------------------------------------------- */

static void forget(kvs_fast *f, kvs_fast_client *fc)
{
	kvs_fast_client *last;

	/* Its hits not replayed yet still count (one ring at most). */
	fast_drain(f, fc, KVS_FAST_TOUCHES);
	last = f->all[--f->nall];

	last->at = fc->at;
	f->all[fc->at] = last;
	if (f->rr >= f->nall)
		f->rr = 0;
	if (fc->prev)
		fc->prev->next = fc->next;
	else
		fc->d->clients = fc->next;
	if (fc->next)
		fc->next->prev = fc->prev;
	fc->d->pins -= fc->cap;
	kvs_cache_fast_ungrant(f->cache, &fc->grant);
	for (int k = 0; k < KVS_FAST_NCOUNTERS; k++)
		f->dead[k] = fc->seen[k] > UINT64_MAX - f->dead[k]
				     ? UINT64_MAX : f->dead[k] + fc->seen[k];
	fast_client_free(fc);
}

/*
 * Revoke now, let go later. A client checks `revoked` before its probe and
 * again after its fence (client/fast.c); a lookup whose fence came before
 * our store still has its pins counted for KVS_FAST_REVOKE_GRACE_MS (the
 * area stays in every snapshot), so a revoked area never drops pins that a
 * lookup validated while it believed the area live. Then fast_reap()
 * forgets it and lets go of what only it held.
 */
void kvs_fast_detach(kvs_fast *f, kvs_fast_client *fc)
{
	if (!f || !fc || fc->revoked_ms)
		return;
	fast_seen_update(f, fc); /* its last counts; none believed after this */
	ST(&fc->hdr->revoked, 1u);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	fc->revoked_ms = now_ms();
	if (fc->revoked_ms == 0)
		fc->revoked_ms = 1;
	f->nclients--;
}

static void fast_reap(kvs_fast *f)
{
	uint64_t now = now_ms();
	uint32_t gone = 0;

	for (uint32_t i = 0; i < f->nall;) {
		kvs_fast_client *fc = f->all[i];

		if (!fc->revoked_ms ||
		    now - fc->revoked_ms < KVS_FAST_REVOKE_GRACE_MS) {
			i++;
			continue;
		}
		forget(f, fc); /* moves the last one to i */
		gone++;
	}
	/* Its pins are gone with it: what only it held may go now. */
	if (gone)
		kvs_fast_unhold(f);
}

void kvs_fast_tick(kvs_fast *f)
{
	if (!f)
		return;
	for (uint32_t i = 0; i < f->ndoms; i++)
		if (f->doms[i]->hdr)
			fast_stamp(f->doms[i]);
	kvs_fast_replay(f);
	fast_reap(f);
}

/* ---- the cache's hooks (kvs_cache.h) ----------------------------------- */

static void hook_publish(void *f, uint64_t arena_id, uint32_t idx,
			 const kvs_rec *r)
{
	kvs_fast_publish(f, arena_id, idx, r);
}

static uint32_t hook_hold_batch(void *f, uint64_t arena_id,
				const uint32_t *idx, uint32_t n, uint8_t *keep)
{
	return kvs_fast_hold_batch(f, arena_id, idx, n, keep);
}

static uint32_t hook_batch_hint(void *f, uint64_t arena_id)
{
	return kvs_fast_batch_hint(f, arena_id);
}

static uint32_t hook_unhold(void *f) { return kvs_fast_unhold(f); }
static uint32_t hook_replay(void *f) { return kvs_fast_replay(f); }

const kvs_cache_fast_ops kvs_fast_hooks = {
	.publish = hook_publish,
	.hold_batch = hook_hold_batch,
	.batch_hint = hook_batch_hint,
	.unhold = hook_unhold,
	.replay = hook_replay,
};

#define KVS_STAT_TYPE kvs_fast_stats
KVS_STATS_SECTION_DEFINE(kvs_fast_section, "fast", 0, KVS_FAST_STATS);
#undef KVS_STAT_TYPE
