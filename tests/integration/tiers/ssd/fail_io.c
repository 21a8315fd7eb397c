/*
 * fail_io.c - an LD_PRELOAD shim for test_ssd_fail_io and test_ssd_ns_file:
 * makes reads or writes on the files whose path starts with a prefix fail
 * with an error after the first N of them.
 *
 *   FAIL_IO_PATH   path prefix of the files to fail (e.g. DIR/seg-); unset:
 *                  the shim does nothing
 *   FAIL_IO_OPS    "w" (write, pwrite, pwritev), "r" (pread, preadv) or "rw"
 *   FAIL_IO_AFTER  matching calls let through before failing (default 0)
 *   FAIL_IO_COUNT  calls that fail, after which all pass again (a passing
 *                  fault); unset: every one from then on
 *   FAIL_IO_ERRNO  the errno of a failed call (default EIO)
 *
 * Only the synchronous path can be intercepted: io_uring submissions go to
 * the kernel without a libc call, so the daemon must run with
 * KVS_SSD_NO_URING=1 (its pwritev/preadv fallback) for this shim to bite.
 * It announces itself once on stderr (the daemon's log) when loaded with a
 * path, and once at its first failure. Built as a module for that one test;
 * never installed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static const char *path_prefix;
static size_t prefix_len;
static int on_read, on_write, fail_errno = EIO;
static long after, count = -1;
static long calls, failed;

__attribute__((constructor)) static void fail_io_init(void)
{
	const char *ops = getenv("FAIL_IO_OPS");
	const char *n = getenv("FAIL_IO_AFTER");
	const char *e = getenv("FAIL_IO_ERRNO");
	const char *k = getenv("FAIL_IO_COUNT");

	path_prefix = getenv("FAIL_IO_PATH");
	if (!path_prefix || !*path_prefix) {
		path_prefix = NULL;
		return;
	}
	prefix_len = strlen(path_prefix);
	on_read = ops && strchr(ops, 'r');
	on_write = !ops || strchr(ops, 'w');
	after = n ? atol(n) : 0;
	count = k && *k ? atol(k) : -1;
	if (e && atoi(e) > 0)
		fail_errno = atoi(e);
	fprintf(stderr, "fail_io: armed: %s%s on %s* fail with %s after %ld calls"
		" (%ld of them; -1: all)\n", on_read ? "reads " : "",
		on_write ? "writes" : "", path_prefix, strerror(fail_errno), after,
		count);
}

/* Whether this call on @fd fails (errno set). */
static int should_fail(int fd, int write, const char *fn)
{
	char link[64], path[4096];
	ssize_t n;

	if (!path_prefix || !(write ? on_write : on_read))
		return 0;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n < 0 || (size_t)n < prefix_len || strncmp(path, path_prefix, prefix_len))
		return 0;
	if (__atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED) < after)
		return 0;
	if (count >= 0 && __atomic_load_n(&failed, __ATOMIC_RELAXED) >= count)
		return 0;
	if (__atomic_fetch_add(&failed, 1, __ATOMIC_RELAXED) == 0) {
		path[n] = '\0';
		fprintf(stderr, "fail_io: first failure: %s on %s: %s\n", fn, path,
			strerror(fail_errno));
	}
	errno = fail_errno;
	return 1;
}

#define NEXT(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

ssize_t write(int fd, const void *buf, size_t n)
{
	/* The log (stderr) is never a file of the prefix: no recursion. */
	if (fd > 2 && should_fail(fd, 1, "write"))
		return -1;
	return NEXT(write)(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	if (should_fail(fd, 1, "pwrite"))
		return -1;
	return NEXT(pwrite)(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
	if (should_fail(fd, 1, "pwrite64"))
		return -1;
	return NEXT(pwrite64)(fd, buf, n, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	if (should_fail(fd, 1, "pwritev"))
		return -1;
	return NEXT(pwritev)(fd, iov, cnt, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off)
{
	if (should_fail(fd, 1, "pwritev64"))
		return -1;
	return NEXT(pwritev64)(fd, iov, cnt, off);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	if (should_fail(fd, 0, "pread"))
		return -1;
	return NEXT(pread)(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
	if (should_fail(fd, 0, "pread64"))
		return -1;
	return NEXT(pread64)(fd, buf, n, off);
}

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
	if (should_fail(fd, 0, "preadv"))
		return -1;
	return NEXT(preadv)(fd, iov, cnt, off);
}

ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t off)
{
	if (should_fail(fd, 0, "preadv64"))
		return -1;
	return NEXT(preadv64)(fd, iov, cnt, off);
}
