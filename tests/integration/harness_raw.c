/*
 * harness_raw.c - the integration-test harness: the wire protocol by hand
 * (see harness_raw.h).
 */
#include "harness_raw.h"
#include "harness_int.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

/* ---- raw protocol --------------------------------------------------------- */

int th_tcp_connect(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc;

	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int th_raw_connect(const th_daemon *d)
{
	static const int types[] = { SOCK_STREAM, SOCK_SEQPACKET };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int rc = -EINVAL;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d->socket);
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		int fd = socket(AF_UNIX, types[i] | SOCK_CLOEXEC, 0);

		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		rc = -errno;
		close(fd);
		if (rc != -EPROTOTYPE)
			break;
	}
	return rc;
}

int th_raw_send(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t r = send(fd, p, n, MSG_NOSIGNAL);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int th_raw_send_msg(int fd, uint16_t version, uint16_t opcode, uint32_t len,
		    uint64_t req_id, const void *payload, size_t n)
{
	kvs_wire_hdr h = {
		.magic = KVS_WIRE_MAGIC,
		.version = version,
		.opcode = opcode,
		.len = len,
		.status = 0,
		.req_id = req_id,
	};
	uint8_t *buf = malloc(KVS_WIRE_HDR_SIZE + n);
	int rc;

	if (!buf)
		return -ENOMEM;
	/* One send: a message arrives whole (and is one record on SEQPACKET). */
	kvs_wire_hdr_encode(&h, buf);
	if (n)
		memcpy(buf + KVS_WIRE_HDR_SIZE, payload, n);
	rc = th_raw_send(fd, buf, KVS_WIRE_HDR_SIZE + n);
	free(buf);
	return rc;
}

int th_raw_request(int fd, uint16_t opcode, uint64_t req_id,
		   const void *payload, size_t n)
{
	return th_raw_send_msg(fd, KVS_WIRE_VERSION, opcode, (uint32_t)n, req_id,
			       payload, n);
}

/* Read exactly @n bytes (into @buf, or dropped when buf is NULL); the
 * descriptors that come with them go to @fds (up to *@nfds of them, *@nfds
 * set to how many were kept) and the rest are closed; @fds NULL: all closed. */
static int recv_full_fds(int fd, uint8_t *buf, size_t n, int64_t deadline,
			 int *fds, int *nfds)
{
	int cap = fds ? *nfds : 0, kept = 0;

	uint8_t junk[4096];

	while (n) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(8 * sizeof(int))];
		} ctl;
		struct iovec iov = {
			.iov_base = buf ? buf : junk,
			.iov_len = buf ? n : (n < sizeof(junk) ? n : sizeof(junk)),
		};
		struct msghdr msg = {
			.msg_iov = &iov,
			.msg_iovlen = 1,
			.msg_control = ctl.b,
			.msg_controllen = sizeof(ctl.b),
		};
		int rc = th_fd_poll(fd, deadline);
		ssize_t r;

		if (rc)
			return rc;
		r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno == ECONNRESET ? TH_CLOSED : -errno;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

				int got[8];

				memcpy(got, CMSG_DATA(c), nfd * sizeof(int));
				for (size_t i = 0; i < nfd; i++)
					if (kept < cap)
						fds[kept++] = got[i];
					else
						close(got[i]);
			}
		if (fds)
			*nfds = kept;
		if (r == 0)
			return TH_CLOSED;
		if (buf)
			buf += r;
		n -= (size_t)r;
	}
	return 0;
}

static int recv_full(int fd, uint8_t *buf, size_t n, int64_t deadline)
{
	return recv_full_fds(fd, buf, n, deadline, NULL, NULL);
}

int th_raw_recv(int fd, kvs_wire_hdr *h, uint8_t *payload, size_t cap,
		int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	uint8_t hb[KVS_WIRE_HDR_SIZE];
	size_t keep;
	int rc = recv_full(fd, hb, sizeof(hb), deadline);

	if (rc)
		return rc;
	rc = kvs_wire_hdr_decode(hb, sizeof(hb), KVS_WIRE_MAX_PAYLOAD, h);
	if (rc) {
		th_note("raw reply with a bad header: %s", kvs_strerror(rc));
		return KVS_E_PROTO;
	}
	keep = h->len < cap ? h->len : cap;
	rc = recv_full(fd, payload, keep, deadline);
	if (rc == 0 && h->len > keep)
		rc = recv_full(fd, NULL, h->len - keep, deadline);
	return rc ? rc : (int)h->len;
}

bool th_raw_wait_closed(int fd, int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	uint8_t junk[4096];

	for (;;) {
		ssize_t r;

		if (th_fd_poll(fd, deadline))
			return false;
		r = recv(fd, junk, sizeof(junk), 0);
		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return true;
		if (r < 0 && errno != EINTR && errno != EAGAIN)
			return false;
	}
}

int th_raw_hello(int fd, const kvs_layout *layout, uint64_t req_id)
{
	uint8_t buf[1024], reply[64];
	kvs_wire_hdr h;
	int n = kvs_wire_hello_encode(layout, buf, sizeof(buf));

	if (n < 0)
		return n;
	n = th_raw_request(fd, KVS_OP_HELLO, req_id, buf, (size_t)n);
	if (n < 0)
		return n;
	n = th_raw_recv(fd, &h, reply, sizeof(reply), TH_WAIT_MS);
	if (n < 0)
		return n;
	if (h.opcode != KVS_OP_HELLO || h.req_id != req_id) {
		th_note("hello reply: opcode %u req_id %llu", h.opcode,
			(unsigned long long)h.req_id);
		return KVS_E_PROTO;
	}
	return h.status;
}

int th_raw_hello_fds(int fd, const kvs_layout *layout, uint32_t flags,
		     kvs_wire_hello_reply *reply, int *fds, int *nfds)
{
	int64_t deadline = th_now_ms() + TH_WAIT_MS;
	uint8_t buf[1024], hb[KVS_WIRE_HDR_SIZE], p[64];
	int cap = *nfds, n = kvs_wire_hello_encode_flags(layout, flags, buf,
							 sizeof(buf));
	kvs_wire_hdr h;

	*nfds = 0;
	if (n < 0)
		return n;
	n = th_raw_request(fd, KVS_OP_HELLO, 1, buf, (size_t)n);
	/* The fds ride on the first byte of the reply: its header. */
	if (n == 0)
		n = recv_full_fds(fd, hb, sizeof(hb), deadline, fds, &cap);
	if (n)
		return n;
	*nfds = cap;
	if (kvs_wire_hdr_decode(hb, sizeof(hb), KVS_WIRE_MAX_PAYLOAD, &h) ||
	    h.opcode != KVS_OP_HELLO || h.len > sizeof(p))
		return KVS_E_PROTO;
	n = recv_full(fd, p, h.len, deadline);
	if (n)
		return n;
	if (h.status)
		return h.status;
	return kvs_wire_hello_reply_decode(p, h.len, reply);
}
