/*
 * transport.c - libkvshare's side of the socket: framing, fds, one round
 * trip, deadlines (kvs_client_int.h). Any failure that leaves the stream in
 * an unknown state kills the client (see client.c).
 *
 * Deadlines: a daemon that is stuck rather than dead (SIGSTOP, a long stall)
 * keeps the socket open and never answers, so a blocking read would wait
 * forever on the caller's thread (vLLM's scheduler, for the connector). Every
 * call therefore has one deadline on CLOCK_MONOTONIC, armed when it starts
 * and covering all of it: the connect, each send and each wait for a reply
 * (fds included), and every message of a call of several (an attach). The
 * socket stays blocking (a watch takes it over); each send and receive is
 * MSG_DONTWAIT, and a wait is a poll() with what is left. Past the deadline
 * the client is killed like one whose daemon died: the socket closes (so the
 * daemon drops the leases once it runs again), and the call answers
 * KVS_E_DISCONNECTED.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kvs_client_int.h"
#include "kvs_clock.h"
#include "kvs_wire.h"

void kvs__kill(kvs_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->dead = 1;
	/* The fast path's pins counted only while the connection lived: drop
	 * them with it, so that nothing here answers from the index again. */
	kvs__fast_detach(c);
}

/* Kill @c and return @err: a lost peer (EOF is 0) or a deadline passed
 * (-ETIMEDOUT) reads as DISCONNECTED. */
int kvs__die(kvs_client *c, int err)
{
	kvs__kill(c);
	if (err == -EPIPE || err == -ECONNRESET || err == -ETIMEDOUT || err == 0)
		return KVS_E_DISCONNECTED;
	return err;
}

/* ---- deadlines ---- */

int kvs__timeout_default(void)
{
	const char *env = getenv("KVSHARE_TIMEOUT_MS");
	char *end;
	long v;

	if (!env || !env[0])
		return KVS_TIMEOUT_DEFAULT_MS;
	errno = 0;
	v = strtol(env, &end, 10);
	/* A value that does not parse is ignored rather than fatal: the
	 * library has no way to report it, and no deadline is never right. */
	if (errno || *end || v <= 0 || v > INT_MAX)
		return KVS_TIMEOUT_DEFAULT_MS;
	return (int)v;
}

int kvs__arm(kvs_client *c)
{
	if (c->deadline)
		return 0;
	c->deadline = (int64_t)now_ns() + (int64_t)c->timeout_ms * 1000000;
	return 1;
}

void kvs__disarm(kvs_client *c, int armed)
{
	if (armed)
		c->deadline = 0;
}

/* Wait until the socket is ready for @events or the call's deadline passes
 * (then @c dies: KVS_E_DISCONNECTED). Readiness past the deadline still
 * counts: a reply that is there is taken. */
static int wait_io(kvs_client *c, short events)
{
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = events };
		int64_t left = c->deadline - (int64_t)now_ns();
		/* Rounded up, so that giving up means the deadline has passed. */
		int ms = left > 0 ? (int)((left + 999999) / 1000000) : 0;
		int rc = poll(&p, 1, ms);

		if (rc > 0)
			return 0; /* POLLHUP, POLLERR: the next call says which */
		if (rc < 0 && errno != EINTR)
			return kvs__die(c, -errno);
		if (rc == 0 && left <= 0)
			return kvs__die(c, -ETIMEDOUT);
	}
}

int kvs__grow(kvs_client *c, size_t n)
{
	uint8_t *p;

	if (n <= c->cap)
		return 0;
	if (n < 4096)
		n = 4096;
	p = realloc(c->buf, n);
	if (!p)
		return -ENOMEM;
	c->buf = p;
	c->cap = n;
	return 0;
}

