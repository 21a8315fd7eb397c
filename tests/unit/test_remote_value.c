/*
 * test_remote_value - the remote tier's key and value header: encode,
 * decode, verify, and every kind of corruption caught.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_check.h"
#include "kvs_remote_value.h"

int main(void)
{
	uint8_t key[KVS_RVAL_KEY_BYTES], hdr[KVS_RVAL_HDR_BYTES], bad[KVS_RVAL_HDR_BYTES];
	kvs_hash h = { .lo = 0x0706050403020100ull, .hi = 0x0f0e0d0c0b0a0908ull };
	size_t len = 65536;
	uint8_t *payload = malloc(len);
	kvs_rval_info info, got, want;

	kvs_test_seed("test_remote_value");
	srand((unsigned)kvs_seed);
	for (size_t i = 0; i < len; i++)
		payload[i] = (uint8_t)rand();

	kvs_rval_key(key, h);
	CHECK_EQ(KVS_RVAL_KEY_BYTES, 21);
	CHECK(!memcmp(key, "kvs1:", 5));
	for (int i = 0; i < 16; i++)
		CHECK_EQ(key[5 + i], i);

	info = (kvs_rval_info){ .block_bytes = len, .ns_fp = 0x1234567890abcdefull,
				.hash = h, .parent = { 7, 8 },
				.csum = kvs_rval_csum(payload, len) };
	kvs_rval_encode(hdr, &info);
	CHECK(!memcmp(hdr, "KVR1", 4));
	CHECK_EQ(kvs_rval_decode(hdr, &got), 0);
	CHECK(!memcmp(&got, &info, sizeof(got)));
	want = info;
	want.csum = 0;
	want.parent = (kvs_hash){ 0, 0 }; /* not compared */
	CHECK_EQ(kvs_rval_verify(hdr, payload, len, &want, &got), 0);
	CHECK_EQ(got.parent.lo, 7);

	/* every header byte flipped: caught, except the parent's */
	for (int i = 0; i < KVS_RVAL_HDR_BYTES; i++) {
		memcpy(bad, hdr, sizeof(bad));
		bad[i] ^= 0x10;
		if (i >= 40 && i < 56)
			CHECK_EQ(kvs_rval_verify(bad, payload, len, &want, NULL), 0);
		else
			CHECK_EQ(kvs_rval_verify(bad, payload, len, &want, NULL), -EBADMSG);
	}
	/* a payload bit, a short payload, another block's expectations */
	payload[len / 2] ^= 1;
	CHECK_EQ(kvs_rval_verify(hdr, payload, len, &want, NULL), -EBADMSG);
	payload[len / 2] ^= 1;
	CHECK_EQ(kvs_rval_verify(hdr, payload, len - 1, &want, NULL), -EBADMSG);
	want.ns_fp++;
	CHECK_EQ(kvs_rval_verify(hdr, payload, len, &want, NULL), -EBADMSG);
	want.ns_fp--;
	want.hash.hi++;
	CHECK_EQ(kvs_rval_verify(hdr, payload, len, &want, NULL), -EBADMSG);
	want.hash.hi--;
	want.block_bytes = len * 2;
	CHECK_EQ(kvs_rval_verify(hdr, payload, len, &want, NULL), -EBADMSG);
	free(payload);
	return check_summary("test_remote_value");
}
