/*
 * test_gpu_abi.c - storage/gpu/kvs_gpu_driver.h against the toolkit's <cuda.h>:
 * every type, struct layout and constant the engine declares itself must
 * match what the driver expects. Compile-time checks; built only where CMake
 * found <cuda.h>. Nothing here calls or links libcuda.
 */
#include <cuda.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "kvs_gpu_driver.h"

#define SAME_SIZE(a, b) _Static_assert(sizeof(a) == sizeof(b), #a " vs " #b)
#define SAME_OFF(a, b, f) \
	_Static_assert(offsetof(a, f) == offsetof(b, f), #a "." #f)
#define SAME_VAL(a, b) _Static_assert((long long)(a) == (long long)(b), #a)

SAME_SIZE(kvs_CUresult, CUresult);
SAME_SIZE(kvs_CUdevice, CUdevice);
SAME_SIZE(kvs_CUcontext, CUcontext);
SAME_SIZE(kvs_CUdeviceptr, CUdeviceptr);
SAME_SIZE(kvs_CUmemGenericAllocationHandle, CUmemGenericAllocationHandle);
SAME_SIZE(kvs_CUmemLocation, CUmemLocation);
SAME_OFF(kvs_CUmemLocation, CUmemLocation, id);
SAME_SIZE(kvs_CUmemAllocationProp, CUmemAllocationProp);
SAME_OFF(kvs_CUmemAllocationProp, CUmemAllocationProp, requestedHandleTypes);
SAME_OFF(kvs_CUmemAllocationProp, CUmemAllocationProp, location);
SAME_OFF(kvs_CUmemAllocationProp, CUmemAllocationProp, win32HandleMetaData);
SAME_OFF(kvs_CUmemAllocationProp, CUmemAllocationProp, allocFlags);
SAME_SIZE(kvs_CUmemAccessDesc, CUmemAccessDesc);
SAME_OFF(kvs_CUmemAccessDesc, CUmemAccessDesc, flags);
SAME_SIZE(int, CUmemAllocationHandleType);
SAME_SIZE(int, CUdevice_attribute);
SAME_VAL(KVS_CUDA_SUCCESS, CUDA_SUCCESS);
SAME_VAL(KVS_CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
SAME_VAL(KVS_CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME_VAL(KVS_CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE);
SAME_VAL(KVS_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
	 CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
SAME_VAL(KVS_CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
	 CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
SAME_VAL(KVS_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
SAME_VAL(KVS_CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_ALLOCATION_TYPE_PINNED);
SAME_VAL(KVS_CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_DEVICE);
SAME_VAL(KVS_CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
SAME_VAL(KVS_CU_MEM_ALLOC_GRANULARITY_MINIMUM, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
SAME_VAL(KVS_CU_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_PORTABLE);

/* Symbol names: where <cuda.h> maps a plain name to a versioned one, the
 * engine must dlsym the versioned one. (Parameter lists are not compared:
 * the struct types differ by name; they are written from <cuda.h>.) */
#define STR(x) #x
#define XSTR(x) STR(x)

int main(void)
{
	int bad = 0;
#define KVS_NAME(fn, sym, params)                                             \
	if (strcmp(XSTR(fn), sym) != 0) {                                     \
		printf("FAIL: <cuda.h> names %s %s, the engine resolves %s\n", \
		       #fn, XSTR(fn), sym);                                   \
		bad++;                                                        \
	}
	KVS_CUDA_ENTRY_POINTS(KVS_NAME)
#undef KVS_NAME
	printf("cuda.h %d: declarations %s\n", CUDA_VERSION, bad ? "differ" : "match");
	return bad ? 1 : 0;
}
