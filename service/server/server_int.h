/*
 * server_int.h - the server's internals, shared by its files only:
 * server.c (listening, peer checks, life cycle), conn.c (connections: read,
 * write, timeouts), command.c (the command table and the handlers) and
 * server_stats.c (stats text and Prometheus rendering). Nothing else
 * includes it.
 *
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_SERVER_INT_H
#define KVS_SERVER_INT_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "kvs_admin.h"
#include "kvs_cache.h"
#include "kvs_clock.h"
#include "kvs_fastidx.h"
#include "kvs_hist.h"
#include "kvs_log.h"
#include "kvs_metrics.h"
#include "kvs_persist.h"
#include "kvs_sdnotify.h"
#include "kvs_server.h"
#include "kvs_stats.h"
#include "kvs_tiers_table.h"
#include "kvs_wire.h"

/* Stop reading a client whose replies pile up past this; resume once sent. */
#define OUT_HIGH (1u << 20)

/* A connection's turn of the loop: it handles its pipelined requests until
 * their work reaches TURN_WORK units, then yields to the other connections
 * and goes on in the loop's next turn (conn.c). A request is one unit, one
 * more per TURN_WORK_BYTES of its payload, and a LIST one more per
 * TURN_WORK_RECORDS records it visits (command.c). The first request of a
 * turn is always handled, so a turn is at most TURN_WORK - 1 units plus one
 * request (docs/reliability.md, "Hostile clients"). */
#define TURN_WORK 64u
#define TURN_WORK_BYTES (16u << 10)
#define TURN_WORK_RECORDS 1024u

typedef struct conn conn;

/* Tiers whose completions the loop polls: at most one per kvs_tier value. */
#define KVS_SERVER_TIERS 8

struct kvs_server {
	kvs_config cfg;
	struct event_base *base;
	struct event *listen_ev, *sigint_ev, *sigterm_ev;
	struct event *tier_ev[KVS_SERVER_TIERS]; /* tiers' event fds */
	int listen_fd;
	kvs_cache *cache;
	kvs_fast *fast;   /* the fast path (service/fast/) */
	struct event *fast_ev; /* its heartbeat, every KVS_FAST_HEARTBEAT_MS */
	kvs_admin *admin; /* operator requests and events (admin.c) */
	struct kvs_kvev *kvev; /* vLLM KV events (--kv-events), or NULL */
	kvs_counters stats;
	kvs_hist latency[KVS_OP__COUNT]; /* by opcode */
	kvs_metrics *metrics;
	struct timespec started;
	conn *conns; /* doubly linked: served and refusing connections */
	uint32_t nconns;    /* served */
	uint32_t nrefusing; /* waiting for their first message to be refused */
	uint64_t next_id;   /* connection ids, for the log */
	uid_t uid;          /* the daemon's own: always allowed */
	/* File descriptors (server.c): RLIMIT_NOFILE after the raise at
	 * start, and the listener's pause while accept() finds none. */
	uint64_t fd_limit;
	struct event *accept_ev;    /* re-arms the listener after a pause */
	uint32_t accept_backoff_ms; /* the pause now; 0: accepting */
	uint64_t accept_pauses;     /* pauses of this episode */
	kvs_ratelimit rl_accept, rl_refuse; /* their log lines */
	/* Served connections per peer uid (--max-clients-per-uid): open
	 * addressing on uid, n 0 an empty slot; mask + 1 slots, at least
	 * twice --max-clients. */
	struct uid_conns { uint32_t uid, n; } *uids;
	uint32_t uids_mask;
	uint32_t max_per_uid;
	/* Scratch for one request at a time: the loop handles one at once. */
	kvs_hash *hashes;  /* its hashes, decoded (command.c) */
	kvs_block *blocks; /* its reply's blocks */
	uint8_t *reply;
	uint32_t req_work; /* the work units of the request being handled */
	/* Engines' counts (REPORT) per namespace, [ns id - 1], grown to the
	 * highest id that reported (server_stats.c). */
	kvs_engine_report *ns_engines;
	uint32_t nns_engines;
	/* Hand-over (server_handover.c): one under way, or NULL; whether it
	 * is done (the successor has the socket and the pool: the path is
	 * left in place at exit); whether systemd's fd store holds them (a
	 * stop leaves the path too, for the next start). */
	struct handover *ho;
	int handed_over;
	int fd_store;
	int fds_stored; /* of kvs_persist_fds', the first so many are stored */
	/* The names systemd's fd store passed at start ($LISTEN_FDNAMES), until
	 * the first store: those this start does not store again are removed
	 * from it then (FDSTOREREMOVE=1), so it pins no memfd nobody uses. */
	char passed[KVS_SD_FDS_MAX][KVS_FDNAME_MAX + 1];
	uint32_t npassed;
	kvs_persist_report start; /* how this daemon started */
};

