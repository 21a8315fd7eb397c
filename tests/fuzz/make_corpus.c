/*
 * make_corpus - write the fuzz targets' seed corpora, made with the real
 * encoders, so that every seed is a message the daemon or the client sends.
 *
 *   cmake --build build --target make_corpus
 *   build/tests/fuzz/make_corpus tests/fuzz/corpus
 *
 * writes DIR/fuzz_wire/<name>, DIR/fuzz_admin/<name>, DIR/fuzz_config/<name>
 * and DIR/fuzz_ssd/<name>
 * (the directories must exist), overwriting seeds of the same name. The output is committed; run it
 * again when the wire format or the flags change. Regression inputs (crashes
 * and findings of past runs, named regress-*) live in the same directories
 * and are not written by this program: they are kept as they were found.
 * Exit 0, or 1 with a reason.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_index.h"
#include "kvs_ssd.h"
#include "kvs_wire.h"
#include "kvs_wire_admin.h"

static const char *out_dir;
static int failed;

static void put(const char *target, const char *name, const void *p, size_t n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", out_dir, target, name);
	f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
		fprintf(stderr, "make_corpus: %s: %s\n", path, strerror(errno));
		failed = 1;
	}
}

/* A message for @target: header + the payload an encoder wrote (rc = its
 * length). */
static void tmsg(const char *target, const char *name, uint16_t op,
		 int32_t status, uint64_t req_id, const uint8_t *payload, int rc)
{
	uint8_t buf[KVS_WIRE_HDR_SIZE + 8192];
	kvs_wire_hdr h = {
		.magic = KVS_WIRE_MAGIC,
		.version = KVS_WIRE_VERSION,
		.opcode = op,
		.status = status,
		.req_id = req_id,
	};

	if (rc < 0 || (size_t)rc > sizeof(buf) - KVS_WIRE_HDR_SIZE) {
		fprintf(stderr, "make_corpus: %s: encoder failed: %d\n", name, rc);
		failed = 1;
		return;
	}
	h.len = (uint32_t)rc;
	kvs_wire_hdr_encode(&h, buf);
	memcpy(buf + KVS_WIRE_HDR_SIZE, payload, (size_t)rc);
	put(target, name, buf, KVS_WIRE_HDR_SIZE + (size_t)rc);
}

static void msg(const char *name, uint16_t op, int32_t status, uint64_t req_id,
		const uint8_t *payload, int rc)
{
	tmsg("fuzz_wire", name, op, status, req_id, payload, rc);
}

#define AMSG(name, op, req_id, payload, rc) \
	tmsg("fuzz_admin", name, op, 0, req_id, payload, rc)

/* LIST: requests, and replies of two namespaces (one with its top
 * prefixes), of none, and a page. */
