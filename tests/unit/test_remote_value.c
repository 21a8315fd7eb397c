/*
 * test_remote_value - the remote tier's key and value header: the key holds
 * the namespace fingerprint; encode, decode, seal, verify in both versions
 * (2: HMAC-SHA-256; 3: Poly1305 under a one-time key); every kind of
 * corruption caught; a value sealed without the secret, with another one,
 * with a correct unkeyed checksum, moved to another key, truncated, or
 * relabelled to the other version is rejected; a version 2 value verifies
 * under a key that writes version 3 (a rollout); each MAC recomputed with
 * OpenSSL's one-shot HMAC() and EVP_Q_mac() (the format's spec).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <xxhash.h>

#include "kvs_check.h"
#include "kvs_le.h"
#include "kvs_remote_value.h"

static const char SECRET[] = "0123456789abcdef0123456789abcdef";

/* The MAC as the header says, checked with OpenSSL's one-shot functions,
 * not the code under test. Version 2: HMAC-SHA-256 under the secret of the
 * header's first 64 bytes and the payload. Version 3: Poly1305 of its
 * first 80 bytes (the nonce included) and the payload under the key
 * HMAC-SHA-256(secret, "kvshare rval v3 otk" || those 80 bytes). */
static void spec_mac(const uint8_t *hdr, const uint8_t *payload, size_t len)
{
	static const char label[] = "kvshare rval v3 otk";
	uint8_t buf[KVS_RVAL_V3_SIGNED_BYTES + 65536], md[32], otk[32];
	unsigned int mdl = 0, olen = 0;
	size_t tl = 0;

	CHECK(len <= 65536);
	if (len > 65536)
		return;
	if (get16(hdr + 4) == KVS_RVAL_V_HMAC) {
		memcpy(buf, hdr, KVS_RVAL_SIGNED_BYTES);
		memcpy(buf + KVS_RVAL_SIGNED_BYTES, payload, len);
		CHECK(HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), buf,
			   KVS_RVAL_SIGNED_BYTES + len, md, &mdl) != NULL);
		CHECK_EQ(mdl, 32);
		CHECK(!memcmp(md, hdr + KVS_RVAL_SIGNED_BYTES, 32));
		return;
	}
	CHECK_EQ(get16(hdr + 4), KVS_RVAL_V_POLY1305);
	memcpy(buf, label, sizeof(label) - 1);
	memcpy(buf + sizeof(label) - 1, hdr, KVS_RVAL_V3_SIGNED_BYTES);
	CHECK(HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), buf,
		   sizeof(label) - 1 + KVS_RVAL_V3_SIGNED_BYTES, otk, &olen) != NULL);
	CHECK_EQ(olen, 32);
	memcpy(buf, hdr, KVS_RVAL_V3_SIGNED_BYTES);
	memcpy(buf + KVS_RVAL_V3_SIGNED_BYTES, payload, len);
	CHECK(EVP_Q_mac(NULL, "POLY1305", NULL, NULL, NULL, otk, sizeof(otk), buf,
			KVS_RVAL_V3_SIGNED_BYTES + len, md, sizeof(md), &tl) != NULL);
	CHECK_EQ(tl, 16);
	CHECK(!memcmp(md, hdr + KVS_RVAL_V3_SIGNED_BYTES, 16));
}

typedef struct macs {
	kvs_rval_mac *m, *other, *none;
} macs;

