/*
 * kvs_remote.h - the remote engine: a Redis Cluster (or one plain Redis /
 * Valkey node) client for byte keys and values, on non-blocking sockets,
 * driven by the caller's event loop through one pollable fd.
 *
 * The engine knows keys, buffers and nodes, nothing of blocks or the cache
 * (the value format is kvs_remote_value.h; the tier glue is the caller).
 * Four operations: GET of a key into caller buffers of the expected size,
 * SET NX (or SET, replacing) of a value given as caller iovecs, and a
 * batch EXISTS. Each completes once, through the callback, from
 * kvs_remote_poll() only.
 *
 * Routing: keys go to the master owning their slot (kvs_remote_cluster_slots.h) in
 * a slot map fetched at open with CLUSTER SLOTS and refreshed (rate-limited,
 * in the background) after MOVED, connection failures and CLUSTERDOWN. A
 * MOVED reply updates that slot at once and resends; ASK resends once to
 * the named node behind ASKING; at most KVS_REMOTE_REDIRECTS redirections
 * per request. A seed that answers CLUSTER SLOTS with "cluster support
 * disabled" is a plain node that owns every slot.
 *
 * Data path: requests to one node are pipelined over a small pool of
 * connections (kvs_remote_set_pool). A SET is one sendmsg of the RESP
 * header, the caller's iovecs and the trailer: the value is never copied. A
 * GET's value is read straight into the caller's buffers (readv from the
 * socket once the reply's header is parsed; only the bytes that arrived
 * with the header are copied, and before a large value the engine reads at
 * most 4 KiB). Value bytes of requests on the wire are capped
 * (kvs_remote_set_max_inflight); requests past the cap wait in the engine,
 * in order.
 *
 * TLS (kvs_remote_set_tls, OpenSSL): every connection, the seeds' at open
 * included, does a TLS handshake (TLS 1.2 or later) that verifies the
 * node's certificate against the CA file and the name (the server name
 * setting, else the node's host as the seeds or the slot map name it; an
 * IP address must be in the certificate's IP SANs), presenting the client
 * certificate when set (mutual TLS). Nothing is written before the
 * handshake verified: the AUTH password never goes in clear, nor to a node
 * whose certificate did not verify. The zero-copy paths stay where TLS
 * allows: a SET's large value pieces are encrypted from the caller's
 * buffers (small pieces and the first 16 KiB of a value are coalesced in
 * a staging buffer, one record, one send); a GET's value is decrypted
 * into the caller's buffers (SSL copies each record once, from its buffer
 * into the caller's: the decryption's output). Bytes SSL took from the
 * socket but did not yet hand out are read on the next poll (the fd is
 * made readable for them), so a level-triggered loop misses nothing.
 *
 * AUTH rule: the password goes only to the seeds and to nodes that own
 * slots in the last slot map taken. A MOVED or ASK naming any other node
 * refreshes the map and waits for it; the request then goes where the map
 * says (to that node only once the map names it): a host that answers
 * redirects cannot make the engine send the password to a host of its
 * choosing. Without AUTH, redirects are followed at once.
 *
 * Faults never stall: every request has a deadline (kvs_remote_set_timeout_ms)
 * and completes with an error when it passes. A connection that fails
 * (refused, reset, EOF, a request's deadline passed on it, a protocol error)
 * is closed; its requests whose deadline has not passed are resent once, the
 * others complete with the error. A node whose connect failed or timed out
 * is "down" for a backoff (100 ms doubling to 2 s): requests for its slots
 * complete at once with the error (a quick miss), and the next request after
 * the backoff tries to connect again, so a node that comes back is served
 * again without any call from the caller.
 *
 * Bounds against a hostile or broken node: a reply may take what its
 * command needs and no more (kvs_resp_limit): GET, SET NX, EXISTS and AUTH
 * replies are never arrays, and take one line (KVS_RESP_LINE_MAX) or, for
 * GET, a value of up to twice the buffers' size and 64 KiB (another size
 * is -EMSGSIZE; a longer one is refused at its header); CLUSTER
 * SLOTS takes at most 8 MiB, 2^19 values, arrays 4 deep. A reply past its
 * limit, or of a type its command never gets (an array to GET, a status to
 * EXISTS), closes the connection (-EPROTO to the request it answered, the
 * requests behind it resent; counted err_proto; EV_PROTO once per
 * episode). Parsers give back what a large reply made them grow. At most
 * KVS_REMOTE_NODES_MAX nodes are known: a slot map naming more is refused
 * (the last map stays), nodes no range names any more are forgotten once
 * their connections are idle (seeds are kept), and nodes are found by a
 * hash of host:port. Host names are resolved on a thread of the engine's
 * (never on the caller's), again when a connect to the node fails, and a
 * failed resolution is tried again after 1 s; until a name resolves,
 * requests for its slots fail at once (-EHOSTUNREACH, a quick miss). Hosts
 * reach the event callback made printable (\xHH).
 *
 * Caveats:
 *  - open() resolves the seeds' names itself (it blocks anyway, bounded by
 *    the connect timeout); kvs_remote_attach() does not block at all.
 *  - With Redis's default cluster-require-full-coverage yes, the other masters
 *    answer CLUSTERDOWN once a master is marked failed: set it to "no" for a
 *    cache (docs/remote.md).
 *  - A SET that is resent after a lost connection may have been stored the
 *    first time: it then completes with -EEXIST.
 *  - A GET's destination content is unspecified after any result but 0.
 *
 * Errors (returned, or a completion's res): 0 or a count on success,
 * -errno otherwise:
 *   -ENOENT      GET: no such key (a miss)
 *   -EEXIST      SET NX: the key exists (not an error: counted as existed)
 *   -EMSGSIZE    GET: a value of another size than the buffers
 *   -ETIMEDOUT   the request's deadline passed
 *   -ECONNREFUSED, -ECONNRESET, -EHOSTUNREACH, -EPIPE, ...: the node is
 *                unreachable or the connection was lost (kind "down")
 *   -ENETDOWN    CLUSTERDOWN, or no master owns the slot
 *   -ELOOP       more than KVS_REMOTE_REDIRECTS MOVED/ASK
 *   -EACCES      AUTH refused, or NOAUTH/NOPERM
 *   -EIO         any other error reply (OOM, LOADING, ...)
 *   -EPROTO      a reply that does not parse or fit the command; TLS: a
 *                handshake or record that failed (not TLS, a bad record)
 *   -EKEYREJECTED TLS: the node's certificate did not verify (another CA,
 *                another name, expired) or the node refused ours; open
 *                fails with it, and later connections count it as "down"
 *                (kvs_remote_last_error says why)
 *   -EINVAL      bad arguments; -ENOMEM; -EBUSY (a setting after open)
 * Thread: a kvs_remote belongs to one thread (the daemon's loop); no locks.
 */
