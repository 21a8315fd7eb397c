/*
 * kvs_fast.h - the fast path's shared memory: the per-domain index of
 * committed host blocks (written by kvshared only, read by clients) and the
 * per-connection pin area (written by its client only, read by kvshared).
 * Shared by libkvshare (client/fast.c) and the daemon (service/fast/),
 * like kvs_wire.h; docs/architecture.md ("Hits without a round trip")
 * argues the protocol, docs/protocol.md describes FASTATTACH.
 *
 * Both memfds hold offsets and generations only, never pointers. Both sides
 * run on one machine from one build of this header; magic and version in
 * each header catch a mismatch (the client then keeps the socket path).
 *
 * Index (memfd, sealed: the client can map it read-only only):
 *   [kvs_fast_hdr: 64 bytes][kvs_fast_entry x entries: 64 bytes each]
 * open addressing, linear probing from kvs_fast_home(), at most
 * KVS_FAST_MAX_PROBE entries from home, backward-shift deletion. Every entry
 * is a seqlock: seq odd while the daemon writes it; a reader copies the
 * entry between two equal even reads of seq or gives up. seq is 64 bits
 * (version 2): it never wraps, so an equal seq is the same publication.
 *
 * Pin area (memfd per connection, sealed against resizing):
 *   [kvs_fast_pins_hdr: 128 bytes][u64 touch x KVS_FAST_TOUCHES][u64 pin x cap]
 *   [u64 slab x cap]
 * A pin is kvs_fast_pin_key(offset, gen) of a host slot; 0 is an empty pin.
 * Beside pin i, slab i says which slab the pinned block is in, as its index
 * entry said (kvs_fast_slab_word): the daemon counts an area's pins in
 * slabs against the area's budget (hdr.slab_pages) and only those within it
 * protect a block (docs/architecture.md, "What a pin area may hold").
 *
 * Thread: the inline helpers are reentrant.
 */
#ifndef KVS_FAST_H
#define KVS_FAST_H

#include <stdint.h>

#define KVS_FAST_MAGIC 0x58444946u     /* "FIDX" */
#define KVS_FAST_PIN_MAGIC 0x4e495046u /* "FPIN" */
#define KVS_FAST_VERSION 3 /* 2: 64-bit entry seq; 3: slabs, budget, snaps */
#define KVS_FAST_MAX_PROBE 32u   /* entries looked at from home, at most */
#define KVS_FAST_HDR_SIZE 64u
#define KVS_FAST_ENTRY_SIZE 64u
#define KVS_FAST_PINS_HDR_SIZE 128u
#define KVS_FAST_MAX_PINS 16384u /* pins per connection, at most */
#define KVS_FAST_MAX_ENTRIES (1u << 24) /* index entries, at most */
#define KVS_FAST_TOUCHES 4096u   /* the touch ring of a pin area */
/* The daemon stamps the index this often; a client that finds the stamp
 * older than KVS_FAST_STALE_MS (a daemon killed, or stuck) asks the socket,
 * which answers KVS_E_DISCONNECTED once the daemon is gone. */
#define KVS_FAST_HEARTBEAT_MS 50u
#define KVS_FAST_STALE_MS 250u

/* Loads and stores of a shared word that another process may write at the
 * same time: whole, never torn or kept in a register by the compiler;
 * relaxed, or acquire / release where an order is needed (an entry's seq,
 * the header's counters). Both sides' one spelling. */
#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ST_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define LD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)

/* hdr.flags: every committed host block of the domain is in the index and
 * no other tier can answer a lookup (no SSD tier): a miss in the index is
 * a miss of the socket path too. Without it a miss falls back. */
#define KVS_FAST_COMPLETE 0x1u

typedef struct kvs_fast_hdr {
	uint32_t magic, version;
	uint32_t entries;   /* a power of two */
	uint32_t max_probe; /* KVS_FAST_MAX_PROBE */
	uint64_t arena_id;  /* the domain's host arena (HELLO's host_arena_id) */
	uint32_t moves;     /* odd while a deletion shifts entries back */
	uint32_t flags;     /* KVS_FAST_* */
	uint64_t heartbeat_ms; /* CLOCK_MONOTONIC, every KVS_FAST_HEARTBEAT_MS */
	uint32_t snaps;     /* odd while the daemon reads the pin areas */
	uint8_t reserved[20];
} kvs_fast_hdr;

