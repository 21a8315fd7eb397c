/*
 * test_wire - the wire codec (proto/wire.c): round trips of every encoder and
 * decoder, every decode error path, the byte layout, and kvs_strerror().
 * Exit 0 pass, 1 fail.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_wire.h"
#include "kvs_check.h"
#include "kvs_types.h"


#define HELLO_FIXED 40 /* flags, 7 x u32, 3 x u16 lengths, u16 pad */

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t le(const uint8_t *p, int bytes)
{
	uint32_t v = 0;

	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void test_hdr(void)
{
	kvs_wire_hdr h = { .magic = KVS_WIRE_MAGIC, .version = KVS_WIRE_VERSION,
			   .opcode = KVS_OP_RESERVE, .len = 1234,
			   .status = KVS_E_FULL, .req_id = 0x0102030405060708ull };
	kvs_wire_hdr d;
	uint8_t b[KVS_WIRE_HDR_SIZE];

	kvs_wire_hdr_encode(&h, b);
	/* Little-endian, magic first: the bytes "KVS1". */
	CHECK(!memcmp(b, "KVS1", 4));
	CHECK(b[4] == KVS_WIRE_VERSION && b[5] == 0);
	CHECK(b[6] == KVS_OP_RESERVE && b[7] == 0);
	CHECK(b[8] == (1234 & 0xff) && b[9] == (1234 >> 8));
	CHECK(b[16] == 0x08 && b[23] == 0x01);
	CHECK(kvs_wire_hdr_decode(b, sizeof(b), KVS_WIRE_MAX_PAYLOAD, &d) == 0);
	CHECK(d.magic == h.magic && d.version == h.version);
	CHECK(d.opcode == h.opcode && d.len == h.len);
	CHECK(d.status == KVS_E_FULL && d.req_id == h.req_id);

	/* Short buffer: not an error yet, wait for more. */
	CHECK(kvs_wire_hdr_decode(b, KVS_WIRE_HDR_SIZE - 1, 1 << 20, &d) == -EAGAIN);
	CHECK(kvs_wire_hdr_decode(b, 0, 1 << 20, &d) == -EAGAIN);

	/* Length exactly at the limit is fine; one over is not, and the header
	 * is still filled so that the answer can carry the request's id. */
	CHECK(kvs_wire_hdr_decode(b, sizeof(b), 1234, &d) == 0);
	memset(&d, 0, sizeof(d));
	CHECK(kvs_wire_hdr_decode(b, sizeof(b), 1233, &d) == KVS_E_TOOBIG);
	CHECK(d.req_id == h.req_id && d.opcode == KVS_OP_RESERVE);

	h.version = KVS_WIRE_VERSION + 1;
	kvs_wire_hdr_encode(&h, b);
	memset(&d, 0, sizeof(d));
	CHECK(kvs_wire_hdr_decode(b, sizeof(b), 1 << 20, &d) == KVS_E_VERSION);
	CHECK(d.req_id == h.req_id && d.version == KVS_WIRE_VERSION + 1);

	h.version = KVS_WIRE_VERSION;
	h.magic = 0x3153564c;
	kvs_wire_hdr_encode(&h, b);
	CHECK(kvs_wire_hdr_decode(b, sizeof(b), 1 << 20, &d) == KVS_E_PROTO);

	/* Status is signed on the wire. */
	h.magic = KVS_WIRE_MAGIC;
	h.status = -ENOMEM;
	kvs_wire_hdr_encode(&h, b);
	CHECK(kvs_wire_hdr_decode(b, sizeof(b), 1 << 20, &d) == 0 &&
	      d.status == -ENOMEM);
}

/* A full layout: decoded as encoded, its bytes as docs/protocol.md gives
 * them; an exact fit works, one byte short is -ENOBUFS. */
static void hello_round_trip(const kvs_layout *l, uint8_t *b, size_t size)
{
	kvs_wire_hello d;
	int n;

	n = kvs_wire_hello_encode(l, b, size);
	CHECK(n == HELLO_FIXED + 10 + 6 + 8);
	CHECK(kvs_wire_hello_decode(b, (size_t)n, &d) == 0);
	CHECK(d.flags == 0 && d.layers == 32 && d.kv_heads == 8);
	CHECK(d.head_dim == 128 && d.block_tokens == 16);
	CHECK(d.tp_rank == 1 && d.tp_size == 2 && d.dtype == KVS_DTYPE_BF16);
	CHECK(d.model_len == 10 && !memcmp(d.model, "llama-3-8b", 10));
	CHECK(d.adapter_len == 6 && !memcmp(d.adapter, "lora-7", 6));
	CHECK(d.salt_len == 8 && !memcmp(d.salt, "tenant-a", 8));
	/* The bytes as docs/protocol.md gives them (the namespace records of
	 * kvs_ns.h store the seven numbers in this order too). */
	{
		static const uint32_t dims[7] = { 32, 8, 128, 16, 1, 2, KVS_DTYPE_BF16 };

		CHECK(le(b, 4) == 0);
		for (int i = 0; i < 7; i++)
			CHECK(le(b + 4 + 4 * i, 4) == dims[i]);
		CHECK(le(b + 32, 2) == 10 && le(b + 34, 2) == 6 && le(b + 36, 2) == 8);
		CHECK(!memcmp(b + HELLO_FIXED, "llama-3-8blora-7tenant-a", 24));
	}

	/* Exact fit works, one byte short is -ENOBUFS. */
	CHECK(kvs_wire_hello_encode(l, b, (size_t)n) == n);
	CHECK(kvs_wire_hello_encode(l, b, (size_t)n - 1) == -ENOBUFS);
}

/* Optional strings absent (l keeps them so), and a control-only HELLO with
 * no layout. */
static void hello_optional(kvs_layout *l, uint8_t *b, size_t size)
{
	kvs_wire_hello d;
	int n;

	/* Optional strings absent. */
	l->adapter = NULL;
	l->salt = NULL;
	n = kvs_wire_hello_encode(l, b, size);
	CHECK(n == HELLO_FIXED + 10);
	CHECK(kvs_wire_hello_decode(b, (size_t)n, &d) == 0);
	CHECK(d.adapter_len == 0 && d.salt_len == 0);

	/* Control-only: no layout. */
	n = kvs_wire_hello_encode(NULL, b, size);
	CHECK(n == HELLO_FIXED);
	CHECK(kvs_wire_hello_decode(b, (size_t)n, &d) == 0);
	CHECK(d.flags == KVS_HELLO_CONTROL && d.model_len == 0 && d.layers == 0);
	CHECK(kvs_wire_hello_encode(NULL, b, HELLO_FIXED - 1) == -ENOBUFS);
}

/* Strings: KVS_NAME_MAX is allowed, one more is not; l's strings are put
 * back at the end. */
static void hello_name_limits(kvs_layout *l, uint8_t *b, size_t size)
{
	char longname[KVS_NAME_MAX + 2];
	kvs_wire_hello d;
	int n;

	memset(longname, 'x', sizeof(longname));
	longname[KVS_NAME_MAX] = '\0';
	l->salt = longname;
	n = kvs_wire_hello_encode(l, b, size);
	CHECK(n == HELLO_FIXED + 10 + KVS_NAME_MAX);
	CHECK(kvs_wire_hello_decode(b, (size_t)n, &d) == 0 &&
	      d.salt_len == KVS_NAME_MAX);
	longname[KVS_NAME_MAX] = 'x';
	longname[KVS_NAME_MAX + 1] = '\0';
	CHECK(kvs_wire_hello_encode(l, b, size) == -EINVAL);
	l->salt = NULL;
	l->model = longname;
	CHECK(kvs_wire_hello_encode(l, b, size) == -EINVAL);
	l->model = "llama-3-8b";
	l->adapter = longname;
	CHECK(kvs_wire_hello_encode(l, b, size) == -EINVAL);
	l->adapter = "lora-7";
	l->salt = "tenant-a";
}

/* Decode errors: lengths, flags, the pad, a string length over the limit. */
static void hello_decode_errors(const kvs_layout *l, uint8_t *b, size_t size)
{
	kvs_wire_hello d;
	int n;

	n = kvs_wire_hello_encode(l, b, size);
	CHECK(kvs_wire_hello_decode(b, HELLO_FIXED - 1, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_hello_decode(b, 0, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_hello_decode(b, (size_t)n - 1, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_hello_decode(b, (size_t)n + 1, &d) == KVS_E_PROTO);
	b[0] = 0x4; /* unknown flag */
	CHECK(kvs_wire_hello_decode(b, (size_t)n, &d) == KVS_E_PROTO);
	b[0] = 0x3; /* GPU with CONTROL */
	CHECK(kvs_wire_hello_decode(b, (size_t)n, &d) == KVS_E_PROTO);
	b[0] = 0x2; /* GPU: a worker that maps the GPU arena */
	CHECK(kvs_wire_hello_decode(b, (size_t)n, &d) == 0 &&
	      d.flags == KVS_HELLO_GPU);
	CHECK(kvs_wire_hello_encode_flags(l, KVS_HELLO_GPU, b, size) == n &&
	      b[0] == 0x2);
	CHECK(kvs_wire_hello_encode_flags(NULL, KVS_HELLO_GPU, b, size) == -EINVAL);
	CHECK(kvs_wire_hello_encode_flags(l, 0x4, b, size) == -EINVAL);
	n = kvs_wire_hello_encode(l, b, size);
	b[0] = 0x80;
	CHECK(kvs_wire_hello_decode(b, (size_t)n, &d) == KVS_E_PROTO);
	b[0] = 0;
	b[38] = 1; /* pad must be zero */
	CHECK(kvs_wire_hello_decode(b, (size_t)n, &d) == KVS_E_PROTO);
	b[38] = 0;
	CHECK(kvs_wire_hello_decode(b, (size_t)n, &d) == 0);
	/* A string length over the limit, with the payload sized to match. */
	b[36] = (KVS_NAME_MAX + 1) & 0xff;
	b[37] = (KVS_NAME_MAX + 1) >> 8;
	CHECK(kvs_wire_hello_decode(b, HELLO_FIXED + 10 + 6 + KVS_NAME_MAX + 1,
				    &d) == KVS_E_PROTO);
	b[32] = 0xff;
	b[33] = 0xff;
	CHECK(kvs_wire_hello_decode(b, size, &d) == KVS_E_PROTO);
}

static void test_hello(void)
{
	kvs_layout l = { .model = "llama-3-8b", .adapter = "lora-7",
			 .salt = "tenant-a", .layers = 32, .kv_heads = 8,
			 .head_dim = 128, .block_tokens = 16, .tp_rank = 1,
			 .tp_size = 2, .dtype = KVS_DTYPE_BF16 };
	uint8_t b[2048];

	hello_round_trip(&l, b, sizeof(b));
	hello_optional(&l, b, sizeof(b));
	hello_name_limits(&l, b, sizeof(b));
	hello_decode_errors(&l, b, sizeof(b));
}

static void test_hello_reply(void)
{
	kvs_wire_hello_reply r = { .ns_id = 7, .arena_count = 1,
				   .block_bytes = 2u << 20,
				   .host_arena_bytes = 64ull << 30,
				   .host_arena_id = 0xdeadbeefcafef00dull };
	kvs_wire_hello_reply d;
	uint8_t b[64];
	int n;

	n = kvs_wire_hello_reply_encode(&r, b, sizeof(b));
	CHECK(n == 32);
	CHECK(kvs_wire_hello_reply_decode(b, (size_t)n, &d) == 0);
	CHECK(d.ns_id == 7 && d.arena_count == 1);
	CHECK(d.block_bytes == r.block_bytes);
	CHECK(d.host_arena_bytes == r.host_arena_bytes);
	CHECK(d.host_arena_id == r.host_arena_id);
	CHECK(kvs_wire_hello_reply_encode(&r, b, 31) == -ENOBUFS);
	CHECK(kvs_wire_hello_reply_decode(b, 31, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_hello_reply_decode(b, 33, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_hello_reply_decode(b, 0, &d) == KVS_E_PROTO);

	/* Two arenas: 48 bytes, and only with arena_count 2. */
	r.arena_count = 2;
	r.gpu_arena_bytes = 8ull << 30;
	r.gpu_kind = 1;
	r.gpu_device = 3;
	n = kvs_wire_hello_reply_encode(&r, b, sizeof(b));
	CHECK(n == 48);
	CHECK(kvs_wire_hello_reply_decode(b, (size_t)n, &d) == 0);
	CHECK(d.arena_count == 2 && d.gpu_arena_bytes == r.gpu_arena_bytes &&
	      d.gpu_kind == 1 && d.gpu_device == 3 &&
	      d.host_arena_bytes == r.host_arena_bytes);
	CHECK(kvs_wire_hello_reply_decode(b, 32, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_hello_reply_encode(&r, b, 47) == -ENOBUFS);
	b[4] = 1; /* 48 bytes with one arena */
	CHECK(kvs_wire_hello_reply_decode(b, 48, &d) == KVS_E_PROTO);
	b[4] = 3;
	CHECK(kvs_wire_hello_reply_decode(b, 32, &d) == KVS_E_PROTO);
	r.arena_count = 3;
	CHECK(kvs_wire_hello_reply_encode(&r, b, sizeof(b)) == -EINVAL);
}

/* Empty, one, and the maximum, decoded as encoded; the encoder's limits. */
static void hashes_round_trip(const kvs_hash *h, uint8_t *b, size_t cap)
{
	kvs_wire_hashes d;
	int n, ok;

	/* Empty, one, and the maximum. */
	n = kvs_wire_hashes_encode(h, 0, 0, b, cap);
	CHECK(n == 8);
	CHECK(kvs_wire_hashes_decode(b, 8, &d) == 0 && d.count == 0);

	n = kvs_wire_hashes_encode(h, 3, 0, b, cap);
	CHECK(n == 8 + 3 * 16);
	CHECK(kvs_wire_hashes_decode(b, (size_t)n, &d) == 0);
	CHECK(d.count == 3 && d.flags == 0 && d.hashes == b + 8);
	ok = 1;
	for (uint32_t i = 0; i < 3; i++) {
		kvs_hash x = kvs_wire_hash_at(d.hashes, i);
		ok &= x.lo == h[i].lo && x.hi == h[i].hi;
	}
	CHECK(ok);
	CHECK(b[8] == 0x00 && b[15] == 0x10); /* lo first, little-endian */

	n = kvs_wire_hashes_encode(h, KVS_MAX_HASHES, 0, b, cap);
	CHECK(n == 8 + KVS_MAX_HASHES * 16);
	CHECK((size_t)n <= KVS_WIRE_MAX_PAYLOAD);
	CHECK(kvs_wire_hashes_decode(b, (size_t)n, &d) == 0);
	CHECK(d.count == KVS_MAX_HASHES);
	{
		kvs_hash last = kvs_wire_hash_at(d.hashes, KVS_MAX_HASHES - 1);
		CHECK(last.lo == h[KVS_MAX_HASHES - 1].lo &&
		      last.hi == h[KVS_MAX_HASHES - 1].hi);
	}

	/* Encoder limits. */
	CHECK(kvs_wire_hashes_encode(h, KVS_MAX_HASHES + 1, 0, b, cap) ==
	      KVS_E_TOOMANY);
	CHECK(kvs_wire_hashes_encode(h, 3, 0, b, 8 + 3 * 16 - 1) == -ENOBUFS);
	CHECK(kvs_wire_hashes_encode(h, 0, 0, b, 7) == -ENOBUFS);
}

/* Decode errors: lengths, flags (RESERVE's and LOOKUP's), counts. */
static void hashes_decode_errors(const kvs_hash *h, uint8_t *b, size_t cap)
{
	kvs_wire_hashes d;
	int n;

	n = kvs_wire_hashes_encode(h, 3, 0, b, cap);
	CHECK(kvs_wire_hashes_decode(b, 7, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_hashes_decode(b, (size_t)n - 1, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_hashes_decode(b, (size_t)n + 1, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_hashes_decode(b, (size_t)n + 16, &d) == KVS_E_PROTO);
	put32(b + 4, 1); /* flags: none defined for RESERVE */
	CHECK(kvs_wire_hashes_decode(b, (size_t)n, &d) == KVS_E_PROTO);
	/* LOOKUP's: QUERY, QUERY|REMOTE; REMOTE alone and others refused */
	CHECK(kvs_wire_lookup_decode(b, (size_t)n, &d) == 0 &&
	      d.flags == KVS_LOOKUP_QUERY && d.count == 3);
	put32(b + 4, KVS_LOOKUP_QUERY | KVS_LOOKUP_REMOTE);
	CHECK(kvs_wire_lookup_decode(b, (size_t)n, &d) == 0 &&
	      d.flags == (KVS_LOOKUP_QUERY | KVS_LOOKUP_REMOTE));
	put32(b + 4, KVS_LOOKUP_REMOTE);
	CHECK(kvs_wire_lookup_decode(b, (size_t)n, &d) == KVS_E_PROTO);
	put32(b + 4, KVS_LOOKUP_QUERY | 0x4);
	CHECK(kvs_wire_lookup_decode(b, (size_t)n, &d) == KVS_E_PROTO);
	put32(b + 4, 0);
	CHECK(kvs_wire_lookup_decode(b, (size_t)n, &d) == 0 && d.flags == 0);
	put32(b, KVS_MAX_HASHES + 1);
	CHECK(kvs_wire_hashes_decode(b, cap - 1, &d) == KVS_E_TOOMANY);
	put32(b, 0xffffffffu);
	CHECK(kvs_wire_hashes_decode(b, (size_t)n, &d) == KVS_E_TOOMANY);
	put32(b, 3);
	CHECK(kvs_wire_hashes_decode(b, (size_t)n, &d) == 0);
}

static void test_hashes(void)
{
	size_t cap = 8 + (size_t)(KVS_MAX_HASHES + 1) * KVS_WIRE_HASH_SIZE + 1;
	kvs_hash *h = calloc(KVS_MAX_HASHES + 1, sizeof(*h));
	uint8_t *b = malloc(cap);
	kvs_wire_hashes d;

	if (!h || !b) {
		CHECK(!"out of memory");
		free(h);
		free(b);
		return;
	}
	for (uint32_t i = 0; i <= KVS_MAX_HASHES; i++) {
		h[i].lo = 0x1000000000000000ull + i;
		h[i].hi = ~(uint64_t)i;
	}
	hashes_round_trip(h, b, cap);
	hashes_decode_errors(h, b, cap);

	/* Unaligned: a decoded array may start at any address. */
	kvs_wire_hashes_encode(h, 2, 0, b + 1, cap - 1);
	CHECK(kvs_wire_hashes_decode(b + 1, 8 + 32, &d) == 0);
	{
		kvs_hash x = kvs_wire_hash_at(d.hashes, 1);
		CHECK(x.lo == h[1].lo && x.hi == h[1].hi);
	}
	free(h);
	free(b);
}

static void test_blocks(void)
{
	kvs_block in[4] = {
		{ .offset = 0, .gen = 1, .tier = KVS_TIER_HOST, .status = KVS_BLOCK_HIT },
		{ .offset = 1ull << 40, .gen = 0xffffffffu, .tier = KVS_TIER_HOST,
		  .status = KVS_BLOCK_NEW },
		{ .offset = 4096, .gen = 3, .tier = KVS_TIER_GPU, .status = KVS_BLOCK_EXISTS },
		{ .offset = 0, .gen = 0, .tier = KVS_TIER_NONE, .status = KVS_BLOCK_FULL },
	};
	size_t big = 16 + (size_t)KVS_MAX_HASHES * KVS_WIRE_BLOCK_SIZE;
	uint8_t b[16 + 4 * 16 + 8], *bb = malloc(big);
	kvs_wire_blocks d;
	int n, ok = 1;

	n = kvs_wire_blocks_encode(0xabcdef0123456789ull, in, 4, b, sizeof(b));
	CHECK(n == 16 + 4 * 16);
	CHECK(kvs_wire_blocks_decode(b, (size_t)n, &d) == 0);
	CHECK(d.lease == 0xabcdef0123456789ull && d.count == 4);
	for (uint32_t i = 0; i < 4; i++) {
		kvs_block x = kvs_wire_block_at(d.blocks, i);
		ok &= x.offset == in[i].offset && x.gen == in[i].gen &&
		      x.tier == in[i].tier && x.status == in[i].status;
	}
	CHECK(ok);

	/* Empty reply: a lookup with no hits. */
	n = kvs_wire_blocks_encode(0, in, 0, b, sizeof(b));
	CHECK(n == 16);
	CHECK(kvs_wire_blocks_decode(b, 16, &d) == 0 && d.count == 0 &&
	      d.lease == 0);

	/* The largest reply fits the payload limit. */
	if (bb) {
		kvs_block *many = calloc(KVS_MAX_HASHES, sizeof(*many));

		if (many) {
			many[KVS_MAX_HASHES - 1].offset = 99;
			n = kvs_wire_blocks_encode(5, many, KVS_MAX_HASHES, bb, big);
			CHECK((size_t)n == big && big <= KVS_WIRE_MAX_PAYLOAD);
			CHECK(kvs_wire_blocks_decode(bb, big, &d) == 0);
			CHECK(kvs_wire_block_at(d.blocks, KVS_MAX_HASHES - 1).offset == 99);
			free(many);
		}
	}
	CHECK(kvs_wire_blocks_encode(1, in, KVS_MAX_HASHES + 1, b, sizeof(b)) ==
	      KVS_E_TOOMANY);
	CHECK(kvs_wire_blocks_encode(1, in, 4, b, 16 + 4 * 16 - 1) == -ENOBUFS);
	CHECK(kvs_wire_blocks_encode(1, in, 0, b, 15) == -ENOBUFS);

	/* Decode errors. */
	n = kvs_wire_blocks_encode(7, in, 4, b, sizeof(b));
	CHECK(kvs_wire_blocks_decode(b, 15, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_blocks_decode(b, (size_t)n - 1, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_blocks_decode(b, (size_t)n + 1, &d) == KVS_E_PROTO);
	put32(b + 12, 1); /* reserved word must be zero */
	CHECK(kvs_wire_blocks_decode(b, (size_t)n, &d) == KVS_E_PROTO);
	put32(b + 12, 0);
	put32(b + 8, KVS_MAX_HASHES + 1);
	CHECK(kvs_wire_blocks_decode(b, (size_t)n, &d) == KVS_E_TOOMANY);
	put32(b + 8, 5); /* claims more entries than present */
	CHECK(kvs_wire_blocks_decode(b, (size_t)n, &d) == KVS_E_PROTO);
	put32(b + 8, 4);
	CHECK(kvs_wire_blocks_decode(b, (size_t)n, &d) == 0);
	free(bb);
}

static void test_u64(void)
{
	uint8_t b[16];
	uint64_t v = 0;

	CHECK(kvs_wire_u64_encode(0x1122334455667788ull, b, sizeof(b)) == 8);
	CHECK(b[0] == 0x88 && b[7] == 0x11);
	CHECK(kvs_wire_u64_decode(b, 8, &v) == 0 && v == 0x1122334455667788ull);
	CHECK(kvs_wire_u64_encode(UINT64_MAX, b, 8) == 8);
	CHECK(kvs_wire_u64_decode(b, 8, &v) == 0 && v == UINT64_MAX);
	CHECK(kvs_wire_u64_encode(1, b, 7) == -ENOBUFS);
	CHECK(kvs_wire_u64_decode(b, 7, &v) == KVS_E_PROTO);
	CHECK(kvs_wire_u64_decode(b, 9, &v) == KVS_E_PROTO);
	CHECK(kvs_wire_u64_decode(b, 0, &v) == KVS_E_PROTO);
}

static void test_names(void)
{
	for (uint32_t op = KVS_OP_HELLO; op < KVS_OP__COUNT; op++)
		CHECK(strcmp(kvs_wire_opcode_name(op), "unknown") != 0);
	CHECK(!strcmp(kvs_wire_opcode_name(KVS_OP_LOOKUP), "lookup"));
	CHECK(!strcmp(kvs_wire_opcode_name(0), "unknown"));
	CHECK(!strcmp(kvs_wire_opcode_name(KVS_OP__COUNT), "unknown"));
	CHECK(!strcmp(kvs_wire_opcode_name(0xffffffffu), "unknown"));
}

static void test_strerror(void)
{
	for (int e = KVS_E_PROTO; e > KVS_E_LAST; e--) {
		const char *s = kvs_strerror(e);

		CHECK(s != NULL);
		if (s && strstr(s, "unknown")) {
			/* KVS_E_OPCODE's text is "unknown opcode": a name. */
			CHECK(e == KVS_E_OPCODE && !strcmp(s, "unknown opcode"));
		}
		/* Each code has its own text. */
		for (int f = e + 1; f <= KVS_E_PROTO; f++)
			CHECK(strcmp(s, kvs_strerror(f)) != 0);
	}
	CHECK(kvs_strerror(KVS_E_BASE) != NULL);
	CHECK(kvs_strerror(KVS_E_LAST) != NULL);
	CHECK(kvs_strerror(0) != NULL);
	CHECK(kvs_strerror(-ENOENT) != NULL &&
	      !strcmp(kvs_strerror(-ENOENT), strerror(ENOENT)));
	CHECK(kvs_strerror(1) != NULL && kvs_strerror(-100000) != NULL);
	CHECK(kvs_strerror(-2147483647 - 1) != NULL);
}

int main(void)
{
	test_hdr();
	test_hello();
	test_hello_reply();
	test_hashes();
	test_blocks();
	test_u64();
	test_names();
	test_strerror();
	return check_summary("test_wire");
}
