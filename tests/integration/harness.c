/* harness.c - the integration-test harness (see harness.h). */
#include "harness.h"

#include <fcntl.h>
#include <inttypes.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- process-wide state ---------------------------------------------------- */

#define TH_MAX_DAEMONS 8
#define TH_MAX_CHILDREN 128
#define TH_LOG_TAIL 16384
#define TH_MAX_FAIL_LINES 50

static const char *th_name = "test";
static int th_passed, th_failed;
static pid_t th_main_pid;
static bool th_keep;
static th_daemon *th_daemons[TH_MAX_DAEMONS];
static pid_t th_children[TH_MAX_CHILDREN];
static char th_mounts[TH_MAX_MOUNTS][96];

static bool in_child(void)
{
	return th_main_pid && getpid() != th_main_pid;
}

static void who(char *buf, size_t len)
{
	if (in_child())
		snprintf(buf, len, "%s[child %d]", th_name, (int)getpid());
	else
		snprintf(buf, len, "%s", th_name);
}

int64_t th_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The pause between two polls of a condition: short, so a wait costs little
 * more than the condition takes to become true. */
void th_poll_pause(void)
{
	struct timespec ts = { 0, 2 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

bool th_env_flag(const char *name)
{
	const char *v = getenv(name);

	return v && *v && strcmp(v, "0") != 0;
}

/* ---- checks --------------------------------------------------------------- */

static void vreport(const char *kind, const char *fmt, va_list ap)
{
	char w[96];

	who(w, sizeof(w));
	fprintf(stderr, "%s: %s", w, kind);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void th_note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("", fmt, ap);
	va_end(ap);
}

static void fail_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail_note(const char *fmt, ...)
{
	va_list ap;

	/* A failing loop must not bury the first failures in its output. */
	if (++th_failed > TH_MAX_FAIL_LINES) {
		if (th_failed == TH_MAX_FAIL_LINES + 1)
			th_note("more than %d failures: not printing the rest",
				TH_MAX_FAIL_LINES);
		return;
	}
	va_start(ap, fmt);
	vreport("FAIL: ", fmt, ap);
	va_end(ap);
}

bool th_check(bool ok, const char *file, int line, const char *expr)
{
	if (ok) {
		th_passed++;
		return true;
	}
	fail_note("%s:%d: CHECK(%s)", file, line, expr);
	return false;
}

bool th_check_cmp(long long a, long long b, const char *op, const char *file,
		  int line, const char *ea, const char *eb)
{
	bool ok;

	if (!strcmp(op, "=="))
		ok = a == b;
	else if (!strcmp(op, "!="))
		ok = a != b;
	else if (!strcmp(op, ">="))
		ok = a >= b;
	else if (!strcmp(op, "<="))
		ok = a <= b;
	else if (!strcmp(op, ">"))
		ok = a > b;
	else
		ok = a < b;
	if (ok) {
		th_passed++;
		return true;
	}
	fail_note("%s:%d: CHECK(%s %s %s): %lld vs %lld", file, line, ea, op, eb,
		  a, b);
	return false;
}

static const char *rc_name(long long rc)
{
	return rc < 0 && rc > INT_MIN ? kvs_strerror((int)rc) : "ok";
}

bool th_check_rc(long long got, long long want, const char *file, int line,
		 const char *expr)
{
	if (got == want) {
		th_passed++;
		return true;
	}
	fail_note("%s:%d: %s returned %lld (%s), expected %lld (%s)", file, line,
		  expr, got, rc_name(got), want, rc_name(want));
	return false;
}

int th_failures(void)
{
	return th_failed;
}

/* ---- cleanup and the watchdog ----------------------------------------------- */

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

/* Unmount th_tmpfs's mounts and remove their dirs. Async-signal-safe. */
static void unmount_all(void)
{
	for (int i = 0; i < TH_MAX_MOUNTS; i++)
		if (th_mounts[i][0]) {
			umount2(th_mounts[i], MNT_DETACH);
			rmdir(th_mounts[i]);
			th_mounts[i][0] = '\0';
		}
}

/* Async-signal-safe: only write/open/read/kill/unlink. */
static void raw_write(const char *s)
{
	ssize_t r = write(2, s, strlen(s));

	(void)r;
}

static void raw_dump_log(const th_daemon *d)
{
	char buf[4096];
	ssize_t n;
	int fd = open(d->log, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	raw_write("---- kvshared log: ");
	raw_write(d->log);
	raw_write(" (tail) ----\n");
	if (lseek(fd, 0, SEEK_END) > TH_LOG_TAIL)
		lseek(fd, -TH_LOG_TAIL, SEEK_END);
	else
		lseek(fd, 0, SEEK_SET);
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		ssize_t w = write(2, buf, (size_t)n);

		(void)w;
	}
	raw_write("---- end of log ----\n");
	close(fd);
}

/* Kill every process the test started, print the logs, remove the temp
 * dirs. Async-signal-safe. */
static void raw_teardown(void)
{
	for (int i = 0; i < TH_MAX_CHILDREN; i++)
		if (th_children[i] > 0)
			kill(th_children[i], SIGKILL);
	for (int i = 0; i < TH_MAX_DAEMONS; i++) {
		th_daemon *d = th_daemons[i];

		if (!d)
			continue;
		if (d->pid > 0)
			kill(d->pid, SIGKILL);
		raw_dump_log(d);
		if (!th_keep) {
			unlink(d->socket);
			unlink(d->log);
			rmdir(d->dir);
		}
	}
	unmount_all();
}

static void th_watchdog(int sig)
{
	(void)sig;
	raw_write(th_name);
	raw_write(": FAIL: TIMEOUT: the test hung; killing its processes\n");
	raw_teardown();
	_exit(1);
}

/* A crash of the test itself: clean up, then die of the same signal. */
static void th_crash(int sig)
{
	if (!in_child()) {
		raw_write(th_name);
		raw_write(": FAIL: the test crashed (");
		raw_write(strsignal(sig));
		raw_write("); killing its processes\n");
		raw_teardown();
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void th_cleanup(void)
{
	if (in_child())
		return;
	for (int i = 0; i < TH_MAX_CHILDREN; i++)
		if (th_children[i] > 0) {
			kill(th_children[i], SIGKILL);
			waitpid(th_children[i], NULL, 0);
			th_children[i] = 0;
		}
	for (int i = 0; i < TH_MAX_DAEMONS; i++)
		if (th_daemons[i])
			th_daemon_destroy(th_daemons[i]);
	unmount_all();
}

void th_init(const char *name)
{
	static const int crash_signals[] = { SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL };
	const char *bin = getenv("KVSHARED");
	const char *t = getenv("TH_TIMEOUT");
	struct sigaction sa;
	sigset_t none;

	th_name = name;
	th_main_pid = getpid();
	th_keep = th_env_flag("TH_KEEP");
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* SIGPIPE keeps its default action on purpose: a client library that
	 * writes to a dead daemon without MSG_NOSIGNAL must show up as a failure. */
	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (!bin || !*bin)
		th_skip("KVSHARED is not set (run through ctest, or set it to the built kvshared)");
	if (access(bin, X_OK) != 0)
		th_skip("KVSHARED=%s is not executable", bin);
	atexit(th_cleanup);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = th_watchdog;
	sigaction(SIGALRM, &sa, NULL);
	sa.sa_handler = th_crash;
	sa.sa_flags = SA_RESETHAND;
	for (size_t i = 0; i < sizeof(crash_signals) / sizeof(crash_signals[0]); i++)
		sigaction(crash_signals[i], &sa, NULL);
	alarm(t && atoi(t) > 0 ? (unsigned)atoi(t) : 120);
}

void th_skip(const char *fmt, ...)
{
	va_list ap;

	printf("%s: SKIP: ", th_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(NULL);
	exit(77);
}

void th_fatal(const char *fmt, ...)
{
	va_list ap;

	th_failed++;
	va_start(ap, fmt);
	vreport("FATAL: ", fmt, ap);
	va_end(ap);
	if (!in_child()) {
		for (int i = 0; i < TH_MAX_DAEMONS; i++)
			if (th_daemons[i])
				th_daemon_dump_log(th_daemons[i]);
		printf("%s: %d checks passed, %d failed\n", th_name, th_passed,
		       th_failed);
	}
	fflush(NULL);
	exit(1);
}

/* What th_skip_part() recorded, "; "-separated. */
static char th_skipped_parts[1024];

int th_finish(void)
{
	/* Every daemon must have survived the test and must stop cleanly. */
	for (int i = 0; i < TH_MAX_DAEMONS; i++) {
		th_daemon *d = th_daemons[i];
		int st;

		if (!d || d->pid <= 0)
			continue;
		if (th_daemon_exited(d, &st)) {
			fail_note("kvshared (%s) died during the test: status %d", d->socket, st);
			continue;
		}
		st = th_daemon_stop(d, SIGTERM);
		if (!CHECK_EQ(st, 0))
			th_note("kvshared ended with status %d on SIGTERM at the end of "
				"the test (128+N: killed by signal N)", st);
		if (!CHECK(access(d->socket, F_OK) != 0))
			th_note("kvshared left its socket %s behind", d->socket);
	}
	if (th_failed)
		for (int i = 0; i < TH_MAX_DAEMONS; i++)
			if (th_daemons[i])
				th_daemon_dump_log(th_daemons[i]);
	/* Tear down now: the daemons may live in main's frame, which is gone
	 * by the time exit handlers run. */
	for (int i = 0; i < TH_MAX_DAEMONS; i++)
		if (th_daemons[i])
			th_daemon_destroy(th_daemons[i]);
	printf("%s: %d checks passed, %d failed\n", th_name, th_passed, th_failed);
	if (!th_failed && th_skipped_parts[0]) {
		printf("%s: SKIP: the rest passed; NOT TESTED: %s\n", th_name,
		       th_skipped_parts);
		fflush(NULL);
		return 77;
	}
	fflush(NULL);
	return th_failed ? 1 : 0;
}

void th_skip_part(const char *fmt, ...)
{
	size_t n = strlen(th_skipped_parts);
	va_list ap;

	if (n && n < sizeof(th_skipped_parts) - 2) {
		strcat(th_skipped_parts, "; ");
		n += 2;
	}
	va_start(ap, fmt);
	vsnprintf(th_skipped_parts + n, sizeof(th_skipped_parts) - n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: SKIP PART: %s\n", th_name, th_skipped_parts + n);
}

/* ---- the daemon ----------------------------------------------------------- */

static int decode_status(int ws)
{
	if (WIFEXITED(ws))
		return WEXITSTATUS(ws);
	if (WIFSIGNALED(ws))
		return 128 + WTERMSIG(ws);
	return -EINVAL;
}

/* Wait for @pid up to @timeout_ms; returns decode_status() or -ETIMEDOUT. */
static int wait_pid(pid_t pid, int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	int ws;

	for (;;) {
		pid_t r = waitpid(pid, &ws, WNOHANG);

		if (r == pid)
			return decode_status(ws);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (th_now_ms() > deadline)
			return -ETIMEDOUT;
		th_poll_pause();
	}
}

static void close_from(int lowfd)
{
	long max;

	if (syscall(SYS_close_range, (unsigned)lowfd, ~0U, 0) == 0)
		return;
	max = sysconf(_SC_OPEN_MAX);
	if (max < 0 || max > 65536)
		max = 65536;
	for (int fd = lowfd; fd < max; fd++)
		close(fd);
}

/* Put @fd at @target without close-on-exec. */
static void move_fd(int fd, int target)
{
	if (fd == target)
		fcntl(fd, F_SETFD, 0);
	else
		dup2(fd, target);
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
	const char *argv[TH_MAX_ARGS + 8];
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
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = d->socket;
	argv[n++] = "--ready-fd";
	argv[n++] = "3";
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
	move_fd(ready_fd, 3);
	close_from(4);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGALRM, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int i = 0; i < d->nenv; i++)
		putenv((char *)d->env[i]);
	execv(bin, (char *const *)argv);
	dprintf(2, "exec %s: %s\n", bin, strerror(errno));
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
		st = wait_pid(d->pid, 2000);
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
	st = wait_pid(d->pid, TH_STOP_TIMEOUT_MS);
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
	st = wait_pid(d->pid, TH_STOP_TIMEOUT_MS);
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
	d->last_status = decode_status(ws);
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

void th_daemon_dump_log(const th_daemon *d)
{
	fflush(NULL);
	raw_dump_log(d);
}

/* ---- clients and stats ---------------------------------------------------- */

kvs_client *th_connect(const th_daemon *d, const kvs_layout *layout)
{
	kvs_client *c = NULL;
	int rc = kvs_connect(d->socket, layout, &c);

	if (rc)
		th_fatal("kvs_connect(%s, %s): %s", d->socket,
			 layout ? layout->model : "control", kvs_strerror(rc));
	return c;
}

/* Stats text through the control client; reconnects once after a restart. */
static int stats_text(th_daemon *d, char **text)
{
	int rc;

	if (d->ctl && d->ctl_owner != getpid())
		d->ctl = NULL; /* inherited from the parent: its fd is closed */
	if (!d->ctl) {
		rc = kvs_connect(d->socket, NULL, &d->ctl);
		if (rc) {
			d->ctl = NULL;
			return rc;
		}
		d->ctl_owner = getpid();
	}
	rc = kvs_stats(d->ctl, text);
	if (rc == KVS_E_DISCONNECTED) {
		rc = kvs_reconnect(d->ctl);
		if (rc == 0)
			rc = kvs_stats(d->ctl, text);
	}
	return rc;
}

int th_stat(th_daemon *d, const char *name, int64_t *value)
{
	char *text = NULL;
	int rc = stats_text(d, &text);

	if (rc)
		return rc;
	rc = kvs_stats_value(text, name, value);
	free(text);
	return rc;
}

int64_t th_stat_get(th_daemon *d, const char *name)
{
	int64_t v;
	int rc = th_stat(d, name, &v);

	if (rc) {
		th_note("stat %s: %s", name, kvs_strerror(rc));
		return INT64_MIN;
	}
	return v;
}

bool th_wait_stat(th_daemon *d, const char *name, int64_t expected,
		  int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	int64_t v = 0;
	int rc;

	for (;;) {
		rc = th_stat(d, name, &v);
		if (rc == 0 && v == expected)
			return true;
		if (th_now_ms() > deadline)
			break;
		th_poll_pause();
	}
	if (rc)
		th_note("wait_stat %s: %s", name, kvs_strerror(rc));
	else
		th_note("wait_stat %s: still %lld after %d ms, expected %lld", name,
			(long long)v, timeout_ms, (long long)expected);
	return false;
}

void th_stats_take(th_daemon *d, th_stats *s)
{
	int rc = stats_text(d, &s->text);

	if (rc)
		th_fatal("stats: %s", kvs_strerror(rc));
}

void th_stats_free(th_stats *s)
{
	free(s->text);
	s->text = NULL;
}

int64_t th_stats_val(const th_stats *s, const char *name)
{
	int64_t v;

	if (kvs_stats_value(s->text, name, &v) != 0) {
		th_note("stat %s is missing from the stats text", name);
		return INT64_MIN;
	}
	return v;
}

int64_t th_stats_delta(const th_stats *before, const th_stats *after,
		       const char *name)
{
	int64_t a = th_stats_val(before, name), b = th_stats_val(after, name);

	if (a == INT64_MIN || b == INT64_MIN)
		return INT64_MIN;
	return b - a;
}

/* ---- layouts, tokens, hashes, block contents ------------------------------- */

kvs_layout th_layout(const char *model, uint32_t block_tokens)
{
	kvs_layout l = {
		.model = model,
		.layers = 2,
		.kv_heads = 2,
		.head_dim = 64,
		.block_tokens = block_tokens,
		.tp_rank = 0,
		.tp_size = 1,
		.dtype = KVS_DTYPE_FP16,
	};
	return l;
}

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void th_tokens(uint32_t *out, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x2545f4914f6cdd1dull + 1;

	for (size_t i = 0; i < n; i++)
		out[i] = (uint32_t)(splitmix64(&x) % 128000);
}

size_t th_chain(const kvs_layout *l, uint64_t prefix_seed, size_t nprefix,
		uint64_t suffix_seed, size_t nsuffix, kvs_hash *out)
{
	size_t bt = l->block_tokens, n = nprefix + nsuffix, got;
	uint32_t *tok = malloc((n ? n : 1) * bt * sizeof(*tok));

	if (!tok)
		th_fatal("out of memory");
	th_tokens(tok, nprefix * bt, prefix_seed);
	th_tokens(tok + nprefix * bt, nsuffix * bt, suffix_seed);
	got = kvs_hash_chain(kvs_hash_layout_seed(l), l->block_tokens, tok,
			     n * bt, out, n);
	free(tok);
	if (got != n)
		th_fatal("kvs_hash_chain made %zu hashes, expected %zu", got, n);
	return n;
}

static uint64_t pattern_seed(kvs_hash h, uint64_t salt)
{
	return h.lo ^ (h.hi << 32 | h.hi >> 32) ^ (salt * 0xd6e8feb86659fd93ull);
}

void th_pattern_fill(void *dst, size_t len, kvs_hash h, uint64_t salt)
{
	uint64_t x = pattern_seed(h, salt), v;
	uint8_t *p = dst;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		v = splitmix64(&x);
		memcpy(p + i, &v, 8);
	}
	if (i < len) {
		v = splitmix64(&x);
		memcpy(p + i, &v, len - i);
	}
}

long th_pattern_check(const void *src, size_t len, kvs_hash h, uint64_t salt)
{
	uint64_t x = pattern_seed(h, salt), v;
	const uint8_t *p = src;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		v = splitmix64(&x);
		if (memcmp(p + i, &v, 8))
			return (long)i;
	}
	if (i < len) {
		v = splitmix64(&x);
		if (memcmp(p + i, &v, len - i))
			return (long)i;
	}
	return -1;
}

int th_publish_salted(kvs_client *c, const kvs_hash *h, size_t n,
		      kvs_block *blocks, uint64_t salt)
{
	kvs_block *b = blocks ? blocks : calloc(n ? n : 1, sizeof(*b));
	uint64_t bb = kvs_block_bytes(c);
	kvs_lease lease = 0;
	int nnew, filled = 0, rc;

	if (!b)
		return -ENOMEM;
	nnew = kvs_reserve(c, h, n, &lease, b);
	if (nnew < 0) {
		rc = nnew;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		void *p;

		if (b[i].status != KVS_BLOCK_NEW)
			continue;
		p = kvs_block_ptr(c, &b[i]);
		if (!p) {
			th_note("publish: NEW block %zu (offset %llu) has no pointer",
				i, (unsigned long long)b[i].offset);
			continue;
		}
		th_pattern_fill(p, bb, h[i], salt);
		filled++;
	}
	if (!lease) {
		rc = nnew ? KVS_E_INTERNAL : 0;
		if (nnew)
			th_note("publish: %d NEW blocks but no lease", nnew);
		goto out;
	}
	if (filled != nnew) {
		th_note("publish: reserve said %d NEW, %d had the NEW status and a pointer",
			nnew, filled);
		kvs_abort(c, lease);
		rc = KVS_E_INTERNAL;
		goto out;
	}
	rc = kvs_commit(c, lease);
	if (rc >= 0 && rc != nnew) {
		th_note("publish: commit published %d blocks, reserve gave %d", rc, nnew);
		rc = KVS_E_INTERNAL;
	}
out:
	if (b != blocks)
		free(b);
	return rc;
}

int th_publish(kvs_client *c, const kvs_hash *h, size_t n, kvs_block *blocks)
{
	return th_publish_salted(c, h, n, blocks, 0);
}

int th_verify_salted(kvs_client *c, const kvs_hash *h, size_t n, size_t *bad,
		     uint64_t salt)
{
	kvs_block *b = calloc(n ? n : 1, sizeof(*b));
	uint64_t bb = kvs_block_bytes(c);
	kvs_lease lease = 0;
	size_t nbad = 0;
	int hits, rc;

	if (!b)
		return -ENOMEM;
	hits = kvs_lookup(c, h, n, &lease, b);
	for (int i = 0; i < hits; i++) {
		const void *p = kvs_block_ptr(c, &b[i]);
		long off = p ? th_pattern_check(p, bb, h[i], salt) : 0;

		if (!p || off >= 0 || b[i].status != KVS_BLOCK_HIT) {
			th_note("verify: block %d (offset %llu): %s", i,
				(unsigned long long)b[i].offset,
				!p ? "no pointer" : off >= 0 ? "wrong bytes" : "status not HIT");
			nbad++;
		}
	}
	rc = hits;
	if (hits > 0 && !lease) {
		th_note("verify: %d hits but no lease", hits);
		rc = KVS_E_INTERNAL;
	}
	if (lease) {
		int r = kvs_release(c, lease);

		if (r < 0)
			rc = r;
	}
	free(b);
	if (bad)
		*bad = nbad;
	return rc;
}

int th_verify(kvs_client *c, const kvs_hash *h, size_t n, size_t *bad)
{
	return th_verify_salted(c, h, n, bad, 0);
}

int th_probe(kvs_client *c, const kvs_hash *h, size_t n)
{
	kvs_block *b = calloc(n ? n : 1, sizeof(*b));
	kvs_lease lease = 0;
	int hits;

	if (!b)
		return -ENOMEM;
	hits = kvs_lookup(c, h, n, &lease, b);
	if (lease) {
		int r = kvs_release(c, lease);

		if (r < 0)
			hits = r;
	}
	free(b);
	return hits;
}

int th_mapping_of(const void *addr, size_t len, th_mapping *m)
{
	uintptr_t a = (uintptr_t)addr;
	char line[512];
	FILE *f = fopen("/proc/self/maps", "re");
	int rc = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end, off, inode;
		char perms[8], path[256] = "";
		int n = sscanf(line, "%lx-%lx %7s %lx %*s %lu %255[^\n]", &start, &end,
			       perms, &off, &inode, path);

		if (n < 5 || a < start || a >= end)
			continue;
		if (a + len > end)
			break;
		m->start = start;
		m->end = end;
		m->file_offset = off;
		m->inode = inode;
		m->writable = perms[1] == 'w';
		m->shared = perms[3] == 's';
		snprintf(m->path, sizeof(m->path), "%s", path);
		rc = 0;
		break;
	}
	fclose(f);
	return rc;
}

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
	 * of their fds) before close_from() lets those numbers be reused, so
	 * that LeakSanitizer has nothing to report when the child exits. */
	for (int i = 0; i < TH_MAX_DAEMONS; i++)
		if (th_daemons[i]) {
			kvs_close(th_daemons[i]->ctl);
			th_daemons[i]->ctl = NULL;
		}
	move_fd(fd, 3);
	close_from(4);
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
	st = wait_pid(ch->pid, timeout_ms);
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
	st = wait_pid(ch->pid, TH_STOP_TIMEOUT_MS);
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

static int poll_in(int fd, int64_t deadline)
{
	for (;;) {
		int left = (int)(deadline - th_now_ms());
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r;

		if (left < 0)
			left = 0;
		r = poll(&p, 1, left);
		if (r > 0)
			return 0;
		if (r == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
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
		int rc = poll_in(fd, deadline);
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

/* ---- raw protocol --------------------------------------------------------- */

int th_raw_connect(const th_daemon *d)
{
	static const int types[] = { SOCK_STREAM, SOCK_SEQPACKET };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int rc = -EINVAL;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d->socket);
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		int fd = socket(AF_UNIX, types[i] | SOCK_CLOEXEC, 0);

		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		rc = -errno;
		close(fd);
		if (rc != -EPROTOTYPE)
			break;
	}
	return rc;
}

int th_raw_send(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t r = send(fd, p, n, MSG_NOSIGNAL);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int th_raw_send_msg(int fd, uint16_t version, uint16_t opcode, uint32_t len,
		    uint64_t req_id, const void *payload, size_t n)
{
	kvs_wire_hdr h = {
		.magic = KVS_WIRE_MAGIC,
		.version = version,
		.opcode = opcode,
		.len = len,
		.status = 0,
		.req_id = req_id,
	};
	uint8_t *buf = malloc(KVS_WIRE_HDR_SIZE + n);
	int rc;

	if (!buf)
		return -ENOMEM;
	/* One send: a message arrives whole (and is one record on SEQPACKET). */
	kvs_wire_hdr_encode(&h, buf);
	if (n)
		memcpy(buf + KVS_WIRE_HDR_SIZE, payload, n);
	rc = th_raw_send(fd, buf, KVS_WIRE_HDR_SIZE + n);
	free(buf);
	return rc;
}

int th_raw_request(int fd, uint16_t opcode, uint64_t req_id,
		   const void *payload, size_t n)
{
	return th_raw_send_msg(fd, KVS_WIRE_VERSION, opcode, (uint32_t)n, req_id,
			       payload, n);
}

/* Read exactly @n bytes (into @buf, or dropped when buf is NULL), closing any
 * descriptor that comes with them. */
static int recv_full(int fd, uint8_t *buf, size_t n, int64_t deadline)
{
	uint8_t junk[4096];

	while (n) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(8 * sizeof(int))];
		} ctl;
		struct iovec iov = {
			.iov_base = buf ? buf : junk,
			.iov_len = buf ? n : (n < sizeof(junk) ? n : sizeof(junk)),
		};
		struct msghdr msg = {
			.msg_iov = &iov,
			.msg_iovlen = 1,
			.msg_control = ctl.b,
			.msg_controllen = sizeof(ctl.b),
		};
		int rc = poll_in(fd, deadline);
		ssize_t r;

		if (rc)
			return rc;
		r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno == ECONNRESET ? TH_CLOSED : -errno;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
				int fds[8];

				memcpy(fds, CMSG_DATA(c), nfd * sizeof(int));
				for (size_t i = 0; i < nfd; i++)
					close(fds[i]);
			}
		if (r == 0)
			return TH_CLOSED;
		if (buf)
			buf += r;
		n -= (size_t)r;
	}
	return 0;
}

