/*
 * kvs_table.h - the block table: 128-bit block hash -> block record.
 *
 * Records live in one growable array and are named by index (never by
 * pointer: the array moves when it grows). The hash index is open addressing
 * with linear probing and backward-shift deletion (no tombstones), kept at
 * most half full, so a probe is O(1) expected. A record costs
 * sizeof(kvs_rec) plus two index words at the worst load: see
 * kvs_table_bytes_per_record().
 *
 * The table knows hashes and records; what the fields mean (pins, leases,
 * tiers) is the cache's business (cache.c).
 *
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_TABLE_H
#define KVS_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_types.h" /* kvs_hash, kvs_tier */

enum kvs_rec_state {
	KVS_REC_FREE = 0,    /* unused record (on the free list) */
	KVS_REC_WRITING = 1, /* reserved: slot allocated, not yet committed */
	KVS_REC_READY = 2,   /* committed: immutable, visible to lookups */
	KVS_REC_GHOST = 3,   /* evicted while it had children: no bytes, kept
			      * only as their parent until they are gone */
};

typedef struct kvs_rec {
	kvs_hash hash;     /* the block's chained hash */
	uint64_t offset;   /* slot offset in the tier's arena */
	uint64_t stamp;    /* last access, for the eviction policy */
	uint32_t gen;      /* slot generation handed to clients */
	uint32_t parent;   /* record of the prefix one block shorter, or NONE */
	uint32_t children; /* records whose parent this is */
	uint32_t refs;     /* pins: lease entries naming this record */
	uint32_t ns;       /* namespace id */
	uint32_t pol;      /* eviction policy's position (heap index) */
	uint32_t hits;     /* lookups that hit this block */
	uint16_t cls;      /* slot allocator class */
	uint8_t tier;      /* kvs_tier */
	uint8_t state;     /* kvs_rec_state */
} kvs_rec;

typedef struct kvs_table kvs_table;

/* kvs_table_create - an empty table. Errors: -ENOMEM. */
int kvs_table_create(kvs_table **out);
void kvs_table_destroy(kvs_table *t);

/* kvs_table_find - the record of @h, or KVS_NONE. */
uint32_t kvs_table_find(const kvs_table *t, kvs_hash h);

/*
 * kvs_table_insert - a new record for @h (which must not be present), zeroed
 * but for hash, parent = pol = KVS_NONE and state = WRITING; sets *idx.
 * Errors: -EEXIST, -ENOMEM (the table is unchanged).
 * Invalidates pointers from kvs_table_rec().
 */
int kvs_table_insert(kvs_table *t, kvs_hash h, uint32_t *idx);

/*
 * kvs_table_load - fill an empty table at once (a rebuild): records
 * 0..n-1, record i in use, as kvs_table_insert leaves it, with key keys[i]
 * where keep[i] is set; the others free. A key given twice keeps its first
 * record (keep[] is cleared for the later ones).
 * Errors: -EBUSY (the table is not empty), -ENOMEM (it stays empty).
 * Invalidates pointers from kvs_table_rec().
 */
int kvs_table_load(kvs_table *t, const kvs_hash *keys, uint8_t *keep,
		   uint32_t n);

/* kvs_table_remove - drop record @idx; its index may be reused. */
void kvs_table_remove(kvs_table *t, uint32_t idx);

/* kvs_table_rec - the record @idx (valid until the next insert). */
kvs_rec *kvs_table_rec(const kvs_table *t, uint32_t idx);

/* kvs_table_capacity - records allocated: every index is below it. */
uint32_t kvs_table_capacity(const kvs_table *t);

/* kvs_table_count - records in use. */
uint32_t kvs_table_count(const kvs_table *t);

/* kvs_table_bytes - heap bytes of records and index. */
uint64_t kvs_table_bytes(const kvs_table *t);

#endif /* KVS_TABLE_H */
