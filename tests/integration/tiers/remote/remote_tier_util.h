/*
 * remote_tier_util.h - what the daemon-level remote tier tests share
 * (test_remote_*.c here): a private Redis Cluster or the test skipped, the
 * namespace fingerprint and key of a block and the node that owns it,
 * waits on tier_remote.* stats.
 * Links tests/support/redis_cluster.c and storage/ (the key and slot functions).
 */
#ifndef TH_REMOTE_TIER_UTIL_H
#define TH_REMOTE_TIER_UTIL_H

#include "harness.h"
#include "harness_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_remote_cluster_slots.h"
#include "kvs_remote_value.h"
#include "redis_cluster.h"

/* rt_cluster - start @o's cluster or skip the test (77) with the reason. */
static inline rc_cluster *rt_cluster(const rc_opts *o)
{
	rc_cluster *c;
	int rc = rc_start(o, &c);

	if (rc == -ENOENT)
		th_skip("%s", rc_why());
	if (rc < 0)
		th_fatal("cluster start failed: %s (%s)", kvs_strerror(rc), rc_why());
	return c;
}

/* rt_fp - the namespace fingerprint the daemon gives layout @l (the same
 * kvs_rval_ns_fp of the same namespaces-file entry). */
static inline uint64_t rt_fp(const kvs_layout *l)
{
	kvs_ns_layout ns = {
		.model = l->model, .model_len = (uint32_t)strlen(l->model),
		.adapter = l->adapter ? l->adapter : "",
		.adapter_len = l->adapter ? (uint32_t)strlen(l->adapter) : 0,
		.salt = (const uint8_t *)l->salt,
		.salt_len = l->salt ? (uint32_t)strlen(l->salt) : 0,
		.layers = l->layers, .kv_heads = l->kv_heads, .head_dim = l->head_dim,
		.block_tokens = l->block_tokens, .tp_rank = l->tp_rank,
		.tp_size = l->tp_size, .dtype = (uint32_t)l->dtype };

	return kvs_rval_ns_fp(&ns);
}

/* rt_slot - the cluster slot of the key of block @h of layout @l. */
static inline unsigned rt_slot(const kvs_layout *l, kvs_hash h)
{
	uint8_t key[KVS_RVAL_KEY_BYTES];

	kvs_rval_key(key, rt_fp(l), h);
	return kvs_slot_of(key, sizeof(key));
}

/*
 * rt_corrupt - change 8 payload bytes of the value of one of blocks
 * @h[2..@n-2] of layout @l in Redis (SETRANGE; -c: redis-cli follows MOVED
 * to the key's node). redis-cli takes the key from argv, so it is the
 * first of them whose key has no NUL. Returns its index, or 0 after a
 * failed check.
 */
static inline size_t rt_corrupt(rc_cluster *c, const kvs_layout *l,
				const kvs_hash *h, size_t n, uint64_t block_bytes)
{
	uint8_t key[KVS_RVAL_KEY_BYTES + 1] = { 0 };
	char out[256];
	size_t m = 0;

	for (size_t i = 2; i + 1 < n && !m; i++) {
		kvs_rval_key(key, rt_fp(l), h[i]);
		if (memchr(key, 0, KVS_RVAL_KEY_BYTES) == NULL)
			m = i;
	}
	if (!CHECK(m != 0) ||
	    !CHECK_EQ(rc_cli(c, 0, out, sizeof(out), "-c", "SETRANGE", (char *)key,
			     "1000", "corrupt!", NULL), 0) ||
	    !CHECK_EQ(atoll(out), (long long)(KVS_RVAL_HDR_BYTES + block_bytes)))
		return 0;
	return m;
}

/*
 * rt_owners - @owner[slot] = index of the node that owns it, from
 * `CLUSTER NODES` asked to node @ask (-1 for a slot nobody owns).
 * Returns 0 or -1 (a failed check).
 */
static inline int rt_owners(rc_cluster *c, int ask, int8_t owner[KVS_SLOTS])
{
	static char out[16384];
	char *line, *save = NULL;

	memset(owner, -1, KVS_SLOTS);
	if (!CHECK_EQ(rc_cli(c, ask, out, sizeof(out), "CLUSTER", "NODES", NULL), 0))
		return -1;
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *tok, *s2 = NULL, *colon;
		int field = 0, node = -1;

		for (tok = strtok_r(line, " ", &s2); tok; tok = strtok_r(NULL, " ", &s2), field++) {
			if (field == 1 && (colon = strrchr(strtok(tok, "@"), ':'))) {
				int port = atoi(colon + 1);

				for (int i = 0; i < rc_nodes(c); i++)
					if (rc_port(c, i) == port)
						node = i;
			} else if (field >= 8 && node >= 0 && tok[0] != '[') {
				unsigned a, b;
				int n = sscanf(tok, "%u-%u", &a, &b);

				if (n == 1)
					b = a;
				for (unsigned s = a; n >= 1 && s <= b && s < KVS_SLOTS; s++)
					owner[s] = (int8_t)node;
			}
		}
	}
	return 0;
}

/* rt_get_calls - GET commands the nodes of @c (all but @skip, -1 for
 * none) have run, from INFO commandstats. */
static inline long long rt_get_calls(rc_cluster *c, int skip)
{
	char out[16384];
	const char *p;
	long long sum = 0;

	for (int i = 0; i < rc_nodes(c); i++) {
		if (i == skip)
			continue;
		CHECK_EQ(rc_cli(c, i, out, sizeof(out), "INFO", "commandstats", NULL), 0);
		p = strstr(out, "cmdstat_get:calls=");
		sum += p ? atoll(p + strlen("cmdstat_get:calls=")) : 0;
	}
	return sum;
}

/* rt_wait_ge - poll stat @name until it is at least @want, for @ms. */
static inline bool rt_wait_ge(th_daemon *d, const char *name, int64_t want, int ms)
{
	int64_t end = th_now_ms() + ms, v;

	for (;;) {
		v = th_stat_get(d, name);
		if (v >= want)
			return true;
		if (th_now_ms() >= end)
			break;
		th_poll_pause();
	}
	th_note("%s: %lld after %d ms, want >= %lld", name, (long long)v, ms,
		(long long)want);
	return false;
}

/* rt_publish_ends - publishes that have ended in daemon @d: every block
 * sent is counted once as published, existed, skipped or failed. */
static inline int64_t rt_publish_ends(th_daemon *d)
{
	static const char *const names[] = {
		"tier_remote.published", "tier_remote.existed", "tier_remote.skipped",
		"tier_remote.errors_timeout", "tier_remote.errors_down",
		"tier_remote.errors_clusterdown", "tier_remote.errors_other" };
	int64_t sum = 0;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		sum += th_stat_get(d, names[i]);
	return sum;
}

static inline bool rt_wait_publish_ends(th_daemon *d, int64_t want, int ms)
{
	int64_t end = th_now_ms() + ms, v;

	while ((v = rt_publish_ends(d)) < want && th_now_ms() < end)
		th_poll_pause();
	if (v < want)
		th_note("publishes ended: %lld after %d ms, want %lld", (long long)v,
			ms, (long long)want);
	return v >= want;
}

#endif /* TH_REMOTE_TIER_UTIL_H */
