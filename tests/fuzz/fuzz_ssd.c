/*
 * fuzz_ssd - libFuzzer target for the SSD tier's on-disk decoders: the record
 * header and the segment superblock (storage/ssd/ssd_format.c, kvs_ssd.h), and the
 * LMDB index's keys and values (storage/ssd/index.c, kvs_index.h).
 *
 * Each input is read as every one of them: a record header (the first
 * KVS_SSD_HDR_BYTES), a superblock (the first KVS_SSD_SB_BYTES), an index
 * value (the whole input, and the bytes after a 20-byte key), an index key.
 * Both sector formats end in an XXH3-64 of what precedes it, which random
 * bytes almost never match; so each sector decoder also runs on a copy
 * whose checksum is set right, to reach the field checks behind it.
 *
 * Whatever decodes is encoded again and must give the same bytes, and must
 * satisfy what the decoder promises (nonzero length, aligned offset, ...):
 * the read path only compares a decoded header with what it asked for, so a
 * decoder that let an impossible header through would be trusted. A mismatch
 * aborts (this is a fuzz target, not library code).
 *
 * Build and run: tests/fuzz/run.sh. Without clang, tests/fuzz/replay.c turns
 * this file into a program that replays the seed corpus.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvs_index.h"
#include "kvs_ssd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_ssd: %s\n", what);
	abort();
}

static void same(const char *what, const uint8_t *a, const uint8_t *b, size_t n)
{
	if (memcmp(a, b, n) != 0)
		fail(what);
}

/* The offset of each format's own checksum: the last 8 bytes. */
#define HDR_CSUM_AT (KVS_SSD_HDR_BYTES - 8)
#define SB_CSUM_AT (KVS_SSD_SB_BYTES - 8)

static void check_header(const uint8_t *p, size_t n)
{
	static uint8_t sec[KVS_SSD_SECTOR];
	kvs_ssd_blk b, b2;
	kvs_ssd_loc l, l2;

	if (kvs_ssd_header_decode(p, n, &b, &l) != 0)
		return;
	if (n < KVS_SSD_HDR_BYTES)
		fail("header: decoded from fewer bytes than a header");
	if (b.len == 0 || b.len != l.len || l.off < KVS_SSD_SECTOR ||
	    l.off % KVS_SSD_SECTOR)
		fail("header: decoded an impossible record");
	kvs_ssd_header_encode(sec, &b, &l);
	same("header: re-encoding gives other bytes", p, sec, KVS_SSD_HDR_BYTES);
	if (kvs_ssd_header_decode(sec, sizeof(sec), &b2, &l2) != 0 ||
	    memcmp(&b, &b2, sizeof(b)) != 0 || memcmp(&l, &l2, sizeof(l)) != 0)
		fail("header: its own encoding does not decode the same");
}

static void check_sb(const uint8_t *p, size_t n)
{
	static uint8_t sec[KVS_SSD_SECTOR];
	kvs_ssd_sb sb, sb2;

	if (kvs_ssd_sb_decode(p, n, &sb) != 0)
		return;
	if (n < KVS_SSD_SB_BYTES)
		fail("superblock: decoded from fewer bytes than a superblock");
	if (sb.used > 1 || sb.seg_bytes % KVS_SSD_SECTOR || sb.seg_bytes < (64u << 10))
		fail("superblock: decoded an impossible superblock");
	kvs_ssd_sb_encode(sec, &sb);
	same("superblock: re-encoding gives other bytes", p, sec, KVS_SSD_SB_BYTES);
	if (kvs_ssd_sb_decode(sec, sizeof(sec), &sb2) != 0 ||
	    memcmp(&sb, &sb2, sizeof(sb)) != 0)
		fail("superblock: its own encoding does not decode the same");
}

static void check_val(const uint8_t *p, size_t n)
{
	uint8_t out[KVS_INDEX_VAL_BYTES];
	kvs_index_val v;

	if (kvs_index_val_decode(p, n, &v) != 0)
		return;
	if (n != KVS_INDEX_VAL_BYTES)
		fail("index value: decoded from the wrong size");
	if (v.len == 0 || v.gen == 0 || v.off < 4096 || v.off % 4096)
		fail("index value: decoded an impossible location");
	kvs_index_val_encode(out, &v);
	same("index value: re-encoding gives other bytes", p, out, n);
}

static void check_key(const uint8_t *p, size_t n)
{
	uint8_t out[KVS_INDEX_KEY_BYTES];
	kvs_index_key k;

	if (kvs_index_key_decode(p, n, &k) != 0)
		return;
	if (n != KVS_INDEX_KEY_BYTES)
		fail("index key: decoded from the wrong size");
	kvs_index_key_encode(out, &k);
	same("index key: re-encoding gives other bytes", p, out, n);
}

/* A copy of the first @len bytes with the XXH3-64 of the bytes before
 * @at written at @at, as the encoders do. */
static void with_csum(const uint8_t *p, size_t n, size_t len, size_t at,
		      void (*check)(const uint8_t *, size_t))
{
	uint8_t buf[KVS_SSD_HDR_BYTES];
	uint64_t sum;

	if (n < len)
		return;
	memcpy(buf, p, len);
	sum = XXH3_64bits(buf, at);
	memcpy(buf + at, &sum, 8); /* the format is little-endian */
	check(buf, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Each decoder reads exactly the bytes it is given: a heap copy of
	 * that size, so that ASan sees any read past them. */
	uint8_t *p = malloc(size ? size : 1);

	if (!p)
		return 0;
	memcpy(p, data, size);
	check_header(p, size);
	check_sb(p, size);
	check_val(p, size);
	check_key(p, size < KVS_INDEX_KEY_BYTES ? size : KVS_INDEX_KEY_BYTES);
	if (size >= KVS_INDEX_KEY_BYTES)
		check_val(p + KVS_INDEX_KEY_BYTES, size - KVS_INDEX_KEY_BYTES);
	with_csum(p, size, KVS_SSD_HDR_BYTES, HDR_CSUM_AT, check_header);
	with_csum(p, size, KVS_SSD_SB_BYTES, SB_CSUM_AT, check_sb);
	free(p);
	return 0;
}
