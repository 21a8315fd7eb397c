/*
 * ssd_format.c - the segment store's on-disk encoding (see kvs_ssd.h): the
 * record header and the segment superblock, and the check that a header
 * names the block a read asked for.
 */
#define _GNU_SOURCE
#include "ssd_int.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "kvs_le.h"

#define REC_MAGIC 0x4253564bu /* "KVSB" */
#define SB_MAGIC 0x5353564bu  /* "KVSS" */
#define FORMAT 1
/* The on-disk headers, little-endian (kvs_le.h) at fixed offsets; each
 * checksum is XXH3-64 of the bytes before it.
 *
 * A record's header, at the start of its 4 KiB header sector:
 *   0 magic u32, 4 format u16, 6 hdr_bytes u16, 8 ns u32, 12 len u32,
 *   16 hash lo u64, 24 hash hi u64, 32 csum u64 (XXH3-64 of the payload),
 *   40 gen u64 (segment generation when written), 48 off u64 (record offset:
 *   a read of the wrong place is caught), 56 seg u32, 60 pad u32 (0),
 *   64 hdr_csum u64. */
enum { RH_MAGIC = 0, RH_FORMAT = 4, RH_HDR_BYTES = 6, RH_NS = 8, RH_LEN = 12,
       RH_HASH = 16, RH_CSUM = 32, RH_GEN = 40, RH_OFF = 48, RH_SEG = 56,
       RH_PAD = 60, RH_HDR_CSUM = 64 };
/* A segment's superblock, at offset 0 of its file:
 *   0 magic u32, 4 format u16, 6 hdr_bytes u16, 8 seg u32,
 *   12 state u32 (SB_FREE or SB_USED), 16 seg_bytes u64, 24 gen u64,
 *   32 csum u64. */
enum { SB_MAGIC_AT = 0, SB_FORMAT = 4, SB_HDR_BYTES = 6, SB_SEG = 8,
       SB_STATE = 12, SB_SEG_BYTES = 16, SB_GEN = 24, SB_CSUM = 32 };
enum { SB_FREE = 0, SB_USED = 1 };

_Static_assert(RH_HDR_CSUM + 8 == KVS_SSD_HDR_BYTES, "record header size");
_Static_assert(SB_CSUM + 8 == KVS_SSD_SB_BYTES, "superblock size");

void kvs_ssd_header_encode(uint8_t *pg, const kvs_ssd_blk *b, const kvs_ssd_loc *l)
{
	memset(pg, 0, SECT);
	put32(pg + RH_MAGIC, REC_MAGIC);
	put16(pg + RH_FORMAT, FORMAT);
	put16(pg + RH_HDR_BYTES, KVS_SSD_HDR_BYTES);
	put32(pg + RH_NS, b->ns);
	put32(pg + RH_LEN, l->len);
	puth(pg + RH_HASH, b->hash);
	put64(pg + RH_CSUM, b->csum);
	put64(pg + RH_GEN, l->gen);
	put64(pg + RH_OFF, l->off);
	put32(pg + RH_SEG, l->seg);
	put64(pg + RH_HDR_CSUM, XXH3_64bits(pg, RH_HDR_CSUM));
}

/* Every field is checked that a writer of this format always sets: a header
 * that passes says where and what it is, so the read path only compares. */
int kvs_ssd_header_decode(const uint8_t *buf, size_t n, kvs_ssd_blk *b,
			  kvs_ssd_loc *l)
{
	uint32_t len;
	uint64_t off;

	if (n < KVS_SSD_HDR_BYTES)
		return -EBADMSG;
	len = get32(buf + RH_LEN);
	off = get64(buf + RH_OFF);
	if (get32(buf + RH_MAGIC) != REC_MAGIC || get16(buf + RH_FORMAT) != FORMAT ||
	    get16(buf + RH_HDR_BYTES) != KVS_SSD_HDR_BYTES ||
	    get64(buf + RH_HDR_CSUM) != XXH3_64bits(buf, RH_HDR_CSUM) ||
	    get32(buf + RH_PAD) != 0 || len == 0 || off < SECT || off % SECT)
		return -EBADMSG;
	*b = (kvs_ssd_blk){ .ns = get32(buf + RH_NS), .len = len,
			    .hash = geth(buf + RH_HASH), .csum = get64(buf + RH_CSUM) };
	*l = (kvs_ssd_loc){ .seg = get32(buf + RH_SEG), .len = len,
			    .gen = get64(buf + RH_GEN), .off = off };
	return 0;
}

int ssd_hdr_ok(const uint8_t *pg, const kvs_ssd_blk *b, const kvs_ssd_loc *l,
	       uint64_t *csum)
{
	kvs_ssd_blk hb;
	kvs_ssd_loc hl;

	if (kvs_ssd_header_decode(pg, SECT, &hb, &hl) < 0)
		return 0;
	*csum = hb.csum;
	return hb.ns == b->ns && hl.len == l->len && hb.hash.lo == b->hash.lo &&
	       hb.hash.hi == b->hash.hi && hl.gen == l->gen && hl.off == l->off &&
	       hl.seg == l->seg;
}

void kvs_ssd_sb_encode(uint8_t *pg, const kvs_ssd_sb *in)
{
	memset(pg, 0, SECT);
	put32(pg + SB_MAGIC_AT, SB_MAGIC);
	put16(pg + SB_FORMAT, FORMAT);
	put16(pg + SB_HDR_BYTES, KVS_SSD_SB_BYTES);
	put32(pg + SB_SEG, in->seg);
	put32(pg + SB_STATE, in->used ? SB_USED : SB_FREE);
	put64(pg + SB_SEG_BYTES, in->seg_bytes);
	put64(pg + SB_GEN, in->gen);
	put64(pg + SB_CSUM, XXH3_64bits(pg, SB_CSUM));
}

int kvs_ssd_sb_decode(const uint8_t *buf, size_t n, kvs_ssd_sb *out)
{
	uint32_t state;
	uint64_t seg_bytes;

	if (n < KVS_SSD_SB_BYTES)
		return -EBADMSG;
	state = get32(buf + SB_STATE);
	seg_bytes = get64(buf + SB_SEG_BYTES);
	if (get32(buf + SB_MAGIC_AT) != SB_MAGIC || get16(buf + SB_FORMAT) != FORMAT ||
	    get16(buf + SB_HDR_BYTES) != KVS_SSD_SB_BYTES ||
	    get64(buf + SB_CSUM) != XXH3_64bits(buf, SB_CSUM) || state > SB_USED ||
	    seg_bytes % SECT || seg_bytes < (64u << 10))
		return -EBADMSG;
	*out = (kvs_ssd_sb){ .seg = get32(buf + SB_SEG), .used = state == SB_USED,
			     .seg_bytes = seg_bytes, .gen = get64(buf + SB_GEN) };
	return 0;
}

void ssd_sb_put(uint8_t *pg, uint32_t seg, uint64_t seg_bytes, uint64_t gen)
{
	kvs_ssd_sb sb = { .seg = seg, .used = 1, .seg_bytes = seg_bytes, .gen = gen };

	kvs_ssd_sb_encode(pg, &sb);
}
