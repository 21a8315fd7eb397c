/*
 * kvs_tiers_table.h - the daemon's tiers other than host: the table of which
 * settings turn each on and how each is opened (tiers_table.c), and the list of
 * their stats sections. Adding a tier adds its files (a kvs_tier_ops
 * implementation, kvs_tier_ops.h), one line in that table and one in the list.
 *
 * Thread: the daemon's loop thread only (kvs_tiers_open before serving).
 */
#ifndef KVS_TIERS_TABLE_H
#define KVS_TIERS_TABLE_H

#include "kvs_cache.h"
#include "kvs_config.h"

/*
 * kvs_tiers_open - open every tier @cfg turns on and hand it to @c
 * (kvs_cache_tier_add). A tier that was asked for by name and cannot be
 * had is an error; one that is on by default (the GPU tier's auto) is
 * left off, logged. Errors: the failing tier's (logged).
 */
int kvs_tiers_open(const kvs_config *cfg, kvs_cache *c);

/*
 * kvs_tiers_stats - every tier's stats section, on or off, in the order of
 * the stats text, into @out: the values a tier that is on keeps (its
 * kvs_tier_mod.counters, refreshed by kvs_cache_stats_fill), zeros for one
 * that is off. Returns how many (KVS_TIERS_SECTIONS).
 */
#define KVS_TIERS_SECTIONS 3
uint32_t kvs_tiers_stats(const kvs_cache *c,
			 kvs_stats_part out[KVS_TIERS_SECTIONS]);

#endif /* KVS_TIERS_TABLE_H */
