/*
 * describe.c - kvs_describe(): engines' side records of the blocks they
 * publish, for the daemon's vLLM KV events (see kvshare.h). One DESCRIBE
 * request per KVS_WIRE_DESC_MAX records or 1 MiB of them.
 */
#include <errno.h>
#include <stdlib.h>

#include "kvs_client_int.h"
#include "kvs_wire.h"
#include "kvshare.h"

/* How many of @d[0..n) fit one request. */
static uint32_t batch_of(const kvs_block_desc *d, size_t n)
{
	size_t bytes = KVS_WIRE_DESC_HEAD;
	uint32_t k = 0;

	while (k < n && k < KVS_WIRE_DESC_MAX) {
		size_t one = kvs_wire_desc_size(&d[k]);

		if (k > 0 && bytes + one > KVS_WIRE_MAX_PAYLOAD)
			break;
		bytes += one;
		k++;
	}
	return k;
}

int kvs_describe(kvs_client *c, const kvs_block_desc *d, size_t n,
		 uint64_t *kept)
{
	uint8_t *req = NULL;
	uint64_t total = 0;
	int rc = 0;

	if (!c || (!d && n))
		return -EINVAL;
	if (!kvs__layout(c))
		return KVS_E_NOTATTACHED;
	if (n && !(req = malloc(KVS_WIRE_MAX_PAYLOAD)))
		return -ENOMEM;
	for (size_t i = 0; i < n && rc == 0;) {
		uint32_t k = batch_of(d + i, n - i), rlen;
		const uint8_t *reply;
		uint64_t got;
		int len = kvs_wire_describe_encode(d + i, k, req,
						   KVS_WIRE_MAX_PAYLOAD);

		if (len < 0) {
			rc = -EINVAL; /* out of bounds, or one over 1 MiB */
			break;
		}
		rc = kvs__rpc(c, KVS_OP_DESCRIBE, req, (size_t)len, &reply, &rlen);
		if (rc == KVS_E_OPCODE)
			rc = -EOPNOTSUPP;
		else if (rc == 0 && kvs_wire_u64_decode(reply, rlen, &got) == 0)
			total += got;
		else if (rc == 0)
			rc = KVS_E_PROTO;
		i += k;
	}
	free(req);
	if (kept)
		*kept = total;
	return rc;
}
