/* metrics.c - GET /metrics over plain HTTP/1.1 (see kvs_metrics.h). */
#define _GNU_SOURCE
#include "kvs_metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "kvs_log.h"
#include "kvs_types.h" /* KVS_E_CONFIG */

/* An accept() that finds no fd pauses the listener this long: libevent's
 * listener is level-triggered, and without an error callback it logs and
 * retries at once, at 100% CPU, for as long as the scrape waits. */
#define PAUSE_MS 200
/* A request line and headers past this are refused (431) and closed: a
 * scraper sends a few hundred bytes, and the input buffer stops here. */
#define MAX_HEADER_BYTES 8192

/* One request a connection: its reply, then the close (Connection:
 * close). Each connection has a deadline from its accept, request and
 * reply together, so a slow or silent peer holds its fd at most that long,
 * and at most max_conns are open: the next are closed at accept. */
struct kvs_metrics {
	struct event_base *base;
	struct evconnlistener *listener;
	kvs_metrics_render_fn fn;
	void *arg;
	const char *post_path; /* the one POST served, NULL: none */
	kvs_metrics_post_fn post;
	void *post_arg;
	int port;
	uint32_t max_conns, nconns;
	struct timeval timeout;
	uint64_t refused; /* connections closed at accept: max_conns open */
	uint64_t timed_out;
	struct mconn *conns; /* open ones, freed at stop */
};

typedef struct mconn {
	kvs_metrics *m;
	struct bufferevent *bev;
	struct event *deadline;
	size_t body; /* a POST's Content-Length, once its headers are read */
	struct mconn *prev, *next; /* m->conns */
} mconn;

static void mconn_free(mconn *mc)
{
	kvs_metrics *m = mc->m;

	if (mc->prev)
		mc->prev->next = mc->next;
	else
		m->conns = mc->next;
	if (mc->next)
		mc->next->prev = mc->prev;
	m->nconns--;
	event_free(mc->deadline);
	bufferevent_free(mc->bev); /* closes the fd */
	free(mc);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	evconnlistener_enable(arg);
}

/* The pause is a one-shot event on the listener itself (the loop ends
 * before the listener is freed, and event_base_free() drops a pending
 * one). The control socket's listener logs the episode; this one says it
 * at debug level only. */
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

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	mconn *mc = arg;

	mc->m->timed_out++;
	mconn_free(mc);
}

static void on_written(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		mconn_free(arg);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	mconn_free(arg); /* EOF or an error: the request, if any, is over */
}

/* Queue the reply and close once it is written (or at the deadline). */
static void reply(mconn *mc, const char *status, const char *type,
		  const char *body, size_t len)
{
	struct evbuffer *out = bufferevent_get_output(mc->bev);

	bufferevent_disable(mc->bev, EV_READ);
	bufferevent_setcb(mc->bev, NULL, on_written, on_event, mc);
	evbuffer_add_printf(out, "HTTP/1.1 %s\r\nContent-Type: %s\r\n"
			    "Content-Length: %zu\r\nConnection: close\r\n\r\n",
			    status, type, len);
	evbuffer_add(out, body, len);
}

static void reply_text(mconn *mc, const char *status, const char *text)
{
	reply(mc, status, "text/plain", text, strlen(text));
}

/* Whether the request line's URI @uri (@n bytes) is @path. */
static int uri_is(const char *uri, size_t n, const char *path)
{
	return path && n == strlen(path) && memcmp(uri, path, n) == 0;
}

static void reply_json_error(mconn *mc, const char *status, const char *msg)
{
	char body[160];
	int n = snprintf(body, sizeof(body), "{\"error\":\"%s\"}\n", msg);

	reply(mc, status, "application/json", body, (size_t)n);
}

static const char *status_line(int code)
{
	switch (code) {
	case 200: return "200 OK";
	case 400: return "400 Bad Request";
	case 413: return "413 Content Too Large";
	default: return "500 Internal Server Error";
	}
}

/* A POST's body is all in: answer it from the callback. */
static void serve_post(mconn *mc)
{
	struct evbuffer *in = bufferevent_get_input(mc->bev);
	const char *body = (const char *)evbuffer_pullup(in, (ssize_t)mc->body);
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	int code;

	f = open_memstream(&text, &len);
	if (!f || (!body && mc->body)) {
		if (f)
			fclose(f);
		free(text);
		reply_json_error(mc, "500 Internal Server Error", "out of memory");
		return;
	}
	code = mc->m->post(mc->m->post_arg, body ? body : "", mc->body, f);
	fclose(f);
	reply(mc, status_line(code), "application/json", text, len);
	free(text);
}

