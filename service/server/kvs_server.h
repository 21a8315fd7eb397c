/*
 * kvs_server.h - the daemon: control socket, connections, request dispatch.
 *
 * One libevent loop thread owns everything. The control socket carries file
 * descriptors (the arena memfd on attach), so connections are read with
 * recvmsg on a raw event, not a bufferevent. Each message's length is checked
 * against KVS_WIRE_MAX_PAYLOAD before any buffer grows for it.
 *
 * Lifecycle: kvs_server_create() (binds the socket, allocates the arena) ->
 * kvs_server_run() (until SIGINT/SIGTERM) -> kvs_server_destroy() (closes
 * every client, frees the arena, removes the socket).
 *
 * Thread: one thread for the whole life of the server.
 */
#ifndef KVS_SERVER_H
#define KVS_SERVER_H

#include "kvs_config.h"

typedef struct kvs_server kvs_server;

/*
 * kvs_server_create - everything up to listen(): arena, cache, socket.
 * Raises the process's soft RLIMIT_NOFILE to its hard limit first, and once
 * the tiers, socket and metrics are open serves at most as many clients as
 * the fds left allow (its copy of @cfg's max_clients is lowered, logged).
 * Errors: KVS_E_DAEMON_RUNNING (a live daemon owns the socket),
 * KVS_E_CONFIG (the path exists and is not a socket), -errno, -ENOMEM.
 * Logs the reason of any failure.
 */
int kvs_server_create(const kvs_config *cfg, kvs_server **out);

/* kvs_server_run - signal readiness (--ready-fd) and serve until a SIGINT or
 * SIGTERM. Returns 0, or -errno if the loop failed. */
int kvs_server_run(kvs_server *s);

void kvs_server_destroy(kvs_server *s);

#endif /* KVS_SERVER_H */
