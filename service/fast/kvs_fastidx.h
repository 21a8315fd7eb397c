/*
 * kvs_fastidx.h - hits without a round trip, the daemon's side: one
 * shared-memory index of committed host blocks per trust domain (host
 * arena), and one pin area per connection that asked for it (FASTATTACH).
 * Code: service/fast/fastidx.c (the index), service/fast/fastpins.c (pins:
 * hold, unhold) and service/fast/fastconn.c (pin areas, connections,
 * replay, stats, revocation). Layout of both: proto/kvs_fast.h. Protocol
 * and memory ordering: docs/architecture.md, "Hits without a round trip".
 *
 * The fast path sits above the cache: the cache calls it only through the
 * hooks it was given (kvs_fast_hooks, kvs_cache_set_fast), which are the
 * functions below (all accept f == NULL, the fast path off):
 *  - kvs_fast_publish() when a committed block becomes visible in the host
 *    tier (commit, promotion from SSD, demotion from GPU);
 *  - kvs_fast_hold_batch() (or kvs_fast_hold(), a batch of one) before host
 *    blocks may leave the tier (eviction, operator evict or flush): each
 *    is either unpublished (go on) or found pinned in a pin area of its
 *    domain (keep it), with one look at the domain's pins per batch. A
 *    kept block is *held*: it takes one pin (kvs_cache_pin_rec) so that
 *    the policy stops naming it, until kvs_fast_unhold() finds its pins
 *    gone;
 *  - kvs_fast_batch_hint() for the make-room loop's first batch;
 *  - kvs_fast_unhold() when room is short and at operator evictions;
 *  - kvs_fast_replay() before an eviction, so that hits on the fast path
 *    weigh in the policy's order as LOOKUP's do.
 * Connections call kvs_fast_attach() and kvs_fast_detach() (at close: the
 * pins of a dead client die with its connection, after a grace period).
 *
 * Bounds (the loop's work per call, whatever clients write): a snapshot of
 * a domain's pins reads at most KVS_FAST_DOMAIN_PINS pins; a hold or unhold
 * costs O(those pins + its records); a replay or tick reads at most
 * KVS_FAST_REPLAY_BUDGET touches over all clients.
 *
 * Errors: 0 or a count, or a negative KVS_E_* / -errno.
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_FASTIDX_H
#define KVS_FASTIDX_H

#include <stdint.h>

#include "kvs_cache.h"
#include "kvs_stats.h"
#include "kvs_table.h"

/* Its stats section, fast.*: the values kvs_fast_counters() returns, as
 * kvs_fast_section describes them (the X-list: fastidx_int.h). */
typedef struct kvs_fast_stats kvs_fast_stats;
extern const kvs_stats_section kvs_fast_section;

typedef struct kvs_fast kvs_fast;
typedef struct kvs_fast_client kvs_fast_client;

/* Pins of one domain's areas together, at most (their caps); a connection
 * that would pass it gets a smaller area, none below KVS_FAST_MIN_PINS. */
#define KVS_FAST_DOMAIN_PINS (1u << 18)
#define KVS_FAST_MIN_PINS 64u
/* A worker uid's areas in one domain together, at most (an operator's are
 * bounded by the domain's only): one uid cannot take a shared arena's fast
 * path from the others. */
#define KVS_FAST_UID_PINS (KVS_FAST_DOMAIN_PINS / 4)
/* Records one kvs_fast_hold_batch() decides, at most; and the pins a
 * snapshot may read per victim it decides, amortized (the make-room loop
 * asks kvs_fast_batch_hint() how many victims to start with). */
#define KVS_FAST_BATCH KVS_CACHE_HOLD_BATCH
#define KVS_FAST_PINS_PER_VICTIM 256u
/* Touches replayed per kvs_fast_replay() or tick, over all clients, and
 * the least share of one client when many share the budget. */
#define KVS_FAST_REPLAY_BUDGET 8192u
#define KVS_FAST_REPLAY_SHARE 64u
/* A revoked pin area's pins still count this long (2 heartbeats). */
#define KVS_FAST_REVOKE_GRACE_MS (2 * KVS_FAST_HEARTBEAT_MS)
/* What one client's reported counter can add to fast.*, at most. */
#define KVS_FAST_CLIENT_MAX (1ull << 40)

/* What FASTATTACH hands a client (with the two fds). */
typedef struct kvs_fast_grant {
	int index_fd; /* the daemon's: send it, do not close it */
	int pins_fd;  /* the caller's: close it once sent (the daemon keeps
		       * its mapping, not the fd) */
	uint64_t index_bytes, pins_bytes, arena_id;
	uint32_t entries, pin_cap;
} kvs_fast_grant;

