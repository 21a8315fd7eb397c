/*
 * test_sdnotify - systemd's protocol as kvs_sdnotify.h speaks it: a
 * notification reaches $NOTIFY_SOCKET as one datagram, on a path and in the
 * abstract namespace ('@'), with its fds (SCM_RIGHTS) when it stores them;
 * no $NOTIFY_SOCKET is a no-op and a bad one an error; FDNAME= names are
 * checked; $LISTEN_FDS is taken from fd 3 with its names only when
 * $LISTEN_PID is ours, the variables removed, a malformed one refused.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvs_check.h"
#include "kvs_sdnotify.h"
#include "kvs_types.h"

/* A datagram socket bound to @name (a path, or '@' abstract). */
static int listener(const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(name));
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	memcpy(sa.sun_path, name, strlen(name));
	if (name[0] == '@')
		sa.sun_path[0] = '\0';
	else
		len++;
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, len) < 0) {
		perror("bind");
		exit(1);
	}
	return fd;
}

/* Receive one datagram into @msg and its fds into @fds; how many fds. */
static int receive(int fd, char *msg, size_t cap, int *fds)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} u;
	struct iovec iov = { msg, cap - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.b, .msg_controllen = sizeof(u.b) };
	ssize_t r = recvmsg(fd, &mh, MSG_DONTWAIT);
	int n = 0;

	msg[r > 0 ? r : 0] = '\0';
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_type == SCM_RIGHTS) {
			n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(cm), (size_t)n * sizeof(int));
		}
	return n;
}

static void notify(const char *name)
{
	kvs_named_fd nf = { .fd = -1, .name = "kvs-meta" };
	char msg[256];
	int l = listener(name), fds[8], n;
	struct stat a, b;

	setenv("NOTIFY_SOCKET", name, 1);
	CHECK_EQ(kvs_sd_notify("READY=1\nSTATUS=serving", NULL, 0), 1);
	CHECK_EQ(receive(l, msg, sizeof(msg), fds), 0);
	CHECK(strcmp(msg, "READY=1\nSTATUS=serving") == 0);
	nf.fd = memfd_create("kvs-test", MFD_CLOEXEC);
	CHECK_EQ(kvs_sd_notify_fds(&nf, 1), 1);
	/* The name's old fds go first: systemd keeps all of a name. */
	CHECK_EQ(receive(l, msg, sizeof(msg), fds), 0);
	CHECK(strcmp(msg, "FDSTOREREMOVE=1\nFDNAME=kvs-meta") == 0);
	n = receive(l, msg, sizeof(msg), fds);
	CHECK_EQ(n, 1);
	CHECK(strcmp(msg, "FDSTORE=1\nFDNAME=kvs-meta") == 0);
	if (n == 1) {
		CHECK(fstat(fds[0], &a) == 0 && fstat(nf.fd, &b) == 0 &&
		      a.st_ino == b.st_ino); /* the same file */
		close(fds[0]);
	}
	snprintf(nf.name, sizeof(nf.name), "bad:name");
	CHECK_EQ(kvs_sd_notify_fds(&nf, 1), -EINVAL);
	close(nf.fd);
	close(l);
}

static void listen_fds(void)
{
	kvs_named_fd out[4];
	char why[128], pid[32];
	int p[2];

	CHECK_EQ(kvs_sd_listen_fds(out, 4, why, sizeof(why)), 0); /* none */
	/* Two fds at 3 and 4, as systemd passes them. */
	if (pipe(p) < 0 || dup2(p[0], 3) < 0 || dup2(p[1], 4) < 0)
		exit(1);
	if (p[0] != 3 && p[0] != 4)
		close(p[0]);
	if (p[1] != 3 && p[1] != 4)
		close(p[1]);
	setenv("LISTEN_PID", "1", 1); /* another process's */
	setenv("LISTEN_FDS", "2", 1);
	CHECK_EQ(kvs_sd_listen_fds(out, 4, why, sizeof(why)), 0);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	setenv("LISTEN_PID", pid, 1);
	setenv("LISTEN_FDS", "x2", 1);
	CHECK_EQ(kvs_sd_listen_fds(out, 4, why, sizeof(why)), KVS_E_CONFIG);
	setenv("LISTEN_FDS", "2", 1);
	setenv("LISTEN_FDNAMES", "kvs-meta", 1); /* the second has none */
	CHECK_EQ(kvs_sd_listen_fds(out, 4, why, sizeof(why)), 2);
	CHECK_EQ(out[0].fd, 3);
	CHECK(strcmp(out[0].name, "kvs-meta") == 0);
	CHECK_EQ(out[1].fd, 4);
	CHECK(strcmp(out[1].name, "unknown") == 0);
	CHECK((fcntl(3, F_GETFD) & FD_CLOEXEC) != 0);
	CHECK(!getenv("LISTEN_PID") && !getenv("LISTEN_FDS") && !getenv("LISTEN_FDNAMES"));
	close(3);
	close(4);
}

int main(void)
{
	char path[64], abs[64];

	unsetenv("NOTIFY_SOCKET");
	CHECK_EQ(kvs_sd_notify("READY=1", NULL, 0), 0);
	setenv("NOTIFY_SOCKET", "relative/path", 1);
	CHECK_EQ(kvs_sd_notify("READY=1", NULL, 0), -EINVAL);
	CHECK(kvs_sd_fdname_ok("kvs-arena-0") && kvs_sd_fdname_ok("listen"));
	CHECK(!kvs_sd_fdname_ok("") && !kvs_sd_fdname_ok("a b") &&
	      !kvs_sd_fdname_ok("01234567890123456789012345678901"));
	snprintf(path, sizeof(path), "/tmp/kvs-sdnotify-%d", (int)getpid());
	notify(path);
	unlink(path);
	snprintf(abs, sizeof(abs), "@kvs-sdnotify-%d", (int)getpid());
	notify(abs);
	unsetenv("NOTIFY_SOCKET");
	listen_fds();
	return check_summary("test_sdnotify");
}