static void admin_list_seeds(const kvs_hash *hs, uint8_t *p, size_t cap)
{
	kvs_wire_list_req lr = { .ns = 0, .top = 5 };
	kvs_wire_prefix top[2] = {
		{ .hash = hs[2], .hits = 9, .root_hits = 12, .depth = 3,
		  .flags = KVS_WIRE_PREFIX_PINNED },
		{ .hash = hs[1], .hits = 1, .root_hits = 12, .depth = 2 },
	};
	kvs_wire_ns ns1 = {
		.id = 1, .layers = 32, .kv_heads = 8, .head_dim = 128,
		.block_tokens = 16, .tp_size = 1, .dtype = KVS_DTYPE_BF16,
		.clients = 2, .block_bytes = 2u << 20, .blocks = 300, .writing = 4,
		.hits = 1234, .pinned = 3, .roots = 7, .longest = 40,
		.model = "llama-3-8b", .model_len = 10, .ntop = 2,
	};
	kvs_wire_ns ns2 = {
		.id = 2, .layers = 28, .kv_heads = 4, .head_dim = 128,
		.block_tokens = 32, .tp_rank = 1, .tp_size = 2,
		.dtype = KVS_DTYPE_FP8_E4M3,
		.flags = KVS_WIRE_NS_SALTED | KVS_WIRE_NS_TENANT, .uid = 1000,
		.model = "qwen2-7b", .model_len = 8, .adapter = "lora-sql",
		.adapter_len = 8,
	};
	int off, rc;

	AMSG("list-req", KVS_OP_LIST, 1, p, kvs_wire_list_req_encode(&lr, p, cap));
	off = kvs_wire_list_hdr_encode(2, p, cap);
	off += kvs_wire_ns_encode(&ns1, top, p + off, cap - off);
	rc = kvs_wire_ns_encode(&ns2, NULL, p + off, cap - off);
	AMSG("list-reply-2", KVS_OP_LIST, 1, p, rc < 0 ? rc : off + rc);
	AMSG("list-reply-0", KVS_OP_LIST, 1, p, kvs_wire_list_hdr_encode(0, p, cap));
	lr.paged = 1;
	lr.cursor = 16384;
	AMSG("list-req-paged", KVS_OP_LIST, 1, p,
	     kvs_wire_list_req_encode(&lr, p, cap));
	off = kvs_wire_list_page_encode(2, 32768, p, cap);
	off += kvs_wire_ns_encode(&ns1, top, p + off, cap - off);
	rc = kvs_wire_ns_encode(&ns2, NULL, p + off, cap - off);
	AMSG("list-page-2", KVS_OP_LIST, 1, p, rc < 0 ? rc : off + rc);
}

/* INSPECT, EVICT and VERIFY: a request and its replies each. */
static void admin_block_seeds(const kvs_hash *hs, uint8_t *p, size_t cap)
{
	kvs_wire_inspect_req ir = { .ns = 1, .hash = hs[2] };
	kvs_wire_block_info bi = {
		.hash = hs[2], .ns = 1, .tier = KVS_TIER_HOST, .state = 2,
		.flags = KVS_WIRE_INFO_PINNED | KVS_WIRE_INFO_PARENT,
		.offset = 6u << 20, .gen = 3, .refs = 2, .children = 1, .hits = 9,
		.age_s = 60, .depth = 3, .parent = hs[1],
	};
	kvs_wire_evict_req er = { .scope = KVS_EVICT_PREFIX,
				  .flags = KVS_WIRE_EVICT_FLUSH, .hash = hs[1] };
	kvs_wire_evict_req ern = { .scope = KVS_EVICT_NAMESPACE, .ns = 2 };
	kvs_wire_evict_reply rep = { .freed = 10, .pinned = 3, .kept = 2 };
	kvs_wire_verify_req vr = { .ns = 0, .max_failed = 100 };
	kvs_wire_verify_fail vf[2] = {
		{ .hash = hs[2], .ns = 1, .error = -74 /* -EBADMSG */ },
		{ .hash = hs[0], .ns = 2, .error = -5 /* -EIO */ },
	};
	kvs_wire_verify_reply vrep = { .checked = 40, .ok = 37, .failed = 3,
				       .skipped = 2, .count = 2,
				       .flags = KVS_WIRE_VERIFY_SSD };
	kvs_wire_verify_reply vnone = { 0 };

	AMSG("inspect-req", KVS_OP_INSPECT, 2, p,
	     kvs_wire_inspect_req_encode(&ir, p, cap));
	AMSG("inspect-reply", KVS_OP_INSPECT, 2, p,
	     kvs_wire_block_info_encode(&bi, p, cap));
	AMSG("evict-req-prefix", KVS_OP_EVICT, 3, p,
	     kvs_wire_evict_req_encode(&er, p, cap));
	AMSG("evict-req-ns", KVS_OP_EVICT, 3, p,
	     kvs_wire_evict_req_encode(&ern, p, cap));
	AMSG("evict-reply", KVS_OP_EVICT, 3, p,
	     kvs_wire_evict_reply_encode(&rep, p, cap));
	AMSG("verify-req", KVS_OP_VERIFY, 7, p,
	     kvs_wire_verify_req_encode(&vr, p, cap));
	AMSG("verify-reply-2", KVS_OP_VERIFY, 7, p,
	     kvs_wire_verify_reply_encode(&vrep, vf, p, cap));
	AMSG("verify-reply-nossd", KVS_OP_VERIFY, 7, p,
	     kvs_wire_verify_reply_encode(&vnone, NULL, p, cap));
}

