/*
 * test_metrics_bounds - /metrics holds against any peer that can connect:
 * a daemon with --metrics-max-connections 4 --metrics-timeout 2.
 *  header:  a request whose headers never end (64 KiB, then up to 32 MiB
 *           more pushed for as long as the daemon takes it) gets 431 and a
 *           close; the daemon's private memory (server.rss_anon_bytes)
 *           does not grow by what was sent (it reads 8 KiB at most).
 *  cap:     4 idle connections are served (server.metrics_open 4); 40 more
 *           are closed at accept (server.metrics_refused 40, each sees its
 *           EOF); a worker still connects and publishes and looks up, and
 *           the fd reserve shows in clients.max.
 *  timeout: the idle ones are closed by their deadline (EOF on each,
 *           server.metrics_timed_out 4), then a scrape is served again
 *           (200, the text format).
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_raw.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#define CAP 4
#define EXTRA 40
#define TIMEOUT_S 2
#define PUSH_MAX (32u << 20)

static int tcp_connect(int port)
{
	int fd = th_tcp_connect(port);

	if (fd < 0)
		th_fatal("connect to 127.0.0.1:%d: %s", port, strerror(-fd));
	return fd;
}

/* Read until EOF (or a reset) within @timeout_ms: the bytes read (up to
 * @cap - 1, NUL-terminated) or -1 when the connection stayed open. */
static ssize_t read_to_eof(int fd, char *buf, size_t cap, int timeout_ms)
{
	int64_t end = th_now_ms() + timeout_ms;
	size_t got = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = end - th_now_ms();
		char sink[4096];
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return -1;
		if (got + 1 < cap)
			n = recv(fd, buf + got, cap - 1 - got, 0);
		else
			n = recv(fd, sink, sizeof(sink), 0);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			break;
		if (n < 0)
			return -1;
		if (got + 1 < cap)
			got += (size_t)n;
	}
	if (cap)
		buf[got] = '\0';
	return (ssize_t)got;
}

/* Push header bytes while the daemon takes them (a second without room
 * ends it, as does a close); returns the bytes sent. */
static size_t push(int fd, size_t max)
{
	static char junk[65536];
	size_t sent = 0;

	memset(junk, 'a', sizeof(junk));
	while (sent < max) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		ssize_t n;

		if (poll(&p, 1, 1000) <= 0 || (p.revents & (POLLERR | POLLHUP)))
			break;
		n = send(fd, junk, sizeof(junk), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EAGAIN)
			continue;
		if (n <= 0)
			break;
		sent += (size_t)n;
	}
	return sent;
}

static void header(th_daemon *d, int port)
{
	static const char req[] = "GET /metrics HTTP/1.1\r\nX-Long: ";
	static char reply[256];
	int64_t rss0, rss1;
	size_t sent;
	int fd;

	rss0 = th_stat_get(d, "server.rss_anon_bytes");
	fd = tcp_connect(port);
	CHECK_EQ(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
	sent = push(fd, 64u << 10);
	CHECK_EQ(sent, 64u << 10);
	/* More, for as long as the daemon takes it: it has stopped reading. */
	sent += push(fd, PUSH_MAX);
	if (CHECK(read_to_eof(fd, reply, sizeof(reply), 5 * TH_WAIT_MS) >= 0))
		CHECK(strncmp(reply, "HTTP/1.1 431", 12) == 0);
	close(fd);
	rss1 = th_stat_get(d, "server.rss_anon_bytes");
	th_note("header: %zu bytes sent, rss %lld -> %lld", sent,
		(long long)rss0, (long long)rss1);
	CHECK_LT(rss1 - rss0, 4 << 20);
}

static void cap_and_timeout(th_daemon *d, int port)
{
	kvs_layout l = th_layout("metrics-bounds", 16);
	static char buf[1 << 16];
	int idle[CAP], extra[EXTRA], closed = 0;
	kvs_client *w;

	for (int i = 0; i < CAP; i++)
		idle[i] = tcp_connect(port);
	CHECK(th_wait_stat(d, "server.metrics_open", CAP, TH_WAIT_MS));
	for (int i = 0; i < EXTRA; i++)
		extra[i] = tcp_connect(port);
	for (int i = 0; i < EXTRA; i++) {
		closed += read_to_eof(extra[i], buf, 1, TH_WAIT_MS) == 0;
		close(extra[i]);
	}
	CHECK_EQ(closed, EXTRA);
	CHECK_EQ(th_stat_get(d, "server.metrics_refused"), EXTRA);
	CHECK_EQ(th_stat_get(d, "server.metrics_open"), CAP);
	/* The workers' fds are not the scrapers'. */
	w = th_connect(d, &l);
	CHECK(th_round_trip(w, &l, 7, 4));
	kvs_close(w);

	/* Idle past the deadline: each closed by the daemon. */
	closed = 0;
	for (int i = 0; i < CAP; i++) {
		closed += read_to_eof(idle[i], buf, 1, (TIMEOUT_S + 10) * 1000) == 0;
		close(idle[i]);
	}
	CHECK_EQ(closed, CAP);
	CHECK_EQ(th_stat_get(d, "server.metrics_timed_out"), CAP);
	CHECK(th_wait_stat(d, "server.metrics_open", 0, TH_WAIT_MS));

	/* Served again. */
	int fd = tcp_connect(port);
	static const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

	CHECK_EQ(send(fd, get, sizeof(get) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(get) - 1);
	if (CHECK(read_to_eof(fd, buf, sizeof(buf), TH_WAIT_MS) > 0)) {
		CHECK(strncmp(buf, "HTTP/1.1 200 OK", 15) == 0);
		CHECK(strstr(buf, "kvshare_server_metrics_refused_total 40") != NULL);
	}
	close(fd);
}

int main(void)
{
	static th_daemon d;
	int port;

	th_init("test_metrics_bounds");
	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--metrics-addr", "127.0.0.1:0",
				 "--metrics-max-connections", "4",
				 "--metrics-timeout", "2"));
	port = (int)th_stat_get(&d, "server.metrics_port");
	if (!CHECK_GT(port, 0))
		return th_finish();
	CHECK(th_log_contains(&d, "at most 4 connections, 2 s each"));
	header(&d, port);
	cap_and_timeout(&d, port);
	return th_finish();
}
