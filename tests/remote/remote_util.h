/*
 * remote_util.h - what the remote engine's tests share: a cluster started
 * or the test skipped, an engine opened on it, completions collected by
 * cookie, deterministic values and keys.
 */
#ifndef REMOTE_UTIL_H
#define REMOTE_UTIL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvs_check.h"
#include "kvs_remote.h"
#include "kvs_remote_cluster_slots.h"
#include "redis_cluster.h"

#define RU_MAX 4096

/* Completions by cookie (cookies are 0..RU_MAX-1). */
static struct ru_done {
	int done, res;
	uint64_t lat_us;
} ru_done[RU_MAX];
static int ru_ndone;

static inline void ru_cb(void *arg, const kvs_remote_cqe *c)
{
	(void)arg;
	if (c->cookie < RU_MAX) {
		ru_done[c->cookie].done++;
		ru_done[c->cookie].res = c->res;
		ru_done[c->cookie].lat_us = c->lat_us;
	}
	ru_ndone++;
}

static inline void ru_reset(void)
{
	memset(ru_done, 0, sizeof(ru_done));
	ru_ndone = 0;
}

static inline double ru_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Start a cluster, or exit 77 with the reason. */
static inline rc_cluster *ru_cluster(const char *name, const rc_opts *o)
{
	rc_cluster *c;
	int rc = rc_start(o, &c);

	if (rc == -ENOENT) {
		printf("%s: SKIP: %s\n", name, rc_why());
		exit(77);
	}
	if (rc < 0) {
		fprintf(stderr, "%s: cluster start failed: %s (%s)\n", name,
			strerror(-rc), rc_why());
		exit(1);
	}
	return c;
}

static inline kvs_remote *ru_open(const char *seeds, unsigned timeout_ms)
{
	kvs_remote *r;

	if (kvs_remote_create(&r) < 0 || kvs_remote_set_seeds(r, seeds) < 0 ||
	    kvs_remote_set_timeout_ms(r, timeout_ms) < 0)
		return NULL;
	kvs_remote_set_callback(r, ru_cb, NULL);
	if (kvs_remote_open(r) < 0) {
		kvs_remote_close(r);
		return NULL;
	}
	return r;
}

/* Value bytes of key number @k: a function of (k, i), so any mix-up shows. */
static inline void ru_fill(uint8_t *buf, size_t len, uint64_t k)
{
	uint64_t x = k * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, len - i < 8 ? len - i : 8);
	}
}

/* Key number @k: "kvs1:" + 16 printable bytes (redis-cli can name it). */
static inline size_t ru_key(char *buf, uint64_t k)
{
	return (size_t)snprintf(buf, 32, "kvs1:%016llx", (unsigned long long)k);
}

/*
 * ru_owners - from CLUSTER NODES as node @from sees it: @owners[slot] = the
 * index (rc_port order) of the master serving each slot, -1 for none; the
 * node ids into @ids[i] (64 bytes each) when not NULL. 0, or -1.
 */
static inline int ru_owners(rc_cluster *c, int from, int *owners, char (*ids)[64])
{
	static char out[65536];
	char *line, *save;

	for (int s = 0; s < KVS_SLOTS; s++)
		owners[s] = -1;
	if (rc_cli(c, from, out, sizeof(out), "CLUSTER", "NODES", NULL) != 0)
		return -1;
	for (line = strtok_r(out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char nid[64], addr[64], *p = line, *colon;
		int port, idx = -1;

		if (sscanf(line, "%63s %63s", nid, addr) != 2 ||
		    !(colon = strchr(addr, ':')) || sscanf(colon + 1, "%d", &port) != 1)
			continue;
		for (int i = 0; i < rc_nodes(c); i++)
			if (rc_port(c, i) == port)
				idx = i;
		if (idx < 0)
			continue;
		if (ids)
			snprintf(ids[idx], 64, "%s", nid);
		/* fields 9 on: "a-b" or "a" ranges, or [..] migration marks */
		for (int f = 0; f < 8 && p; f++)
			p = strchr(p + 1, ' ');
		while (p && *p) {
			unsigned a, b;

			while (*p == ' ')
				p++;
			if (*p != '[') {
				int n2 = sscanf(p, "%u-%u", &a, &b);

				if (n2 == 1)
					b = a;
				if (n2 >= 1)
					for (unsigned s = a; s <= b && s < KVS_SLOTS; s++)
						owners[s] = idx;
			}
			p = strchr(p, ' ');
		}
	}
	return 0;
}

#endif /* REMOTE_UTIL_H */