/* Key, fingerprint and secrets: no MAC computed yet. */
static void check_keys(macs *k)
{
	uint8_t key[KVS_RVAL_KEY_BYTES], key2[KVS_RVAL_KEY_BYTES];
	kvs_hash h = { .lo = 0x0706050403020100ull, .hi = 0x0f0e0d0c0b0a0908ull };
	kvs_ns_layout ns = { .model = "m", .model_len = 1, .adapter = "",
			     .layers = 2, .kv_heads = 2, .head_dim = 64,
			     .block_tokens = 16, .tp_size = 1, .dtype = 1 };
	uint64_t fp, fp2;

	/* the fingerprint: not 0, and the salt changes it */
	fp = kvs_rval_ns_fp(&ns);
	CHECK(fp != 0);
	ns.salt = (const uint8_t *)"tenant-y";
	ns.salt_len = 8;
	fp2 = kvs_rval_ns_fp(&ns);
	CHECK(fp2 != 0 && fp2 != fp);

	/* the key: prefix, fingerprint, hash; another namespace, another key */
	kvs_rval_key(key, 0x1122334455667788ull, h);
	CHECK_EQ(KVS_RVAL_KEY_BYTES, 29);
	CHECK(!memcmp(key, "kvs2:", 5));
	CHECK_EQ(key[5], 0x88);
	CHECK_EQ(key[12], 0x11);
	for (int i = 0; i < 16; i++)
		CHECK_EQ(key[13 + i], i);
	kvs_rval_key(key2, 0x1122334455667789ull, h);
	CHECK(memcmp(key, key2, sizeof(key)) != 0);

	/* secrets: too short refused; two secrets, two key ids; none is 0;
	 * version 3 written unless told, only 2 and 3 known */
	CHECK_EQ(kvs_rval_mac_create(SECRET, KVS_RVAL_SECRET_MIN - 1, &k->m), -EINVAL);
	CHECK_EQ(kvs_rval_mac_create(SECRET, strlen(SECRET), &k->m), 0);
	CHECK_EQ(kvs_rval_mac_create("another secret, also long", 25, &k->other), 0);
	CHECK_EQ(kvs_rval_mac_create(NULL, 0, &k->none), 0);
	CHECK(kvs_rval_mac_id(k->m) != 0);
	CHECK(kvs_rval_mac_id(k->other) != 0);
	CHECK(kvs_rval_mac_id(k->m) != kvs_rval_mac_id(k->other));
	CHECK_EQ(kvs_rval_mac_id(k->none), 0);
	CHECK_EQ(kvs_rval_mac_version(k->m), KVS_RVAL_V_POLY1305);
	CHECK_EQ(kvs_rval_mac_set_version(k->m, 1), -EINVAL);
	CHECK_EQ(kvs_rval_mac_set_version(k->m, 4), -EINVAL);
	CHECK_EQ(kvs_rval_mac_version(k->m), KVS_RVAL_V_POLY1305);
}

/* Every header byte flipped: caught, the parent's and the nonce's too
 * (they are signed); the fields the caller names are corrupt, the rest
 * fail the MAC. Then the payload and the caller's expectations. */
static void check_flips(const kvs_rval_mac *m, const uint8_t *hdr, uint8_t *payload,
			size_t len, kvs_rval_info want)
{
	uint8_t bad[KVS_RVAL_HDR_BYTES];

	for (int i = 0; i < KVS_RVAL_HDR_BYTES; i++) {
		int rc;

		memcpy(bad, hdr, sizeof(bad));
		bad[i] ^= 0x10;
		rc = kvs_rval_verify(m, bad, payload, len, &want, NULL);
		if (i < 40)
			CHECK_EQ(rc, -EBADMSG);
		else
			CHECK_EQ(rc, -EKEYREJECTED);
	}
	/* a payload bit, the first and the last byte */
	payload[len / 2] ^= 1;
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len, &want, NULL), -EKEYREJECTED);
	payload[len / 2] ^= 1;
	payload[0] ^= 0x80;
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len, &want, NULL), -EKEYREJECTED);
	payload[0] ^= 0x80;
	payload[len - 1] ^= 0x01;
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len, &want, NULL), -EKEYREJECTED);
	payload[len - 1] ^= 0x01;
	/* truncated: a short payload, and a header that says so too (its MAC
	 * no longer verifies) */
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len - 1, &want, NULL), -EBADMSG);
	memcpy(bad, hdr, sizeof(bad));
	put64(bad + 8, len - 1);
	want.block_bytes = len - 1;
	CHECK_EQ(kvs_rval_verify(m, bad, payload, len - 1, &want, NULL), -EKEYREJECTED);
	want.block_bytes = len;
	/* moved to another key: another namespace or block expected */
	want.ns_fp++;
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len, &want, NULL), -EBADMSG);
	want.ns_fp--;
	want.hash.hi++;
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len, &want, NULL), -EBADMSG);
	want.hash.hi--;
	want.block_bytes = len * 2;
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len, &want, NULL), -EBADMSG);
}

