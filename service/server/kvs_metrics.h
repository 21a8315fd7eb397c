/*
 * kvs_metrics.h - the Prometheus endpoint: GET /metrics over HTTP (libevent's
 * evhttp) on the daemon's loop, off unless --metrics-addr is given.
 *
 * The module knows HTTP only; what /metrics says comes from the render
 * callback (the server renders every counter from kvs_stats.h's one list).
 *
 * Thread: the loop thread.
 */
#ifndef KVS_METRICS_H
#define KVS_METRICS_H

#include <stdio.h>

struct event_base;
typedef struct kvs_metrics kvs_metrics;

/* Writes the whole text exposition into @f. */
typedef void (*kvs_metrics_render_fn)(FILE *f, void *arg);

/*
 * kvs_metrics_start - listen on @addr ("HOST:PORT", or "PORT" for
 * 127.0.0.1:PORT; port 0 picks a free one) and serve /metrics from @fn.
 * Errors: KVS_E_CONFIG (bad address), -EADDRINUSE and other -errno, -ENOMEM.
 * Ownership: *out until kvs_metrics_stop().
 */
int kvs_metrics_start(struct event_base *base, const char *addr,
		      kvs_metrics_render_fn fn, void *arg, kvs_metrics **out);

/* kvs_metrics_port - the port actually bound (useful with port 0). */
int kvs_metrics_port(const kvs_metrics *m);

void kvs_metrics_stop(kvs_metrics *m);

#endif /* KVS_METRICS_H */
