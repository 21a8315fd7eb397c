/*
 * bench_redis.c - a minimal RESP2 client and a private redis-server for the
 * kvsbench comparisons (contract in bench_redis.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_redis.h"
#include "bench_util.h"

#define RESP_BUF_MIN (64 * 1024)
#define RESP_MAX_DEPTH 8
#define RESP_MAX_ELEMS (1 << 24)
#define RESP_MAX_BULK (1ll << 32) /* Redis's own limit is 512 MB */

struct kvsb_resp {
	int fd;
	char *buf;        /* receive buffer: [start, end) is unread */
	size_t cap, start, end;
	char *sbuf;       /* send buffer, reused across commands */
	size_t scap;
};

struct kvsb_redis {
	pid_t pid;
	char dir[PATH_MAX];
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char version[32];
};

/* ---- connection ---------------------------------------------------------- */

int kvsb_resp_connect(const char *path, kvsb_resp **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	kvsb_resp *r;
	int fd, err;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	r = calloc(1, sizeof(*r));
	if (r)
		r->buf = malloc(RESP_BUF_MIN);
	if (!r || !r->buf) {
		free(r);
		close(fd);
		return -ENOMEM;
	}
	r->fd = fd;
	r->cap = RESP_BUF_MIN;
	*out = r;
	return 0;
}

void kvsb_resp_close(kvsb_resp *r)
{
	if (!r)
		return;
	close(r->fd);
	free(r->buf);
	free(r->sbuf);
	free(r);
}

static int send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return errno == EPIPE ? -ECONNRESET : -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* recv into @dst; 0 bytes (EOF) is -ECONNRESET. */
static ssize_t recv_some(int fd, void *dst, size_t n)
{
	for (;;) {
		ssize_t got = recv(fd, dst, n, 0);

		if (got > 0)
			return got;
		if (got == 0)
			return -ECONNRESET;
		if (errno != EINTR)
			return -errno;
	}
}

/* Read more bytes into the receive buffer, making room first. */
static int fill(kvsb_resp *r)
{
	ssize_t got;

	if (r->start == r->end) {
		r->start = r->end = 0;
	} else if (r->end == r->cap) {
		if (r->start > 0) {
			memmove(r->buf, r->buf + r->start, r->end - r->start);
			r->end -= r->start;
			r->start = 0;
		} else {
			char *p = realloc(r->buf, r->cap * 2);

			if (!p)
				return -ENOMEM;
			r->buf = p;
			r->cap *= 2;
		}
	}
	got = recv_some(r->fd, r->buf + r->end, r->cap - r->end);
	if (got < 0)
		return (int)got;
	r->end += (size_t)got;
	return 0;
}

/* Exactly @n bytes into @dst (NULL: drop them). Large reads bypass the
 * buffer, so a big bulk value is copied once, kernel to destination. */
static int read_exact(kvsb_resp *r, char *dst, size_t n)
{
	size_t have = r->end - r->start, take = have < n ? have : n;
	int rc;

	if (dst)
		memcpy(dst, r->buf + r->start, take);
	r->start += take;
	n -= take;
	if (dst)
		dst += take;
	while (n) {
		if (dst && n >= r->cap / 2) {
			ssize_t got = recv_some(r->fd, dst, n);

			if (got < 0)
				return (int)got;
			dst += got;
			n -= (size_t)got;
			continue;
		}
		rc = fill(r);
		if (rc < 0)
			return rc;
		have = r->end - r->start;
		take = have < n ? have : n;
		if (dst) {
			memcpy(dst, r->buf + r->start, take);
			dst += take;
		}
		r->start += take;
		n -= take;
	}
	return 0;
}

/* One CRLF-terminated line; *line points into the buffer (valid until the
 * next read) and is NUL-terminated in place of the CR. */
static int read_line(kvsb_resp *r, char **line, size_t *len)
{
	size_t scanned = 0;
	int rc;

	for (;;) {
		char *p = r->buf + r->start, *cr;
		size_t have = r->end - r->start;

		cr = have > scanned ? memchr(p + scanned, '\r', have - scanned) : NULL;
		if (cr && cr + 1 < p + have) {
			if (cr[1] != '\n')
				return -EPROTO;
			*cr = '\0';
			*line = p;
			*len = (size_t)(cr - p);
			r->start += *len + 2;
			return 0;
		}
		/* keep a trailing CR: its LF may be in the next read */
		scanned = cr ? (size_t)(cr - p) : have;
		rc = fill(r);
		if (rc < 0)
			return rc;
	}
}

