/*
 * harness_child.c - the integration-test harness: child processes and their
 * sync messages (see harness_child.h).
 */
#include "harness_child.h"
#include "harness_int.h"
#include "harness_raw.h"

#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- child processes ------------------------------------------------------ */

static void track_child(pid_t pid, bool add)
{
	for (int i = 0; i < TH_MAX_CHILDREN; i++)
		if (add ? th_children[i] == 0 : th_children[i] == pid) {
			th_children[i] = add ? pid : 0;
			return;
		}
	if (add)
		th_fatal("more than %d live children", TH_MAX_CHILDREN);
}

static void child_main(th_child_fn fn, void *arg, int fd, pid_t parent)
{
	int rc;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	/* Free the parent's control clients (closing only this process's copy
	 * of their fds) before th_fds_close_from() lets those numbers be
	 * reused, so that LeakSanitizer has nothing to report when the child
	 * exits. */
	for (int i = 0; i < TH_MAX_DAEMONS; i++)
		if (th_daemons[i]) {
			kvs_close(th_daemons[i]->ctl);
			th_daemons[i]->ctl = NULL;
		}
	th_fd_move(fd, 3);
	th_fds_close_from(4);
	th_passed = th_failed = 0;
	memset(th_children, 0, sizeof(th_children));
	rc = fn(arg, 3);
	if (rc == 0 && th_failed)
		rc = 1;
	exit(rc);
}

void th_spawn(th_child *ch, th_child_fn fn, void *arg)
{
	pid_t parent = getpid();
	int sp[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		th_fatal("socketpair: %s", strerror(errno));
	fflush(NULL);
	ch->pid = fork();
	if (ch->pid < 0)
		th_fatal("fork: %s", strerror(errno));
	if (ch->pid == 0) {
		close(sp[0]);
		child_main(fn, arg, sp[1], parent);
	}
	close(sp[1]);
	ch->fd = sp[0];
	track_child(ch->pid, true);
}

static int child_reaped(th_child *ch, int st)
{
	track_child(ch->pid, false);
	ch->pid = 0;
	if (ch->fd >= 0)
		close(ch->fd);
	ch->fd = -1;
	return st;
}

int th_child_wait(th_child *ch, int timeout_ms)
{
	int st;

	if (ch->pid <= 0)
		return -ECHILD;
	st = th_pid_wait(ch->pid, timeout_ms);
	if (st == -ETIMEDOUT) {
		th_note("child %d still running after %d ms; killing it", (int)ch->pid,
			timeout_ms);
		kill(ch->pid, SIGKILL);
		waitpid(ch->pid, NULL, 0);
	}
	return child_reaped(ch, st);
}

int th_child_kill(th_child *ch, int sig)
{
	int st;

	if (ch->pid <= 0)
		return -ECHILD;
	kill(ch->pid, sig);
	st = th_pid_wait(ch->pid, TH_STOP_TIMEOUT_MS);
	if (st == -ETIMEDOUT) {
		kill(ch->pid, SIGKILL);
		waitpid(ch->pid, NULL, 0);
	}
	return child_reaped(ch, st);
}

int th_run_child(th_child_fn fn, void *arg, int timeout_ms)
{
	th_child ch;

	th_spawn(&ch, fn, arg);
	return th_child_wait(&ch, timeout_ms);
}

int th_become(uid_t uid)
{
	return setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
	       setresuid(uid, uid, uid) < 0 ? -1 : 0;
}

int th_send_u64(int fd, uint64_t v)
{
	return th_raw_send(fd, &v, sizeof(v));
}

int th_recv_u64(int fd, uint64_t *v, int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	uint8_t buf[8];
	size_t got = 0;

	while (got < sizeof(buf)) {
		int rc = th_fd_poll(fd, deadline);
		ssize_t r;

		if (rc)
			return rc;
		r = recv(fd, buf + got, sizeof(buf) - got, 0);
		if (r == 0)
			return -EPIPE;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno == ECONNRESET ? -EPIPE : -errno;
		}
		got += (size_t)r;
	}
	memcpy(v, buf, sizeof(*v));
	return 0;
}

bool th_fd_readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) > 0;
}
