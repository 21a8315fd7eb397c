/* remote_value.c - keys and value headers of the remote tier (see
 * kvs_remote_value.h). */
#include "kvs_remote_value.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "kvs_le.h"

void kvs_rval_key(uint8_t key[KVS_RVAL_KEY_BYTES], kvs_hash hash)
{
	size_t n = sizeof(KVS_RVAL_KEY_PREFIX) - 1;

	memcpy(key, KVS_RVAL_KEY_PREFIX, n);
	puth(key + n, hash);
}

uint64_t kvs_rval_csum(const void *payload, size_t len)
{
	return XXH3_64bits(payload, len);
}

void kvs_rval_encode(uint8_t hdr[KVS_RVAL_HDR_BYTES], const kvs_rval_info *info)
{
	put32(hdr, KVS_RVAL_MAGIC);
	put16(hdr + 4, KVS_RVAL_VERSION);
	put16(hdr + 6, KVS_RVAL_HDR_BYTES);
	put64(hdr + 8, info->block_bytes);
	put64(hdr + 16, info->ns_fp);
	puth(hdr + 24, info->hash);
	puth(hdr + 40, info->parent);
	put64(hdr + 56, info->csum);
}

int kvs_rval_decode(const uint8_t hdr[KVS_RVAL_HDR_BYTES], kvs_rval_info *info)
{
	if (get32(hdr) != KVS_RVAL_MAGIC || get16(hdr + 4) != KVS_RVAL_VERSION ||
	    get16(hdr + 6) != KVS_RVAL_HDR_BYTES)
		return -EBADMSG;
	info->block_bytes = get64(hdr + 8);
	info->ns_fp = get64(hdr + 16);
	info->hash = geth(hdr + 24);
	info->parent = geth(hdr + 40);
	info->csum = get64(hdr + 56);
	return 0;
}

int kvs_rval_verify(const uint8_t hdr[KVS_RVAL_HDR_BYTES], const void *payload,
		    size_t len, const kvs_rval_info *want, kvs_rval_info *got)
{
	kvs_rval_info h;

	if (kvs_rval_decode(hdr, &h) < 0 || h.block_bytes != len ||
	    h.block_bytes != want->block_bytes || h.ns_fp != want->ns_fp ||
	    h.hash.lo != want->hash.lo || h.hash.hi != want->hash.hi ||
	    kvs_rval_csum(payload, len) != h.csum)
		return -EBADMSG;
	if (got)
		*got = h;
	return 0;
}