/* PIN, UNPIN, WATCH and the events a watcher receives. */
static void admin_pin_watch_seeds(const kvs_hash *hs, uint8_t *p, size_t cap)
{
	int off;

	AMSG("pin-req-3", KVS_OP_PIN, 4, p, kvs_wire_pin_req_encode(0, hs, 3, p, cap));
	AMSG("unpin-req-1", KVS_OP_UNPIN, 5, p,
	     kvs_wire_pin_req_encode(2, hs, 1, p, cap));
	AMSG("pin-reply", KVS_OP_PIN, 4, p, kvs_wire_u64_encode(3, p, cap));
	AMSG("watch", KVS_OP_WATCH, 6, p, 0);
	off = kvs_wire_events_hdr_encode(5, 2, p, cap);
	for (uint32_t k = KVS_EVENT_STORED; k <= KVS_EVENT_FLUSHED; k++) {
		kvs_wire_event e = { .kind = k, .ns = 1, .hash = hs[k % 3], .seq = 40 + k };

		off += kvs_wire_event_encode(&e, p + off, cap - off);
	}
	AMSG("event-5", KVS_OP_EVENT, 6, p, off);
	AMSG("event-0", KVS_OP_EVENT, 6, p, kvs_wire_events_hdr_encode(0, 7, p, cap));
}

/* The operator messages, as kvsctl and the daemon send them (one buffer,
 * each message encoded into it in turn). */
static void admin_seeds(void)
{
	static const kvs_hash hs[3] = {
		{ 0x0123456789abcdefull, 0xfedcba9876543210ull },
		{ 0x1111111111111111ull, 0x2222222222222222ull },
		{ 0xdeadbeefcafef00dull, 0x0ull },
	};
	uint8_t p[8192];

	admin_list_seeds(hs, p, sizeof(p));
	admin_block_seeds(hs, p, sizeof(p));
	admin_pin_watch_seeds(hs, p, sizeof(p));
}

