/* arena.c - memfd host arena (see kvs_arena.h). */
#define _GNU_SOURCE
#include "kvs_arena.h"
#include "kvs_memfd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/memfd.h>

struct kvs_arena {
	int fd;
	void *base;
	uint64_t bytes;
	int unreserved; /* a huge-page arena mapped MAP_NORESERVE */
};

uint64_t kvs_arena_size(uint64_t bytes)
{
	long pg = sysconf(_SC_PAGESIZE);

	return (bytes + (uint64_t)pg - 1) / (uint64_t)pg * (uint64_t)pg;
}

static int arena_create(const char *name, uint64_t size, int huge,
			kvs_arena **out)
{
	kvs_arena *a;
	int err;

	if (size == 0 || (huge && size % KVS_ARENA_HUGE_PAGE))
		return -EINVAL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	/* Sealed: the clients it is handed to cannot shrink it under us. */
	a->fd = kvs_memfd_sealed_flags(name, size,
				       huge ? MFD_HUGETLB | MFD_HUGE_2MB : 0);
	if (a->fd < 0) {
		err = a->fd;
		free(a);
		return err;
	}
	a->base = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | (huge ? MAP_NORESERVE : 0), a->fd, 0);
	if (a->base == MAP_FAILED) {
		err = -errno;
		goto fail;
	}
	a->bytes = size;
	a->unreserved = huge;
	*out = a;
	return 0;
fail:
	close(a->fd);
	free(a);
	return err;
}

int kvs_arena_create(const char *name, uint64_t bytes, kvs_arena **out)
{
	return arena_create(name, kvs_arena_size(bytes), 0, out);
}

int kvs_arena_create_huge(const char *name, uint64_t bytes, kvs_arena **out)
{
	return arena_create(name, bytes, 1, out);
}

int kvs_arena_reserve(kvs_arena *a)
{
	void *p;

	if (!a->unreserved)
		return 0;
	/* A shared hugetlb mapping reserves the file's pages in the memfd's
	 * own reserve map: they stay reserved after this mapping goes. */
	p = mmap(NULL, a->bytes, PROT_READ, MAP_SHARED, a->fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	munmap(p, a->bytes);
	a->unreserved = 0;
	return 0;
}

int kvs_arena_adopt(int fd, uint64_t bytes, kvs_arena **out)
{
	struct stat st;
	kvs_arena *a;
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0)
		return -errno;
	/* Sealed as kvs_memfd_sealed() seals: nobody can resize it under us. */
	if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
		return -EPERM;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (bytes == 0 || (uint64_t)st.st_size != bytes)
		return -EMSGSIZE;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (a->base == MAP_FAILED) {
		free(a);
		return -errno;
	}
	a->fd = fd;
	a->bytes = bytes;
	*out = a;
	return 0;
}

void kvs_arena_destroy(kvs_arena *a)
{
	if (!a)
		return;
	munmap(a->base, a->bytes);
	close(a->fd);
	free(a);
}

int kvs_arena_fd(const kvs_arena *a) { return a->fd; }
void *kvs_arena_base(const kvs_arena *a) { return a->base; }
uint64_t kvs_arena_bytes(const kvs_arena *a) { return a->bytes; }

uint64_t kvs_arena_resident(const kvs_arena *a)
{
	struct stat st;

	if (fstat(a->fd, &st) < 0)
		return 0;
	return (uint64_t)st.st_blocks * 512;
}
