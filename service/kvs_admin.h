/*
 * kvs_admin.h - the operator's requests: list, inspect, evict/flush,
 * pin/unpin, and the KV event stream (watch).
 *
 * server.c hands it the payload of an operator request and sends back what it
 * writes; the work is done on the cache through kvs_cache_admin.h. Events
 * (stored, evicted, flushed, pinned, unpinned) collect while a request runs
 * and go out, one EVENT message per subscriber, when kvs_admin_publish() is
 * called after it. A subscriber whose unsent output is over the watch buffer
 * loses the message (counted in events.dropped and told to it in the next
 * one): a slow watcher never blocks the loop nor grows the daemon's memory.
 *
 * Operator pins are held by the daemon, not by a connection: they last until
 * unpinned (or the daemon stops), and are bounded to a share of the tier.
 *
 * Errors: 0 or a negative KVS_E_* / -errno (see each function).
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_ADMIN_H
#define KVS_ADMIN_H

#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>

#include "kvs_cache.h"
#include "kvs_stats.h"

typedef struct kvs_admin kvs_admin;
typedef struct kvs_admin_sub kvs_admin_sub;

typedef struct kvs_admin_config {
	uint32_t max_pinned_share; /* percent of the host tier operators may pin */
	uint64_t watch_buffer;     /* bytes of unsent events per subscriber */
} kvs_admin_config;

/* kvs_admin_create - hooks itself to @cache's events. Errors: -ENOMEM.
 * Ownership: @cache and @stats must outlive it. */
int kvs_admin_create(const kvs_admin_config *cfg, kvs_cache *cache,
		     kvs_counters *stats, kvs_admin **out);
void kvs_admin_destroy(kvs_admin *a);

/*
 * kvs_admin_handle - one operator request (LIST, INSPECT, EVICT, PIN, UNPIN).
 * @conn_ns: the connection's namespace, 0 for a control-only connection. An
 * attached (worker) connection sees only its own namespace and may not evict
 * or pin (-EPERM).
 * @out, @cap: where the reply payload goes; *len its length.
 * Errors: KVS_E_PROTO (malformed), -ENOENT (no such block or namespace),
 * -EPERM, KVS_E_LIMIT (pins over the share), KVS_E_TOOMANY, -ENOBUFS.
 */
int kvs_admin_handle(kvs_admin *a, uint32_t conn_ns, uint32_t opcode,
		     const uint8_t *p, size_t n, uint8_t *out, size_t cap,
		     size_t *len);

/*
 * kvs_admin_subscribe - send events to @out from now on, as EVENT messages
 * with @req_id; @wake(@arg) is called after bytes are added (it must only
 * schedule a write). Errors: -ENOMEM.
 * Ownership: the subscription until kvs_admin_unsubscribe() (before @out is
 * freed).
 */
int kvs_admin_subscribe(kvs_admin *a, struct evbuffer *out, uint64_t req_id,
			void (*wake)(void *arg), void *arg, kvs_admin_sub **sub);
/* kvs_admin_unsubscribe - @sub may be NULL. */
void kvs_admin_unsubscribe(kvs_admin *a, kvs_admin_sub *sub);

/* kvs_admin_publish - send the events collected since the last call. */
void kvs_admin_publish(kvs_admin *a);

#endif /* KVS_ADMIN_H */
