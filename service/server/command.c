/*
 * command.c - the requests the daemon serves: one table, by opcode, of each
 * command's decode, handler, counter and flags, and command_dispatch(),
 * which checks the flags in one place (see server_int.h). The wire codec is
 * kvs_wire.h's, the work the cache's and admin.c's.
 */
#define _GNU_SOURCE
#include "command_int.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cache_admin.h"
#include "kvs_fast.h"
#include "kvs_le.h"
#include "kvs_kvevents.h"
#include "kvs_wire_admin.h"

/* ---- requests --------------------------------------------------------- */


/* A handler answers its request itself and returns 0, or returns the error
 * that command_dispatch() answers (-EINPROGRESS: it answers later, for a command
 * that is CMD_DEFERRABLE). */

static int do_hello(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_server *s = c->srv;
	const kvs_wire_hello *hello = &rq->hello;
	kvs_wire_hello_reply r = { 0 };
	uint8_t buf[64];
	int rc;

	if (!(hello->flags & KVS_HELLO_CONTROL)) {
		char model[KVS_NAME_MAX + 1], adapter[KVS_NAME_MAX + 1];
		kvs_ns_desc d = {
			.model = model, .adapter = adapter,
			.salt = (const uint8_t *)hello->salt,
			.salt_len = hello->salt_len, .layers = hello->layers,
			.kv_heads = hello->kv_heads, .head_dim = hello->head_dim,
			.block_tokens = hello->block_tokens,
			.tp_rank = hello->tp_rank, .tp_size = hello->tp_size,
			.dtype = hello->dtype };
		uint32_t kind, device;

		/* The wire's names are counted and NUL-free (decoder). */
		memcpy(model, hello->model, hello->model_len);
		model[hello->model_len] = '\0';
		memcpy(adapter, hello->adapter, hello->adapter_len);
		adapter[hello->adapter_len] = '\0';
		rc = kvs_cache_attach(s->cache, c->owner, &d,
				      !!(hello->flags & KVS_HELLO_GPU), &r.ns_id,
				      &r.block_bytes);
		if (rc < 0)
			return rc;
		server_fdstore_more(s); /* a tenant arena made just now */
		if (!c->ns)
			s->stats.clients_attached++;
		c->ns = r.ns_id;
		r.arena_count = 1;
		/* The arena of the client's own trust domain, never another. */
		kvs_cache_owner_arena(s->cache, c->owner, &c->pending_fd,
				      &r.host_arena_bytes, &r.host_arena_id);
		/* The GPU arena goes to workers that asked for it only: a
		 * client that did not gets the reply it always got. */
		if ((hello->flags & KVS_HELLO_GPU) &&
		    kvs_cache_tier_map(s->cache, KVS_TIER_GPU, &c->pending_fd2,
				       &r.gpu_arena_bytes, &kind, &device) == 0) {
			r.arena_count = 2;
			r.gpu_kind = kind;
			r.gpu_device = device;
		}
	}
	rc = kvs_wire_hello_reply_encode(&r, buf, sizeof(buf));
	conn_reply(c, h, 0, buf, (size_t)rc);
	return 0;
}

static void reply_blocks(conn *c, const kvs_wire_hdr *h, uint64_t lease,
			 const kvs_block *blocks, uint32_t count)
{
	kvs_server *s = c->srv;
	int rc = kvs_wire_blocks_encode(lease, blocks, count, s->reply,
					KVS_WIRE_MAX_PAYLOAD);

	conn_reply(c, h, 0, s->reply, (size_t)rc);
}

static int reply_count(conn *c, const kvs_wire_hdr *h, int rc);

/* A query's bound passed before the cluster answered (--remote-query-
 * timeout, at most --remote-timeout): it answers what it knows now. */
static void on_query_bound(evutil_socket_t fd, short what, void *arg)
{
	conn *c = arg;

	(void)fd;
	(void)what;
	kvs_cache_query_expire(c->srv->cache, c->owner);
}

/* The request's hashes as the cache takes them (the decoder bounded the
 * count by KVS_MAX_HASHES, the scratch's size). The cache reads them during
 * the call only: a deferred lookup keeps its own copy. */
