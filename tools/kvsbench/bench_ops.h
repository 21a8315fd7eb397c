/*
 * bench_ops.h - kvsbench ops: control-plane throughput and latency of
 * kvshared beside Redis (the forked-client runner and the private kvshared
 * that the subcommands share: bench_proc.h).
 *
 *   kvsbench ops [--socket S] [--clients N] [--blocks K] [--seconds T]
 *                [--reps R] [--path fast|socket|both] [--value-bytes V]
 *                [--json]
 *
 * N client processes each repeat lookup+release of a K-block prefix that is
 * cached (every lookup is K hits) against one daemon, for T seconds, once on
 * the fast path (the shared index: the default client) and once on the socket
 * path (KVS_CONNECT_NO_FASTPATH); beside them, the same N processes repeat
 * MGET of K keys of V bytes against a private redis-server on a Unix socket.
 * The runs are interleaved (each system goes first in turn), R times; each
 * repetition reports ops/s and p50/p99 latency of each and each kvshare
 * path's ratio to Redis, and the last row the medians. A figure, not a test: the exit status says only whether it ran.
 */
#ifndef KVSB_OPS_H
#define KVSB_OPS_H

#include <stdint.h>

/*
 * kvsb_cmd_ops - the `ops` subcommand.
 * @sock: kvsbench's --socket, or NULL (the command's own --socket wins; with
 *        neither, a private kvshared is started beside kvsbench).
 * @argc, @argv: the command's arguments, argv[0] = "ops".
 * Returns the process exit status: 0 ran, 1 failed, 2 usage.
 * Thread: the main thread; it forks.
 */
int kvsb_cmd_ops(const char *sock, int argc, char **argv);

#endif /* KVSB_OPS_H */
