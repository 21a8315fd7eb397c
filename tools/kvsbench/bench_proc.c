/*
 * bench_proc.c - the private kvshared and the forked-client runner of
 * kvsbench's subcommands (contract in bench_proc.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_proc.h"
#include "bench_util.h"

#define MAX_ARGS 24

struct kvsb_daemon {
	pid_t pid;
	char dir[PATH_MAX];
	char sock[108];
	char log[PATH_MAX + 16];
	double start_ms;
};

static void daemon_cleanup(kvsb_daemon *d)
{
	unlink(d->sock);
	unlink(d->log);
	rmdir(d->dir);
	free(d);
}

int kvsb_beside_exe(const char *name, char *buf, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int w;

	if (n < 0)
		return -errno;
	self[n] = '\0';
	w = snprintf(buf, len, "%s/%s", dirname(self), name);
	if (w < 0 || (size_t)w >= len)
		return -ENAMETOOLONG;
	return access(buf, X_OK) == 0 ? 0 : -ENOENT;
}

int kvsb_daemon_exe(char *buf, size_t len)
{
	return kvsb_beside_exe("kvshared", buf, len);
}

int kvsb_daemon_start(uint64_t host_bytes, double timeout_s,
		      kvsb_daemon **out)
{
	char host[32];
	const char *args[] = { "--host-size", host, "--log-level", "warn", NULL };

	snprintf(host, sizeof(host), "%" PRIu64 "M",
		 (host_bytes + (1u << 20) - 1) >> 20);
	return kvsb_daemon_start_args(args, timeout_s, out);
}

int kvsb_daemon_start_args(const char *const *args, double timeout_s,
			   kvsb_daemon **out)
{
	return kvsb_daemon_start_exe(NULL, args, timeout_s, out);
}

/* In the forked child: @ready_fd as fd 3, stdout and stderr into @log,
 * then exec @exe; never returns. */
static void exec_daemon(const char *exe, const char *const *argv, int ready_fd,
			const char *log)
{
	int fd;

	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (ready_fd == 3)
		fcntl(3, F_SETFD, 0);
	else if (dup2(ready_fd, 3) < 0)
		_exit(127);
	fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0) {
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
	}
	execv(exe, (char *const *)argv);
	_exit(127);
}

/* Wait up to @timeout_s for "READY" on @fd (the daemon's --ready-fd):
 * 0; -ECHILD when it closed the pipe first, -EPROTO when it wrote something
 * else, -ETIMEDOUT. */
static int wait_ready(int fd, double timeout_s)
{
	double deadline = now_s() + timeout_s;
	char got[16];
	size_t have = 0;
	int rc = -ETIMEDOUT;

	while (now_s() < deadline) {
		struct pollfd pf = { fd, POLLIN, 0 };
		int ms = (int)((deadline - now_s()) * 1000) + 1;
		ssize_t n;

		if (poll(&pf, 1, ms) <= 0)
			continue;
		n = read(fd, got + have, sizeof(got) - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = -ECHILD; /* it closed the pipe without READY */
			break;
		}
		have += (size_t)n;
		got[have] = '\0';
		if (strstr(got, "READY")) {
			rc = 0;
			break;
		}
		if (have == sizeof(got) - 1) {
			rc = -EPROTO;
			break;
		}
	}
	return rc;
}

int kvsb_daemon_start_exe(const char *bin, const char *const *args,
			  double timeout_s, kvsb_daemon **out)
{
	char exe[PATH_MAX];
	const char *tmp = getenv("TMPDIR");
	const char *argv[MAX_ARGS + 6];
	size_t nargs = 0;
	double t0;
	kvsb_daemon *d;
	int p[2], rc;

	while (args && args[nargs])
		if (++nargs > MAX_ARGS)
			return -E2BIG;
	if (bin) {
		if ((size_t)snprintf(exe, sizeof(exe), "%s", bin) >= sizeof(exe))
			return -ENAMETOOLONG;
	} else if ((rc = kvsb_daemon_exe(exe, sizeof(exe))) < 0) {
		return rc;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	snprintf(d->dir, sizeof(d->dir), "%s/kvsbench-kvshared.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(d->dir)) {
		rc = -errno;
		free(d);
		return rc;
	}
	snprintf(d->log, sizeof(d->log), "%s/kvshared.log", d->dir);
	if ((size_t)snprintf(d->sock, sizeof(d->sock), "%s/kvshared.sock",
			     d->dir) >= sizeof(d->sock)) {
		daemon_cleanup(d);
		return -ENAMETOOLONG;
	}
	argv[0] = exe;
	argv[1] = "--socket";
	argv[2] = d->sock;
	argv[3] = "--ready-fd";
	argv[4] = "3";
	for (size_t i = 0; i < nargs; i++)
		argv[5 + i] = args[i];
	argv[5 + nargs] = NULL;
	if (pipe2(p, O_CLOEXEC) < 0) {
		rc = -errno;
		daemon_cleanup(d);
		return rc;
	}
	fflush(NULL);
	t0 = now_s();
	d->pid = fork();
	if (d->pid < 0) {
		rc = -errno;
		close(p[0]);
		close(p[1]);
		daemon_cleanup(d);
		return rc;
	}
	if (d->pid == 0)
		exec_daemon(exe, argv, p[1], d->log);
	close(p[1]);
	rc = wait_ready(p[0], timeout_s);
	close(p[0]);
	d->start_ms = (now_s() - t0) * 1e3;
	if (rc < 0) {
		kill(d->pid, SIGKILL);
		kvsb_reap(d->pid, 5.0);
		kvsb_log_tail("kvshared", d->log);
		daemon_cleanup(d);
		return rc;
	}
	*out = d;
	return 0;
}

const char *kvsb_daemon_socket(const kvsb_daemon *d)
{
	return d->sock;
}

const char *kvsb_daemon_log(const kvsb_daemon *d)
{
	return d->log;
}

double kvsb_daemon_start_ms(const kvsb_daemon *d)
{
	return d->start_ms;
}

int kvsb_daemon_stop(kvsb_daemon *d)
{
	int status, rc = 0;

	if (!d)
		return 0;
	kill(d->pid, SIGTERM);
	status = kvsb_reap(d->pid, 10.0);
	if (status == -ETIMEDOUT) {
		kill(d->pid, SIGKILL);
		status = kvsb_reap(d->pid, 5.0);
	}
	if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		if (status >= 0 && WIFSIGNALED(status))
			fprintf(stderr, "kvsbench: kvshared died of signal %d\n",
				WTERMSIG(status));
		else if (status >= 0)
			fprintf(stderr, "kvsbench: kvshared exited %d\n",
				WEXITSTATUS(status));
		kvsb_log_tail("kvshared", d->log);
		rc = -ECHILD;
	}
	daemon_cleanup(d);
	return rc;
}

