/*
 * bench_proc.h - the processes of kvsbench's subcommands: the private
 * kvshared they start when no --socket is given (started beside kvsbench, in
 * its own mkdtemp directory, ready when it writes "READY" on its
 * --ready-fd), and the forked benchmark clients they measure with.
 */
#ifndef KVSB_PROC_H
#define KVSB_PROC_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvsb_daemon kvsb_daemon;

/*
 * kvsb_daemon_start - start a private kvshared with --host-size @host_bytes
 * (rounded up to MiB) and --log-level warn; kvsb_daemon_start_args() with
 * those two flags.
 */
int kvsb_daemon_start(uint64_t host_bytes, double timeout_s,
		      kvsb_daemon **out);

/*
 * kvsb_daemon_start_args - start a private kvshared: the executable named
 * "kvshared" in the directory of the running program (/proc/self/exe), with
 * --socket DIR/kvshared.sock in a new mkdtemp directory, --ready-fd, then
 * @args; wait for its "READY" line.
 * @args: NULL-terminated extra flags (at most 24; a later flag wins over an
 *        earlier one, so --log-level here overrides nothing but the
 *        daemon's default). The strings are copied before the call returns.
 * @timeout_s: how long to wait for READY.
 * @out: the running daemon.
 * Errors: -ENOENT (no kvshared beside the program), -ETIMEDOUT (no READY in
 *         time; it is killed), -ECHILD (it exited during start-up; its log
 *         goes to stderr), -E2BIG (too many @args), -ENOMEM, other -errno.
 * Ownership: *out is the caller's until kvsb_daemon_stop(). The daemon gets
 *            SIGTERM if the calling thread dies first.
 * Thread: the caller's.
 */
int kvsb_daemon_start_args(const char *const *args, double timeout_s,
			   kvsb_daemon **out);

/*
 * kvsb_daemon_start_exe - kvsb_daemon_start_args() with the executable
 * @bin, or with NULL the one beside the running program.
 */
int kvsb_daemon_start_exe(const char *bin, const char *const *args,
			  double timeout_s, kvsb_daemon **out);

/*
 * kvsb_beside_exe - the path of the program @name in the running program's
 * directory, into @buf of @len bytes.
 * Errors: -ENOENT (none there, or not executable), -ENAMETOOLONG, -errno.
 */
int kvsb_beside_exe(const char *name, char *buf, size_t len);

/*
 * kvsb_daemon_exe - kvsb_beside_exe() of "kvshared".
 */
int kvsb_daemon_exe(char *buf, size_t len);

/*
 * kvsb_daemon_start_ms - how long the last start took, from fork to the
 * READY line, in milliseconds. Thread: the daemon's owner.
 */
double kvsb_daemon_start_ms(const kvsb_daemon *d);

/*
 * kvsb_daemon_socket, kvsb_daemon_log - the private daemon's socket path
 * and the file that has its stdout and stderr.
 * Ownership: valid until kvsb_daemon_stop(). Thread: the daemon's owner.
 */
const char *kvsb_daemon_socket(const kvsb_daemon *d);
const char *kvsb_daemon_log(const kvsb_daemon *d);

/*
 * kvsb_daemon_stop - SIGTERM, reap (SIGKILL after a few seconds), remove the
 * directory, free @d. @d may be NULL.
 * Errors: -ECHILD when the daemon did not exit with status 0 (its log goes
 *         to stderr; it is reaped and cleaned up all the same).
 * Thread: the thread that started it.
 */
int kvsb_daemon_stop(kvsb_daemon *d);

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

/*
 * kvsb_run_capture - run @argv (its PATH searched) with stdout and stderr
 * into @out[@cap], NUL-ended (what does not fit is read and dropped); its
 * exit status, 128 when a signal ended it, -ETIMEDOUT (killed) after
 * @timeout_s.
 */
int kvsb_run_capture(char *const *argv, char *out, size_t cap, double timeout_s);

#endif /* KVSB_PROC_H */
