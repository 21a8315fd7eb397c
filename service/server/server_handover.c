/*
 * server_handover.c - handing the pool and the socket to the next daemon:
 * the old daemon's side of a take-over (a HANDOVER request: stop
 * accepting, drain, send the named fds and the listening socket, exit on
 * the successor's acknowledgement), the successor's side (--take-over),
 * and systemd's fd store (READY=1 and FDSTORE=1 at start, the fds back
 * from $LISTEN_FDS). What the fds hold is kvs_persist.h's.
 *
 * The message (docs/operations.md, "Upgrading without losing the pool"):
 * the successor sends HANDOVER with {u32 format, u32 flags 0}; the old
 * daemon answers, once drained, with {u32 format, u32 n, n names of
 * HO_NAME bytes} and the n fds by SCM_RIGHTS in that order; the successor
 * sends HANDOVER {format, ACK} and the old daemon exits. A successor that
 * reads another format is refused before anything is touched. Once the
 * fds are out the old daemon never serves again, ACK or not (the
 * successor may hold them), and the successor adopts them only once the
 * old process has exited (a pidfd of the answer's sender), else starts
 * cold: never two daemons on one pool.
 */
#define _GNU_SOURCE
#include "server_int.h"
#include "kvs_scm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvs_le.h"

#define HO_NAME 32            /* a name's bytes in the answer, NUL-padded */
#define HO_REQ_LEN 8          /* format, flags */
#define HO_MSG_MAX (KVS_WIRE_HDR_SIZE + 8 + KVS_SD_FDS_MAX * HO_NAME)
#define DRAIN_MS 2000         /* connections get this long to be answered */
#define DRAIN_POLL_MS 5
#define ACK_MS 10000          /* the successor's acknowledgement */
#define ANSWER_MS 30000       /* the old daemon's answer, drain included */
#define EXIT_WAIT_MS 5000     /* the old daemon's exit, after the ACK */

struct handover {
	int link;          /* the successor's connection (ours, a dup) */
	uint64_t req_id;
	uint64_t t0, deadline;
	int draining;
	struct event *tick; /* the drain's poll */
	struct event *ack;  /* link readable, or ACK_MS passed */
};

/* ---- the message -------------------------------------------------------- */

static size_t msg_head(uint8_t *buf, uint32_t len, int32_t status, uint64_t id)
{
	kvs_wire_hdr h = { .magic = KVS_WIRE_MAGIC, .version = KVS_WIRE_VERSION,
			   .opcode = KVS_OP_HANDOVER, .len = len,
			   .status = status, .req_id = id };

	kvs_wire_hdr_encode(&h, buf);
	return KVS_WIRE_HDR_SIZE;
}

/* Send @n bytes of @buf with @nfds fds on the first of them. */
static int send_fds(int fd, const uint8_t *buf, size_t n, const int *fds,
		    uint32_t nfds)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * KVS_SD_FDS_MAX)];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = n };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t w;

	if (nfds)
		kvs_scm_rights(&mh, u.b, fds, (size_t)nfds);
	do
		w = sendmsg(fd, &mh, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	if (w < 0)
		return -errno;
	return (size_t)w == n ? 0 : -EMSGSIZE; /* a small message, all or none */
}

/* ---- the old daemon ------------------------------------------------------ */

int server_handover_free(kvs_server *s)
{
	struct handover *ho = s->ho;
	int link;

	if (!ho)
		return -1;
	if (ho->tick)
		event_free(ho->tick);
	if (ho->ack)
		event_free(ho->ack);
	link = ho->link;
	free(ho);
	s->ho = NULL;
	return link;
}

/* The hand-over failed after the drain: the table is intact, the clients
 * reconnect as after a restart, and the listener takes them again. */
static void handover_resume(kvs_server *s, const char *why)
{
	int link;

	kvs_warn("hand-over failed: %s: serving again", why);
	link = server_handover_free(s);
	if (link >= 0)
		close(link);
	event_add(s->listen_ev, NULL);
}

/* The fds went out and no ACK came: the successor may hold them and serve
 * the pool (its ACK lost, or late), so this daemon never serves it again:
 * it exits as after an ACK, leaving the socket's path. */
