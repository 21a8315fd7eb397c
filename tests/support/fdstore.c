/*
 * kvs-fdstore - a stand-in for systemd's service manager, for tests: it is
 * the $NOTIFY_SOCKET of the program it runs, keeps the fds sent to it with
 * FDSTORE=1 (by FDNAME=; several of one name are all kept, as systemd
 * does, and FDSTOREREMOVE=1 with FDNAME= drops them), and passes them to the program's next start as
 * systemd does ($LISTEN_FDS from fd 3, $LISTEN_FDNAMES, $LISTEN_PID).
 *
 *   kvs-fdstore [--ready-fd N] [--state FILE] [--restarts N] -- PROGRAM ARGS
 *
 * Like a unit with Type=notify, Restart=on-failure and FileDescriptorStoreMax:
 *   - the program's READY=1 writes "READY\n" to --ready-fd (the first one,
 *     which is then closed), so a test harness waits for it as for kvshared's
 *     own --ready-fd;
 *   - a program killed by a signal or exiting non-zero is started again with
 *     the fds stored (at most --restarts times, default 8);
 *   - SIGHUP is `systemctl restart`: SIGTERM to the program, then a new start
 *     with the fds stored; SIGUSR1 kills the program with SIGKILL (a crash),
 *     restarted as above;
 *   - SIGTERM or SIGINT is `systemctl stop`: SIGTERM to the program; once it
 *     exits the fds are released, the path of a stored listening socket is
 *     removed (as systemd removes the unit's RuntimeDirectory), and
 *     kvs-fdstore exits with the program's status (128+N for signal N);
 *   - a program exiting 0 by itself ends kvs-fdstore too (status 0).
 * --state FILE is rewritten (atomically) after every event, "key=value"
 * lines: pid (the program's now, 0 between starts), starts, ready (READY=1
 * received), fds (stored now), names (':'-joined), stopping (STOPPING=1
 * received from the running program: 0 or 1), last_exit (how the last
 * program ended: exit code, or 128+signal; -1 none yet).
 *
 * Exit: the program's status, 1 for a usage or setup error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_FDS 64
#define NAME_MAX_LEN 255

struct store {
	int fd[MAX_FDS];
	char name[MAX_FDS][NAME_MAX_LEN + 1];
	int n;
};

struct sup {
	char **argv;
	const char *state;
	int ready_fd;
	int restarts_left;
	char dir[80], notify[96];
	int nsock, sigfd;
	pid_t pid;
	int starts, ready, stopping, last_exit, stop_asked, restart_asked;
	struct store st;
};

static void write_state(const struct sup *s)
{
	char tmp[4200], names[MAX_FDS * (NAME_MAX_LEN + 1) + 1] = "";
	FILE *f;

	if (!s->state)
		return;
	for (int i = 0; i < s->st.n; i++) {
		if (i)
			strcat(names, ":");
		strcat(names, s->st.name[i]);
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", s->state);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "pid=%d\nstarts=%d\nready=%d\nfds=%d\nnames=%s\nstopping=%d\n"
		"last_exit=%d\n", (int)s->pid, s->starts, s->ready, s->st.n,
		names, s->stopping, s->last_exit);
	fclose(f);
	rename(tmp, s->state);
}

/* FDSTORE=1: keep @fd under @name, after any kept under that name already
 * (systemd keeps them all, in the order stored). */
static void store_add(struct store *st, const char *name, int fd)
{
	if (st->n >= MAX_FDS) {
		fprintf(stderr, "kvs-fdstore: more than %d fds: %s dropped\n",
			MAX_FDS, name);
		close(fd);
		return;
	}
	st->fd[st->n] = fd;
	snprintf(st->name[st->n++], NAME_MAX_LEN + 1, "%s", name);
}

/* FDSTOREREMOVE=1: close every fd kept under @name. */
static void store_remove(struct store *st, const char *name)
{
	int k = 0;

	for (int i = 0; i < st->n; i++) {
		if (!strcmp(st->name[i], name)) {
			close(st->fd[i]);
			continue;
		}
		st->fd[k] = st->fd[i];
		memmove(st->name[k++], st->name[i], NAME_MAX_LEN + 1);
	}
	st->n = k;
}

