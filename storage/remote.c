/* remote.c - the Redis Cluster client engine (see kvs_remote.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "kvs_remote.h"
#include "kvs_remote_slots.h"
#include "kvs_resp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define RBUF_BYTES (64u << 10)
#define HDR_BYTES (64 + KVS_REMOTE_KEY_MAX)
#define WRITE_IOV 64
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define REFRESH_GAP_US 100000 /* slot map refreshes at most this often */
#define READ_BUDGET (16u << 20) /* bytes one readable event may take */
#define MAX_RANGES 16384
#define AUTH_MAX 512

enum { OP_AUTH = 100, OP_SLOTS };
enum { W_NONE, W_WAIT, W_CONN, W_DONE };
enum { C_CONNECTING, C_UP };

static const char ASKING_CMD[] = "*1\r\n$6\r\nASKING\r\n";
static const char SLOTS_CMD[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
static const char NX_TRAILER[] = "\r\n$2\r\nNX\r\n";

struct batch {
	uint64_t cookie;
	uint64_t t0;
	int *res;
	size_t left;
	int found;
};

struct req {
	struct req *prev, *next;   /* the list it is on (where) */
	struct req *aprev, *anext; /* every live request, by deadline */
	int op, where;
	struct conn *conn;
	uint8_t key[KVS_REMOTE_KEY_MAX];
	size_t klen;
	struct iovec iov[KVS_REMOTE_IOV_MAX];
	int iovcnt;
	size_t vlen;     /* value bytes (GET: expected, SET: sent) */
	int counted;     /* vlen counts in inflight_bytes */
	const uint8_t *hp; /* wire header: hdr, or the engine's AUTH/SLOTS */
	size_t hlen;
	uint8_t hdr[HDR_BYTES];
	const char *trl; /* trailer after the value (SET: NX) */
	size_t tlen;
	size_t wire;     /* hlen + vlen (SET) + tlen */
	int replies;     /* replies still to read (ASKING adds one) */
	int redirects, resent;
	int ask_node;    /* ASK: the node to ask, else -1 */
	int node;        /* where it was sent */
	uint64_t cookie, t0, deadline;
	int res;
	struct batch *batch;
	size_t bidx;
};

struct rlist {
	struct req *head, *tail;
	size_t n;
};

struct conn {
	struct node *node;
	int fd, state, dead, pollout;
	struct rlist q;       /* sent, being sent, queued: replies come in order */
	struct req *wcur;     /* first request not fully written */
	size_t woff;          /* its bytes written */
	kvs_resp_parser *parser;
	uint8_t *rbuf;
	size_t rpos, rlen;
	struct conn *next_dead;
};

struct node {
	int idx;
	char host[KVS_SLOT_HOST_MAX];
	uint16_t port;
	struct sockaddr_storage addr;
	socklen_t alen;
	int resolved;  /* 1 ok, <0 the error */
	struct conn *conns[KVS_REMOTE_POOL_MAX];
	int nconns;
	uint64_t down_until; /* us: fail fast until then */
	int down_err;
	unsigned backoff_ms;
};

struct kvs_remote {
	char *seeds;
	char *auth_cmd;
	size_t auth_len;
	unsigned timeout_ms, connect_timeout_ms, pool;
	uint64_t max_inflight;
	kvs_remote_done_fn fn;
	void *arg;
	int open, cluster;

	int epfd, tfd;
	uint64_t armed_at; /* timerfd deadline (us), 0 none */

	struct node **nodes;
	int nnodes, cap_nodes;
	int16_t map[KVS_SLOTS];

	struct rlist wait, done;
	struct req *ahead, *atail; /* by deadline */
	size_t pending;
	struct conn *dead;

	int refreshing, refresh_wanted, refresh_rr;
	uint64_t refresh_after;

	kvs_remote_stats st;
	kvs_slot_range *ranges;
};

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* writev that never raises SIGPIPE: a node that went away is an error
 * code here, not a signal that kills the caller's process. */
static ssize_t send_iov(int fd, struct iovec *iov, int n)
{
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };

	return sendmsg(fd, &m, MSG_NOSIGNAL);
}

/* ---- lists -------------------------------------------------------------- */

static void rl_push(struct rlist *l, struct req *q)
{
	q->next = NULL;
	q->prev = l->tail;
	if (l->tail)
		l->tail->next = q;
	else
		l->head = q;
	l->tail = q;
	l->n++;
}

static void rl_del(struct rlist *l, struct req *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else
		l->head = q->next;
	if (q->next)
		q->next->prev = q->prev;
	else
		l->tail = q->prev;
	q->prev = q->next = NULL;
	l->n--;
}

/* Into the deadline list: from the tail, as deadlines mostly grow. */
static void all_add(kvs_remote *r, struct req *q)
{
	struct req *a = r->atail;

	while (a && a->deadline > q->deadline)
		a = a->aprev;
	q->aprev = a;
	q->anext = a ? a->anext : r->ahead;
	if (q->anext)
		q->anext->aprev = q;
	else
		r->atail = q;
	if (a)
		a->anext = q;
	else
		r->ahead = q;
}

static void all_del(kvs_remote *r, struct req *q)
{
	if (q->aprev)
		q->aprev->anext = q->anext;
	else
		r->ahead = q->anext;
	if (q->anext)
		q->anext->aprev = q->aprev;
	else
		r->atail = q->aprev;
	q->aprev = q->anext = NULL;
}

/* ---- settings ----------------------------------------------------------- */

int kvs_remote_create(kvs_remote **out)
{
	kvs_remote *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->timeout_ms = 1000;
	r->connect_timeout_ms = 2000;
	r->pool = 2;
	r->max_inflight = 256ull << 20;
	r->epfd = r->tfd = -1;
	for (int i = 0; i < KVS_SLOTS; i++)
		r->map[i] = -1;
	*out = r;
	return 0;
}