static int send_msg(kvs_client *c, const uint8_t *hdr, const uint8_t *payload,
		    size_t len)
{
	struct iovec iov[2] = {
		{ .iov_base = (void *)hdr, .iov_len = KVS_WIRE_HDR_SIZE },
		{ .iov_base = (void *)payload, .iov_len = len },
	};
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };

	while (m.msg_iovlen > 0) {
		ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
		int rc;

		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				return kvs__die(c, -errno);
			/* The daemon is not reading: wait for room, or give up. */
			if ((rc = wait_io(c, POLLOUT)) < 0)
				return rc;
			continue;
		}
		while (m.msg_iovlen > 0 && (size_t)w >= m.msg_iov->iov_len) {
			w -= (ssize_t)m.msg_iov->iov_len;
			m.msg_iov++;
			m.msg_iovlen--;
		}
		if (m.msg_iovlen > 0) {
			m.msg_iov->iov_base = (uint8_t *)m.msg_iov->iov_base + w;
			m.msg_iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* Keep the first two fds in fd_out[0], fd_out[1] (when it is not NULL and
 * they are still -1); close any other, so that a confused or hostile peer
 * cannot fill our fd table. */
static void take_fds(struct msghdr *m, int *fd_out)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm; cm = CMSG_NXTHDR(m, cm)) {
		size_t nfd;
		int fds[KVS_MAX_FDS];

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		if (nfd > KVS_MAX_FDS)
			nfd = KVS_MAX_FDS;
		memcpy(fds, CMSG_DATA(cm), nfd * sizeof(int));
		for (size_t i = 0; i < nfd; i++) {
			if (fd_out && fd_out[0] < 0)
				fd_out[0] = fds[i];
			else if (fd_out && fd_out[1] < 0)
				fd_out[1] = fds[i];
			else
				close(fds[i]);
		}
	}
}

/* Make at least @n unconsumed bytes available in c->in, reading as much
 * as the kernel has (so one recvmsg usually brings a whole reply), and
 * collecting any fds that come along. */
static int fill(kvs_client *c, size_t n, int *fd_out)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(KVS_MAX_FDS * sizeof(int))];
	} ctl;

	if (c->in_tail - c->in_head >= n)
		return 0;
	if (c->in_head > 0) {
		memmove(c->in, c->in + c->in_head, c->in_tail - c->in_head);
		c->in_tail -= c->in_head;
		c->in_head = 0;
	}
	if (n > c->in_cap) {
		size_t cap = c->in_cap ? c->in_cap : 65536;
		uint8_t *p;

		while (cap < n)
			cap *= 2;
		p = realloc(c->in, cap);
		if (!p)
			return kvs__die(c, -ENOMEM); /* cannot drain the reply */
		c->in = p;
		c->in_cap = cap;
	}
	while (c->in_tail < n) {
		struct iovec iov = { .iov_base = c->in + c->in_tail,
				     .iov_len = c->in_cap - c->in_tail };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = ctl.buf,
				    .msg_controllen = sizeof(ctl.buf) };
		/* Wait first: right after a request the reply is seldom there
		 * yet, and a poll costs less than a recvmsg that finds nothing. */
		int rc = wait_io(c, POLLIN);
		ssize_t r;

		if (rc < 0)
			return rc;
		r = recvmsg(c->fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return kvs__die(c, -errno);
		}
		take_fds(&m, fd_out);
		if (r == 0)
			return kvs__die(c, 0);
		c->in_tail += (size_t)r;
	}
	return 0;
}

/* Read the next reply, which must answer @op with the next req_id; its
 * payload stays in c->in at *payload until the next read. */
static int read_reply(kvs_client *c, uint16_t op, kvs_wire_hdr *h,
		      const uint8_t **payload, int *fd_out)
{
	int rc = fill(c, KVS_WIRE_HDR_SIZE, fd_out);

	if (rc < 0)
		return rc;
	rc = kvs_wire_hdr_decode(c->in + c->in_head, KVS_WIRE_HDR_SIZE,
				 KVS_WIRE_MAX_PAYLOAD, h);
	if (rc < 0)
		return kvs__die(c, rc == KVS_E_VERSION ? rc : KVS_E_PROTO);
	if (h->opcode != op || h->req_id != c->acked_id + 1 || h->status > 0 ||
	    (h->status != 0 && h->len != 0))
		return kvs__die(c, KVS_E_PROTO);
	rc = fill(c, KVS_WIRE_HDR_SIZE + (size_t)h->len, fd_out);
	if (rc < 0)
		return rc;
	*payload = c->in + c->in_head + KVS_WIRE_HDR_SIZE;
	c->in_head += KVS_WIRE_HDR_SIZE + (size_t)h->len;
	c->acked_id++;
	return 0;
}