static int parse_int(const char *s, int64_t *v)
{
	char *end;
	long long x;

	errno = 0;
	x = strtoll(s, &end, 10);
	if (errno || end == s || *end)
		return -EPROTO;
	*v = x;
	return 0;
}

static void reply_clear(kvsb_reply *rep)
{
	for (size_t i = 0; i < rep->nelem; i++)
		reply_clear(&rep->elem[i]);
	free(rep->elem);
	free(rep->str);
}

void kvsb_reply_free(kvsb_reply *rep)
{
	if (!rep)
		return;
	reply_clear(rep);
	free(rep);
}

static int parse_reply(kvsb_resp *r, kvsb_reply *rep, int depth)
{
	char *line, crlf[2];
	size_t len;
	int64_t n;
	int rc;

	if (depth > RESP_MAX_DEPTH)
		return -EPROTO;
	rc = read_line(r, &line, &len);
	if (rc < 0)
		return rc;
	if (len < 1)
		return -EPROTO;
	switch (line[0]) {
	case '+':
	case '-':
		rep->type = line[0] == '+' ? KVSB_REPLY_STATUS : KVSB_REPLY_ERROR;
		rep->str = strndup(line + 1, len - 1);
		rep->len = len - 1;
		return rep->str ? 0 : -ENOMEM;
	case ':':
		rep->type = KVSB_REPLY_INTEGER;
		return parse_int(line + 1, &rep->integer);
	case '$':
		rc = parse_int(line + 1, &n);
		if (rc < 0 || n < -1 || n > RESP_MAX_BULK)
			return -EPROTO;
		if (n == -1) {
			rep->type = KVSB_REPLY_NIL;
			return 0;
		}
		rep->type = KVSB_REPLY_BULK;
		rep->str = malloc((size_t)n + 1);
		if (!rep->str)
			return -ENOMEM;
		rep->len = (size_t)n;
		rc = read_exact(r, rep->str, (size_t)n);
		if (rc == 0)
			rc = read_exact(r, crlf, 2);
		if (rc < 0)
			return rc;
		rep->str[n] = '\0';
		return crlf[0] == '\r' && crlf[1] == '\n' ? 0 : -EPROTO;
	case '*':
		rc = parse_int(line + 1, &n);
		if (rc < 0 || n < -1 || n > RESP_MAX_ELEMS)
			return -EPROTO;
		if (n == -1) {
			rep->type = KVSB_REPLY_NIL;
			return 0;
		}
		rep->type = KVSB_REPLY_ARRAY;
		if (n == 0)
			return 0;
		rep->elem = calloc((size_t)n, sizeof(*rep->elem));
		if (!rep->elem)
			return -ENOMEM;
		rep->nelem = (size_t)n;
		for (int64_t i = 0; i < n; i++) {
			rc = parse_reply(r, &rep->elem[i], depth + 1);
			if (rc < 0)
				return rc;
		}
		return 0;
	default:
		return -EPROTO;
	}
}

/* Format the command into the send buffer and send it. */
static int send_command(kvsb_resp *r, int argc, const char *const *argv,
			const size_t *argvlen)
{
	size_t need = 16, off;
	int n;

	if (argc < 1)
		return -EINVAL;
	for (int i = 0; i < argc; i++)
		need += 32 + (argvlen ? argvlen[i] : strlen(argv[i]));
	if (need > r->scap) {
		char *p = realloc(r->sbuf, need);

		if (!p)
			return -ENOMEM;
		r->sbuf = p;
		r->scap = need;
	}
	n = snprintf(r->sbuf, r->scap, "*%d\r\n", argc);
	off = (size_t)n;
	for (int i = 0; i < argc; i++) {
		size_t len = argvlen ? argvlen[i] : strlen(argv[i]);

		n = snprintf(r->sbuf + off, r->scap - off, "$%zu\r\n", len);
		off += (size_t)n;
		memcpy(r->sbuf + off, argv[i], len);
		off += len;
		r->sbuf[off++] = '\r';
		r->sbuf[off++] = '\n';
	}
	return send_all(r->fd, r->sbuf, off);
}

int kvsb_resp_command(kvsb_resp *r, int argc, const char *const *argv,
		      const size_t *argvlen, kvsb_reply **out)
{
	kvsb_reply *rep;
	int rc = send_command(r, argc, argv, argvlen);

	if (rc < 0)
		return rc;
	rep = calloc(1, sizeof(*rep));
	if (!rep)
		return -ENOMEM;
	rc = parse_reply(r, rep, 0);
	if (rc < 0) {
		kvsb_reply_free(rep);
		return rc;
	}
	*out = rep;
	return 0;
}