struct conn {
	kvs_server *srv;
	conn *prev, *next;
	int fd;
	struct event *rev, *wev;
	uint8_t *in;
	size_t in_off, in_len, in_cap; /* unread bytes are in[in_off, in_len) */
	struct evbuffer *out;
	int pending_fd;  /* fd to attach to the first byte of out, or -1 */
	int pending_fd2; /* a second one with it (the GPU arena), or -1 */
	int pending_own2; /* pending_fd2 is ours: closed once sent (or at close) */
	int closing;     /* close once out is flushed */
	int reading;     /* rev is armed */
	int waiting;     /* a lookup's or verify's answer is deferred (SSD
			  * reads): no other request is handled until it is
			  * sent */
	kvs_wire_hdr wait_hdr; /* that request's header */
	kvs_owner *owner;
	kvs_fast_client *fast; /* its pin area, after FASTATTACH */
	kvs_admin_sub *sub; /* watching events, or NULL */
	uint32_t ns;
	uint64_t id;
	uint32_t uid;    /* the peer's (SO_PEERCRED), UINT32_MAX unknown */
	int refuse;      /* 0, or the status that answers its first message */
	struct event *tev;   /* --client-timeout */
	struct event *qev;   /* a query's bound (command.c), made on first use */
	struct event *yev;   /* its next turn, after it yielded */
	int yielded;         /* its turn is over, yev pending: no request is
			      * handled until yev fires */
	/* Monotonic ms since which the connection has held an incomplete
	 * message (partial_msgs: messages handled by then), and since which its
	 * replies have been over OUT_HIGH with none of them read; 0: not. */
	uint64_t partial_since, unread_since, timer_since;
	uint64_t msgs, partial_msgs;
};


/* ---- conn.c ---- */

/* conn_open - a connection on @fd (accepted) for a peer of @uid, linked into
 * the server and armed; @refuse: 0, or the status its first message is
 * answered with. Returns NULL when out of memory (@fd is the caller's). */
conn *conn_open(kvs_server *s, int fd, int refuse, uint32_t uid);
/* conn_close - free @c; @why: logged at info level when not NULL. */
void conn_close(conn *c, const char *why);
/* conn_process - handle every complete message read. Returns -1 when the
 * connection was closed (c is gone), else 0. */
int conn_process(conn *c);
/* conn_reply - queue a reply to @req: @status, and @payload when 0. */
void conn_reply(conn *c, const kvs_wire_hdr *req, int status,
		const uint8_t *payload, size_t len);
/* conn_reply_error - conn_reply() an error, counted and logged (debug). */
void conn_reply_error(conn *c, const kvs_wire_hdr *req, int err);

/* conn_drain - stop reading @c and close it once the replies it was given
 * are sent (a deferred one included). Returns -1 when @c was closed now. */
int conn_drain(conn *c);

/* ---- server.c ---- */

/* server_conn_gone - a served (not refused) connection of @uid closed: one
 * fewer for --max-clients-per-uid. */
void server_conn_gone(kvs_server *s, uint32_t uid);

/* ---- server_handover.c ---- */

/* The hand-over message's format: a successor that reads another is
 * refused before anything is touched (the old daemon keeps serving). */
#define KVS_HANDOVER_VERSION 1u
/* HANDOVER request flags: 0 asks; ACK says the fds arrived. */
#define KVS_HANDOVER_ACK 0x1u

/* server_handover_start - a HANDOVER request from @c (version @version,
 * flags @flags): refused (the error returned: KVS_E_PERM for another uid,
 * KVS_E_VERSION, -EBUSY, KVS_E_PROTO) or begun: the listener stops, every
 * connection drains, then the fds go to @c's peer (the reply comes then). */
int server_handover_start(conn *c, const kvs_wire_hdr *h, uint32_t version,
			  uint32_t flags);
/* server_handover_free - free what a hand-over under way holds, but its
 * link to the successor: returned (-1: none) for the caller to close. */
int server_handover_free(kvs_server *s);
/* The connection a take-over's fds came on, and the pid that sent them. */
struct takeover_link {
	int fd;    /* -1: none */
	pid_t pid;
};
/* server_takeover - the successor's side, from kvs_server_create: ask the
 * daemon on cfg.take_over for its fds (@fds, at most @max; the listening
 * socket among them, named "listen"). Returns how many, with @tl the
 * connection to acknowledge them on (server_takeover_ack); KVS_E_VERSION
 * when the formats differ (@why says so: start cold); KVS_E_PERM, -errno
 * (@why says what failed). */
int server_takeover(const char *path, kvs_named_fd *fds, uint32_t max,
		    struct takeover_link *tl, char *why, size_t cap);
/* server_takeover_ack - tell the old daemon the fds arrived and wait (a few
 * seconds at most) for its process to exit (a pidfd: a closed connection
 * is not enough), so that it serves the pool no more and nothing it holds
 * (the metrics port, the SSD tier's files) is still open when this one
 * opens them. Closes @tl->fd. Returns 0 once it exited; else <0 (@why
 * says why): the fds must not be used. */
