/*
 * command_admin.c - who may do what (an operator: the daemon's uid, root,
 * --admin-uid; a worker kept to its domain) and the operator commands
 * (LIST, INSPECT, EVICT, PIN, UNPIN, WATCH, VERIFY), answered from
 * admin.c's work. The table that names them is command.c's.
 */
#define _GNU_SOURCE
#include "command_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- who may do what -------------------------------------------------- */

/* Whether @c's peer is an operator: the daemon's own uid, root, or a uid of
 * --admin-uid. Everyone else is a worker, kept to its domain. */
static int peer_operator(const conn *c)
{
	const kvs_config *cfg = &c->srv->cfg;

	if (c->uid == 0 || c->uid == (uint32_t)c->srv->uid)
		return 1;
	for (uint32_t i = 0; i < cfg->n_admin_uid; i++)
		if (cfg->admin_uid[i] == c->uid)
			return 1;
	return 0;
}

int command_operator(const conn *c)
{
	return peer_operator(c);
}

/* The namespaces @c's peer may see and touch: an operator's are all, and
 * so are a worker's while every uid shares one arena (one trust domain);
 * under --tenant-arenas uid a worker's are its uid's. */
static kvs_admin_domain peer_domain(const conn *c)
{
	return (kvs_admin_domain){
		.all = !c->srv->cfg.tenant_arenas || peer_operator(c),
		.uid = c->uid };
}

/* A block request's namespace *@ns in domain @d: another domain's is
 * KVS_E_PERM; 0 ("any") becomes the first of @d's that holds @h, unless
 * the connection is attached (then it is its own namespace, admin.c). */
static int scope_block(const conn *c, const kvs_admin_domain *d, uint32_t *ns,
		       kvs_hash h)
{
	kvs_admin *a = c->srv->admin;

	if (*ns)
		return kvs_admin_domain_has(a, d, *ns) ? 0 : KVS_E_PERM;
	if (!c->ns && !d->all && !(*ns = kvs_admin_domain_find(a, d, h)))
		return -ENOENT;
	return 0;
}

/* A CMD_SCOPED request @rq (@opcode's) kept to its sender's domain: an
 * operator's passes; a worker's names no namespace of another domain
 * (KVS_E_PERM), its "any namespace" means any of its own, and what reaches
 * every namespace (EVICT or FLUSH of scope all, WATCH of a domain that is
 * the whole pool) is refused: that is an operator's. */
int scope_request(const conn *c, uint32_t opcode, request *rq)
{
	kvs_admin_domain d;

	if (peer_operator(c))
		return 0;
	d = peer_domain(c);
	switch (opcode) {
	case KVS_OP_LIST:
		return !rq->list.ns ||
		       kvs_admin_domain_has(c->srv->admin, &d, rq->list.ns)
			       ? 0 : KVS_E_PERM;
	case KVS_OP_INSPECT:
		return scope_block(c, &d, &rq->inspect.ns, rq->inspect.hash);
	case KVS_OP_EVICT:
		if (rq->evict.scope == KVS_EVICT_ALL)
			return KVS_E_PERM;
		if (rq->evict.scope == KVS_EVICT_NAMESPACE)
			return kvs_admin_domain_has(c->srv->admin, &d, rq->evict.ns)
				       ? 0 : KVS_E_PERM;
		return scope_block(c, &d, &rq->evict.ns, rq->evict.hash);
	case KVS_OP_WATCH:
		return d.all ? KVS_E_PERM : 0;
	default: /* a scoped command not scoped here stays an operator's */
		return KVS_E_PERM;
	}
}

/* Operator requests: admin.c does the work, these send the answer. */
static int reply_admin(conn *c, const kvs_wire_hdr *h, int rc, size_t len)
{
	if (rc < 0)
		return rc;
	conn_reply(c, h, 0, c->srv->reply, len);
	return 0;
}

int do_list(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_admin_domain dom = peer_domain(c);
	size_t len = 0;
	uint32_t visited;
	int rc;

	kvs_fast_tick(c->srv->fast); /* hit counts: the fast path's too */
	rc = kvs_admin_list(c->srv->admin, c->ns, &dom, &rq->list, c->srv->reply,
			    KVS_WIRE_MAX_PAYLOAD, &len, &visited);
	c->srv->req_work += visited / TURN_WORK_RECORDS;

	return reply_admin(c, h, rc, len);
}