static void handover_abandon(kvs_server *s, const char *why)
{
	kvs_err("hand-over: %s after the fds went out: exiting without serving "
		"again (the successor may hold the pool)", why);
	s->handed_over = 1;
	event_base_loopbreak(s->base);
}

static void on_ack(evutil_socket_t fd, short what, void *arg)
{
	kvs_server *s = arg;
	struct handover *ho = s->ho;
	uint8_t buf[KVS_WIRE_HDR_SIZE + HO_REQ_LEN];
	kvs_wire_hdr h;
	ssize_t r;

	if (what & EV_TIMEOUT) {
		handover_abandon(s, "the successor did not acknowledge the fds");
		return;
	}
	r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_WAITALL);
	if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
		event_add(ho->ack, NULL); /* the rest of it later: no new timeout */
		return;
	}
	if (r != (ssize_t)sizeof(buf) ||
	    kvs_wire_hdr_decode(buf, (size_t)r, HO_REQ_LEN, &h) < 0 ||
	    h.opcode != KVS_OP_HANDOVER || h.len != HO_REQ_LEN ||
	    get32(buf + KVS_WIRE_HDR_SIZE) != KVS_HANDOVER_VERSION ||
	    get32(buf + KVS_WIRE_HDR_SIZE + 4) != KVS_HANDOVER_ACK) {
		handover_abandon(s, r == 0 ? "the successor closed the connection"
					   : "the successor's acknowledgement is malformed");
		return;
	}
	kvs_info("handed over in %" PRIu64 " ms: the successor serves %s; exiting",
		 now_ms() - ho->t0, s->cfg.socket_path);
	s->handed_over = 1;
	event_base_loopbreak(s->base);
}

/* Every connection is closed: the fds and the listener go to the
 * successor, who acknowledges them. */
static void handover_send(kvs_server *s)
{
	struct handover *ho = s->ho;
	kvs_named_fd fds[KVS_SD_FDS_MAX];
	int raw[KVS_SD_FDS_MAX];
	uint8_t msg[HO_MSG_MAX];
	struct timeval tv = { ACK_MS / 1000, (ACK_MS % 1000) * 1000 };
	uint32_t n, len;
	int rc = kvs_persist_leave(s->cache);

	if (rc == 0)
		rc = kvs_persist_fds(s->cache, fds, KVS_SD_FDS_MAX - 1);
	if (rc < 0) {
		kvs_warn("hand-over: the pool's fds: %s", kvs_strerror(rc));
		rc = 0; /* the socket alone: the successor starts cold */
	}
	n = (uint32_t)rc;
	fds[n].fd = s->listen_fd;
	snprintf(fds[n++].name, sizeof(fds[0].name), "listen");
	len = 8 + n * HO_NAME;
	memset(msg, 0, sizeof(msg));
	msg_head(msg, len, 0, ho->req_id);
	put32(msg + KVS_WIRE_HDR_SIZE, KVS_HANDOVER_VERSION);
	put32(msg + KVS_WIRE_HDR_SIZE + 4, n);
	for (uint32_t i = 0; i < n; i++) {
		memcpy(msg + KVS_WIRE_HDR_SIZE + 8 + i * HO_NAME, fds[i].name,
		       strlen(fds[i].name));
		raw[i] = fds[i].fd;
	}
	rc = send_fds(ho->link, msg, KVS_WIRE_HDR_SIZE + len, raw, n);
	if (rc == -EMSGSIZE) { /* a part went, the fds with it */
		handover_abandon(s, "the answer went out in part");
		return;
	}
	if (rc < 0) {
		handover_resume(s, strerror(-rc));
		return;
	}
	kvs_info("hand-over: %u fds sent after %" PRIu64 " ms", n, now_ms() - ho->t0);
	ho->ack = event_new(s->base, ho->link, EV_READ, on_ack, s);
	if (!ho->ack) {
		handover_abandon(s, "out of memory");
		return;
	}
	event_add(ho->ack, &tv);
}