int server_takeover_ack(const struct takeover_link *tl, char *why, size_t cap);
/* server_startup_fds - the fds this daemon starts with: from --take-over,
 * else from systemd ($LISTEN_FDS); the listening socket, if among them,
 * taken out into *listen_fd (else -1). A take-over's are acknowledged and
 * kept only once the old daemon has exited (else closed: a cold start on
 * the socket, start.reason says why).
 * Returns how many are left in @fds, or the error that stops the start. */
int server_startup_fds(kvs_server *s, kvs_named_fd *fds, uint32_t max,
		       int *listen_fd);
/* server_fdstore_more - store the pool's fds made since they were last
 * stored (a tenant arena made on a uid's first attach), so that a crash
 * keeps them: under systemd's fd store only, a no-op otherwise. */
void server_fdstore_more(kvs_server *s);
/* server_adopt - rebuild the table from the fds left (@fds, @n; none: a
 * cold start), and say how the daemon started (log, start.* stats).
 * Returns 0, or the error that stops the start. */
int server_adopt(kvs_server *s, kvs_named_fd *fds, uint32_t n);
/* server_ready - READY=1 for systemd, and the fds to keep in its store
 * (the names passed at start and not stored again removed from it). */
void server_ready(kvs_server *s);
/* server_stopping - a stop under systemd: STOPPING=1, every connection
 * closed, the state marked as left cleanly, the fds stored again. */
void server_stopping(kvs_server *s);

/* ---- command.c ---- */

/* Command flags, from the command table. */
#define CMD_CONTROL 0x1u    /* an attached (worker) connection gets -EPERM */
#define CMD_ATTACHED 0x2u   /* a connection not attached gets
			     * KVS_E_NOTATTACHED (counted) */
#define CMD_DEFERRABLE 0x4u /* may answer later: -EINPROGRESS holds the
			     * connection's other requests until it does */
#define CMD_SENDS_FD 0x8u   /* its reply may carry fds: it waits until the
			     * replies before it are sent */
#define CMD_OPERATOR 0x10u  /* a peer that is not an operator (the daemon's
			     * uid, root, --admin-uid) gets KVS_E_PERM */
#define CMD_SCOPED 0x20u    /* a worker's is kept to its domain, or refused
			     * with KVS_E_PERM (command.c, scope_request) */

/* server_nofile_raise - raise the soft RLIMIT_NOFILE to the hard one;
 * the limit in effect (server_fds.c). */
uint64_t server_nofile_raise(void);
/* server_fds_budget - fit --max-clients to the fds the limit leaves, once
 * the server is set up; 0 or a negative errno (server_fds.c). */
int server_fds_budget(kvs_server *s);
/* command_dispatch - handle one complete request (header @h, payload @p). */
void command_dispatch(conn *c, const kvs_wire_hdr *h, const uint8_t *p);
/* command_flags - CMD_* of @opcode; 0 for an opcode the daemon does not serve. */
unsigned command_flags(uint32_t opcode);
/* command_operator - whether @c's peer is an operator (the daemon's uid,
 * root, --admin-uid). */
int command_operator(const conn *c);
/* command_lookup_done - kvs_cache_done_fn of every connection's owner: a
 * deferred lookup is answered. */
void command_lookup_done(void *arg, int rc, uint64_t lease, const kvs_block *out);

/* ---- server_stats.c ---- */

/* server_stats_text - the STATS reply: counters, latencies, namespaces, as
 * "name value" lines in a malloc'ed *text. Errors: -ENOMEM.
 * Ownership: the caller frees *text. */
int server_stats_text(kvs_server *s, char **text, size_t *len);
/* server_engines_add - an engine's REPORT @r: added to the "engines"
 * totals and, from a connection attached to namespace @ns (0: none), to
 * that namespace's counts; saturating at INT64_MAX, so that a client cannot
 * wrap an operator's counter. Without memory for the namespace's counts only
 * the totals grow. */
void server_engines_add(kvs_server *s, uint32_t ns, const kvs_engine_report *r);
/* server_stats_parts - every stats section in the order of the stats text,
 * with its values: the server's head (server .. ops, on @st), the fast
 * path's (@fast; zeros when NULL), the server's middle (engines ..
 * tier_host), the tiers' (kvs_tiers_stats), the server's tail (leases ..
 * errors). Returns how many (SERVER_STATS_PARTS). */
#define SERVER_STATS_PARTS (KVS_TIERS_SECTIONS + 4)
uint32_t server_stats_parts(const kvs_counters *st, const kvs_fast *fast,
			    const kvs_cache *c,
			    kvs_stats_part out[SERVER_STATS_PARTS]);
/* server_render_prometheus - kvs_metrics' render callback (@arg: the server). */
void server_render_prometheus(FILE *f, void *arg);
/* server_prefix_serve - answer POST /v1/prefix on the server's metrics
 * port (prefix.c). */
void server_prefix_serve(kvs_server *s);

#endif /* KVS_SERVER_INT_H */
