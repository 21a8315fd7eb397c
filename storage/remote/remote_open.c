/* remote_open.c - the Redis Cluster client engine's settings, open (the
 * seeds and the slot map) and close (see kvs_remote.h). */
#include "remote_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

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
	for (int i = 0; i < NODE_HASH; i++)
		r->hash[i] = -1;
	r->nodes = calloc(KVS_REMOTE_NODES_MAX, sizeof(*r->nodes));
	if (!r->nodes) {
		free(r);
		return -ENOMEM;
	}
	*out = r;
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

		if (kvs_rmt_parse_hostport(s, n, host, &port) < 0)
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

/* The AUTH command holds the password: wiped before it is freed. */
void kvs_rmt_auth_free(kvs_remote *r)
{
	if (r->auth_cmd)
		explicit_bzero(r->auth_cmd, r->auth_len);
	free(r->auth_cmd);
	r->auth_cmd = NULL;
	r->auth_len = 0;
}

int kvs_remote_set_auth(kvs_remote *r, const char *user, const char *password)
{
	const char *argv[3] = { "AUTH" };
	int argc = 1, n;
	char *buf;

	if (r->open)
		return -EBUSY;
	kvs_rmt_auth_free(r);
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
		explicit_bzero(buf, 3 * AUTH_MAX);
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

void kvs_remote_set_event_fn(kvs_remote *r, kvs_remote_event_fn fn, void *arg)
{
	r->ev_fn = fn;
	r->ev_arg = arg;
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

/* ---- open / close ---------------------------------------------------------- */

/* A non-blocking socket connecting to node @idx: its fd, or -errno. */
static int seed_connect(struct node *n)
{
	int fd;

	if (n->resolved == 0)
		n->resolved = kvs_rmt_resolve_sync(n);
	if (n->resolved < 0)
		return n->resolved;
	fd = socket(n->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&n->addr, n->alen) < 0 &&
	    errno != EINPROGRESS) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	return fd;
}

/* The seed's answer to CLUSTER SLOTS: the slot map, or one plain node. */
static int seed_slots(kvs_remote *r, kvs_resp_parser *p, const kvs_resp_val *v,
		      int idx)
{
	if (is_no_cluster(v)) {
		kvs_rmt_map_single(r, idx);
		return 0;
	}
	if (v->type == KVS_RESP_ARRAY)
		return kvs_rmt_map_apply(r, p, v, idx);
	return v->str && (prefix(v->str, "NOAUTH") || prefix(v->str, "NOPERM"))
		       ? -EACCES : -EPROTO;
}

/* Replies in @buf[@k]: 1 when the last one was handled (*rc its result),
 * 0 for more to read. */
static int seed_replies(kvs_remote *r, kvs_resp_parser *p, const uint8_t *buf,
			size_t k, int idx, int *got, int want, int *rc)
{
	for (size_t pos = 0; pos < k && *got < want;) {
		size_t used;
		const kvs_resp_val *v;

		*rc = kvs_resp_parse(p, buf + pos, k - pos, &used);
		pos += used;
		if (*rc < 0)
			return 1;
		if (*rc == 0)
			continue;
		v = kvs_resp_reply(p);
		if (++*got < want) { /* AUTH's reply */
			*rc = v->type == KVS_RESP_STATUS ? 0 : -EACCES;
			if (*rc < 0)
				return 1;
			continue;
		}
		*rc = seed_slots(r, p, v, idx);
		return 1;
	}
	*rc = 0;
	return 0;
}

/* Wait until @fd has @ev or @end (us) passed: 0, -ETIMEDOUT, -errno. */
static int seed_wait(int fd, short ev, uint64_t end)
{
	struct pollfd pfd = { .fd = fd, .events = ev };

	for (;;) {
		uint64_t now = now_us();
		int k;

		if (now >= end)
			return -ETIMEDOUT;
		k = poll(&pfd, 1, (int)((end - now + 999) / 1000));
		if (k > 0)
			return 0;
		if (k < 0 && errno != EINTR)
			return -errno;
	}
}

/* What a TLS call's -EAGAIN/-EINPROGRESS waits for, else its error. */
static int seed_tls_wait(int fd, int rc, uint64_t end)
{
	if (rc == -EAGAIN)
		return seed_wait(fd, POLLIN, end);
	if (rc == -EINPROGRESS)
		return seed_wait(fd, POLLOUT, end);
	return rc;
}

/* The TLS handshake with seed @n on connected @fd (verified: nothing is
 * sent before it is, AUTH least of all). */
static int seed_tls(kvs_remote *r, const struct node *n, int fd, uint64_t end,
		    struct ssl_st **out)
{
	int rc = kvs_rmt_tls_new(r, n, fd, out);

	while (rc == 0) {
		rc = kvs_rmt_tls_handshake(r, *out, n);
		if (rc == 0)
			return 0;
		rc = seed_tls_wait(fd, rc, end);
	}
	return rc;
}

/* Send @len bytes of @buf to the seed: 0 or the error. */
static int seed_send(kvs_remote *r, int fd, struct ssl_st *s, const uint8_t *buf,
		     size_t len, uint64_t end)
{
	ssize_t w;

	while (len) {
		int rc;

		if (s) {
			w = kvs_rmt_tls_write(r, s, buf, len);
		} else {
			w = send(fd, buf, len, MSG_NOSIGNAL);
			if (w < 0)
				w = errno == EAGAIN || errno == EINTR ? -EINPROGRESS
								      : -errno;
		}
		if (w > 0) {
			buf += w;
			len -= (size_t)w;
			continue;
		}
		rc = seed_tls_wait(fd, (int)w, end);
		if (rc < 0)
			return rc;
	}
	/* the records the socket BIO gathered */
	while (s && (w = kvs_rmt_tls_send(s)) < 0) {
		int rc = w == -EAGAIN ? seed_tls_wait(fd, -EINPROGRESS, end) : (int)w;

		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Blocking exchange with one seed: connect, TLS, AUTH, CLUSTER SLOTS. */
static int seed_try(kvs_remote *r, int idx)
{
	uint64_t end = now_us() + r->connect_timeout_ms * 1000ull;
	struct node *n = r->nodes[idx];
	kvs_resp_parser *p = NULL;
	struct ssl_st *ssl = NULL;
	uint8_t buf[4096], *cmd;
	int fd, rc, want = r->auth_cmd ? 2 : 1, got = 0, err = 0, shook = 0;
	socklen_t len = sizeof(err);
	size_t clen = 0;

	fd = seed_connect(n);
	if (fd < 0)
		return fd;
	cmd = malloc(r->auth_len + sizeof(SLOTS_CMD));
	rc = kvs_resp_parser_create(1024, &p);
	if (!cmd)
		rc = -ENOMEM;
	if (rc == 0)
		rc = seed_wait(fd, POLLOUT, end);
	if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err)
		rc = -err;
	if (rc == 0 && r->tls)
		shook = (rc = seed_tls(r, n, fd, end, &ssl)) == 0;
	if (rc == 0) {
		if (r->auth_cmd)
			memcpy(cmd, r->auth_cmd, r->auth_len);
		clen = r->auth_len;
		memcpy(cmd + clen, SLOTS_CMD, sizeof(SLOTS_CMD) - 1);
		clen += sizeof(SLOTS_CMD) - 1;
		rc = seed_send(r, fd, ssl, cmd, clen, end);
	}
	while (rc == 0 && got < want) {
		ssize_t k;

		if (ssl) {
			k = kvs_rmt_tls_read(r, ssl, buf, sizeof(buf));
		} else {
			k = read(fd, buf, sizeof(buf));
			if (k < 0)
				k = errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
		}
		if (k == 0)
			rc = -ECONNRESET;
		else if (k < 0)
			rc = seed_tls_wait(fd, (int)k, end);
		else if (seed_replies(r, p, buf, (size_t)k, idx, &got, want, &rc))
			break;
	}
	/* A TLS port closes on a plain client's first bytes: say so. */
	if (rc < 0 && !r->last_err[0])
		snprintf(r->last_err, sizeof(r->last_err), "seed %s:%u: %s%s", n->host,
			 n->port, strerror(-rc),
			 rc == -ECONNRESET && !r->tls && got == 0
				 ? " before any reply (a TLS port, and TLS is off?)" : "");
	/* TLS 1.3: a node that wants a client certificate says so only
	 * after the handshake, by closing. */
	if (rc < 0 && shook && got == 0 && !r->tls_client_cert) {
		size_t l = strlen(r->last_err);

		snprintf(r->last_err + l, sizeof(r->last_err) - l,
			 " (after the handshake, before any reply: does the node "
			 "require a client certificate?)");
	}
	/* Both closes are settings to fix, not a node away for a while: a
	 * plain client on a TLS port (-EPROTO), a node that wants a client
	 * certificate (-EACCES); the daemon's start stops on them. */
	if (rc == -ECONNRESET && got == 0 && (!r->tls || (shook && !r->tls_client_cert)))
		rc = r->tls ? -EACCES : -EPROTO;
	if (cmd)
		explicit_bzero(cmd, clen);
	free(cmd);
	if (ssl)
		kvs_rmt_tls_close(ssl);
	kvs_resp_parser_free(p);
	close(fd);
	return rc;
}

/* The seeds as nodes 0..: their count (node_find dedups, so maybe fewer
 * than named), or -errno. */
static int seeds_add(kvs_remote *r)
{
	int nseeds = 0;

	if (!r->ranges) /* open may be tried again after a failure */
		r->ranges = malloc(MAX_RANGES * sizeof(*r->ranges));
	if (!r->ranges)
		return -ENOMEM;
	for (const char *s = r->seeds; *s;) {
		char host[KVS_SLOT_HOST_MAX];
		uint16_t port;
		size_t n = strcspn(s, ",");
		int idx;

		if (kvs_rmt_parse_hostport(s, n, host, &port) == 0) {
			idx = kvs_rmt_node_find(r, host, port);
			if (idx < 0)
				return idx;
			r->nodes[idx]->seed = 1;
			if (idx >= nseeds)
				nseeds = idx + 1;
		}
		s += n;
		if (*s == ',')
			s++;
	}
	return nseeds;
}

/* The epoll and timer fds: open from here on. */
static int fds_open(kvs_remote *r)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	int rc;

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

/* What open and attach check first: the seeds as nodes (their count). */
static int open_seeds(kvs_remote *r)
{
	if (r->open)
		return -EBUSY;
	if (!r->seeds)
		return -EINVAL;
	return seeds_add(r);
}

int kvs_remote_open(kvs_remote *r)
{
	int rc = -EINVAL, nseeds = open_seeds(r);

	if (nseeds < 0)
		return nseeds;
	for (int i = 0; i < nseeds; i++) {
		r->last_err[0] = '\0';
		rc = seed_try(r, i);
		if (rc == 0 || rc == -EACCES)
			break;
	}
	if (rc < 0)
		return rc;
	rc = fds_open(r);
	if (rc == 0)
		r->st.attached = 1;
	return rc;
}

int kvs_remote_attach(kvs_remote *r)
{
	int nseeds = open_seeds(r), rc;

	if (nseeds < 0)
		return nseeds;
	rc = fds_open(r);
	if (rc < 0)
		return rc;
	r->attaching = 1;
	r->attach_ms = 0;
	r->refresh_wanted = 1;
	r->refresh_after = 0;
	r->refresh_rr = 0;
	kvs_rmt_arm_timer(r, 1);
	return 0;
}

void kvs_remote_close(kvs_remote *r)
{
	struct req *q;
	struct conn *c;

	if (!r)
		return;
	kvs_rmt_resolve_stop(r);
	for (int i = 0; i < r->nnodes; i++) {
		struct node *n = r->nodes[i];

		if (!n)
			continue;
		for (int j = 0; j < n->nconns; j++) {
			c = n->conns[j];
			close(c->fd);
			while ((q = c->q.head) != NULL) {
				rl_del(&c->q, q);
				q->where = W_NONE;
			}
			kvs_rmt_conn_free(c);
		}
		free(n);
	}
	while ((c = r->dead) != NULL) {
		r->dead = c->next_dead;
		kvs_rmt_conn_free(c);
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
	kvs_rmt_auth_free(r);
	kvs_rmt_tls_free(r);
	free(r);
}
