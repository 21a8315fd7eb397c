/*
 * remote_int.h - the remote engine's internals, shared by its files:
 * remote.c (submit, poll, completions), remote_open.c (settings, open,
 * attach, close), remote_nodes.c (nodes, the slot map), remote_resolve.c
 * (the resolver thread), remote_conn.c (connections, the wire),
 * remote_reply.c (replies and their limits), remote_tls.c (TLS). Not
 * installed; storage/ only.
 * Thread: as kvs_remote.h (one thread).
 */
#ifndef KVS_REMOTE_INT_H
#define KVS_REMOTE_INT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "kvs_clock.h"
#include "kvs_remote.h"
#include "kvs_remote_cluster_slots.h"
#include "kvs_resp.h"

#define RBUF_BYTES (64u << 10)
#define SMALL_READ 4096 /* a read before a large expected value */
#define HDR_BYTES (64 + KVS_REMOTE_KEY_MAX)
#define WRITE_IOV 64
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define REFRESH_GAP_US 100000 /* slot map refreshes at most this often */
#define READ_BUDGET (16u << 20) /* bytes one readable event may take */
#define MAX_RANGES 16384
#define AUTH_MAX 512
#define TLS_STAGE (16u << 10) /* TLS: small pieces coalesce up to this */
#define TLS_CHUNK (256u << 10) /* TLS: one SSL_write of a value at most */
#define TLS_READ_AHEAD (64u << 10) /* TLS: SSL's read buffer */
#define NODE_HASH 2048 /* buckets of the node table (2 x KVS_REMOTE_NODES_MAX) */
#define PROTO_LOG_GAP_US 10000000ull /* protocol errors closer than this
				      * are one episode: one log line */
#define RESOLVE_RETRY_US 1000000ull /* a failed resolution is tried again */
/* What a reply may take on the wire, by the command it answers (kvs_resp.h
 * limits): a GET's value and a line; CLUSTER SLOTS: 16,384 one-slot ranges
 * of a master and a few replicas each, with Redis 7's metadata. */
#define REPLY_LINE (KVS_RESP_LINE_MAX + 2)
/* A GET: a value of another size up to twice the asked one and 64 KiB is
 * skipped (-EMSGSIZE, the connection stays: a format change is not an
 * attack); past that the header is refused. */
#define GET_REPLY_BYTES(vlen) (2 * (uint64_t)(vlen) + (64u << 10) + REPLY_LINE)
#define SLOTS_REPLY_BYTES (8u << 20)
#define SLOTS_REPLY_ELEMS (1u << 19)
#define SLOTS_REPLY_DEPTH 4 /* map, range, node, node metadata */

enum { OP_AUTH = 100, OP_SLOTS };
enum { W_NONE, W_WAIT, W_CONN, W_DONE, W_UNTRUSTED };
enum { C_CONNECTING, C_HANDSHAKE, C_UP };

struct ssl_st;     /* OpenSSL's SSL, for remote_tls.c */
struct ssl_ctx_st; /* OpenSSL's SSL_CTX */

static const char ASKING_CMD[] = "*1\r\n$6\r\nASKING\r\n";
static const char SLOTS_CMD[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
static const char NX_TRAILER[] = "\r\n$2\r\nNX\r\n";
static const char SET_TRAILER[] = "\r\n"; /* kvs_remote_set: no NX */

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
	int overwrite;   /* SET without NX (kvs_remote_set) */
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
	int from_wait;   /* leaves the wait queue: may pass those behind */
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
	struct ssl_st *ssl;   /* TLS, else NULL */
	uint8_t *wstage;      /* TLS: small pieces of the queue, coalesced */
	int tls_more;         /* TLS: SSL holds bytes the socket no longer
			       * signals (a read stopped by its budget) */
};

struct node {
	int idx;
	int hnext;     /* next index in its hash bucket, -1 */
	int seed;      /* named by the seeds setting: kept when no range
			* names it, trusted with AUTH */
	uint64_t gen;  /* unique per node made: a resolution's result finds
			* the node it was for, not one made later in its slot */
	char host[KVS_SLOT_HOST_MAX];
	uint16_t port;
	struct sockaddr_storage addr;
	socklen_t alen;
	int resolved;  /* 1 ok, 0 not yet, <0 the error */
	int named;     /* the host is a name (resolved off the loop) */
	int resolving; /* a resolution is queued or running */
	uint64_t resolve_at; /* us: after a failure, not before */
	uint64_t proto_us;   /* the last protocol error (0 none) */
	struct conn *conns[KVS_REMOTE_POOL_MAX];
	int nconns;
	uint64_t down_until; /* us: fail fast until then */
	int down_err;
	unsigned backoff_ms;
	int is_down;         /* since a failure, until a connect succeeds */
	int in_map;          /* owns slots in the last slot map taken */
	unsigned auth_refused; /* AUTH refusals since its last accepted one */
};

