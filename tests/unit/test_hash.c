/*
 * test_hash - chained block hashes and layout sizes (proto/hash.c).
 * Exit 0 pass, 1 fail.
 *
 * The known-answer values below were computed once with hash.c and checked
 * against an independent implementation (Python's xxhash.xxh3_128 over the
 * same bytes). If they change, every cached prefix (on SSD too) changes name:
 * that needs a new seed scheme number, not a new pinned value.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvs_check.h"
#include "kvs_types.h"


static int heq(kvs_hash a, kvs_hash b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

static kvs_layout base_layout(void)
{
	kvs_layout l = { .model = "kvshare-test-model", .adapter = NULL,
			 .salt = "salt-1", .layers = 32, .kv_heads = 8,
			 .head_dim = 128, .block_tokens = 16, .tp_rank = 0,
			 .tp_size = 1, .dtype = KVS_DTYPE_FP16 };
	return l;
}

static void fill_tokens(uint32_t *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		t[i] = (uint32_t)(i * 1000 + 7);
}

static void test_known_answer(void)
{
	kvs_layout l = base_layout();
	kvs_hash s = kvs_hash_layout_seed(&l), h[3];
	uint32_t t[48];

	fill_tokens(t, 48);
	CHECK(s.lo == 0x06d9642df5ba77ffull && s.hi == 0x673b0b31edb35e89ull);
	CHECK(kvs_hash_chain(s, 16, t, 48, h, 3) == 3);
	CHECK(h[0].lo == 0xc7c9f9d5b18f40c3ull && h[0].hi == 0xe813f36ecc2e9b6aull);
	CHECK(h[1].lo == 0xfd9106eb1f06cf27ull && h[1].hi == 0xa8635feaa935b770ull);
	CHECK(h[2].lo == 0xb22f98c5a08bb0e0ull && h[2].hi == 0x479e0ef4e252fa1dull);
}

static void test_deterministic(void)
{
	kvs_layout l = base_layout(), copy = base_layout();
	char model[] = "kvshare-test-model"; /* other storage, same text */
	uint32_t t[100];
	kvs_hash a[8], b[8];

	fill_tokens(t, 100);
	copy.model = model;
	CHECK(heq(kvs_hash_layout_seed(&l), kvs_hash_layout_seed(&l)));
	CHECK(heq(kvs_hash_layout_seed(&l), kvs_hash_layout_seed(&copy)));
	CHECK(kvs_hash_chain(kvs_hash_layout_seed(&l), 16, t, 100, a, 8) == 6);
	CHECK(kvs_hash_chain(kvs_hash_layout_seed(&copy), 16, t, 100, b, 8) == 6);
	CHECK(!memcmp(a, b, 6 * sizeof(kvs_hash)));
	/* All distinct, and distinct from the seed. */
	for (int i = 0; i < 6; i++) {
		CHECK(!heq(a[i], kvs_hash_layout_seed(&l)));
		for (int j = 0; j < i; j++)
			CHECK(!heq(a[i], a[j]));
	}
}

/* Every field of the layout isolates: a different value, a different seed. */
static void test_seed_fields(void)
{
	const kvs_layout l = base_layout();
	const kvs_hash s = kvs_hash_layout_seed(&l);
	kvs_layout v;

#define DIFFERS(stmt)                                                         \
	do {                                                                  \
		v = l;                                                        \
		stmt;                                                         \
		CHECK(!heq(kvs_hash_layout_seed(&v), s));                     \
	} while (0)
	DIFFERS(v.salt = "salt-2");
	DIFFERS(v.salt = NULL);
	DIFFERS(v.model = "kvshare-test-model2");
	DIFFERS(v.adapter = "lora-1");
	DIFFERS(v.tp_rank = 1);
	DIFFERS(v.tp_size = 2);
	DIFFERS(v.dtype = KVS_DTYPE_BF16);
	DIFFERS(v.dtype = KVS_DTYPE_FP8_E4M3);
	DIFFERS(v.layers = 31);
	DIFFERS(v.kv_heads = 4);
	DIFFERS(v.head_dim = 64);
	DIFFERS(v.block_tokens = 32);
#undef DIFFERS
	/* Strings are length-prefixed: moving bytes between fields differs. */
	{
		kvs_layout a = l, b = l;

		a.model = "ab";
		a.adapter = "c";
		b.model = "a";
		b.adapter = "bc";
		CHECK(!heq(kvs_hash_layout_seed(&a), kvs_hash_layout_seed(&b)));
		a.adapter = NULL;
		a.salt = "x";
		b.model = "ab";
		b.adapter = "x";
		b.salt = NULL;
		CHECK(!heq(kvs_hash_layout_seed(&a), kvs_hash_layout_seed(&b)));
	}
}

