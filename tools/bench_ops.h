/*
 * bench_ops.h - kvsbench ops: control-plane throughput and latency of
 * kvshared beside Redis; and the forked-client runner that the other
 * subcommands share (their private kvshared: bench_proc.h).
 *
 *   kvsbench ops [--socket S] [--clients N] [--blocks K] [--seconds T]
 *                [--reps R] [--value-bytes V] [--json]
 *
 * N client processes each repeat lookup+release of a K-block prefix that is
 * cached (every lookup is K hits) against one daemon, for T seconds; beside
 * it, the same N processes repeat MGET of K keys of V bytes against a private
 * redis-server on a Unix socket. The two runs alternate (kvshare first on odd
 * repetitions, Redis first on even ones), R times; each repetition reports
 * ops/s and p50/p99 latency of both and their ratio, and the last row the
 * medians. A figure, not a test: the exit status says only whether it ran.
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

/*
 * Forked benchmark clients that start their timed part together.
 *
 * kvsb_client_fn - what each client runs, in a child process: set up
 * (connect, warm up), call kvsb_gate_wait(), then the timed part.
 * @ctx: the caller's context (inherited across fork, read only).
 * @idx: the client's index, 0..n-1.
 * @res: the client's result slot of res_size bytes, zeroed by the caller;
 *       what the child writes there comes back to the parent.
 * Returns 0, or a negative error (the child prints what failed).
 */
typedef struct kvsb_gate kvsb_gate;
typedef int (*kvsb_client_fn)(const void *ctx, unsigned idx, kvsb_gate *g,
			      void *res);

/*
 * kvsb_gate_wait - tell the parent this client is set up and block until
 * every client is. A client that fails before calling it is accounted for.
 * Thread: the client's (child) process.
 */
void kvsb_gate_wait(kvsb_gate *g);

/*
 * kvsb_clients_run - fork @n clients running @fn, open the gate once all are
 * set up (or failed), wait for them all, copy their result slots into @res
 * (n slots of @res_size bytes; its contents are copied to the children too).
 * Returns the number of clients that failed (a nonzero exit, a crash, a
 * fork that failed), or -errno when none could be started.
 * Thread: the main thread (it forks, and reaps only the clients it forked).
 */
int kvsb_clients_run(unsigned n, kvsb_client_fn fn, const void *ctx,
		     void *res, size_t res_size);

#endif /* KVSB_OPS_H */