/* Split "HOST:PORT" (or "[V6]:PORT") of @s[@n]. */
static int parse_hostport(const char *s, size_t n, char *host, uint16_t *port)
{
	const char *colon = NULL, *h = s;
	size_t hlen;
	char num[8];
	char *end;
	long p;

	for (size_t i = n; i > 0; i--)
		if (s[i - 1] == ':') {
			colon = s + i - 1;
			break;
		}
	if (!colon)
		return -EINVAL;
	hlen = (size_t)(colon - s);
	if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	if (hlen == 0 || hlen >= KVS_SLOT_HOST_MAX ||
	    (size_t)(s + n - colon - 1) >= sizeof(num) || colon + 1 == s + n)
		return -EINVAL;
	memcpy(num, colon + 1, (size_t)(s + n - colon - 1));
	num[s + n - colon - 1] = '\0';
	p = strtol(num, &end, 10);
	if (*end || p < 1 || p > 65535)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	*port = (uint16_t)p;
	return 0;
}

int kvs_remote_set_seeds(kvs_remote *r, const char *seeds)
{
	char host[KVS_SLOT_HOST_MAX];
	uint16_t port;
	const char *s = seeds;
	char *copy;

	if (r->open)
		return -EBUSY;
	if (!seeds || !*seeds)
		return -EINVAL;
	while (*s) {
		size_t n = strcspn(s, ",");

		if (parse_hostport(s, n, host, &port) < 0)
			return -EINVAL;
		s += n;
		if (*s == ',' && !*++s)
			return -EINVAL;
	}
	copy = strdup(seeds);
	if (!copy)
		return -ENOMEM;
	free(r->seeds);
	r->seeds = copy;
	return 0;
}

int kvs_remote_set_auth(kvs_remote *r, const char *user, const char *password)
{
	const char *argv[3] = { "AUTH" };
	int argc = 1, n;
	char *buf;

	if (r->open)
		return -EBUSY;
	free(r->auth_cmd);
	r->auth_cmd = NULL;
	r->auth_len = 0;
	if (!password)
		return 0;
	if (strlen(password) > AUTH_MAX || (user && strlen(user) > AUTH_MAX))
		return -EINVAL;
	if (user)
		argv[argc++] = user;
	argv[argc++] = password;
	buf = malloc(3 * AUTH_MAX);
	if (!buf)
		return -ENOMEM;
	n = kvs_resp_encode_cmd((uint8_t *)buf, 3 * AUTH_MAX, argc, argv, NULL);
	if (n < 0) {
		free(buf);
		return -EINVAL;
	}
	r->auth_cmd = buf;
	r->auth_len = (size_t)n;
	return 0;
}

int kvs_remote_set_timeout_ms(kvs_remote *r, unsigned ms)
{
	if (r->open)
		return -EBUSY;
	if (ms < 1 || ms > 3600000)
		return -EINVAL;
	r->timeout_ms = ms;
	return 0;
}

int kvs_remote_set_connect_timeout_ms(kvs_remote *r, unsigned ms)
{
	if (r->open)
		return -EBUSY;
	if (ms < 1 || ms > 3600000)
		return -EINVAL;
	r->connect_timeout_ms = ms;
	return 0;
}

int kvs_remote_set_pool(kvs_remote *r, unsigned conns)
{
	if (r->open)
		return -EBUSY;
	if (conns < 1 || conns > KVS_REMOTE_POOL_MAX)
		return -EINVAL;
	r->pool = conns;
	return 0;
}

int kvs_remote_set_max_inflight(kvs_remote *r, uint64_t bytes)
{
	if (r->open)
		return -EBUSY;
	if (bytes < 1)
		return -EINVAL;
	r->max_inflight = bytes;
	return 0;
}

void kvs_remote_set_callback(kvs_remote *r, kvs_remote_done_fn fn, void *arg)
{
	r->fn = fn;
	r->arg = arg;
}

int kvs_remote_is_cluster(const kvs_remote *r)
{
	return r->cluster;
}

int kvs_remote_fd(const kvs_remote *r)
{
	return r->epfd;
}

size_t kvs_remote_pending(const kvs_remote *r)
{
	return r->pending;
}

/* ---- nodes -------------------------------------------------------------- */

