/* cache_admin.c - stats, and the operator's primitives over the cache
 * (kvs_cache_admin.h): walk, find, evict and pin single records. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache_int.h"

/* ---- introspection ---------------------------------------------------- */

/* The slot allocators of every domain, summed; *bytes, *resident: their
 * arenas'. */
void cache_host_stats(const kvs_cache *c, kvs_slab_stats *ss, uint64_t *bytes,
		      uint64_t *resident)
{
	memset(ss, 0, sizeof(*ss));
	*bytes = *resident = 0;
	for (uint32_t i = 0; i < c->ndoms; i++) {
		kvs_slab_stats one;

		kvs_slab_stats_get(c->doms[i].slab, &one);
		ss->slots_used += one.slots_used;
		ss->slot_bytes_used += one.slot_bytes_used;
		ss->slab_bytes += one.slab_bytes;
		*bytes += kvs_arena_bytes(c->doms[i].arena);
		*resident += kvs_arena_resident(c->doms[i].arena);
	}
}

/* The policies' stats (policy.*): counts summed over the domains' and the
 * slot tiers' policies, what was learned from the one with most members. */
static void policy_stats_fill(const kvs_cache *c, kvs_counters *st)
{
	kvs_policy_stats sum = { 0 }, best = { 0 }, one;
	int64_t most = -1;

	for (uint32_t i = 0; i < c->ndoms + KVS_TIER_MAX; i++) {
		const kvs_policy *p = i < c->ndoms ? c->doms[i].policy
						   : c->tpol[i - c->ndoms];

		if (!p)
			continue;
		kvs_policy_stats_get(p, &one);
		sum.probation += one.probation;
		sum.protected_ += one.protected_;
		sum.ghost_returns += one.ghost_returns;
		sum.window_grew += one.window_grew;
		sum.window_shrank += one.window_shrank;
		if (one.probation + one.protected_ > most) {
			most = one.probation + one.protected_;
			best = one;
		}
	}
	st->policy_probation_blocks = sum.probation;
	st->policy_protected_blocks = sum.protected_;
	st->policy_window_ppm = best.window_ppm;
	st->policy_bonus_f2_milli = best.bonus_milli[2];
	st->policy_bonus_f3_milli = best.bonus_milli[3];
	st->policy_bonus_f4_milli = best.bonus_milli[4];
	st->policy_bonus_f5_milli = best.bonus_milli[5];
	st->policy_bonus_f6_milli = best.bonus_milli[6];
	st->policy_bonus_f7_milli = best.bonus_milli[7];
	st->policy_ghost_returns = sum.ghost_returns;
	st->policy_window_grew = sum.window_grew;
	st->policy_window_shrank = sum.window_shrank;
}

void kvs_cache_stats_fill(kvs_cache *c)
{
	kvs_counters *st = c->stats;
	kvs_slab_stats ss;
	uint64_t blocks = 0, writing = 0, lease_bytes = 0, bytes, resident;

	cache_host_stats(c, &ss, &bytes, &resident);
	for (uint32_t i = 0; i < c->nns; i++) {
		blocks += c->nss[i].info.blocks;
		writing += c->nss[i].info.writing;
	}
	for (uint32_t i = 0; i < kvs_pool_cap(&c->leases); i++)
		lease_bytes += cache_lease(c, i)->cap * sizeof(uint32_t);
	st->tier_host_bytes_total = (int64_t)bytes;
	st->tier_host_bytes_resident = (int64_t)resident;
	st->tier_host_bytes_used = (int64_t)ss.slot_bytes_used;
	st->tier_host_bytes_free =
		(int64_t)(bytes - ss.slot_bytes_used);
	st->tier_host_slots_used = (int64_t)ss.slots_used;
	/* Committed blocks are in host RAM unless a slot tier has them. */
	for (uint8_t t = 0; t < KVS_TIER_MAX; t++)
		if (c->tpol[t])
			blocks -= c->tier[t]->ops->slot->blocks(c->tier[t]);
	st->tier_host_blocks = (int64_t)blocks;
	st->tier_host_blocks_writing = (int64_t)writing;
	st->tier_host_utilization_permille =
		ss.slab_bytes ? (int64_t)(ss.slot_bytes_used * 1000 / ss.slab_bytes) : 0;
	st->leases_active = c->active_leases;
	st->leases_pinned_blocks = (int64_t)c->pins;
	st->leases_pinned_slab_bytes = (int64_t)(c->pslab_pages * c->page_bytes);
	st->namespaces_count = 0;
	for (uint32_t i = 0; i < c->nns; i++)
		st->namespaces_count += !c->nss[i].gone;
	st->tenants_domains = c->by_uid ? c->ndoms : 0;
	st->table_records = kvs_table_count(c->table);
	st->table_ghosts = c->ghosts;
	policy_stats_fill(c, st);
	st->table_metadata_bytes =
		(int64_t)(kvs_table_bytes(c->table) + lease_bytes +
			  (uint64_t)kvs_pool_cap(&c->leases) * sizeof(lease) +
			  (uint64_t)c->natime * sizeof(*c->atime) +
			  (uint64_t)c->nchain * sizeof(*c->chain));
	for (uint8_t t = 0; t < KVS_TIER_MAX; t++)
		st->table_metadata_bytes += (int64_t)c->nkids[t] * sizeof(uint32_t);
	/* Tiers last: they add their per-record state to the metadata. */
	for (uint8_t t = 0; t < KVS_TIER_MAX; t++)
		if (c->tier[t])
			c->tier[t]->ops->stats(c->tier[t], st);
}