static void on_drain(evutil_socket_t fd, short what, void *arg)
{
	kvs_server *s = arg;
	struct handover *ho = s->ho;
	struct timeval tv = { 0, DRAIN_POLL_MS * 1000 };

	(void)fd;
	(void)what;
	if (!ho->draining) {
		ho->draining = 1;
		for (conn *c = s->conns, *next; c; c = next) {
			next = c->next;
			conn_drain(c);
		}
	}
	if (s->conns && now_ms() < ho->deadline) {
		evtimer_add(ho->tick, &tv);
		return;
	}
	while (s->conns)
		conn_close(s->conns, "hand-over: not answered within the drain");
	handover_send(s);
}

/* Why a HANDOVER from @c is refused now (counted, logged), or 0. */
static int handover_refusal(conn *c, uint32_t version, uint32_t flags)
{
	kvs_server *s = c->srv;
	int rc = 0;

	if (flags) {
		rc = KVS_E_PROTO; /* an ACK belongs to the connection asked on */
	} else if (c->uid != (uint32_t)s->uid) {
		kvs_warn("take-over refused: client %" PRIu64 " is uid %u, only "
			 "the daemon's own uid (%u) may take over: still serving",
			 c->id, (unsigned)c->uid, (unsigned)s->uid);
		rc = KVS_E_PERM;
	} else if (version != KVS_HANDOVER_VERSION) {
		kvs_warn("take-over refused: the successor reads hand-over "
			 "format %u, this daemon writes %u: still serving",
			 version, KVS_HANDOVER_VERSION);
		rc = KVS_E_VERSION;
	} else if (s->ho) {
		kvs_warn("take-over refused: one is under way already");
		rc = -EBUSY;
	}
	if (rc && rc != KVS_E_PROTO)
		s->stats.start_handover_refused++;
	return rc;
}

int server_handover_start(conn *c, const kvs_wire_hdr *h, uint32_t version,
			  uint32_t flags)
{
	kvs_server *s = c->srv;
	struct timeval now = { 0, 0 };
	struct handover *ho;
	int rc = handover_refusal(c, version, flags);

	if (rc)
		return rc;
	ho = calloc(1, sizeof(*ho));
	if (!ho)
		return -ENOMEM;
	ho->link = fcntl(c->fd, F_DUPFD_CLOEXEC, 3);
	ho->tick = evtimer_new(s->base, on_drain, s);
	s->ho = ho;
	if (ho->link < 0 || !ho->tick) {
		rc = ho->link < 0 ? -errno : -ENOMEM;
		if (ho->link >= 0)
			close(ho->link);
		server_handover_free(s);
		return rc;
	}
	ho->req_id = h->req_id;
	ho->t0 = now_ms();
	ho->deadline = ho->t0 + DRAIN_MS;
	event_del(s->listen_ev);
	event_del(s->accept_ev);
	evtimer_add(ho->tick, &now);
	kvs_info("take-over asked by client %" PRIu64 ": not accepting; "
		 "draining %u connections", c->id, s->nconns + s->nrefusing - 1);
	return 0; /* answered once drained, on ho->link */
}

/* ---- the successor ------------------------------------------------------- */

/* Connect to the daemon on @path, which must run as our uid (or root). */
static int takeover_connect(const char *path, char *why, size_t cap)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ucred cr;
	socklen_t crlen = sizeof(cr);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), rc;

	if (fd < 0)
		return -errno;
	memcpy(sa.sun_path, path, strnlen(path, sizeof(sa.sun_path) - 1));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		snprintf(why, cap, "no daemon answers there: %s", strerror(errno));
		close(fd);
		return rc == -ENOENT || rc == -ECONNREFUSED ? KVS_E_NODAEMON : rc;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0 ||
	    (cr.uid != geteuid() && cr.uid != 0)) {
		snprintf(why, cap, "the daemon there runs as another uid (%d): "
			 "not taking its fds", (int)cr.uid);
		close(fd);
		return KVS_E_PERM;
	}
	return fd;
}

/* What the answer brought besides its bytes: its fds, and the pid of the
 * process that sent it (SCM_CREDENTIALS, vouched for by the kernel:
 * SO_PEERCRED would name whoever called listen(), maybe a daemon long
 * gone). */
struct answer {
	int fds[KVS_SD_FDS_MAX];
	uint32_t n;
	pid_t pid;
};