#ifndef KVS_REMOTE_H
#define KVS_REMOTE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

typedef struct kvs_remote kvs_remote;

#define KVS_REMOTE_KEY_MAX 128  /* key bytes */
#define KVS_REMOTE_IOV_MAX 8    /* buffers of one value */
#define KVS_REMOTE_POOL_MAX 16  /* connections per node */
#define KVS_REMOTE_REDIRECTS 5  /* MOVED/ASK per request */
#define KVS_REMOTE_NODES_MAX 1024 /* nodes known at once (seeds included) */
#define KVS_REMOTE_LAT_BUCKETS 14 /* bucket i: latency < 128 us << i; the
				   * last one: everything above */

enum kvs_remote_op { KVS_REMOTE_GET = 1, KVS_REMOTE_SET = 2, KVS_REMOTE_EXISTS = 3 };

/* One completion, as handed to the callback. */
typedef struct kvs_remote_cqe {
	uint64_t cookie; /* the caller's, from the submit */
	int op;          /* enum kvs_remote_op */
	int res;         /* GET: 0 (the value is in the buffers) or an error;
			  * SET: 0 stored, -EEXIST, or an error;
			  * EXISTS: the count of keys that exist (per key
			  * results in the caller's array) */
	uint64_t lat_us; /* submit to completion */
} kvs_remote_cqe;

/* kvs_remote_done_fn - one completion; @c is valid during the call only.
 * The callback may submit new requests, not call kvs_remote_poll/close. */
typedef void (*kvs_remote_done_fn)(void *arg, const kvs_remote_cqe *c);

