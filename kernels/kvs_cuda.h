/*
 * kvs_cuda.h - the few CUDA runtime services that C callers of the kernels
 * need (device count, device memory, copies, stream sync), behind one
 * interface that also exists when kvshare is built without CUDA: then
 * kvs_cuda_device_count() is 0 and everything else, the *_cuda kernel
 * entries included, returns -ENODEV. Callers choose the GPU path at run time
 * with kvs_cuda_device_count(), never with #ifdef.
 *
 * Only the CUDA runtime (libcudart) is linked, never the driver library
 * (libcuda.so.1): on a machine without an NVIDIA driver the runtime reports
 * no device and everything here degrades to -ENODEV.
 *
 * Streams are cudaStream_t passed as void *; NULL is the legacy default
 * stream.
 */
#ifndef KVS_CUDA_H
#define KVS_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * kvs_cuda_built - 1 if this build has the CUDA kernels, 0 if it has the
 * stubs. Thread: any.
 */
int kvs_cuda_built(void);

/*
 * kvs_cuda_device_count - usable CUDA devices: 0 without CUDA, without a
 * driver or without a device. Never fails. Thread: any.
 */
int kvs_cuda_device_count(void);

/*
 * kvs_cuda_malloc - @bytes of device memory on the current device.
 * Errors: -ENODEV (no CUDA or no device), -ENOMEM, -EINVAL (@out NULL).
 * Ownership: free with kvs_cuda_free(). Thread: any.
 */
int kvs_cuda_malloc(void **out, size_t bytes);
void kvs_cuda_free(void *p);

/*
 * kvs_cuda_copy - copy @bytes between any two of host and device memory
 * (the direction is inferred from the pointers) and wait for it.
 * Errors: -ENODEV, -EIO. Thread: any.
 */
int kvs_cuda_copy(void *dst, const void *src, size_t bytes);

/*
 * kvs_cuda_sync - wait until @stream has run everything queued on it.
 * Errors: -ENODEV, -EIO (an asynchronous error of the stream's work).
 * Thread: any.
 */
int kvs_cuda_sync(void *stream);

/*
 * kvs_cuda_host_register - page-lock @bytes of host memory at @p and map it
 * for the device, so kernels can read and write it; @dev is set to its
 * address on the device (the same as @p where addressing is unified).
 * Returns 0, or 1 when the memory was registered already (by the driver API,
 * say): then it is not this call's to unregister.
 * kvs_cuda_host_unregister undoes a registration that returned 0.
 * Errors: -ENODEV, -EINVAL, -ENOMEM, -EIO. Thread: any.
 */
int kvs_cuda_host_register(void *p, size_t bytes, void **dev);
void kvs_cuda_host_unregister(void *p);

/*
 * kvs_cuda_errno - map a cudaError_t to kvshare's errors: 0, -ENOMEM,
 * -ENODEV (no driver, no device, unsupported architecture), -EINVAL, or
 * -EIO for everything else. Thread: any.
 */
int kvs_cuda_errno(int cuda_error);

/*
 * kvs_cuda_error_name - the runtime's name of the last error returned from
 * a kvs_cuda_* or *_cuda call on this thread, for messages; "" if none.
 * Ownership: static storage. Thread: any (per-thread value).
 */
const char *kvs_cuda_error_name(void);

#ifdef __cplusplus
}
#endif
#endif /* KVS_CUDA_H */
