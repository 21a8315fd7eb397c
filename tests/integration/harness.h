/*
 * harness.h - the integration-test harness: a real kvshared in its own temp
 * directory, client processes, raw protocol access, and checks.
 *
 * Every test is one executable:
 *
 *   int main(void)
 *   {
 *           th_daemon d;
 *
 *           th_init("test_share");              // exits 77 without $KVSHARED
 *           th_daemon_up(&d, TH_ARGS("--host-size", "16M"));
 *           ... CHECK(...), CHECK_EQ(...), CHECK_RC(...) ...
 *           return th_finish();                 // 0 pass, 1 fail
 *   }
 *
 * The daemon is started with fork+exec of $KVSHARED --socket DIR/kvshared.sock
 * --ready-fd 3 plus the test's arguments, and is ready when it writes "READY"
 * on fd 3; its stdout and stderr go to DIR/kvshared.log, which is printed when
 * it fails to start and when the test fails (with d->fdstore, it runs under
 * $KVS_FDSTORE, the tests' stand-in for systemd, which relays its READY=1 to
 * fd 3 instead). Nothing waits with a fixed sleep:
 * every wait polls a condition against a deadline.
 *
 * Exit paths: th_finish() returns the exit code; th_fatal() and th_skip() exit
 * (1 and 77). Daemons and child processes still running at exit are killed and
 * the temp directories removed (set TH_KEEP=1 to keep them). A watchdog
 * (th_init's timeout) kills everything and fails the test if it hangs; a crash
 * of the test (SIGSEGV, SIGABRT...) cleans up the same way before it dies.
 *
 * Child processes (th_spawn) run a function and exit with its result, or 1 if
 * a CHECK failed in the child; each gets a socketpair end to synchronize with
 * the parent and inherits no other descriptor (so a child never keeps the
 * parent's connections alive). Leaving a child with exit() is safe: the
 * harness's exit handler only cleans up in the main process.
 *
 * The harness is split by module, one header each; a test includes those it
 * uses:
 *   harness.h         checks, the test's life cycle, the daemon (this file)
 *   harness_client.h  clients, stats, layouts, hashes, block contents
 *   harness_child.h   child processes and their sync messages
 *   harness_raw.h     raw protocol messages on a plain socket
 *   harness_ssd.h     daemons with an SSD tier and their checks
 *
 * Thread: single-threaded tests only.
 */
#ifndef TH_HARNESS_H
#define TH_HARNESS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvshare.h"

/* ---- checks --------------------------------------------------------------- */

/* Each returns whether the check passed, so a test can stop a branch early:
 * if (!CHECK(p != NULL)) goto out; */
