/*
 * abi_dump - print the public ABI of libkvshare that the Python package
 * mirrors, as JSON: every constant of client/kvshare.h and kvs_types.h, and
 * the size and the fields (offset, size, type) of every struct the package
 * passes to the library. scripts/python_abi.py turns it into
 * client/python/kvshare/_abi.py; client/python/tests/test_abi.py fails when
 * that module is stale or a constant of the headers is missing here.
 *
 * Built from the public header alone (no library call), so the numbers are
 * the compiler's, not anyone's reading of the header.
 */
#include <stddef.h>
#include <stdio.h>

#include "kvshare.h"

/* A field's type as the package's ctypes declare it. An enum field takes
 * its compatible integer type (GCC: unsigned int when no value is
 * negative). */
#define TYPE_OF(x)                                                            \
	_Generic((x),                                                         \
		uint8_t: "u8", uint32_t: "u32", uint64_t: "u64",              \
		int32_t: "i32", int64_t: "i64", const char *: "str",         \
		const uint8_t *: "ptr", const uint32_t *: "ptr")

static int first;

static void sep(void)
{
	printf(first ? "\n    " : ",\n    ");
	first = 0;
}

#define CONST(name)                                                           \
	do {                                                                  \
		sep();                                                        \
		printf("\"%s\": %lld", #name, (long long)(name));             \
	} while (0)

#define FIELD(type, f)                                                        \
	do {                                                                  \
		sep();                                                        \
		printf("[\"%s\", %zu, %zu, \"%s\"]", #f, offsetof(type, f),   \
		       sizeof(((type *)0)->f), TYPE_OF(((type *)0)->f));      \
	} while (0)

#define STRUCT(type, fields)                                                  \
	do {                                                                  \
		printf("%s\"%s\": {\"size\": %zu, \"fields\": [", nstructs++ ? \
		       ",\n  " : "\n  ", #type, sizeof(type));                \
		first = 1;                                                    \
		fields;                                                       \
		printf("\n  ]}");                                             \
	} while (0)

/* The constants of kvshare.h. */
static void client_constants(void)
{
	CONST(KVSHARE_VERSION_MAJOR);
	CONST(KVSHARE_VERSION_MINOR);
	CONST(KVS_BLOCK_HIT);
	CONST(KVS_BLOCK_NEW);
	CONST(KVS_BLOCK_EXISTS);
	CONST(KVS_BLOCK_BUSY);
	CONST(KVS_BLOCK_FULL);
	CONST(KVS_BLOCK_NOPARENT);
	CONST(KVS_NAME_MAX);
	CONST(KVS_MAX_HASHES);
	CONST(KVS_NONE);
	CONST(KVS_CONNECT_GPU);
	CONST(KVS_CONNECT_NO_FASTPATH);
	CONST(KVS_TIMEOUT_DEFAULT_MS);
	CONST(KVS_QUERY_REMOTE);
	CONST(KVS_PAGED_NHD);
	CONST(KVS_PAGED_HND);
	CONST(KVS_PAGED_CPU);
	CONST(KVS_PAGED_NHD_KV_INNER);
}

/* The constants of kvs_types.h. */
static void type_constants(void)
{
	CONST(KVS_E_BASE);
	CONST(KVS_E_PROTO);
	CONST(KVS_E_VERSION);
	CONST(KVS_E_OPCODE);
	CONST(KVS_E_TOOBIG);
	CONST(KVS_E_TOOMANY);
	CONST(KVS_E_LAYOUT);
	CONST(KVS_E_ATTACHED);
	CONST(KVS_E_NOTATTACHED);
	CONST(KVS_E_NOLEASE);
	CONST(KVS_E_NOTOWNER);
	CONST(KVS_E_LEASEKIND);
	CONST(KVS_E_FULL);
	CONST(KVS_E_LIMIT);
	CONST(KVS_E_DISCONNECTED);
	CONST(KVS_E_NODAEMON);
	CONST(KVS_E_DAEMON_RUNNING);
	CONST(KVS_E_CONFIG);
	CONST(KVS_E_INTERNAL);
	CONST(KVS_E_PERM);
	CONST(KVS_E_LAST);
	CONST(KVS_DTYPE_FP16);
	CONST(KVS_DTYPE_BF16);
	CONST(KVS_DTYPE_FP32);
	CONST(KVS_DTYPE_FP8_E4M3);
	CONST(KVS_DTYPE_INT8);
	CONST(KVS_DTYPE_INT4);
	CONST(KVS_TIER_NONE);
	CONST(KVS_TIER_GPU);
	CONST(KVS_TIER_HOST);
	CONST(KVS_TIER_SSD);
	CONST(KVS_TIER_REMOTE);
	CONST(KVS_DESC_HASH_MAX);
	CONST(KVS_DESC_TOKENS_MAX);
	CONST(KVS_DESC_LORA_MAX);
	CONST(KVS_DESC_EXTRA_MAX);
	CONST(KVS_DESC_HASH_NONE);
	CONST(KVS_DESC_HASH_BYTES);
	CONST(KVS_DESC_HASH_INT);
}

/* The structs the package passes to the library. */
static void struct_layouts(void)
{
	int nstructs = 0;

	STRUCT(kvs_hash, FIELD(kvs_hash, lo); FIELD(kvs_hash, hi));
	STRUCT(kvs_layout,
	       FIELD(kvs_layout, model); FIELD(kvs_layout, adapter);
	       FIELD(kvs_layout, salt); FIELD(kvs_layout, layers);
	       FIELD(kvs_layout, kv_heads); FIELD(kvs_layout, head_dim);
	       FIELD(kvs_layout, block_tokens); FIELD(kvs_layout, tp_rank);
	       FIELD(kvs_layout, tp_size); FIELD(kvs_layout, dtype));
	STRUCT(kvs_block,
	       FIELD(kvs_block, offset); FIELD(kvs_block, gen);
	       FIELD(kvs_block, tier); FIELD(kvs_block, status));
	STRUCT(kvs_paged_cache,
	       FIELD(kvs_paged_cache, num_pages);
	       FIELD(kvs_paged_cache, page_tokens);
	       FIELD(kvs_paged_cache, dtype);
	       FIELD(kvs_paged_cache, on_device);
	       FIELD(kvs_paged_cache, stride_kv);
	       FIELD(kvs_paged_cache, stride_page);
	       FIELD(kvs_paged_cache, stride_token);
	       FIELD(kvs_paged_cache, stride_head));
	STRUCT(kvs_engine_report,
	       FIELD(kvs_engine_report, hit_tokens);
	       FIELD(kvs_engine_report, loaded_blocks);
	       FIELD(kvs_engine_report, loaded_bytes);
	       FIELD(kvs_engine_report, load_us);
	       FIELD(kvs_engine_report, load_errors);
	       FIELD(kvs_engine_report, published_blocks);
	       FIELD(kvs_engine_report, publish_us);
	       FIELD(kvs_engine_report, skipped_blocks));
	STRUCT(kvs_block_desc,
	       FIELD(kvs_block_desc, hash_lo); FIELD(kvs_block_desc, hash_hi);
	       FIELD(kvs_block_desc, hash_kind);
	       FIELD(kvs_block_desc, hash_len);
	       FIELD(kvs_block_desc, parent_kind);
	       FIELD(kvs_block_desc, parent_len);
	       FIELD(kvs_block_desc, engine_hash);
	       FIELD(kvs_block_desc, parent_hash);
	       FIELD(kvs_block_desc, block_size);
	       FIELD(kvs_block_desc, ntokens);
	       FIELD(kvs_block_desc, tokens);
	       FIELD(kvs_block_desc, lora_len);
	       FIELD(kvs_block_desc, extra_len);
	       FIELD(kvs_block_desc, lora);
	       FIELD(kvs_block_desc, extra));
}

int main(void)
{
	printf("{\"constants\": {");
	first = 1;
	client_constants();
	type_constants();
	printf("\n  },\n  \"structs\": {");
	struct_layouts();
	printf("\n  },\n  \"types\": {\"kvs_lease\": %zu}\n}\n", sizeof(kvs_lease));
	return 0;
}