enum kvs_fast_state { KVS_FAST_EMPTY = 0, KVS_FAST_READY = 1 };

typedef struct kvs_fast_entry {
	uint64_t seq;    /* odd: being written */
	uint64_t lo, hi; /* the block hash */
	uint64_t offset; /* in the domain's host arena */
	uint32_t ns;     /* namespace id; 0 with state EMPTY */
	uint32_t gen;    /* slot generation, as LOOKUP answers it */
	uint8_t tier;    /* KVS_TIER_HOST */
	uint8_t state;   /* kvs_fast_state */
	uint16_t reserved0;
	uint32_t slab;   /* the host slab holding the block (stable while it
			  * is allocated) */
	uint32_t slab_pages; /* that slab's length in arena pages */
	uint8_t reserved[12];
} kvs_fast_entry;

/* What a client counts about its own fast path; the daemon shows them in its
 * `fast.*` stats as client-reported (untrusted numbers: never added to the
 * daemon's own counters, and capped per client). X(name, kind, help), as
 * its stats section (service/cache/kvs_fastidx.h) lists them. */
#define KVS_FAST_COUNTERS(X)                                                  \
	X(lookups, COUNTER, "lookups answered by the fast path (client-reported)")\
	X(hit_blocks, COUNTER, "blocks hit by the fast path (client-reported)")\
	X(miss_blocks, COUNTER, "blocks the fast path found absent (client-reported)")\
	X(fallback_miss, COUNTER, "fast lookups sent to the socket: index miss (client-reported)")\
	X(fallback_busy, COUNTER, "... : entry being written or moved (client-reported)")\
	X(fallback_pins, COUNTER, "... : pin area, fast leases or slab budget full (client-reported)")\
	X(fallback_other, COUNTER, "... : too many hashes or index unusable (client-reported)")
enum {
#define KVS_FAST_CTR_ENUM(n, kind, help) KVS_FAST_CTR_##n,
	KVS_FAST_COUNTERS(KVS_FAST_CTR_ENUM)
#undef KVS_FAST_CTR_ENUM
	KVS_FAST_NCOUNTERS
};

/* Pin area: [this header][u64 touch ring x KVS_FAST_TOUCHES][u64 pin x cap].
 * A touch is (entry << 32 | low 32 bits of seq) of a hit: the daemon replays
 * touches into its eviction order and hit counts (what a LOOKUP request does
 * at once), after checking that the entry still holds that publication (a
 * touch only orders eviction: a stale one that matches after 2^32 writes of
 * its entry refreshes a block, nothing else). */
typedef struct kvs_fast_pins_hdr {
	uint32_t magic;   /* written by the daemon at creation */
	uint32_t cap;     /* pins; the daemon keeps its own copy */
	uint32_t used;    /* the client: pins[0, used) may be non-zero */
	uint32_t revoked; /* the daemon, at close: these pins count no more */
	uint32_t touch_head; /* the client: touches written, mod 2^32 */
	uint32_t pins_live;  /* the client: pins held now (for stats) */
	uint32_t leases_live; /* the client: fast leases held now (for stats) */
	uint32_t slab_pages; /* the daemon, at creation: the pages of distinct
			      * slabs this area's pins may hold at once, or
			      * KVS_FAST_NO_BUDGET (the daemon keeps a copy) */
	uint64_t counters[KVS_FAST_NCOUNTERS];
	uint8_t reserved[128 - 32 - 8 * KVS_FAST_NCOUNTERS];
} kvs_fast_pins_hdr;

/* Where the pins start in a pin area. */
#define KVS_FAST_PINS_OFF (KVS_FAST_PINS_HDR_SIZE + 8u * KVS_FAST_TOUCHES)
/* The bytes of an area of @cap pins: the header, the ring, pins and slabs. */
#define KVS_FAST_PINS_BYTES(cap) (KVS_FAST_PINS_OFF + 16ull * (cap))
/* hdr.slab_pages: the area's pins are not counted in slabs (an operator's,
 * or no budget: --max-pinned-share-per-uid 0, --tenant-arenas uid). */