/* The value of KEY= in a notification (@msg, '\n'-separated), into @out. */
static int field(const char *msg, const char *key, char *out, size_t cap)
{
	size_t k = strlen(key);

	for (const char *p = msg; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, key, k) && p[k] == '=') {
			size_t n = strcspn(p + k + 1, "\n");

			if (n >= cap)
				n = cap - 1;
			memcpy(out, p + k + 1, n);
			out[n] = '\0';
			return 1;
		}
	return 0;
}

/* One notification, if one waits: 1 when one was read. */
static int on_notify(struct sup *s)
{
	char msg[4096], name[NAME_MAX_LEN + 1], v[32];
	union {
		char b[CMSG_SPACE(sizeof(int) * MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct iovec iov = { msg, sizeof(msg) - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.b, .msg_controllen = sizeof(u.b) };
	int fds[MAX_FDS], nfds = 0;
	ssize_t r = recvmsg(s->nsock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	if (r < 0)
		return 0;
	msg[r] = '\0';
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			memcpy(fds + nfds, CMSG_DATA(cm), (size_t)k * sizeof(int));
			nfds += k;
		}
	if (field(msg, "FDSTORE", v, sizeof(v)) && !strcmp(v, "1")) {
		if (!field(msg, "FDNAME", name, sizeof(name)))
			snprintf(name, sizeof(name), "stored");
		for (int i = 0; i < nfds; i++)
			store_add(&s->st, name, fds[i]);
	} else {
		for (int i = 0; i < nfds; i++)
			close(fds[i]); /* systemd refuses fds without FDSTORE=1 */
	}
	if (field(msg, "FDSTOREREMOVE", v, sizeof(v)) && !strcmp(v, "1") &&
	    field(msg, "FDNAME", name, sizeof(name)))
		store_remove(&s->st, name);
	if (field(msg, "STOPPING", v, sizeof(v)) && !strcmp(v, "1"))
		s->stopping = 1;
	if (field(msg, "READY", v, sizeof(v)) && !strcmp(v, "1")) {
		s->ready++;
		if (s->ready_fd >= 0) {
			(void)!write(s->ready_fd, "READY\n", 6);
			close(s->ready_fd);
			s->ready_fd = -1;
		}
	}
	write_state(s);
	return 1;
}

/* In the child: the stored fds at 3.., the LISTEN_* variables, exec. */
static void exec_program(struct sup *s)
{
	char names[MAX_FDS * (NAME_MAX_LEN + 1) + 1] = "", num[32];
	int tmp[MAX_FDS];

	/* Move them out of the way first: a stored fd may sit at 3.. now. */
	for (int i = 0; i < s->st.n; i++)
		tmp[i] = fcntl(s->st.fd[i], F_DUPFD_CLOEXEC, 3 + MAX_FDS + 8);
	for (int i = 0; i < s->st.n; i++) {
		dup2(tmp[i], 3 + i); /* dup2 clears close-on-exec */
		if (i)
			strcat(names, ":");
		strcat(names, s->st.name[i]);
	}
	for (int fd = 3 + s->st.n; fd < 3 + 2 * MAX_FDS + 64; fd++)
		close(fd);
	if (s->st.n) {
		snprintf(num, sizeof(num), "%d", s->st.n);
		setenv("LISTEN_FDS", num, 1);
		setenv("LISTEN_FDNAMES", names, 1);
		snprintf(num, sizeof(num), "%d", (int)getpid());
		setenv("LISTEN_PID", num, 1);
	}
	setenv("NOTIFY_SOCKET", s->notify, 1);
	execv(s->argv[0], s->argv);
	fprintf(stderr, "kvs-fdstore: exec %s: %s\n", s->argv[0], strerror(errno));
	_exit(127);
}

static int start(struct sup *s)
{
	sigset_t none;
	pid_t parent = getpid(), pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* A stand-in killed outright (a test's cleanup, a crash) takes
		 * its program with it, as systemd's stop would: no daemon left. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		exec_program(s);
	}
	s->pid = pid;
	s->starts++;
	s->stopping = 0;
	write_state(s);
	return 0;
}

/* A stop: release the store, and remove a stored listener's path. */
static void release(struct sup *s)
{
	for (int i = 0; i < s->st.n; i++) {
		struct sockaddr_un sa;
		socklen_t len = sizeof(sa);

		memset(&sa, 0, sizeof(sa));
		if (!strcmp(s->st.name[i], "listen") &&
		    getsockname(s->st.fd[i], (struct sockaddr *)&sa, &len) == 0 &&
		    sa.sun_family == AF_UNIX && sa.sun_path[0] == '/')
			unlink(sa.sun_path);
		close(s->st.fd[i]);
	}
	s->st.n = 0;
}

/* The program ended with @status: start it again, or return our status. */
static int on_exit_status(struct sup *s, int status)
{
	int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

	s->pid = 0;
	s->last_exit = code;
	write_state(s);
	if (s->stop_asked || (code == 0 && !s->restart_asked))
		return code;
	if (!s->restart_asked && s->restarts_left-- <= 0) {
		fprintf(stderr, "kvs-fdstore: %s ended (%d), no restarts left\n",
			s->argv[0], code);
		return code ? code : 1;
	}
	s->restart_asked = 0;
	if (start(s) < 0)
		return 1;
	return -1;
}

static int on_signal(struct sup *s)
{
	struct signalfd_siginfo si;
	int status;

	if (read(s->sigfd, &si, sizeof(si)) != sizeof(si))
		return -1;
	if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
		s->stop_asked = 1;
		if (s->pid)
			kill(s->pid, SIGTERM);
	} else if (si.ssi_signo == SIGHUP) {
		s->restart_asked = 1;
		if (s->pid)
			kill(s->pid, SIGTERM);
	} else if (si.ssi_signo == SIGUSR1) {
		if (s->pid)
			kill(s->pid, SIGKILL);
	} else if (si.ssi_signo == SIGCHLD) {
		while (s->pid && waitpid(s->pid, &status, WNOHANG) == s->pid) {
			int rc = on_exit_status(s, status);

			if (rc >= 0)
				return rc;
		}
	}
	return -1;
}

static int setup(struct sup *s)
{
	const char *tmp = getenv("TMPDIR");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	sigset_t set;

	if (!tmp || !*tmp || strlen(tmp) > 64)
		tmp = "/tmp";
	snprintf(s->dir, sizeof(s->dir), "%s/kvsfd-XXXXXX", tmp);
	if (!mkdtemp(s->dir))
		return -errno;
	snprintf(s->notify, sizeof(s->notify), "%s/notify", s->dir);
	s->nsock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->notify);
	if (s->nsock < 0 || bind(s->nsock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	s->sigfd = signalfd(-1, &set, SFD_CLOEXEC);
	return s->sigfd < 0 ? -errno : 0;
}

static int parse(struct sup *s, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "ready-fd", required_argument, NULL, 'r' },
		{ "state", required_argument, NULL, 's' },
		{ "restarts", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	int o;

	while ((o = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		if (o == 'r')
			s->ready_fd = atoi(optarg);
		else if (o == 's')
			s->state = optarg;
		else if (o == 'n')
			s->restarts_left = atoi(optarg);
		else
			return -1;
	}
	if (optind >= argc)
		return -1;
	s->argv = argv + optind;
	return 0;
}

int main(int argc, char **argv)
{
	struct sup s = { .ready_fd = -1, .restarts_left = 8, .last_exit = -1 };
	int rc = -1;

	if (parse(&s, argc, argv) < 0) {
		fprintf(stderr, "usage: kvs-fdstore [--ready-fd N] [--state FILE] "
			"[--restarts N] -- PROGRAM ARGS...\n");
		return 1;
	}
	if (setup(&s) < 0 || start(&s) < 0) {
		fprintf(stderr, "kvs-fdstore: setup: %s\n", strerror(errno));
		return 1;
	}
	while (rc < 0) {
		struct pollfd p[2] = { { s.nsock, POLLIN, 0 }, { s.sigfd, POLLIN, 0 } };

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		/* Every notification first, as systemd: what a program sent
		 * before it exited counts before its exit does. */
		while (on_notify(&s))
			;
		if (p[1].revents)
			rc = on_signal(&s);
	}
	while (s.pid && waitpid(s.pid, NULL, 0) < 0 && errno == EINTR)
		;
	release(&s);
	unlink(s.notify);
	rmdir(s.dir);
	return rc < 0 ? 1 : rc;
}
