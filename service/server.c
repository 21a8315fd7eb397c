/* server.c - control socket, connections and dispatch (see kvs_server.h). */
#define _GNU_SOURCE
#include "kvs_server.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "kvs_admin.h"
#include "kvs_cache.h"
#include "kvs_cache_admin.h"
#include "kvs_hist.h"
#include "kvs_log.h"
#include "kvs_metrics.h"
#include "kvs_stats.h"
#include "kvs_wire.h"
#include "kvs_wire_admin.h"

#define IN_INITIAL (64u << 10)
#define IN_MAX (KVS_WIRE_HDR_SIZE + KVS_WIRE_MAX_PAYLOAD)
/* Stop reading a client whose replies pile up past this; resume once sent. */
#define OUT_HIGH (1u << 20)
/* Refused peers are kept only until their first message is answered; more
 * than this many at once are closed without an answer. */
#define REFUSING_MAX 64
/* Supplementary groups of a peer looked at by --allow-gid. */
#define PEER_GROUPS_MAX 256
#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59 /* Linux 4.13; older kernels answer ENOPROTOOPT */
#endif

typedef struct conn conn;

struct kvs_server {
	kvs_config cfg;
	struct event_base *base;
	struct event *listen_ev, *sigint_ev, *sigterm_ev, *ssd_ev;
	int listen_fd;
	kvs_cache *cache;
	kvs_admin *admin; /* operator requests and events (admin.c) */
	kvs_counters stats;
	kvs_hist latency[KVS_OP__COUNT]; /* by opcode */
	kvs_metrics *metrics;
	struct timespec started;
	conn *conns; /* doubly linked: served and refusing connections */
	uint32_t nconns;    /* served */
	uint32_t nrefusing; /* waiting for their first message to be refused */
	uint64_t next_id;   /* connection ids, for the log */
	uid_t uid;          /* the daemon's own: always allowed */
	/* Scratch for one reply at a time: the loop handles one request at once. */
	kvs_block *blocks;
	uint8_t *reply;
};

struct conn {
	kvs_server *srv;
	conn *prev, *next;
	int fd;
	struct event *rev, *wev;
	uint8_t *in;
	size_t in_off, in_len, in_cap; /* unread bytes are in[in_off, in_len) */
	struct evbuffer *out;
	int pending_fd;  /* fd to attach to the first byte of out, or -1 */
	int pending_fd2; /* a second one with it (the GPU arena), or -1 */
	int closing;     /* close once out is flushed */
	int reading;     /* rev is armed */
	int waiting;     /* a lookup's or verify's answer is deferred (SSD
			  * reads): no other request is handled until it is
			  * sent */
	kvs_wire_hdr wait_hdr; /* that request's header */
	kvs_owner *owner;
	kvs_admin_sub *sub; /* watching events, or NULL */
	uint32_t ns;
	uint64_t id;
	int refuse;      /* 0, or the status that answers its first message */
	struct event *tev;   /* --client-timeout */
	/* Monotonic ms since which the connection has held an incomplete
	 * message (partial_msgs: messages handled by then), and since which its
	 * replies have been over OUT_HIGH with none of them read; 0: not. */
	uint64_t partial_since, unread_since, timer_since;
	uint64_t msgs, partial_msgs;
};

static void conn_close(conn *c, const char *why);
static int conn_process(conn *c);

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ms(void)
{
	return now_ns() / 1000000u;
}

/* ---- timeouts --------------------------------------------------------- */

static int conn_has_partial(const conn *c);

/* Arm the timer for the older of the two conditions, or disarm it. Idle
 * connections (nothing partial, nothing unread) have no timer.
 * The unread clock runs while the client's replies wait unsent and hold
 * its service back: over OUT_HIGH (reading paused), or with complete
 * requests waiting behind them; any byte the client reads restarts it. */
static void conn_deadline(conn *c)
{
	uint64_t t = (uint64_t)c->srv->cfg.client_timeout * 1000u, since, now, left;
	size_t out = evbuffer_get_length(c->out);
	struct timeval tv;

	if (out == 0 || (out < OUT_HIGH && (c->in_len == c->in_off ||
					    conn_has_partial(c))))
		c->unread_since = 0;
	else if (!c->unread_since)
		c->unread_since = now_ms();
	since = c->partial_since;
	if (c->unread_since && (!since || c->unread_since < since))
		since = c->unread_since;
	if (!t || since == c->timer_since)
		return;
	c->timer_since = since;
	if (!since) {
		evtimer_del(c->tev);
		return;
	}
	now = now_ms();
	left = since + t > now ? since + t - now : 0;
	tv.tv_sec = (time_t)(left / 1000u);
	tv.tv_usec = (suseconds_t)(left % 1000u) * 1000;
	evtimer_add(c->tev, &tv);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	conn *c = arg;
	kvs_server *s = c->srv;
	uint64_t t = (uint64_t)s->cfg.client_timeout * 1000u, now = now_ms();

	if (c->partial_since && now - c->partial_since >= t) {
		s->stats.clients_timeout_partial++;
		kvs_warn("client %" PRIu64 ": %s for %u s (--client-timeout): "
			 "disconnecting", c->id,
			 c->refuse ? "refused and silent"
				   : "a partial message held",
			 s->cfg.client_timeout);
		conn_close(c, NULL);
		return;
	}
	if (c->unread_since && now - c->unread_since >= t) {
		s->stats.clients_timeout_unread++;
		kvs_warn("client %" PRIu64 ": %zu reply bytes unread for %u s "
			 "(--client-timeout): disconnecting", c->id,
			 evbuffer_get_length(c->out), s->cfg.client_timeout);
		conn_close(c, NULL);
		return;
	}
	c->timer_since = 0; /* fired early or the condition moved: re-arm */
	conn_deadline(c);
}

/* ---- output ----------------------------------------------------------- */