/* Events, for a log line per episode (kvs_remote_set_event_fn). */
enum kvs_remote_event {
	KVS_REMOTE_EV_NODE_DOWN = 1, /* a node failed (err: why); its requests
				      * fail fast until it answers again */
	KVS_REMOTE_EV_NODE_UP,       /* a node that was down answers again */
	KVS_REMOTE_EV_MAP,           /* the slot map changed (host:port: the
				      * node that told) */
	KVS_REMOTE_EV_PROTO,         /* a reply that did not parse or fit its
				      * command: the connection was closed
				      * (once per episode: none in the 10 s
				      * before) */
	KVS_REMOTE_EV_MAP_REFUSED,   /* a slot map not taken (err: -EPROTO
				      * malformed, -ENOSPC more nodes than
				      * KVS_REMOTE_NODES_MAX); the last one
				      * stays (once per 10 s) */
	KVS_REMOTE_EV_ATTACHED,      /* kvs_remote_attach: the first map came
				      * (host:port: the node that told) */
	KVS_REMOTE_EV_AUTH,          /* a node refused AUTH (once until it
				      * accepts it again) */
};

/* kvs_remote_event_fn - one event about node @host:@port; @host is valid
 * during the call only. Called from inside any engine call; it must not
 * call the engine. */
typedef void (*kvs_remote_event_fn)(void *arg, int ev, const char *host,
				    unsigned port, int err);

/* Counters, one list for the struct and for rendering. */
#define KVS_REMOTE_STATS(X)                                                   \
	X(gets, "GET requests completed")                                     \
	X(hits, "GETs that returned a value of the expected size")            \
	X(misses, "GETs that found no value")                                 \
	X(sets, "SET (NX or not) requests completed")                         \
	X(stored, "SETs that stored the value")                               \
	X(existed, "SET NX refused: the key existed")                         \
	X(exists_keys, "keys asked by EXISTS batches")                        \
	X(bytes_in, "value bytes received (GET hits)")                        \
	X(bytes_in_direct, "of these, read from the socket straight into "    \
	  "the caller's buffers (the rest came with a reply header)")         \
	X(bytes_out, "value bytes sent (SET)")                                \
	X(err_timeout, "requests past their deadline")                        \
	X(err_down, "requests failed: node unreachable or connection lost")   \
	X(err_clusterdown, "requests failed: CLUSTERDOWN or unowned slot")    \
	X(err_wrong_size, "GETs of a value of another size")                  \
	X(err_redirect, "requests past the MOVED/ASK limit")                  \
	X(err_auth, "requests failed: AUTH refused or no permission")         \
	X(err_server, "requests failed: other error replies")                 \
	X(err_proto, "replies that did not parse or fit the command")         \
	X(moved, "MOVED redirections followed")                               \
	X(ask, "ASK redirections followed")                                   \
	X(resent, "requests resent after their connection failed")            \
	X(map_refreshes, "slot map refreshes done")                           \
	X(maps_refused, "slot maps refused: malformed, or too many nodes")    \
	X(nodes_freed, "nodes forgotten: no range of the map names them")     \
	X(resolves, "host name resolutions done (off the loop thread)")       \
	X(resolve_failures, "of these, failed")                               \
	X(connects, "connections opened")                                     \
	X(conn_failures, "connections failed or lost")                        \
	X(nodes, "nodes known")                                               \
	X(nodes_down, "nodes down now (failed, not answering again yet)")     \
	X(inflight_bytes, "value bytes of requests on the wire now")          \
	X(waiting, "requests waiting for the in-flight cap now")               \
	X(attached, "1 once a slot map (or a plain node) answered, else 0")   \
	X(reply_bytes, "bytes the connections' read buffers and reply "      \
	  "parsers hold now")

typedef struct kvs_remote_stats {
#define KVS_REMOTE_STATS_X(name, help) uint64_t name;
	KVS_REMOTE_STATS(KVS_REMOTE_STATS_X)
#undef KVS_REMOTE_STATS_X
	uint64_t lat_hist[KVS_REMOTE_LAT_BUCKETS]; /* completed requests */
} kvs_remote_stats;

