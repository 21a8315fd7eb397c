/* gpu.c - the GPU arena engine: CUDA VMM through a run-time loaded driver,
 * or the memfd twin (see kvs_gpu.h). */
#define _GNU_SOURCE
#include "kvs_gpu.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvs_gpu_driver.h"
#include "kvs_memfd.h"

/* The twin rounds like a device with 2 MiB granularity (what current NVIDIA
 * GPUs report), so size handling is exercised the same way. */
#define FAKE_GRANULARITY (2ull << 20)

typedef struct cuda_api {
#define KVS_DECL(name, sym, params) kvs_CUresult (*name) params;
	KVS_CUDA_ENTRY_POINTS(KVS_DECL)
#undef KVS_DECL
} cuda_api;

struct kvs_gpu {
	int kind;
	int device;
	uint64_t gran;
	void *dl;       /* libcuda handle (CUDA) */
	cuda_api cu;
	kvs_CUdevice dev;
	kvs_CUcontext ctx;
};

struct kvs_gpu_arena {
	kvs_gpu *g;
	int fd;         /* exported fd (created arenas) or -1 */
	uint64_t bytes;
	uint64_t base;  /* CUdeviceptr, or host address for the twin */
	kvs_CUmemGenericAllocationHandle h;
	int mapped;     /* CUDA: reserve + map done */
};

static void say(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!why || len == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

static const char *cu_name(const cuda_api *cu, kvs_CUresult r)
{
	const char *s = NULL;

	if (cu->cuGetErrorString && cu->cuGetErrorString(r, &s) == 0 && s)
		return s;
	return "unknown CUDA error";
}

static int cu_errno(kvs_CUresult r)
{
	switch (r) {
	case KVS_CUDA_ERROR_OUT_OF_MEMORY: return -ENOMEM;
	case KVS_CUDA_ERROR_NO_DEVICE:
	case KVS_CUDA_ERROR_INVALID_DEVICE: return -ENODEV;
	default: return -EIO;
	}
}

const char *kvs_gpu_kind_name(int kind)
{
	return kind == KVS_GPU_CUDA ? "cuda" : kind == KVS_GPU_FAKE ? "fake" : "none";
}

/* dlopen the driver and resolve every entry point. */
static int load(kvs_gpu *g, char *why, size_t len)
{
	const char *name = getenv("KVS_CUDA_DRIVER");
	void *sym;

	if (!name || !*name)
		name = "libcuda.so.1";
	g->dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!g->dl) {
		const char *e = dlerror();

		say(why, len, "%s not found (%s)", name, e ? e : "dlopen failed");
		return -ENODEV;
	}
#define KVS_RESOLVE(fn, symname, params)                                          \
	sym = dlsym(g->dl, symname);                                              \
	if (!sym) {                                                               \
		say(why, len, "%s has no %s (driver too old?)", name, symname);   \
		return -ENODEV;                                                   \
	}                                                                         \
	memcpy(&g->cu.fn, &sym, sizeof(sym));
	KVS_CUDA_ENTRY_POINTS(KVS_RESOLVE)
#undef KVS_RESOLVE
	return 0;
}

static int init_driver(kvs_gpu *g, char *why, size_t len)
{
	kvs_CUresult r;
	int rc = load(g, why, len);

	if (rc < 0)
		return rc;
	r = g->cu.cuInit(0);
	if (r != KVS_CUDA_SUCCESS) {
		say(why, len, "cuInit failed: %s", cu_name(&g->cu, r));
		return -ENODEV;
	}
	return 0;
}

int kvs_gpu_device_count(char *why, size_t why_len)
{
	kvs_gpu g = { .kind = KVS_GPU_CUDA };
	int n = 0, rc = init_driver(&g, why, why_len);

	if (rc == 0 && g.cu.cuDeviceGetCount(&n) != KVS_CUDA_SUCCESS) {
		say(why, why_len, "cuDeviceGetCount failed");
		rc = -ENODEV;
	}
	if (g.dl)
		dlclose(g.dl);
	return rc < 0 ? rc : n;
}

static kvs_CUmemAllocationProp dev_prop(const kvs_gpu *g)
{
	kvs_CUmemAllocationProp p;

	memset(&p, 0, sizeof(p));
	p.type = KVS_CU_MEM_ALLOCATION_TYPE_PINNED;
	p.requestedHandleTypes = KVS_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	p.location.type = KVS_CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = g->dev;
	return p;
}