static void reply(conn *c, const kvs_wire_hdr *req, int status,
		  const uint8_t *payload, size_t len)
{
	kvs_wire_hdr h = { .magic = KVS_WIRE_MAGIC, .version = KVS_WIRE_VERSION,
			   .opcode = req->opcode, .req_id = req->req_id,
			   .status = status, .len = status ? 0 : (uint32_t)len };
	uint8_t hb[KVS_WIRE_HDR_SIZE];

	kvs_wire_hdr_encode(&h, hb);
	evbuffer_add(c->out, hb, sizeof(hb));
	if (h.len)
		evbuffer_add(c->out, payload, h.len);
}

static void reply_error(conn *c, const kvs_wire_hdr *req, int err)
{
	c->srv->stats.errors_total++;
	kvs_debug("client %" PRIu64 ": %s failed: %s", c->id,
		  kvs_wire_opcode_name(req->opcode), kvs_strerror(err));
	reply(c, req, err, NULL, 0);
}

/* Send what is queued; the pending fd rides on the first byte of it. */
static int conn_flush(conn *c)
{
	int wrote = 0;

	while (evbuffer_get_length(c->out) > 0) {
		ssize_t n;

		if (c->pending_fd >= 0) {
			size_t len = evbuffer_get_length(c->out);
			union { char buf[CMSG_SPACE(2 * sizeof(int))]; struct cmsghdr a; } u;
			int fds[2] = { c->pending_fd, c->pending_fd2 };
			size_t nfd = c->pending_fd2 >= 0 ? 2 : 1;
			struct iovec iov;
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
					     .msg_control = u.buf,
					     .msg_controllen = CMSG_SPACE(nfd * sizeof(int)) };
			struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

			if (len > 65536)
				len = 65536;
			/* CMSG_SPACE pads past CMSG_LEN: send no stray bytes. */
			memset(&u, 0, sizeof(u));
			iov.iov_base = evbuffer_pullup(c->out, (ssize_t)len);
			iov.iov_len = len;
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(nfd * sizeof(int));
			memcpy(CMSG_DATA(cm), fds, nfd * sizeof(int));
			n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n > 0) {
				c->pending_fd = -1;
				c->pending_fd2 = -1;
				evbuffer_drain(c->out, (size_t)n);
			}
		} else {
			n = evbuffer_write(c->out, c->fd);
		}
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			if (errno == EINTR)
				continue;
			return -errno;
		}
		wrote |= n > 0;
	}
	if (wrote && c->unread_since)
		c->unread_since = now_ms(); /* it reads: the clock starts over */
	if (evbuffer_get_length(c->out) > 0) {
		event_add(c->wev, NULL);
		if (evbuffer_get_length(c->out) > c->srv->cfg.max_outbuf) {
			kvs_warn("client %" PRIu64 ": %zu reply bytes unread, "
				 "over the %" PRIu64 " limit: disconnecting",
				 c->id, evbuffer_get_length(c->out),
				 c->srv->cfg.max_outbuf);
			c->srv->stats.clients_timeout_unread++;
			return -ENOBUFS;
		}
	} else {
		event_del(c->wev);
	}
	return 0;
}

/* Reading pauses while replies back up, so a client that does not read
 * cannot make the daemon buffer without bound. */
static void conn_arm(conn *c)
{
	int want = !c->closing && evbuffer_get_length(c->out) < OUT_HIGH;

	if (want && !c->reading)
		event_add(c->rev, NULL);
	else if (!want && c->reading)
		event_del(c->rev);
	c->reading = want;
	conn_deadline(c);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
	conn *c = arg;
	int rc = conn_flush(c);

	if (rc < 0) {
		conn_close(c, NULL);
		return;
	}
	if (evbuffer_get_length(c->out) == 0)
		conn_process(c); /* requests held back behind a full buffer */
	else
		conn_deadline(c);
}

/* ---- stats ----------------------------------------------------------- */

/* Private resident memory (RssAnon): the daemon's own footprint, apart from
 * the arena that it shares with its clients. */
static int64_t rss_anon_bytes(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long long kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssAnon: %lld kB", &kb) == 1)
			break;
	fclose(f);
	return kb * 1024;
}

static void ns_line(const kvs_ns_info *ns, void *arg)
{
	FILE *f = arg;

	fprintf(f, "namespace.%u.blocks %" PRIu64 "\n", ns->id, ns->blocks);
	fprintf(f, "namespace.%u.writing %" PRIu64 "\n", ns->id, ns->writing);
	fprintf(f, "namespace.%u.block_bytes %" PRIu64 "\n", ns->id, ns->block_bytes);
	fprintf(f, "namespace.%u.clients %u\n", ns->id, ns->clients);
}

/* Refresh every gauge before rendering. */
static void stats_refresh(kvs_server *s)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	s->stats.server_uptime_seconds = now.tv_sec - s->started.tv_sec;
	s->stats.server_pid = getpid();
	s->stats.server_rss_anon_bytes = rss_anon_bytes();
	s->stats.server_log_dropped = (int64_t)kvs_log_dropped();
	s->stats.server_metrics_port = s->metrics ? kvs_metrics_port(s->metrics) : 0;
	s->stats.clients_connected = s->nconns; /* served, not refusing */
	kvs_cache_stats_fill(s->cache);
}

static void latency_lines(kvs_server *s, FILE *f)
{
	for (uint32_t op = 1; op < KVS_OP__COUNT; op++) {
		const kvs_hist *hh = &s->latency[op];
		const char *name = kvs_wire_opcode_name(op);

		fprintf(f, "latency.%s_count %" PRIu64 "\n", name, hh->count);
		fprintf(f, "latency.%s_p50_ns %" PRIu64 "\n", name,
			kvs_hist_quantile(hh, 0.50));
		fprintf(f, "latency.%s_p99_ns %" PRIu64 "\n", name,
			kvs_hist_quantile(hh, 0.99));
	}
}