/*
 * kvs_remote_create - an engine with defaults: no seeds (must be set), no
 * AUTH, timeout 1000 ms, connect timeout (open) 2000 ms, 2 connections per
 * node, 256 MiB of value bytes in flight, no callback.
 * Errors: -ENOMEM. Ownership: *out until kvs_remote_close().
 */
int kvs_remote_create(kvs_remote **out);

/*
 * Settings, before kvs_remote_open() only (-EBUSY after).
 * seeds: "HOST:PORT[,HOST:PORT...]" (an IPv6 address as [ADDR]:PORT), tried
 *        in order at open; -EINVAL when malformed.
 * auth: AUTH @user @password (Redis 6 ACL), or AUTH @password when @user is
 *       NULL; both copied; @password NULL clears. -EINVAL when too long.
 * timeout_ms: deadline of each request from its submit, 1..3600000.
 * connect_timeout_ms: bound of each seed's connect + AUTH + CLUSTER SLOTS
 *       at open, 1..3600000.
 * pool: connections per node, 1..KVS_REMOTE_POOL_MAX.
 * max_inflight: value bytes on the wire at once, >= 1 (one request larger
 *       than the cap still goes, alone).
 */
int kvs_remote_set_seeds(kvs_remote *r, const char *seeds);
int kvs_remote_set_auth(kvs_remote *r, const char *user, const char *password);
int kvs_remote_set_timeout_ms(kvs_remote *r, unsigned ms);
int kvs_remote_set_connect_timeout_ms(kvs_remote *r, unsigned ms);
int kvs_remote_set_pool(kvs_remote *r, unsigned conns);
int kvs_remote_set_max_inflight(kvs_remote *r, uint64_t bytes);

/* TLS settings (kvs_remote_set_tls); the strings are read during the call. */
struct kvs_remote_tls {
	const char *ca_file;     /* PEM CA certificates that sign the nodes'
				  * certificates; NULL: the system's store */
	const char *cert_file;   /* PEM client certificate (chain) for mutual
				  * TLS, or NULL; needs key_file */
	const char *key_file;    /* its PEM private key, or NULL */
	const char *server_name; /* the name every node's certificate must
				  * show (and the SNI sent), or NULL: each
				  * node's own host */
};

/*
 * kvs_remote_set_tls - TLS on every connection with @t (NULL: plain TCP,
 * the default). The files are loaded now, so a bad one fails here.
 * Errors: -EBUSY (after open), -EINVAL (a certificate without its key or
 * the reverse, an empty or too long server name, a file that does not load
 * as PEM, a key that does not match the certificate), -ENOENT/-EACCES (a
 * file that cannot be read), -ENOMEM; kvs_remote_last_error says which
 * file and why.
 * Ownership: nothing of @t is kept.
 */
int kvs_remote_set_tls(kvs_remote *r, const struct kvs_remote_tls *t);

/*
 * kvs_remote_last_error - what the last failed TLS call or seed exchange
 * said ("TLS handshake with 127.0.0.1:7001: certificate verify failed:
 * unable to get local issuer certificate"), for a log line; "" when none.
 * Ownership: the engine's, valid until its next call.
 */
const char *kvs_remote_last_error(const kvs_remote *r);

/* kvs_remote_set_callback - the completion callback (any time). */
void kvs_remote_set_callback(kvs_remote *r, kvs_remote_done_fn fn, void *arg);
/* kvs_remote_set_event_fn - the event callback (any time; NULL: none). */
void kvs_remote_set_event_fn(kvs_remote *r, kvs_remote_event_fn fn, void *arg);

/*
 * kvs_remote_open - connect to the seeds in order until one answers AUTH
 * (when set) and CLUSTER SLOTS, and take its slot map. Blocks, at most the
 * connect timeout per seed.
 * Errors: -EINVAL (no seeds), -EACCES (AUTH refused; TLS: the node closed
 * after the handshake without a client certificate), the last seed's
 * connect error (-ECONNREFUSED, -ETIMEDOUT, ...), -EKEYREJECTED (TLS: its
 * certificate did not verify), -EPROTO (a reply that does not parse, or,
 * TLS off, a node that closed before any reply: a TLS port), -ENOMEM;
 * kvs_remote_last_error says what the last seed answered.
 */
int kvs_remote_open(kvs_remote *r);

