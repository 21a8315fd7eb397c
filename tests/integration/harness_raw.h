/*
 * harness_raw.h - the integration-test harness: the wire protocol by hand on a
 * plain socket, to send what the client library never would. See harness.h.
 *
 * Thread: single-threaded tests only.
 */
#ifndef TH_HARNESS_RAW_H
#define TH_HARNESS_RAW_H

#include "harness.h"
#include "kvs_wire.h"

/* ---- raw protocol --------------------------------------------------------- */

#define TH_CLOSED (-EPIPE) /* th_raw_recv: the daemon closed the connection */

/* th_raw_connect - a plain socket connected to the daemon; fd or -errno. */
int th_raw_connect(const th_daemon *d);

/* th_tcp_connect - a TCP socket connected to 127.0.0.1:@port (the metrics
 * endpoint), made without waiting for a reply; fd or -errno. */
int th_tcp_connect(int port);

/* th_raw_send - send all of @buf (MSG_NOSIGNAL). 0 or -errno. */
int th_raw_send(int fd, const void *buf, size_t n);

/* th_raw_send_msg - send a header (magic, @version, @opcode, @len, req_id)
 * followed by @n bytes of @payload (n may differ from len, to lie). */
int th_raw_send_msg(int fd, uint16_t version, uint16_t opcode, uint32_t len,
		    uint64_t req_id, const void *payload, size_t n);

/* th_raw_request - send a well-formed message of the current version. */
int th_raw_request(int fd, uint16_t opcode, uint64_t req_id,
		   const void *payload, size_t n);

/*
 * th_raw_recv - read one reply: header into @h, payload into @payload (up to
 * @cap bytes; the rest is read and dropped). Descriptors passed with it are
 * closed. Returns the payload length, TH_CLOSED when the daemon closed the
 * connection (before or inside a reply), -ETIMEDOUT, KVS_E_PROTO for a reply
 * with a bad header, or -errno.
 */
int th_raw_recv(int fd, kvs_wire_hdr *h, uint8_t *payload, size_t cap,
		int timeout_ms);

/* th_raw_wait_closed - whether the daemon closes the connection within
 * @timeout_ms (any bytes before the close are discarded). */
bool th_raw_wait_closed(int fd, int timeout_ms);

/* th_raw_hello - send HELLO with @layout (NULL: control-only) and return the
 * reply's status (or a th_raw_recv error). */
int th_raw_hello(int fd, const kvs_layout *layout, uint64_t req_id);

/* th_raw_hello_fds - send HELLO with @layout and HELLO @flags
 * (KVS_HELLO_GPU) and keep what a worker gets: the decoded @reply and the
 * arenas' fds, host first, in @fds (*@nfds of them at most on entry, how
 * many came on return; the caller closes them). Returns 0, the reply's
 * error status, or a th_raw_recv error. */
int th_raw_hello_fds(int fd, const kvs_layout *layout, uint32_t flags,
		     kvs_wire_hello_reply *reply, int *fds, int *nfds);

#endif /* TH_HARNESS_RAW_H */