static void ns_prometheus(const kvs_ns_info *ns, void *arg)
{
	FILE *f = arg;
	char model[2 * KVS_NAME_MAX + 1];
	size_t j = 0;

	/* Label values escape backslash, quote and newline. */
	for (const char *p = ns->model; *p && j + 2 < sizeof(model); p++) {
		if (*p == '\\' || *p == '"' || *p == '\n')
			model[j++] = '\\';
		model[j++] = *p == '\n' ? 'n' : *p;
	}
	model[j] = '\0';
	fprintf(f, "kvshare_namespace_blocks{ns=\"%u\",model=\"%s\"} %" PRIu64 "\n",
		ns->id, model, ns->blocks);
	fprintf(f, "kvshare_namespace_block_bytes{ns=\"%u\",model=\"%s\"} %" PRIu64 "\n",
		ns->id, model, ns->block_bytes);
	fprintf(f, "kvshare_namespace_clients{ns=\"%u\",model=\"%s\"} %u\n",
		ns->id, model, ns->clients);
}

static void render_prometheus(FILE *f, void *arg)
{
	kvs_server *s = arg;

	stats_refresh(s);
	kvs_stats_print_prometheus(&s->stats, f);
	fprintf(f, "# HELP kvshare_namespace_blocks committed blocks per namespace\n"
		   "# TYPE kvshare_namespace_blocks gauge\n"
		   "# HELP kvshare_namespace_block_bytes bytes of one block\n"
		   "# TYPE kvshare_namespace_block_bytes gauge\n"
		   "# HELP kvshare_namespace_clients attached connections\n"
		   "# TYPE kvshare_namespace_clients gauge\n");
	kvs_cache_ns_foreach(s->cache, ns_prometheus, f);
	fprintf(f, "# HELP kvshare_request_duration_seconds time to handle a request\n"
		   "# TYPE kvshare_request_duration_seconds histogram\n");
	for (uint32_t op = 1; op < KVS_OP__COUNT; op++) {
		char labels[64];

		snprintf(labels, sizeof(labels), "op=\"%s\"", kvs_wire_opcode_name(op));
		kvs_hist_print_prometheus(f, "kvshare_request_duration_seconds",
					  labels, &s->latency[op]);
	}
}

/* ---- requests --------------------------------------------------------- */

/* A request's payload, decoded by its command's decode (one member each). */
typedef union request {
	kvs_wire_hello hello;
	kvs_wire_hashes hashes; /* lookup, reserve */
	uint64_t lease;         /* commit, abort, release */
	kvs_wire_list_req list;
	kvs_wire_inspect_req inspect;
	kvs_wire_evict_req evict;
	struct {
		uint32_t ns;
		kvs_wire_hashes hashes;
	} pin;                  /* pin, unpin */
	kvs_wire_verify_req verify;
} request;

/* A handler answers its request itself and returns 0, or returns the error
 * that dispatch() answers (-EINPROGRESS: it answers later, for a command
 * that is CMD_DEFERRABLE). */

static int do_hello(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_server *s = c->srv;
	const kvs_wire_hello *hello = &rq->hello;
	kvs_wire_hello_reply r = { 0 };
	uint8_t buf[64];
	int rc;

	if (!(hello->flags & KVS_HELLO_CONTROL)) {
		rc = kvs_cache_attach(s->cache, c->owner, hello, &r.ns_id,
				      &r.block_bytes);
		if (rc < 0)
			return rc;
		if (!c->ns)
			s->stats.clients_attached++;
		c->ns = r.ns_id;
		r.arena_count = 1;
		/* The arena of the client's own trust domain, never another. */
		kvs_cache_owner_arena(s->cache, c->owner, &c->pending_fd,
				      &r.host_arena_bytes, &r.host_arena_id);
		/* The GPU arena goes to workers that asked for it only: a
		 * client that did not gets the reply it always got. */
		if ((hello->flags & KVS_HELLO_GPU) && kvs_cache_gpu_fd(s->cache) >= 0) {
			r.arena_count = 2;
			r.gpu_arena_bytes = kvs_cache_gpu_bytes(s->cache);
			r.gpu_kind = kvs_cache_gpu_kind(s->cache);
			r.gpu_device = kvs_cache_gpu_device(s->cache);
			c->pending_fd2 = kvs_cache_gpu_fd(s->cache);
		}
	}
	rc = kvs_wire_hello_reply_encode(&r, buf, sizeof(buf));
	reply(c, h, 0, buf, (size_t)rc);
	return 0;
}

static void reply_blocks(conn *c, const kvs_wire_hdr *h, uint64_t lease,
			 const kvs_block *blocks, uint32_t count)
{
	kvs_server *s = c->srv;
	int rc = kvs_wire_blocks_encode(lease, blocks, count, s->reply,
					KVS_WIRE_MAX_PAYLOAD);

	reply(c, h, 0, s->reply, (size_t)rc);
}

static int do_lookup(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_server *s = c->srv;
	uint64_t lease;
	int rc = kvs_cache_lookup(s->cache, c->owner, rq->hashes.hashes,
				  rq->hashes.count, &lease, s->blocks);

	/* -EINPROGRESS: blocks are being read back from SSD, and
	 * on_lookup_done() answers. */
	if (rc < 0)
		return rc;
	reply_blocks(c, h, lease, s->blocks, (uint32_t)rc);
	return 0;
}

/* A deferred lookup is answered (kvs_cache_done_fn): send it, then go on
 * with the requests that queued behind it. */
static void on_lookup_done(void *arg, int rc, uint64_t lease,
			   const kvs_block *out)
{
	conn *c = arg;

	c->waiting = 0;
	if (rc < 0)
		reply_error(c, &c->wait_hdr, rc);
	else
		reply_blocks(c, &c->wait_hdr, lease, out, (uint32_t)rc);
	conn_process(c);
}

static int do_reserve(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_server *s = c->srv;
	uint64_t lease;
	int rc = kvs_cache_reserve(s->cache, c->owner, rq->hashes.hashes,
				   rq->hashes.count, &lease, s->blocks);

	if (rc < 0)
		return rc;
	reply_blocks(c, h, lease, s->blocks, rq->hashes.count);
	return 0;
}