/* Consume the replies of earlier kvs_release_nowait() calls. Their errors
 * are not reported (the daemon counts them in errors.lease). */
static int drain(kvs_client *c)
{
	if (kvs__forked(c))
		return KVS_E_DISCONNECTED; /* the parent's replies, not ours */
	while (c->unacked > 0) {
		const uint8_t *p;
		kvs_wire_hdr h;
		int rc = read_reply(c, KVS_OP_RELEASE, &h, &p, NULL);

		if (rc < 0)
			return rc;
		c->unacked--;
	}
	return 0;
}

static int send_req(kvs_client *c, uint16_t op, size_t len)
{
	uint8_t hb[KVS_WIRE_HDR_SIZE];
	kvs_wire_hdr h = { .magic = KVS_WIRE_MAGIC, .version = KVS_WIRE_VERSION,
			   .opcode = op, .len = (uint32_t)len, .status = 0 };

	if (kvs__forked(c))
		return KVS_E_DISCONNECTED; /* the parent's stream, not ours */
	if (c->dead || c->fd < 0)
		return KVS_E_DISCONNECTED;
	h.req_id = ++c->next_id;
	kvs_wire_hdr_encode(&h, hb);
	return send_msg(c, hb, c->buf, len);
}

int kvs__drain(kvs_client *c)
{
	int armed = kvs__arm(c), rc = drain(c);

	kvs__disarm(c, armed);
	return rc;
}

int kvs__send(kvs_client *c, uint16_t op, size_t len)
{
	int armed = kvs__arm(c), rc = send_req(c, op, len);

	kvs__disarm(c, armed);
	return rc;
}

/*
 * One round trip. The request payload is @len bytes at c->buf; on success the
 * reply payload replaces it there and *rlen is its length. Returns 0, the
 * daemon's negative status, or a local error (which may have killed @c).
 */
int kvs__call(kvs_client *c, uint16_t op, size_t len, uint32_t *rlen,
	       int *fd_out)
{
	const uint8_t *p;
	kvs_wire_hdr h;
	int armed = kvs__arm(c), rc = send_req(c, op, len);

	if (rc == 0)
		rc = drain(c);
	if (rc == 0)
		rc = read_reply(c, op, &h, &p, fd_out);
	kvs__disarm(c, armed);
	if (rc < 0)
		return rc;
	rc = kvs__grow(c, h.len);
	if (rc < 0)
		return rc; /* the reply was consumed: the stream is intact */
	memcpy(c->buf, p, h.len);
	*rlen = h.len;
	return h.status;
}

/* SO_SNDTIMEO bounds an AF_UNIX connect() that waits for room in a full
 * listen backlog (a daemon that stopped accepting); 0 would mean forever. */
static int set_sndtimeo(int fd, int64_t ns) /* ns > 0 */
{
	struct timeval tv = { .tv_sec = ns / 1000000000,
			      .tv_usec = ns % 1000000000 / 1000 };

	if (tv.tv_sec == 0 && tv.tv_usec == 0)
		tv.tv_usec = 1;
	return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int kvs__sock_connect(const char *path, int64_t deadline)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, err;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	for (;;) {
		int64_t left = deadline - (int64_t)now_ns();

		/* A connect interrupted or timed out has not happened (an
		 * AF_UNIX connect never goes on in the background): retry
		 * with what is left. */
		if (left <= 0) {
			err = ETIMEDOUT;
			break;
		}
		if (set_sndtimeo(fd, left) < 0) {
			err = errno;
			break;
		}
		/* SO_SNDTIMEO stays: every send is MSG_DONTWAIT anyway. */
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		err = errno;
		if (err != EINTR && err != EAGAIN)
			break;
	}
	close(fd);
	if (err == ENOENT || err == ECONNREFUSED)
		return KVS_E_NODAEMON;
	return err == ETIMEDOUT ? KVS_E_DISCONNECTED : -err;
}
