/* remote.c - the Redis Cluster client engine: settings, open, submit, poll
 * and completions (see kvs_remote.h; connections are in remote_conn.c). */
#include "remote_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
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
static void auth_free(kvs_remote *r)
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
	auth_free(r);
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

/* ---- completion --------------------------------------------------------- */

void kvs_rmt_uncount(kvs_remote *r, struct req *q)
{
	if (q->counted) {
		r->st.inflight_bytes -= q->vlen;
		q->counted = 0;
	}
}

/* @q is on no list any more (W_NONE): queue its completion. */
void kvs_rmt_complete(kvs_remote *r, struct req *q, int res)
{
	kvs_rmt_uncount(r, q);
	all_del(r, q);
	q->res = res;
	q->where = W_DONE;
	rl_push(&r->done, q);
	kvs_rmt_arm_timer(r, 1);
}

void kvs_rmt_take_off(kvs_remote *r, struct req *q)
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

/* ---- timer, refresh, poll ------------------------------------------------ */

/* Make the fd readable at @at (us, monotonic; 1 = now) unless it already
 * will be sooner. */
void kvs_rmt_arm_timer(kvs_remote *r, uint64_t at)
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
	kvs_rmt_dispatch(r, q);
}

static void expire(kvs_remote *r, uint64_t now)
{
	struct req *q;

	while ((q = r->ahead) != NULL && q->deadline <= now) {
		if (q->where == W_CONN) {
			kvs_rmt_conn_fail(r, q->conn, -ETIMEDOUT);
			continue; /* it completed q, with -ETIMEDOUT */
		}
		kvs_rmt_take_off(r, q);
		if (q->op == OP_SLOTS)
			r->refreshing = 0;
		kvs_rmt_complete(r, q, -ETIMEDOUT);
	}
}

static void drain_wait(kvs_remote *r)
{
	struct req *q;

	while ((q = r->wait.head) != NULL &&
	       (!r->st.inflight_bytes ||
		r->st.inflight_bytes + q->vlen <= r->max_inflight)) {
		kvs_rmt_take_off(r, q);
		q->from_wait = 1;
		kvs_rmt_dispatch(r, q);
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
		kvs_rmt_conn_event(r, evs[i].data.ptr, evs[i].events);
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
		kvs_rmt_conn_free(c);
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
			kvs_rmt_arm_timer(r, at);
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
	kvs_rmt_dispatch(r, q);
	if (r->ahead)
		kvs_rmt_arm_timer(r, r->ahead->deadline);
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
			kvs_rmt_dispatch(r, q);
		}
	}
	kvs_rmt_arm_timer(r, r->ahead ? r->ahead->deadline : 1);
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
				kvs_rmt_map_single(r, idx);
			else if (v->type == KVS_RESP_ARRAY)
				rc = kvs_rmt_map_apply(r, p, v, idx);
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
	if (!r->ranges) /* open may be tried again after a failure */
		r->ranges = malloc(MAX_RANGES * sizeof(*r->ranges));
	if (!r->ranges)
		return -ENOMEM;
	for (s = r->seeds; *s;) {
		char host[KVS_SLOT_HOST_MAX];
		uint16_t port;
		size_t n = strcspn(s, ",");
		int idx;

		if (kvs_rmt_parse_hostport(s, n, host, &port) == 0) {
			idx = kvs_rmt_node_find(r, host, port);
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
	auth_free(r);
	free(r);
}
