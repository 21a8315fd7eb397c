/*
 * harness_daemon.c - the integration-test harness: the daemon (see
 * harness.h): a temp dir, start with a ready fd, stop, restart, its log,
 * tmpfs mounts, and opening its directory to another uid.
 */
#include "harness_int.h"

#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void remove_dir(const char *dir)
{
	if (*dir && !th_keep)
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	else if (*dir)
		fprintf(stderr, "%s: keeping %s\n", th_name, dir);
}

static void register_daemon(th_daemon *d)
{
	for (int i = 0; i < TH_MAX_DAEMONS; i++)
		if (th_daemons[i] == d)
			return;
	for (int i = 0; i < TH_MAX_DAEMONS; i++)
		if (!th_daemons[i]) {
			th_daemons[i] = d;
			return;
		}
	th_fatal("more than %d daemons", TH_MAX_DAEMONS);
}

int th_daemon_init(th_daemon *d, const char *const *args)
{
	const char *tmp = getenv("TMPDIR");

	memset(d, 0, sizeof(*d));
	/* The socket path must fit sun_path (108 bytes). */
	if (!tmp || !*tmp || strlen(tmp) > 64)
		tmp = "/tmp";
	snprintf(d->dir, sizeof(d->dir), "%s/kvsit-XXXXXX", tmp);
	if (!mkdtemp(d->dir))
		return -errno;
	snprintf(d->socket, sizeof(d->socket), "%s/kvshared.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/kvshared.log", d->dir);
	snprintf(d->state, sizeof(d->state), "%s/fdstore.state", d->dir);
	for (; args && args[d->nargs]; d->nargs++)
		if (d->nargs >= TH_MAX_ARGS - 1)
			return -E2BIG;
		else
			d->args[d->nargs] = args[d->nargs];
	register_daemon(d);
	return 0;
}

int th_daemon_setenv(th_daemon *d, const char *kv)
{
	if (!strchr(kv, '='))
		return -EINVAL;
	if (d->nenv >= TH_MAX_ENV)
		return -E2BIG;
	d->env[d->nenv++] = kv;
	return 0;
}

int th_tmpfs(const char *size, char *dir, size_t cap)
{
	const char *tmp = getenv("TMPDIR");
	char opts[64];
	int slot = -1, rc;

	for (int i = 0; i < TH_MAX_MOUNTS && slot < 0; i++)
		if (!th_mounts[i][0])
			slot = i;
	if (slot < 0)
		return -ENOSPC;
	if (!tmp || !*tmp || strlen(tmp) > 64)
		tmp = "/tmp";
	snprintf(th_mounts[slot], sizeof(th_mounts[slot]), "%s/kvsfs-XXXXXX", tmp);
	if (!mkdtemp(th_mounts[slot])) {
		rc = -errno;
		th_mounts[slot][0] = '\0';
		return rc;
	}
	snprintf(opts, sizeof(opts), "size=%s,mode=0700", size);
	if (mount("tmpfs", th_mounts[slot], "tmpfs", 0, opts) < 0) {
		rc = -errno;
		rmdir(th_mounts[slot]);
		th_mounts[slot][0] = '\0';
		return rc;
	}
	if (strlen(th_mounts[slot]) >= cap) {
		umount2(th_mounts[slot], MNT_DETACH);
		rmdir(th_mounts[slot]);
		th_mounts[slot][0] = '\0';
		return -ENAMETOOLONG;
	}
	strcpy(dir, th_mounts[slot]);
	return 0;
}