static int open_cuda(kvs_gpu *g, char *why, size_t len)
{
	kvs_CUmemAllocationProp prop;
	kvs_CUresult r;
	size_t gran = 0;
	int n = 0, vmm = 0, posix = 0;
	int rc = init_driver(g, why, len);

	if (rc < 0)
		return rc;
	r = g->cu.cuDeviceGetCount(&n);
	if (r != KVS_CUDA_SUCCESS || n == 0) {
		say(why, len, "no CUDA device (%s)",
		    r ? cu_name(&g->cu, r) : "count 0");
		return -ENODEV;
	}
	if (g->device >= n) {
		say(why, len, "no CUDA device %d (the driver sees %d)", g->device, n);
		return -ENODEV;
	}
	r = g->cu.cuDeviceGet(&g->dev, g->device);
	if (r != KVS_CUDA_SUCCESS) {
		say(why, len, "cuDeviceGet(%d): %s", g->device, cu_name(&g->cu, r));
		return -ENODEV;
	}
	g->cu.cuDeviceGetAttribute(
		&vmm, KVS_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, g->dev);
	g->cu.cuDeviceGetAttribute(
		&posix, KVS_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
		g->dev);
	if (!vmm || !posix) {
		say(why, len, "CUDA device %d lacks %s", g->device,
		    !vmm ? "virtual memory management" : "POSIX-fd memory handles");
		return -ENODEV;
	}
	r = g->cu.cuDevicePrimaryCtxRetain(&g->ctx, g->dev);
	if (r != KVS_CUDA_SUCCESS) {
		say(why, len, "cuDevicePrimaryCtxRetain(%d): %s", g->device,
		    cu_name(&g->cu, r));
		return -ENODEV;
	}
	r = g->cu.cuCtxSetCurrent(g->ctx);
	prop = dev_prop(g);
	if (r == KVS_CUDA_SUCCESS)
		r = g->cu.cuMemGetAllocationGranularity(
			&gran, &prop, KVS_CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r != KVS_CUDA_SUCCESS || gran == 0) {
		say(why, len, "granularity of device %d: %s", g->device,
		    r ? cu_name(&g->cu, r) : "0");
		return r ? cu_errno(r) : -EIO;
	}
	g->gran = gran;
	return 0;
}

