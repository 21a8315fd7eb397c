/*
 * kvs_sdnotify.h - systemd's service protocol, both ends the daemon needs:
 * notifications to $NOTIFY_SOCKET (READY=1, STATUS=, STOPPING=1, and fds
 * for the fd store: FDSTORE=1 with FDNAME=), and the fds systemd passes
 * back at start ($LISTEN_PID, $LISTEN_FDS, $LISTEN_FDNAMES, from fd 3).
 *
 * Written here rather than linked from libsystemd: the protocol is one
 * datagram on a unix socket (sd_notify(3) documents it as stable), the
 * daemon ships in a wheel that must start on machines without libsystemd,
 * and the same code talks to the tests' stand-in for systemd
 * (tests/support/fdstore.c). Outside systemd (no $NOTIFY_SOCKET, no
 * $LISTEN_FDS) every call is a no-op.
 *
 * Thread: any; no state.
 */
#ifndef KVS_SDNOTIFY_H
#define KVS_SDNOTIFY_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_persist.h" /* kvs_named_fd: an fd and its FDNAME= */

/* Fds the daemon takes back at start, at most. */
#define KVS_SD_FDS_MAX 64

/*
 * kvs_sd_notify - send @state ("KEY=VALUE" lines, '\n'-separated) to
 * $NOTIFY_SOCKET (a path, or the abstract namespace when it starts with
 * '@'), with @nfds fds attached (SCM_RIGHTS; @state then has FDSTORE=1).
 * Returns 1 when sent, 0 when there is no $NOTIFY_SOCKET, or -errno
 * (-EINVAL: a bad $NOTIFY_SOCKET).
 * Ownership: the fds stay the caller's (systemd gets copies).
 */
int kvs_sd_notify(const char *state, const int *fds, uint32_t nfds);

/*
 * kvs_sd_notify_fds - store each of @fds (@n) in the fd store under its
 * name: one FDSTORE=1 message each, after an FDSTOREREMOVE=1 of that name
 * (systemd keeps every fd stored under a name; these replace them).
 * Returns how many were sent, 0 without
 * $NOTIFY_SOCKET, or the first error (-errno).
 */
int kvs_sd_notify_fds(const kvs_named_fd *fds, uint32_t n);

/*
 * kvs_sd_notify_remove - FDSTOREREMOVE=1 of @name: systemd closes every fd
 * it keeps under that name. Returns as kvs_sd_notify(), -EINVAL for a name
 * kvs_sd_fdname_ok() refuses.
 */
int kvs_sd_notify_remove(const char *name);

/*
 * kvs_sd_listen_fds - the fds passed to this process ($LISTEN_PID is ours):
 * $LISTEN_FDS of them from fd 3, named by $LISTEN_FDNAMES (':'-separated;
 * "unknown" where a name is missing), made close-on-exec, written to @out
 * (at most @max: the rest are closed). The three variables are removed
 * from the environment, so that no child takes them for its own.
 * Returns how many, 0 when none were passed, or KVS_E_CONFIG when the
 * variables are malformed (@why says how, @cap bytes).
 * Ownership: the fds become the caller's.
 */
int kvs_sd_listen_fds(kvs_named_fd *out, uint32_t max, char *why, size_t cap);

/* kvs_sd_fdname_ok - whether @name may be stored under FDNAME= (as above). */
int kvs_sd_fdname_ok(const char *name);

#endif /* KVS_SDNOTIFY_H */
