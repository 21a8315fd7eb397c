/*
 * harness_child.h - the integration-test harness: child processes that run a
 * function, and one-u64 messages on their sync socket. See harness.h.
 *
 * Thread: single-threaded tests only.
 */
#ifndef TH_HARNESS_CHILD_H
#define TH_HARNESS_CHILD_H

#include "harness.h"

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

/* th_become - this process (a child of a test run as root) becomes @uid,
 * with @uid as its gid and no supplementary groups: a worker of that uid.
 * 0, or -1 with errno set. */
int th_become(uid_t uid);

/* Messages on a sync fd: one u64 each. recv returns 0, -ETIMEDOUT, -EPIPE
 * (the other side is gone) or -errno. */
int th_send_u64(int fd, uint64_t v);
int th_recv_u64(int fd, uint64_t *v, int timeout_ms);
/* Whether a message (or EOF) is waiting on @fd, without blocking. */
bool th_fd_readable(int fd);

#endif /* TH_HARNESS_CHILD_H */