/* Changing token k changes block k/bt and every later block, none earlier. */
static void test_chaining(void)
{
	kvs_layout l = base_layout();
	kvs_hash s = kvs_hash_layout_seed(&l), a[8], b[8];
	uint32_t t[128];
	const size_t ks[] = { 0, 15, 16, 40, 127 };

	fill_tokens(t, 128);
	CHECK(kvs_hash_chain(s, 16, t, 128, a, 8) == 8);
	for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
		size_t k = ks[i], blk = k / 16;
		int ok = 1;

		t[k] ^= 1;
		CHECK(kvs_hash_chain(s, 16, t, 128, b, 8) == 8);
		for (size_t j = 0; j < 8; j++)
			ok &= heq(a[j], b[j]) == (j < blk);
		CHECK(ok);
		t[k] ^= 1;
	}
	/* A block's hash names its whole prefix: the same 16 tokens at block 0
	 * and at block 1 hash differently. */
	memcpy(t + 16, t, 16 * sizeof(uint32_t));
	CHECK(kvs_hash_chain(s, 16, t, 32, b, 2) == 2);
	CHECK(!heq(b[0], b[1]));
	/* A different seed changes every block. */
	{
		kvs_hash s2 = s;
		int ok = 1;

		s2.hi ^= 1;
		fill_tokens(t, 128);
		CHECK(kvs_hash_chain(s2, 16, t, 128, b, 8) == 8);
		for (size_t j = 0; j < 8; j++)
			ok &= !heq(a[j], b[j]);
		CHECK(ok);
	}
}

static void test_partial_and_limits(void)
{
	kvs_layout l = base_layout();
	kvs_hash s = kvs_hash_layout_seed(&l), a[8], b[8];
	const kvs_hash canary = { 0x5a5a5a5a5a5a5a5aull, 0xa5a5a5a5a5a5a5a5ull };
	uint32_t t[128];

	fill_tokens(t, 128);
	CHECK(kvs_hash_chain(s, 16, t, 128, a, 8) == 8);
	/* A trailing partial block is not hashed, and its tokens matter not. */
	for (int i = 0; i < 8; i++)
		b[i] = canary;
	CHECK(kvs_hash_chain(s, 16, t, 3 * 16 + 5, b, 8) == 3);
	CHECK(!memcmp(a, b, 3 * sizeof(kvs_hash)) && heq(b[3], canary));
	t[3 * 16 + 2] ^= 0xffff;
	CHECK(kvs_hash_chain(s, 16, t, 3 * 16 + 5, b, 8) == 3);
	CHECK(!memcmp(a, b, 3 * sizeof(kvs_hash)));
	t[3 * 16 + 2] ^= 0xffff;
	CHECK(kvs_hash_chain(s, 16, t, 15, b, 8) == 0);
	CHECK(kvs_hash_chain(s, 16, t, 0, b, 8) == 0);
	CHECK(kvs_hash_chain(s, 16, NULL, 0, b, 8) == 0);
	/* Capped at max, nothing written past it. */
	for (int i = 0; i < 8; i++)
		b[i] = canary;
	CHECK(kvs_hash_chain(s, 16, t, 128, b, 2) == 2);
	CHECK(!memcmp(a, b, 2 * sizeof(kvs_hash)) && heq(b[2], canary));
	CHECK(kvs_hash_chain(s, 16, t, 128, b, 0) == 0);
	/* Zero tokens per block hashes nothing (and does not divide by 0). */
	CHECK(kvs_hash_chain(s, 0, t, 128, b, 8) == 0);
	/* Another block size cuts the same tokens differently. */
	CHECK(kvs_hash_chain(s, 32, t, 128, b, 8) == 4);
	CHECK(!heq(a[1], b[0]));
}