/* The headers of a POST to the served path: its Content-Length (411
 * without one, 413 past KVS_METRICS_BODY_MAX), then wait for the body;
 * "Expect: 100-continue" (curl's, for bodies over 1 KiB) is answered. */
static void start_post(mconn *mc, struct evbuffer *in)
{
	long long cl = -1;
	int expect = 0;
	char *h, *end;

	while ((h = evbuffer_readln(in, NULL, EVBUFFER_EOL_CRLF)) && *h) {
		if (strncasecmp(h, "Content-Length:", 15) == 0) {
			const char *v = h + 15 + strspn(h + 15, " \t");

			errno = 0;
			cl = strtoll(v, &end, 10);
			if (*v < '0' || *v > '9' || *end || errno)
				cl = -2;
		} else if (strncasecmp(h, "Transfer-Encoding:", 18) == 0) {
			cl = -2;
		} else if (strncasecmp(h, "Expect:", 7) == 0) {
			expect = strcasestr(h + 7, "100-continue") != NULL;
		}
		free(h);
	}
	free(h);
	if (cl < 0) {
		reply_json_error(mc, "411 Length Required",
				 "a POST needs a Content-Length, a decimal number "
				 "(a chunked body is not read)");
		return;
	}
	if (cl > KVS_METRICS_BODY_MAX) {
		reply_json_error(mc, "413 Content Too Large",
				 "the body is over 1 MiB");
		return;
	}
	mc->body = (size_t)cl;
	if (expect && evbuffer_get_length(in) < mc->body)
		evbuffer_add_printf(bufferevent_get_output(mc->bev),
				    "HTTP/1.1 100 Continue\r\n\r\n");
	/* The input buffer now stops at the body's end. */
	bufferevent_setwatermark(mc->bev, EV_READ, 0, mc->body ? mc->body : 1);
	if (evbuffer_get_length(in) >= mc->body)
		serve_post(mc);
}

/* The request line: "GET /metrics[?...] HTTP/1.x", or a POST to the path
 * set with kvs_metrics_set_post(). */
static void serve(mconn *mc, const char *line, struct evbuffer *in)
{
	int get = strncmp(line, "GET ", 4) == 0;
	int post = strncmp(line, "POST ", 5) == 0;
	const char *uri = line + (post ? 5 : 4);
	size_t n = strcspn(uri, " ");
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	if (mc->m->post && uri_is(uri, n, mc->m->post_path)) {
		if (post)
			start_post(mc, in);
		else
			reply_json_error(mc, "405 Method Not Allowed",
					 "only POST is served here");
		return;
	}
	if (!get) {
		reply_text(mc, "405 Method Not Allowed", "only GET /metrics is served\n");
		return;
	}
	if (!((n == 8 && memcmp(uri, "/metrics", 8) == 0) ||
	      (n > 8 && memcmp(uri, "/metrics?", 9) == 0))) {
		reply_text(mc, "404 Not Found", "only GET /metrics is served\n");
		return;
	}
	f = open_memstream(&text, &len);
	if (!f) {
		reply_text(mc, "500 Internal Server Error", "out of memory\n");
		return;
	}
	mc->m->fn(f, mc->m->arg);
	fclose(f);
	reply(mc, "200 OK", "text/plain; version=0.0.4; charset=utf-8", text, len);
	free(text);
}

static void on_read(struct bufferevent *bev, void *arg)
{
	mconn *mc = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr end;
	char *line;

	if (mc->body) { /* a POST's headers are read: its body */
		if (evbuffer_get_length(in) >= mc->body)
			serve_post(mc);
		return;
	}
	end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	if (end.pos < 0) {
		if (evbuffer_get_length(in) >= MAX_HEADER_BYTES)
			reply_text(mc, "431 Request Header Fields Too Large",
				   "headers over 8 KiB\n");
		return;
	}
	line = evbuffer_readln(in, NULL, EVBUFFER_EOL_CRLF);
	if (!line) {
		reply_text(mc, "500 Internal Server Error", "out of memory\n");
		return;
	}
	serve(mc, line, in);
	free(line);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
		      struct sockaddr *sa, int salen, void *arg)
{
	kvs_metrics *m = arg;
	mconn *mc;

