/*
 * kvs_arena.h - a host-RAM arena: one memfd of an exact size, mapped
 * MAP_SHARED in the daemon and handed by fd to every client.
 *
 * The arena is sized exactly as asked (rounded up to the system page size
 * only): no power-of-two rounding. Its pages are touched lazily, so the
 * daemon's resident memory grows with what is written. The memfd is sealed
 * against shrink and grow (kvs_memfd.h): whoever receives the fd can write
 * every byte but never change its size under the daemon's mapping.
 *
 * Errors: 0 on success, -errno from memfd_create/ftruncate/fcntl/mmap.
 * Thread: create and destroy from one thread; the mapping itself is plain
 * shared memory.
 */
#ifndef KVS_ARENA_H
#define KVS_ARENA_H

#include <stdint.h>

typedef struct kvs_arena kvs_arena;

/*
 * kvs_arena_create - a memfd arena named @name (shown in /proc/PID/fd);
 * kvs_arena_size - the bytes it is made of for a request of @bytes.
 * Ownership: *out until kvs_arena_destroy(), which unmaps and closes the fd.
 */
int kvs_arena_create(const char *name, uint64_t bytes, kvs_arena **out);
/*
 * kvs_arena_create_huge - the same arena on 2 MiB huge pages (a hugetlb
 * memfd: the pages come from vm.nr_hugepages). A process then maps a
 * block's pages with one fault per 2 MiB where 4K pages take one per
 * 64 KiB. It is made without taking its pages from the pool
 * (MAP_NORESERVE): nothing may touch it before kvs_arena_reserve(), since
 * a page the pool cannot give is SIGBUS. So a daemon that is about to
 * adopt its predecessor's arena does not need the pool twice over.
 * @bytes: a multiple of KVS_ARENA_HUGE_PAGE. Errors: -EINVAL (not a
 * multiple), as kvs_arena_create otherwise.
 *
 * kvs_arena_reserve - take every page of a huge-page arena from the pool
 * now (the reservation stays with the memfd, for every process that maps
 * it); 0 for any other arena. Errors: -ENOMEM (fewer free huge pages than
 * it needs: nothing taken), -errno of mmap.
 */
#define KVS_ARENA_HUGE_PAGE (2u << 20)
int kvs_arena_create_huge(const char *name, uint64_t bytes, kvs_arena **out);
int kvs_arena_reserve(kvs_arena *a);
uint64_t kvs_arena_size(uint64_t bytes);
/*
 * kvs_arena_adopt - an arena over memfd @fd, made by another process (a
 * daemon before this one): it must be sealed against shrink and grow and be
 * exactly @bytes long (what kvs_arena_create made of the same request).
 * Errors: -EPERM (not sealed), -EMSGSIZE (another size), -errno (fcntl,
 * fstat, mmap), -ENOMEM.
 * Ownership: on success @fd is the arena's (closed by kvs_arena_destroy);
 * on failure it stays the caller's.
 */
int kvs_arena_adopt(int fd, uint64_t bytes, kvs_arena **out);
void kvs_arena_destroy(kvs_arena *a);

int kvs_arena_fd(const kvs_arena *a);
void *kvs_arena_base(const kvs_arena *a);
uint64_t kvs_arena_bytes(const kvs_arena *a);
/* kvs_arena_resident - bytes of the arena backed by memory now (pages some
 * process has touched), 0 if unknown. */
uint64_t kvs_arena_resident(const kvs_arena *a);

#endif /* KVS_ARENA_H */