static int resolve(struct node *n)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)&n->addr;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&n->addr;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	int rc;

	memset(&n->addr, 0, sizeof(n->addr));
	if (inet_pton(AF_INET, n->host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons(n->port);
		n->alen = sizeof(*a4);
		return 1;
	}
	if (inet_pton(AF_INET6, n->host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(n->port);
		n->alen = sizeof(*a6);
		return 1;
	}
	rc = getaddrinfo(n->host, NULL, &hints, &res);
	if (rc != 0)
		return -EHOSTUNREACH;
	memcpy(&n->addr, res->ai_addr, res->ai_addrlen);
	n->alen = res->ai_addrlen;
	if (res->ai_family == AF_INET)
		a4->sin_port = htons(n->port);
	else
		a6->sin6_port = htons(n->port);
	freeaddrinfo(res);
	return 1;
}

static int node_find(kvs_remote *r, const char *host, uint16_t port)
{
	struct node *n;

	for (int i = 0; i < r->nnodes; i++)
		if (r->nodes[i]->port == port && !strcmp(r->nodes[i]->host, host))
			return i;
	if (r->nnodes == INT16_MAX)
		return -ENOSPC;
	if (r->nnodes == r->cap_nodes) {
		int cap = r->cap_nodes ? r->cap_nodes * 2 : 8;
		struct node **v = realloc(r->nodes, (size_t)cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		r->nodes = v;
		r->cap_nodes = cap;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->idx = r->nnodes;
	snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	n->resolved = resolve(n);
	r->nodes[r->nnodes++] = n;
	r->st.nodes = (uint64_t)r->nnodes;
	return n->idx;
}

/* Take the ranges of a CLUSTER SLOTS reply from @from (a node index, for
 * ranges whose host is empty) as the whole map. */
static int map_apply(kvs_remote *r, const kvs_resp_parser *p,
		     const kvs_resp_val *v, int from)
{
	int16_t map[KVS_SLOTS];
	size_t n;
	int rc = kvs_slot_map_decode(p, v, r->ranges, MAX_RANGES, &n);

	if (rc < 0)
		return rc;
	for (int i = 0; i < KVS_SLOTS; i++)
		map[i] = -1;
	for (size_t i = 0; i < n; i++) {
		const kvs_slot_range *g = &r->ranges[i];
		const char *host = g->host;
		int idx;

		if (!*host || !strcmp(host, "?"))
			host = r->nodes[from]->host;
		idx = node_find(r, host, g->port);
		if (idx < 0)
			return idx;
		for (unsigned s = g->first; s <= g->last; s++)
			map[s] = (int16_t)idx;
	}
	memcpy(r->map, map, sizeof(map));
	r->cluster = 1;
	r->st.map_refreshes++;
	return 0;
}

static void map_single(kvs_remote *r, int node)
{
	for (int i = 0; i < KVS_SLOTS; i++)
		r->map[i] = (int16_t)node;
	r->cluster = 0;
}

static int is_no_cluster(const kvs_resp_val *v)
{
	return v->type == KVS_RESP_ERROR && v->str &&
	       strstr(v->str, "cluster support disabled");
}

/* ---- completion --------------------------------------------------------- */

static void arm_timer(kvs_remote *r, uint64_t at);

static void uncount(kvs_remote *r, struct req *q)
{
	if (q->counted) {
		r->st.inflight_bytes -= q->vlen;
		q->counted = 0;
	}
}

/* @q is on no list any more (W_NONE): queue its completion. */
static void complete(kvs_remote *r, struct req *q, int res)
{
	uncount(r, q);
	all_del(r, q);
	q->res = res;
	q->where = W_DONE;
	rl_push(&r->done, q);
	arm_timer(r, 1);
}

static void take_off(kvs_remote *r, struct req *q)
{
	if (q->where == W_WAIT) {
		rl_del(&r->wait, q);
		r->st.waiting = r->wait.n;
	} else if (q->where == W_CONN) {
		rl_del(&q->conn->q, q);
		q->conn = NULL;
	}
	q->where = W_NONE;
}

static void count(kvs_remote *r, const struct req *q, int res)
{
	kvs_remote_stats *s = &r->st;

	if (q->op == KVS_REMOTE_GET) {
		s->gets++;
		if (res == 0) {
			s->hits++;
			s->bytes_in += q->vlen;
		} else if (res == -ENOENT) {
			s->misses++;
		}
	} else if (q->op == KVS_REMOTE_SET) {
		s->sets++;
		if (res == 0) {
			s->stored++;
			s->bytes_out += q->vlen;
		} else if (res == -EEXIST) {
			s->existed++;
		}
	} else if (q->op == KVS_REMOTE_EXISTS) {
		s->exists_keys++;
	}
	switch (res) {
	case 0: case -ENOENT: case -EEXIST: case 1:
		break;
	case -ETIMEDOUT:
		s->err_timeout++;
		break;
	case -ENETDOWN:
		s->err_clusterdown++;
		break;
	case -EMSGSIZE:
		s->err_wrong_size++;
		break;
	case -ELOOP:
		s->err_redirect++;
		break;
	case -EACCES:
		s->err_auth++;
		break;
	case -EIO:
		s->err_server++;
		break;
	case -EPROTO:
		s->err_proto++;
		break;
	default:
		s->err_down++;
		break;
	}
}

static void deliver(kvs_remote *r, struct req *q, uint64_t now)
{
	kvs_remote_cqe c = { .cookie = q->cookie, .op = q->op, .res = q->res };
	uint64_t lat;
	int b = 0;

	if (q->op >= OP_AUTH) {
		if (q->op == OP_SLOTS)
			r->refreshing = 0;
		free(q);
		return;
	}
	count(r, q, q->res);
	if (q->batch) {
		struct batch *bt = q->batch;

		bt->res[q->bidx] = q->res;
		if (q->res == 1)
			bt->found++;
		free(q);
		if (--bt->left)
			return;
		c = (kvs_remote_cqe){ .cookie = bt->cookie,
				      .op = KVS_REMOTE_EXISTS,
				      .res = bt->found };
		lat = now - bt->t0;
		free(bt);
	} else {
		lat = now - q->t0;
		free(q);
	}
	c.lat_us = lat;
	while (b < KVS_REMOTE_LAT_BUCKETS - 1 && lat >= (128ull << b))
		b++;
	r->st.lat_hist[b]++;
	r->pending--;
	if (r->fn)
		r->fn(r->arg, &c);
}

/* ---- connections -------------------------------------------------------- */

static void dispatch(kvs_remote *r, struct req *q);
static void conn_flush(kvs_remote *r, struct conn *c);

static void refresh_want(kvs_remote *r)
{
	if (!r->cluster)
		return;
	r->refresh_wanted = 1;
	arm_timer(r, r->refresh_after > now_us() ? r->refresh_after : 1);
}

static void node_down(struct node *n, int err, uint64_t now)
{
	n->backoff_ms = n->backoff_ms ? n->backoff_ms * 2 : BACKOFF_MIN_MS;
	if (n->backoff_ms > BACKOFF_MAX_MS)
		n->backoff_ms = BACKOFF_MAX_MS;
	n->down_until = now + n->backoff_ms * 1000ull;
	n->down_err = err;
}

static void epoll_out(kvs_remote *r, struct conn *c, int on)
{
	struct epoll_event ev = { .events = EPOLLIN | (on ? EPOLLOUT : 0),
				  .data.ptr = c };

	if (c->pollout == on)
		return;
	c->pollout = on;
	epoll_ctl(r->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/*
 * Close @c: requests whose deadline has not passed are resent once (to the
 * node the map names now), the others complete with @err (or -ETIMEDOUT).
 * The struct is freed at the end of the poll, as callers up the stack may
 * still hold it.
 */
static void conn_fail(kvs_remote *r, struct conn *c, int err)
{
	struct node *n = c->node;
	struct rlist retry = { 0 };
	uint64_t now = now_us();
	struct req *q;

	if (c->dead)
		return;
	c->dead = 1;
	r->st.conn_failures++;
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	for (int i = 0; i < n->nconns; i++)
		if (n->conns[i] == c) {
			n->conns[i] = n->conns[--n->nconns];
			break;
		}
	if (c->state == C_CONNECTING || err == -ETIMEDOUT)
		node_down(n, err, now);
	while ((q = c->q.head) != NULL) {
		take_off(r, q);
		uncount(r, q);
		if (q->op == OP_SLOTS)
			r->refreshing = 0;
		if (q->op == OP_AUTH) {
			all_del(r, q);
			free(q);
		} else if (q->deadline <= now) {
			complete(r, q, -ETIMEDOUT);
		} else if (q->op < OP_AUTH && !q->resent && err != -EACCES &&
			   err != -EPROTO) {
			q->resent = 1;
			r->st.resent++;
			rl_push(&retry, q);
		} else {
			complete(r, q, q->op == OP_SLOTS ? 0 : err);
		}
	}
	c->next_dead = r->dead;
	r->dead = c;
	refresh_want(r);
	while ((q = retry.head) != NULL) {
		rl_del(&retry, q);
		dispatch(r, q);
	}
}

static int conn_open(kvs_remote *r, struct node *n, struct conn **out)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT };
	struct conn *c;
	int one = 1, rc;

	if (n->resolved < 0)
		return n->resolved;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->rbuf = malloc(RBUF_BYTES);
	rc = kvs_resp_parser_create(4096, &c->parser);
	if (!c->rbuf || rc < 0) {
		kvs_resp_parser_free(c->parser);
		free(c->rbuf);
		free(c);
		return -ENOMEM;
	}
	c->node = n;
	c->state = C_CONNECTING;
	c->pollout = 1;
	c->fd = socket(n->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		goto fail;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&n->addr, n->alen) < 0 &&
	    errno != EINPROGRESS)
		goto fail;
	ev.data.ptr = c;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
		goto fail;
	r->st.connects++;
	n->conns[n->nconns++] = c;
	if (r->auth_cmd) {
		struct req *a = calloc(1, sizeof(*a));

		if (!a) {
			errno = ENOMEM;
			goto fail_ep;
		}
		a->op = OP_AUTH;
		a->hp = (const uint8_t *)r->auth_cmd;
		a->hlen = a->wire = r->auth_len;
		a->replies = 1;
		a->ask_node = -1;
		a->t0 = now_us();
		a->deadline = a->t0 + r->timeout_ms * 1000ull;
		all_add(r, a);
		a->where = W_CONN;
		a->conn = c;
		rl_push(&c->q, a);
		c->wcur = a;
	}
	*out = c;
	return 0;
fail_ep:
	n->nconns--;
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, c->fd, NULL);
fail:
	rc = -errno;
	if (c->fd >= 0)
		close(c->fd);
	kvs_resp_parser_free(c->parser);
	free(c->rbuf);
	free(c);
	return rc;
}

static void conn_free(struct conn *c)
{
	kvs_resp_parser_free(c->parser);
	free(c->rbuf);
	free(c);
}

/* Write what is queued on @c, as far as the socket takes it. */
static void conn_flush(kvs_remote *r, struct conn *c)
{
	while (c->wcur && !c->dead && c->state == C_UP) {
		struct iovec iov[WRITE_IOV];
		int n = 0;
		size_t skip = c->woff;
		ssize_t w;

		for (struct req *q = c->wcur; q && n < WRITE_IOV - 2 - KVS_REMOTE_IOV_MAX;
		     q = q->next) {
			struct iovec seg[KVS_REMOTE_IOV_MAX + 2];
			int ns = 0;

			seg[ns++] = (struct iovec){ (void *)q->hp, q->hlen };
			if (q->op == KVS_REMOTE_SET)
				for (int i = 0; i < q->iovcnt; i++)
					seg[ns++] = q->iov[i];
			if (q->tlen)
				seg[ns++] = (struct iovec){ (void *)q->trl, q->tlen };
			for (int i = 0; i < ns; i++) {
				if (skip >= seg[i].iov_len) {
					skip -= seg[i].iov_len;
					continue;
				}
				iov[n].iov_base = (uint8_t *)seg[i].iov_base + skip;
				iov[n].iov_len = seg[i].iov_len - skip;
				skip = 0;
				if (iov[n].iov_len)
					n++;
			}
		}
		w = send_iov(c->fd, iov, n);
		if (w < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				epoll_out(r, c, 1);
				return;
			}
			if (errno == EINTR)
				continue;
			conn_fail(r, c, -errno);
			return;
		}
		c->woff += (size_t)w;
		while (c->wcur && c->woff >= c->wcur->wire) {
			c->woff -= c->wcur->wire;
			c->wcur = c->wcur->next;
		}
	}
	if (!c->dead && c->state == C_UP)
		epoll_out(r, c, 0);
}

