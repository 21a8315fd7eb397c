/*
 * bench_cluster.h - the private Redis Cluster of `kvsbench remote`:
 * kvs-redis-cluster (tests/remote's cluster tool, built beside kvsbench)
 * started with three masters on loopback, and stopped when its stdin closes.
 */
#ifndef KVSB_CLUSTER_H
#define KVSB_CLUSTER_H

#include <limits.h>
#include <sys/types.h>

#define KVSB_CLUSTER_MAX_PORTS 16

typedef struct kvsb_cluster {
	pid_t pid;
	int in;
	char seeds[1024];
	int ports[KVSB_CLUSTER_MAX_PORTS];
	int nports;
	char tls_seeds[1024], ca[PATH_MAX]; /* --tls: TLS_SEEDS, DIR/tls/ca.crt */
} kvsb_cluster;

/*
 * kvsb_cluster_start - start the cluster into @cl (with @tls, TLS ports
 * beside the plain ones and a CA that signed them) and wait for READY.
 * -ENOENT: no kvs-redis-cluster beside kvsbench, or it skipped (no
 * redis-server; it said why on stderr); -ECHILD: it ended before READY.
 */
int kvsb_cluster_start(kvsb_cluster *cl, int tls);

/* kvsb_cluster_stop - stop it and reap it (SIGKILL after 30 s); no-op when
 * not started. */
void kvsb_cluster_stop(kvsb_cluster *cl);

/* kvsb_cluster_flush - FLUSHALL on each of its nodes (redis-cli). */
void kvsb_cluster_flush(const kvsb_cluster *cl);

#endif
