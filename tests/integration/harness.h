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
 * it fails to start and when the test fails. Nothing waits with a fixed sleep:
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

#include "kvs_wire.h"
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

/* th_verify_chains - th_verify() of @chains chains of @len hashes each,
 * stored one after the other at @h: total hits, and *bad the blocks whose
 * bytes differ. -1 (and a failed check) when a lookup fails. */
int th_verify_chains(kvs_client *c, const kvs_hash *h, size_t chains,
		     size_t len, size_t *bad);

/* th_daemon_up_ssd - th_daemon_up() for a daemon with an SSD tier: @args
 * name @ssd_dir (a buffer of @cap bytes), which is set to DIR/ssd inside the
 * daemon's temp dir and created before the daemon starts. */
void th_daemon_up_ssd(th_daemon *d, const char *const *args, char *ssd_dir,
		      size_t cap);

/* th_ssd_off_checks - after a fault turned a daemon's SSD demotion off
 * (tier_ssd.enabled 0): the @n published chains of 4 blocks at @h still read
 * back right (no wrong byte, some promoted from SSD, nothing corrupt), and
 * @fresh new chains (seeds @seed + i, stored at h[n..n+fresh)) publish and
 * hit from RAM with no further SSD write. @what names the case in the log. */
void th_ssd_off_checks(th_daemon *d, kvs_client *c, const kvs_layout *l,
		       kvs_hash (*h)[4], int n, int fresh, uint64_t seed,
		       const char *what);

/* th_open_dir_to - make the daemon's directory searchable by others (it is
 * 0700 from mkdtemp) and check that @uid/@gid can reach it; skips the test
 * (77) with the reason when a directory above it is closed to that uid. */
void th_open_dir_to(th_daemon *d, uid_t uid, gid_t gid);

/* th_log_contains - whether the daemon's log has @needle in it, waiting up
 * to 5 s for it (the daemon writes its log from a thread). */
bool th_log_contains(const th_daemon *d, const char *needle);

/* ---- clients and stats ---------------------------------------------------- */

/* th_connect - kvs_connect() to the daemon, or th_fatal(). @layout may be NULL
 * (control-only). */
kvs_client *th_connect(const th_daemon *d, const kvs_layout *layout);

/*
 * th_stat - one stat's value, read through the daemon's control client
 * (opened on first use, reopened after a restart). Returns 0 or an error; a
 * missing name is -ENOENT.
 */
int th_stat(th_daemon *d, const char *name, int64_t *value);

/* th_stat_get - as th_stat(), but returns the value, or INT64_MIN after
 * printing why it could not be read. */
int64_t th_stat_get(th_daemon *d, const char *name);

/*
 * th_wait_stat - poll @name until it equals @expected or @timeout_ms passes.
 * Returns true if it did; otherwise prints the last value seen.
 * Use inside CHECK(): CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS)).
 */
bool th_wait_stat(th_daemon *d, const char *name, int64_t expected,
		  int timeout_ms);

/* A snapshot of the whole stats text, to compare counters before and after. */
typedef struct th_stats {
	char *text;
} th_stats;

/* th_stats_take - fill @s (free with th_stats_free()); th_fatal() on error. */
void th_stats_take(th_daemon *d, th_stats *s);
void th_stats_free(th_stats *s);
/* A value of a snapshot, or INT64_MIN (printed) when missing. */
int64_t th_stats_val(const th_stats *s, const char *name);
/* after - before for one name (INT64_MIN if either is missing). */
int64_t th_stats_delta(const th_stats *before, const th_stats *after,
		       const char *name);

/* ---- layouts, tokens, hashes, block contents ------------------------------- */

/*
 * th_layout - a small layout: @model, 2 layers, 2 KV heads, head_dim 64, fp16,
 * @block_tokens per block (block bytes = 1024 * block_tokens), tp 0 of 1, no
 * adapter, no salt. Tests change fields from there.
 */
kvs_layout th_layout(const char *model, uint32_t block_tokens);

/* th_tokens - @n deterministic token ids from @seed. */
void th_tokens(uint32_t *out, size_t n, uint64_t seed);

/*
 * th_chain - hashes, in namespace @l, of a prompt of @nprefix blocks of tokens
 * from @prefix_seed followed by @nsuffix blocks from @suffix_seed (two prompts
 * with the same prefix seed share their first @nprefix hashes), computed
 * without a connection (kvs_hash_layout_seed + kvs_hash_chain, which must
 * agree with kvs_hash_tokens). @out holds nprefix+nsuffix.
 * Returns the number of hashes, or th_fatal() on error.
 */
size_t th_chain(const kvs_layout *l, uint64_t prefix_seed, size_t nprefix,
		uint64_t suffix_seed, size_t nsuffix, kvs_hash *out);

/* th_pattern_fill / th_pattern_check - the bytes of block @h: a stream
 * seeded by the hash (and @salt, 0 normally, to tell writers apart). check
 * returns the first differing offset, or -1 when all @len bytes match. */
void th_pattern_fill(void *dst, size_t len, kvs_hash h, uint64_t salt);
long th_pattern_check(const void *src, size_t len, kvs_hash h, uint64_t salt);

