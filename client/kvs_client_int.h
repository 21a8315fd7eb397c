/*
 * kvs_client_int.h - what client.c lends the rest of libkvshare (admin.c);
 * hidden by the version script, not part of the API.
 */
#ifndef KVS_CLIENT_INT_H
#define KVS_CLIENT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kvshare.h"

/* One round trip: @len bytes of @req as the payload of @op. On success
 * *reply points at the reply payload (*rlen bytes), valid until the next call
 * on @c. Returns 0, the daemon's negative status, or a local error. */
int kvs__rpc(kvs_client *c, uint16_t op, const void *req, size_t len,
	     const uint8_t **reply, uint32_t *rlen);

/* The connection's socket, now the caller's: @c answers
 * KVS_E_DISCONNECTED from then on. */
int kvs__take_fd(kvs_client *c);

/* The client's layout; NULL for a control-only client. */
const kvs_layout *kvs__layout(const kvs_client *c);

/* The mapping of tier @tier in this process: the host arena (a host
 * address) or the GPU arena (a device address). -EINVAL when this client
 * does not map that tier, KVS_E_DISCONNECTED when it is dead. */
int kvs__tier_arena(const kvs_client *c, int tier, uint8_t **base,
		    uint64_t *bytes);

/* The host arena as CUDA kernels address it: page-locked and mapped for the
 * device on first use (through the CUDA runtime), until the client detaches.
 * -ENODEV without a device. */
int kvs__host_arena_device(kvs_client *c, uint8_t **dev);

#endif /* KVS_CLIENT_INT_H */
