/* remote_conn.c - the remote engine's connections and wire: dispatch,
 * writev of requests, replies read into caller buffers, redirections and
 * failures (see kvs_remote.h, remote_int.h; what a reply means for its
 * request is in remote_reply.c, nodes and the slot map in remote_nodes.c,
 * the TLS side of a connection in remote_tls.c). */
#include "remote_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

/* ---- connections -------------------------------------------------------- */

void kvs_rmt_refresh_want(kvs_remote *r)
{
	if (!r->cluster && !r->attaching)
		return;
	r->refresh_wanted = 1;
	kvs_rmt_arm_timer(r, r->refresh_after > now_us() ? r->refresh_after : 1);
}

void kvs_rmt_node_down(kvs_remote *r, struct node *n, int err, uint64_t now)
{
	if (!n->is_down) {
		n->is_down = 1;
		r->st.nodes_down++;
		kvs_rmt_event(r, KVS_REMOTE_EV_NODE_DOWN, n, err);
	}
	/* A name may point elsewhere now (a replaced machine, a moved pod):
	 * asked again, off the loop; the connect after the backoff uses the
	 * answer. */
	if (n->named && n->resolved == 1)
		kvs_rmt_resolve_want(r, n, now);
	n->backoff_ms = n->backoff_ms ? n->backoff_ms * 2 : BACKOFF_MIN_MS;
	if (n->backoff_ms > BACKOFF_MAX_MS)
		n->backoff_ms = BACKOFF_MAX_MS;
	n->down_until = now + n->backoff_ms * 1000ull;
	n->down_err = err;
}

/* A reply came: the node answers (a connect alone proves little: the
 * kernel completes it for a stopped process too). */
void kvs_rmt_node_up(kvs_remote *r, struct node *n)
{
	n->backoff_ms = 0;
	n->down_until = 0;
	if (n->is_down) {
		n->is_down = 0;
		r->st.nodes_down--;
		kvs_rmt_event(r, KVS_REMOTE_EV_NODE_UP, n, 0);
	}
}

void kvs_rmt_epoll_out(kvs_remote *r, struct conn *c, int on)
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
void kvs_rmt_conn_fail(kvs_remote *r, struct conn *c, int err)
{
	struct node *n = c->node;
	struct rlist retry = { 0 };
	uint64_t now = now_us();
	int first_done = 0;
	struct req *q;

	if (c->dead)
		return;
	r->st.conn_failures++;
	kvs_rmt_conn_close(r, c);
	/* A failed TLS handshake is the node's too (a certificate that does
	 * not verify will not verify in a moment either). */
	if (c->state != C_UP || err == -ETIMEDOUT)
		kvs_rmt_node_down(r, n, err, now);
	if (err == -EPROTO) {
		if (!n->proto_us || now - n->proto_us >= PROTO_LOG_GAP_US)
			kvs_rmt_event(r, KVS_REMOTE_EV_PROTO, n, err);
		n->proto_us = now;
	}
	while ((q = c->q.head) != NULL) {
		/* A reply that did not parse was the head's: resending that
		 * one would meet it again; those behind it are innocent. */
		int culprit = err == -EPROTO && !first_done;

		first_done = 1;
		kvs_rmt_take_off(r, q);
		kvs_rmt_uncount(r, q);
		if (q->op == OP_SLOTS)
			r->refreshing = 0;
		if (q->op == OP_AUTH) {
			all_del(r, q);
			free(q);
		} else if (q->deadline <= now) {
			kvs_rmt_complete(r, q, -ETIMEDOUT);
		} else if (q->op < OP_AUTH && !q->resent && err != -EACCES &&
			   !culprit) {
			q->resent = 1;
			r->st.resent++;
			rl_push(&retry, q);
		} else {
			kvs_rmt_complete(r, q, q->op == OP_SLOTS ? 0 : err);
		}
	}
	kvs_rmt_refresh_want(r);
	while ((q = retry.head) != NULL) {
		rl_del(&retry, q);
		kvs_rmt_dispatch(r, q);
	}
}

void kvs_rmt_conn_close(kvs_remote *r, struct conn *c)
{
	struct node *n = c->node;

	c->dead = 1;
	if (c->tls_more) { /* no more to read from what SSL holds */
		c->tls_more = 0;
		r->tls_more--;
	}
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	for (int i = 0; i < n->nconns; i++)
		if (n->conns[i] == c) {
			n->conns[i] = n->conns[--n->nconns];
			break;
		}
	c->next_dead = r->dead;
	r->dead = c;
}

