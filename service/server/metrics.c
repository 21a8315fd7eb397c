/* metrics.c - GET /metrics over evhttp (see kvs_metrics.h). */
#define _GNU_SOURCE
#include "kvs_metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "kvs_log.h"
#include "kvs_types.h" /* KVS_E_CONFIG */

/* An accept() that finds no fd pauses the listener this long: libevent's
 * listener is level-triggered, and without an error callback it logs and
 * retries at once, at 100% CPU, for as long as the scrape waits. */
#define PAUSE_MS 200

struct kvs_metrics {
	struct evhttp *http;
	struct evhttp_bound_socket *sock;
	kvs_metrics_render_fn fn;
	void *arg;
	int port;
};

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	evconnlistener_enable(arg);
}

/* The callback's argument is evhttp's, not ours: the pause is a one-shot
 * event on the listener itself (the loop ends before the listener is
 * freed, and event_base_free() drops a pending one). The control socket's
 * listener logs the episode; this one says it at debug level only. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
	struct timeval tv = { 0, PAUSE_MS * 1000 };

	kvs_debug("metrics: accept: %s: pausing %d ms",
		  strerror(EVUTIL_SOCKET_ERROR()), PAUSE_MS);
	evconnlistener_disable(l);
	if (event_base_once(evconnlistener_get_base(l), -1, EV_TIMEOUT,
			    on_resume, l, &tv) < 0)
		evconnlistener_enable(l); /* no memory for the pause: retry */
}

static void on_request(struct evhttp_request *req, void *arg)
{
	kvs_metrics *m = arg;
	const char *uri = evhttp_request_get_uri(req);
	struct evbuffer *body;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET ||
	    !uri || (strcmp(uri, "/metrics") != 0 && strncmp(uri, "/metrics?", 9) != 0)) {
		evhttp_send_error(req, HTTP_NOTFOUND, "only GET /metrics is served");
		return;
	}
	f = open_memstream(&text, &len);
	body = evbuffer_new();
	if (!f || !body) {
		if (f)
			fclose(f);
		free(text);
		if (body)
			evbuffer_free(body);
		evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
		return;
	}
	m->fn(f, m->arg);
	fclose(f);
	evbuffer_add(body, text, len);
	free(text);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  "text/plain; version=0.0.4; charset=utf-8");
	evhttp_send_reply(req, HTTP_OK, "OK", body);
	evbuffer_free(body);
}

static int parse_addr(const char *addr, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(addr, ':');
	char *end;
	long p;

	if (colon) {
		size_t n = (size_t)(colon - addr);

		if (n == 0 || n >= hostlen)
			return KVS_E_CONFIG;
		memcpy(host, addr, n);
		host[n] = '\0';
		addr = colon + 1;
	} else {
		snprintf(host, hostlen, "127.0.0.1");
	}
	p = strtol(addr, &end, 10);
	if (!*addr || *end || p < 0 || p > 65535)
		return KVS_E_CONFIG;
	*port = (int)p;
	return 0;
}

int kvs_metrics_start(struct event_base *base, const char *addr,
		      kvs_metrics_render_fn fn, void *arg, kvs_metrics **out)
{
	char host[256];
	int port, rc;
	kvs_metrics *m;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	rc = parse_addr(addr, host, sizeof(host), &port);
	if (rc < 0)
		return rc;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->fn = fn;
	m->arg = arg;
	m->http = evhttp_new(base);
	if (!m->http) {
		free(m);
		return -ENOMEM;
	}
	evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET);
	evhttp_set_gencb(m->http, on_request, m);
	m->sock = evhttp_bind_socket_with_handle(m->http, host, (ev_uint16_t)port);
	if (!m->sock) {
		rc = errno ? -errno : -EADDRNOTAVAIL;
		evhttp_free(m->http);
		free(m);
		return rc;
	}
	evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(m->sock),
				    on_accept_error);
	m->port = port;
	if (getsockname(evhttp_bound_socket_get_fd(m->sock), (struct sockaddr *)&ss,
			&sl) == 0) {
		if (ss.ss_family == AF_INET)
			m->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else if (ss.ss_family == AF_INET6)
			m->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	kvs_info("metrics on http://%s:%d/metrics", host, m->port);
	*out = m;
	return 0;
}

int kvs_metrics_port(const kvs_metrics *m) { return m->port; }

void kvs_metrics_stop(kvs_metrics *m)
{
	if (!m)
		return;
	evhttp_free(m->http);
	free(m);
}