#define KVS_FAST_NO_BUDGET UINT32_MAX

_Static_assert(sizeof(kvs_fast_hdr) == KVS_FAST_HDR_SIZE, "hdr size");
_Static_assert(sizeof(kvs_fast_entry) == KVS_FAST_ENTRY_SIZE, "entry size");
_Static_assert(sizeof(kvs_fast_pins_hdr) == KVS_FAST_PINS_HDR_SIZE, "pins size");
/* The seqlock word is 64 bits, first, naturally aligned (one atomic load). */
_Static_assert(sizeof(((kvs_fast_entry *)0)->seq) == 8, "64-bit seq");
_Static_assert(__builtin_offsetof(kvs_fast_entry, seq) == 0, "seq first");
_Static_assert(__builtin_offsetof(kvs_fast_entry, state) == 41, "entry layout");
_Static_assert(__builtin_offsetof(kvs_fast_entry, slab) == 44, "entry layout");
_Static_assert(__builtin_offsetof(kvs_fast_pins_hdr, slab_pages) == 28,
	       "pins layout");

/*
 * kvs_fast_grant_ok - may a client map what FASTATTACH answered? @entries a
 * power of two within KVS_FAST_MAX_ENTRIES, @index_bytes exactly the header
 * and the entries, @pin_cap within KVS_FAST_MAX_PINS, @pins_bytes room for
 * the header, the ring, the pins and their slabs. 1 or 0; nothing else of the grant is
 * believed (the mapping's size is checked against the fd separately).
 */
static inline int kvs_fast_grant_ok(uint32_t entries, uint64_t index_bytes,
				    uint32_t pin_cap, uint64_t pins_bytes)
{
	return entries != 0 && (entries & (entries - 1)) == 0 &&
	       entries <= KVS_FAST_MAX_ENTRIES &&
	       index_bytes == KVS_FAST_HDR_SIZE +
				      (uint64_t)entries * KVS_FAST_ENTRY_SIZE &&
	       pin_cap != 0 && pin_cap <= KVS_FAST_MAX_PINS &&
	       pins_bytes >= KVS_FAST_PINS_BYTES(pin_cap);
}

/* kvs_fast_hdr_ok - the mapped index header agrees with its grant: magic,
 * version, @entries, the probe bound, the domain @arena_id. 1 or 0. */
static inline int kvs_fast_hdr_ok(const kvs_fast_hdr *h, uint32_t entries,
				  uint64_t arena_id)
{
	return h->magic == KVS_FAST_MAGIC && h->version == KVS_FAST_VERSION &&
	       h->entries == entries && h->max_probe == KVS_FAST_MAX_PROBE &&
	       h->arena_id == arena_id;
}

/* Where (ns, hash) starts probing in a table of @mask + 1 entries. */
static inline uint32_t kvs_fast_home(uint32_t ns, uint64_t lo, uint64_t hi,
				     uint32_t mask)
{
	uint64_t x = lo ^ (hi * 0xc2b2ae3d27d4eb4full) ^
		     ((uint64_t)ns * 0x9e3779b97f4a7c15ull);

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (uint32_t)x & mask;
}

/* A pin names a host slot by offset and generation; generations are unique
 * per allocation until they wrap at 2^32, so two slots share a key only
 * when both wrap and the offsets agree in their low 38 bits: the daemon then
 * keeps a block it could have evicted, never the reverse. 0 is no pin: the
 * client does not pin a block whose key would be 0 (generation 0 at offset
 * 0, after a wrap: it takes the socket), and the daemon never counts a 0 in
 * a pin area as a pin of anything. */
static inline uint64_t kvs_fast_pin_key(uint64_t offset, uint32_t gen)
{
	return (uint64_t)gen << 32 | (uint32_t)(offset >> 6);
}

/* What slab word i of a pin area holds for a block in slab @slab of
 * @pages pages (as its index entry says): the daemon counts a pin for a
 * block only when this word is the block's own, and charges the area
 * @pages for each distinct word (a word of 0 pages protects nothing). */
static inline uint64_t kvs_fast_slab_word(uint32_t slab, uint32_t pages)
{
	return (uint64_t)slab << 32 | pages;
}

#endif /* KVS_FAST_H */
