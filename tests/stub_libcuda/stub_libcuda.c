/*
 * stub_libcuda.c - a stand-in for libcuda.so.1 that implements, on host
 * memory, the driver entry points storage/gpu/gpu.c resolves. For tests only:
 * with KVS_CUDA_DRIVER=<this library> the *CUDA* engine's code (loading,
 * device checks, cuMemCreate/export/import/reserve/map/set-access/unmap/
 * release, copies) runs on a machine with no GPU, and the daemon's
 * "--gpu 0" path with it. It proves the call sequence, the sizes and the fd
 * plumbing; it proves nothing about a real driver's behaviour.
 *
 * Allocations are memfds; a "handle" is the memfd number + 1; a device
 * pointer is a host address in a PROT_NONE reservation that cuMemMap maps
 * the memfd over. Environment: KVS_STUB_DEVICES (default 1),
 * KVS_STUB_NO_POSIX_FD=1 (devices lack POSIX-fd handles).
 * Checks it makes return CUDA_ERROR_INVALID_VALUE (1): wrong property
 * fields, sizes not multiples of the granularity, mapping a range that is
 * not reserved whole.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvs_gpu_driver.h"

#define GRAN (2ull << 20)
#define INVALID 1
#define NOT_INIT 3

static int inited;
static int ctx_token;

static int devices(void)
{
	const char *s = getenv("KVS_STUB_DEVICES");

	return s ? atoi(s) : 1;
}

static int prop_ok(const kvs_CUmemAllocationProp *p)
{
	return p && p->type == KVS_CU_MEM_ALLOCATION_TYPE_PINNED &&
	       p->requestedHandleTypes == KVS_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
	       p->location.type == KVS_CU_MEM_LOCATION_TYPE_DEVICE &&
	       p->location.id >= 0 && p->location.id < devices() &&
	       p->win32HandleMetaData == NULL;
}

kvs_CUresult cuInit(unsigned int flags) { inited = flags == 0; return flags ? INVALID : 0; }

kvs_CUresult cuDeviceGetCount(int *n)
{
	if (!inited)
		return NOT_INIT;
	*n = devices();
	return 0;
}

kvs_CUresult cuDeviceGet(kvs_CUdevice *d, int ordinal)
{
	if (ordinal < 0 || ordinal >= devices())
		return KVS_CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return 0;
}

kvs_CUresult cuDeviceGetAttribute(int *v, int attrib, kvs_CUdevice d)
{
	const char *np = getenv("KVS_STUB_NO_POSIX_FD");

	if (attrib == KVS_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
		*v = 1;
	else if (attrib == KVS_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)
		*v = !(np && *np == '1');
	else
		*v = 0;
	return 0;
}

kvs_CUresult cuDevicePrimaryCtxRetain(kvs_CUcontext *c, kvs_CUdevice d)
{
	*c = &ctx_token;
	return 0;
}

kvs_CUresult cuDevicePrimaryCtxRelease_v2(kvs_CUdevice d) { return 0; }
kvs_CUresult cuCtxSetCurrent(kvs_CUcontext c) { return c == &ctx_token ? 0 : INVALID; }

kvs_CUresult cuMemGetAllocationGranularity(size_t *g, const kvs_CUmemAllocationProp *p,
					   int option)
{
	if (!prop_ok(p))
		return INVALID;
	*g = GRAN;
	return 0;
}

kvs_CUresult cuMemCreate(kvs_CUmemGenericAllocationHandle *h, size_t size,
			 const kvs_CUmemAllocationProp *p, unsigned long long flags)
{
	int fd;

	if (!prop_ok(p) || size == 0 || size % GRAN || flags)
		return INVALID;
	fd = memfd_create("stub-cuda", MFD_CLOEXEC);
	if (fd < 0)
		return KVS_CUDA_ERROR_OUT_OF_MEMORY;
	if (ftruncate(fd, (off_t)size) < 0) {
		close(fd);
		return KVS_CUDA_ERROR_OUT_OF_MEMORY;
	}
	*h = (kvs_CUmemGenericAllocationHandle)fd + 1;
	return 0;
}

kvs_CUresult cuMemExportToShareableHandle(void *out, kvs_CUmemGenericAllocationHandle h,
					  int type, unsigned long long flags)
{
	int fd;

	if (type != KVS_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || h == 0)
		return INVALID;
	fd = dup((int)(h - 1));
	if (fd < 0)
		return INVALID;
	memcpy(out, &fd, sizeof(fd));
	return 0;
}

kvs_CUresult cuMemImportFromShareableHandle(kvs_CUmemGenericAllocationHandle *h,
					    void *os, int type)
{
	int fd;

	if (type != KVS_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return INVALID;
	/* The real driver does not take the fd either: the caller closes it. */
	fd = dup((int)(uintptr_t)os);
	if (fd < 0)
		return INVALID;
	*h = (kvs_CUmemGenericAllocationHandle)fd + 1;
	return 0;
}

kvs_CUresult cuMemAddressReserve(kvs_CUdeviceptr *p, size_t size, size_t align,
				 kvs_CUdeviceptr addr, unsigned long long flags)
{
	void *m;

	if (size == 0 || size % GRAN || addr || flags)
		return INVALID;
	m = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return KVS_CUDA_ERROR_OUT_OF_MEMORY;
	*p = (kvs_CUdeviceptr)(uintptr_t)m;
	return 0;
}

kvs_CUresult cuMemMap(kvs_CUdeviceptr p, size_t size, size_t off,
		      kvs_CUmemGenericAllocationHandle h, unsigned long long flags)
{
	struct stat st;

	if (h == 0 || off || flags || size % GRAN || fstat((int)(h - 1), &st) < 0 ||
	    (uint64_t)st.st_size < size)
		return INVALID;
	/* Mapped without access until cuMemSetAccess, like the driver. */
	if (mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED,
		 (int)(h - 1), 0) == MAP_FAILED)
		return INVALID;
	return 0;
}

kvs_CUresult cuMemSetAccess(kvs_CUdeviceptr p, size_t size, const kvs_CUmemAccessDesc *d,
			    size_t count)
{
	if (count != 1 || d->location.type != KVS_CU_MEM_LOCATION_TYPE_DEVICE ||
	    d->flags != KVS_CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
		return INVALID;
	return mprotect((void *)(uintptr_t)p, size, PROT_READ | PROT_WRITE) ? INVALID : 0;
}

kvs_CUresult cuMemUnmap(kvs_CUdeviceptr p, size_t size)
{
	return mmap((void *)(uintptr_t)p, size, PROT_NONE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
			       MAP_FAILED ? INVALID : 0;
}

kvs_CUresult cuMemAddressFree(kvs_CUdeviceptr p, size_t size)
{
	return munmap((void *)(uintptr_t)p, size) ? INVALID : 0;
}

kvs_CUresult cuMemRelease(kvs_CUmemGenericAllocationHandle h)
{
	return h && close((int)(h - 1)) == 0 ? 0 : INVALID;
}

kvs_CUresult cuMemcpyDtoH_v2(void *dst, kvs_CUdeviceptr src, size_t n)
{
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return 0;
}

kvs_CUresult cuMemcpyHtoD_v2(kvs_CUdeviceptr dst, const void *src, size_t n)
{
	memcpy((void *)(uintptr_t)dst, src, n);
	return 0;
}

kvs_CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) { return p && n ? 0 : INVALID; }
kvs_CUresult cuMemHostUnregister(void *p) { return 0; }

kvs_CUresult cuGetErrorString(kvs_CUresult r, const char **s)
{
	*s = "stub driver error";
	return 0;
}