static void wire_seeds(void)
{
	kvs_layout l = {
		.model = "llama-3-8b", .layers = 32, .kv_heads = 8, .head_dim = 128,
		.block_tokens = 16, .tp_rank = 0, .tp_size = 1,
		.dtype = KVS_DTYPE_BF16,
	};
	kvs_layout tenant = {
		.model = "qwen2-7b", .adapter = "lora-sql", .salt = "tenant-42",
		.layers = 28, .kv_heads = 4, .head_dim = 128, .block_tokens = 32,
		.tp_rank = 1, .tp_size = 2, .dtype = KVS_DTYPE_FP8_E4M3,
	};
	kvs_wire_hello_reply r = {
		.ns_id = 3, .arena_count = 1, .block_bytes = 2u << 20,
		.host_arena_bytes = 8ull << 30, .host_arena_id = 0x5eed0123456789abull,
	};
	kvs_hash hs[4] = {
		{ 0x0123456789abcdefull, 0xfedcba9876543210ull },
		{ 0x1111111111111111ull, 0x2222222222222222ull },
		{ 0xdeadbeefcafef00dull, 0x0ull },
		{ 0x8000000000000001ull, 0x7fffffffffffffffull },
	};
	kvs_block bs[3] = {
		{ .offset = 0, .gen = 1, .tier = KVS_TIER_HOST, .status = KVS_BLOCK_HIT },
		{ .offset = 2u << 20, .gen = 7, .tier = KVS_TIER_HOST,
		  .status = KVS_BLOCK_NEW },
		{ .offset = 4u << 20, .gen = 0xffffffffu, .tier = KVS_TIER_HOST,
		  .status = KVS_BLOCK_BUSY },
	};
	uint8_t p[4096];

	msg("hello-layout", KVS_OP_HELLO, 0, 1,
	    p, kvs_wire_hello_encode(&l, p, sizeof(p)));
	msg("hello-tenant", KVS_OP_HELLO, 0, 1,
	    p, kvs_wire_hello_encode(&tenant, p, sizeof(p)));
	msg("hello-control", KVS_OP_HELLO, 0, 1,
	    p, kvs_wire_hello_encode(NULL, p, sizeof(p)));
	msg("hello-reply", KVS_OP_HELLO, 0, 1,
	    p, kvs_wire_hello_reply_encode(&r, p, sizeof(p)));
	msg("lookup-4", KVS_OP_LOOKUP, 0, 2,
	    p, kvs_wire_hashes_encode(hs, 4, 0, p, sizeof(p)));
	msg("reserve-1", KVS_OP_RESERVE, 0, 3,
	    p, kvs_wire_hashes_encode(hs, 1, 0, p, sizeof(p)));
	msg("lookup-0", KVS_OP_LOOKUP, 0, 4,
	    p, kvs_wire_hashes_encode(hs, 0, 0, p, sizeof(p)));
	msg("lookup-reply-3", KVS_OP_LOOKUP, 0, 2,
	    p, kvs_wire_blocks_encode(0x100000001ull, bs, 3, p, sizeof(p)));
	msg("reserve-reply-0", KVS_OP_RESERVE, 0, 3,
	    p, kvs_wire_blocks_encode(0, bs, 0, p, sizeof(p)));
	msg("commit", KVS_OP_COMMIT, 0, 5,
	    p, kvs_wire_u64_encode(0x100000002ull, p, sizeof(p)));
	msg("commit-reply", KVS_OP_COMMIT, 0, 5,
	    p, kvs_wire_u64_encode(3, p, sizeof(p)));
	msg("release", KVS_OP_RELEASE, 0, 6,
	    p, kvs_wire_u64_encode(0x100000001ull, p, sizeof(p)));
	msg("stats", KVS_OP_STATS, 0, 7, p, 0);
	msg("error-reply-full", KVS_OP_RESERVE, KVS_E_FULL, 8, p, 0);
	{
		kvs_engine_report er = { 288, 9, 1179648, 1500, 1, 9, 700, 2 };

		msg("report", KVS_OP_REPORT, 0, 9,
		    p, kvs_wire_report_encode(&er, p, sizeof(p)));
	}
	msg("fastattach", KVS_OP_FASTATTACH, 0, 10,
	    p, kvs_wire_fast_req_encode(0, p, sizeof(p)));
	{
		kvs_wire_fast_reply fr = { 64 + 64 * 4096, 4096 + 128, 0x1234abcd,
					   4096, 496, 1 };

		msg("fastattach-reply", KVS_OP_FASTATTACH, 0, 10,
		    p, kvs_wire_fast_reply_encode(&fr, p, sizeof(p)));
	}
}