/* Fill in @q's wire header for its op (and ASKING when asked). */
static void encode(kvs_remote *r, struct req *q)
{
	static const char *const names[] = { [KVS_REMOTE_GET] = "GET",
					     [KVS_REMOTE_SET] = "SET",
					     [KVS_REMOTE_EXISTS] = "EXISTS" };
	uint8_t *h = q->hdr;
	size_t cap = sizeof(q->hdr), pos = 0;
	const char *name;

	q->replies = 1;
	q->tlen = 0;
	if (q->op == OP_SLOTS) {
		q->hp = (const uint8_t *)SLOTS_CMD;
		q->hlen = q->wire = sizeof(SLOTS_CMD) - 1;
		return;
	}
	if (q->ask_node >= 0) {
		memcpy(h, ASKING_CMD, sizeof(ASKING_CMD) - 1);
		pos = sizeof(ASKING_CMD) - 1;
		q->replies = 2;
	}
	name = names[q->op];
	/* Cannot fail: HDR_BYTES holds the longest (SET, KEY_MAX key). */
	pos += (size_t)kvs_resp_encode_array(h + pos, cap - pos,
					     q->op == KVS_REMOTE_SET ? 4 : 2);
	pos += (size_t)kvs_resp_encode_bulk(h + pos, cap - pos, name, strlen(name));
	pos += (size_t)kvs_resp_encode_bulk(h + pos, cap - pos, q->key, q->klen);
	q->wire = 0;
	if (q->op == KVS_REMOTE_SET) {
		pos += (size_t)kvs_resp_encode_bulk_hdr(h + pos, cap - pos, q->vlen);
		q->trl = NX_TRAILER;
		q->tlen = sizeof(NX_TRAILER) - 1;
		q->wire = q->vlen;
	}
	q->hp = h;
	q->hlen = pos;
	q->wire += q->hlen + q->tlen;
}