int do_inspect(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	size_t len = 0;
	int rc;

	kvs_fast_tick(c->srv->fast); /* hit counts: the fast path's too */
	rc = kvs_admin_inspect(c->srv->admin, c->ns, &rq->inspect,
			       c->srv->reply, KVS_WIRE_MAX_PAYLOAD, &len);

	return reply_admin(c, h, rc, len);
}

int do_evict(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	size_t len = 0;
	int rc;

	kvs_fast_unhold(c->srv->fast); /* fast pins released since held */
	rc = kvs_admin_evict(c->srv->admin, &rq->evict, c->srv->reply,
			     KVS_WIRE_MAX_PAYLOAD, &len);

	return reply_admin(c, h, rc, len);
}

int do_pin(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	size_t len = 0;
	int rc = kvs_admin_pin(c->srv->admin, 1, rq->pin.ns, &rq->pin.hashes,
			       c->srv->reply, KVS_WIRE_MAX_PAYLOAD, &len);

	return reply_admin(c, h, rc, len);
}

int do_unpin(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	size_t len = 0;
	int rc = kvs_admin_pin(c->srv->admin, 0, rq->pin.ns, &rq->pin.hashes,
			       c->srv->reply, KVS_WIRE_MAX_PAYLOAD, &len);

	return reply_admin(c, h, rc, len);
}

static void conn_wake(void *arg)
{
	conn *c = arg;

	event_add(c->wev, NULL);
}

/* WATCH: the reply (empty) comes first, then EVENT messages with its id. */
int do_watch(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_admin_domain dom = peer_domain(c);
	int rc = c->sub ? -EALREADY
			: kvs_admin_subscribe(c->srv->admin, &dom, c->out,
					      h->req_id, conn_wake, c, &c->sub);

	if (rc < 0)
		return rc;
	conn_reply(c, h, 0, NULL, 0);
	return 0;
}

/* The VERIFY reply for @res and @fails[0..res->count) into s->reply:
 * its bytes, or an error. */
static int verify_encode(kvs_server *s, const kvs_verify_result *res,
			 const kvs_verify_fail *fails)
{
	kvs_wire_verify_reply rep = {
		.checked = res->checked, .ok = res->ok, .failed = res->failed,
		.skipped = res->skipped, .count = res->count,
		.flags = res->has_tier ? KVS_WIRE_VERIFY_SSD : 0 };
	kvs_wire_verify_fail *wf = NULL;
	int rc;

	if (res->count && !(wf = calloc(res->count, sizeof(*wf))))
		return -ENOMEM;
	for (uint32_t i = 0; i < res->count; i++)
		wf[i] = (kvs_wire_verify_fail){ .hash = fails[i].hash,
						.ns = fails[i].ns,
						.error = fails[i].error };
	rc = kvs_wire_verify_reply_encode(&rep, wf, s->reply, KVS_WIRE_MAX_PAYLOAD);
	free(wf);
	return rc;
}

/* A deferred verify is done (kvs_cache_verify_fn): send it, then go on
 * with the requests that queued behind it. */
static void on_verify_done(void *arg, const kvs_verify_result *res,
			   const kvs_verify_fail *fails)
{
	conn *c = arg;
	int rc = verify_encode(c->srv, res, fails);

	c->waiting = 0;
	if (rc < 0)
		conn_reply_error(c, &c->wait_hdr, rc);
	else
		conn_reply(c, &c->wait_hdr, 0, c->srv->reply, (size_t)rc);
	conn_process(c);
}

/* VERIFY: read back the SSD tier's blocks; answered when the reads are
 * done (on_verify_done), the connection waiting meanwhile. */
int do_verify(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_server *s = c->srv;
	kvs_verify_result res;
	int rc;

	if (rq->verify.ns > kvs_cache_ns_count(s->cache))
		return -ENOENT;
	rc = kvs_cache_verify(s->cache, c->owner, rq->verify.ns,
			      rq->verify.max_failed, on_verify_done, c, &res);
	if (rc == 0)
		rc = verify_encode(s, &res, NULL);
	if (rc < 0)
		return rc;
	conn_reply(c, h, 0, s->reply, (size_t)rc);
	return 0;
}

