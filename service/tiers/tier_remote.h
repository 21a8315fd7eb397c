/*
 * tier_remote.h - the remote tier: a store tier (kvs_tier_ops.h) shared by the
 * daemons of several machines through a Redis Cluster (or one Redis /
 * Valkey node), over the remote engine (storage/remote/remote*.c). It keeps no
 * copy of its own per record: it publishes blocks (on host eviction, or at
 * commit with write-through) and, when a lookup's chain goes on past its
 * hits, says which of the next blocks the cluster holds and fetches them
 * straight into new host slots, verifying each value's header and MAC first
 * (a mismatch is a miss, never data, and the block's next publish here
 * replaces the value). See docs/remote.md.
 *
 * Its counters are the tier_remote.* stats. Only the daemon's tier table
 * (tiers_table.c) and tests include this header.
 * Thread: the daemon's loop thread only. The tier starts two MAC workers
 * of its own (the values' HMAC, off the loop: tier_remote_work.c); they
 * touch no state of the cache, and close() joins them.
 */
#ifndef KVS_TIER_REMOTE_H
#define KVS_TIER_REMOTE_H

#include <stdint.h>

#include "kvs_tier_ops.h"

/* Its stats section (tier_remote.*): X(name, kind, help) lines (kvs_stats.h),
 * the tier's kvs_tier_remote_stats, described by kvs_tier_remote_section. */
#define KVS_TIER_REMOTE_STATS(X)                                              \
	X(enabled, GAUGE, "1 when the remote tier is on")                     \
	X(cluster, GAUGE, "1 a Redis Cluster, 0 one plain node")              \
	X(authenticated, GAUGE, "1 values signed with --remote-secret-file")  \
	X(attached, GAUGE, "1 once the cluster answered, 0 while it does not (lookups local)") \
	X(maps_refused, COUNTER, "slot maps refused: malformed, or too many nodes") \
	X(errors_proto, COUNTER, "replies that did not fit their command: connection closed") \
	X(nodes, GAUGE, "nodes known")                                        \
	X(nodes_down, GAUGE, "nodes failing now (misses for their slots)")    \
	X(probes, COUNTER, "EXISTS windows (64 keys at most) past lookups' hits") \
	X(probe_keys, COUNTER, "blocks asked about by those lookups")         \
	X(hits, COUNTER, "blocks fetched and verified")                       \
	X(misses, COUNTER, "blocks asked about and not there")                \
	X(corrupt, COUNTER, "values whose header is not the block's: misses") \
	X(forged, COUNTER, "values failing their MAC: misses")                \
	X(repaired, COUNTER, "values that failed here, replaced by a publish") \
	X(bytes_in, COUNTER, "payload bytes fetched")                         \
	X(published, COUNTER, "blocks stored (SET NX, or a repair's SET)")    \
	X(existed, COUNTER, "blocks not sent: already there")                 \
	X(bytes_out, COUNTER, "payload bytes stored")                         \
	X(skipped, COUNTER, "publishes dropped: staging full")                \
	X(pin_capped, COUNTER, "commits sent from a copy: pin cap reached")   \
	X(pinned_bytes, GAUGE, "host bytes pinned by publishes now")          \
	X(macs, COUNTER, "values sealed or verified off the loop (MAC workers)") \
	X(mac_queued, GAUGE, "values at the MAC workers now")                 \
	X(errors_timeout, COUNTER, "requests past --remote-timeout")          \
	X(errors_down, COUNTER, "requests to a node down or lost")            \
	X(errors_clusterdown, COUNTER, "requests refused: CLUSTERDOWN")       \
	X(errors_other, COUNTER, "other failed requests")                     \
	X(inflight_bytes, GAUGE, "value bytes on the wire now")               \
	X(lat_p50_us, GAUGE, "median request latency (bucket bound)")         \
	X(lat_p99_us, GAUGE, "p99 request latency (bucket bound)")

typedef struct kvs_tier_remote_stats {
	KVS_TIER_REMOTE_STATS(KVS_STAT_FIELD)
} kvs_tier_remote_stats;
extern const kvs_stats_section kvs_tier_remote_section;

typedef struct kvs_tier_remote_config {
	const char *seeds;      /* "HOST:PORT[,HOST:PORT...]" */
	const char *auth_file;  /* "user password" or "password", or NULL */
	const char *secret_file; /* the values' MAC key, or NULL: unauthenticated */
	int mac_version;         /* what is published: KVS_RVAL_V_*; 0 the newest */
	int write_through;      /* publish at commit (else at host eviction) */
	uint32_t timeout_ms;    /* per request; also bounds the connect */
	uint32_t pin_share;     /* write-through: percent of the host tier
				 * that publishes may hold pinned */
	const struct kvs_remote_tls *tls; /* TLS settings, or NULL: plain */
} kvs_tier_remote_config;

/*
 * kvs_tier_remote_open - read the AUTH and secret files, connect to the
 * seeds and take the slot map (blocking, at most the timeout per seed),
 * ready for kvs_cache_tier_add(). When no seed answers, the tier is made
 * anyway and attaches in the background (kvs_remote_attach: never blocking
 * the loop; logged, tier_remote.attached 0 until then).
 * Errors: -EINVAL (seeds, AUTH file format, a secret under 16 bytes, a TLS
 * file that does not load), -EACCES (AUTH refused, or a client certificate
 * wanted), -EKEYREJECTED (a seed's certificate did not verify), -EPROTO (a
 * seed that does not speak Redis, or a TLS port in plain text), -EIO (no
 * HMAC-SHA-256 in OpenSSL), -errno from either file or from starting
 * the MAC workers (eventfd, epoll, pthread_create), -ENOMEM. Logs why,
 * never the password or the secret.
 * Ownership: *out is the caller's until kvs_cache_tier_add() takes it
 * (or its ops->close()).
 */
int kvs_tier_remote_open(const kvs_tier_remote_config *cfg, kvs_tier_mod **out);

#endif /* KVS_TIER_REMOTE_H */
