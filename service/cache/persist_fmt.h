/*
 * persist_fmt.h - the metadata memfd's layout (kvs_persist.h): shared by
 * cache_persist.c (the writer) and cache_persist_adopt.c (the reader).
 * docs/architecture.md, "Host tier persistence", is its prose; a change of
 * any field, size or meaning takes a new PERSIST_VERSION.
 *
 * The memfd is read by the next daemon on the same machine only: fields are
 * in the host's byte order, at the offsets the static asserts pin.
 *
 * Thread: the daemon's loop thread, and the persist worker for a record's
 * sum and its committed-to-verified step (cache_persist_worker.c).
 */
#ifndef KVS_PERSIST_FMT_H
#define KVS_PERSIST_FMT_H

#include <stddef.h>
#include <stdint.h>

#include <xxhash.h>

#include "kvs_ns.h"

#define PERSIST_MAGIC 0x314154454d53564bull /* "KVSMETA1" */
#define PERSIST_VERSION 2u
#define PERSIST_HDR_BYTES 4096u
#define PERSIST_MAX_DOMS 256u
#define PERSIST_NS_CAP 4096u
#define PERSIST_NS_BYTES 1024u
#define PERSIST_REC_BYTES 128u
/* Records: one per block-table index below the cap, sized from the host
 * bytes (one per this many), so that tiny blocks are covered too. */
#define PERSIST_BYTES_PER_REC 256u
#define PERSIST_REC_CAP_MAX (1u << 26)

/* A record's state word: the state in its low 2 bits, a generation in
 * the rest, bumped by the loop at every store (free, writing, committed);
 * the persist worker turns committed into verified at the same generation
 * (a compare-and-swap), so a record whose slot went meanwhile never is. */
enum persist_state {
	PST_FREE = 0, PST_WRITING = 1, PST_COMMITTED = 2, PST_VERIFIED = 3
};
#define PST_OF(w) ((w) & 3u)
#define PST_WORD(w, st) ((((w) >> 2) + 1u) << 2 | (st)) /* next generation */
enum persist_hdr_state { PHS_DIRTY = 1, PHS_CLEAN = 2 };

/* The header: its fixed part [0, sum) is checksummed once, at creation;
 * state and ndoms change while the daemon runs. */
typedef struct persist_hdr {
	uint64_t magic;
	uint32_t version, hdr_bytes;
	uint32_t rec_bytes, ns_bytes;
	uint32_t page_bytes, by_uid;
	uint64_t dom_bytes;    /* each domain's arena */
	uint32_t maxdoms, ns_cap;
	uint64_t rec_cap;
	uint64_t ns_off, rec_off, total_bytes;
	uint64_t sum;          /* XXH3-64 of the bytes before it */
	uint32_t state;        /* enum persist_hdr_state */
	uint32_t ndoms;        /* domains made (release store after the uid) */
	/* 1 + the highest namespace id and record index ever written (stored
	 * before the entry): a rebuild reads no further, so it neither reads
	 * nor, in a memfd, allocates the pages never written. */
	uint32_t ns_hwm, pad;
	uint64_t rec_hwm;
	uint32_t dom_uid[PERSIST_MAX_DOMS];
} persist_hdr;

/* A namespace, at ns_off + (id - 1) * ns_bytes. */
typedef struct persist_ns {
	uint32_t state;        /* 1: set (release store, written last) */
	uint32_t dom;
	uint32_t gen;          /* changes each time the id is given */
	uint32_t len;          /* bytes of the namespace record (kvs_ns.h) in @entry */
	uint64_t sum;          /* persist_ns_sum() */
	uint8_t entry[PERSIST_NS_BYTES - 24];
} persist_ns;

/* A block, at rec_off + idx * rec_bytes (idx: its block-table index). */
typedef struct persist_rec {
	uint32_t state;        /* state word (release store, last) */
	uint32_t ns;
	uint32_t ns_gen;
	uint32_t dom;
	uint64_t hash_lo, hash_hi;     /* chained block hash */
	uint64_t parent_lo, parent_hi; /* 0, 0: a root */
	uint64_t offset;       /* slot offset in the domain's arena */
	uint64_t bytes;        /* block bytes (the namespace's) */
	uint32_t slab_first;   /* the slot's slab: first page and length */
	uint32_t slab_pages;
	uint64_t sum;          /* XXH3-64 of the bytes (the worker's alone) */
	uint8_t zero[40];
	uint64_t rsum;         /* XXH3-64 of [4, 72): the record itself */
} persist_rec;

_Static_assert(offsetof(persist_hdr, sum) == 80, "persist_hdr layout");
_Static_assert(sizeof(persist_hdr) <= PERSIST_HDR_BYTES, "persist_hdr size");
_Static_assert(sizeof(persist_ns) == PERSIST_NS_BYTES, "persist_ns size");
_Static_assert(KVS_NS_ENTRY_MAX <= PERSIST_NS_BYTES - 24, "ns entry");
_Static_assert(sizeof(persist_rec) == PERSIST_REC_BYTES, "persist_rec size");
_Static_assert(offsetof(persist_rec, rsum) == 120, "persist_rec layout");
_Static_assert(offsetof(persist_rec, sum) == 72, "persist_rec sum");

/* The checksums of a namespace entry (its @len entry bytes, seeded with
 * dom, gen and len; @len within bounds) and of a record's fields but its
 * bytes' sum ([4, 72): the loop writes them, the worker the sum). */
static inline uint64_t persist_ns_sum(const persist_ns *e)
{
	return XXH3_64bits_withSeed(e->entry, e->len,
				    ((uint64_t)e->gen << 32 | e->dom) ^
				    ((uint64_t)e->len << 48));
}

static inline uint64_t persist_rec_sum(const persist_rec *r)
{
	return XXH3_64bits(&r->ns, offsetof(persist_rec, sum) -
				   offsetof(persist_rec, ns));
}

#endif /* KVS_PERSIST_FMT_H */
