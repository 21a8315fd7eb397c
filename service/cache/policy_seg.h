/*
 * policy_seg.h - what the two-segment policies (leaf-2q, leaf-learn) share:
 * the evictable leaves in binary min-heaps, one per slot class and segment,
 * keyed by the low bits of each record's stamp (the LRU policies use them
 * with one segment); a ring of admission clocks that tells how many
 * admissions came after an access; the ghost history of evicted blocks'
 * fingerprints; and seg_pol, the three of them with the access clock, which
 * the hooks of both policies share (add, del, the end of touch, victim).
 *
 * Heaps rather than lists for policy_lru.c's reason: a lookup touches a
 * chain's parents before its leaves, so a list would put every parent ahead
 * of the leaves. Each member's heap position is its record's pol; its
 * segment is the record's stamp bit seg_bit.
 *
 * Errors: -ENOMEM only (a record that finds no room stays out of the set:
 * unevictable, still correct). Ownership: the caller's structs, freed by
 * the *_free functions. Thread: the daemon's loop thread only.
 */
#ifndef KVS_POLICY_SEG_H
#define KVS_POLICY_SEG_H

#include <stdint.h>

#include "kvs_policy.h"
#include "kvs_table.h"

typedef struct seg_heap {
	uint32_t *idx;
	uint32_t n, cap;
} seg_heap;

typedef struct seg_heaps {
	kvs_table *t;
	uint64_t key_mask; /* the stamp's bits that are the key */
	uint64_t seg_bit;  /* the stamp's bit that names segment 1 */
	seg_heap *h;       /* [cls * 2 + segment] */
	uint32_t nclasses;
} seg_heaps;

/* The heap of segment @seg (0, 1) in class @cls, made if new; NULL without
 * memory. */
seg_heap *seg_heap_of(seg_heaps *s, uint32_t cls, int seg);
/* Add @idx to @h (its key set). Errors: -ENOMEM. */
int seg_heap_push(seg_heaps *s, seg_heap *h, uint32_t idx);
/* Remove the member at @pos of @h. */
void seg_heap_remove(seg_heaps *s, seg_heap *h, uint32_t pos);
/* The member at @pos of @h had its key changed: put it in its place. */
void seg_heap_fix(seg_heaps *s, seg_heap *h, uint32_t pos);
/* The heap that holds member @idx (record @r), or NULL if it is none's. */
seg_heap *seg_heap_member(seg_heaps *s, uint32_t idx, const kvs_rec *r);
/* The least key of segment @seg in class @cls (or across all classes:
 * KVS_CLASS_ANY), or KVS_NONE. */
uint32_t seg_heap_least(const seg_heaps *s, uint32_t cls, int seg);
uint64_t seg_key(const seg_heaps *s, uint32_t idx);
/* Members of segment @seg, over all classes. */
uint64_t seg_heaps_count(const seg_heaps *s, int seg);
void seg_heaps_free(seg_heaps *s);

/* Add record @idx to segment @seg of its class (its stamp's seg_bit set to
 * match); without memory it stays out of the set (pol = KVS_NONE). */
void seg_heaps_add(seg_heaps *s, uint32_t idx, int seg);
/* Take record @idx out of the set if it is a member. Returns 1 when it was
 * one and is still evictable as it leaves (committed, unpinned, childless):
 * the cache removes a victim before it changes anything, so that is an
 * eviction; 0 otherwise. */
int seg_heaps_del(seg_heaps *s, uint32_t idx);
/* Record @idx, a member or not, was accessed and now belongs in segment
 * @seg (its key and the rest of its stamp set, seg_bit as it was): move a
 * member whose segment changed, else put it in its place. */
void seg_heaps_touched(seg_heaps *s, uint32_t idx, int seg);

typedef struct seg_ring {
	uint64_t admitted; /* records first seen */
	uint64_t *ring;    /* clock of admission i at [i % cap] */
	uint64_t cap;
	uint64_t lo;       /* oldest admission the ring still holds */
} seg_ring;

/* Count an admission at access clock @stamp, keeping at least @keep. */
void seg_ring_admit(seg_ring *a, uint64_t stamp, uint64_t keep);
/* 1 if more than @w admissions came after access clock @stamp (ages the
 * ring cannot tell, for want of memory, count as old). */
int seg_ring_older(seg_ring *a, uint64_t stamp, uint64_t w);
void seg_ring_free(seg_ring *a);

/*
 * The ghost history: a bucketed array of 32-bit entries (0 = empty), FIFO
 * within each bucket of SEG_GHOST_WAYS, the bucket from the hash's low word.
 * An entry's bits from fp_shift up are its fingerprint (never 0: the
 * policy's to fold from the hash's high word); the bits below, the
 * policy's (leaf-learn: an eviction clock and a use count; leaf-2q: none).
 * It is sized for the records cached now, factor entries each (at least
 * SEG_GHOST_MIN), and resized (so forgotten: fingerprints cannot be
 * rehashed) only when the table has doubled since, i.e. while it first
 * fills; without memory it goes on with what it has, or none.
 */
#define SEG_GHOST_WAYS 8
#define SEG_GHOST_MIN 64

typedef struct seg_ghost {
	uint32_t factor;   /* entries per cached record */
	uint32_t fp_shift; /* entry >> fp_shift is the fingerprint */
	uint32_t *e;       /* buckets x SEG_GHOST_WAYS entries */
	uint8_t *next;     /* per bucket: the way to overwrite next */
	uint64_t buckets;
	uint64_t basis;    /* record count it was sized for */
} seg_ghost;

/* Store @entry (fingerprint @fp) for @h, over the entry with the same
 * fingerprint in its bucket if there is one, else over the bucket's oldest;
 * sized first for @records. Returns 0 when there is no ghost (no memory). */
int seg_ghost_put(seg_ghost *g, uint32_t records, kvs_hash h, uint32_t fp,
		  uint32_t entry);
/* The entry of @h with fingerprint @fp, used up (cleared); 0 if none. */
uint32_t seg_ghost_take(seg_ghost *g, kvs_hash h, uint32_t fp);
void seg_ghost_free(seg_ghost *g);

/* ---- the two-segment policies' state ---------------------------------- */

enum { SEG_PROB = 0, SEG_PROT = 1 }; /* probation, protected */

typedef struct seg_pol {
	kvs_table *t;
	uint64_t clock;   /* touches: the access order */
	seg_ring ring;    /* admissions and their clocks */
	seg_heaps hs;     /* [cls * 2 + segment] */
	seg_ghost ghost;  /* fingerprints of evicted blocks */
} seg_pol;

/* Empty, over @t: the heaps' key_mask and seg_bit, the ghost's factor and
 * fp_shift (see seg_heaps, seg_ghost). */
void seg_pol_init(seg_pol *p, kvs_table *t, uint64_t key_mask,
		  uint64_t seg_bit, uint32_t ghost_factor, uint32_t fp_shift);
void seg_pol_free(seg_pol *p);
/* The victim in class @cls (or KVS_CLASS_ANY): the oldest probation member
 * if more than @window admissions came after its last access, else the
 * oldest protected one, else whichever segment has one; KVS_NONE when
 * both are empty. */
uint32_t seg_pol_victim(seg_pol *p, uint32_t cls, uint64_t window);
/* The segments' sizes into @st (probation, protected_). */
void seg_pol_counts(const seg_pol *p, kvs_policy_stats *st);

#endif /* KVS_POLICY_SEG_H */