/*
 * kvs_fast_create - the fast path of @cache, off until a client asks.
 * @entries: index entries per domain (rounded up to a power of two);
 * @pin_cap: pins per connection (at most KVS_FAST_MAX_PINS); @complete_ok:
 * 0 when another tier (SSD) can answer a lookup the index misses.
 * Errors: -ENOMEM. Ownership: the caller destroys it after the cache's last
 * hook ran (the held pins are the cache's and die with it).
 */
int kvs_fast_create(kvs_cache *cache, kvs_counters *stats, uint32_t entries,
		    uint32_t pin_cap, int complete_ok, kvs_fast **out);
void kvs_fast_destroy(kvs_fast *f);

/* The hooks to give the cache: kvs_cache_set_fast(cache, &kvs_fast_hooks, f)
 * once @f is made (kvs_fast_publish .. kvs_fast_replay below). */
extern const kvs_cache_fast_ops kvs_fast_hooks;

/* kvs_fast_publish - record @idx (READY, host) becomes visible in the
 * domain of arena @arena_id. An index that has no room within the probe
 * bound leaves it out (counted; lookups of it take the socket path). */
void kvs_fast_publish(kvs_fast *f, uint64_t arena_id, uint32_t idx,
		      const kvs_rec *r);

/* kvs_fast_hold - may host record @idx (@r) leave? 0: yes, and it is no
 * longer in the index; 1: a client of its domain pins it: it is held (one
 * pin) instead. Records of other tiers: 0. Costs one snapshot of the
 * domain's pins: many at once go through kvs_fast_hold_batch(). */
int kvs_fast_hold(kvs_fast *f, uint64_t arena_id, uint32_t idx,
		  const kvs_rec *r);

/* kvs_fast_hold_batch - kvs_fast_hold() for the @n distinct records @idx of
 * arena @arena_id's domain, with one snapshot per KVS_FAST_BATCH of them:
 * keep[i] = 1 for each one held, 0 for each that may go (and is no longer
 * in the index). Returns how many were held. */
uint32_t kvs_fast_hold_batch(kvs_fast *f, uint64_t arena_id,
			     const uint32_t *idx, uint32_t n, uint8_t *keep);

/* kvs_fast_batch_hint - how many victims a make-room loop should decide in
 * its first batch for arena @arena_id's domain: 1 while its pins are few;
 * with many, enough that the last snapshot's pins come to at most
 * KVS_FAST_PINS_PER_VICTIM per victim (at most KVS_FAST_BATCH). A domain
 * whose clients fill their pin areas gets its blocks evicted up to that
 * many at a time instead of a look at every pin per block. */
uint32_t kvs_fast_batch_hint(kvs_fast *f, uint64_t arena_id);

/* kvs_fast_unhold - drop the hold of every held record that no live pin
 * names any more. Returns how many were let go. */
uint32_t kvs_fast_unhold(kvs_fast *f);

/*
 * kvs_fast_attach - the index of @o's domain and a new pin area for one
 * connection (*fc NULL: one per connection). Errors: KVS_E_ATTACHED (a
 * second call), KVS_E_NOTATTACHED, KVS_E_LIMIT (the domain's pins are at
 * KVS_FAST_DOMAIN_PINS), -EOPNOTSUPP (the kernel cannot seal the index
 * read-only: no fast path), -ENOMEM, -errno of memfd_create/mmap.
 */
int kvs_fast_attach(kvs_fast *f, kvs_owner *o, kvs_fast_client **fc,
		    kvs_fast_grant *g);

/* kvs_fast_detach - the connection is gone: revoke its pin area (the
 * client's next lookup takes the socket); its pins still count for
 * KVS_FAST_REVOKE_GRACE_MS, then a tick forgets it and lets go of what only
 * it held. @fc may be NULL; it is not to be used again. */
void kvs_fast_detach(kvs_fast *f, kvs_fast_client *fc);

/* kvs_fast_replay - apply the hits clients made on the fast path since
 * the last call to the eviction order and hit counts (as LOOKUP does at
 * once), at most KVS_FAST_REPLAY_BUDGET touches, round robin over the
 * clients. Returns the touches read; the cache calls it before it evicts. */
uint32_t kvs_fast_replay(kvs_fast *f);

/* kvs_fast_tick - stamp every index's heartbeat, replay the clients'
 * touches into the cache (kvs_fast_replay) and forget the revoked areas
 * whose grace is over (call every KVS_FAST_HEARTBEAT_MS, and before
 * anything reports hit counts). */
void kvs_fast_tick(kvs_fast *f);

/* kvs_fast_stats_fill - refresh the fast.* gauges and the clients'
 * counters; add the clients' leases and pins to leases.*. @f may be NULL. */
void kvs_fast_stats_fill(kvs_fast *f);
/* kvs_fast_counters - its section's values (kvs_fast_section); NULL when
 * @f is. */
const kvs_fast_stats *kvs_fast_counters(const kvs_fast *f);

#endif /* KVS_FASTIDX_H */