int64_t kvsb_resp_get_into(kvsb_resp *r, const char *key, void *dst,
			   size_t cap)
{
	const char *argv[2] = { "GET", key };
	char *line, crlf[2];
	size_t len;
	int64_t n;
	int rc = send_command(r, 2, argv, NULL);

	if (rc < 0)
		return rc;
	rc = read_line(r, &line, &len);
	if (rc < 0)
		return rc;
	if (len >= 1 && line[0] == '-')
		return -EIO;
	if (len < 2 || line[0] != '$' || parse_int(line + 1, &n) < 0 ||
	    n < -1 || n > RESP_MAX_BULK)
		return -EPROTO;
	if (n == -1)
		return -ENOENT;
	rc = read_exact(r, (size_t)n <= cap ? dst : NULL, (size_t)n);
	if (rc == 0)
		rc = read_exact(r, crlf, 2);
	if (rc < 0)
		return rc;
	if (crlf[0] != '\r' || crlf[1] != '\n')
		return -EPROTO;
	return (size_t)n <= cap ? n : -EMSGSIZE;
}

/* ---- server -------------------------------------------------------------- */

int kvsb_redis_find(char *buf, size_t len)
{
	const char *path = getenv("PATH");
	static const char fallback[] = "/usr/bin/redis-server";

	while (path && *path) {
		const char *colon = strchr(path, ':');
		size_t dlen = colon ? (size_t)(colon - path) : strlen(path);
		int n;

		if (dlen > 0) {
			n = snprintf(buf, len, "%.*s/redis-server", (int)dlen, path);
			if (n > 0 && (size_t)n < len && access(buf, X_OK) == 0)
				return 0;
		}
		path = colon ? colon + 1 : NULL;
	}
	if (access(fallback, X_OK) != 0)
		return -ENOENT;
	if (sizeof(fallback) > len)
		return -ENAMETOOLONG;
	memcpy(buf, fallback, sizeof(fallback));
	return 0;
}

/* A short pause between polls of a condition that has no fd to wait on;
 * doubles up to 20 ms so that a fast start costs about a millisecond. */
static void backoff(double *pause)
{
	struct timespec ts = { 0, (long)(*pause * 1e9) };

	nanosleep(&ts, NULL);
	if (*pause < 0.02)
		*pause *= 2;
}

static void remove_dir(kvsb_redis *s)
{
	static const char *const files[] = { "redis.sock", "redis.log",
					     "dump.rdb" };
	char p[PATH_MAX + 16];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", s->dir, files[i]);
		unlink(p);
	}
	rmdir(s->dir);
}

static void print_log_tail(const kvsb_redis *s)
{
	char p[PATH_MAX + 16];

	snprintf(p, sizeof(p), "%s/redis.log", s->dir);
	kvsb_log_tail("redis-server", p);
}

static void exec_server(const char *bin, const kvsb_redis *s)
{
	char log[PATH_MAX + 16];
	const char *argv[] = { bin, "--port", "0", "--unixsocket", s->sock,
			       "--unixsocketperm", "700", "--save", "",
			       "--appendonly", "no", "--dir", s->dir,
			       "--daemonize", "no", NULL };
	int fd;

	prctl(PR_SET_PDEATHSIG, SIGTERM);
	snprintf(log, sizeof(log), "%s/redis.log", s->dir);
	fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0) {
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
	}
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		dup2(fd, STDIN_FILENO);
	execv(bin, (char *const *)argv);
	_exit(127);
}

/* INFO server's redis_version, for the report. */
static void read_version(kvsb_redis *s, kvsb_resp *r)
{
	const char *argv[] = { "INFO", "server" };
	kvsb_reply *rep;
	const char *v;

	snprintf(s->version, sizeof(s->version), "unknown");
	if (kvsb_resp_command(r, 2, argv, NULL, &rep) < 0)
		return;
	if (rep->type == KVSB_REPLY_BULK &&
	    (v = strstr(rep->str, "redis_version:")) != NULL) {
		v += strlen("redis_version:");
		snprintf(s->version, sizeof(s->version), "%.*s",
			 (int)strcspn(v, "\r\n"), v);
	}
	kvsb_reply_free(rep);
}

