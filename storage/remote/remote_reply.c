/* remote_reply.c - what a reply means for the request it answers: the
 * result, a redirection (MOVED, ASK) or an error reply, a slot map; and
 * the limits a reply must fit by the command it answers (see kvs_remote.h,
 * remote_int.h; the connections that read replies are remote_conn.c). */
#include "remote_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
	if (kvs_rmt_parse_hostport(sp2, strlen(sp2), host, &port) < 0)
		return -EPROTO;
	*slot = (unsigned)v;
	return kvs_rmt_node_find(r, host, port);
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
			kvs_rmt_complete(r, q, -EPROTO);
			return;
		}
		if (++q->redirects > KVS_REMOTE_REDIRECTS) {
			kvs_rmt_complete(r, q, -ELOOP);
			return;
		}
		if (ask)
			r->st.ask++;
		else
			r->st.moved++;
		if (r->auth_cmd && !node_trusted(r->nodes[idx])) {
			/* The AUTH rule: a node only this reply names gets
			 * no password; the map decides (refreshed first). A
			 * plain node has no map to ask. */
			if (!r->cluster) {
				kvs_rmt_complete(r, q, -EACCES);
				return;
			}
			q->ask_node = -1;
			q->where = W_UNTRUSTED;
			rl_push(&r->untrusted, q);
			kvs_rmt_refresh_want(r);
			return;
		}
		if (ask) {
			q->ask_node = idx;
		} else {
			r->map[slot] = (int16_t)idx;
			q->ask_node = -1;
			kvs_rmt_refresh_want(r);
		}
		kvs_rmt_dispatch(r, q);
		return;
	}
	if (prefix(s, "TRYAGAIN") && ++q->redirects <= KVS_REMOTE_REDIRECTS) {
		kvs_rmt_dispatch(r, q);
		return;
	}
	if (prefix(s, "CLUSTERDOWN")) {
		kvs_rmt_refresh_want(r);
		kvs_rmt_complete(r, q, -ENETDOWN);
	} else if (prefix(s, "NOAUTH") || prefix(s, "NOPERM") ||
		   prefix(s, "WRONGPASS")) {
		kvs_rmt_complete(r, q, -EACCES);
	} else {
		kvs_rmt_complete(r, q, -EIO);
	}
	(void)c;
}

/* The result of reply @v to data request @q: -EPROTO when it does not fit
 * the command (then the connection is closed: a peer that answers GET with
 * a status has lost the request order, or is not Redis). */
static int reply_res(const struct req *q, const kvs_resp_val *v)
{
	switch (q->op) {
	case KVS_REMOTE_GET:
		if (v->type == KVS_RESP_NIL)
			return -ENOENT;
		if (v->type == KVS_RESP_BULK)
			return v->flags & KVS_RESP_DIRECT ? 0 : -EMSGSIZE;
		break;
	case KVS_REMOTE_SET:
		if (v->type == KVS_RESP_NIL)
			return -EEXIST;
		if (v->type == KVS_RESP_STATUS)
			return 0;
		break;
	case KVS_REMOTE_EXISTS:
		if (v->type == KVS_RESP_INT)
			return v->n > 0;
		break;
	}
	return -EPROTO;
}

/* The reply to CLUSTER SLOTS: the map, a plain node (while attaching), or
 * -EPROTO (it does not fit the command). An AUTH problem is logged by the
 * AUTH's own reply; other errors wait for the next refresh. */
static int slots_reply(kvs_remote *r, const kvs_resp_parser *p,
		       const kvs_resp_val *v, int node)
{
	if (v->type == KVS_RESP_ARRAY)
		return kvs_rmt_map_apply(r, p, v, node) == -EPROTO ? -EPROTO : 0;
	if (is_no_cluster(v)) {
		if (r->attaching)
			kvs_rmt_map_single(r, node);
		return 0;
	}
	return v->type == KVS_RESP_ERROR ? 0 : -EPROTO;
}

/* The complete reply @v for the head of @c. */
void kvs_rmt_on_reply(kvs_remote *r, struct conn *c, const kvs_resp_parser *p,
		      const kvs_resp_val *v)
{
	struct req *q = c->q.head;
	int res = 0;

	if (!q || q == c->wcur) { /* a reply to nothing we sent */
		kvs_rmt_conn_fail(r, c, -EPROTO);
		return;
	}
	if (q->replies > 1) { /* ASKING's +OK */
		if (v->type != KVS_RESP_STATUS) {
			kvs_rmt_conn_fail(r, c, -EPROTO);
			return;
		}
		q->replies--;
		return;
	}
	if (q->op == OP_SLOTS) {
		res = slots_reply(r, p, v, q->node);
		if (res == -EPROTO)
			r->st.err_proto++;
	} else if (q->op < OP_AUTH && v->type != KVS_RESP_ERROR) {
		res = reply_res(q, v);
	}
	if (res == -EPROTO) { /* q is still the head: it fails, alone */
		kvs_rmt_conn_fail(r, c, -EPROTO);
		return;
	}
	if (c->node->is_down || c->node->backoff_ms)
		kvs_rmt_node_up(r, c->node);
	q->replies = 0;
	kvs_rmt_take_off(r, q);
	kvs_rmt_uncount(r, q);
	q->ask_node = -1;
	if (q->op == OP_AUTH) {
		struct node *n = c->node;

		all_del(r, q);
		free(q);
		if (v->type == KVS_RESP_STATUS) {
			n->auth_refused = 0;
			return;
		}
		/* Once per episode: the daemon may have started before the
		 * cluster, and learns only here that its AUTH is refused. */
		if (!n->auth_refused++)
			kvs_rmt_event(r, KVS_REMOTE_EV_AUTH, n, -EACCES);
		kvs_rmt_conn_fail(r, c, -EACCES);
		return;
	}
	if (q->op == OP_SLOTS) {
		r->refreshing = 0;
		kvs_rmt_complete(r, q, 0);
		return;
	}
	if (v->type == KVS_RESP_ERROR) {
		on_error(r, c, q, v);
		return;
	}
	kvs_rmt_complete(r, q, res);
}

/* What a reply to @q may take (remote_int.h; kvs_remote.h says why). */
static void limit_for(struct conn *c, const struct req *q)
{
	kvs_resp_limits l = { .bytes = REPLY_LINE, .elems = 1, .depth = 0 };

	if (q && q->op == OP_SLOTS)
		l = (kvs_resp_limits){ .bytes = SLOTS_REPLY_BYTES,
				       .elems = SLOTS_REPLY_ELEMS,
				       .depth = SLOTS_REPLY_DEPTH };
	else if (q && q->op == KVS_REMOTE_GET && q->replies == 1)
		l.bytes = GET_REPLY_BYTES(q->vlen);
	kvs_resp_limit(c->parser, &l);
}

/* What the parser should expect for the next reply on @c. */
void kvs_rmt_expect_head(struct conn *c)
{
	struct req *q = c->q.head;

	if (q == c->wcur)
		q = NULL; /* not sent whole: no reply is its */
	if (q && q->op == KVS_REMOTE_GET && q->replies == 1)
		kvs_resp_expect(c->parser, q->iov, q->iovcnt);
	else
		kvs_resp_expect(c->parser, NULL, 0);
	limit_for(c, q);
}