/* The connection of @n that a new request should go to: the one with the
 * fewest queued, opening another while the pool allows and all are busy. */
static int pick_conn(kvs_remote *r, struct node *n, struct conn **out)
{
	struct conn *best = NULL;
	int rc;

	for (int i = 0; i < n->nconns; i++)
		if (!best || n->conns[i]->q.n < best->q.n)
			best = n->conns[i];
	if (best && (best->q.n == 0 || n->nconns >= (int)r->pool)) {
		*out = best;
		return 0;
	}
	rc = conn_open(r, n, out);
	if (rc < 0 && best) {
		*out = best;
		return 0;
	}
	return rc;
}

/* Send @q (on no list) to the node its slot (or ASK) names, or make it
 * wait for the in-flight cap, or complete it with the node's error. */
static void dispatch(kvs_remote *r, struct req *q)
{
	uint64_t now = now_us();
	struct node *n;
	struct conn *c = NULL;
	int idx, rc;

	if (q->op == OP_SLOTS) {
		idx = q->node;
	} else if (q->ask_node >= 0) {
		idx = q->ask_node;
	} else {
		idx = r->map[kvs_slot_of(q->key, q->klen)];
		if (idx < 0) {
			refresh_want(r);
			complete(r, q, -ENETDOWN);
			return;
		}
	}
	n = r->nodes[idx];
	if (now < n->down_until && n->nconns == 0) {
		complete(r, q, n->down_err ? n->down_err : -ECONNREFUSED);
		return;
	}
	if (q->vlen && r->st.inflight_bytes &&
	    r->st.inflight_bytes + q->vlen > r->max_inflight) {
		q->where = W_WAIT;
		rl_push(&r->wait, q);
		r->st.waiting = r->wait.n;
		return;
	}
	rc = pick_conn(r, n, &c);
	if (rc < 0) {
		node_down(n, rc, now);
		refresh_want(r);
		complete(r, q, rc);
		return;
	}
	q->node = idx;
	encode(r, q);
	q->where = W_CONN;
	q->conn = c;
	rl_push(&c->q, q);
	if (!c->wcur) {
		c->wcur = q;
		c->woff = 0;
	}
	if (q->vlen) {
		q->counted = 1;
		r->st.inflight_bytes += q->vlen;
	}
	conn_flush(r, c);
}

/* Redirect "MOVED|ASK SLOT HOST:PORT": the node, or <0 when malformed. */
static int redirect_node(kvs_remote *r, const char *s, unsigned *slot)
{
	const char *sp = strchr(s, ' '), *sp2;
	char host[KVS_SLOT_HOST_MAX];
	uint16_t port;
	char *end;
	long v;

	if (!sp)
		return -EPROTO;
	v = strtol(sp + 1, &end, 10);
	if (end == sp + 1 || *end != ' ' || v < 0 || v >= KVS_SLOTS)
		return -EPROTO;
	sp2 = end + 1;
	if (parse_hostport(sp2, strlen(sp2), host, &port) < 0)
		return -EPROTO;
	*slot = (unsigned)v;
	return node_find(r, host, port);
}

static int prefix(const char *s, const char *p)
{
	return !strncmp(s, p, strlen(p));
}

/* An error reply @e to @q (taken off its connection): redirect or fail. */
static void on_error(kvs_remote *r, struct conn *c, struct req *q,
		     const kvs_resp_val *e)
{
	const char *s = e->str ? e->str : "";
	unsigned slot;
	int idx;

	if (prefix(s, "MOVED ") || prefix(s, "ASK ")) {
		int ask = s[0] == 'A';

		idx = redirect_node(r, s, &slot);
		if (idx < 0) {
			complete(r, q, -EPROTO);
			return;
		}
		if (++q->redirects > KVS_REMOTE_REDIRECTS) {
			complete(r, q, -ELOOP);
			return;
		}
		if (ask) {
			r->st.ask++;
			q->ask_node = idx;
		} else {
			r->st.moved++;
			r->map[slot] = (int16_t)idx;
			q->ask_node = -1;
			refresh_want(r);
		}
		dispatch(r, q);
		return;
	}
	if (prefix(s, "TRYAGAIN") && ++q->redirects <= KVS_REMOTE_REDIRECTS) {
		dispatch(r, q);
		return;
	}
	if (prefix(s, "CLUSTERDOWN")) {
		refresh_want(r);
		complete(r, q, -ENETDOWN);
	} else if (prefix(s, "NOAUTH") || prefix(s, "NOPERM") ||
		   prefix(s, "WRONGPASS")) {
		complete(r, q, -EACCES);
	} else {
		complete(r, q, -EIO);
	}
	(void)c;
}