/* ---- forked clients ------------------------------------------------------ */

struct kvsb_gate {
	int ready_w; /* write one byte when set up (or failed) */
	int go_r;    /* EOF when every client is set up */
	int passed;
};

void kvsb_gate_wait(kvsb_gate *g)
{
	char c = 'R';
	ssize_t n;

	if (g->passed)
		return;
	g->passed = 1;
	(void)!write(g->ready_w, &c, 1);
	close(g->ready_w);
	do
		n = read(g->go_r, &c, 1);
	while (n < 0 && errno == EINTR);
	close(g->go_r);
}

/* A forked client: @fn on its gate (@ready_w, @go_r) and its result slot
 * @res; a client that fails before it passes the gate still answers it
 * ('F'). Never returns. */
static void client_main(kvsb_client_fn fn, const void *ctx, unsigned i, int ready_w,
			int go_r, void *res)
{
	kvsb_gate g = { ready_w, go_r, 0 };
	int rc = fn(ctx, i, &g, res);

	if (!g.passed) {
		char c = 'F';

		(void)!write(g.ready_w, &c, 1);
	}
	fflush(NULL);
	_exit(rc < 0 ? 1 : 0);
}

/* Every client answers once on @ready_r, set up or failed; a client that
 * crashes before that is caught by the deadline (120 s). */
static void wait_clients_ready(int ready_r, unsigned started)
{
	double deadline = now_s() + 120.0;
	unsigned seen = 0;

	while (seen < started && now_s() < deadline) {
		struct pollfd p = { ready_r, POLLIN, 0 };
		char buf[64];
		ssize_t got;

		if (poll(&p, 1, 1000) <= 0)
			continue;
		got = read(ready_r, buf, sizeof(buf));
		if (got <= 0)
			break;
		seen += (unsigned)got;
	}
}

int kvsb_clients_run(unsigned n, kvsb_client_fn fn, const void *ctx,
		     void *res, size_t res_size)
{
	size_t bytes = n * res_size;
	char *shm;
	pid_t *pids = calloc(n, sizeof(*pids));
	int ready[2], go[2], failed = 0, status, err;
	unsigned started = 0;

	if (!pids)
		return -ENOMEM;
	shm = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shm == MAP_FAILED) {
		free(pids);
		return -errno;
	}
	memcpy(shm, res, bytes);
	if (pipe2(ready, O_CLOEXEC) < 0) {
		err = -errno;
		munmap(shm, bytes);
		free(pids);
		return err;
	}
	if (pipe2(go, O_CLOEXEC) < 0) {
		err = -errno;
		close(ready[0]);
		close(ready[1]);
		munmap(shm, bytes);
		free(pids);
		return err;
	}
	fflush(NULL); /* nothing buffered may be written twice */
	for (unsigned i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			fprintf(stderr, "kvsbench: fork failed: %s\n",
				strerror(errno));
			continue;
		}
		if (pid == 0) {
			close(ready[0]);
			close(go[1]);
			client_main(fn, ctx, i, ready[1], go[0], shm + i * res_size);
		}
		pids[started++] = pid;
	}
	close(ready[1]);
	close(go[0]);
	wait_clients_ready(ready[0], started);
	close(go[1]); /* start */
	close(ready[0]);
	/* Reap our clients only: the daemon and redis-server are children
	 * too, and their exit is for their owners to see. */
	for (unsigned i = 0; i < started; i++) {
		pid_t p;

		while ((p = waitpid(pids[i], &status, 0)) < 0 && errno == EINTR)
			;
		if (p < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	failed += (int)(n - started);
	memcpy(res, shm, bytes);
	munmap(shm, bytes);
	free(pids);
	return failed;
}

int kvsb_run_capture(char *const *argv, char *out, size_t cap, double timeout_s)
{
	int fds[2], status;
	size_t have = 0;
	ssize_t n;
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		dup2(fds[1], STDERR_FILENO);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	while ((n = read(fds[0], out + have, cap - 1 - have)) > 0 && have + (size_t)n < cap - 1)
		have += (size_t)n;
	if (n > 0)
		have += (size_t)n;
	while (n > 0) { /* drain what does not fit */
		char sink[4096];

		n = read(fds[0], sink, sizeof(sink));
	}
	out[have] = '\0';
	close(fds[0]);
	status = kvsb_reap(pid, timeout_s);
	if (status == -ETIMEDOUT) {
		kill(pid, SIGKILL);
		kvsb_reap(pid, 5.0);
		return -ETIMEDOUT;
	}
	return status < 0 ? status : (WIFEXITED(status) ? WEXITSTATUS(status) : 128);
}
