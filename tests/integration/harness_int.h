/*
 * harness_int.h - the harness's internals, shared by its files only:
 * harness.c (checks, the test's life cycle, cleanup, processes),
 * harness_daemon.c, harness_client.c, harness_child.c, harness_raw.c and
 * harness_ssd.c. Tests include the module headers, never this one.
 *
 * Thread: single-threaded tests only.
 */
#ifndef TH_HARNESS_INT_H
#define TH_HARNESS_INT_H

#include "harness.h"

#define TH_MAX_DAEMONS 8
#define TH_MAX_CHILDREN 128

/* ---- process-wide state (harness.c) ---- */

extern const char *th_name;      /* th_init()'s name of the test */
extern int th_passed, th_failed; /* checks in this process */
extern bool th_keep;             /* TH_KEEP: keep temp dirs */
extern th_daemon *th_daemons[TH_MAX_DAEMONS]; /* cleaned up at exit */
extern pid_t th_children[TH_MAX_CHILDREN];    /* killed at exit */
extern char th_mounts[TH_MAX_MOUNTS][96];     /* th_tmpfs's, unmounted at exit */

/* ---- processes (harness.c) ---- */

/* th_status_decode - a wait status as an exit code (0..255), 128+N if
 * killed by signal N, or -EINVAL. */
int th_status_decode(int ws);
/* th_pid_wait - wait for @pid up to @timeout_ms; returns th_status_decode()
 * or -ETIMEDOUT (it is left running). */
int th_pid_wait(pid_t pid, int timeout_ms);
/* th_fds_close_from - close every descriptor from @lowfd up. */
void th_fds_close_from(int lowfd);
/* th_fd_move - put @fd at @target without close-on-exec. */
void th_fd_move(int fd, int target);
/* th_fd_poll - wait until @fd is readable or the th_now_ms() @deadline
 * passes: 0, -ETIMEDOUT or -errno. */
int th_fd_poll(int fd, int64_t deadline);

#endif /* TH_HARNESS_INT_H */
