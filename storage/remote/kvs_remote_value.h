/*
 * kvs_remote_value.h - the format of a block in the remote tier: its key,
 * the header that precedes its payload in the value, and the keyed MAC that
 * authenticates both. Pure functions (the MACs are OpenSSL's Poly1305 and
 * HMAC-SHA-256).
 *
 * Key: KVS_RVAL_KEY_PREFIX ("kvs2:"), the namespace fingerprint (u64 LE),
 * then the 16 raw bytes of the block hash (lo then hi, LE): 29 bytes, no
 * hash tag, so the blocks of one chain spread over the cluster's slots.
 * The fingerprint is in the key so that a client of one namespace cannot
 * take another's key first (it could, with "kvs1:" + hash alone: the
 * victim's EXISTS said present, its verify said corrupt, forever). Keys of
 * the old format ("kvs1:", 21 bytes) are never read or written: they age
 * out of the cluster by its maxmemory policy.
 *
 * Value: a KVS_RVAL_HDR_BYTES header, then the payload (block_bytes).
 * Header, little-endian, in two versions that differ only in the MAC
 * (readers take both; writers write kvs_rval_mac_version's):
 *   0  u32 magic "KVR2" (KVS_RVAL_MAGIC)
 *   4  u16 version (KVS_RVAL_V_POLY1305 or KVS_RVAL_V_HMAC)
 *   6  u16 header bytes (KVS_RVAL_HDR_BYTES)
 *   8  u64 block bytes (payload length)
 *  16  u64 namespace fingerprint (kvs_rval_ns_fp)
 *  24  16B block hash (the key's hash again: a value stored under another
 *          key is caught)
 *  40  16B parent hash (the previous block of the chain; zero for the first)
 *  56  u64 key id of the MAC key (kvs_rval_mac_id: which secret signed it)
 * version 2 (HMAC):
 *  64  32B HMAC-SHA-256 under the secret of header bytes 0..63 and the
 *          payload
 * version 3 (Poly1305, what is written by default):
 *  64  16B nonce, random for every value sealed
 *  80  16B Poly1305 tag of header bytes 0..79 and the payload under the
 *          one-time key HMAC-SHA-256(secret, "kvshare rval v3 otk" ||
 *          header bytes 0..79): a key for one header, nonce included, so
 *          two values never share one (docs/remote.md, "The value MAC")
 * The header is sent and received as its own iovec, so the payload goes
 * straight from and into the caller's block memory.
 *
 * Errors: -EBADMSG (a header that does not decode or does not name the
 * block asked for), -EKEYREJECTED (its MAC does not verify: written without
 * the secret, with another secret, or changed since), -EINVAL, -ENOMEM.
 * Thread: reentrant; a kvs_rval_mac may be used by several threads at once
 * (it is read-only after kvs_rval_mac_create).
 */
#ifndef KVS_REMOTE_VALUE_H
#define KVS_REMOTE_VALUE_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_ns.h" /* kvs_ns_layout */
#include "kvs_types.h"  /* kvs_hash */

#define KVS_RVAL_KEY_PREFIX "kvs2:"
#define KVS_RVAL_KEY_BYTES (sizeof(KVS_RVAL_KEY_PREFIX) - 1 + 8 + 16)
#define KVS_RVAL_HDR_BYTES 96
#define KVS_RVAL_MAGIC 0x3252564bu /* "KVR2" little-endian */
#define KVS_RVAL_V_HMAC 2      /* HMAC-SHA-256 of header and payload */
#define KVS_RVAL_V_POLY1305 3  /* Poly1305 under a one-time key */
/* Header bytes signed: version 2 all but the MAC; version 3 the nonce too. */
#define KVS_RVAL_SIGNED_BYTES 64
#define KVS_RVAL_V3_SIGNED_BYTES 80
#define KVS_RVAL_NONCE_BYTES 16
#define KVS_RVAL_MAC_BYTES 32  /* version 2 the HMAC; version 3 nonce + tag */
#define KVS_RVAL_TAG_BYTES 16
/* Shortest secret kvs_rval_mac_create takes (besides none). */
#define KVS_RVAL_SECRET_MIN 16

/* What a header says. */
typedef struct kvs_rval_info {
	uint16_t version;              /* set by kvs_rval_seal, decode */
	uint64_t block_bytes;
	uint64_t ns_fp;
	kvs_hash hash;
	kvs_hash parent;
	uint64_t key_id;               /* set by kvs_rval_seal */
	/* set by kvs_rval_seal: version 2 the HMAC; version 3 the nonce
	 * then the tag */
	uint8_t mac[KVS_RVAL_MAC_BYTES];
} kvs_rval_info;

