/*
 * tier_ssd.h - the SSD tier's glue between the block cache (cache.c) and
 * the engines (storage/ssd.c segment store, storage/index.c LMDB index).
 * Internal to the cache: only cache.c and tier_ssd.c include it; the daemon
 * sees kvs_cache_ssd_open/fd/poll in kvs_cache.h.
 *
 * Each record gets a side entry (indexed like the record, 24 bytes): its SSD
 * location (segment, generation, offset) while it has one, what I/O it has
 * in flight, and how many of its children are in host RAM (the SSD tier's
 * leaf rule: a parent whose children went to SSD may leave RAM too).
 *
 * Every function here requires c->ssd (the tier on), except tier_ssd_close.
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_TIER_SSD_H
#define KVS_TIER_SSD_H

#include "cache_int.h"

/* A new record @idx: its side entry is zeroed. Errors: -ENOMEM. */
int tier_ssd_rec_new(kvs_cache *c, uint32_t idx);
/* Children of @idx in host RAM, and a change of that count. */
uint32_t tier_ssd_kids(const kvs_cache *c, uint32_t idx);
void tier_ssd_kids_add(kvs_cache *c, uint32_t idx, int delta);
/* Whether @idx has a promotion read in flight (it then owns a slot). */
int tier_ssd_reading(const kvs_cache *c, uint32_t idx);
/* Host slots held by demotion writes in flight (written straight from the
 * slot, freed when the write completes), for kvs_cache_check(). */
uint64_t tier_ssd_slots_held(const kvs_cache *c);
/* tier_ssd_wait_held - the host arena has no slot and no victim left, but
 * demotion writes in flight hold slots: wait (blocking the loop, at most
 * until the first write in flight finishes) until at least one of those
 * slots is free again. Returns the slots freed; 0 when none is held. */
int tier_ssd_wait_held(kvs_cache *c);
/* Whether SSD-only @idx can be read back now (located, no I/O in flight). */
int tier_ssd_promotable(const kvs_cache *c, uint32_t idx);

/*
 * tier_ssd_demote - host eviction of READY @idx (already out of the policy
 * and the host block count): returns 1 if the SSD tier keeps it (its slot
 * is freed here, or, when the demotion write goes straight from it, when
 * that write completes; the record stays, SSD-only or being written), 0 if
 * the cache should free the slot and forget it (not admitted, tier off,
 * error).
 */
int tier_ssd_demote(kvs_cache *c, uint32_t idx);
/* tier_ssd_keeps - whether tier_ssd_demote(@idx) would keep it, as far as
 * can be told before the write (the tier is on and admits it, or it is on
 * SSD already); a full staging area or an I/O error can still refuse. */
int tier_ssd_keeps(const kvs_cache *c, uint32_t idx);
/* tier_ssd_commit - @idx was committed: write-through, if configured. */
void tier_ssd_commit(kvs_cache *c, uint32_t idx);

/*
 * tier_ssd_promote - read lease @s pins a chain some of whose records are
 * SSD-only: allocate slots and read them back. Returns the hits (the chain
 * cut at the first block that could not be had) with *lease and @out
 * filled, or -EINPROGRESS: the owner's done callback answers later.
 */
int tier_ssd_promote(kvs_cache *c, kvs_owner *o, uint32_t s, kvs_block *out,
		     uint64_t *lease);
/* tier_ssd_owner_gone - @o is being freed: its promotion, if any, finishes
 * without it (blocks become host-resident or are dropped); its verify, if
 * any, stops submitting reads and finishes the ones in flight without it
 * (a block failing verification is still dropped). */
void tier_ssd_owner_gone(kvs_cache *c, kvs_owner *o);

/* tier_ssd_ns_created - persist namespace @id (a new layout). */
void tier_ssd_ns_created(kvs_cache *c, uint32_t id);
void tier_ssd_stats_fill(kvs_cache *c);
/* tier_ssd_close - stop the tier (I/O in flight is waited for and
 * discarded), flush and close the index. No-op when off. */
void tier_ssd_close(kvs_cache *c);

#endif /* KVS_TIER_SSD_H */
