/*
 * kvs_gpu_driver.h - the few CUDA driver API types, constants and entry
 * point signatures that storage/gpu/gpu.c resolves at run time.
 *
 * Declared here rather than taken from the toolkit's <cuda.h> so that the
 * engine builds where no toolkit is installed; tests/unit/test_gpu_abi.c
 * checks every one of them against <cuda.h> (sizes, offsets, values)
 * whenever CMake finds the toolkit. Values are those of CUDA 12/13.
 *
 * Internal to storage/gpu/gpu.c and its tests.
 */
#ifndef KVS_GPU_DRIVER_H
#define KVS_GPU_DRIVER_H

#include <stddef.h>
#include <stdint.h>

typedef int kvs_CUresult;                 /* CUresult */
typedef int kvs_CUdevice;                 /* CUdevice */
typedef void *kvs_CUcontext;              /* CUcontext */
typedef unsigned long long kvs_CUdeviceptr;
typedef unsigned long long kvs_CUmemGenericAllocationHandle;

#define KVS_CUDA_SUCCESS 0
#define KVS_CUDA_ERROR_OUT_OF_MEMORY 2
#define KVS_CUDA_ERROR_NO_DEVICE 100
#define KVS_CUDA_ERROR_INVALID_DEVICE 101

#define KVS_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102
#define KVS_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED 103
#define KVS_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1
#define KVS_CU_MEM_ALLOCATION_TYPE_PINNED 1
#define KVS_CU_MEM_LOCATION_TYPE_DEVICE 1
#define KVS_CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define KVS_CU_MEM_ALLOC_GRANULARITY_MINIMUM 0
#define KVS_CU_MEMHOSTREGISTER_PORTABLE 1

typedef struct kvs_CUmemLocation {
	int type; /* CUmemLocationType */
	int id;
} kvs_CUmemLocation;

typedef struct kvs_CUmemAllocationProp {
	int type;                 /* CUmemAllocationType */
	int requestedHandleTypes; /* CUmemAllocationHandleType */
	kvs_CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} kvs_CUmemAllocationProp;

typedef struct kvs_CUmemAccessDesc {
	kvs_CUmemLocation location;
	int flags; /* CUmemAccess_flags */
} kvs_CUmemAccessDesc;

/* X(name, symbol, return, parameters): every entry point the engine uses.
 * The symbol is the versioned name where <cuda.h> maps the plain one to a
 * _v2 (those are the ABI names libcuda exports). */
#define KVS_CUDA_ENTRY_POINTS(X)                                                 \
	X(cuInit, "cuInit", (unsigned int flags))                                  \
	X(cuDeviceGetCount, "cuDeviceGetCount", (int *count))                      \
	X(cuDeviceGet, "cuDeviceGet", (kvs_CUdevice *dev, int ordinal))            \
	X(cuDeviceGetAttribute, "cuDeviceGetAttribute",                            \
	  (int *v, int attrib, kvs_CUdevice dev))                                  \
	X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                    \
	  (kvs_CUcontext *ctx, kvs_CUdevice dev))                                  \
	X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2",               \
	  (kvs_CUdevice dev))                                                      \
	X(cuCtxSetCurrent, "cuCtxSetCurrent", (kvs_CUcontext ctx))                 \
	X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity",          \
	  (size_t *g, const kvs_CUmemAllocationProp *prop, int option))            \
	X(cuMemCreate, "cuMemCreate",                                              \
	  (kvs_CUmemGenericAllocationHandle *h, size_t size,                       \
	   const kvs_CUmemAllocationProp *prop, unsigned long long flags))         \
	X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle",            \
	  (void *shareable, kvs_CUmemGenericAllocationHandle h, int type,          \
	   unsigned long long flags))                                              \
	X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle",        \
	  (kvs_CUmemGenericAllocationHandle *h, void *os_handle, int type))        \
	X(cuMemAddressReserve, "cuMemAddressReserve",                              \
	  (kvs_CUdeviceptr *ptr, size_t size, size_t align, kvs_CUdeviceptr addr,  \
	   unsigned long long flags))                                              \
	X(cuMemMap, "cuMemMap",                                                    \
	  (kvs_CUdeviceptr ptr, size_t size, size_t offset,                        \
	   kvs_CUmemGenericAllocationHandle h, unsigned long long flags))          \
	X(cuMemSetAccess, "cuMemSetAccess",                                        \
	  (kvs_CUdeviceptr ptr, size_t size, const kvs_CUmemAccessDesc *desc,      \
	   size_t count))                                                          \
	X(cuMemUnmap, "cuMemUnmap", (kvs_CUdeviceptr ptr, size_t size))            \
	X(cuMemAddressFree, "cuMemAddressFree", (kvs_CUdeviceptr ptr, size_t size)) \
	X(cuMemRelease, "cuMemRelease", (kvs_CUmemGenericAllocationHandle h))      \
	X(cuMemcpyDtoH, "cuMemcpyDtoH_v2",                                         \
	  (void *dst, kvs_CUdeviceptr src, size_t n))                              \
	X(cuMemcpyHtoD, "cuMemcpyHtoD_v2",                                         \
	  (kvs_CUdeviceptr dst, const void *src, size_t n))                        \
	X(cuMemHostRegister, "cuMemHostRegister_v2",                               \
	  (void *p, size_t n, unsigned int flags))                                 \
	X(cuMemHostUnregister, "cuMemHostUnregister", (void *p))                   \
	X(cuGetErrorString, "cuGetErrorString", (kvs_CUresult r, const char **s))

#endif /* KVS_GPU_DRIVER_H */
