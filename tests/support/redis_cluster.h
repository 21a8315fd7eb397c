/*
 * redis_cluster.h - test helper: a private Redis Cluster (N masters, with
 * or without a replica each) or one plain Redis node, on loopback, on
 * free ports, in its own mkdtemp directory; redis-cli commands against its
 * nodes; kill and restart of a node; wait for a failover. For the remote
 * engine's tests and the daemon-level remote tier tests.
 *
 *   rc_cluster *c;
 *   int rc = rc_start(&(rc_opts){ .masters = 3 }, &c);
 *   if (rc == -ENOENT) { printf("SKIP: %s\n", rc_why()); return 77; }
 *   ... rc_seeds(c) ... rc_cli(c, 0, out, sizeof(out), "CLUSTER", "INFO", NULL)
 *   rc_stop(c);
 *
 * Nodes run `redis-server --port P --cluster-enabled yes --cluster-config-file
 * nodes.conf --dir DIR/nI` with cluster-node-timeout 2000 and
 * cluster-require-full-coverage no (a dead master does not stop the others:
 * the setting docs/remote.md recommends), no persistence; then
 * `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`, and
 * the start waits until every node reports cluster_state:ok, 16384 slots
 * assigned and every node known. Every wait polls a condition against a
 * deadline (no fixed sleeps); every redis-cli call is bounded (killed after
 * 10 s, rc_set_cli_timeout). rc_stop (also at exit, from an atexit handler, for a test that
 * exits early) kills each server and waits for its PID; the directory is
 * removed unless RC_KEEP=1.
 *
 * TLS mode (rc_opts.tls): the start first makes a CA, a node certificate
 * (SANs IP:127.0.0.1 and DNS:localhost), a client certificate and a second,
 * unrelated CA with the openssl CLI in DIR/tls (rc_tls_file names them);
 * nodes listen with TLS only (`--port 0 --tls-port P`, tls-cluster and
 * tls-replication yes, client certificates required only with
 * tls_auth_clients), and every redis-cli call goes with --tls and the
 * client certificate. With tls_and_plain, nodes listen on both: rc_seeds
 * and rc_port name the plain ports (redis-cli uses them), rc_tls_seeds
 * the TLS ones, and Redis answers CLUSTER SLOTS and MOVED with the ports of
 * the client's kind (benchmarks compare both on the same servers). A
 * redis-server built without TLS, or no openssl CLI: -ENOENT (skip).
 *
 * Binaries: $REDIS_SERVER / $REDIS_CLI, else redis-server / redis-cli on
 * PATH, else /usr/bin. Errors: -ENOENT (a binary is missing: skip the test,
 * rc_why() says which), -ETIMEDOUT, other -errno. Thread: one thread.
 */
#ifndef RC_REDIS_CLUSTER_H
#define RC_REDIS_CLUSTER_H

#include <stddef.h>

#define RC_MAX_NODES 8

typedef struct rc_cluster rc_cluster;

typedef struct rc_opts {
	int masters;              /* 1..RC_MAX_NODES (plain: 1) */
	int plain;                /* one node, cluster support disabled */
	const char *const *extra; /* more redis-server arguments, NULL-ended */
	double timeout_s;         /* start bound; 0: 60 s */
	int tls;                  /* TLS only (above) */
	int tls_auth_clients;     /* TLS: nodes require a client certificate */
	int tls_and_plain;        /* TLS and plain ports both (above) */
	int replicas;             /* replicas per master (0 or 1): node
				   * masters + i replicates master i */
	int node_timeout_ms;      /* cluster-node-timeout; 0: 2000 (a failover
				   * takes about twice this) */
} rc_opts;

int rc_start(const rc_opts *o, rc_cluster **out);
/* The reason of the last -ENOENT (or other failure), for the skip line. */
const char *rc_why(void);
int rc_nodes(const rc_cluster *c);
int rc_port(const rc_cluster *c, int i);
/* "127.0.0.1:P1,127.0.0.1:P2,..." */
const char *rc_seeds(const rc_cluster *c);
const char *rc_dir(const rc_cluster *c);
/*
 * rc_make_certs - make the TLS files rc_tls_file names in new directory
 * @dir with the openssl CLI (P-256 keys, quick to make; valid two days), in
 * at most @timeout_s. Errors: -ENOENT (no openssl on PATH), -ETIMEDOUT,
 * -EIO (openssl failed: DIR/openssl.log), -errno; @why[@cap] says which.
 */
int rc_make_certs(const char *dir, double timeout_s, char *why, size_t cap);
/* rc_tls_seeds - the TLS ports as seeds (TLS only: rc_seeds); NULL
 * without TLS. */
const char *rc_tls_seeds(const rc_cluster *c);
/* rc_tls_file - the path of TLS file @name of a TLS cluster: "ca.crt",
 * "node.crt", "node.key", "client.crt", "client.key", "other-ca.crt" (a CA
 * that signed nothing here); NULL without TLS. Ownership: a static buffer,
 * until the next call. */
const char *rc_tls_file(const rc_cluster *c, const char *name);

/*
 * rc_cli - run `redis-cli -p PORT(i) ARGS...` (NULL-terminated strings),
 * its stdout and stderr (the last @cap - 1 bytes; trailing newline removed)
 * into @out[@cap]. Returns its exit
 * status (0 ok), or -errno / -ETIMEDOUT. A redis error reply prints as
 * "(error) ..." only on a terminal: here it is the text itself, check it.
 */
int rc_cli(const rc_cluster *c, int i, char *out, size_t cap, ...);
/* rc_set_cli_timeout - the bound of each rc_cli call (default 10 s); a
 * long `redis-cli --cluster reshard` needs more. */
void rc_set_cli_timeout(rc_cluster *c, double seconds);
/* rc_cli_argv - the same with an argv array of @argc strings. */
int rc_cli_argv(const rc_cluster *c, int i, char *out, size_t cap, int argc,
		const char *const *argv);

/* rc_pid - node @i's PID (0 when not running), e.g. for SIGSTOP/SIGCONT. */
int rc_pid(const rc_cluster *c, int i);
/* rc_kill - SIGKILL node @i and wait for its PID. */
int rc_kill(rc_cluster *c, int i);
/* rc_restart - start node @i again (same port, dir, nodes.conf) and wait
 * until it answers PING and, in a cluster, reports cluster_state:ok. */
int rc_restart(rc_cluster *c, int i, double timeout_s);
/* rc_wait_ok - wait until every live node reports cluster_state:ok. */
int rc_wait_ok(rc_cluster *c, double timeout_s);
/* rc_wait_failover - after master @i was killed: wait until its replica
 * (node rc_replica_of(@i)) reports itself a master with cluster_state:ok. */
int rc_wait_failover(rc_cluster *c, int i, double timeout_s);
/* rc_replica_of - the node that replicates master @i, or -1 (no replicas). */
int rc_replica_of(const rc_cluster *c, int i);
/* rc_stop - kill every node, wait for each, remove the directory; NULL ok. */
void rc_stop(rc_cluster *c);

#endif /* RC_REDIS_CLUSTER_H */