int kvs_gpu_open(int kind, int device, kvs_gpu **out, char *why,
		 size_t why_len)
{
	kvs_gpu *g;
	int rc = 0;

	if ((kind != KVS_GPU_CUDA && kind != KVS_GPU_FAKE) || device < 0) {
		say(why, why_len, "bad GPU engine or device");
		return -EINVAL;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->kind = kind;
	g->device = device;
	if (kind == KVS_GPU_FAKE)
		g->gran = FAKE_GRANULARITY;
	else
		rc = open_cuda(g, why, why_len);
	if (rc < 0) {
		kvs_gpu_close(g);
		return rc;
	}
	*out = g;
	return 0;
}

void kvs_gpu_close(kvs_gpu *g)
{
	if (!g)
		return;
	if (g->ctx)
		g->cu.cuDevicePrimaryCtxRelease(g->dev);
	if (g->dl)
		dlclose(g->dl);
	free(g);
}

int kvs_gpu_kind(const kvs_gpu *g) { return g->kind; }
int kvs_gpu_device(const kvs_gpu *g) { return g->device; }
uint64_t kvs_gpu_granularity(const kvs_gpu *g) { return g->gran; }

/* ---- arenas ----------------------------------------------------------- */

/* Reserve VA for the whole arena, map the allocation, make it read-write
 * for the engine's device. */
static int cuda_map(kvs_gpu_arena *a)
{
	cuda_api *cu = &a->g->cu;
	kvs_CUmemAccessDesc acc = {
		.location = { .type = KVS_CU_MEM_LOCATION_TYPE_DEVICE,
			      .id = a->g->dev },
		.flags = KVS_CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	kvs_CUdeviceptr p = 0;
	kvs_CUresult r = cu->cuMemAddressReserve(&p, a->bytes, a->g->gran, 0, 0);

	if (r != KVS_CUDA_SUCCESS)
		return cu_errno(r);
	r = cu->cuMemMap(p, a->bytes, 0, a->h, 0);
	if (r != KVS_CUDA_SUCCESS) {
		cu->cuMemAddressFree(p, a->bytes);
		return cu_errno(r);
	}
	r = cu->cuMemSetAccess(p, a->bytes, &acc, 1);
	if (r != KVS_CUDA_SUCCESS) {
		cu->cuMemUnmap(p, a->bytes);
		cu->cuMemAddressFree(p, a->bytes);
		return cu_errno(r);
	}
	a->base = p;
	a->mapped = 1;
	return 0;
}

static int fake_map(kvs_gpu_arena *a, int fd)
{
	void *p = mmap(NULL, a->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	a->base = (uint64_t)(uintptr_t)p;
	a->mapped = 1;
	return 0;
}

int kvs_gpu_arena_create(kvs_gpu *g, uint64_t bytes, kvs_gpu_arena **out)
{
	kvs_gpu_arena *a;
	int rc;

	if (bytes == 0 || bytes > UINT64_MAX - g->gran)
		return -EINVAL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->g = g;
	a->fd = -1;
	a->bytes = (bytes + g->gran - 1) / g->gran * g->gran;
	if (g->kind == KVS_GPU_FAKE) {
		/* Sealed as the host arena is: the daemon copies out of it
		 * (demotion), so no client may shrink it. */
		rc = kvs_memfd_sealed("kvshare-gpu-fake", a->bytes);
		a->fd = rc < 0 ? -1 : rc;
		if (rc >= 0)
			rc = fake_map(a, a->fd);
	} else {
		kvs_CUmemAllocationProp prop = dev_prop(g);
		kvs_CUresult r;

		g->cu.cuCtxSetCurrent(g->ctx);
		r = g->cu.cuMemCreate(&a->h, a->bytes, &prop, 0);
		if (r != KVS_CUDA_SUCCESS) {
			free(a);
			return cu_errno(r);
		}
		r = g->cu.cuMemExportToShareableHandle(
			&a->fd, a->h, KVS_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		if (r != KVS_CUDA_SUCCESS) {
			a->fd = -1;
			rc = cu_errno(r);
		} else {
			rc = cuda_map(a);
		}
	}
	if (rc < 0) {
		kvs_gpu_arena_destroy(a);
		return rc;
	}
	*out = a;
	return 0;
}

int kvs_gpu_arena_import(kvs_gpu *g, int fd, uint64_t bytes,
			 kvs_gpu_arena **out)
{
	kvs_gpu_arena *a;
	int rc;

	if (fd < 0 || bytes == 0 || bytes % g->gran) {
		if (fd >= 0)
			close(fd);
		return -EINVAL;
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		close(fd);
		return -ENOMEM;
	}
	a->g = g;
	a->fd = -1;
	a->bytes = bytes;
	if (g->kind == KVS_GPU_FAKE) {
		struct stat st;

		/* Mapping past the file's end would turn an access into SIGBUS. */
		if (fstat(fd, &st) < 0)
			rc = -errno;
		else if ((uint64_t)st.st_size < bytes)
			rc = -EINVAL;
		else
			rc = fake_map(a, fd);
	} else {
		kvs_CUresult r;

		g->cu.cuCtxSetCurrent(g->ctx);
		r = g->cu.cuMemImportFromShareableHandle(
			&a->h, (void *)(uintptr_t)fd,
			KVS_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		rc = r == KVS_CUDA_SUCCESS ? cuda_map(a) : cu_errno(r);
	}
	/* The mapping (or the imported handle) keeps the memory: the fd is
	 * not needed any more. */
	close(fd);
	if (rc < 0) {
		kvs_gpu_arena_destroy(a);
		return rc;
	}
	*out = a;
	return 0;
}

void kvs_gpu_arena_destroy(kvs_gpu_arena *a)
{
	if (!a)
		return;
	if (a->g->kind == KVS_GPU_FAKE) {
		if (a->mapped)
			munmap((void *)(uintptr_t)a->base, a->bytes);
	} else {
		cuda_api *cu = &a->g->cu;

		if (a->mapped) {
			cu->cuMemUnmap(a->base, a->bytes);
			cu->cuMemAddressFree(a->base, a->bytes);
		}
		if (a->h)
			cu->cuMemRelease(a->h);
	}
	if (a->fd >= 0)
		close(a->fd);
	free(a);
}

int kvs_gpu_arena_fd(const kvs_gpu_arena *a) { return a->fd; }
uint64_t kvs_gpu_arena_base(const kvs_gpu_arena *a) { return a->base; }
uint64_t kvs_gpu_arena_bytes(const kvs_gpu_arena *a) { return a->bytes; }

static int in_range(const kvs_gpu_arena *a, uint64_t off, size_t len)
{
	return off <= a->bytes && len <= a->bytes - off;
}

int kvs_gpu_copy_to_host(kvs_gpu_arena *a, uint64_t off, void *dst, size_t len)
{
	kvs_gpu *g = a->g;

	if (!in_range(a, off, len))
		return -ERANGE;
	if (g->kind == KVS_GPU_FAKE) {
		memcpy(dst, (const void *)(uintptr_t)(a->base + off), len);
		return 0;
	}
	g->cu.cuCtxSetCurrent(g->ctx);
	return g->cu.cuMemcpyDtoH(dst, a->base + off, len) ? -EIO : 0;
}

int kvs_gpu_copy_from_host(kvs_gpu_arena *a, uint64_t off, const void *src,
			   size_t len)
{
	kvs_gpu *g = a->g;

	if (!in_range(a, off, len))
		return -ERANGE;
	if (g->kind == KVS_GPU_FAKE) {
		memcpy((void *)(uintptr_t)(a->base + off), src, len);
		return 0;
	}
	g->cu.cuCtxSetCurrent(g->ctx);
	return g->cu.cuMemcpyHtoD(a->base + off, src, len) ? -EIO : 0;
}

int kvs_gpu_host_register(kvs_gpu *g, void *p, size_t len)
{
	if (!p || len == 0)
		return -EINVAL;
	if (g->kind == KVS_GPU_FAKE)
		return 0;
	g->cu.cuCtxSetCurrent(g->ctx);
	return g->cu.cuMemHostRegister(p, len, KVS_CU_MEMHOSTREGISTER_PORTABLE)
		       ? -EIO : 0;
}

void kvs_gpu_host_unregister(kvs_gpu *g, void *p)
{
	if (g->kind == KVS_GPU_CUDA && p) {
		g->cu.cuCtxSetCurrent(g->ctx);
		g->cu.cuMemHostUnregister(p);
	}
}