int th_raw_recv(int fd, kvs_wire_hdr *h, uint8_t *payload, size_t cap,
		int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	uint8_t hb[KVS_WIRE_HDR_SIZE];
	size_t keep;
	int rc = recv_full(fd, hb, sizeof(hb), deadline);

	if (rc)
		return rc;
	rc = kvs_wire_hdr_decode(hb, sizeof(hb), KVS_WIRE_MAX_PAYLOAD, h);
	if (rc) {
		th_note("raw reply with a bad header: %s", kvs_strerror(rc));
		return KVS_E_PROTO;
	}
	keep = h->len < cap ? h->len : cap;
	rc = recv_full(fd, payload, keep, deadline);
	if (rc == 0 && h->len > keep)
		rc = recv_full(fd, NULL, h->len - keep, deadline);
	return rc ? rc : (int)h->len;
}

bool th_raw_wait_closed(int fd, int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	uint8_t junk[4096];

	for (;;) {
		ssize_t r;

		if (poll_in(fd, deadline))
			return false;
		r = recv(fd, junk, sizeof(junk), 0);
		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return true;
		if (r < 0 && errno != EINTR && errno != EAGAIN)
			return false;
	}
}

int th_raw_hello(int fd, const kvs_layout *layout, uint64_t req_id)
{
	uint8_t buf[1024], reply[64];
	kvs_wire_hdr h;
	int n = kvs_wire_hello_encode(layout, buf, sizeof(buf));

	if (n < 0)
		return n;
	n = th_raw_request(fd, KVS_OP_HELLO, req_id, buf, (size_t)n);
	if (n < 0)
		return n;
	n = th_raw_recv(fd, &h, reply, sizeof(reply), TH_WAIT_MS);
	if (n < 0)
		return n;
	if (h.opcode != KVS_OP_HELLO || h.req_id != req_id) {
		th_note("hello reply: opcode %u req_id %llu", h.opcode,
			(unsigned long long)h.req_id);
		return KVS_E_PROTO;
	}
	return h.status;
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

int th_verify_chains(kvs_client *c, const kvs_hash *h, size_t chains,
		     size_t len, size_t *bad)
{
	int total = 0;

	*bad = 0;
	for (size_t i = 0; i < chains; i++) {
		size_t b = 0;
		int rc = th_verify(c, h + i * len, len, &b);

		if (!CHECK_GE(rc, 0))
			return -1;
		total += rc;
		*bad += b;
	}
	return total;
}

void th_ssd_off_checks(th_daemon *d, kvs_client *c, const kvs_layout *l,
		       kvs_hash (*h)[4], int n, int fresh, uint64_t seed,
		       const char *what)
{
	th_stats before, after;
	int64_t writes, evicted;
	size_t bad = 0;
	int hits;

	/* Every hit is right; what reached SSD before the fault comes back. */
	th_stats_take(d, &before);
	hits = th_verify_chains(c, &h[0][0], (size_t)n, 4, &bad);
	th_stats_take(d, &after);
	th_note("%s: %d hits of %d blocks, %zu wrong, %" PRId64
		" promoted from SSD", what, hits, n * 4, bad,
		th_stats_delta(&before, &after, "tier_ssd.promotions"));
	CHECK_EQ(bad, 0);
	CHECK_GE(hits, 32 - 4);
	CHECK_GT(th_stats_delta(&before, &after, "tier_ssd.promotions"), 0);
	CHECK_EQ(th_stats_val(&after, "tier_ssd.corrupt_blocks"), 0);
	th_stats_free(&before);
	th_stats_free(&after);

	/* Reserves and lookups go on from RAM; nothing more goes to SSD. */
	writes = th_stat_get(d, "tier_ssd.writes");
	evicted = th_stat_get(d, "blocks.evicted");
	for (int i = n; i < n + fresh; i++) {
		th_chain(l, seed + (uint64_t)i, 4, 0, 0, h[i]);
		CHECK_RC(th_publish(c, h[i], 4, NULL), 4);
		/* At once: the next publishes may evict it (leaf-2q evicts
		 * new blocks before the ones hit above). */
		CHECK_RC(th_verify_chains(c, h[i], 1, 4, &bad), 4);
		CHECK_EQ(bad, 0);
	}
	CHECK_GT(th_stat_get(d, "blocks.evicted"), evicted);
	CHECK_EQ(th_stat_get(d, "tier_ssd.writes"), writes);
	CHECK_EQ(th_stat_get(d, "tier_ssd.writes_inflight"), 0);
	CHECK_EQ(th_stat_get(d, "tier_ssd.enabled"), 0);
	CHECK(th_wait_stat(d, "leases.active", 0, TH_WAIT_MS));
}

void th_daemon_up_ssd(th_daemon *d, const char *const *args, char *ssd_dir,
		      size_t cap)
{
	if (th_daemon_init(d, args) < 0)
		th_fatal("cannot make a temp dir");
	snprintf(ssd_dir, cap, "%s/ssd", d->dir);
	if (mkdir(ssd_dir, 0700) < 0)
		th_fatal("mkdir %s: %s", ssd_dir, strerror(errno));
	if (th_daemon_start(d) < 0)
		th_fatal("daemon did not start");
}
