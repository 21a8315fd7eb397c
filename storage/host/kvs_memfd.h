/*
 * kvs_memfd.h - a memfd of a fixed size, sealed so that it stays that size.
 *
 * Every arena the daemon hands to clients (the host arena, each tenant's, the
 * GPU engine's memfd twin) is one of these. A client that receives the fd
 * can read and write every byte of it, but it cannot ftruncate() it: a
 * shrunk memfd turns the daemon's next read of a slot (a demotion, a
 * checksum, a copy to the GPU) into SIGBUS, and a grown one is memory that
 * nobody accounts for. F_SEAL_SEAL keeps anyone from adding seals later
 * (F_SEAL_WRITE would stop every writer, the daemon included).
 *
 * Caveats: a header-only function, because storage/gpu/gpu.c is also built into
 * libkvshare, which does not carry arena.c.
 *
 * Errors: -errno from memfd_create, ftruncate or fcntl(F_ADD_SEALS)
 * (-EINVAL: a file system without seals, which memfd's is not).
 * Ownership: the caller owns the returned fd (MFD_CLOEXEC: it reaches
 * clients only by SCM_RIGHTS, never by exec).
 * Thread: any.
 */
#ifndef KVS_MEMFD_H
#define KVS_MEMFD_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define KVS_MEMFD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* kvs_memfd_sealed_flags - a memfd named @name of exactly @bytes, made
 * with memfd_create's @flags besides MFD_CLOEXEC | MFD_ALLOW_SEALING
 * (MFD_HUGETLB: on huge pages), sealed with KVS_MEMFD_SEALS. Returns the
 * fd or -errno. kvs_memfd_sealed - the same on the system's pages. */
static inline int kvs_memfd_sealed_flags(const char *name, uint64_t bytes,
					 unsigned int flags)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | flags),
	    err;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)bytes) < 0 ||
	    fcntl(fd, F_ADD_SEALS, KVS_MEMFD_SEALS) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

static inline int kvs_memfd_sealed(const char *name, uint64_t bytes)
{
	return kvs_memfd_sealed_flags(name, bytes, 0);
}

#endif /* KVS_MEMFD_H */