/*
 * th_publish - reserve a chain, fill every NEW block with its pattern
 * (through kvs_block_ptr) and commit. @blocks (n entries, or NULL) receives
 * the reserve's answer.
 * Returns the number of blocks committed (NEW), or an error from reserve or
 * commit (KVS_E_INTERNAL when commit's count differs from reserve's, or a NEW
 * block has no pointer).
 */
int th_publish(kvs_client *c, const kvs_hash *h, size_t n, kvs_block *blocks);
int th_publish_salted(kvs_client *c, const kvs_hash *h, size_t n,
		      kvs_block *blocks, uint64_t salt);

/*
 * th_verify - lookup a chain, check every hit's bytes against its pattern
 * through kvs_block_ptr, release. *bad (may be NULL) gets the number of hit
 * blocks whose bytes or pointer are wrong.
 * Returns the number of hits, or an error.
 */
int th_verify(kvs_client *c, const kvs_hash *h, size_t n, size_t *bad);
int th_verify_salted(kvs_client *c, const kvs_hash *h, size_t n, size_t *bad,
		     uint64_t salt);

/* th_probe - lookup then release; the number of hits or an error. */
int th_probe(kvs_client *c, const kvs_hash *h, size_t n);

/* The mapping of this process that holds an address (from /proc/self/maps). */
typedef struct th_mapping {
	uintptr_t start, end;
	uint64_t file_offset;
	uint64_t inode;
	bool shared;       /* 's' in the permissions: MAP_SHARED */
	bool writable;
	char path[256];    /* e.g. "/memfd:kvshare-host (deleted)" */
} th_mapping;

/* th_mapping_of - find the mapping that holds [addr, addr+len).
 * Returns 0, -ENOENT when no single mapping holds the range, -errno. */
int th_mapping_of(const void *addr, size_t len, th_mapping *m);

/* ---- child processes ------------------------------------------------------ */

/* A child runs fn(arg, sync_fd) and exits with its return value (1 if it
 * returned 0 but a CHECK failed). */
typedef int (*th_child_fn)(void *arg, int sync_fd);

typedef struct th_child {
	pid_t pid;  /* 0 once reaped */
	int fd;     /* the parent's end of the sync socketpair */
} th_child;

/* th_spawn - fork a child; th_fatal() on failure. */
void th_spawn(th_child *ch, th_child_fn fn, void *arg);

/*
 * th_child_wait - wait up to @timeout_ms for the child to exit.
 * Returns its exit code (0..255), 128+N if killed by signal N, or -ETIMEDOUT
 * (then it is killed and reaped).
 */
int th_child_wait(th_child *ch, int timeout_ms);

/* th_child_kill - send @sig, reap; returns as th_child_wait(). */
int th_child_kill(th_child *ch, int sig);

/* th_run_child - spawn, then wait up to @timeout_ms. */
int th_run_child(th_child_fn fn, void *arg, int timeout_ms);

/* Messages on a sync fd: one u64 each. recv returns 0, -ETIMEDOUT, -EPIPE
 * (the other side is gone) or -errno. */
int th_send_u64(int fd, uint64_t v);
int th_recv_u64(int fd, uint64_t *v, int timeout_ms);
/* Whether a message (or EOF) is waiting on @fd, without blocking. */
bool th_fd_readable(int fd);

/* ---- raw protocol --------------------------------------------------------- */

#define TH_CLOSED (-EPIPE) /* th_raw_recv: the daemon closed the connection */

/* th_raw_connect - a plain socket connected to the daemon; fd or -errno. */
int th_raw_connect(const th_daemon *d);

/* th_raw_send - send all of @buf (MSG_NOSIGNAL). 0 or -errno. */
int th_raw_send(int fd, const void *buf, size_t n);

/* th_raw_send_msg - send a header (magic, @version, @opcode, @len, req_id)
 * followed by @n bytes of @payload (n may differ from len, to lie). */
int th_raw_send_msg(int fd, uint16_t version, uint16_t opcode, uint32_t len,
		    uint64_t req_id, const void *payload, size_t n);

/* th_raw_request - send a well-formed message of the current version. */
int th_raw_request(int fd, uint16_t opcode, uint64_t req_id,
		   const void *payload, size_t n);

/*
 * th_raw_recv - read one reply: header into @h, payload into @payload (up to
 * @cap bytes; the rest is read and dropped). Descriptors passed with it are
 * closed. Returns the payload length, TH_CLOSED when the daemon closed the
 * connection (before or inside a reply), -ETIMEDOUT, KVS_E_PROTO for a reply
 * with a bad header, or -errno.
 */
int th_raw_recv(int fd, kvs_wire_hdr *h, uint8_t *payload, size_t cap,
		int timeout_ms);

/* th_raw_wait_closed - whether the daemon closes the connection within
 * @timeout_ms (any bytes before the close are discarded). */
bool th_raw_wait_closed(int fd, int timeout_ms);

/* th_raw_hello - send HELLO with @layout (NULL: control-only) and return the
 * reply's status (or a th_raw_recv error). */
int th_raw_hello(int fd, const kvs_layout *layout, uint64_t req_id);

#endif /* TH_HARNESS_H */