static int conn_open(kvs_remote *r, struct node *n, struct conn **out)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT };
	struct conn *c;
	int one = 1, rc;

	if (n->resolved <= 0)
		return n->resolved < 0 ? n->resolved : -EHOSTUNREACH;
	/* The AUTH rule: the password goes only to a node the operator or
	 * the slot map named, never to one only a redirect named. */
	if (r->auth_cmd && !node_trusted(n))
		return -EACCES;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = -1;
	c->rbuf = malloc(RBUF_BYTES);
	rc = kvs_resp_parser_create(4096, &c->parser);
	if (r->tls && !(c->wstage = malloc(TLS_STAGE)))
		rc = -ENOMEM;
	if (!c->rbuf || rc < 0) {
		kvs_rmt_conn_free(c);
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
	if (r->tls && (rc = kvs_rmt_tls_new(r, n, c->fd, &c->ssl)) < 0) {
		errno = -rc;
		goto fail;
	}
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
	kvs_rmt_conn_free(c);
	return rc;
}

void kvs_rmt_conn_free(struct conn *c)
{
	if (c->ssl)
		kvs_rmt_tls_close(c->ssl);
	kvs_resp_parser_free(c->parser);
	free(c->wstage);
	free(c->rbuf);
	free(c);
}

/* The queue of @c from its write offset, as iovecs into @iov[WRITE_IOV]:
 * header, the value's iovecs (SET), trailer, request after request. */
int kvs_rmt_queue_iov(const struct conn *c, struct iovec *iov)
{
	int n = 0;
	size_t skip = c->woff;

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
	return n;
}

void kvs_rmt_conn_wrote(struct conn *c, size_t w)
{
	c->woff += w;
	while (c->wcur && c->woff >= c->wcur->wire) {
		c->woff -= c->wcur->wire;
		c->wcur = c->wcur->next;
	}
}

/* Write what is queued on @c, as far as the socket takes it. */
void kvs_rmt_conn_flush(kvs_remote *r, struct conn *c)
{
	if (c->ssl) {
		kvs_rmt_tls_flush(r, c);
		return;
	}
	while (c->wcur && !c->dead && c->state == C_UP) {
		struct iovec iov[WRITE_IOV];
		int n = kvs_rmt_queue_iov(c, iov);
		ssize_t w;

		w = send_iov(c->fd, iov, n);
		if (w < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				kvs_rmt_epoll_out(r, c, 1);
				return;
			}
			if (errno == EINTR)
				continue;
			kvs_rmt_conn_fail(r, c, -errno);
			return;
		}
		kvs_rmt_conn_wrote(c, (size_t)w);
	}
	if (!c->dead && c->state == C_UP)
		kvs_rmt_epoll_out(r, c, 0);
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
					     q->op != KVS_REMOTE_SET ? 2 : q->overwrite ? 3 : 4);
	pos += (size_t)kvs_resp_encode_bulk(h + pos, cap - pos, name, strlen(name));
	pos += (size_t)kvs_resp_encode_bulk(h + pos, cap - pos, q->key, q->klen);
	q->wire = 0;
	if (q->op == KVS_REMOTE_SET) {
		pos += (size_t)kvs_resp_encode_bulk_hdr(h + pos, cap - pos, q->vlen);
		q->trl = q->overwrite ? SET_TRAILER : NX_TRAILER;
		q->tlen = q->overwrite ? sizeof(SET_TRAILER) - 1 : sizeof(NX_TRAILER) - 1;
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
void kvs_rmt_dispatch(kvs_remote *r, struct req *q)
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
			kvs_rmt_refresh_want(r);
			kvs_rmt_complete(r, q, -ENETDOWN);
			return;
		}
	}
	n = r->nodes[idx];
	if (now < n->down_until && n->nconns == 0) {
		kvs_rmt_complete(r, q, n->down_err ? n->down_err : -ECONNREFUSED);
		return;
	}
	/* A name not resolved (yet, or its resolution failed): a quick miss
	 * while the resolver works; never a lookup on this thread. */
	if (n->resolved <= 0 && n->nconns == 0) {
		kvs_rmt_resolve_want(r, n, now);
		kvs_rmt_complete(r, q, n->resolved < 0 ? n->resolved : -EHOSTUNREACH);
		return;
	}
	/* Past the cap, or behind others that wait: wait (in order). */
	if (q->vlen && ((r->wait.head && !q->from_wait) ||
			(r->st.inflight_bytes &&
			 r->st.inflight_bytes + q->vlen > r->max_inflight))) {
		q->where = W_WAIT;
		rl_push(&r->wait, q);
		r->st.waiting = r->wait.n;
		return;
	}
	q->from_wait = 0;
	rc = pick_conn(r, n, &c);
	if (rc < 0) {
		kvs_rmt_node_down(r, n, rc, now);
		kvs_rmt_refresh_want(r);
		kvs_rmt_complete(r, q, rc);
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
	kvs_rmt_conn_flush(r, c);
}

