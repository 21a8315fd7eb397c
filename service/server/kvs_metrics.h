/*
 * kvs_metrics.h - the Prometheus endpoint: GET /metrics over HTTP/1.1 on the
 * daemon's loop (libevent bufferevents), off unless --metrics-addr is given.
 * Bounded for any peer that can connect: request line and headers at most
 * 8 KiB (431 past it), one request a connection (Connection: close), a
 * deadline per connection from its accept, and at most max_conns open (the
 * next are closed at accept), which the server keeps out of the clients'
 * fd budget.
 *
 * The module knows HTTP only; what /metrics says comes from the render
 * callback (the server renders every counter from kvs_stats.h's one list),
 * and what a POST to the one path set with kvs_metrics_set_post() answers
 * from its callback (the prefix query). A POST needs a Content-Length of
 * at most KVS_METRICS_BODY_MAX (411 without one, 413 past it); its body
 * must arrive within the connection's deadline.
 *
 * Thread: the loop thread.
 */
#ifndef KVS_METRICS_H
#define KVS_METRICS_H

#include <stdint.h>
#include <stdio.h>

struct event_base;
typedef struct kvs_metrics kvs_metrics;

typedef struct kvs_metrics_limits {
	uint32_t max_conns; /* open at once (--metrics-max-connections) */
	uint32_t timeout_s; /* a connection's life (--metrics-timeout) */
} kvs_metrics_limits;

/* Writes the whole text exposition into @f. */
typedef void (*kvs_metrics_render_fn)(FILE *f, void *arg);

/*
 * kvs_metrics_start - listen on @addr ("HOST:PORT", or "PORT" for
 * 127.0.0.1:PORT; port 0 picks a free one) and serve /metrics from @fn.
 * Errors: KVS_E_CONFIG (bad address), -EADDRINUSE and other -errno, -ENOMEM.
 * Ownership: *out until kvs_metrics_stop().
 */
int kvs_metrics_start(struct event_base *base, const char *addr,
		      const kvs_metrics_limits *lim, kvs_metrics_render_fn fn,
		      void *arg, kvs_metrics **out);

/* A POST's body: at most this many bytes. */
#define KVS_METRICS_BODY_MAX (1u << 20)

/* Answers a POST: @body[0..len) (not NUL-terminated) in, the reply's JSON
 * written into @f. Returns the HTTP status (200, 400, ...). */
typedef int (*kvs_metrics_post_fn)(void *arg, const char *body, size_t len,
				   FILE *f);

/* kvs_metrics_set_post - serve POST @path (a string that outlives @m)
 * from @fn(@arg). */
void kvs_metrics_set_post(kvs_metrics *m, const char *path,
			  kvs_metrics_post_fn fn, void *arg);

/* kvs_metrics_port - the port actually bound (useful with port 0). */
int kvs_metrics_port(const kvs_metrics *m);

/* kvs_metrics_counts - connections open now, closed at accept (the cap)
 * and closed by their deadline, since start. */
void kvs_metrics_counts(const kvs_metrics *m, uint64_t *open,
			uint64_t *refused, uint64_t *timed_out);

/* kvs_metrics_stop - close the listener and every connection still open. */
void kvs_metrics_stop(kvs_metrics *m);

#endif /* KVS_METRICS_H */
