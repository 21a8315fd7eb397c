/*
 * test_remote_value - the remote tier's key and value header: the key holds
 * the namespace fingerprint; encode, decode, seal, verify; every kind of
 * corruption caught; a value sealed without the secret, with another one,
 * or with a correct unkeyed checksum is rejected; HMAC-SHA-256 itself
 * recomputed with OpenSSL's one-shot HMAC() (the format's spec).
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

/* The MAC is HMAC-SHA-256 under the secret of the header's first 64
 * bytes and the payload, as the header says: checked with OpenSSL's
 * one-shot HMAC(), not the code under test. */
static void spec_mac(const uint8_t *hdr, const uint8_t *payload, size_t len)
{
	uint8_t buf[KVS_RVAL_SIGNED_BYTES + 65536], md[32];
	unsigned int mdl = 0;

	CHECK(len <= 65536);
	if (len > 65536)
		return;
	memcpy(buf, hdr, KVS_RVAL_SIGNED_BYTES);
	memcpy(buf + KVS_RVAL_SIGNED_BYTES, payload, len);
	CHECK(HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), buf,
		   KVS_RVAL_SIGNED_BYTES + len, md, &mdl) != NULL);
	CHECK_EQ(mdl, 32);
	CHECK(!memcmp(md, hdr + KVS_RVAL_SIGNED_BYTES, 32));
}

int main(void)
{
	uint8_t key[KVS_RVAL_KEY_BYTES], key2[KVS_RVAL_KEY_BYTES];
	uint8_t hdr[KVS_RVAL_HDR_BYTES], bad[KVS_RVAL_HDR_BYTES];
	kvs_hash h = { .lo = 0x0706050403020100ull, .hi = 0x0f0e0d0c0b0a0908ull };
	size_t len = 65536;
	uint8_t *payload = malloc(len);
	kvs_rval_info info, got, want;
	kvs_rval_mac *m, *other, *none;
	kvs_nsfile_ns ns = { .model = "m", .model_len = 1, .adapter = "",
			     .layers = 2, .kv_heads = 2, .head_dim = 64,
			     .block_tokens = 16, .tp_size = 1, .dtype = 1 };
	uint64_t fp, fp2;

	kvs_test_seed("test_remote_value");
	srand((unsigned)kvs_seed);
	for (size_t i = 0; i < len; i++)
		payload[i] = (uint8_t)rand();

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

	/* secrets: too short refused; two secrets, two key ids; none is 0 */
	CHECK_EQ(kvs_rval_mac_create(SECRET, KVS_RVAL_SECRET_MIN - 1, &m), -EINVAL);
	CHECK_EQ(kvs_rval_mac_create(SECRET, strlen(SECRET), &m), 0);
	CHECK_EQ(kvs_rval_mac_create("another secret, also long", 25, &other), 0);
	CHECK_EQ(kvs_rval_mac_create(NULL, 0, &none), 0);
	CHECK(kvs_rval_mac_id(m) != 0);
	CHECK(kvs_rval_mac_id(other) != 0);
	CHECK(kvs_rval_mac_id(m) != kvs_rval_mac_id(other));
	CHECK_EQ(kvs_rval_mac_id(none), 0);

	info = (kvs_rval_info){ .block_bytes = len, .ns_fp = 0x1234567890abcdefull,
				.hash = h, .parent = { 7, 8 } };
	CHECK_EQ(kvs_rval_seal(m, &info, payload, hdr), 0);
	CHECK(!memcmp(hdr, "KVR2", 4));
	CHECK_EQ(kvs_rval_decode(hdr, &got), 0);
	CHECK_EQ(got.block_bytes, len);
	CHECK_EQ(got.ns_fp, info.ns_fp);
	CHECK_EQ(got.key_id, kvs_rval_mac_id(m));
	spec_mac(hdr, payload, len);
	/* encode(decode(x)) is x */
	kvs_rval_encode(bad, &got);
	CHECK(!memcmp(bad, hdr, sizeof(hdr)));
	want = info;
	want.parent = (kvs_hash){ 0, 0 }; /* not compared */
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len, &want, &got), 0);
	CHECK_EQ(got.parent.lo, 7);

	/* every header byte flipped: caught, the parent's too (it is signed);
	 * the fields the caller names are corrupt, the rest fail the MAC */
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
	/* a payload bit, a short payload, another block's expectations */
	payload[len / 2] ^= 1;
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len, &want, NULL), -EKEYREJECTED);
	payload[len / 2] ^= 1;
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len - 1, &want, NULL), -EBADMSG);
	want.ns_fp++;
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len, &want, NULL), -EBADMSG);
	want.ns_fp--;
	want.hash.hi++;
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len, &want, NULL), -EBADMSG);
	want.hash.hi--;
	want.block_bytes = len * 2;
	CHECK_EQ(kvs_rval_verify(m, hdr, payload, len, &want, NULL), -EBADMSG);
	want.block_bytes = len;

	/* another secret: its values are rejected here, ours there */
	CHECK_EQ(kvs_rval_verify(other, hdr, payload, len, &want, &got), -EKEYREJECTED);
	CHECK_EQ(got.key_id, kvs_rval_mac_id(m));
	CHECK_EQ(kvs_rval_seal(other, &info, payload, bad), 0);
	CHECK_EQ(kvs_rval_verify(m, bad, payload, len, &want, NULL), -EKEYREJECTED);
	CHECK_EQ(kvs_rval_verify(other, bad, payload, len, &want, NULL), 0);
	/* a forger who copies our key id but not the MAC */
	put64(bad + 56, kvs_rval_mac_id(m));
	CHECK_EQ(kvs_rval_verify(m, bad, payload, len, &want, NULL), -EKEYREJECTED);
	/* a forger with a correct unkeyed XXH3 in the MAC's place (the old
	 * format's check): rejected */
	memcpy(bad, hdr, sizeof(bad));
	memset(bad + KVS_RVAL_SIGNED_BYTES, 0, KVS_RVAL_MAC_BYTES);
	put64(bad + KVS_RVAL_SIGNED_BYTES, XXH3_64bits(payload, len));
	CHECK_EQ(kvs_rval_verify(m, bad, payload, len, &want, NULL), -EKEYREJECTED);
	/* unauthenticated values: anyone computes them, a keyed daemon
	 * refuses them, and the other way round */
	CHECK_EQ(kvs_rval_seal(none, &info, payload, bad), 0);
	CHECK_EQ(kvs_rval_verify(none, bad, payload, len, &want, NULL), 0);
	CHECK_EQ(kvs_rval_verify(m, bad, payload, len, &want, NULL), -EKEYREJECTED);
	CHECK_EQ(kvs_rval_verify(none, hdr, payload, len, &want, NULL), -EKEYREJECTED);
	/* the old format's header is not ours */
	memcpy(bad, hdr, sizeof(bad));
	memcpy(bad, "KVR1", 4);
	CHECK_EQ(kvs_rval_decode(bad, &got), -EBADMSG);

	kvs_rval_mac_free(m);
	kvs_rval_mac_free(other);
	kvs_rval_mac_free(none);
	free(payload);
	return check_summary("test_remote_value");
}