	if (m->nconns >= m->max_conns) {
		m->refused++;
		evutil_closesocket(fd);
		return;
	}
	mc = calloc(1, sizeof(*mc));
	if (mc) {
		mc->m = m;
		mc->bev = bufferevent_socket_new(m->base, fd, BEV_OPT_CLOSE_ON_FREE);
		mc->deadline = evtimer_new(m->base, on_deadline, mc);
	}
	if (!mc || !mc->bev || !mc->deadline) {
		if (mc && mc->bev)
			bufferevent_free(mc->bev);
		else
			evutil_closesocket(fd);
		if (mc && mc->deadline)
			event_free(mc->deadline);
		free(mc);
		return;
	}
	m->nconns++;
	mc->next = m->conns;
	if (m->conns)
		m->conns->prev = mc;
	m->conns = mc;
	bufferevent_setcb(mc->bev, on_read, NULL, on_event, mc);
	/* The input buffer stops growing at the header cap. */
	bufferevent_setwatermark(mc->bev, EV_READ, 0, MAX_HEADER_BYTES);
	bufferevent_enable(mc->bev, EV_READ);
	evtimer_add(mc->deadline, &m->timeout);
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

/* Bind HOST:PORT with our accept callback: every connection is counted. */
static int metrics_listen(kvs_metrics *m, const char *host, int port)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct evutil_addrinfo hints = { .ai_family = AF_UNSPEC,
					 .ai_socktype = SOCK_STREAM,
					 .ai_flags = EVUTIL_AI_PASSIVE |
						     EVUTIL_AI_NUMERICSERV };
	struct evutil_addrinfo *ai = NULL;
	char portstr[8];

	snprintf(portstr, sizeof(portstr), "%d", port);
	if (evutil_getaddrinfo(host, portstr, &hints, &ai) != 0 || !ai)
		return -EADDRNOTAVAIL;
	m->listener = evconnlistener_new_bind(
		m->base, on_accept, m,
		LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
		128, ai->ai_addr, (int)ai->ai_addrlen);
	evutil_freeaddrinfo(ai);
	if (!m->listener)
		return errno ? -errno : -EADDRNOTAVAIL;
	evconnlistener_set_error_cb(m->listener, on_accept_error);
	m->port = port;
	if (getsockname(evconnlistener_get_fd(m->listener),
			(struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			m->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else if (ss.ss_family == AF_INET6)
			m->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return 0;
}

int kvs_metrics_start(struct event_base *base, const char *addr,
		      const kvs_metrics_limits *lim, kvs_metrics_render_fn fn,
		      void *arg, kvs_metrics **out)
{
	char host[256];
	int port, rc;
	kvs_metrics *m;

	rc = parse_addr(addr, host, sizeof(host), &port);
	if (rc < 0)
		return rc;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->base = base;
	m->fn = fn;
	m->arg = arg;
	m->max_conns = lim->max_conns ? lim->max_conns : 1;
	m->timeout.tv_sec = lim->timeout_s ? lim->timeout_s : 1;
	rc = metrics_listen(m, host, port);
	if (rc < 0) {
		free(m);
		return rc;
	}
	kvs_info("metrics on http://%s:%d/metrics (at most %u connections, "
		 "%u s each)", host, m->port, m->max_conns,
		 (unsigned)m->timeout.tv_sec);
	*out = m;
	return 0;
}

void kvs_metrics_set_post(kvs_metrics *m, const char *path,
			  kvs_metrics_post_fn fn, void *arg)
{
	m->post_path = path;
	m->post = fn;
	m->post_arg = arg;
}

int kvs_metrics_port(const kvs_metrics *m) { return m->port; }

void kvs_metrics_counts(const kvs_metrics *m, uint64_t *open,
			uint64_t *refused, uint64_t *timed_out)
{
	*open = m->nconns;
	*refused = m->refused;
	*timed_out = m->timed_out;
}

void kvs_metrics_stop(kvs_metrics *m)
{
	if (!m)
		return;
	while (m->conns)
		mconn_free(m->conns);
	evconnlistener_free(m->listener);
	free(m);
}
