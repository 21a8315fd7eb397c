/*
 * kvs_remote_value.h - the format of a block in the remote tier: its key
 * and the header that precedes its payload in the value. Pure functions.
 *
 * Key: KVS_RVAL_KEY_PREFIX ("kvs1:") followed by the 16 raw bytes of the
 * block hash (lo then hi, little-endian): 21 bytes, no hash tag, so the
 * blocks of one chain spread over the cluster's slots.
 *
 * Value: a KVS_RVAL_HDR_BYTES header, then the payload (block_bytes).
 * Header, little-endian:
 *   0  u32 magic "KVR1" (KVS_RVAL_MAGIC)
 *   4  u16 version (KVS_RVAL_VERSION)
 *   6  u16 header bytes (KVS_RVAL_HDR_BYTES)
 *   8  u64 block bytes (payload length)
 *  16  u64 namespace fingerprint (the layout and salt, as the caller
 *          defines it)
 *  24  16B block hash (the key's hash again: a value stored under another
 *          key is caught)
 *  40  16B parent hash (the previous block of the chain; zero for the first)
 *  56  u64 XXH3-64 of the payload
 * The header is sent and received as its own iovec, so the payload goes
 * straight from and into the caller's block memory.
 *
 * Errors: -EBADMSG (a header or payload that does not verify), -EINVAL.
 * Thread: reentrant.
 */
#ifndef KVS_REMOTE_VALUE_H
#define KVS_REMOTE_VALUE_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_types.h" /* kvs_hash */

#define KVS_RVAL_KEY_PREFIX "kvs1:"
#define KVS_RVAL_KEY_BYTES (sizeof(KVS_RVAL_KEY_PREFIX) - 1 + 16)
#define KVS_RVAL_HDR_BYTES 64
#define KVS_RVAL_MAGIC 0x3152564bu /* "KVR1" little-endian */
#define KVS_RVAL_VERSION 1

/* What a header says. */
typedef struct kvs_rval_info {
	uint64_t block_bytes;
	uint64_t ns_fp;
	kvs_hash hash;
	kvs_hash parent;
	uint64_t csum; /* XXH3-64 of the payload */
} kvs_rval_info;

/* kvs_rval_key - the key of block @hash into @key[KVS_RVAL_KEY_BYTES]. */
void kvs_rval_key(uint8_t key[KVS_RVAL_KEY_BYTES], kvs_hash hash);

/* kvs_rval_csum - XXH3-64 of a payload. */
uint64_t kvs_rval_csum(const void *payload, size_t len);

/* kvs_rval_encode - header of @info into @hdr (info->csum as given: compute
 * it with kvs_rval_csum, or take the one computed at commit). */
void kvs_rval_encode(uint8_t hdr[KVS_RVAL_HDR_BYTES], const kvs_rval_info *info);

/*
 * kvs_rval_decode - the fields of header @hdr into @info.
 * Errors: -EBADMSG (magic, version or header size not ours).
 */
int kvs_rval_decode(const uint8_t hdr[KVS_RVAL_HDR_BYTES], kvs_rval_info *info);

/*
 * kvs_rval_verify - whether header @hdr and payload @payload[@len] are the
 * block @want names: the header decodes, its block bytes equal @len and
 * want->block_bytes, its namespace fingerprint and hash equal @want's, and
 * the payload's XXH3-64 equals the header's. want->parent and want->csum
 * are not compared. On success *@got (may be NULL) holds the header.
 * Errors: -EBADMSG.
 */
int kvs_rval_verify(const uint8_t hdr[KVS_RVAL_HDR_BYTES], const void *payload,
		    size_t len, const kvs_rval_info *want, kvs_rval_info *got);

#endif /* KVS_REMOTE_VALUE_H */