static void arg_seed(const char *name, const char *const *args)
{
	char buf[1024];
	size_t n = 0;

	/* Arguments after "kvshared", each ended by a NUL byte. */
	for (; *args; args++) {
		size_t len = strlen(*args) + 1;

		memcpy(buf + n, *args, len);
		n += len;
	}
	put("fuzz_config", name, buf, n);
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

static void config_seeds(void)
{
	static const char file[] =
		"# kvshared settings\n"
		"; another comment\n"
		"[kvshared]\n"
		"socket = /run/kvshare/kvshared.sock\n"
		"host-size = 1.5G\r\n"
		"  page-size=64K  \n"
		"\n"
		"log-level = debug\n"
		"max-clients = 64\n"
		"max-leases = 512\n"
		"eviction-policy = lru\n"
		"metrics-addr = 127.0.0.1:9464\n";

	put("fuzz_config", "size-512M", "512M", 4);
	put("fuzz_config", "size-1.5GiB", "1.5GiB", 6);
	put("fuzz_config", "size-4096B", "4096B", 5);
	put("fuzz_config", "file", file, sizeof(file) - 1);
	arg_seed("args-sizes", ARGS("--host-size", "256M", "--page-size=4K"));
	arg_seed("args-all", ARGS("--socket", "/tmp/kvs.sock", "--log-level=warn",
				  "--ready-fd", "3", "--max-clients", "8",
				  "--max-leases", "16", "--eviction-policy", "leaf-lru",
				  "--metrics-addr", "[::1]:9464"));
	arg_seed("args-print", ARGS("--host-size", "1G", "--print-config"));
	arg_seed("args-help", ARGS("--help"));
	arg_seed("args-bad", ARGS("--max-clients", "0", "extra"));
}

/* On-disk records as the store and the index write them. A header seed is
 * the header and the start of its sector's zero fill (the decoder reads the
 * header only); an index seed is a key and its value, or a value alone. */
static void ssd_seeds(void)
{
	static uint8_t sec[KVS_SSD_SECTOR];
	kvs_ssd_blk b = { .ns = 1, .len = 65536,
			  .hash = { 0x0123456789abcdefull, 0xfedcba9876543210ull },
			  .csum = 0x9e3779b97f4a7c15ull };
	kvs_ssd_loc l = { .seg = 3, .len = 65536, .gen = 0x18f0a1b2c3d4ull, .off = 4096 };
	kvs_ssd_sb sb = { .seg = 3, .used = 1, .seg_bytes = 256u << 20,
			  .gen = 0x18f0a1b2c3d4ull };
	kvs_index_key k = { .ns = 1, .hash = b.hash };
	kvs_index_val v = { .seg = 3, .len = 65536, .gen = l.gen, .off = 4096,
			    .csum = b.csum, .parent = { 0x1111, 0x2222 },
			    .atime = 123456789 };
	uint8_t kv[KVS_INDEX_KEY_BYTES + KVS_INDEX_VAL_BYTES];

	kvs_ssd_header_encode(sec, &b, &l);
	put("fuzz_ssd", "header-64k", sec, 128);
	b.len = l.len = 5000; /* a partial last sector */
	b.ns = 7;
	l.seg = 0;
	l.off = (256u << 20) - 3 * 4096;
	kvs_ssd_header_encode(sec, &b, &l);
	put("fuzz_ssd", "header-tail", sec, KVS_SSD_HDR_BYTES);
	kvs_ssd_sb_encode(sec, &sb);
	put("fuzz_ssd", "sb-used", sec, 64);
	sb.used = 0;
	sb.seg = 0;
	sb.seg_bytes = 64u << 10;
	kvs_ssd_sb_encode(sec, &sb);
	put("fuzz_ssd", "sb-free-64k", sec, KVS_SSD_SB_BYTES);
	kvs_index_key_encode(kv, &k);
	kvs_index_val_encode(kv + KVS_INDEX_KEY_BYTES, &v);
	put("fuzz_ssd", "index-entry", kv, sizeof(kv));
	v.parent = (kvs_hash){ 0, 0 }; /* a first block */
	v.off = 0xfffff000ull;
	kvs_index_val_encode(kv, &v);
	put("fuzz_ssd", "index-val-first", kv, KVS_INDEX_VAL_BYTES);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: make_corpus DIR (e.g. tests/fuzz/corpus)\n");
		return 1;
	}
	out_dir = argv[1];
	wire_seeds();
	admin_seeds();
	config_seeds();
	ssd_seeds();
	return failed;
}