/* The complete reply @v for the head of @c. */
static void on_reply(kvs_remote *r, struct conn *c, const kvs_resp_parser *p,
		     const kvs_resp_val *v)
{
	struct req *q = c->q.head;
	int res;

	if (!q || q == c->wcur) { /* a reply to nothing we sent */
		conn_fail(r, c, -EPROTO);
		return;
	}
	if (--q->replies > 0) /* ASKING's +OK */
		return;
	take_off(r, q);
	uncount(r, q);
	q->ask_node = -1;
	if (q->op == OP_AUTH) {
		all_del(r, q);
		free(q);
		if (v->type != KVS_RESP_STATUS)
			conn_fail(r, c, -EACCES);
		return;
	}
	if (q->op == OP_SLOTS) {
		r->refreshing = 0;
		if (v->type == KVS_RESP_ARRAY)
			map_apply(r, p, v, q->node);
		complete(r, q, 0);
		return;
	}
	if (v->type == KVS_RESP_ERROR) {
		on_error(r, c, q, v);
		return;
	}
	res = -EPROTO;
	switch (q->op) {
	case KVS_REMOTE_GET:
		if (v->type == KVS_RESP_NIL)
			res = -ENOENT;
		else if (v->type == KVS_RESP_BULK)
			res = v->flags & KVS_RESP_DIRECT ? 0 : -EMSGSIZE;
		break;
	case KVS_REMOTE_SET:
		if (v->type == KVS_RESP_NIL)
			res = -EEXIST;
		else if (v->type == KVS_RESP_STATUS)
			res = 0;
		break;
	case KVS_REMOTE_EXISTS:
		if (v->type == KVS_RESP_INT)
			res = v->n > 0;
		break;
	}
	complete(r, q, res);
}

/* What the parser should expect for the next reply on @c. */
static void expect_head(struct conn *c)
{
	struct req *q = c->q.head;

	if (q && q->op == KVS_REMOTE_GET && q->replies == 1 && q != c->wcur)
		kvs_resp_expect(c->parser, q->iov, q->iovcnt);
	else
		kvs_resp_expect(c->parser, NULL, 0);
}

static void conn_read(kvs_remote *r, struct conn *c)
{
	size_t budget = READ_BUDGET;

	while (!c->dead) {
		struct iovec dv[KVS_REMOTE_IOV_MAX];
		ssize_t n;
		int nd;

		while (c->rpos < c->rlen && !c->dead) {
			size_t used;
			int rc;

			expect_head(c); /* -EBUSY in mid-reply: keeps the last */
			rc = kvs_resp_parse(c->parser, c->rbuf + c->rpos,
					    c->rlen - c->rpos, &used);
			c->rpos += used;
			if (rc < 0) {
				conn_fail(r, c, -EPROTO);
				return;
			}
			if (rc == 1)
				on_reply(r, c, c->parser, kvs_resp_reply(c->parser));
		}
		if (c->dead || budget == 0)
			return;
		c->rpos = c->rlen = 0;
		nd = kvs_resp_direct(c->parser, dv, KVS_REMOTE_IOV_MAX);
		if (nd > 0)
			n = readv(c->fd, dv, nd);
		else
			n = read(c->fd, c->rbuf, RBUF_BYTES);
		if (n > 0) {
			budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
			if (nd > 0)
				kvs_resp_direct_done(c->parser, (size_t)n);
			else
				c->rlen = (size_t)n;
			if (nd > 0) {
				/* The payload may have just ended: let the
				 * parser see the CRLF and complete. */
				continue;
			}
			continue;
		}
		if (n == 0) {
			conn_fail(r, c, -ECONNRESET);
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			conn_fail(r, c, -errno);
		return;
	}
}

static void conn_event(kvs_remote *r, struct conn *c, uint32_t ev)
{
	if (c->dead)
		return;
	if (c->state == C_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);

		if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		if (err) {
			conn_fail(r, c, -err);
			return;
		}
		c->state = C_UP;
		c->node->backoff_ms = 0;
		c->node->down_until = 0;
		conn_flush(r, c);
		return;
	}
	if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
		conn_read(r, c);
	if (!c->dead && (ev & EPOLLOUT))
		conn_flush(r, c);
}

/* ---- timer, refresh, poll ------------------------------------------------ */

/* Make the fd readable at @at (us, monotonic; 1 = now) unless it already
 * will be sooner. */
