/*
 * conn.c - the server's connections: reading whole messages (recvmsg, fds
 * dropped), the reply queue and its fd passing, back pressure and the
 * --client-timeout clocks (see server_int.h).
 */
#define _GNU_SOURCE
#include "server_int.h"

#include "kvs_scm.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "kvs_log.h"

#define IN_INITIAL (64u << 10)
#define IN_MAX (KVS_WIRE_HDR_SIZE + KVS_WIRE_MAX_PAYLOAD)

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

void conn_reply(conn *c, const kvs_wire_hdr *req, int status,
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

void conn_reply_error(conn *c, const kvs_wire_hdr *req, int err)
{
	c->srv->stats.errors_total++;
	kvs_debug("client %" PRIu64 ": %s failed: %s", c->id,
		  kvs_wire_opcode_name(req->opcode), kvs_strerror(err));
	conn_reply(c, req, err, NULL, 0);
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
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

			if (len > 65536)
				len = 65536;
			iov.iov_base = evbuffer_pullup(c->out, (ssize_t)len);
			iov.iov_len = len;
			kvs_scm_rights(&mh, u.buf, fds, nfd);
			n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n > 0) {
				if (c->pending_own2)
					close(c->pending_fd2); /* the client has it */
				c->pending_own2 = 0;
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
	int want = !c->closing && !c->yielded &&
		   evbuffer_get_length(c->out) < OUT_HIGH;

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

/* The partial clock (--client-timeout) starts with each incomplete message;
 * a refused peer's runs from its accept until it is answered. */
static void conn_partial_track(conn *c)
{
	if (c->refuse) {
		/* runs from the accept */
	} else if (!conn_has_partial(c)) {
		c->partial_since = 0;
	} else if (!c->partial_since || c->partial_msgs != c->msgs) {
		c->partial_since = now_ms();
		c->partial_msgs = c->msgs;
	}
}

/* A refused peer's first message, whatever it is, is answered with the
 * refusal, echoing its opcode and req_id (so that libkvshare's HELLO reads
 * it as the answer), and the connection closes once that is sent. */
static void conn_refuse(conn *c, const kvs_wire_hdr *h)
{
	conn_reply(c, h, c->refuse, NULL, 0);
	c->in_off = c->in_len;
	c->closing = 1;
}

/* Without a trusted length there is no next message: close (c is gone). */
static void conn_bad_magic(conn *c, const kvs_wire_hdr *h)
{
	kvs_counters *st = &c->srv->stats;

	st->errors_proto++;
	st->errors_total++;
	kvs_warn("client %" PRIu64 ": bad message magic %08x: disconnecting",
		 c->id, h->magic);
	conn_close(c, NULL);
}

/* A message from a refused peer, or one over the length limit (@rc
 * KVS_E_TOOBIG): answered, and the connection closes once that is sent;
 * @avail: the bytes in from its header on. */
static void conn_not_served(conn *c, const kvs_wire_hdr *h, int rc,
			    size_t avail)
{
	if (c->refuse) {
		if (rc == KVS_E_TOOBIG || avail >= KVS_WIRE_HDR_SIZE + (size_t)h->len)
			conn_refuse(c, h);
		return;
	}
	c->srv->stats.errors_toobig++;
	kvs_warn("client %" PRIu64 ": message of %u bytes over the %u limit: "
		 "disconnecting", c->id, h->len, KVS_WIRE_MAX_PAYLOAD);
	conn_reply_error(c, h, rc);
	c->closing = 1;
}

/* The turn is over with complete requests left: the loop's next turn
 * (after it polls every other connection) goes on with them. Reading
 * pauses meanwhile (conn_arm), so a connection has one turn a turn. */
static void conn_yield(conn *c)
{
	static const struct timeval now = { 0, 0 };

	c->yielded = 1;
	c->srv->stats.server_loop_yields++;
	evtimer_add(c->yev, &now);
}

static void on_yield(evutil_socket_t fd, short what, void *arg)
{
	conn *c = arg;

	c->yielded = 0;
	conn_process(c);
}

/* Handle the complete messages in the input buffer, up to a turn's work
 * (TURN_WORK). Returns -1 when the connection was closed (c is gone),
 * else 0. */
int conn_process(conn *c)
{
	kvs_server *s = c->srv;
	kvs_counters *st = &s->stats;
	uint32_t work = 0;
	int stalled;

	do {
		stalled = 0;
		while (!c->closing && !c->waiting && !c->yielded &&
		       evbuffer_get_length(c->out) < OUT_HIGH) {
			const uint8_t *p = c->in + c->in_off;
			size_t avail = c->in_len - c->in_off;
			kvs_wire_hdr h;
			int rc = kvs_wire_hdr_decode(p, avail, KVS_WIRE_MAX_PAYLOAD, &h);

			if (rc == -EAGAIN)
				break;
			if (rc == KVS_E_PROTO) {
				conn_bad_magic(c, &h);
				return -1;
			}
			if (c->refuse || rc == KVS_E_TOOBIG) {
				conn_not_served(c, &h, rc, avail);
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
			if (work >= TURN_WORK) {
				conn_yield(c);
				break;
			}
			s->req_work = 1 + h.len / TURN_WORK_BYTES;
			if (rc == KVS_E_VERSION) {
				st->errors_version++;
				conn_reply_error(c, &h, rc);
			} else {
				command_dispatch(c, &h, p + KVS_WIRE_HDR_SIZE);
			}
			c->in_off += KVS_WIRE_HDR_SIZE + (size_t)h.len;
			c->msgs++;
			work += s->req_work;
			if (work > (uint64_t)st->server_loop_turn_max_work)
				st->server_loop_turn_max_work = work;
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
	conn_partial_track(c);
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

int conn_drain(conn *c)
{
	c->closing = 1;
	if (!c->waiting && evbuffer_get_length(c->out) == 0) {
		conn_close(c, NULL);
		return -1;
	}
	conn_arm(c);
	return 0;
}

void conn_close(conn *c, const char *why)
{
	kvs_server *s = c->srv;

	if (why)
		kvs_info("client %" PRIu64 ": closed: %s", c->id, why);
	else
		kvs_debug("client %" PRIu64 ": closed", c->id);
	kvs_admin_unsubscribe(s->admin, c->sub);
	kvs_cache_owner_free(s->cache, c->owner);
	kvs_fast_detach(s->fast, c->fast); /* its fast-path pins die with it */
	if (c->pending_own2)
		close(c->pending_fd2); /* never sent */
	if (c->ns)
		s->stats.clients_attached--;
	event_free(c->rev);
	event_free(c->wev);
	event_free(c->tev);
	event_free(c->yev);
	if (c->qev)
		event_free(c->qev);
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
		server_conn_gone(s, c->uid);
		s->stats.clients_disconnected++;
	}
	free(c);
}

/* Whether the peer's credentials pass --allow-uid / --allow-gid. The
 * daemon's own uid always does; with neither list, everyone that can open
 * the socket does (its mode is the gate). */

conn *conn_open(kvs_server *s, int fd, int refuse, uint32_t uid)
{
	conn *c;

	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->srv = s;
	c->fd = fd;
	c->pending_fd = -1;
	c->refuse = refuse;
	c->pending_fd2 = -1;
	c->id = ++s->next_id;
	c->uid = uid;
	c->owner = kvs_cache_owner_new(s->cache);
	if (c->owner) {
		kvs_cache_owner_set_done(c->owner, command_lookup_done, c);
		kvs_cache_owner_set_uid(c->owner, uid);
		kvs_cache_owner_set_operator(c->owner, command_operator(c));
	}
	c->out = evbuffer_new();
	c->rev = event_new(s->base, fd, EV_READ | EV_PERSIST, on_read, c);
	c->wev = event_new(s->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
	c->tev = evtimer_new(s->base, on_timer, c);
	c->yev = evtimer_new(s->base, on_yield, c);
	if (!c->owner || !c->out || !c->rev || !c->wev || !c->tev || !c->yev) {
		kvs_cache_owner_free(s->cache, c->owner);
		if (c->out)
			evbuffer_free(c->out);
		if (c->rev)
			event_free(c->rev);
		if (c->wev)
			event_free(c->wev);
		if (c->tev)
			event_free(c->tev);
		if (c->yev)
			event_free(c->yev);
		free(c);
		return NULL;
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
	return c;
}
