/*
 * policy_seg.h - what the two-segment policies (leaf-2q, leaf-learn) share:
 * the evictable leaves in binary min-heaps, one per slot class and segment,
 * keyed by the low bits of each record's stamp; and a ring of admission
 * clocks that tells how many admissions came after an access.
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

#endif /* KVS_POLICY_SEG_H */