/* Keep the fds of @mh in @a after those there, up to KVS_SD_FDS_MAX in
 * all; those past it are closed. -1 if there were too many, or more than
 * the control buffer held (MSG_CTRUNC: the kernel dropped some). */
static int take_fds(const struct msghdr *mh, struct answer *a)
{
	int rc = mh->msg_flags & MSG_CTRUNC ? -1 : 0;

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm;
	     cm = CMSG_NXTHDR((struct msghdr *)mh, cm)) {
		uint32_t k;
		int fd;

		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
			struct ucred cr;

			memcpy(&cr, CMSG_DATA(cm), sizeof(cr));
			a->pid = cr.pid;
		}
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		k = (uint32_t)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (uint32_t i = 0; i < k; i++) {
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (a->n < KVS_SD_FDS_MAX) {
				a->fds[a->n++] = fd;
			} else {
				close(fd);
				rc = -1;
			}
		}
	}
	return rc;
}

/* Read the answer: its header into @h, its payload into @p (up to @cap),
 * its fds and its sender into @a. */
static int takeover_read(int fd, kvs_wire_hdr *h, uint8_t *p, size_t cap,
			 struct answer *a)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * KVS_SD_FDS_MAX) +
		       CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} u;
	uint8_t buf[HO_MSG_MAX];
	size_t got = 0, want = KVS_WIRE_HDR_SIZE;
	int64_t deadline = (int64_t)now_ms() + ANSWER_MS;

	a->n = 0;
	a->pid = 0;
	while (got < want) {
		struct iovec iov = { buf + got, want - got };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = u.b, .msg_controllen = sizeof(u.b) };
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int left = (int)(deadline - (int64_t)now_ms());
		ssize_t r;

		if (left <= 0 || poll(&pf, 1, left) == 0)
			return -ETIMEDOUT;
		r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -ECONNRESET;
		if (take_fds(&mh, a) < 0)
			return -EMSGSIZE;
		got += (size_t)r;
		if (got == KVS_WIRE_HDR_SIZE && want == KVS_WIRE_HDR_SIZE) {
			int rc = kvs_wire_hdr_decode(buf, got, HO_MSG_MAX -
						     KVS_WIRE_HDR_SIZE, h);

			if (rc < 0)
				return KVS_E_PROTO;
			want += h->len;
		}
	}
	if (h->len > cap)
		return KVS_E_PROTO;
	memcpy(p, buf + KVS_WIRE_HDR_SIZE, h->len);
	return 0;
}

/* The answer's names, checked against the fds that came with them. */
static int takeover_names(const uint8_t *p, const kvs_wire_hdr *h, int *raw,
			  uint32_t nraw, kvs_named_fd *fds, uint32_t max,
			  char *why, size_t cap)
{
	uint32_t version = get32(p), n = get32(p + 4);

	if (version != KVS_HANDOVER_VERSION) {
		snprintf(why, cap, "the daemon wrote hand-over format %u, this "
			 "kvshared reads %u", version, KVS_HANDOVER_VERSION);
		return KVS_E_VERSION;
	}
	if (n != nraw || n > max || h->len != 8 + n * HO_NAME) {
		snprintf(why, cap, "a malformed answer (%u names, %u fds)", n, nraw);
		return KVS_E_PROTO;
	}
	for (uint32_t i = 0; i < n; i++) {
		fds[i].fd = raw[i];
		memcpy(fds[i].name, p + 8 + i * HO_NAME, KVS_FDNAME_MAX);
		fds[i].name[KVS_FDNAME_MAX] = '\0';
		if (!kvs_sd_fdname_ok(fds[i].name)) {
			snprintf(why, cap, "a malformed answer (name %u)", i);
			return KVS_E_PROTO;
		}
	}
	return (int)n;
}

static int takeover_refused(int status, char *why, size_t cap)
{
	if (status == KVS_E_VERSION)
		snprintf(why, cap, "the daemon writes another hand-over format "
			 "(this kvshared reads %u): it keeps serving",
			 KVS_HANDOVER_VERSION);
	else if (status == KVS_E_PERM)
		snprintf(why, cap, "refused: only the daemon's own uid may take "
			 "over (this process is uid %u)", (unsigned)geteuid());
	else
		snprintf(why, cap, "refused: %s", kvs_strerror(status));
	return status;
}

