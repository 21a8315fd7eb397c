/*
 * kvs_admin.h - the operator's requests: list, inspect, evict/flush,
 * pin/unpin, and the KV event stream (watch).
 *
 * command.c decodes an operator request, checks who may send it and in which
 * namespaces (its command table: the peer's uid, its domain, control
 * connections only),
 * hands the request here and sends back what this writes (admin.c); the work
 * is done on the cache through kvs_cache_admin.h, in the cache's own types:
 * admin.c translates between them and the wire's (kvs_wire_admin.h), the
 * cache's kvs_cache_event into the wire's KVS_EVENT_* among them. Events
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
#include "kvs_wire.h"
#include "kvs_wire_admin.h"

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
 * A peer's domain: the namespaces its requests may see and touch. command.c
 * picks it from the peer's uid (docs/reliability.md, "Hostile clients"): an
 * operator's (the daemon's uid, root, --admin-uid) is every namespace (@all),
 * and so is a worker's when every uid shares one arena; under --tenant-arenas
 * uid a worker's is the namespaces in the arena of its @uid.
 */
typedef struct kvs_admin_domain {
	int all;
	uint32_t uid;
} kvs_admin_domain;

/* kvs_admin_domain_has - whether namespace @ns is in @d (an @all domain has
 * every id: the request itself answers -ENOENT for one that does not exist). */
int kvs_admin_domain_has(const kvs_admin *a, const kvs_admin_domain *d,
			 uint32_t ns);
/* kvs_admin_domain_find - the first namespace of @d that holds block @h
 * (what "namespace 0" means for a request of that domain), 0 when none. */
uint32_t kvs_admin_domain_find(const kvs_admin *a, const kvs_admin_domain *d,
			       kvs_hash h);

/*
 * The operator requests, decoded. Each writes its reply payload to @out (@cap
 * bytes) and its length to *len. @conn_ns: the connection's namespace, 0 for
 * a control-only connection; an attached (worker) connection sees only its
 * own namespace (-EPERM for another). Who may send which, and in which
 * namespaces, command.c's command table checks before these are called (a
 * request's namespace outside the peer's domain never reaches them); list
 * shows the namespaces of @dom only.
 * Errors: -ENOENT (no such block or namespace), -EPERM, KVS_E_LIMIT (pins
 * over the share), KVS_E_TOOMANY, -ENOBUFS, -ENOMEM.
 */
/* LIST visits at most KVS_ADMIN_LIST_PAGE records a request (*visited: how
 * many it did): a paged request one page from its cursor, the form without
 * a cursor all of them while there are no more (KVS_E_TOOMANY past that). */
#define KVS_ADMIN_LIST_PAGE 16384u
int kvs_admin_list(kvs_admin *a, uint32_t conn_ns, const kvs_admin_domain *dom,
		   const kvs_wire_list_req *req, uint8_t *out, size_t cap,
		   size_t *len, uint32_t *visited);
int kvs_admin_inspect(kvs_admin *a, uint32_t conn_ns,
		      const kvs_wire_inspect_req *req, uint8_t *out, size_t cap,
		      size_t *len);
int kvs_admin_evict(kvs_admin *a, const kvs_wire_evict_req *req, uint8_t *out,
		    size_t cap, size_t *len);
/* kvs_admin_pin - @pin 1: pin, 0: unpin the cached part of the chain @req in
 * namespace @ns (0: the namespace of its first block). */
int kvs_admin_pin(kvs_admin *a, int pin, uint32_t ns, const kvs_wire_hashes *req,
		  uint8_t *out, size_t cap, size_t *len);

/*
 * kvs_admin_subscribe - send the events of @dom's namespaces to @out from now
 * on, as EVENT messages with @req_id; @wake(@arg) is called after bytes are
 * added (it must only schedule a write). Errors: -ENOMEM.
 * Ownership: the subscription until kvs_admin_unsubscribe() (before @out is
 * freed).
 */
int kvs_admin_subscribe(kvs_admin *a, const kvs_admin_domain *dom,
			struct evbuffer *out, uint64_t req_id,
			void (*wake)(void *arg), void *arg, kvs_admin_sub **sub);
/* kvs_admin_unsubscribe - @sub may be NULL. */
void kvs_admin_unsubscribe(kvs_admin *a, kvs_admin_sub *sub);

/* kvs_admin_publish - send the events collected since the last call. */
void kvs_admin_publish(kvs_admin *a);

#endif /* KVS_ADMIN_H */