static const kvs_hash *req_hashes(kvs_server *s, const kvs_wire_hashes *w)
{
	for (uint32_t i = 0; i < w->count; i++)
		s->hashes[i] = kvs_wire_hash_at(w->hashes, i);
	return s->hashes;
}

/* A query (KVS_LOOKUP_QUERY): a count, nothing pinned. One that asks the
 * cluster is deferred, with a timer that bounds it. */
static int do_query(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_server *s = c->srv;
	uint32_t ms = s->cfg.remote_query_timeout_ms;
	struct timeval tv;
	int rc = kvs_cache_query(s->cache, c->owner, req_hashes(s, &rq->hashes),
				 rq->hashes.count,
				 !!(rq->hashes.flags & KVS_LOOKUP_REMOTE));

	if (rc != -EINPROGRESS)
		return reply_count(c, h, rc);
	/* Without a timer (no memory) it is answered at --remote-timeout. */
	if (!c->qev && !(c->qev = evtimer_new(s->base, on_query_bound, c)))
		return rc;
	if (s->cfg.remote_timeout_ms < ms)
		ms = s->cfg.remote_timeout_ms;
	tv = (struct timeval){ .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	evtimer_add(c->qev, &tv);
	return rc;
}

static int do_lookup(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_server *s = c->srv;
	uint64_t lease;
	int rc;

	if (rq->hashes.flags & KVS_LOOKUP_QUERY)
		return do_query(c, h, rq);
	rc = kvs_cache_lookup(s->cache, c->owner, req_hashes(s, &rq->hashes),
			      rq->hashes.count, &lease, s->blocks);

	/* -EINPROGRESS: blocks are being read back from SSD, and
	 * command_lookup_done() answers. */
	if (rc < 0)
		return rc;
	reply_blocks(c, h, lease, s->blocks, (uint32_t)rc);
	return 0;
}

/* A deferred lookup is answered (kvs_cache_done_fn): send it, then go on
 * with the requests that queued behind it. */
void command_lookup_done(void *arg, int rc, uint64_t lease,
			   const kvs_block *out)
{
	conn *c = arg;

	c->waiting = 0;
	if (rc < 0)
		conn_reply_error(c, &c->wait_hdr, rc);
	else if (!out) /* a query's count */
		reply_count(c, &c->wait_hdr, rc);
	else
		reply_blocks(c, &c->wait_hdr, lease, out, (uint32_t)rc);
	if (c->qev)
		evtimer_del(c->qev);
	conn_process(c);
}

static int do_reserve(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_server *s = c->srv;
	uint64_t lease;
	const kvs_hash *hs = req_hashes(s, &rq->hashes);
	int rc = rq->hashes.flags & KVS_RESERVE_AFTER
			 ? kvs_cache_reserve_after(s->cache, c->owner, hs,
						   rq->hashes.count, &lease,
						   s->blocks)
			 : kvs_cache_reserve(s->cache, c->owner, hs,
					     rq->hashes.count, &lease, s->blocks);

	if (rc < 0)
		return rc;
	reply_blocks(c, h, lease, s->blocks, rq->hashes.count);
	return 0;
}

/* Commit, abort and release answer a count (blocks published or freed). */
static int reply_count(conn *c, const kvs_wire_hdr *h, int rc)
{
	uint8_t buf[8];

	if (rc < 0)
		return rc;
	kvs_wire_u64_encode((uint64_t)rc, buf, sizeof(buf));
	conn_reply(c, h, 0, buf, sizeof(buf));
	return 0;
}

/* An engine's counts, added to the daemon's and its namespace's. */
static int do_report(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	server_engines_add(c->srv, c->ns, &rq->report);
	return reply_count(c, h, 0);
}

/* Engines' side records of their blocks, for the vLLM KV events. */
static int do_describe(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	uint64_t kept;
	int rc = kvs_kvev_describe_all(c->srv->kvev, c->srv->cache, c->ns,
				       &rq->describe, &kept);

	return reply_count(c, h, rc < 0 ? rc : (int)kept);
}

/* The index of the connection's own domain and a pin area of its own; both
 * fds ride on the reply like HELLO's arena (CMD_SENDS_FD). The pin area's
 * is closed once sent: the daemon keeps its mapping, not an fd per client. */
static int do_fastattach(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	kvs_wire_fast_reply r = { .version = KVS_FAST_VERSION };
	kvs_fast_grant g;
	uint8_t buf[KVS_WIRE_FAST_REPLY_SIZE];
	int rc = kvs_fast_attach(c->srv->fast, c->owner, &c->fast, &g);

	if (rc < 0)
		return rc;
	r.index_bytes = g.index_bytes;
	r.pins_bytes = g.pins_bytes;
	r.arena_id = g.arena_id;
	r.entries = g.entries;
	r.pin_cap = g.pin_cap;
	c->pending_fd = g.index_fd;
	c->pending_fd2 = g.pins_fd;
	c->pending_own2 = 1;
	rc = kvs_wire_fast_reply_encode(&r, buf, sizeof(buf));
	conn_reply(c, h, 0, buf, (size_t)rc);
	return 0;
}

static int do_commit(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	return reply_count(c, h, kvs_cache_commit(c->srv->cache, c->owner, rq->lease));
}

static int do_abort(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	return reply_count(c, h, kvs_cache_abort(c->srv->cache, c->owner, rq->lease));
}

static int do_release(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	return reply_count(c, h, kvs_cache_release(c->srv->cache, c->owner, rq->lease));
}

static int do_stats(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	char *text = NULL;
	size_t len = 0;
	int rc = server_stats_text(c->srv, &text, &len);

	if (rc < 0)
		return rc;
	conn_reply(c, h, 0, (const uint8_t *)text, len);
	free(text);
	return 0;
}

/* ---- the command table ------------------------------------------------ */

static int decode_none(const uint8_t *p, size_t n, request *rq)
{
	return n ? KVS_E_PROTO : 0;
}

static int decode_hello(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_hello_decode(p, n, &rq->hello);
}

static int decode_reserve(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_reserve_decode(p, n, &rq->hashes);
}

static int decode_lookup(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_lookup_decode(p, n, &rq->hashes);
}

static int decode_lease(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_u64_decode(p, n, &rq->lease);
}

static int decode_report(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_report_decode(p, n, &rq->report);
}

static int decode_describe(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_describe_decode(p, n, &rq->describe);
}

static int decode_fast(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_fast_req_decode(p, n, &rq->fast_flags);
}

static int decode_list(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_list_req_decode(p, n, &rq->list);
}

static int decode_inspect(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_inspect_req_decode(p, n, &rq->inspect);
}

static int decode_evict(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_evict_req_decode(p, n, &rq->evict);
}

static int decode_pin(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_pin_req_decode(p, n, &rq->pin.ns, &rq->pin.hashes);
}

static int decode_handover(const uint8_t *p, size_t n, request *rq)
{
	if (n != 8)
		return KVS_E_PROTO;
	rq->handover.version = get32(p);
	rq->handover.flags = get32(p + 4);
	return 0;
}

static int do_handover(conn *c, const kvs_wire_hdr *h, const request *rq)
{
	return server_handover_start(c, h, rq->handover.version,
				     rq->handover.flags);
}

static int decode_verify(const uint8_t *p, size_t n, request *rq)
{
	return kvs_wire_verify_req_decode(p, n, &rq->verify);
}

/* The flags (CMD_*, server_int.h) are checked by command_dispatch() once
 * the payload decodes (a malformed request is KVS_E_PROTO whoever sends
 * it): control-only, operator-only, needs-attach, then a worker's request
 * kept to its domain (scope_request). */
typedef struct command {
	int (*decode)(const uint8_t *p, size_t n, request *rq);
	int (*handle)(conn *c, const kvs_wire_hdr *h, const request *rq);
	size_t counter; /* offsetof(kvs_counters, its ops_ counter) */
	unsigned flags;
} command;

/* Every request the daemon serves, once, by opcode (names: kvs_wire.h).
 * EVENT goes from the daemon only: from a client it is an unknown opcode. */
#define CMD(op, name, dec, flags)                                              \
	[KVS_OP_##op] = { decode_##dec, do_##name,                            \
			  offsetof(kvs_counters, ops_##name), flags }
static const command commands[KVS_OP__COUNT] = {
	CMD(HELLO, hello, hello, CMD_SENDS_FD),
	CMD(LOOKUP, lookup, lookup, CMD_ATTACHED | CMD_DEFERRABLE),
	CMD(RESERVE, reserve, reserve, CMD_ATTACHED),
	CMD(COMMIT, commit, lease, CMD_ATTACHED),
	CMD(ABORT, abort, lease, CMD_ATTACHED),
	CMD(RELEASE, release, lease, CMD_ATTACHED),
	CMD(STATS, stats, none, 0),
	CMD(LIST, list, list, CMD_SCOPED), /* attached: its own namespace */
	CMD(INSPECT, inspect, inspect, CMD_SCOPED),
	CMD(EVICT, evict, evict, CMD_CONTROL | CMD_SCOPED),
	CMD(PIN, pin, pin, CMD_CONTROL | CMD_OPERATOR), /* the daemon's pins */
	CMD(UNPIN, unpin, pin, CMD_CONTROL | CMD_OPERATOR),
	CMD(WATCH, watch, none, CMD_SCOPED),
	CMD(VERIFY, verify, verify, /* it reads the tier, drops blocks */
	    CMD_CONTROL | CMD_OPERATOR | CMD_DEFERRABLE),
	CMD(REPORT, report, report, 0),
	CMD(FASTATTACH, fastattach, fast, CMD_ATTACHED | CMD_SENDS_FD),
	/* its answer carries the pool's fds, on a connection of its own */
	CMD(HANDOVER, handover, handover, CMD_CONTROL | CMD_SENDS_FD),
	CMD(DESCRIBE, describe, describe, CMD_ATTACHED),
};
#undef CMD

static const command *command_of(uint32_t opcode)
{
	return opcode < KVS_OP__COUNT && commands[opcode].handle
		       ? &commands[opcode] : NULL;
}

unsigned command_flags(uint32_t opcode)
{
	const command *cmd = command_of(opcode);

	return cmd ? cmd->flags : 0;
}

void command_dispatch(conn *c, const kvs_wire_hdr *h, const uint8_t *p)
{
	kvs_counters *st = &c->srv->stats;
	const command *cmd = command_of(h->opcode);
	uint64_t t0 = now_ns();
	request rq;
	int rc;

	if (!cmd) {
		st->errors_opcode++;
		conn_reply_error(c, h, KVS_E_OPCODE);
		return;
	}
	(*(int64_t *)((char *)st + cmd->counter))++;
	rc = cmd->decode(p, h->len, &rq);
	if (rc < 0) {
		if (rc == KVS_E_TOOMANY)
			st->errors_toomany++;
		else if (rc == KVS_E_PROTO)
			st->errors_proto++;
		else if (rc == KVS_E_TOOBIG) /* a field past its bound */
			st->errors_toobig++;
		else if (rc == KVS_E_VERSION) /* a payload's own version */
			st->errors_version++;
	} else if ((cmd->flags & CMD_CONTROL) && c->ns) {
		rc = -EPERM;
	} else if ((cmd->flags & CMD_OPERATOR) && !command_operator(c)) {
		st->errors_perm++;
		rc = KVS_E_PERM;
	} else if ((cmd->flags & CMD_ATTACHED) && !c->ns) {
		/* No namespace, no blocks nor leases: say so. */
		st->errors_notattached++;
		rc = KVS_E_NOTATTACHED;
	} else if ((cmd->flags & CMD_SCOPED) &&
		   (rc = scope_request(c, h->opcode, &rq)) < 0) {
		st->errors_perm += rc == KVS_E_PERM;
	} else {
		rc = cmd->handle(c, h, &rq);
	}
	if (rc == -EINPROGRESS && (cmd->flags & CMD_DEFERRABLE)) {
		c->waiting = 1;
		c->wait_hdr = *h;
	} else if (rc < 0) {
		conn_reply_error(c, h, rc);
	}
	kvs_hist_add(&c->srv->latency[h->opcode], now_ns() - t0);
	kvs_admin_publish(c->srv->admin);
}