/* Connect and PING; 1 when PONG came back, 0 when not yet, <0 on failure. */
static int try_ping(kvsb_redis *s)
{
	const char *argv[] = { "PING" };
	kvsb_resp *r;
	kvsb_reply *rep;
	int rc = kvsb_resp_connect(s->sock, &r), ok;

	if (rc == -ENOENT || rc == -ECONNREFUSED)
		return 0;
	if (rc < 0)
		return rc;
	rc = kvsb_resp_command(r, 1, argv, NULL, &rep);
	if (rc < 0) {
		kvsb_resp_close(r);
		return 0; /* loading, or closed on us: try again */
	}
	ok = rep->type == KVSB_REPLY_STATUS && !strcmp(rep->str, "PONG");
	kvsb_reply_free(rep);
	if (ok)
		read_version(s, r);
	kvsb_resp_close(r);
	return ok;
}

int kvsb_redis_start(double timeout_s, kvsb_redis **out)
{
	char bin[PATH_MAX];
	const char *tmp = getenv("TMPDIR");
	double deadline, pause = 0.001;
	kvsb_redis *s;
	int rc, n;

	rc = kvsb_redis_find(bin, sizeof(bin));
	if (rc < 0)
		return rc;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	if (!tmp || !*tmp)
		tmp = "/tmp";
	n = snprintf(s->dir, sizeof(s->dir), "%s/kvsbench-redis.XXXXXX", tmp);
	if (n < 0 || (size_t)n >= sizeof(s->dir)) {
		free(s);
		return -ENAMETOOLONG;
	}
	if (!mkdtemp(s->dir)) {
		rc = -errno;
		free(s);
		return rc;
	}
	n = snprintf(s->sock, sizeof(s->sock), "%s/redis.sock", s->dir);
	if (n < 0 || (size_t)n >= sizeof(s->sock)) {
		rmdir(s->dir);
		free(s);
		return -ENAMETOOLONG;
	}
	s->pid = fork();
	if (s->pid < 0) {
		rc = -errno;
		rmdir(s->dir);
		free(s);
		return rc;
	}
	if (s->pid == 0)
		exec_server(bin, s);

	deadline = now_s() + timeout_s;
	for (;;) {
		int status;
		pid_t p = waitpid(s->pid, &status, WNOHANG);

		if (p == s->pid) {
			print_log_tail(s);
			rc = -ECHILD;
			break;
		}
		rc = try_ping(s);
		if (rc != 0)
			break;
		if (now_s() > deadline) {
			rc = -ETIMEDOUT;
			break;
		}
		backoff(&pause);
	}
	if (rc == 1) {
		*out = s;
		return 0;
	}
	if (rc != -ECHILD) {
		kill(s->pid, SIGKILL);
		kvsb_reap(s->pid, 5.0);
		print_log_tail(s);
	}
	remove_dir(s);
	free(s);
	return rc;
}

const char *kvsb_redis_start_or_na(double timeout_s, kvsb_redis **out, char *why,
				   size_t len)
{
	int rc = kvsb_redis_start(timeout_s, out);

	if (rc == -ENOENT)
		return "n/a (redis-server not installed)";
	if (rc < 0) {
		snprintf(why, len, "n/a (redis-server failed to start: %s)",
			 strerror(-rc));
		return why;
	}
	return NULL;
}

const char *kvsb_redis_socket(const kvsb_redis *s)
{
	return s->sock;
}

const char *kvsb_redis_version(const kvsb_redis *s)
{
	return s->version;
}

int kvsb_redis_stop(kvsb_redis *s)
{
	const char *argv[] = { "SHUTDOWN", "NOSAVE" };
	kvsb_resp *r;
	kvsb_reply *rep = NULL;
	int status, rc = 0;

	if (!s)
		return 0;
	/* A successful SHUTDOWN has no reply: the server just closes. */
	if (kvsb_resp_connect(s->sock, &r) == 0) {
		if (kvsb_resp_command(r, 2, argv, NULL, &rep) == 0)
			kvsb_reply_free(rep);
		kvsb_resp_close(r);
	}
	status = kvsb_reap(s->pid, 5.0);
	if (status == -ETIMEDOUT) {
		kill(s->pid, SIGTERM);
		status = kvsb_reap(s->pid, 5.0);
	}
	if (status == -ETIMEDOUT) {
		kill(s->pid, SIGKILL);
		status = kvsb_reap(s->pid, 5.0);
	}
	if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		print_log_tail(s);
		rc = -ECHILD;
	}
	remove_dir(s);
	free(s);
	return rc;
}