static void arm_timer(kvs_remote *r, uint64_t at)
{
	struct itimerspec its = { 0 };

	if (r->tfd < 0 || (r->armed_at && r->armed_at <= at))
		return;
	r->armed_at = at;
	its.it_value.tv_sec = (time_t)(at / 1000000u);
	its.it_value.tv_nsec = (long)(at % 1000000u) * 1000;
	if (at == 1)
		its.it_value.tv_nsec = 1;
	timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void refresh_start(kvs_remote *r, uint64_t now)
{
	struct req *q;

	if (!r->refresh_wanted || r->refreshing || now < r->refresh_after ||
	    r->nnodes == 0)
		return;
	/* Ask the nodes in turn, skipping those known down. */
	for (int i = 0; i < r->nnodes; i++) {
		int idx = (r->refresh_rr + i) % r->nnodes;

		if (r->nodes[idx]->down_until <= now) {
			r->refresh_rr = idx;
			break;
		}
	}
	q = calloc(1, sizeof(*q));
	if (!q)
		return;
	q->op = OP_SLOTS;
	q->node = r->refresh_rr;
	q->ask_node = -1;
	r->refresh_rr = (r->refresh_rr + 1) % r->nnodes;
	q->t0 = now;
	q->deadline = now + r->timeout_ms * 1000ull;
	all_add(r, q);
	r->refresh_wanted = 0;
	r->refreshing = 1;
	r->refresh_after = now + REFRESH_GAP_US;
	dispatch(r, q);
}

static void expire(kvs_remote *r, uint64_t now)
{
	struct req *q;

	while ((q = r->ahead) != NULL && q->deadline <= now) {
		if (q->where == W_CONN) {
			conn_fail(r, q->conn, -ETIMEDOUT);
			continue; /* it completed q, with -ETIMEDOUT */
		}
		take_off(r, q);
		if (q->op == OP_SLOTS)
			r->refreshing = 0;
		complete(r, q, -ETIMEDOUT);
	}
}

static void drain_wait(kvs_remote *r)
{
	struct req *q;

	while ((q = r->wait.head) != NULL &&
	       (!r->st.inflight_bytes ||
		r->st.inflight_bytes + q->vlen <= r->max_inflight)) {
		take_off(r, q);
		dispatch(r, q);
	}
}

int kvs_remote_poll(kvs_remote *r)
{
	struct epoll_event evs[64];
	int n, delivered = 0;
	uint64_t now;
	struct req *q;
	struct conn *c;

	if (!r->open)
		return 0;
	n = epoll_wait(r->epfd, evs, 64, 0);
	for (int i = 0; i < n; i++) {
		if (evs[i].data.ptr == NULL) {
			uint64_t x;

			if (read(r->tfd, &x, sizeof(x)) < 0) {
				/* EAGAIN: disarmed meanwhile */
			}
			r->armed_at = 0;
			continue;
		}
		conn_event(r, evs[i].data.ptr, evs[i].events);
	}
	now = now_us();
	expire(r, now);
	refresh_start(r, now);
	drain_wait(r);
	while ((q = r->done.head) != NULL) {
		rl_del(&r->done, q);
		if (q->op < OP_AUTH)
			delivered++;
		deliver(r, q, now);
		drain_wait(r);
	}
	while ((c = r->dead) != NULL) {
		r->dead = c->next_dead;
		conn_free(c);
	}
	/* Whatever fires next: the oldest deadline, a wanted refresh. */
	r->armed_at = 0;
	{
		struct itimerspec off = { 0 };
		uint64_t at = r->ahead ? r->ahead->deadline : 0;

		if (r->refresh_wanted && !r->refreshing &&
		    (!at || r->refresh_after < at))
			at = r->refresh_after > now ? r->refresh_after : 1;
		if (r->done.head)
			at = 1;
		timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &off, NULL);
		if (at)
			arm_timer(r, at);
	}
	return delivered;
}

int kvs_remote_wait(kvs_remote *r, int timeout_ms)
{
	uint64_t end = now_us() + (uint64_t)timeout_ms * 1000u;

	for (;;) {
		struct pollfd pfd = { .fd = r->epfd, .events = POLLIN };
		uint64_t now;

		kvs_remote_poll(r);
		if (!r->pending)
			return 0;
		now = now_us();
		if (now >= end)
			return -ETIMEDOUT;
		poll(&pfd, 1, (int)((end - now + 999) / 1000));
	}
}

/* ---- submit -------------------------------------------------------------- */

static struct req *req_new(kvs_remote *r, int op, const void *key, size_t klen,
			   uint64_t cookie, uint64_t now)
{
	struct req *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->op = op;
	memcpy(q->key, key, klen);
	q->klen = klen;
	q->cookie = cookie;
	q->ask_node = -1;
	q->t0 = now;
	q->deadline = now + r->timeout_ms * 1000ull;
	return q;
}

static int submit_kv(kvs_remote *r, int op, const void *key, size_t klen,
		     const struct iovec *iov, int iovcnt, uint64_t cookie)
{
	struct req *q;

	if (!r->open || !key || klen == 0 || klen > KVS_REMOTE_KEY_MAX ||
	    iovcnt < 1 || iovcnt > KVS_REMOTE_IOV_MAX || !iov)
		return -EINVAL;
	q = req_new(r, op, key, klen, cookie, now_us());
	if (!q)
		return -ENOMEM;
	memcpy(q->iov, iov, (size_t)iovcnt * sizeof(*iov));
	q->iovcnt = iovcnt;
	for (int i = 0; i < iovcnt; i++)
		q->vlen += iov[i].iov_len;
	all_add(r, q);
	r->pending++;
	dispatch(r, q);
	if (r->ahead)
		arm_timer(r, r->ahead->deadline);
	return 0;
}

int kvs_remote_get(kvs_remote *r, const void *key, size_t klen,
		   const struct iovec *iov, int iovcnt, uint64_t cookie)
{
	return submit_kv(r, KVS_REMOTE_GET, key, klen, iov, iovcnt, cookie);
}

int kvs_remote_set_nx(kvs_remote *r, const void *key, size_t klen,
		      const struct iovec *iov, int iovcnt, uint64_t cookie)
{
	return submit_kv(r, KVS_REMOTE_SET, key, klen, iov, iovcnt, cookie);
}

int kvs_remote_exists(kvs_remote *r, const void *const *keys,
		      const size_t *klens, size_t n, int *res, uint64_t cookie)
{
	struct batch *b;
	uint64_t now = now_us();

	if (!r->open || n == 0 || !keys || !klens || !res)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!keys[i] || klens[i] == 0 || klens[i] > KVS_REMOTE_KEY_MAX)
			return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->cookie = cookie;
	b->t0 = now;
	b->res = res;
	b->left = n;
	/* Build all first, so that a failed allocation leaves nothing sent. */
	{
		struct rlist l = { 0 };
		struct req *q;

		for (size_t i = 0; i < n; i++) {
			q = req_new(r, KVS_REMOTE_EXISTS, keys[i], klens[i], 0, now);
			if (!q) {
				while ((q = l.head) != NULL) {
					rl_del(&l, q);
					free(q);
				}
				free(b);
				return -ENOMEM;
			}
			q->batch = b;
			q->bidx = i;
			rl_push(&l, q);
		}
		r->pending++;
		while ((q = l.head) != NULL) {
			rl_del(&l, q);
			all_add(r, q);
			dispatch(r, q);
		}
	}
	arm_timer(r, r->ahead ? r->ahead->deadline : 1);
	return 0;
}

