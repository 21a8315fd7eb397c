/*
 * scripted_node.h - a hostile Redis Cluster node for tests: a RESP peer
 * (run it in a child process) that claims to be a cluster and answers
 * some keys with what no Redis would send.
 *
 * Its CLUSTER SLOTS: every slot to itself (SN_MAP_SELF), 16,384 hosts one
 * slot each (SN_MAP_16K), or slots 8192.. to a host named with an escape
 * sequence and a newline (SN_MAP_CTL). Other commands: -ERR. Its GETs, by
 * key:
 *   good      $3 abc
 *   arr       *1000000 and three elements, then nothing (an array to GET)
 *   bigbulk   $536870912 and 3 bytes, then nothing (past the GET's budget)
 *   line4k    a 4 KiB status line (a line that fits, a type that does not)
 *   err4k     a 4 KiB error line (-EIO, the connection stays)
 *   hosts16k  MOVED to itself, and from then on CLUSTER SLOTS names 16,384
 *             hosts, one slot each (then "good" again)
 *   ctlhost   MOVED to itself; CLUSTER SLOTS gives slots 8192.. to a host
 *             named with an escape sequence and a newline
 *   selfmap*  MOVED to itself; CLUSTER SLOTS maps every slot to itself
 */
#ifndef SCRIPTED_NODE_H
#define SCRIPTED_NODE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvs_remote_cluster_slots.h"
#include "kvs_resp.h"

enum { SN_MAP_SELF, SN_MAP_16K, SN_MAP_CTL };

#define SN_CTL_HOST "evil\x1b[2J\nhost"
#define SN_CTL_HOST_PRINTED "evil\\x1b[2J\\x0ahost" /* as the engine escapes it */

/* The peer's state (a function, so that an includer using none of it is
 * not warned about unused statics). */
static inline struct sn_state {
	int port;
	int map; /* SN_MAP_* */
} *sn(void)
{
	static struct sn_state st;

	return &st;
}

/* For scripted peers: a loopback listener on a free port (*@port), or -1. */
static inline int sn_listen_any(int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(fd, 64) < 0 || getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		return -1;
	*port = ntohs(a.sin_port);
	return fd;
}