/* Commit, abort and release answer a count (blocks published or freed). */
static int reply_count(conn *c, const kvs_wire_hdr *h, int rc)
{
	uint8_t buf[8];

	if (rc < 0)
		return rc;
	kvs_wire_u64_encode((uint64_t)rc, buf, sizeof(buf));
	reply(c, h, 0, buf, sizeof(buf));
	return 0;
}

static int do_commit(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	return reply_count(c, h, kvs_cache_commit(c->srv->cache, c->owner, rq->lease));
}

static int do_abort(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	return reply_count(c, h, kvs_cache_abort(c->srv->cache, c->owner, rq->lease));
}

static int do_release(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	return reply_count(c, h, kvs_cache_release(c->srv->cache, c->owner, rq->lease));
}

static int do_stats(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_server *s = c->srv;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	stats_refresh(s);
	f = open_memstream(&text, &len);
	if (!f)
		return -ENOMEM;
	kvs_stats_print(&s->stats, f);
	latency_lines(s, f);
	kvs_cache_ns_foreach(s->cache, ns_line, f);
	if (fclose(f) != 0 || len > KVS_WIRE_MAX_PAYLOAD) {
		free(text);
		return -ENOMEM;
	}
	reply(c, h, 0, (const uint8_t *)text, len);
	free(text);
	return 0;
}

/* Operator requests: admin.c does the work, these send the answer. */
static int reply_admin(conn *c, const kvs_wire_hdr *h, int rc, size_t len)
{
	if (rc < 0)
		return rc;
	reply(c, h, 0, c->srv->reply, len);
	return 0;
}

static int do_list(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	size_t len = 0;
	int rc = kvs_admin_list(c->srv->admin, c->ns, &rq->list, c->srv->reply,
				KVS_WIRE_MAX_PAYLOAD, &len);

	return reply_admin(c, h, rc, len);
}

static int do_inspect(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	size_t len = 0;
	int rc = kvs_admin_inspect(c->srv->admin, c->ns, &rq->inspect,
				   c->srv->reply, KVS_WIRE_MAX_PAYLOAD, &len);

	return reply_admin(c, h, rc, len);
}

static int do_evict(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	size_t len = 0;
	int rc = kvs_admin_evict(c->srv->admin, &rq->evict, c->srv->reply,
				 KVS_WIRE_MAX_PAYLOAD, &len);

	return reply_admin(c, h, rc, len);
}

static int do_pin(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	size_t len = 0;
	int rc = kvs_admin_pin(c->srv->admin, 1, rq->pin.ns, &rq->pin.hashes,
			       c->srv->reply, KVS_WIRE_MAX_PAYLOAD, &len);

	return reply_admin(c, h, rc, len);
}

static int do_unpin(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	size_t len = 0;
	int rc = kvs_admin_pin(c->srv->admin, 0, rq->pin.ns, &rq->pin.hashes,
			       c->srv->reply, KVS_WIRE_MAX_PAYLOAD, &len);

	return reply_admin(c, h, rc, len);
}

static void conn_wake(void *arg)
{
	conn *c = arg;

	event_add(c->wev, NULL);
}

/* WATCH: the reply (empty) comes first, then EVENT messages with its id. */
static int do_watch(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	int rc = c->sub ? -EALREADY
			: kvs_admin_subscribe(c->srv->admin, c->out, h->req_id,
					      conn_wake, c, &c->sub);

	if (rc < 0)
		return rc;
	reply(c, h, 0, NULL, 0);
	return 0;
}

/* A deferred verify is done (kvs_cache_verify_fn): send it, then go on
 * with the requests that queued behind it. */
static void on_verify_done(void *arg, const kvs_wire_verify_reply *rep,
			   const kvs_wire_verify_fail *fails)
{
	conn *c = arg;
	kvs_server *s = c->srv;
	int rc = kvs_wire_verify_reply_encode(rep, fails, s->reply,
					      KVS_WIRE_MAX_PAYLOAD);

	c->waiting = 0;
	if (rc < 0)
		reply_error(c, &c->wait_hdr, rc);
	else
		reply(c, &c->wait_hdr, 0, s->reply, (size_t)rc);
	conn_process(c);
}

/* VERIFY: read back the SSD tier's blocks; answered when the reads are
 * done (on_verify_done), the connection waiting meanwhile. */
static int do_verify(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_server *s = c->srv;
	kvs_wire_verify_reply rep;
	int rc;

	if (rq->verify.ns > kvs_cache_ns_count(s->cache))
		return -ENOENT;
	rc = kvs_cache_verify(s->cache, c->owner, rq->verify.ns,
			      rq->verify.max_failed, on_verify_done, c, &rep);
	if (rc == 0)
		rc = kvs_wire_verify_reply_encode(&rep, NULL, s->reply,
						  KVS_WIRE_MAX_PAYLOAD);
	if (rc < 0)
		return rc;
	reply(c, h, 0, s->reply, (size_t)rc);
	return 0;
}

/* ---- the command table ------------------------------------------------ */

static int decode_none(const uint8_t *p, size_t n, request *rq)
{
	return n ? KVS_E_PROTO : 0;
}

static int decode_hello(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_hello_decode(p, n, &rq->hello);
}

static int decode_hashes(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_hashes_decode(p, n, &rq->hashes);
}

static int decode_lease(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_u64_decode(p, n, &rq->lease);
}

static int decode_list(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_list_req_decode(p, n, &rq->list);
}

static int decode_inspect(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_inspect_req_decode(p, n, &rq->inspect);
}

static int decode_evict(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_evict_req_decode(p, n, &rq->evict);
}

static int decode_pin(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_pin_req_decode(p, n, &rq->pin.ns, &rq->pin.hashes);
}

static int decode_verify(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_verify_req_decode(p, n, &rq->verify);
}

/* Command flags: checked by dispatch() once the payload decodes (a
 * malformed request is KVS_E_PROTO whoever sends it), in this order. */