void kvs_remote_get_stats(const kvs_remote *r, kvs_remote_stats *out)
{
	*out = r->st;
}

/* ---- open / close ---------------------------------------------------------- */

/* Blocking exchange with one seed: connect, AUTH, CLUSTER SLOTS. */
static int seed_try(kvs_remote *r, int idx)
{
	struct node *n = r->nodes[idx];
	uint64_t end = now_us() + r->connect_timeout_ms * 1000ull;
	kvs_resp_parser *p = NULL;
	uint8_t buf[4096];
	int fd, rc, want = r->auth_cmd ? 2 : 1, got = 0;
	struct iovec out[2];
	int nout = 0;

	if (n->resolved < 0)
		return n->resolved;
	fd = socket(n->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	rc = kvs_resp_parser_create(1024, &p);
	if (rc < 0)
		goto out;
	if (connect(fd, (struct sockaddr *)&n->addr, n->alen) < 0 &&
	    errno != EINPROGRESS) {
		rc = -errno;
		goto out;
	}
	if (r->auth_cmd)
		out[nout++] = (struct iovec){ r->auth_cmd, r->auth_len };
	out[nout++] = (struct iovec){ (void *)SLOTS_CMD, sizeof(SLOTS_CMD) - 1 };
	rc = 0;
	for (int sent = 0; got < want;) {
		struct pollfd pfd = { .fd = fd, .events = sent ? POLLIN : POLLOUT };
		uint64_t now = now_us();
		ssize_t k;

		if (now >= end) {
			rc = -ETIMEDOUT;
			break;
		}
		if (poll(&pfd, 1, (int)((end - now + 999) / 1000)) <= 0)
			continue;
		if (!sent) {
			int err = 0;
			socklen_t len = sizeof(err);

			getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
			if (err) {
				rc = -err;
				break;
			}
			/* Small: one writev on a fresh socket takes it all. */
			if (send_iov(fd, out, nout) < 0) {
				rc = -errno;
				break;
			}
			sent = 1;
			continue;
		}
		k = read(fd, buf, sizeof(buf));
		if (k == 0) {
			rc = -ECONNRESET;
			break;
		}
		if (k < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		for (size_t pos = 0; pos < (size_t)k && got < want;) {
			size_t used;
			const kvs_resp_val *v;

			rc = kvs_resp_parse(p, buf + pos, (size_t)k - pos, &used);
			pos += used;
			if (rc < 0)
				goto out;
			if (rc == 0)
				continue;
			rc = 0;
			v = kvs_resp_reply(p);
			if (++got < want) { /* AUTH's reply */
				if (v->type != KVS_RESP_STATUS) {
					rc = -EACCES;
					goto out;
				}
				continue;
			}
			if (is_no_cluster(v))
				map_single(r, idx);
			else if (v->type == KVS_RESP_ARRAY)
				rc = map_apply(r, p, v, idx);
			else
				rc = v->str && (prefix(v->str, "NOAUTH") ||
						prefix(v->str, "NOPERM"))
					     ? -EACCES
					     : -EPROTO;
			goto out;
		}
	}
out:
	kvs_resp_parser_free(p);
	close(fd);
	return rc;
}

int kvs_remote_open(kvs_remote *r)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	const char *s;
	int rc = -EINVAL, nseeds = 0;

	if (r->open)
		return -EBUSY;
	if (!r->seeds)
		return -EINVAL;
	r->ranges = malloc(MAX_RANGES * sizeof(*r->ranges));
	if (!r->ranges)
		return -ENOMEM;
	for (s = r->seeds; *s;) {
		char host[KVS_SLOT_HOST_MAX];
		uint16_t port;
		size_t n = strcspn(s, ",");
		int idx;

		if (parse_hostport(s, n, host, &port) == 0) {
			idx = node_find(r, host, port);
			if (idx < 0)
				return idx;
			nseeds++;
		}
		s += n;
		if (*s == ',')
			s++;
	}
	/* Seeds are nodes 0..nseeds-1 (node_find dedups, so maybe fewer). */
	for (int i = 0; i < r->nnodes && i < nseeds; i++) {
		rc = seed_try(r, i);
		if (rc == 0 || rc == -EACCES)
			break;
	}
	if (rc < 0)
		return rc;
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (r->epfd < 0 || r->tfd < 0 ||
	    epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->tfd, &ev) < 0) {
		rc = -errno;
		if (r->epfd >= 0)
			close(r->epfd);
		if (r->tfd >= 0)
			close(r->tfd);
		r->epfd = r->tfd = -1;
		return rc;
	}
	r->open = 1;
	return 0;
}

void kvs_remote_close(kvs_remote *r)
{
	struct req *q;
	struct conn *c;

	if (!r)
		return;
	for (int i = 0; i < r->nnodes; i++) {
		struct node *n = r->nodes[i];

		for (int j = 0; j < n->nconns; j++) {
			c = n->conns[j];
			close(c->fd);
			while ((q = c->q.head) != NULL) {
				rl_del(&c->q, q);
				q->where = W_NONE;
			}
			conn_free(c);
		}
		free(n);
	}
	while ((c = r->dead) != NULL) {
		r->dead = c->next_dead;
		conn_free(c);
	}
	/* Every live request is on the deadline list or the done list. */
	while ((q = r->ahead) != NULL) {
		all_del(r, q);
		if (q->batch && --q->batch->left == 0)
			free(q->batch);
		free(q);
	}
	while ((q = r->done.head) != NULL) {
		rl_del(&r->done, q);
		if (q->batch && --q->batch->left == 0)
			free(q->batch);
		free(q);
	}
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->tfd >= 0)
		close(r->tfd);
	free(r->nodes);
	free(r->ranges);
	free(r->seeds);
	free(r->auth_cmd);
	free(r);
}
