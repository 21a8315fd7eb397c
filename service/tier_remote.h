/*
 * tier_remote.h - the remote tier: a store tier (kvs_tier.h) shared by the
 * daemons of several machines through a Redis Cluster (or one Redis /
 * Valkey node), over the remote engine (storage/remote*.c). It keeps no
 * copy of its own per record: it publishes blocks (on host eviction, or at
 * commit with write-through) and, when a lookup's chain goes on past its
 * hits, says which of the next blocks the cluster holds and fetches them
 * straight into new host slots, verifying each value's header and MAC first
 * (a mismatch is a miss, never data, and the block's next publish here
 * replaces the value). See docs/remote.md.
 *
 * Its counters are the tier_remote.* stats. Only the daemon's tier table
 * (tiers.c) and tests include this header.
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_TIER_REMOTE_H
#define KVS_TIER_REMOTE_H

#include <stdint.h>

#include "kvs_tier.h"

typedef struct kvs_tier_remote_config {
	const char *seeds;      /* "HOST:PORT[,HOST:PORT...]" */
	const char *auth_file;  /* "user password" or "password", or NULL */
	const char *secret_file; /* the values' MAC key, or NULL: unauthenticated */
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
 * HMAC-SHA-256 in OpenSSL), -errno from either file, -ENOMEM. Logs why,
 * never the password or the secret.
 * Ownership: *out is the caller's until kvs_cache_tier_add() takes it
 * (or its ops->close()).
 */
int kvs_tier_remote_open(const kvs_tier_remote_config *cfg, kvs_tier_mod **out);

#endif /* KVS_TIER_REMOTE_H */