int server_takeover(const char *path, kvs_named_fd *fds, uint32_t max,
		    struct takeover_link *tl, char *why, size_t cap)
{
	uint8_t req[KVS_WIRE_HDR_SIZE + HO_REQ_LEN], p[HO_MSG_MAX];
	struct answer a = { .n = 0 };
	kvs_wire_hdr h;
	int fd = takeover_connect(path, why, cap), rc, on = 1;

	tl->fd = -1;
	tl->pid = 0;
	if (fd < 0)
		return fd;
	msg_head(req, HO_REQ_LEN, 0, 1);
	put32(req + KVS_WIRE_HDR_SIZE, KVS_HANDOVER_VERSION);
	put32(req + KVS_WIRE_HDR_SIZE + 4, 0);
	rc = setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) < 0 ? -errno : 0;
	if (rc == 0)
		rc = send_fds(fd, req, sizeof(req), NULL, 0);
	if (rc == 0)
		rc = takeover_read(fd, &h, p, sizeof(p), &a);
	if (rc == -EMSGSIZE)
		snprintf(why, cap, "a malformed answer (more than %d fds)",
			 KVS_SD_FDS_MAX);
	else if (rc < 0)
		snprintf(why, cap, "no answer: %s", kvs_strerror(rc));
	else if (h.status < 0 || h.opcode != KVS_OP_HANDOVER)
		rc = takeover_refused(h.status < 0 ? h.status : KVS_E_PROTO, why, cap);
	else if (h.len < 8)
		rc = takeover_refused(KVS_E_PROTO, why, cap);
	else
		rc = takeover_names(p, &h, a.fds, a.n, fds, max, why, cap);
	if (rc >= 0 && a.pid <= 0) {
		snprintf(why, cap, "the answer does not say which process sent it");
		rc = KVS_E_PROTO;
	}
	if (rc < 0) {
		for (uint32_t i = 0; i < a.n; i++)
			close(a.fds[i]);
		close(fd); /* no ACK */
		return rc;
	}
	tl->fd = fd;
	tl->pid = a.pid;
	return rc;
}

/* Wait up to @ms for the process behind @pidfd to exit: 0 once it has. */
static int wait_exit(int pidfd, int ms)
{
	int64_t deadline = (int64_t)now_ms() + ms;

	for (;;) {
		struct pollfd pf = { .fd = pidfd, .events = POLLIN };
		int left = (int)(deadline - (int64_t)now_ms()), r;

		if (left <= 0)
			return -ETIMEDOUT;
		r = poll(&pf, 1, left);
		if (r > 0)
			return 0; /* readable: it exited */
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

int server_takeover_ack(const struct takeover_link *tl, char *why, size_t cap)
{
	uint8_t msg[KVS_WIRE_HDR_SIZE + HO_REQ_LEN];
	/* Watched before the ACK: until then it waits for us and is alive,
	 * so the pid is still its own. */
	int pidfd = (int)syscall(SYS_pidfd_open, tl->pid, 0), rc;

	if (pidfd < 0) {
		rc = -errno;
		snprintf(why, cap, "cannot watch the old daemon (pid %d): %s",
			 (int)tl->pid, strerror(errno));
		close(tl->fd); /* no ACK: it exits without serving again */
		return rc;
	}
	msg_head(msg, HO_REQ_LEN, 0, 2);
	put32(msg + KVS_WIRE_HDR_SIZE, KVS_HANDOVER_VERSION);
	put32(msg + KVS_WIRE_HDR_SIZE + 4, KVS_HANDOVER_ACK);
	/* Sent or not (it may have given up on us and be exiting), only its
	 * exit says it let go of the pool: a closed link may be a daemon
	 * that goes on. */
	(void)send_fds(tl->fd, msg, sizeof(msg), NULL, 0);
	rc = wait_exit(pidfd, EXIT_WAIT_MS);
	if (rc < 0)
		snprintf(why, cap, "the old daemon (pid %d) has not exited within "
			 "%d ms: %s", (int)tl->pid, EXIT_WAIT_MS, strerror(-rc));
	close(pidfd);
	close(tl->fd);
	return rc;
}