#define CMD_OPERATOR 0x1u   /* an attached (worker) connection gets -EPERM */
#define CMD_ATTACHED 0x2u   /* a connection not attached gets
			     * KVS_E_NOTATTACHED (counted) */
#define CMD_DEFERRABLE 0x4u /* may answer later: -EINPROGRESS holds the
			     * connection's other requests until it does */
#define CMD_SENDS_FD 0x8u   /* its reply may carry fds: it waits until the
			     * replies before it are sent */

typedef struct command {
	int (*decode)(const uint8_t *p, size_t n, request *rq);
	int (*handle)(conn *c, const kvs_wire_hdr *h, const request *rq);
	size_t counter; /* offsetof(kvs_counters, its ops_ counter) */
	unsigned flags;
} command;

/* Every request the daemon serves, once, by opcode (names: kvs_wire.h).
 * EVENT goes from the daemon only: from a client it is an unknown opcode. */
#define CMD(op, name, dec, flags)                                              \
	[KVS_OP_##op] = { decode_##dec, do_##name,                            \
			  offsetof(kvs_counters, ops_##name), flags }
static const command commands[KVS_OP__COUNT] = {
	CMD(HELLO, hello, hello, CMD_SENDS_FD),
	CMD(LOOKUP, lookup, hashes, CMD_ATTACHED | CMD_DEFERRABLE),
	CMD(RESERVE, reserve, hashes, CMD_ATTACHED),
	CMD(COMMIT, commit, lease, CMD_ATTACHED),
	CMD(ABORT, abort, lease, CMD_ATTACHED),
	CMD(RELEASE, release, lease, CMD_ATTACHED),
	CMD(STATS, stats, none, 0),
	CMD(LIST, list, list, 0),       /* a worker: its own namespace */
	CMD(INSPECT, inspect, inspect, 0),
	CMD(EVICT, evict, evict, CMD_OPERATOR),
	CMD(PIN, pin, pin, CMD_OPERATOR),
	CMD(UNPIN, unpin, pin, CMD_OPERATOR),
	CMD(WATCH, watch, none, 0),
	CMD(VERIFY, verify, verify, CMD_OPERATOR | CMD_DEFERRABLE), /* it drops blocks */
};
#undef CMD

static const command *command_of(uint32_t opcode)
{
	return opcode < KVS_OP__COUNT && commands[opcode].handle
		       ? &commands[opcode] : NULL;
}

static unsigned command_flags(uint32_t opcode)
{
	const command *cmd = command_of(opcode);

	return cmd ? cmd->flags : 0;
}

static void dispatch(conn *c, const kvs_wire_hdr *h, const uint8_t *p)
{
	kvs_counters *st = &c->srv->stats;
	const command *cmd = command_of(h->opcode);
	uint64_t t0 = now_ns();
	request rq;
	int rc;

	if (!cmd) {
		st->errors_opcode++;
		reply_error(c, h, KVS_E_OPCODE);
		return;
	}
	(*(int64_t *)((char *)st + cmd->counter))++;
	rc = cmd->decode(p, h->len, &rq);
	if (rc < 0) {
		if (rc == KVS_E_TOOMANY)
			st->errors_toomany++;
		else if (rc == KVS_E_PROTO)
			st->errors_proto++;
	} else if ((cmd->flags & CMD_OPERATOR) && c->ns) {
		rc = -EPERM;
	} else if ((cmd->flags & CMD_ATTACHED) && !c->ns) {
		/* No namespace, no blocks nor leases: say so. */
		st->errors_notattached++;
		rc = KVS_E_NOTATTACHED;
	} else {
		rc = cmd->handle(c, h, &rq);
	}
	if (rc == -EINPROGRESS && (cmd->flags & CMD_DEFERRABLE)) {
		c->waiting = 1;
		c->wait_hdr = *h;
	} else if (rc < 0) {
		reply_error(c, h, rc);
	}
	kvs_hist_add(&c->srv->latency[h->opcode], now_ns() - t0);
	kvs_admin_publish(c->srv->admin);
}

/* Whether the input holds the start of a message but not all of it. */
static int conn_has_partial(const conn *c)
{
	size_t avail = c->in_len - c->in_off;
	kvs_wire_hdr h;
	int rc;

	if (avail == 0)
		return 0;
	if (avail < KVS_WIRE_HDR_SIZE)
		return 1;
	rc = kvs_wire_hdr_decode(c->in + c->in_off, avail, KVS_WIRE_MAX_PAYLOAD, &h);
	if (rc == KVS_E_PROTO || rc == KVS_E_TOOBIG)
		return 0; /* the connection is being closed */
	return avail < KVS_WIRE_HDR_SIZE + (size_t)h.len;
}

/* A refused peer's first message, whatever it is, is answered with the
 * refusal, echoing its opcode and req_id (so that libkvshare's HELLO reads
 * it as the answer), and the connection closes once that is sent. */
static void conn_refuse(conn *c, const kvs_wire_hdr *h)
{
	reply(c, h, c->refuse, NULL, 0);
	c->in_off = c->in_len;
	c->closing = 1;
}

/* Handle every complete message in the input buffer. Returns -1 when the
 * connection was closed (c is gone), else 0. */
static int conn_process(conn *c)
{
	kvs_counters *st = &c->srv->stats;
	int stalled;

	do {
		stalled = 0;
		while (!c->closing && !c->waiting &&
		       evbuffer_get_length(c->out) < OUT_HIGH) {
			const uint8_t *p = c->in + c->in_off;
			size_t avail = c->in_len - c->in_off;
			kvs_wire_hdr h;
			int rc = kvs_wire_hdr_decode(p, avail, KVS_WIRE_MAX_PAYLOAD, &h);

			if (rc == -EAGAIN)
				break;
			if (rc == KVS_E_PROTO) {
				/* Without a trusted length there is no next message. */
				st->errors_proto++;
				st->errors_total++;
				kvs_warn("client %" PRIu64 ": bad message magic %08x: "
					 "disconnecting", c->id, h.magic);
				conn_close(c, NULL);
				return -1;
			}
			if (c->refuse) {
				if (rc == KVS_E_TOOBIG ||
				    avail >= KVS_WIRE_HDR_SIZE + (size_t)h.len)
					conn_refuse(c, &h);
				break;
			}
			if (rc == KVS_E_TOOBIG) {
				st->errors_toobig++;
				kvs_warn("client %" PRIu64 ": message of %u bytes over the "
					 "%u limit: disconnecting", c->id, h.len,
					 KVS_WIRE_MAX_PAYLOAD);
				reply_error(c, &h, rc);
				c->closing = 1;
				break;
			}
			if (avail < KVS_WIRE_HDR_SIZE + (size_t)h.len)
				break;
			/* An fd rides on the first byte of its reply: a HELLO
			 * waits until earlier replies are out. */
			if ((command_flags(h.opcode) & CMD_SENDS_FD) &&
			    evbuffer_get_length(c->out) > 0) {
				stalled = 1;
				break;
			}
			if (rc == KVS_E_VERSION) {
				st->errors_version++;
				reply_error(c, &h, rc);
			} else {
				dispatch(c, &h, p + KVS_WIRE_HDR_SIZE);
			}
			c->in_off += KVS_WIRE_HDR_SIZE + (size_t)h.len;
			c->msgs++;
			if (c->pending_fd >= 0) {
				stalled = 1; /* send the fd before more replies queue */
				break;
			}
		}
		if (conn_flush(c) < 0) {
			conn_close(c, NULL);
			return -1;
		}
	} while (stalled && evbuffer_get_length(c->out) == 0);
	if (c->closing && evbuffer_get_length(c->out) == 0) {
		conn_close(c, NULL);
		return -1;
	}
	/* The partial clock starts with each incomplete message; a refused
	 * peer's runs from its accept until it is answered. */
	if (c->refuse) {
		/* runs from the accept */
	} else if (!conn_has_partial(c)) {
		c->partial_since = 0;
	} else if (!c->partial_since || c->partial_msgs != c->msgs) {
		c->partial_since = now_ms();
		c->partial_msgs = c->msgs;
	}
	conn_arm(c);
	return 0;
}

/* Make room to read: compact, and grow up to the size of the message whose
 * header is already in (its length was checked against the limit). */
static int conn_make_room(conn *c)
{
	size_t need = IN_INITIAL, avail;
	kvs_wire_hdr h;

	if (c->in_off > 0) {
		memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
		c->in_len -= c->in_off;
		c->in_off = 0;
	}
	avail = c->in_len;
	if (avail >= KVS_WIRE_HDR_SIZE &&
	    kvs_wire_hdr_decode(c->in, avail, KVS_WIRE_MAX_PAYLOAD, &h) != KVS_E_PROTO &&
	    h.len <= KVS_WIRE_MAX_PAYLOAD)
		need = KVS_WIRE_HDR_SIZE + (size_t)h.len;
	if (need < IN_INITIAL)
		need = IN_INITIAL;
	if (need > IN_MAX)
		need = IN_MAX;
	if (c->in_cap < need) {
		uint8_t *n = realloc(c->in, need);

		if (!n)
			return -ENOMEM;
		c->in = n;
		c->in_cap = need;
	}
	return 0;
}

static void drop_fds(conn *c, struct msghdr *mh)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			close(fd);
		}
		c->srv->stats.errors_proto++;
		kvs_warn("client %" PRIu64 ": sent file descriptors: closed them", c->id);
	}
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	conn *c = arg;
	union { char buf[CMSG_SPACE(8 * sizeof(int))]; struct cmsghdr a; } u;
	struct iovec iov;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (conn_make_room(c) < 0) {
		conn_close(c, "out of memory");
		return;
	}
	iov.iov_base = c->in + c->in_len;
	iov.iov_len = c->in_cap - c->in_len;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return;
		conn_close(c, errno == ECONNRESET ? NULL : strerror(errno));
		return;
	}
	if (mh.msg_controllen > 0)
		drop_fds(c, &mh);
	if (n == 0) {
		if (c->in_len > c->in_off)
			kvs_debug("client %" PRIu64 ": closed with %zu bytes of a "
				  "partial message", c->id, c->in_len - c->in_off);
		conn_close(c, NULL);
		return;
	}
	c->in_len += (size_t)n;
	conn_process(c);
}