/* All of @s[@n] to @fd (a scripted peer's reply; errors end it). */
static inline void sn_put_n(int fd, const void *s, size_t n)
{
	const char *p = s;

	while (n) {
		ssize_t w = write(fd, p, n);

		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static inline void sn_put(int fd, const char *s)
{
	sn_put_n(fd, s, strlen(s));
}

/* The peer's CLUSTER SLOTS reply for sn()->map. */
static inline void sn_slots(int fd)
{
	static char buf[2u << 20];
	size_t o = 0;

	if (sn()->map == SN_MAP_SELF) {
		o = (size_t)snprintf(buf, sizeof(buf),
				     "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
				     sn()->port);
	} else if (sn()->map == SN_MAP_16K) {
		o = (size_t)snprintf(buf, sizeof(buf), "*%d\r\n", KVS_SLOTS);
		for (int s = 0; s < KVS_SLOTS; s++) {
			char host[32];
			int hl = snprintf(host, sizeof(host), "10.%d.%d.%d", s >> 16,
					  (s >> 8) & 255, s & 255);

			o += (size_t)snprintf(buf + o, sizeof(buf) - o,
					      "*3\r\n:%d\r\n:%d\r\n*2\r\n$%d\r\n%s\r\n:7000\r\n",
					      s, s, hl, host);
		}
	} else {
		o = (size_t)snprintf(buf, sizeof(buf),
				     "*2\r\n*3\r\n:0\r\n:8191\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n"
				     "*3\r\n:8192\r\n:16383\r\n*2\r\n$%zu\r\n%s\r\n:7000\r\n",
				     sn()->port, sizeof(SN_CTL_HOST) - 1, SN_CTL_HOST);
	}
	sn_put_n(fd, buf, o);
}

/* A MOVED of @key's slot to the peer itself, the first time @mode is set. */
static inline int sn_moved_once(int fd, const char *key, int mode)
{
	char buf[128];

	if (sn()->map == mode)
		return 0;
	sn()->map = mode;
	snprintf(buf, sizeof(buf), "-MOVED %u 127.0.0.1:%d\r\n",
		 kvs_slot_of(key, strlen(key)), sn()->port);
	sn_put(fd, buf);
	return 1;
}

static inline void sn_answer(int fd, const kvs_resp_parser *p, const kvs_resp_val *v)
{
	const kvs_resp_val *cmd = kvs_resp_elem(p, v, 0), *key = kvs_resp_elem(p, v, 1);
	static char line[4200];

	if (!cmd || !cmd->str)
		return;
	if (!strcasecmp(cmd->str, "CLUSTER")) {
		sn_slots(fd);
		return;
	}
	if (strcasecmp(cmd->str, "GET") || !key || !key->str) {
		sn_put(fd, "-ERR unknown command\r\n");
		return;
	}
	if (!strcmp(key->str, "arr")) {
		sn_put(fd, "*1000000\r\n:1\r\n:2\r\n:3\r\n");
	} else if (!strcmp(key->str, "bigbulk")) {
		sn_put(fd, "$536870912\r\nabc");
	} else if (!strcmp(key->str, "line4k") || !strcmp(key->str, "err4k")) {
		line[0] = key->str[0] == 'l' ? '+' : '-';
		memset(line + 1, 'x', 4090);
		memcpy(line + 4091, "\r\n", 3);
		sn_put(fd, line);
	} else if ((!strcmp(key->str, "hosts16k") && sn_moved_once(fd, key->str, SN_MAP_16K)) ||
		   (!strcmp(key->str, "ctlhost") && sn_moved_once(fd, key->str, SN_MAP_CTL)) ||
		   (!strncmp(key->str, "selfmap", 7) && sn_moved_once(fd, key->str, SN_MAP_SELF))) {
		/* answered */
	} else {
		sn_put(fd, "$3\r\nabc\r\n");
	}
}

/* sn_answer_fn - the answer to command @v (parsed by @p) on @fd, which
 * listener @l accepted; <0 closes the connection. */
typedef int (*sn_answer_fn)(int fd, int l, const kvs_resp_parser *p,
			    const kvs_resp_val *v, void *arg);

/*
 * sn_loop - a RESP peer on the @nl listeners @lfd: each command parsed goes
 * to @answer, until killed (run it in a child process). @accepts[l] (NULL:
 * not counted; may be shared memory) counts listener l's connections.
 * SIGPIPE is ignored: the engine closes connections with replies still
 * coming, and a write to one is EPIPE here, not a signal that ends the peer.
 */
static inline void sn_loop(const int *lfd, int nl, sn_answer_fn answer, void *arg,
			   int *accepts)
{
	struct pollfd pf[64];
	kvs_resp_parser *ps[64] = { 0 };
	int who[64], n = nl;

	signal(SIGPIPE, SIG_IGN);
	for (int l = 0; l < nl; l++) {
		pf[l] = (struct pollfd){ .fd = lfd[l], .events = POLLIN };
		who[l] = l;
	}
	for (;;) {
		if (poll(pf, (nfds_t)n, -1) < 0)
			continue;
		for (int l = 0; l < nl; l++) {
			int fd;

			if (!(pf[l].revents & POLLIN) || n >= 64 ||
			    (fd = accept(lfd[l], NULL, NULL)) < 0)
				continue;
			if (accepts)
				__atomic_add_fetch(&accepts[l], 1, __ATOMIC_SEQ_CST);
			pf[n] = (struct pollfd){ .fd = fd, .events = POLLIN };
			who[n] = l;
			kvs_resp_parser_create(256, &ps[n]);
			n++;
		}
		for (int i = nl; i < n; i++) {
			uint8_t buf[4096];
			ssize_t k;
			size_t pos = 0, used;
			int close_it;

			if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			k = read(pf[i].fd, buf, sizeof(buf));
			close_it = k <= 0;
			while (!close_it && pos < (size_t)k) {
				int rc = kvs_resp_parse(ps[i], buf + pos, (size_t)k - pos, &used);

				pos += used;
				if (rc < 0 || (rc == 1 && answer(pf[i].fd, who[i], ps[i],
								 kvs_resp_reply(ps[i]), arg) < 0))
					close_it = 1;
			}
			if (close_it) {
				close(pf[i].fd);
				kvs_resp_parser_free(ps[i]);
				pf[i] = pf[n - 1];
				ps[i] = ps[n - 1];
				who[i] = who[n - 1];
				n--;
				i--;
			}
		}
	}
}

static inline int sn_answer_cb(int fd, int l, const kvs_resp_parser *p,
			       const kvs_resp_val *v, void *arg)
{
	(void)l;
	(void)arg;
	sn_answer(fd, p, v);
	return 0;
}

/* sn_serve - the hostile node on listener @lfd (port @port, which its maps
 * name), starting with map @map: serve until killed (in a child process). */
static inline void sn_serve(int lfd, int port, int map)
{
	sn()->port = port;
	sn()->map = map;
	sn_loop(&lfd, 1, sn_answer_cb, NULL, NULL);
}

#endif /* SCRIPTED_NODE_H */