#define CHECK(expr) th_check(!!(expr), __FILE__, __LINE__, #expr)
#define CHECK_EQ(a, b)                                                        \
	th_check_cmp((long long)(a), (long long)(b), "==", __FILE__, __LINE__,  \
		     #a, #b)
#define CHECK_NE(a, b)                                                        \
	th_check_cmp((long long)(a), (long long)(b), "!=", __FILE__, __LINE__,  \
		     #a, #b)
#define CHECK_GE(a, b)                                                        \
	th_check_cmp((long long)(a), (long long)(b), ">=", __FILE__, __LINE__,  \
		     #a, #b)
#define CHECK_LE(a, b)                                                        \
	th_check_cmp((long long)(a), (long long)(b), "<=", __FILE__, __LINE__,  \
		     #a, #b)
#define CHECK_GT(a, b)                                                        \
	th_check_cmp((long long)(a), (long long)(b), ">", __FILE__, __LINE__,   \
		     #a, #b)
#define CHECK_LT(a, b)                                                        \
	th_check_cmp((long long)(a), (long long)(b), "<", __FILE__, __LINE__,   \
		     #a, #b)
/* A return code: 0, a count or an error; errors are named by kvs_strerror. */
#define CHECK_RC(call, want)                                                  \
	th_check_rc((long long)(call), (long long)(want), __FILE__, __LINE__, #call)

bool th_check(bool ok, const char *file, int line, const char *expr);
bool th_check_cmp(long long a, long long b, const char *op, const char *file,
		  int line, const char *ea, const char *eb);
bool th_check_rc(long long got, long long want, const char *file, int line,
		 const char *expr);

/* Print a note (prefixed with the test name) to stderr. */
void th_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * th_init - start a test: name it, ignore nothing (SIGPIPE stays fatal, so a
 * client library that raises it is caught), arm a watchdog of
 * $TH_TIMEOUT seconds (default 120), and skip (exit 77) if $KVSHARED is unset
 * or not executable.
 */
void th_init(const char *name);

/* th_skip - print "<name>: SKIP: <reason>" and exit 77. */
void th_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* th_skip_part - a part of the test cannot run here (a missing capability
 * or tool): print "<name>: SKIP PART: <reason>" and go on with the rest;
 * th_finish() then returns 77 (if nothing failed) and names every part
 * skipped, so a partial run never reads as a full pass. */
void th_skip_part(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* th_fatal - print the reason as a failure and exit 1 (the test cannot go on). */
void th_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* th_finish - stop every daemon with SIGTERM (each must have survived the
 * test, exit 0 and remove its socket: counted as checks), print the daemons'
 * logs if anything failed, remove the temp dirs, print
 * "<name>: N checks passed, M failed" and return the exit code: 0 or 1, or
 * 77 when nothing failed but th_skip_part() was called.
 * Daemons must stay alive (static, or in main) until it returns. */
int th_finish(void);

/* Failed checks so far in this process. */
int th_failures(void);

/* Monotonic milliseconds, for deadlines. */
int64_t th_now_ms(void);

/* The short pause (2 ms) between two polls of a condition in a poll loop;
 * never a way to wait for something by itself. */
void th_poll_pause(void);

/* Whether the env var @name is set to a non-empty value other than "0". */
bool th_env_flag(const char *name);

/* ---- the daemon ----------------------------------------------------------- */

#define TH_MAX_ARGS 32
#define TH_MAX_ENV 8
#define TH_READY_TIMEOUT_MS 15000
#define TH_STOP_TIMEOUT_MS 10000
#define TH_WAIT_MS 5000 /* default deadline for asynchronous effects */

typedef struct th_daemon {
	char dir[88];          /* the temp dir (mkdtemp); short enough that */
	char socket[108];      /* DIR/kvshared.sock fits sun_path */
	char log[128];         /* DIR/kvshared.log: stdout + stderr, appended */
	const char *args[TH_MAX_ARGS]; /* caller's extra arguments */
	int nargs;
	const char *env[TH_MAX_ENV]; /* "NAME=VALUE" added to its environment */
	int nenv;
	/* RLIMIT_NOFILE the daemon starts with, set in its process before the
	 * exec (hard first); 0: the test's own. Set after th_daemon_init. */
	unsigned nofile_soft, nofile_hard;
	/* Run under the tests' stand-in for systemd (tests/support/fdstore.c,
	 * $KVS_FDSTORE): it is kvshared's $NOTIFY_SOCKET, keeps the fds it
	 * stores and passes them to its next start; d->pid is the stand-in's.
	 * Set after th_daemon_init. */
	bool fdstore;
	char state[128];       /* DIR/fdstore.state, the stand-in's state */
	pid_t pid;             /* 0 when not running */
	int starts;            /* how many times it was started */
	int last_status;       /* how it last ended, as th_daemon_stop() */
	kvs_client *ctl;       /* control-only client for stats, or NULL */
	pid_t ctl_owner;       /* the process that opened ctl */
} th_daemon;

/* A NULL-terminated argument list literal. */
#define TH_ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define TH_NO_ARGS ((const char *const[]){ NULL })

/*
 * th_daemon_init - make a temp dir under $TMPDIR (or /tmp) and remember
 * @args (NULL-terminated; the strings must outlive the daemon).
 * Returns 0 or -errno.
 */
int th_daemon_init(th_daemon *d, const char *const *args);

/*
 * th_daemon_setenv - add "NAME=VALUE" (@kv must outlive the daemon) to the
 * environment the daemon is started with (after th_daemon_init, before
 * th_daemon_start; kept across restarts). The test's own environment is not
 * changed, so a variable such as LD_PRELOAD reaches the daemon only.
 * Returns 0, -EINVAL (no '='), or -E2BIG (more than TH_MAX_ENV).
 */
int th_daemon_setenv(th_daemon *d, const char *kv);

/*
 * th_daemon_start - fork+exec $KVSHARED --socket S --ready-fd 3 ARGS and wait
 * up to TH_READY_TIMEOUT_MS for "READY". On failure prints why and the log,
 * and leaves the daemon stopped.
 * Returns 0; -ETIMEDOUT (no READY; the daemon is killed); -ECHILD (it exited:
 * d->last_status has how); -EPROTO (it closed the fd without READY); -errno.
 */
int th_daemon_start(th_daemon *d);

/* th_daemon_up - init + start, or th_fatal(). */
void th_daemon_up(th_daemon *d, const char *const *args);

/*
 * th_daemon_stop - send @sig (SIGTERM or SIGINT) and wait up to
 * TH_STOP_TIMEOUT_MS for the exit.
 * Returns the exit code (0..255), 128+N if killed by signal N, or -ETIMEDOUT
 * (it was then killed with SIGKILL).
 */
int th_daemon_stop(th_daemon *d, int sig);

/* th_daemon_kill - SIGKILL and reap. Returns as th_daemon_stop(). */
int th_daemon_kill(th_daemon *d);

/* th_daemon_restart - stop with SIGTERM (must exit 0), start again on the same
 * socket with the same arguments. Returns 0, or the failing step's result. */
int th_daemon_restart(th_daemon *d);

/* th_daemon_exited - reap the daemon if it has exited (without waiting).
 * Returns true and sets *status (as th_daemon_stop) if it is gone. */
bool th_daemon_exited(th_daemon *d, int *status);

/* th_daemon_destroy - kill it if running, remove the temp dir. */
void th_daemon_destroy(th_daemon *d);

/* th_daemon_dump_log - print the tail of the daemon's log to stderr. */
void th_daemon_dump_log(const th_daemon *d);

/*
 * th_tmpfs - mount a tmpfs of @size (mount(8)'s syntax: "1m", "512k") on a
 * new temp dir, written to @dir (@cap bytes). It is unmounted (lazily, so a
 * daemon still holding files in it does not stop it) and its dir removed at
 * every exit of the test: th_finish, th_fatal, the watchdog, a crash.
 * Returns 0, or -errno: -EPERM when mounting is not permitted (the caller
 * skips), -ENOSPC past TH_MAX_MOUNTS.
 */
#define TH_MAX_MOUNTS 4
int th_tmpfs(const char *size, char *dir, size_t cap);

/* th_open_dir_to - make the daemon's directory searchable by others (it is
 * 0700 from mkdtemp) and check that @uid/@gid can reach it; skips the test
 * (77) with the reason when a directory above it is closed to that uid. */
void th_open_dir_to(th_daemon *d, uid_t uid, gid_t gid);

/* ---- under the stand-in for systemd (d->fdstore) ---------------------------- */

/* th_fdstore_get - a value of the stand-in's state ("pid", "starts",
 * "ready", "fds", "stopping", "last_exit": tests/support/fdstore.c), or -1. */
long th_fdstore_get(const th_daemon *d, const char *key);

/* th_fdstore_wait - wait up to TH_READY_TIMEOUT_MS until @key is at least
 * @want. */
bool th_fdstore_wait(const th_daemon *d, const char *key, long want);

/* th_fdstore_crash - kill -9 the kvshared under the stand-in and wait for
 * the next one's READY (the stand-in restarts it with the fds stored, as
 * systemd's Restart=on-failure). Returns 0, -ESRCH (none running),
 * -ETIMEDOUT. */
int th_fdstore_crash(th_daemon *d);

/* th_fdstore_restart - `systemctl restart`: SIGTERM to kvshared, a new start
 * with the fds stored; waits for its READY. Returns 0 or -ETIMEDOUT. */
int th_fdstore_restart(th_daemon *d);

/* th_log_contains - whether the daemon's log has @needle in it, waiting up
 * to 5 s for it (the daemon writes its log from a thread). */
bool th_log_contains(const th_daemon *d, const char *needle);

#endif /* TH_HARNESS_H */