/* A MAC key: opaque. */
typedef struct kvs_rval_mac kvs_rval_mac;

/*
 * kvs_rval_mac_create - the MAC key of secret @secret[@len] (copied), or,
 * for @len 0, the unauthenticated key: the empty HMAC key, key id 0, whose
 * MAC anyone can compute (it catches corruption, not a writer). It seals
 * version 3 (KVS_RVAL_V_POLY1305) until kvs_rval_mac_set_version.
 * Errors: -EINVAL (@len from 1 to KVS_RVAL_SECRET_MIN - 1), -ENOMEM, -EIO
 * (OpenSSL has no HMAC-SHA-256 or no Poly1305).
 * Ownership: *out until kvs_rval_mac_free().
 */
int kvs_rval_mac_create(const void *secret, size_t len, kvs_rval_mac **out);

/*
 * kvs_rval_mac_set_version - make kvs_rval_seal write @version
 * (KVS_RVAL_V_POLY1305 or KVS_RVAL_V_HMAC: the old one, for a cluster
 * whose daemons are not all upgraded yet). Verify takes both always.
 * Errors: -EINVAL (another version).
 * Thread: before @m is shared (it is read-only after).
 */
int kvs_rval_mac_set_version(kvs_rval_mac *m, int version);

/* kvs_rval_mac_version - the version kvs_rval_seal writes under @m. */
int kvs_rval_mac_version(const kvs_rval_mac *m);

/* kvs_rval_mac_id - the key id of @m: 0 for the unauthenticated key, else
 * 8 bytes of the HMAC of a constant under the key (tells secrets apart in a
 * log line without saying anything about them). */
uint64_t kvs_rval_mac_id(const kvs_rval_mac *m);

/* kvs_rval_mac_free - NULL is a no-op. The secret is wiped. */
void kvs_rval_mac_free(kvs_rval_mac *m);

/* kvs_rval_ns_fp - the fingerprint of namespace @ns: XXH3-64 of its
 * namespace record without its id (kvs_ns.h: layout and salt, the same
 * bytes on every machine; @ns->id is ignored), never 0 (0 means "none");
 * 0 when it cannot be encoded. */
uint64_t kvs_rval_ns_fp(const kvs_ns_layout *ns);

/* kvs_rval_key - the key of block @hash of namespace @ns_fp into
 * @key[KVS_RVAL_KEY_BYTES]. */
void kvs_rval_key(uint8_t key[KVS_RVAL_KEY_BYTES], uint64_t ns_fp, kvs_hash hash);

/* kvs_rval_encode - header of @info into @hdr, every field as given (a
 * version of 0 is written as KVS_RVAL_V_POLY1305). */
void kvs_rval_encode(uint8_t hdr[KVS_RVAL_HDR_BYTES], const kvs_rval_info *info);

/*
 * kvs_rval_decode - the fields of header @hdr into @info (nothing verified
 * but the format), either version.
 * Errors: -EBADMSG (magic, version or header size not ours).
 */
int kvs_rval_decode(const uint8_t hdr[KVS_RVAL_HDR_BYTES], kvs_rval_info *info);

/*
 * kvs_rval_seal - the header of @info (block_bytes, ns_fp, hash, parent;
 * its version, key_id and mac are ignored) signed under @m with payload
 * @payload[info->block_bytes], into @hdr, in kvs_rval_mac_version(@m)
 * (version 3 draws its nonce from OpenSSL's RAND_bytes).
 * Errors: -ENOMEM, -EIO (OpenSSL failed).
 */
int kvs_rval_seal(const kvs_rval_mac *m, const kvs_rval_info *info,
		  const void *payload, uint8_t hdr[KVS_RVAL_HDR_BYTES]);

/*
 * kvs_rval_verify - whether header @hdr and payload @payload[@len] are the
 * block @want names, signed under @m: the header decodes, its block bytes
 * equal @len and want->block_bytes, its namespace fingerprint and hash
 * equal @want's (else -EBADMSG); its key id is @m's and its MAC is the one
 * @m computes (else -EKEYREJECTED; a wrong key id is rejected without
 * reading the payload). Either version verifies, whatever @m writes.
 * want->version, parent, key_id and mac are not compared.
 * *@got (may be NULL) holds the header when it decodes, also on failure.
 * Errors: -EBADMSG, -EKEYREJECTED, -ENOMEM, -EIO.
 */
int kvs_rval_verify(const kvs_rval_mac *m, const uint8_t hdr[KVS_RVAL_HDR_BYTES],
		    const void *payload, size_t len, const kvs_rval_info *want,
		    kvs_rval_info *got);

#endif /* KVS_REMOTE_VALUE_H */
