/*
 * test_wire_admin - the operator messages' codec (proto/wire_admin.c):
 * round trips of every encoder and decoder, and the decode errors
 * (truncated, trailing bytes, fields out of range). Exit 0 pass, 1 fail.
 */
#include <errno.h>
#include <string.h>

#include "kvs_check.h"
#include "kvs_wire_admin.h"

/* LIST's request, unpaged (8 bytes) and paged (16, the cursor last); a top
 * past the maximum is refused. */
static void list_req_codec(uint8_t *b, size_t size)
{
	kvs_wire_list_req r = { .ns = 3, .top = 5 }, d;

	CHECK(kvs_wire_list_req_encode(&r, b, size) == 8);
	CHECK(kvs_wire_list_req_decode(b, 8, &d) == 0 && d.ns == 3 && d.top == 5);
	CHECK(kvs_wire_list_req_decode(b, 7, &d) == KVS_E_PROTO);
	CHECK(d.paged == 0 && d.cursor == 0);
	/* Paged: 16 bytes, the cursor last. */
	r.paged = 1;
	r.cursor = 0x123456789ull;
	CHECK(kvs_wire_list_req_encode(&r, b, 15) == -ENOBUFS);
	CHECK(kvs_wire_list_req_encode(&r, b, size) == 16);
	CHECK(kvs_wire_list_req_decode(b, 16, &d) == 0 && d.paged == 1 &&
	      d.cursor == 0x123456789ull && d.ns == 3 && d.top == 5);
	CHECK(kvs_wire_list_req_decode(b, 12, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_list_req_decode(b, 24, &d) == KVS_E_PROTO);
	r.paged = 0;
	r.top = KVS_WIRE_LIST_TOP_MAX + 1;
	CHECK(kvs_wire_list_req_encode(&r, b, size) == -EINVAL);
}

/* LIST's reply header, unpaged and paged: neither decodes as the other. */
static void list_hdr_and_page(uint8_t *b, size_t size)
{
	uint32_t count;

	CHECK(kvs_wire_list_hdr_encode(9, b, size) == 8);
	CHECK(kvs_wire_list_hdr_decode(b, 8, &count) == 0 && count == 9);
	b[4] = 1;
	CHECK(kvs_wire_list_hdr_decode(b, 8, &count) == KVS_E_PROTO);
	{
		uint64_t next;

		CHECK(kvs_wire_list_page_encode(9, 77, b, 15) == -ENOBUFS);
		CHECK(kvs_wire_list_page_encode(9, 77, b, size) == 16);
		CHECK(kvs_wire_list_page_decode(b, 16, &count, &next) == 0 &&
		      count == 9 && next == 77);
		CHECK(kvs_wire_list_page_decode(b, 15, &count, &next) == KVS_E_PROTO);
		/* An unpaged header is not a page, nor the reverse. */
		CHECK(kvs_wire_list_hdr_decode(b, 16, &count) == KVS_E_PROTO);
		kvs_wire_list_hdr_encode(9, b, size);
		CHECK(kvs_wire_list_page_decode(b, 16, &count, &next) == KVS_E_PROTO);
	}
}

/* A namespace entry with its top prefixes, decoded as encoded; every cut
 * short, and a NUL in the model name, refused. */
static void list_ns_round_trip(const kvs_wire_ns *e, const kvs_wire_prefix *top,
			       uint8_t *b, size_t size)
{
	kvs_wire_ns o;
	size_t used;
	int n;

	n = kvs_wire_ns_encode(e, top, b, size);
	CHECK(n == KVS_WIRE_NS_FIXED + 9 + 2 * KVS_WIRE_PREFIX_SIZE);
	CHECK(kvs_wire_ns_encode(e, top, b, (size_t)n - 1) == -ENOBUFS);
	CHECK(kvs_wire_ns_decode(b, (size_t)n + 10, &o, &used) == 0 && used == (size_t)n);
	CHECK(o.id == e->id && o.layers == e->layers &&
	      o.kv_heads == e->kv_heads && o.head_dim == e->head_dim &&
	      o.block_tokens == e->block_tokens &&
	      o.tp_rank == e->tp_rank && o.tp_size == e->tp_size &&
	      o.dtype == e->dtype && o.clients == e->clients &&
	      o.flags == e->flags && o.block_bytes == e->block_bytes &&
	      o.blocks == e->blocks && o.writing == e->writing &&
	      o.hits == e->hits && o.pinned == e->pinned &&
	      o.roots == e->roots &&
	      o.longest == e->longest && o.ntop == e->ntop);
	CHECK(o.model_len == 5 && !memcmp(o.model, "llama", 5));
	CHECK(o.adapter_len == 4 && !memcmp(o.adapter, "lora", 4));
	{
		kvs_wire_prefix p0 = kvs_wire_prefix_at(o.top, 0);
		kvs_wire_prefix p1 = kvs_wire_prefix_at(o.top, 1);

		CHECK(p0.hash.lo == 1 && p0.hash.hi == 2 && p0.hits == 10 &&
		      p0.root_hits == 20 && p0.depth == 4 &&
		      p0.flags == KVS_WIRE_PREFIX_PINNED);
		CHECK(p1.hash.lo == 3 && p1.depth == 2 && p1.flags == 0);
	}
	for (int cut = 0; cut < n; cut++)
		CHECK(kvs_wire_ns_decode(b, (size_t)cut, &o, &used) == KVS_E_PROTO);
	b[KVS_WIRE_NS_FIXED] = '\0'; /* NUL in the model name */
	CHECK(kvs_wire_ns_decode(b, (size_t)n, &o, &used) == KVS_E_PROTO);
}

/* A tenant's namespace carries the uid owning its arena; a uid without the
 * flag, or a nonzero reserved word, is refused. */
static void list_ns_tenant(kvs_wire_ns *e, const kvs_wire_prefix *top,
			   uint8_t *b, size_t size)
{
	kvs_wire_ns o;
	size_t used;
	int n;

	e->uid = 1000;
	CHECK(kvs_wire_ns_encode(e, top, b, size) == -EINVAL);
	e->flags |= KVS_WIRE_NS_TENANT;
	n = kvs_wire_ns_encode(e, top, b, size);
	CHECK(n == KVS_WIRE_NS_FIXED + 9 + 2 * KVS_WIRE_PREFIX_SIZE);
	CHECK(kvs_wire_ns_decode(b, (size_t)n, &o, &used) == 0 &&
	      o.uid == 1000 &&
	      o.flags == (KVS_WIRE_NS_SALTED | KVS_WIRE_NS_TENANT));
	b[36] &= (uint8_t)~KVS_WIRE_NS_TENANT; /* flags: uid without tenant */
	CHECK(kvs_wire_ns_decode(b, (size_t)n, &o, &used) == KVS_E_PROTO);
	b[36] |= KVS_WIRE_NS_TENANT;
	b[100] = 1; /* the reserved word */
	CHECK(kvs_wire_ns_decode(b, (size_t)n, &o, &used) == KVS_E_PROTO);
	e->flags = 0x4; /* an unknown flag */
	CHECK(kvs_wire_ns_encode(e, top, b, size) == -EINVAL);
}

static void test_list(void)
{
	kvs_wire_prefix top[2] = {
		{ .hash = { 1, 2 }, .hits = 10, .root_hits = 20, .depth = 4,
		  .flags = KVS_WIRE_PREFIX_PINNED },
		{ .hash = { 3, 4 }, .hits = 5, .root_hits = 6, .depth = 2 },
	};
	kvs_wire_ns e = { .id = 1, .layers = 32, .kv_heads = 8, .head_dim = 128,
			  .block_tokens = 16, .tp_rank = 3, .tp_size = 4,
			  .dtype = 1, .clients = 2, .flags = KVS_WIRE_NS_SALTED,
			  .block_bytes = 1 << 20, .blocks = 7, .writing = 11,
			  .hits = 99, .pinned = 13, .roots = 6, .longest = 5,
			  .model = "llama", .model_len = 5, .adapter = "lora",
			  .adapter_len = 4, .ntop = 2 };
	uint8_t b[512];

	list_req_codec(b, sizeof(b));
	list_hdr_and_page(b, sizeof(b));
	list_ns_round_trip(&e, top, b, sizeof(b));
	list_ns_tenant(&e, top, b, sizeof(b));
}

static void test_inspect(void)
{
	kvs_wire_inspect_req r = { .ns = 2, .hash = { 5, 6 } }, dr;
	kvs_wire_block_info i = { .hash = { 7, 8 }, .ns = 12, .tier = 2, .state = 3,
				  .flags = KVS_WIRE_INFO_PINNED | KVS_WIRE_INFO_PARENT,
				  .offset = (1ull << 40) + 13, .gen = 9, .refs = 14,
				  .children = 15, .hits = 16, .age_s = (1ull << 33) + 60,
				  .depth = 17, .parent = { 10, 11 } }, d;
	uint8_t b[128];

	CHECK(kvs_wire_inspect_req_encode(&r, b, sizeof(b)) == KVS_WIRE_INSPECT_REQ_SIZE);
	CHECK(kvs_wire_inspect_req_decode(b, KVS_WIRE_INSPECT_REQ_SIZE, &dr) == 0 &&
	      dr.ns == 2 && dr.hash.lo == 5 && dr.hash.hi == 6);
	CHECK(kvs_wire_inspect_req_decode(b, KVS_WIRE_INSPECT_REQ_SIZE + 1, &dr) ==
	      KVS_E_PROTO);
	CHECK(kvs_wire_block_info_encode(&i, b, sizeof(b)) == KVS_WIRE_BLOCK_INFO_SIZE);
	CHECK(kvs_wire_block_info_decode(b, KVS_WIRE_BLOCK_INFO_SIZE, &d) == 0);
	/* Every field, each with its own value: a field read from another's
	 * offset, or not read at all, differs. */
	CHECK_EQ(d.hash.lo, i.hash.lo);
	CHECK_EQ(d.hash.hi, i.hash.hi);
	CHECK_EQ(d.ns, i.ns);
	CHECK_EQ(d.tier, i.tier);
	CHECK_EQ(d.state, i.state);
	CHECK_EQ(d.flags, i.flags);
	CHECK_EQ(d.offset, i.offset);
	CHECK_EQ(d.gen, i.gen);
	CHECK_EQ(d.refs, i.refs);
	CHECK_EQ(d.children, i.children);
	CHECK_EQ(d.hits, i.hits);
	CHECK_EQ(d.age_s, i.age_s);
	CHECK_EQ(d.depth, i.depth);
	CHECK_EQ(d.parent.lo, i.parent.lo);
	CHECK_EQ(d.parent.hi, i.parent.hi);
	b[22] = 0x80; /* unknown flag */
	CHECK(kvs_wire_block_info_decode(b, KVS_WIRE_BLOCK_INFO_SIZE, &d) == KVS_E_PROTO);
	b[22] = 0;
	/* A state or tier that does not exist (found by fuzz_admin). */
	for (int v = 0; v < 256; v++) {
		b[21] = (uint8_t)v;
		CHECK((kvs_wire_block_info_decode(b, KVS_WIRE_BLOCK_INFO_SIZE, &d) == 0) ==
		      (v >= 1 && v <= 3));
	}
	b[21] = 2;
	b[20] = KVS_TIER_SSD + 1;
	CHECK(kvs_wire_block_info_decode(b, KVS_WIRE_BLOCK_INFO_SIZE, &d) == KVS_E_PROTO);
	i.state = 0;
	CHECK(kvs_wire_block_info_encode(&i, b, sizeof(b)) == -EINVAL);
	i.state = 2;
	i.tier = 9;
	CHECK(kvs_wire_block_info_encode(&i, b, sizeof(b)) == -EINVAL);
}

static void test_evict_pin(void)
{
	kvs_wire_evict_req r = { .scope = KVS_EVICT_PREFIX, .flags = KVS_WIRE_EVICT_FLUSH,
				 .ns = 0, .hash = { 1, 2 } }, d;
	kvs_wire_evict_reply rep = { 5, 6, 7 }, drep;
	kvs_hash h[2] = { { 1, 2 }, { 3, 4 } };
	kvs_wire_hashes dh;
	uint8_t b[128];
	uint32_t ns;
	int n;

	CHECK(kvs_wire_evict_req_encode(&r, b, sizeof(b)) == KVS_WIRE_EVICT_REQ_SIZE);
	CHECK(kvs_wire_evict_req_decode(b, KVS_WIRE_EVICT_REQ_SIZE, &d) == 0 &&
	      d.scope == KVS_EVICT_PREFIX && d.flags == KVS_WIRE_EVICT_FLUSH &&
	      d.hash.hi == 2);
	b[0] = 9; /* unknown scope */
	CHECK(kvs_wire_evict_req_decode(b, KVS_WIRE_EVICT_REQ_SIZE, &d) == KVS_E_PROTO);
	r.scope = KVS_EVICT_NAMESPACE; /* needs a namespace */
	CHECK(kvs_wire_evict_req_encode(&r, b, sizeof(b)) == -EINVAL);
	CHECK(kvs_wire_evict_reply_encode(&rep, b, sizeof(b)) == KVS_WIRE_EVICT_REPLY_SIZE);
	CHECK(kvs_wire_evict_reply_decode(b, KVS_WIRE_EVICT_REPLY_SIZE, &drep) == 0 &&
	      drep.freed == 5 && drep.pinned == 6 && drep.kept == 7);

	n = kvs_wire_pin_req_encode(4, h, 2, b, sizeof(b));
	CHECK(n == 4 + 8 + 32);
	CHECK(kvs_wire_pin_req_decode(b, (size_t)n, &ns, &dh) == 0 && ns == 4 &&
	      dh.count == 2 && kvs_wire_hash_at(dh.hashes, 1).hi == 4);
	CHECK(kvs_wire_pin_req_decode(b, (size_t)n - 1, &ns, &dh) == KVS_E_PROTO);
	CHECK(kvs_wire_pin_req_decode(b, 3, &ns, &dh) == KVS_E_PROTO);
}

static void test_events(void)
{
	kvs_wire_event e = { .kind = KVS_EVENT_FLUSHED, .ns = 3, .hash = { 9, 10 },
			     .seq = 42 };
	kvs_wire_events d;
	uint8_t b[16 + 2 * KVS_WIRE_EVENT_SIZE];

	CHECK(kvs_wire_events_hdr_encode(2, 7, b, sizeof(b)) == 16);
	CHECK(kvs_wire_event_encode(&e, b + 16, KVS_WIRE_EVENT_SIZE) == KVS_WIRE_EVENT_SIZE);
	e.kind = KVS_EVENT_STORED;
	e.seq = 43;
	CHECK(kvs_wire_event_encode(&e, b + 16 + KVS_WIRE_EVENT_SIZE,
				    KVS_WIRE_EVENT_SIZE) == KVS_WIRE_EVENT_SIZE);
	CHECK(kvs_wire_events_decode(b, sizeof(b), &d) == 0 && d.count == 2 &&
	      d.dropped == 7);
	CHECK(kvs_wire_event_at(d.events, 0).kind == KVS_EVENT_FLUSHED &&
	      kvs_wire_event_at(d.events, 0).seq == 42 &&
	      kvs_wire_event_at(d.events, 1).hash.hi == 10);
	CHECK(kvs_wire_events_decode(b, sizeof(b) - 1, &d) == KVS_E_PROTO);
	b[16] = 77; /* unknown kind */
	CHECK(kvs_wire_events_decode(b, sizeof(b), &d) == KVS_E_PROTO);
	e.kind = 0;
	CHECK(kvs_wire_event_encode(&e, b, sizeof(b)) == -EINVAL);
	CHECK(!strcmp(kvs_wire_opcode_name(KVS_OP_WATCH), "watch"));
}

static void test_verify(void)
{
	kvs_wire_verify_req r = { .ns = 2, .max_failed = 10 }, d;
	kvs_wire_verify_fail f[2] = {
		{ .hash = { 1, 2 }, .ns = 2, .error = -EBADMSG },
		{ .hash = { 3, 4 }, .ns = 1, .error = -EIO },
	};
	kvs_wire_verify_reply rep = { .checked = 9, .ok = 6, .failed = 3,
				      .skipped = 1, .count = 2,
				      .flags = KVS_WIRE_VERIFY_SSD }, o;
	uint8_t b[KVS_WIRE_VERIFY_REPLY_FIXED + 2 * KVS_WIRE_VERIFY_FAIL_SIZE];
	int n;

	CHECK(kvs_wire_verify_req_encode(&r, b, sizeof(b)) == KVS_WIRE_VERIFY_REQ_SIZE);
	CHECK(kvs_wire_verify_req_encode(&r, b, KVS_WIRE_VERIFY_REQ_SIZE - 1) == -ENOBUFS);
	CHECK(kvs_wire_verify_req_decode(b, KVS_WIRE_VERIFY_REQ_SIZE, &d) == 0 &&
	      d.ns == 2 && d.max_failed == 10);
	CHECK(kvs_wire_verify_req_decode(b, KVS_WIRE_VERIFY_REQ_SIZE + 1, &d) == KVS_E_PROTO);
	CHECK(kvs_wire_verify_req_decode(b, KVS_WIRE_VERIFY_REQ_SIZE - 1, &d) == KVS_E_PROTO);
	r.max_failed = KVS_WIRE_VERIFY_FAILED_MAX + 1;
	CHECK(kvs_wire_verify_req_encode(&r, b, sizeof(b)) == -EINVAL);
	b[4] = 0xff; b[5] = 0xff; /* max_failed over the limit */
	CHECK(kvs_wire_verify_req_decode(b, KVS_WIRE_VERIFY_REQ_SIZE, &d) == KVS_E_PROTO);

	n = kvs_wire_verify_reply_encode(&rep, f, b, sizeof(b));
	CHECK(n == (int)sizeof(b));
	CHECK(kvs_wire_verify_reply_encode(&rep, f, b, sizeof(b) - 1) == -ENOBUFS);
	CHECK(kvs_wire_verify_reply_decode(b, sizeof(b), &o) == 0);
	CHECK(o.checked == 9 && o.ok == 6 && o.failed == 3 && o.skipped == 1 &&
	      o.count == 2 && o.flags == KVS_WIRE_VERIFY_SSD);
	{
		kvs_wire_verify_fail f0 = kvs_wire_verify_fail_at(o.fails, 0);
		kvs_wire_verify_fail f1 = kvs_wire_verify_fail_at(o.fails, 1);

		CHECK(f0.hash.lo == 1 && f0.hash.hi == 2 && f0.ns == 2 &&
		      f0.error == -EBADMSG);
		CHECK(f1.hash.lo == 3 && f1.ns == 1 && f1.error == -EIO);
	}
	CHECK(kvs_wire_verify_reply_decode(b, sizeof(b) - 1, &o) == KVS_E_PROTO);
	CHECK(kvs_wire_verify_reply_decode(b, 39, &o) == KVS_E_PROTO);
	b[36] = 2; /* unknown flag */
	CHECK(kvs_wire_verify_reply_decode(b, sizeof(b), &o) == KVS_E_PROTO);
	b[36] = 1;
	b[8] = 7; /* ok 7: checked - ok != failed */
	CHECK(kvs_wire_verify_reply_decode(b, sizeof(b), &o) == KVS_E_PROTO);
	rep.count = 4; /* more listed than failed */
	CHECK(kvs_wire_verify_reply_encode(&rep, f, b, sizeof(b)) == -EINVAL);
	/* No SSD tier: all zero, nothing listed. */
	rep = (kvs_wire_verify_reply){ 0 };
	CHECK(kvs_wire_verify_reply_encode(&rep, NULL, b, sizeof(b)) ==
	      KVS_WIRE_VERIFY_REPLY_FIXED);
	CHECK(kvs_wire_verify_reply_decode(b, KVS_WIRE_VERIFY_REPLY_FIXED, &o) == 0 &&
	      o.flags == 0 && o.count == 0 && o.checked == 0);
	CHECK(!strcmp(kvs_wire_opcode_name(KVS_OP_VERIFY), "verify"));
}

int main(void)
{
	test_list();
	test_inspect();
	test_evict_pin();
	test_events();
	test_verify();
	return check_summary("test_wire_admin");
}