/* ---- connections ------------------------------------------------------ */

static void conn_close(conn *c, const char *why)
{
	kvs_server *s = c->srv;

	if (why)
		kvs_info("client %" PRIu64 ": closed: %s", c->id, why);
	else
		kvs_debug("client %" PRIu64 ": closed", c->id);
	kvs_admin_unsubscribe(s->admin, c->sub);
	kvs_cache_owner_free(s->cache, c->owner);
	if (c->ns)
		s->stats.clients_attached--;
	event_free(c->rev);
	event_free(c->wev);
	event_free(c->tev);
	evbuffer_free(c->out);
	close(c->fd);
	free(c->in);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->refuse) {
		s->nrefusing--;
	} else {
		s->nconns--;
		s->stats.clients_disconnected++;
	}
	free(c);
}

/* Whether the peer's credentials pass --allow-uid / --allow-gid. The
 * daemon's own uid always does; with neither list, everyone that can open
 * the socket does (its mode is the gate). */
static int peer_allowed(const kvs_server *s, int fd, const struct ucred *cr)
{
	const kvs_config *cfg = &s->cfg;
	gid_t groups[PEER_GROUPS_MAX];
	socklen_t len = sizeof(groups);

	if (!cfg->n_allow_uid && !cfg->n_allow_gid)
		return 1;
	if (cr->uid == s->uid)
		return 1;
	for (uint32_t i = 0; i < cfg->n_allow_uid; i++)
		if (cfg->allow_uid[i] == (uint32_t)cr->uid)
			return 1;
	for (uint32_t i = 0; i < cfg->n_allow_gid; i++)
		if (cfg->allow_gid[i] == (uint32_t)cr->gid)
			return 1;
	if (!cfg->n_allow_gid ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return 0; /* no supplementary groups known: primary only */
	for (size_t g = 0; g < len / sizeof(gid_t); g++)
		for (uint32_t i = 0; i < cfg->n_allow_gid; i++)
			if (cfg->allow_gid[i] == (uint32_t)groups[g])
				return 1;
	return 0;
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	kvs_server *s = arg;
	struct ucred cr = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	socklen_t crlen = sizeof(cr);
	int refuse = 0;
	conn *c;
	int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0) {
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			kvs_warn("accept: %s", strerror(errno));
		return;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0)
		kvs_warn("SO_PEERCRED: %s", strerror(errno)); /* uid -1: no list has it */
	if (!peer_allowed(s, fd, &cr)) {
		refuse = KVS_E_PERM;
		s->stats.clients_refused_perm++;
		kvs_warn("refusing a client (pid %d uid %u gid %u): not in "
			 "--allow-uid/--allow-gid", (int)cr.pid, (unsigned)cr.uid,
			 (unsigned)cr.gid);
	} else if (s->nconns >= s->cfg.max_clients) {
		refuse = KVS_E_LIMIT;
		s->stats.clients_refused++;
		kvs_warn("refusing a client (pid %d uid %u): %u clients "
			 "connected (--max-clients)", (int)cr.pid,
			 (unsigned)cr.uid, s->nconns);
	}
	if (refuse && s->nrefusing >= REFUSING_MAX) {
		/* A flood of refused peers gets no answer, rather than memory. */
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		goto fail;
	c->srv = s;
	c->fd = fd;
	c->pending_fd = -1;
	c->refuse = refuse;
	c->pending_fd2 = -1;
	c->id = ++s->next_id;
	c->owner = kvs_cache_owner_new(s->cache);
	if (c->owner) {
		kvs_cache_owner_set_done(c->owner, on_lookup_done, c);
		kvs_cache_owner_set_uid(c->owner, (uint32_t)cr.uid);
	}
	c->out = evbuffer_new();
	c->rev = event_new(s->base, fd, EV_READ | EV_PERSIST, on_read, c);
	c->wev = event_new(s->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
	c->tev = evtimer_new(s->base, on_timer, c);
	if (!c->owner || !c->out || !c->rev || !c->wev || !c->tev) {
		kvs_cache_owner_free(s->cache, c->owner);
		if (c->out)
			evbuffer_free(c->out);
		if (c->rev)
			event_free(c->rev);
		if (c->wev)
			event_free(c->wev);
		if (c->tev)
			event_free(c->tev);
		free(c);
		goto fail;
	}
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	if (refuse) {
		s->nrefusing++;
		c->partial_since = now_ms(); /* answered or closed in time */
	} else {
		s->nconns++;
		s->stats.clients_accepted++;
	}
	conn_arm(c);
	kvs_debug("client %" PRIu64 ": connected (pid %d uid %u gid %u)", c->id,
		  (int)cr.pid, (unsigned)cr.uid, (unsigned)cr.gid);
	return;
fail:
	kvs_warn("refusing a client: out of memory");
	close(fd);
}

/* ---- socket and life cycle -------------------------------------------- */

/* Bind the control socket, replacing a stale one but never a live daemon's
 * nor a file that is not a socket. */
static int bind_socket(const char *path, uint32_t mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	char dir[sizeof(sa.sun_path)];
	char *slash;
	int fd, rc;

	/* sa is zeroed: the path stays NUL-terminated (config caps it). */
	memcpy(sa.sun_path, path, strnlen(path, sizeof(sa.sun_path) - 1));
	strcpy(dir, sa.sun_path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		/* A directory made here lets through (x) whoever the socket's
		 * mode lets in; an existing one is left as it is. */
		uint32_t dmode = 0700 | (mode & 0060 ? 0010 : 0) | (mode & 0006 ? 0001 : 0);

		*slash = '\0';
		if (mkdir(dir, dmode) == 0) {
			(void)!chmod(dir, dmode); /* past the umask */
		} else if (errno != EEXIST) {
			rc = -errno;
			kvs_err("cannot create socket directory %s: %s", dir,
				strerror(errno));
			return rc;
		} else if (stat(dir, &st) == 0 &&
			   (((mode & 0060) && !(st.st_mode & 0010)) ||
			    ((mode & 0006) && !(st.st_mode & 0001)))) {
			kvs_warn("--socket-mode %04o lets others in, but the "
				 "directory %s (mode %04o) does not", mode, dir,
				 (unsigned)(st.st_mode & 07777));
		}
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			kvs_err("%s exists and is not a socket: not replacing it", path);
			return KVS_E_CONFIG;
		}
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		close(fd);
		if (rc == 0) {
			kvs_err("another kvshared is already serving %s", path);
			return KVS_E_DAEMON_RUNNING;
		}
		kvs_info("replacing stale socket %s", path);
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chmod(path, (mode_t)mode) < 0 || listen(fd, 128) < 0) {
		rc = -errno;
		kvs_err("cannot listen on %s: %s", path, strerror(errno));
		close(fd);
		return rc;
	}
	return fd;
}

static void on_ssd(evutil_socket_t fd, short what, void *arg)
{
	kvs_server *s = arg;

	kvs_cache_ssd_poll(s->cache);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	kvs_server *s = arg;

	kvs_info("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
	event_base_loopbreak(s->base);
}

int kvs_server_create(const kvs_config *cfg, kvs_server **out)
{
	kvs_cache_config cc = { .host_bytes = cfg->host_bytes,
				.page_bytes = cfg->page_bytes, .policy = cfg->policy,
				.max_leases = cfg->max_leases,
				.max_pinned = cfg->max_pinned_blocks,
				.max_tenants = cfg->tenant_arenas ? cfg->max_tenants : 0,
				.tenant_bytes = kvs_config_tenant_bytes(cfg) };
	kvs_admin_config ac = { .max_pinned_share = cfg->max_pinned_share,
				.watch_buffer = cfg->watch_buffer };
	kvs_server *s = calloc(1, sizeof(*s));
	int rc;

	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->listen_fd = -1;
	s->uid = geteuid();
	clock_gettime(CLOCK_MONOTONIC, &s->started);
	s->blocks = malloc(KVS_MAX_HASHES * sizeof(kvs_block));
	s->reply = malloc(KVS_WIRE_MAX_PAYLOAD);
	s->base = event_base_new();
	if (!s->blocks || !s->reply || !s->base) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = kvs_cache_create(&cc, &s->stats, &s->cache);
	if (rc < 0) {
		kvs_err("cannot create the host tier of %" PRIu64 " bytes: %s",
			cfg->host_bytes, kvs_strerror(rc));
		goto fail;
	}
	if (cfg->ssd_dir[0]) {
		kvs_cache_ssd_config sc = {
			.dir = cfg->ssd_dir, .bytes = cfg->ssd_bytes,
			.segment_bytes = cfg->ssd_segment_bytes,
			.admit_hit = cfg->ssd_admit_hit,
			.write_through = cfg->ssd_write_through,
			.queue_depth = cfg->ssd_queue_depth };

		rc = kvs_cache_ssd_open(s->cache, &sc);
		if (rc < 0)
			goto fail;
		s->ssd_ev = event_new(s->base, kvs_cache_ssd_fd(s->cache),
				      EV_READ | EV_PERSIST, on_ssd, s);
		if (!s->ssd_ev) {
			rc = -ENOMEM;
			goto fail;
		}
		event_add(s->ssd_ev, NULL);
	}
	/* --tenant-arenas uid with --ssd-dir or --gpu N is refused by the
	 * configuration; the GPU tier's auto is off here (shared GPU and SSD
	 * tiers across domains are not built). */
	if (cfg->gpu == KVS_GPU_AUTO && cfg->tenant_arenas)
		kvs_info("GPU tier off: not supported yet with --tenant-arenas uid");
	else if (cfg->gpu != KVS_GPU_OFF) {
		kvs_cache_gpu_config gc = { .device = cfg->gpu, .bytes = cfg->gpu_bytes,
					    .page_bytes = cfg->page_bytes };
		char why[256];

		rc = kvs_cache_gpu_open(s->cache, &gc, why, sizeof(why));
		if (rc < 0 && cfg->gpu >= 0) {
			kvs_err("GPU tier: device %d cannot be used: %s", cfg->gpu, why);
			goto fail;
		}
		if (rc < 0) {
			kvs_info("GPU tier off: %s", why);
		} else {
			kvs_info("GPU tier on: %s device %u, %" PRIu64 " MiB%s",
				 kvs_cache_gpu_kind(s->cache) == 2 ? "fake" : "CUDA",
				 kvs_cache_gpu_device(s->cache),
				 kvs_cache_gpu_bytes(s->cache) >> 20,
				 kvs_cache_gpu_kind(s->cache) == 2
					 ? " (KVS_GPU_FAKE=1: host memory, tests only)" : "");
		}
	}
	rc = kvs_admin_create(&ac, s->cache, &s->stats, &s->admin);
	if (rc < 0)
		goto fail;
	rc = bind_socket(cfg->socket_path, cfg->socket_mode);
	if (rc < 0)
		goto fail;
	s->listen_fd = rc;
	s->listen_ev = event_new(s->base, s->listen_fd, EV_READ | EV_PERSIST,
				 on_accept, s);
	s->sigint_ev = evsignal_new(s->base, SIGINT, on_signal, s);
	s->sigterm_ev = evsignal_new(s->base, SIGTERM, on_signal, s);
	if (!s->listen_ev || !s->sigint_ev || !s->sigterm_ev) {
		rc = -ENOMEM;
		goto fail;
	}
	event_add(s->listen_ev, NULL);
	event_add(s->sigint_ev, NULL);
	event_add(s->sigterm_ev, NULL);
	if (cfg->metrics_addr[0]) {
		rc = kvs_metrics_start(s->base, cfg->metrics_addr, render_prometheus,
				       s, &s->metrics);
		if (rc < 0) {
			kvs_err("cannot serve metrics on %s: %s", cfg->metrics_addr,
				kvs_strerror(rc));
			goto fail;
		}
	}
	*out = s;
	return 0;
fail:
	kvs_server_destroy(s);
	return rc;
}

int kvs_server_run(kvs_server *s)
{
	kvs_info("ready on %s: host tier %" PRIu64 " MiB, page %u KiB, "
		 "eviction %s", s->cfg.socket_path,
		 kvs_cache_arena_bytes(s->cache) >> 20, s->cfg.page_bytes >> 10,
		 s->cfg.policy);
	if (s->cfg.tenant_arenas)
		kvs_info("tenant arenas: one per uid, %" PRIu64 " MiB each, "
			 "at most %u", kvs_config_tenant_bytes(&s->cfg) >> 20,
			 s->cfg.max_tenants);
	kvs_log_flush(1000);
	if (s->cfg.ready_fd >= 0) {
		(void)!write(s->cfg.ready_fd, "READY\n", 6);
		close(s->cfg.ready_fd);
	}
	if (event_base_dispatch(s->base) < 0)
		return -EIO;
	return 0;
}

void kvs_server_destroy(kvs_server *s)
{
	if (!s)
		return;
	while (s->conns)
		conn_close(s->conns, NULL);
	if (s->listen_ev)
		event_free(s->listen_ev);
	if (s->sigint_ev)
		event_free(s->sigint_ev);
	if (s->sigterm_ev)
		event_free(s->sigterm_ev);
	if (s->ssd_ev)
		event_free(s->ssd_ev);
	kvs_metrics_stop(s->metrics);
	if (s->listen_fd >= 0) {
		close(s->listen_fd);
		unlink(s->cfg.socket_path);
	}
	kvs_admin_destroy(s->admin);
	kvs_cache_destroy(s->cache);
	if (s->base)
		event_base_free(s->base);
	free(s->blocks);
	free(s->reply);
	free(s);
}