static bool log_has_now(const th_daemon *d, const char *needle)
{
	FILE *f = fopen(d->log, "r");
	char line[1024];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

bool th_log_contains(const th_daemon *d, const char *needle)
{
	/* The daemon logs through a writer thread: a line may land shortly
	 * after the event that caused it. */
	int64_t deadline = th_now_ms() + 5000;

	while (!log_has_now(d, needle)) {
		if (th_now_ms() > deadline)
			return false;
		th_poll_pause();
	}
	return true;
}

static void exec_daemon(const th_daemon *d, int ready_fd, pid_t parent)
{
	const char *argv[TH_MAX_ARGS + 12];
	const char *bin = getenv("KVSHARED");
	int n = 0, logfd, nul;
	sigset_t none;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (logfd < 0 || nul < 0)
		_exit(127);
	if (d->fdstore) {
		/* The stand-in relays READY=1 to fd 3; kvshared notifies it. */
		argv[n++] = getenv("KVS_FDSTORE");
		argv[n++] = "--ready-fd";
		argv[n++] = "3";
		argv[n++] = "--state";
		argv[n++] = d->state;
		argv[n++] = "--";
	}
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = d->socket;
	if (!d->fdstore) {
		argv[n++] = "--ready-fd";
		argv[n++] = "3";
	}
	for (int i = 0; i < d->nargs; i++)
		argv[n++] = d->args[i];
	argv[n] = NULL;
	dprintf(logfd, "==== start %d:", d->starts);
	for (int i = 0; i < d->nenv; i++)
		dprintf(logfd, " %s", d->env[i]);
	for (int i = 0; i < n; i++)
		dprintf(logfd, " %s", argv[i]);
	dprintf(logfd, " ====\n");
	dup2(nul, 0);
	dup2(logfd, 1);
	dup2(logfd, 2);
	th_fd_move(ready_fd, 3);
	th_fds_close_from(4);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGALRM, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int i = 0; i < d->nenv; i++)
		putenv((char *)d->env[i]);
	if (d->nofile_hard || d->nofile_soft) {
		struct rlimit rl;

		getrlimit(RLIMIT_NOFILE, &rl);
		if (d->nofile_hard)
			rl.rlim_max = d->nofile_hard;
		if (d->nofile_soft)
			rl.rlim_cur = d->nofile_soft;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
			dprintf(2, "setrlimit(RLIMIT_NOFILE): %s\n", strerror(errno));
			_exit(127);
		}
	}
	execv(argv[0], (char *const *)argv);
	dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* Read the ready pipe until "READY" arrives, it closes, or the deadline. */
static int wait_ready(th_daemon *d, int fd)
{
	int64_t deadline = th_now_ms() + TH_READY_TIMEOUT_MS;
	char buf[64];
	size_t got = 0;

	for (;;) {
		int left = (int)(deadline - th_now_ms());
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;
		int st;

		if (got >= 5 && !memcmp(buf, "READY", 5))
			return 0;
		if (left <= 0) {
			th_note("kvshared gave no READY within %d ms", TH_READY_TIMEOUT_MS);
			return -ETIMEDOUT;
		}
		if (poll(&p, 1, left) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!p.revents)
			continue;
		r = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		/* Closed without READY: it exited, or broke the contract. */
		st = th_pid_wait(d->pid, 2000);
		if (st == -ETIMEDOUT) {
			th_note("kvshared closed its ready fd without writing READY");
			return -EPROTO;
		}
		d->last_status = st;
		d->pid = 0;
		th_note("kvshared exited before READY: status %d", st);
		return -ECHILD;
	}
}

int th_daemon_start(th_daemon *d)
{
	pid_t parent = getpid();
	int pfd[2], rc;

	if (d->pid > 0)
		return -EBUSY;
	if (d->fdstore && !getenv("KVS_FDSTORE"))
		th_skip("$KVS_FDSTORE (tests/support/fdstore.c) is not set");
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	fflush(NULL);
	d->pid = fork();
	if (d->pid < 0) {
		rc = -errno;
		d->pid = 0;
		close(pfd[0]);
		close(pfd[1]);
		return rc;
	}
	if (d->pid == 0)
		exec_daemon(d, pfd[1], parent);
	d->starts++;
	close(pfd[1]);
	rc = wait_ready(d, pfd[0]);
	close(pfd[0]);
	if (rc == 0)
		return 0;
	if (d->pid > 0)
		th_daemon_kill(d);
	th_daemon_dump_log(d);
	return rc;
}

void th_daemon_up(th_daemon *d, const char *const *args)
{
	int rc = th_daemon_init(d, args);

	if (rc)
		th_fatal("cannot make a temp dir: %s", strerror(-rc));
	rc = th_daemon_start(d);
	if (rc)
		th_fatal("kvshared did not start: %s", kvs_strerror(rc));
}

static void drop_ctl(th_daemon *d)
{
	if (d->ctl && d->ctl_owner == getpid())
		kvs_close(d->ctl);
	d->ctl = NULL;
}

