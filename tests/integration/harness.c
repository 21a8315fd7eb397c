/*
 * harness.c - the integration-test harness (see harness.h): process-wide
 * state, checks, the test's life cycle (init, skip, fatal, finish), cleanup
 * at every exit and the watchdog, and process helpers the other files share
 * (harness_int.h).
 */
#include "harness_int.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- process-wide state ---------------------------------------------------- */

#define TH_LOG_TAIL 16384
#define TH_MAX_FAIL_LINES 50

const char *th_name = "test";
int th_passed, th_failed;
static pid_t th_main_pid;
bool th_keep;
th_daemon *th_daemons[TH_MAX_DAEMONS];
pid_t th_children[TH_MAX_CHILDREN];
char th_mounts[TH_MAX_MOUNTS][96];

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

/* th_daemon_dump_log: here, beside the async-signal-safe dump it uses. */
void th_daemon_dump_log(const th_daemon *d)
{
	fflush(NULL);
	raw_dump_log(d);
}

/* ---- processes --------------------------------------------------------------- */

int th_status_decode(int ws)
{
	if (WIFEXITED(ws))
		return WEXITSTATUS(ws);
	if (WIFSIGNALED(ws))
		return 128 + WTERMSIG(ws);
	return -EINVAL;
}

int th_pid_wait(pid_t pid, int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	int ws;

	for (;;) {
		pid_t r = waitpid(pid, &ws, WNOHANG);

		if (r == pid)
			return th_status_decode(ws);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (th_now_ms() > deadline)
			return -ETIMEDOUT;
		th_poll_pause();
	}
}

void th_fds_close_from(int lowfd)
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

void th_fd_move(int fd, int target)
{
	if (fd == target)
		fcntl(fd, F_SETFD, 0);
	else
		dup2(fd, target);
}

int th_fd_poll(int fd, int64_t deadline)
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