/* A node that may receive AUTH: the operator named it, or the cluster's
 * slot map does. A node only a MOVED/ASK named may be anyone's. */
static inline int node_trusted(const struct node *n)
{
	return n->seed || n->in_map;
}

struct kvs_remote {
	char *seeds;
	char *auth_cmd;
	size_t auth_len;
	unsigned timeout_ms, connect_timeout_ms, pool;
	uint64_t max_inflight;
	kvs_remote_done_fn fn;
	void *arg;
	kvs_remote_event_fn ev_fn;
	void *ev_arg;
	int open, cluster;

	int epfd, tfd;
	uint64_t armed_at; /* timerfd deadline (us), 0 none */

	/* Nodes by index (KVS_REMOTE_NODES_MAX slots, NULL where free; nnodes
	 * is past the highest used), and by host:port in a hash table. */
	struct node **nodes;
	int nnodes, nlive;
	int32_t hash[NODE_HASH];
	uint64_t node_gen;
	int16_t map[KVS_SLOTS];
	struct kvs_rmt_resolver *resolver; /* started by the first name */
	int attaching;                     /* no map yet (kvs_remote_attach) */
	unsigned attach_ms;                /* its backoff */
	uint64_t map_refused_us;           /* the last refused map's log */

	struct rlist wait, done;
	struct req *ahead, *atail; /* by deadline */
	size_t pending;
	struct conn *dead;

	int refreshing, refresh_wanted, refresh_rr;
	uint64_t refresh_after;

	kvs_remote_stats st;
	kvs_slot_range *ranges;

	struct ssl_ctx_st *tls; /* TLS on, with this context */
	char *tls_name;         /* the name certificates must show, or NULL */
	int tls_client_cert;    /* a client certificate is set */
	int tls_more;           /* connections with tls_more set */
	struct rlist untrusted; /* redirected to a node not yet in the map:
				 * wait for the refresh (AUTH rule) */
	char last_err[320];
};

/* writev that never raises SIGPIPE: a node that went away is an error
 * code here, not a signal that kills the caller's process. */
static inline ssize_t send_iov(int fd, struct iovec *iov, int n)
{
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };

	return sendmsg(fd, &m, MSG_NOSIGNAL);
}

/* ---- lists -------------------------------------------------------------- */

static inline void rl_push(struct rlist *l, struct req *q)
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

static inline void rl_del(struct rlist *l, struct req *q)
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
static inline void all_add(kvs_remote *r, struct req *q)
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

static inline void all_del(kvs_remote *r, struct req *q)
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

static inline int is_no_cluster(const kvs_resp_val *v)
{
	return v->type == KVS_RESP_ERROR && v->str &&
	       strstr(v->str, "cluster support disabled");
}

static inline int prefix(const char *s, const char *p)
{
	return !strncmp(s, p, strlen(p));
}

/* remote.c */
void kvs_rmt_complete(kvs_remote *r, struct req *q, int res);
void kvs_rmt_take_off(kvs_remote *r, struct req *q);
void kvs_rmt_uncount(kvs_remote *r, struct req *q);
void kvs_rmt_arm_timer(kvs_remote *r, uint64_t at);

/* remote_nodes.c */
int kvs_rmt_parse_hostport(const char *s, size_t n, char *host, uint16_t *port);
/* The node @host:@port, made when new: its index, or -ENOSPC (the table
 * is full), -ENOMEM. */
int kvs_rmt_node_find(kvs_remote *r, const char *host, uint16_t port);
void kvs_rmt_node_free(kvs_remote *r, struct node *n);
int kvs_rmt_map_apply(kvs_remote *r, const kvs_resp_parser *p,
		      const kvs_resp_val *v, int from);
void kvs_rmt_map_single(kvs_remote *r, int node);
/* The event @ev about @n to the caller, its host made printable first (a
 * slot map may name any bytes). */
void kvs_rmt_event(kvs_remote *r, int ev, const struct node *n, int err);
/* kvs_rmt_host_print - @host with bytes outside '!'..'~' and '\\' as \xHH,
 * into @out[@cap] (4 x KVS_SLOT_HOST_MAX holds any host). */