/*
 * kvs_remote_attach - open without blocking, for a caller that must go on
 * while the cluster does not answer (the daemon at start): the engine is
 * open at once; it asks the seeds for the slot map in the background, in
 * turn, with a backoff (100 ms doubling to 2 s) while none answers, until
 * one does (EV_ATTACHED; stats.attached 1). Until then every request
 * completes with -ENETDOWN (no slot has an owner). May follow a failed
 * kvs_remote_open().
 * Errors: -EBUSY (open), -EINVAL (no seeds), -ENOMEM, -errno (epoll).
 */
int kvs_remote_attach(kvs_remote *r);

/* kvs_remote_is_cluster - 1 for a cluster, 0 for one plain node (after open). */
int kvs_remote_is_cluster(const kvs_remote *r);

/* kvs_remote_fd - an fd that is readable when kvs_remote_poll() has work
 * (sockets, deadlines, completions): watch it for reading, level-triggered.
 * Ownership: the engine's, until close. */
int kvs_remote_fd(const kvs_remote *r);

/*
 * kvs_remote_poll - make progress without blocking: read replies, write
 * requests, expire deadlines, refresh the map, then call the callback for
 * every completion. Returns the number of completions delivered.
 */
int kvs_remote_poll(kvs_remote *r);

/* kvs_remote_pending - submitted requests whose completion was not yet
 * delivered (an EXISTS batch counts one). */
size_t kvs_remote_pending(const kvs_remote *r);

/*
 * kvs_remote_wait - for tools and tests: poll until nothing is pending or
 * @timeout_ms passed. Returns 0, or -ETIMEDOUT with requests pending.
 * Blocks (the only call besides open that does).
 */
int kvs_remote_wait(kvs_remote *r, int timeout_ms);

/*
 * kvs_remote_get - GET @key[@klen] into @iov[@iovcnt]; the value must be
 * exactly as long as the buffers together (else -EMSGSIZE).
 * Returns 0 (the completion follows) or -EINVAL (key empty or longer than
 * KVS_REMOTE_KEY_MAX, iovcnt 0 or over KVS_REMOTE_IOV_MAX, not open), -ENOMEM.
 * Ownership: the key and the iovec array are copied; the buffers belong to
 * the engine until the completion is delivered.
 */
int kvs_remote_get(kvs_remote *r, const void *key, size_t klen,
		   const struct iovec *iov, int iovcnt, uint64_t cookie);

/*
 * kvs_remote_set_nx - SET @key @value NX, the value being @iov[@iovcnt]
 * concatenated (sent with writev, not copied).
 * Returns as kvs_remote_get. Ownership: the key and iovec array are copied;
 * the value's bytes must stay valid and unchanged until the completion.
 */
int kvs_remote_set_nx(kvs_remote *r, const void *key, size_t klen,
		      const struct iovec *iov, int iovcnt, uint64_t cookie);

/*
 * kvs_remote_set - SET @key @value without NX: replaces what the key holds
 * (the remote tier's repair of a value that failed verification). Completes
 * with 0 or an error, never -EEXIST; counted with the SET NX requests.
 * Returns and Ownership as kvs_remote_set_nx.
 */
int kvs_remote_set(kvs_remote *r, const void *key, size_t klen,
		   const struct iovec *iov, int iovcnt, uint64_t cookie);

/*
 * kvs_remote_exists - EXISTS of each of @n keys (@keys[i], @klens[i] bytes),
 * pipelined per node; one completion for the batch, whose res is the count
 * that exist; @res[i] is then 1, 0, or the key's error.
 * Returns as kvs_remote_get (-EINVAL also for @n 0 or a bad key).
 * Ownership: keys are copied; @res belongs to the engine until the
 * completion.
 */
int kvs_remote_exists(kvs_remote *r, const void *const *keys,
		      const size_t *klens, size_t n, int *res, uint64_t cookie);

/* kvs_remote_stats - the counters now. */
void kvs_remote_get_stats(const kvs_remote *r, kvs_remote_stats *out);

/* kvs_remote_close - close every connection and free the engine. Requests
 * still pending are dropped without completion; their buffers are the
 * caller's again when this returns. NULL is a no-op. */
void kvs_remote_close(kvs_remote *r);

#endif /* KVS_REMOTE_H */
