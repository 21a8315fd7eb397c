/*
 * kvs_gpu.h - the GPU arena engine: one device memory allocation shared
 * between processes by a POSIX file descriptor (CUDA virtual memory
 * management), or its CPU twin.
 *
 * Two engines behind one interface, chosen at run time:
 *  - KVS_GPU_CUDA: the CUDA driver API, loaded with dlopen("libcuda.so.1")
 *    and dlsym. Nothing links libcuda: without a driver kvs_gpu_open()
 *    answers -ENODEV with the reason, and every binary still starts.
 *    Create = cuMemCreate (POSIX-fd handle type, size rounded up to the
 *    allocation granularity) + cuMemExportToShareableHandle + a mapping in
 *    the creating process (cuMemAddressReserve, cuMemMap, cuMemSetAccess).
 *    Import = cuMemImportFromShareableHandle + the same mapping steps.
 *  - KVS_GPU_FAKE: a "fake device" for tests on machines with no GPU: the
 *    arena is a memfd mapped MAP_SHARED and sealed against shrink and grow
 *    (kvs_memfd.h: the daemon copies out of it, so no importer may truncate
 *    it), the fd is exported as is, and "device pointers" are host
 *    addresses. Same rounding (2 MiB granularity), same checks, same
 *    ownership rules. The CUDA engine's exported fd is a driver handle, not
 *    a file: it has no size to change and nothing to seal.
 *
 * Addresses: kvs_gpu_arena_base() is a device address (CUdeviceptr) in this
 * process for CUDA, a host address for the twin. Anything shared between
 * processes is an offset from the base, never an address.
 *
 * Caveats:
 *  - CUDA: the engine makes the device's primary context current on the
 *    calling thread at open; copies must run on a thread with that context
 *    current (kvs_gpu_copy_* set it each call).
 *  - Copies are synchronous (cuMemcpyDtoH/HtoD): no stream yet.
 *
 * Errors: 0 on success; -ENODEV (no driver library, a symbol missing, no such
 * device, the device lacks VMM or POSIX-fd handles: the reason is in @why),
 * -EINVAL, -ENOMEM, -EIO (another CUDA error; see @why or the log),
 * -errno from memfd/mmap for the twin.
 * Thread: an engine and its arenas belong to one thread (the daemon's loop, or
 * a client's thread).
 */
#ifndef KVS_GPU_H
#define KVS_GPU_H

#include <stddef.h>
#include <stdint.h>

enum kvs_gpu_kind {
	KVS_GPU_NONE = 0,
	KVS_GPU_CUDA = 1, /* CUDA VMM, POSIX-fd handles */
	KVS_GPU_FAKE = 2, /* the CPU twin: a memfd */
};

typedef struct kvs_gpu kvs_gpu;             /* an engine on one device */
typedef struct kvs_gpu_arena kvs_gpu_arena; /* one shared allocation */

/*
 * kvs_gpu_open - an engine of @kind on device ordinal @device.
 * CUDA: dlopen() the driver (the name in $KVS_CUDA_DRIVER, else
 * "libcuda.so.1"), resolve every entry point, cuInit, check the device
 * exists and supports VMM and POSIX-fd handles, retain its primary context.
 * @why, @why_len: on failure, one line saying why (may be NULL).
 * Errors: -ENODEV (reason in @why), -EINVAL (@kind, @device < 0), -ENOMEM,
 * -EIO.
 * Ownership: *out until kvs_gpu_close().
 */
int kvs_gpu_open(int kind, int device, kvs_gpu **out, char *why,
		 size_t why_len);
void kvs_gpu_close(kvs_gpu *g);

/* kvs_gpu_device_count - devices the CUDA driver sees, or -ENODEV with
 * @why filled (no library, cuInit failed). */
int kvs_gpu_device_count(char *why, size_t why_len);

int kvs_gpu_kind(const kvs_gpu *g);
int kvs_gpu_device(const kvs_gpu *g);
/* kvs_gpu_granularity - the allocation granularity arenas are rounded to. */
uint64_t kvs_gpu_granularity(const kvs_gpu *g);
/* kvs_gpu_kind_name - "cuda", "fake" or "none". */
const char *kvs_gpu_kind_name(int kind);

/*
 * kvs_gpu_arena_create - an arena of at least @bytes on the engine's device,
 * rounded up to the granularity, exported as a POSIX fd and mapped here.
 * Errors: -EINVAL (0 bytes), -ENOMEM (out of device memory), -EIO, -errno.
 * Ownership: *out until kvs_gpu_arena_destroy() (which closes the fd).
 */
int kvs_gpu_arena_create(kvs_gpu *g, uint64_t bytes, kvs_gpu_arena **out);

/*
 * kvs_gpu_arena_import - map an arena exported by another process: @fd (as
 * received; the arena owns it from now on, also on failure) of @bytes.
 * Errors: -EINVAL (@bytes 0 or not a multiple of the granularity, an fd
 * smaller than @bytes for the twin), -EIO, -errno.
 */
int kvs_gpu_arena_import(kvs_gpu *g, int fd, uint64_t bytes,
			 kvs_gpu_arena **out);
void kvs_gpu_arena_destroy(kvs_gpu_arena *a);

/* kvs_gpu_arena_fd - the exported fd (created arenas), -1 for imported. */
int kvs_gpu_arena_fd(const kvs_gpu_arena *a);
/* kvs_gpu_arena_base - the mapping's address in this process (a device
 * address for CUDA, a host address for the twin). */
uint64_t kvs_gpu_arena_base(const kvs_gpu_arena *a);
uint64_t kvs_gpu_arena_bytes(const kvs_gpu_arena *a);

/*
 * kvs_gpu_copy_to_host / kvs_gpu_copy_from_host - synchronous copies between
 * [@off, @off + @len) of the arena and host memory.
 * Errors: -ERANGE (out of the arena), -EIO.
 */
int kvs_gpu_copy_to_host(kvs_gpu_arena *a, uint64_t off, void *dst,
			 size_t len);
int kvs_gpu_copy_from_host(kvs_gpu_arena *a, uint64_t off, const void *src,
			   size_t len);

/*
 * kvs_gpu_host_register - page-lock host memory [@p, @p + @len) for DMA
 * (cuMemHostRegister, portable), so host-tier blocks copy to the device at
 * full bandwidth. The twin does nothing. Undo with kvs_gpu_host_unregister().
 * Errors: -EIO (the driver refused: see the log), -EINVAL.
 */
int kvs_gpu_host_register(kvs_gpu *g, void *p, size_t len);
void kvs_gpu_host_unregister(kvs_gpu *g, void *p);

#endif /* KVS_GPU_H */