void kvs_rmt_host_print(const char *host, char *out, size_t cap);
/* Resolve @n now, blocking (open only). */
int kvs_rmt_resolve_sync(struct node *n);
/* @n's address is @a[@len] (a resolver's answer), with @n's port. */
void kvs_rmt_addr_set(struct node *n, const struct sockaddr *a, socklen_t len);

/* remote_resolve.c: host names resolved on a thread of the engine's. */
/* Ask for @n's address (again): queued unless one is under way; a
 * resolution that failed less than RESOLVE_RETRY_US ago waits. */
void kvs_rmt_resolve_want(kvs_remote *r, struct node *n, uint64_t now);
/* The results that came (the resolver's fd was readable). */
void kvs_rmt_resolve_drain(kvs_remote *r);
/* Stop the thread (waits for a getaddrinfo under way) and free it. */
void kvs_rmt_resolve_stop(kvs_remote *r);
extern char kvs_rmt_resolver_tag; /* epoll data.ptr of its fd */

/* remote_conn.c */
void kvs_rmt_refresh_want(kvs_remote *r);
void kvs_rmt_dispatch(kvs_remote *r, struct req *q);
void kvs_rmt_conn_event(kvs_remote *r, struct conn *c, uint32_t ev);
void kvs_rmt_conn_fail(kvs_remote *r, struct conn *c, int err);
/* @n failed (@err): down (an event per episode) for a growing backoff. */
void kvs_rmt_node_down(kvs_remote *r, struct node *n, int err, uint64_t now);
/* Close @c (no request on it, or its requests taken care of): off the
 * node, freed at the end of the poll. */
void kvs_rmt_conn_close(kvs_remote *r, struct conn *c);
void kvs_rmt_conn_free(struct conn *c);
void kvs_rmt_conn_read(kvs_remote *r, struct conn *c);
void kvs_rmt_conn_flush(kvs_remote *r, struct conn *c);
void kvs_rmt_epoll_out(kvs_remote *r, struct conn *c, int on);
int kvs_rmt_queue_iov(const struct conn *c, struct iovec *iov);
void kvs_rmt_conn_wrote(struct conn *c, size_t w);
/* A reply came from @n: it answers (node up, an event if it was down). */
void kvs_rmt_node_up(kvs_remote *r, struct node *n);

/* remote_reply.c */
/* The reply @v (parsed by @p) on @c: its request's result, a redirection,
 * an error reply, a slot map; a reply that does not fit closes @c. */
void kvs_rmt_on_reply(kvs_remote *r, struct conn *c, const kvs_resp_parser *p,
		      const kvs_resp_val *v);
/* What @c's parser should expect for the next reply, and its limits. */
void kvs_rmt_expect_head(struct conn *c);

/* remote_open.c: free the AUTH command (its bytes wiped first). */
void kvs_rmt_auth_free(kvs_remote *r);

/* remote_tls.c: TLS on a connection. The I/O calls return bytes, 0 (read:
 * EOF), -EAGAIN (wait until readable), -EINPROGRESS (wait until writable)
 * or the error (-EKEYREJECTED: a certificate did not verify; -EPROTO;
 * -errno), with r->last_err saying what failed. */
void kvs_rmt_tls_free(kvs_remote *r);
int kvs_rmt_tls_new(kvs_remote *r, const struct node *n, int fd,
		    struct ssl_st **out);
void kvs_rmt_tls_close(struct ssl_st *s);
int kvs_rmt_tls_handshake(kvs_remote *r, struct ssl_st *s, const struct node *n);
ssize_t kvs_rmt_tls_read(kvs_remote *r, struct ssl_st *s, void *buf, size_t len);
ssize_t kvs_rmt_tls_write(kvs_remote *r, struct ssl_st *s, const void *buf,
			  size_t len);
int kvs_rmt_tls_pending(const struct ssl_st *s);
/* What the socket BIO gathered (records waiting for one send): send it,
 * 0 when all went, -EAGAIN when the socket is full, or -errno; and whether
 * some is still unsent. */
int kvs_rmt_tls_send(struct ssl_st *s);
int kvs_rmt_tls_unsent(const struct ssl_st *s);
/* The connection's side: the handshake's next step (the queue goes once
 * it verified), writes of the queue, reads SSL holds past a read budget. */
void kvs_rmt_tls_step(kvs_remote *r, struct conn *c);
void kvs_rmt_tls_flush(kvs_remote *r, struct conn *c);
void kvs_rmt_conn_more(kvs_remote *r);

#endif /* KVS_REMOTE_INT_H */
