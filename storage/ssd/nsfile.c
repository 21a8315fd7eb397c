/* nsfile.c - the SSD tier's namespaces file (see kvs_nsfile.h). */
#define _GNU_SOURCE
#include "kvs_nsfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvs_le.h"

int kvs_nsfile_append(const char *dir, const kvs_ns_layout *ns)
{
	uint8_t buf[KVS_NS_ENTRY_MAX];
	char path[4096];
	int n = kvs_ns_encode(ns, buf, sizeof(buf)), fd, rc = 0;

	if (n < 0)
		return n;
	if (snprintf(path, sizeof(path), "%s/" KVS_NSFILE_NAME, dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, buf, (size_t)n) != n || fdatasync(fd) < 0)
		rc = errno ? -errno : -EIO;
	close(fd);
	return rc;
}

/* The whole file in a buffer: *size bytes (NULL and 0 when there is none). */
static int read_all(const char *path, uint8_t **out, size_t *size)
{
	FILE *f = fopen(path, "rb");
	long n;
	uint8_t *buf;

	*out = NULL;
	*size = 0;
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	if (fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0) {
		fclose(f);
		return -EIO;
	}
	rewind(f);
	buf = malloc(n > 0 ? (size_t)n : 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return buf ? -EIO : -ENOMEM;
	}
	fclose(f);
	*out = buf;
	*size = (size_t)n;
	return 0;
}

int kvs_nsfile_load(const char *dir,
		    int (*fn)(void *arg, const kvs_ns_layout *ns), void *arg)
{
	char path[4096];
	uint8_t *buf;
	size_t size, at = 0;
	uint32_t last = 0;
	int rc, count = 0;

	if (snprintf(path, sizeof(path), "%s/" KVS_NSFILE_NAME, dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if ((rc = read_all(path, &buf, &size)) < 0)
		return rc;
	while (at < size) {
		kvs_ns_layout ns;
		int n = kvs_ns_decode(buf + at, size - at, &ns);

		if (n < 0)
			break;
		/* An entry of the old format: the id after the one before. */
		if (!ns.id)
			ns.id = last + 1;
		last = ns.id;
		if (fn(arg, &ns) != 0)
			break;
		at += (size_t)n;
		count++;
	}
	free(buf);
	/* Best effort: a tail left in place is cut again at the next load. */
	if (at < size)
		(void)!truncate(path, (off_t)at);
	return count;
}
