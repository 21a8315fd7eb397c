/*
 * fastidx_int.h - the fast path's daemon state, shared by its three files,
 * each calling only those before it: fastidx.c (the index), fastpins.c
 * (the pin snapshot, hold and unhold) and fastconn.c (pin areas,
 * connections, touch replay, stats). Not an interface: kvs_fastidx.h is.
 *
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_FASTIDX_INT_H
#define KVS_FASTIDX_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_clock.h"
#include "kvs_fast.h"
#include "kvs_fastidx.h"

/* The fast path's stats section, fast.*: X(name, kind, help) lines
 * (kvs_stats.h), the clients' own counters (KVS_FAST_COUNTERS,
 * proto/kvs_fast.h) among them; kvs_fast.counts holds the values. */
#define KVS_FAST_STATS(X)                                                     \
	X(clients, GAUGE, "connections with a fast-path pin area")            \
	X(revoked, GAUGE, "pin areas of closed connections, in their grace")  \
	X(indexes, GAUGE, "fast-path indexes (a memfd each, one per trust domain, made at its first fast attach)")\
	X(entries, GAUGE, "host blocks in the fast-path indexes")             \
	X(held, GAUGE, "blocks kept now for fast-path pins")                  \
	X(unpublished, COUNTER, "host blocks left out of a full index")       \
	X(evict_skipped, COUNTER, "evictions skipped: fast-path pinned")      \
	X(attach_refused, COUNTER, "fast attaches refused: the domain's or the uid's pins, or the uid's slab pages, at their bound")\
	X(pins_unbudgeted, COUNTER, "fast-path pins read past their area's slab budget, or naming a slab wrongly: they protect nothing")\
	X(snapshots, COUNTER, "looks at a domain's fast-path pins (one per eviction batch)")\
	X(pin_reads, COUNTER, "fast-path pins read by those looks")           \
	X(pin_probes, COUNTER, "hash-set probes of those looks (inserts and queries)")\
	X(replayed, COUNTER, "fast-path hits replayed into the eviction order (checked by the daemon; counted in blocks.lookup_hit)")\
	X(touches_stale, COUNTER, "fast-path touches that named no entry's publication any more (or junk): not counted as hits")\
	X(touches_lost, COUNTER, "fast-path touches a client overwrote before they were replayed (its ring lapped, as its ring position says): hits not counted")\
	KVS_FAST_COUNTERS(X)                                                  \
	X(pins_live, GAUGE, "fast-path pins held now (client-reported)")      \
	X(leases_live, GAUGE, "fast-path leases held now (client-reported)")

struct kvs_fast_stats {
	KVS_FAST_STATS(KVS_STAT_FIELD)
};

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
	uint32_t pins;        /* the caps of its pin areas, at most
			       * KVS_FAST_DOMAIN_PINS: what a snapshot reads */
	uint32_t nheld;       /* its records held for pins */
	uint32_t last_snap;   /* pins read by its last snapshot */
	kvs_fast_client *clients; /* live, and revoked ones in their grace */
} fdom;

struct kvs_fast_client {
	fdom *d;
	kvs_fast_client *prev, *next; /* in d->clients */
	uint32_t at;                  /* in kvs_fast.all */
	size_t bytes;
	kvs_fast_pins_hdr *hdr; /* mapped read-write: the daemon writes
				 * `revoked` only, reads the rest */
	const uint64_t *touch;  /* KVS_FAST_TOUCHES */
	const uint64_t *pins;
	const uint64_t *slabs;  /* beside each pin: kvs_fast_slab_word */
	uint32_t cap;           /* ours, not the area's */
	uint32_t slab_pages;    /* ours: its budget (KVS_FAST_NO_BUDGET) */
	kvs_cache_grant grant;  /* what the cache granted it, given back
				 * when it is forgotten */
	uint32_t tail;          /* touches replayed */
	uint32_t ns;            /* its connection's namespace (misses) */
	uint32_t snap_n;        /* pins read by the current snapshot */
	uint64_t revoked_ms;    /* 0: live; else when it was revoked */
	uint64_t seen[KVS_FAST_NCOUNTERS]; /* its counters, capped, monotone */
};

typedef struct fast_held {
	uint32_t idx;
	uint64_t key, word; /* the pin that held it */
	fdom *d;
} fast_held;

struct kvs_fast {
	kvs_cache *cache;
	kvs_counters *st;             /* the server's: leases.* */
	kvs_fast_stats counts;        /* its section, fast.* */
	uint32_t entries, pin_cap;
	int complete_ok;
	fdom **doms;
	uint32_t ndoms;
	fast_held *held;
	uint32_t nheld, held_cap;
	uint32_t nclients;            /* live ones */
	kvs_fast_client **all;        /* every pin area, for the round robin */
	uint32_t nall, all_cap, rr;
	struct fast_pin { uint64_t key, word; } *set; /* the pin snapshot:
				       * open addressing; word: its slab's */
	uint32_t set_mask, set_shift, set_n;
	size_t set_cap;
	uint64_t *aset;               /* one area's slab words (its budget) */
	size_t aset_cap;
	uint64_t seed;                /* of the snapshot's hash */
	uint64_t dead[KVS_FAST_NCOUNTERS]; /* counters of closed clients */
	/* Step tests only (tests/unit/test_fast_steps.c): called in a batch's
	 * decision after its snapshot, before any victim is answered, where a
	 * client's store can land. NULL otherwise. */
	void (*after_snapshot)(void *arg);
	void *after_snapshot_arg;
	/* Step tests only: called in a snapshot before it reads pin @k of a
	 * budgeted area, where a client's release and lookup can land. */
	void (*at_pin)(void *arg, uint32_t k);
	void *at_pin_arg;
};

/* Stamp index @d's heartbeat (clients trust it while it is fresh). */
static inline void fast_stamp(fdom *d)
{
	__atomic_store_n(&d->hdr->heartbeat_ms, now_ms(), __ATOMIC_RELEASE);
}

/* fastidx.c: the index. fastpins.c calls it; fastconn.c calls both. */
void fast_set_complete(kvs_fast *f, fdom *d);
fdom *fast_dom_get(kvs_fast *f, uint64_t id);
int64_t fast_find(const fdom *d, uint32_t ns, kvs_hash h, int64_t *empty);
void fast_delete_at(fdom *d, uint32_t i);
void fast_client_free(kvs_fast_client *fc);

#endif /* KVS_FASTIDX_INT_H */
