/*
 * sdnotify.c - systemd's notification and fd-passing protocol (see
 * kvs_sdnotify.h): sd_notify(3) and sd_listen_fds(3), without libsystemd.
 */
#define _GNU_SOURCE
#include "kvs_sdnotify.h"
#include "kvs_scm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvs_types.h" /* KVS_E_CONFIG */

/* The first fd systemd passes (SD_LISTEN_FDS_START). */
#define LISTEN_FDS_START 3

int kvs_sd_fdname_ok(const char *name)
{
	size_t n = strlen(name);

	if (!n || n > KVS_FDNAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
		      ch == '-'))
			return 0;
	}
	return 1;
}

/* $NOTIFY_SOCKET as an address: a path, or '@' for the abstract namespace
 * (its name is not NUL-terminated: the length says where it ends). */
static int notify_addr(const char *env, struct sockaddr_un *sa, socklen_t *len)
{
	size_t n = strlen(env);

	if (n < 2 || n >= sizeof(sa->sun_path) || (env[0] != '/' && env[0] != '@'))
		return -EINVAL;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, env, n);
	if (env[0] == '@')
		sa->sun_path[0] = '\0';
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
			   (env[0] == '/'));
	return 0;
}

int kvs_sd_notify(const char *state, const int *fds, uint32_t nfds)
{
	const char *env = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa;
	socklen_t salen;
	struct iovec iov = { .iov_base = (void *)state, .iov_len = strlen(state) };
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVS_SD_FDS_MAX)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t w;
	int fd, rc;

	if (!env || !*env)
		return 0;
	if (nfds > KVS_SD_FDS_MAX)
		return -E2BIG;
	rc = notify_addr(env, &sa, &salen);
	if (rc < 0)
		return rc;
	mh.msg_name = &sa;
	mh.msg_namelen = salen;
	if (nfds)
		kvs_scm_rights(&mh, u.buf, fds, (size_t)nfds);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	do
		w = sendmsg(fd, &mh, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	rc = w < 0 ? -errno : 1;
	close(fd);
	return rc;
}

int kvs_sd_notify_remove(const char *name)
{
	char msg[64 + KVS_FDNAME_MAX];

	if (!kvs_sd_fdname_ok(name))
		return -EINVAL;
	snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", name);
	return kvs_sd_notify(msg, NULL, 0);
}

int kvs_sd_notify_fds(const kvs_named_fd *fds, uint32_t n)
{
	char msg[64 + KVS_FDNAME_MAX];
	int sent = 0;

	for (uint32_t i = 0; i < n; i++) {
		int rc;

		/* systemd keeps every fd of a name: the old ones go first */
		rc = kvs_sd_notify_remove(fds[i].name);
		if (rc <= 0)
			return rc;
		snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", fds[i].name);
		rc = kvs_sd_notify(msg, &fds[i].fd, 1);
		if (rc <= 0)
			return rc;
		sent++;
	}
	return sent;
}

/* A decimal that fits an int, and nothing else. */
static int parse_int(const char *s, long max, long *out)
{
	char *end;
	long v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > max)
		return -1;
	*out = v;
	return 0;
}

/* The @i-th name of $LISTEN_FDNAMES (':'-separated) into @out. */
static void fd_name(const char *names, long i, char *out, size_t cap)
{
	const char *p = names;

	for (long k = 0; p && k < i; k++) {
		p = strchr(p, ':');
		if (p)
			p++;
	}
	if (p) {
		size_t n = strcspn(p, ":");

		if (n >= cap)
			n = cap - 1;
		memcpy(out, p, n);
		out[n] = '\0';
	}
	if (!p || !*out)
		snprintf(out, cap, "unknown");
}

int kvs_sd_listen_fds(kvs_named_fd *out, uint32_t max, char *why, size_t cap)
{
	const char *spid = getenv("LISTEN_PID"), *sn = getenv("LISTEN_FDS");
	const char *names = getenv("LISTEN_FDNAMES");
	long pid, n, kept = 0;

	if (!spid || !sn)
		return 0;
	if (parse_int(spid, INT_MAX, &pid) < 0 || parse_int(sn, 4096, &n) < 0) {
		snprintf(why, cap, "LISTEN_PID=%s LISTEN_FDS=%s: not numbers",
			 spid, sn);
		return KVS_E_CONFIG;
	}
	if ((pid_t)pid != getpid())
		return 0; /* meant for another process (our parent's) */
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	for (long i = 0; i < n; i++) {
		int fd = LISTEN_FDS_START + (int)i;

		if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
			continue; /* not open: nothing to take */
		if (kept >= (long)max) {
			close(fd);
			continue;
		}
		out[kept].fd = fd;
		fd_name(names, i, out[kept].name, sizeof(out[kept].name));
		kept++;
	}
	unsetenv("LISTEN_FDNAMES");
	return (int)kept;
}
