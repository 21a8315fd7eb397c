/* redis_cli.c - redis-cli against a node of a test cluster (see
 * redis_cluster.h), under a deadline, its output's end kept. */

#define _GNU_SOURCE

#include "redis_cluster_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The command line: the node, TLS files when it speaks TLS only, @argv. */
static int cli_args(const rc_cluster *c, int i, const char **av, char *port,
		    size_t port_len, int argc, const char *const *argv)
{
	int n = 0;

	snprintf(port, port_len, "%d", c->port[i]);
	av[n++] = c->cli;
	av[n++] = "-h";
	av[n++] = "127.0.0.1";
	av[n++] = "-p";
	av[n++] = port;
	if (c->tls && !c->tls_and_plain) {
		static char ca[PATH_MAX], cert[PATH_MAX], key[PATH_MAX];

		snprintf(ca, sizeof(ca), "%s", rc_tls_file(c, "ca.crt"));
		snprintf(cert, sizeof(cert), "%s", rc_tls_file(c, "client.crt"));
		snprintf(key, sizeof(key), "%s", rc_tls_file(c, "client.key"));
		av[n++] = "--tls";
		av[n++] = "--cacert";
		av[n++] = ca;
		av[n++] = "--cert";
		av[n++] = cert;
		av[n++] = "--key";
		av[n++] = key;
	}
	for (int k = 0; k < argc; k++)
		av[n++] = argv[k];
	av[n] = NULL;
	return n;
}

/* Run redis-cli with @av, its stdout and stderr into the pipe @pfd. */
static pid_t cli_spawn(const rc_cluster *c, const char **av, int pfd[2])
{
	pid_t pid = fork();

	if (pid < 0) {
		int rc = -errno;

		close(pfd[0]);
		close(pfd[1]);
		return rc;
	}
	if (pid == 0) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

		if (fd >= 0)
			dup2(fd, STDIN_FILENO);
		dup2(pfd[1], STDOUT_FILENO);
		dup2(pfd[1], STDERR_FILENO);
		execv(c->cli, (char *const *)av);
		_exit(127);
	}
	close(pfd[1]);
	return pid;
}

/* Append @k bytes of @buf to @out, keeping the end: where redis-cli says
 * what went wrong. */
static void keep_end(char *out, size_t cap, size_t *len, const char *buf, size_t k)
{
	size_t take = k < cap - 1 ? k : cap - 1;
	const char *from = buf + (k - take);

	if (*len + take > cap - 1) {
		size_t drop = *len + take - (cap - 1);

		memmove(out, out + drop, *len - drop);
		*len -= drop;
	}
	memcpy(out + *len, from, take);
	*len += take;
	out[*len] = '\0';
}

/* Read the child's output until it closes the pipe or @end passes
 * (-ETIMEDOUT, the child killed); its exit code. */
static int cli_collect(pid_t pid, int fd, char *out, size_t cap, double end)
{
	size_t len = 0;
	int status;

	if (out && cap)
		out[0] = '\0';
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char buf[4096];
		double left = end - now_s();
		ssize_t k;

		if (left <= 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			close(fd);
			return -ETIMEDOUT;
		}
		if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
			continue;
		k = read(fd, buf, sizeof(buf));
		if (k <= 0)
			break;
		if (out && cap > 1)
			keep_end(out, cap, &len, buf, (size_t)k);
	}
	close(fd);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	while (out && len && (out[len - 1] == '\n' || out[len - 1] == '\r'))
		out[--len] = '\0';
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int rc_cli_argv(const rc_cluster *c, int i, char *out, size_t cap, int argc,
		const char *const *argv)
{
	const char *av[CLI_ARGS_MAX + 16];
	char port[16];
	int pfd[2];
	double end = now_s() + c->cli_timeout_s;
	pid_t pid;

	if (argc > CLI_ARGS_MAX)
		return -E2BIG;
	cli_args(c, i, av, port, sizeof(port), argc, argv);
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid = cli_spawn(c, av, pfd);
	if (pid < 0)
		return (int)pid;
	return cli_collect(pid, pfd[0], out, cap, end);
}

void rc_set_cli_timeout(rc_cluster *c, double seconds)
{
	c->cli_timeout_s = seconds;
}

int rc_cli(const rc_cluster *c, int i, char *out, size_t cap, ...)
{
	const char *argv[CLI_ARGS_MAX];
	int argc = 0;
	va_list ap;
	const char *a;

	va_start(ap, cap);
	while ((a = va_arg(ap, const char *)) != NULL && argc < CLI_ARGS_MAX)
		argv[argc++] = a;
	va_end(ap);
	return rc_cli_argv(c, i, out, cap, argc, argv);
}
