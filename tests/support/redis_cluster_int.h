/*
 * redis_cluster_int.h - what the files of the test cluster share
 * (redis_cluster.c: nodes, start and stop; redis_cli.c: redis-cli runs):
 * the cluster's fields and the clock. Not for tests: redis_cluster.h is
 * their interface.
 */
#ifndef KVS_REDIS_CLUSTER_INT_H
#define KVS_REDIS_CLUSTER_INT_H

#include "redis_cluster.h"

#include <limits.h>
#include <sys/types.h>
#include <time.h>
#include "kvs_clock.h"

#define CLI_TIMEOUT_S 10.0
#define CLI_ARGS_MAX 64

struct rc_cluster {
	int n, plain;
	int port[RC_MAX_NODES];
	pid_t pid[RC_MAX_NODES];
	char dir[512];
	char seeds[RC_MAX_NODES * 24], tls_seeds[RC_MAX_NODES * 24];
	int tls_port[RC_MAX_NODES]; /* tls_and_plain: the TLS ports */
	char server[PATH_MAX], cli[PATH_MAX];
	const char *const *extra;
	double cli_timeout_s;
	int tls, tls_auth_clients, tls_and_plain;
	int masters, replicas;    /* rc_opts.replicas: nodes masters.. replicate */
	char node_timeout[16];
};

#endif