void kvs_cache_ns_foreach(const kvs_cache *c,
			  void (*fn)(const kvs_ns_info *ns, void *arg), void *arg)
{
	for (uint32_t i = 0; i < c->nns; i++)
		if (!c->nss[i].gone)
			fn(&c->nss[i].info, arg);
}

/* ---- operator primitives (kvs_cache_admin.h) -------------------------- */

void kvs_cache_rec_chain(kvs_cache *c, uint32_t idx, uint32_t *depth,
			 uint32_t *root)
{
	struct cache_chain *ch = c->chain;
	uint32_t d = ch[idx].depth, r = ch[idx].root;

	while (ch[r].root != r) {
		d += ch[r].depth - 1;
		r = ch[r].root;
	}
	/* Point the records on the way at the root, so the next ask is one
	 * step (each such step was a link made after the children's). */
	for (uint32_t q = idx, qd = d; ch[q].root != r;) {
		uint32_t next = ch[q].root, nd = qd - ch[q].depth + 1;

		ch[q] = (struct cache_chain){ qd, r };
		q = next;
		qd = nd;
	}
	*depth = d;
	*root = r;
}

uint64_t kvs_cache_rec_age_s(const kvs_cache *c, uint32_t idx)
{
	uint32_t now = cache_clock_s(c), t = idx < c->natime ? c->atime[idx] : now;

	return now > t ? now - t : 0;
}

uint32_t kvs_cache_find(const kvs_cache *c, uint32_t ns_id, kvs_hash h)
{
	for (uint32_t id = ns_id ? ns_id : 1; id <= c->nns; id++) {
		uint32_t idx = kvs_table_find(c->table, cache_ns_key(id, h));

		if (idx != KVS_NONE && cache_rec(c, idx)->ns == id)
			return idx;
		if (ns_id)
			break;
	}
	return KVS_NONE;
}

uint32_t kvs_cache_prefix(kvs_cache *c, const kvs_ns_desc *d,
			  const kvs_hash *hashes, uint32_t n, uint32_t *tiers)
{
	/* Per-uid domains: every namespace is a tenant's, domain 0 the
	 * first tenant's, and none is answered to a peer of no uid. */
	uint32_t id = c->by_uid ? 0 : cache_ns_find(c, 0, d), hits;

	memset(tiers, 0, (KVS_TIER_REMOTE + 1) * sizeof(*tiers));
	c->stats->blocks_query_asked += n;
	for (hits = 0; id && hits < n; hits++) {
		uint32_t idx = cache_find(c, id, hashes[hits]);
		const kvs_rec *r;

		if (idx == KVS_NONE)
			break;
		r = cache_rec(c, idx);
		if (r->ns != id || r->state != KVS_REC_READY ||
		    r->tier > KVS_TIER_REMOTE)
			break;
		/* Neither RAM nor a slot tier: only if it can be read back. */
		if (r->tier != KVS_TIER_HOST && !c->tpol[r->tier] &&
		    !cache_store_of(c, idx))
			break;
		tiers[r->tier]++;
	}
	return hits;
}

const kvs_ns_info *kvs_cache_ns_at(const kvs_cache *c, uint32_t id)
{
	return id >= 1 && id <= c->nns && !c->nss[id - 1].gone ?
	       &c->nss[id - 1].info : NULL;
}

uint32_t kvs_cache_ns_count(const kvs_cache *c)
{
	return c->nns;
}

int kvs_cache_touch_rec(kvs_cache *c, uint32_t idx)
{
	kvs_rec *r = cache_rec(c, idx);

	if (r->state != KVS_REC_READY)
		return 0;
	r->hits++;
	cache_count_lookup(c, r->ns, 1, 0);
	cache_touch_atime(c, idx);
	kvs_policy_touch(cache_policy_of(c, idx), idx);
	return 1;
}

void kvs_cache_count_miss(kvs_cache *c, uint32_t ns_id, uint64_t n)
{
	int64_t room = INT64_MAX - c->stats->blocks_lookup_miss;

	cache_count_lookup(c, ns_id, 0, n > (uint64_t)room ? (uint64_t)room : n);
}

void kvs_cache_pin_rec(kvs_cache *c, uint32_t idx, int delta)
{
	cache_rec(c, idx)->refs += (uint32_t)delta;
	cache_sync_evictable(c, idx);
}
