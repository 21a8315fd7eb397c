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

#define FIXED 40
/* An entry of the current format: its id follows the fixed part. */
#define WITH_ID 4

int kvs_nsfile_encode(const kvs_nsfile_ns *ns, uint8_t *buf, size_t cap)
{
	size_t idb = ns->id ? WITH_ID : 0;
	size_t body = FIXED + idb + (size_t)ns->model_len + ns->adapter_len +
		      ns->salt_len;
	uint8_t *p = buf + 4;

	if (ns->model_len > KVS_NSFILE_STR_MAX || ns->adapter_len > KVS_NSFILE_STR_MAX ||
	    ns->salt_len > KVS_NSFILE_STR_MAX)
		return -EINVAL;
	/* Names are C strings where they are used (see decode). */
	if (memchr(ns->model, '\0', ns->model_len) ||
	    memchr(ns->adapter, '\0', ns->adapter_len) ||
	    (ns->salt_len && memchr(ns->salt, '\0', ns->salt_len)))
		return -EINVAL;
	if (cap < 4 + body)
		return -ENOBUFS;
	put32(buf, (uint32_t)body);
	put32(p, ns->id ? KVS_NSFILE_F_ID : 0);
	put32(p + 4, ns->layers);
	put32(p + 8, ns->kv_heads);
	put32(p + 12, ns->head_dim);
	put32(p + 16, ns->block_tokens);
	put32(p + 20, ns->tp_rank);
	put32(p + 24, ns->tp_size);
	put32(p + 28, ns->dtype);
	put16(p + 32, (uint16_t)ns->model_len);
	put16(p + 34, (uint16_t)ns->adapter_len);
	put16(p + 36, (uint16_t)ns->salt_len);
	put16(p + 38, 0);
	if (ns->id)
		put32(p + FIXED, ns->id);
	p += FIXED + idb;
	memcpy(p, ns->model, ns->model_len);
	memcpy(p + ns->model_len, ns->adapter, ns->adapter_len);
	if (ns->salt_len)
		memcpy(p + ns->model_len + ns->adapter_len, ns->salt, ns->salt_len);
	return (int)(4 + body);
}

int kvs_nsfile_decode(const uint8_t *p, size_t n, kvs_nsfile_ns *o)
{
	uint32_t len, flags, idb;

	if (n < 4)
		return -EAGAIN;
	len = get32(p);
	if (len < FIXED || len > KVS_NSFILE_ENTRY_MAX - 4)
		return -EBADMSG;
	if (n < 4 + (size_t)len)
		return -EAGAIN;
	p += 4;
	flags = get32(p);
	idb = flags == KVS_NSFILE_F_ID ? WITH_ID : 0;
	if ((flags != 0 && flags != KVS_NSFILE_F_ID) || len < FIXED + idb)
		return -EBADMSG;
	*o = (kvs_nsfile_ns){
		.layers = get32(p + 4), .kv_heads = get32(p + 8),
		.head_dim = get32(p + 12), .block_tokens = get32(p + 16),
		.tp_rank = get32(p + 20), .tp_size = get32(p + 24),
		.dtype = get32(p + 28), .model_len = get16(p + 32),
		.adapter_len = get16(p + 34), .salt_len = get16(p + 36),
		.id = idb ? get32(p + FIXED) : 0,
	};
	if (get16(p + 38) != 0 || (idb && o->id == 0) ||
	    len != FIXED + idb + o->model_len + o->adapter_len + o->salt_len ||
	    o->model_len > KVS_NSFILE_STR_MAX || o->adapter_len > KVS_NSFILE_STR_MAX ||
	    o->salt_len > KVS_NSFILE_STR_MAX)
		return -EBADMSG;
	o->model = (const char *)p + FIXED + idb;
	o->adapter = o->model + o->model_len;
	o->salt = (const uint8_t *)o->adapter + o->adapter_len;
	/* Names are C strings where they are used: no NUL inside. */
	if (memchr(o->model, '\0', (size_t)o->model_len + o->adapter_len + o->salt_len))
		return -EBADMSG;
	return (int)(4 + len);
}

int kvs_nsfile_append(const char *dir, const kvs_nsfile_ns *ns)
{
	uint8_t buf[KVS_NSFILE_ENTRY_MAX];
	char path[4096];
	int n = kvs_nsfile_encode(ns, buf, sizeof(buf)), fd, rc = 0;

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
		    int (*fn)(void *arg, const kvs_nsfile_ns *ns), void *arg)
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
		kvs_nsfile_ns ns;
		int n = kvs_nsfile_decode(buf + at, size - at, &ns);

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