/* One read of @c into @v[@n]: bytes, 0 at EOF, -EAGAIN (nothing now),
 * -EINPROGRESS (TLS must write first) or the error. TLS reads one buffer
 * at a time: SSL decrypts into it (a record's bytes are copied once, from
 * SSL's buffer into the caller's). */
static ssize_t conn_recv(kvs_remote *r, struct conn *c, struct iovec *v, int n)
{
	ssize_t k;

	if (c->ssl)
		return kvs_rmt_tls_read(r, c->ssl, v[0].iov_base, v[0].iov_len);
	do
		k = readv(c->fd, v, n);
	while (k < 0 && errno == EINTR);
	if (k < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return k;
}

void kvs_rmt_conn_read(kvs_remote *r, struct conn *c)
{
	size_t budget = READ_BUDGET;

	while (!c->dead) {
		struct iovec dv[KVS_REMOTE_IOV_MAX];
		ssize_t n;
		int nd;

		while (c->rpos < c->rlen && !c->dead) {
			size_t used;
			int rc;

			kvs_rmt_expect_head(c); /* -EBUSY in mid-reply: keeps the last */
			rc = kvs_resp_parse(c->parser, c->rbuf + c->rpos,
					    c->rlen - c->rpos, &used);
			c->rpos += used;
			if (rc < 0) {
				kvs_rmt_conn_fail(r, c, -EPROTO);
				return;
			}
			if (rc == 1)
				kvs_rmt_on_reply(r, c, c->parser, kvs_resp_reply(c->parser));
		}
		if (c->dead)
			return;
		if (budget == 0) {
			/* The socket's level trigger does not see bytes that
			 * SSL has already taken in: poll comes back for them. */
			if (c->ssl && !c->tls_more && kvs_rmt_tls_pending(c->ssl)) {
				c->tls_more = 1;
				r->tls_more++;
				kvs_rmt_arm_timer(r, 1);
			}
			return;
		}
		c->rpos = c->rlen = 0;
		nd = kvs_resp_direct(c->parser, dv, KVS_REMOTE_IOV_MAX);
		if (nd > 0) {
			n = conn_recv(r, c, dv, nd);
		} else {
			/* Before a large expected value, read little: the header,
			 * and the payload bytes that come with it are copied. */
			struct req *h = c->q.head;
			size_t want = h && h->op == KVS_REMOTE_GET &&
					      h->vlen >= RBUF_BYTES
				      ? SMALL_READ
				      : RBUF_BYTES;

			dv[0] = (struct iovec){ c->rbuf, want };
			n = conn_recv(r, c, dv, 1);
		}
		if (n > 0) {
			budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
			if (nd > 0) {
				kvs_resp_direct_done(c->parser, (size_t)n);
				r->st.bytes_in_direct += (uint64_t)n;
			} else {
				c->rlen = (size_t)n;
			}
			continue;
		}
		if (n == 0) {
			kvs_rmt_conn_fail(r, c, -ECONNRESET);
			return;
		}
		if (n == -EINPROGRESS)
			kvs_rmt_epoll_out(r, c, 1);
		else if (n != -EAGAIN)
			kvs_rmt_conn_fail(r, c, (int)n);
		return;
	}
}

void kvs_rmt_conn_event(kvs_remote *r, struct conn *c, uint32_t ev)
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
			kvs_rmt_conn_fail(r, c, -err);
			return;
		}
		c->state = c->ssl ? C_HANDSHAKE : C_UP;
		if (c->ssl)
			kvs_rmt_tls_step(r, c);
		else
			kvs_rmt_conn_flush(r, c);
		return;
	}
	if (c->state == C_HANDSHAKE) {
		kvs_rmt_tls_step(r, c);
		return;
	}
	/* TLS may want to read for a write and write for a read: each
	 * event tries both. */
	if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP) || c->ssl)
		kvs_rmt_conn_read(r, c);
	if (!c->dead && (ev & EPOLLOUT || (c->ssl && (c->wcur || kvs_rmt_tls_unsent(c->ssl)))))
		kvs_rmt_conn_flush(r, c);
}
