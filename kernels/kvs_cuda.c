/*
 * kvs_cuda.c - kvs_cuda.h on the CUDA runtime (built when CMake finds CUDA).
 */
#include <errno.h>

#include <cuda_runtime_api.h>

#include "kvs_cuda.h"

static _Thread_local cudaError_t last_error;

int kvs_cuda_built(void)
{
	return 1;
}

int kvs_cuda_errno(int e)
{
	if (e != cudaSuccess)
		last_error = (cudaError_t)e;
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
	case cudaErrorNoKernelImageForDevice:
	case cudaErrorUnsupportedPtxVersion:
	case cudaErrorDevicesUnavailable:
	case cudaErrorCallRequiresNewerDriver:
		return -ENODEV;
	case cudaErrorInvalidValue:
		return -EINVAL;
	default:
		return -EIO;
	}
}

const char *kvs_cuda_error_name(void)
{
	return last_error == cudaSuccess ? "" : cudaGetErrorName(last_error);
}

int kvs_cuda_device_count(void)
{
	int n = 0;

	/* Without libcuda.so.1 this fails (cudaErrorInsufficientDriver):
	 * that is the normal answer on a machine without a GPU. */
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return n;
}

int kvs_cuda_malloc(void **out, size_t bytes)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (kvs_cuda_device_count() == 0)
		return -ENODEV;
	return kvs_cuda_errno(cudaMalloc(out, bytes));
}

void kvs_cuda_free(void *p)
{
	if (p)
		(void)cudaFree(p);
}

int kvs_cuda_copy(void *dst, const void *src, size_t bytes)
{
	if (kvs_cuda_device_count() == 0)
		return -ENODEV;
	return kvs_cuda_errno(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

int kvs_cuda_sync(void *stream)
{
	if (kvs_cuda_device_count() == 0)
		return -ENODEV;
	return kvs_cuda_errno(cudaStreamSynchronize((cudaStream_t)stream));
}

int kvs_cuda_host_register(void *p, size_t bytes, void **dev)
{
	cudaError_t e;
	int rc, ours = 1;

	if (!p || !dev)
		return -EINVAL;
	if (kvs_cuda_device_count() == 0)
		return -ENODEV;
	e = cudaHostRegister(p, bytes, cudaHostRegisterMapped |
					       cudaHostRegisterPortable);
	if (e == cudaErrorHostMemoryAlreadyRegistered) {
		(void)cudaGetLastError();
		ours = 0;
	} else if (e != cudaSuccess) {
		return kvs_cuda_errno(e);
	}
	rc = kvs_cuda_errno(cudaHostGetDevicePointer(dev, p, 0));
	if (rc < 0 && ours)
		(void)cudaHostUnregister(p);
	return rc < 0 ? rc : !ours;
}

void kvs_cuda_host_unregister(void *p)
{
	if (p)
		(void)cudaHostUnregister(p);
}