/* A value moved to another key with its header rewritten to match (the
 * forger knows every field but the secret): the MAC fails. */
static void check_moved(const kvs_rval_mac *m, const uint8_t *hdr, const uint8_t *payload,
			size_t len, kvs_rval_info want)
{
	uint8_t bad[KVS_RVAL_HDR_BYTES];

	memcpy(bad, hdr, sizeof(bad));
	want.hash.lo ^= 0x55;
	puth(bad + 24, want.hash);
	CHECK_EQ(kvs_rval_verify(m, bad, payload, len, &want, NULL), -EKEYREJECTED);
	want.hash.lo ^= 0x55;
	want.ns_fp ^= 0x100;
	memcpy(bad, hdr, sizeof(bad));
	put64(bad + 16, want.ns_fp);
	CHECK_EQ(kvs_rval_verify(m, bad, payload, len, &want, NULL), -EKEYREJECTED);
}
/* Forgeries: another secret's values, our key id without our MAC, an
 * unkeyed checksum in the MAC's place, unauthenticated values. */
static void check_forged(macs *k, const uint8_t *hdr, const uint8_t *payload, size_t len,
			 const kvs_rval_info *info)
{
	uint8_t bad[KVS_RVAL_HDR_BYTES];
	kvs_rval_info got;

	CHECK_EQ(kvs_rval_verify(k->other, hdr, payload, len, info, &got), -EKEYREJECTED);
	CHECK_EQ(got.key_id, kvs_rval_mac_id(k->m));
	CHECK_EQ(kvs_rval_seal(k->other, info, payload, bad), 0);
	CHECK_EQ(kvs_rval_verify(k->m, bad, payload, len, info, NULL), -EKEYREJECTED);
	CHECK_EQ(kvs_rval_verify(k->other, bad, payload, len, info, NULL), 0);
	put64(bad + 56, kvs_rval_mac_id(k->m));
	CHECK_EQ(kvs_rval_verify(k->m, bad, payload, len, info, NULL), -EKEYREJECTED);
	memcpy(bad, hdr, sizeof(bad));
	memset(bad + KVS_RVAL_SIGNED_BYTES, 0, KVS_RVAL_MAC_BYTES);
	put64(bad + KVS_RVAL_SIGNED_BYTES, XXH3_64bits(payload, len));
	put64(bad + KVS_RVAL_V3_SIGNED_BYTES, XXH3_64bits(payload, len));
	CHECK_EQ(kvs_rval_verify(k->m, bad, payload, len, info, NULL), -EKEYREJECTED);
	/* unauthenticated values: anyone computes them, a keyed daemon
	 * refuses them, and the other way round */
	CHECK_EQ(kvs_rval_seal(k->none, info, payload, bad), 0);
	CHECK_EQ(kvs_rval_verify(k->none, bad, payload, len, info, NULL), 0);
	CHECK_EQ(kvs_rval_verify(k->m, bad, payload, len, info, NULL), -EKEYREJECTED);
	CHECK_EQ(kvs_rval_verify(k->none, hdr, payload, len, info, NULL), -EKEYREJECTED);
}