static void test_sizes(void)
{
	kvs_layout l = base_layout();

	CHECK(kvs_dtype_bytes(KVS_DTYPE_FP16) == 2);
	CHECK(kvs_dtype_bytes(KVS_DTYPE_BF16) == 2);
	CHECK(kvs_dtype_bytes(KVS_DTYPE_FP32) == 4);
	CHECK(kvs_dtype_bytes(KVS_DTYPE_FP8_E4M3) == 1);
	CHECK(kvs_dtype_bytes(KVS_DTYPE_INT8) == 1);
	CHECK(kvs_dtype_bytes((kvs_dtype)0) == 0);
	CHECK(kvs_dtype_bytes(KVS_DTYPE_INT4) == 1); /* two per byte, rounded up */
	CHECK(kvs_dtype_bytes((kvs_dtype)7) == 0);

	/* 32 layers * 2 * 8 heads * 128 dim * 16 tokens * 2 bytes = 2 MiB */
	CHECK(kvs_layout_block_bytes(&l) == 2ull << 20);
	l.dtype = KVS_DTYPE_FP32;
	CHECK(kvs_layout_block_bytes(&l) == 4ull << 20);
	l.dtype = (kvs_dtype)99;
	CHECK(kvs_layout_block_bytes(&l) == 0);
	l = base_layout();
	l.layers = 0;
	CHECK(kvs_layout_block_bytes(&l) == 0);
	l = base_layout();
	l.kv_heads = 0;
	CHECK(kvs_layout_block_bytes(&l) == 0);
	l = base_layout();
	l.head_dim = 0;
	CHECK(kvs_layout_block_bytes(&l) == 0);
	l = base_layout();
	l.block_tokens = 0;
	CHECK(kvs_layout_block_bytes(&l) == 0);
	/* Overflow of the 64-bit product is 0, not a wrapped size. */
	l = base_layout();
	l.layers = l.kv_heads = l.head_dim = l.block_tokens = 0xffffffffu;
	CHECK(kvs_layout_block_bytes(&l) == 0);
	l.layers = l.kv_heads = 0xffffffffu;
	l.head_dim = 1;
	l.block_tokens = 1;
	l.dtype = KVS_DTYPE_FP16; /* (2^32-1)^2 * 2 * 2 > 2^64: overflows */
	CHECK(kvs_layout_block_bytes(&l) == 0);
	/* Sizes past 2^63 are refused too (offsets are signed 64-bit). */
	l.kv_heads = 0x3fffffffu; /* (2^32-1) * 2 * (2^30-1) * 2 > 2^63 */
	CHECK(kvs_layout_block_bytes(&l) == 0);
	l.kv_heads = 0x1fffffffu; /* (2^32-1) * 2 * (2^29-1) * 2 < 2^63: fits */
	CHECK(kvs_layout_block_bytes(&l) == 0xffffffffull * 2 * 0x1fffffffull * 2);
	/* Quantized blocks (scheme 2, proto/kvs_kv_format.h): codes; K's
	 * scale and zero per channel and token group; V's per token and
	 * channel group; head_dim / 32 fp16 K channels per (layer, head), each
	 * a u16 index and block_tokens fp16 codes. Base: 32 layers, 8 heads,
	 * head_dim 128, 16 tokens. */
	l = base_layout();
	l.dtype = KVS_DTYPE_INT8;
	CHECK(kvs_layout_block_bytes(&l) ==
	      32ull * 2 * 16 * 8 * 128 + 32ull * 8 * 128 * 8 + 32ull * 16 * 8 * 8 +
	      32ull * 8 * 4 * 2 + 32ull * 8 * 4 * 16 * 2);
	l.dtype = KVS_DTYPE_FP8_E4M3;
	CHECK(kvs_layout_block_bytes(&l) ==
	      32ull * 2 * 16 * 8 * 128 + 32ull * 8 * 128 * 8 + 32ull * 16 * 8 * 8 +
	      32ull * 8 * 4 * 2 + 32ull * 8 * 4 * 16 * 2);
	/* INT4: 64 bytes a row, V in 4 groups of 32 channels (16 tokens: one
	 * K token group). */
	l.dtype = KVS_DTYPE_INT4;
	CHECK(kvs_layout_block_bytes(&l) ==
	      32ull * 2 * 16 * 8 * 64 + 32ull * 8 * 128 * 8 + 32ull * 16 * 8 * 4 * 8 +
	      32ull * 8 * 4 * 2 + 32ull * 8 * 4 * 16 * 2);
	l.block_tokens = 100; /* 4 K token groups (32, 32, 32, 4) */
	l.head_dim = 33;      /* 17 bytes a row; 2 V groups; 2 fp16 channels */
	CHECK(kvs_layout_block_bytes(&l) ==
	      32ull * 2 * 100 * 8 * 17 + 32ull * 4 * 8 * 33 * 8 + 32ull * 100 * 8 * 2 * 8 +
	      32ull * 8 * 2 * 2 + 32ull * 8 * 2 * 100 * 2);
}

/* One table of dtype names for the daemon and the tools: each dtype's name
 * parses back to it, the alias too, and nothing else parses. */
static void test_dtype_names(void)
{
	static const char *const names[] = { "fp16", "bf16", "fp32", "fp8",
					     "int8", "int4" };
	kvs_dtype d;

	for (int v = KVS_DTYPE_FP16; v <= KVS_DTYPE_INT4; v++) {
		const char *n = kvs_dtype_name((kvs_dtype)v);

		CHECK(strcmp(n, names[v - KVS_DTYPE_FP16]) == 0);
		d = 0;
		CHECK_EQ(kvs_dtype_parse(n, &d), 0);
		CHECK_EQ((int)d, v);
	}
	CHECK_EQ(kvs_dtype_parse("fp8_e4m3", &d), 0);
	CHECK_EQ((int)d, KVS_DTYPE_FP8_E4M3);
	CHECK(strcmp(kvs_dtype_name((kvs_dtype)0), "unknown") == 0);
	CHECK(strcmp(kvs_dtype_name((kvs_dtype)7), "unknown") == 0);
	d = KVS_DTYPE_BF16;
	CHECK_EQ(kvs_dtype_parse("FP16", &d), -EINVAL);
	CHECK_EQ(kvs_dtype_parse("", &d), -EINVAL);
	CHECK_EQ(kvs_dtype_parse("fp16 ", &d), -EINVAL);
	CHECK_EQ((int)d, KVS_DTYPE_BF16); /* unchanged */
}

int main(void)
{
	test_known_answer();
	test_deterministic();
	test_seed_fields();
	test_chaining();
	test_partial_and_limits();
	test_sizes();
	test_dtype_names();
	return check_summary("test_hash");
}