int th_daemon_stop(th_daemon *d, int sig)
{
	int st;

	if (d->pid <= 0)
		return -ESRCH;
	drop_ctl(d);
	kill(d->pid, sig);
	st = th_pid_wait(d->pid, TH_STOP_TIMEOUT_MS);
	if (st == -ETIMEDOUT) {
		th_note("kvshared did not exit within %d ms of signal %d; killing it",
			TH_STOP_TIMEOUT_MS, sig);
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
	}
	d->pid = 0;
	d->last_status = st;
	return st;
}

int th_daemon_kill(th_daemon *d)
{
	int st;

	if (d->pid <= 0)
		return -ESRCH;
	drop_ctl(d);
	kill(d->pid, SIGKILL);
	st = th_pid_wait(d->pid, TH_STOP_TIMEOUT_MS);
	d->pid = 0;
	d->last_status = st;
	return st;
}

int th_daemon_restart(th_daemon *d)
{
	int st = th_daemon_stop(d, SIGTERM);

	if (st != 0) {
		th_note("restart: kvshared exited with %d on SIGTERM", st);
		return st;
	}
	return th_daemon_start(d);
}

bool th_daemon_exited(th_daemon *d, int *status)
{
	int ws;

	if (d->pid <= 0)
		return true;
	if (waitpid(d->pid, &ws, WNOHANG) != d->pid)
		return false;
	d->pid = 0;
	d->last_status = th_status_decode(ws);
	if (status)
		*status = d->last_status;
	return true;
}

void th_daemon_destroy(th_daemon *d)
{
	if (d->pid > 0)
		th_daemon_kill(d);
	drop_ctl(d);
	remove_dir(d->dir);
	d->dir[0] = '\0';
	for (int i = 0; i < TH_MAX_DAEMONS; i++)
		if (th_daemons[i] == d)
			th_daemons[i] = NULL;
}


void th_open_dir_to(th_daemon *d, uid_t uid, gid_t gid)
{
	pid_t pid;
	int status = 0;

	if (chmod(d->dir, 0711) < 0)
		th_fatal("chmod %s: %s", d->dir, strerror(errno));
	/* The test is about the socket's own mode: every directory above it
	 * must let @uid through (not so in a chroot whose / is 0700). */
	pid = fork();
	if (pid < 0)
		th_fatal("fork: %s", strerror(errno));
	if (pid == 0) {
		if (setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
			_exit(2);
		_exit(access(d->dir, X_OK) == 0 ? 0 : 1);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) == 2)
		th_fatal("cannot switch to uid %u", (unsigned)uid);
	if (WEXITSTATUS(status) != 0)
		th_skip("uid %u cannot reach %s: a directory above it is not "
			"searchable by others (a chroot whose / is 0700?)",
			(unsigned)uid, d->dir);
}

/* ---- under the stand-in for systemd -------------------------------------- */

long th_fdstore_get(const th_daemon *d, const char *key)
{
	FILE *f = fopen(d->state, "r");
	char line[512];
	size_t k = strlen(key);
	long v = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, k) && line[k] == '=')
			v = strtol(line + k + 1, NULL, 10);
	fclose(f);
	return v;
}

bool th_fdstore_wait(const th_daemon *d, const char *key, long want)
{
	int64_t deadline = th_now_ms() + TH_READY_TIMEOUT_MS;

	while (th_fdstore_get(d, key) < want) {
		if (th_now_ms() > deadline) {
			th_note("stand-in: %s stayed below %ld", key, want);
			return false;
		}
		th_poll_pause();
	}
	return true;
}

static int fdstore_cycle(th_daemon *d, int sig, pid_t to)
{
	long ready = th_fdstore_get(d, "ready");

	drop_ctl(d);
	if (to <= 0 || kill(to, sig) < 0)
		return -ESRCH;
	return th_fdstore_wait(d, "ready", ready + 1) ? 0 : -ETIMEDOUT;
}

int th_fdstore_crash(th_daemon *d)
{
	return fdstore_cycle(d, SIGKILL, (pid_t)th_fdstore_get(d, "pid"));
}

int th_fdstore_restart(th_daemon *d)
{
	return fdstore_cycle(d, SIGHUP, d->pid);
}