/* One version end to end; its sealed header into @hdr. */
static void check_version(macs *k, int version, uint8_t *payload, size_t len,
			  uint8_t hdr[KVS_RVAL_HDR_BYTES])
{
	kvs_hash h = { .lo = 0x0706050403020100ull, .hi = 0x0f0e0d0c0b0a0908ull };
	kvs_rval_info info = { .block_bytes = len, .ns_fp = 0x1234567890abcdefull,
			       .hash = h, .parent = { 7, 8 } }, got, want;
	uint8_t again[KVS_RVAL_HDR_BYTES];

	CHECK_EQ(kvs_rval_mac_set_version(k->m, version), 0);
	CHECK_EQ(kvs_rval_mac_set_version(k->other, version), 0);
	CHECK_EQ(kvs_rval_mac_set_version(k->none, version), 0);
	CHECK_EQ(kvs_rval_seal(k->m, &info, payload, hdr), 0);
	CHECK(!memcmp(hdr, "KVR2", 4));
	CHECK_EQ(kvs_rval_decode(hdr, &got), 0);
	CHECK_EQ(got.version, version);
	CHECK_EQ(got.block_bytes, len);
	CHECK_EQ(got.ns_fp, info.ns_fp);
	CHECK_EQ(got.key_id, kvs_rval_mac_id(k->m));
	spec_mac(hdr, payload, len);
	/* encode(decode(x)) is x */
	kvs_rval_encode(again, &got);
	CHECK(!memcmp(again, hdr, KVS_RVAL_HDR_BYTES));
	want = info;
	want.parent = (kvs_hash){ 0, 0 }; /* not compared */
	CHECK_EQ(kvs_rval_verify(k->m, hdr, payload, len, &want, &got), 0);
	CHECK_EQ(got.parent.lo, 7);
	/* version 3 seals the same block with a fresh nonce each time: both
	 * verify, no two share a one-time key */
	CHECK_EQ(kvs_rval_seal(k->m, &info, payload, again), 0);
	CHECK_EQ(kvs_rval_verify(k->m, again, payload, len, &want, NULL), 0);
	if (version == KVS_RVAL_V_POLY1305)
		CHECK(memcmp(again + KVS_RVAL_SIGNED_BYTES, hdr + KVS_RVAL_SIGNED_BYTES,
			     KVS_RVAL_NONCE_BYTES) != 0);
	else
		CHECK(!memcmp(again, hdr, KVS_RVAL_HDR_BYTES));
	check_flips(k->m, hdr, payload, len, want);
	check_moved(k->m, hdr, payload, len, want);
	check_forged(k, hdr, payload, len, &info);
}

int main(void)
{
	uint8_t v2[KVS_RVAL_HDR_BYTES], v3[KVS_RVAL_HDR_BYTES], bad[KVS_RVAL_HDR_BYTES];
	size_t len = 65536;
	uint8_t *payload = malloc(len);
	kvs_rval_info want, got;
	macs k = { 0 };

	kvs_test_seed("test_remote_value");
	srand((unsigned)kvs_seed);
	for (size_t i = 0; i < len; i++)
		payload[i] = (uint8_t)rand();
	check_keys(&k);
	check_version(&k, KVS_RVAL_V_HMAC, payload, len, v2);
	check_version(&k, KVS_RVAL_V_POLY1305, payload, len, v3);
	CHECK_EQ(kvs_rval_decode(v3, &want), 0);

	/* a rollout: a daemon writing version 3 reads version 2 values */
	CHECK_EQ(kvs_rval_mac_version(k.m), KVS_RVAL_V_POLY1305);
	CHECK_EQ(kvs_rval_verify(k.m, v2, payload, len, &want, &got), 0);
	CHECK_EQ(got.version, KVS_RVAL_V_HMAC);
	/* a value relabelled to the other version fails its MAC (the MACs
	 * are of different inputs: neither stands for the other) */
	memcpy(bad, v3, sizeof(bad));
	put16(bad + 4, KVS_RVAL_V_HMAC);
	CHECK_EQ(kvs_rval_verify(k.m, bad, payload, len, &want, NULL), -EKEYREJECTED);
	memcpy(bad, v2, sizeof(bad));
	put16(bad + 4, KVS_RVAL_V_POLY1305);
	CHECK_EQ(kvs_rval_verify(k.m, bad, payload, len, &want, NULL), -EKEYREJECTED);
	/* versions other than 2 and 3, and the old format's magic: not ours */
	for (int v = 0; v < 8; v++) {
		memcpy(bad, v3, sizeof(bad));
		put16(bad + 4, (uint16_t)v);
		CHECK_EQ(kvs_rval_decode(bad, &got), v == 2 || v == 3 ? 0 : -EBADMSG);
	}
	memcpy(bad, v3, sizeof(bad));
	memcpy(bad, "KVR1", 4);
	CHECK_EQ(kvs_rval_decode(bad, &got), -EBADMSG);

	kvs_rval_mac_free(k.m);
	kvs_rval_mac_free(k.other);
	kvs_rval_mac_free(k.none);
	free(payload);
	return check_summary("test_remote_value");
}
