/* remote.c - the Redis Cluster client engine: submit, poll and completions
 * (see kvs_remote.h; settings, open and close are in remote_open.c,
 * connections in remote_conn.c). */
#include "remote_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

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
	} else if (q->where == W_UNTRUSTED) {
		rl_del(&r->untrusted, q);
	}
	q->where = W_NONE;
}

/* A map refresh finished: requests redirected to a node that was not in
 * the map go where the map says now (the node, when the map names it). */
static void untrusted_retry(kvs_remote *r)
{
	struct rlist l = r->untrusted;
	struct req *q;

	r->untrusted = (struct rlist){ 0 };
	for (q = l.head; q; q = q->next)
		q->where = W_NONE;
	while ((q = l.head) != NULL) {
		l.head = q->next;
		q->prev = q->next = NULL;
		kvs_rmt_dispatch(r, q);
	}
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
		int slots = q->op == OP_SLOTS;

		free(q);
		if (slots) {
			r->refreshing = 0;
			/* the map is as fresh as it gets: redirected requests
			 * that waited for it go where it says */
			untrusted_retry(r);
		}
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
	/* Ask the nodes in turn, skipping those known down (and free slots);
	 * the next one in turn when all are down; none the AUTH rule bars. */
	{
		int pick = -1, first = -1;

		for (int i = 0; i < r->nnodes && pick < 0; i++) {
			int idx = (r->refresh_rr + i) % r->nnodes;
			const struct node *n = r->nodes[idx];

			/* With AUTH, never a node the map does not name. */
			if (!n || (r->auth_cmd && !node_trusted(n)))
				continue;
			if (first < 0)
				first = idx;
			if (n->down_until <= now)
				pick = idx;
		}
		if (first < 0)
			return;
		r->refresh_rr = pick >= 0 ? pick : first;
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

/* Attaching (kvs_remote_attach): done once a map came (any slot has an
 * owner: a map or a plain node); else, with no refresh under way, the
 * seeds are asked again after a backoff. */
static void attach_step(kvs_remote *r, uint64_t now)
{
	int s = 0;

	while (s < KVS_SLOTS && r->map[s] < 0)
		s++;
	if (s < KVS_SLOTS) {
		r->attaching = 0;
		r->st.attached = 1;
		kvs_rmt_event(r, KVS_REMOTE_EV_ATTACHED, r->nodes[r->map[s]], 0);
		return;
	}
	if (r->refreshing || r->refresh_wanted)
		return;
	r->refresh_wanted = 1;
	r->refresh_after = now + r->attach_ms * 1000ull;
	r->attach_ms = r->attach_ms ? r->attach_ms * 2 : BACKOFF_MIN_MS;
	if (r->attach_ms > BACKOFF_MAX_MS)
		r->attach_ms = BACKOFF_MAX_MS;
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
		if (evs[i].data.ptr == &kvs_rmt_resolver_tag) {
			kvs_rmt_resolve_drain(r);
			continue;
		}
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
	kvs_rmt_conn_more(r);
	now = now_us();
	expire(r, now);
	if (r->attaching)
		attach_step(r, now);
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

static int submit_kv(kvs_remote *r, int op, int overwrite, const void *key,
		     size_t klen, const struct iovec *iov, int iovcnt, uint64_t cookie)
{
	struct req *q;

	if (!r->open || !key || klen == 0 || klen > KVS_REMOTE_KEY_MAX ||
	    iovcnt < 1 || iovcnt > KVS_REMOTE_IOV_MAX || !iov)
		return -EINVAL;
	q = req_new(r, op, key, klen, cookie, now_us());
	if (!q)
		return -ENOMEM;
	q->overwrite = overwrite;
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
	return submit_kv(r, KVS_REMOTE_GET, 0, key, klen, iov, iovcnt, cookie);
}

int kvs_remote_set_nx(kvs_remote *r, const void *key, size_t klen,
		      const struct iovec *iov, int iovcnt, uint64_t cookie)
{
	return submit_kv(r, KVS_REMOTE_SET, 0, key, klen, iov, iovcnt, cookie);
}

int kvs_remote_set(kvs_remote *r, const void *key, size_t klen,
		   const struct iovec *iov, int iovcnt, uint64_t cookie)
{
	return submit_kv(r, KVS_REMOTE_SET, 1, key, klen, iov, iovcnt, cookie);
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
	out->reply_bytes = 0;
	for (int i = 0; i < r->nnodes; i++)
		for (int j = 0; r->nodes[i] && j < r->nodes[i]->nconns; j++)
			out->reply_bytes +=
				RBUF_BYTES +
				kvs_resp_parser_mem(r->nodes[i]->conns[j]->parser);
}

