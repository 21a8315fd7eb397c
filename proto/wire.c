/* wire.c - the pure wire codec (see kvs_wire.h). Little-endian throughout. */
#include <errno.h>
#include <string.h>

#include "kvs_wire.h"
#include "kvs_le.h"
#include "kvs_ns.h"


void kvs_wire_hdr_encode(const kvs_wire_hdr *h, uint8_t *buf)
{
	put32(buf, h->magic);
	put16(buf + 4, h->version);
	put16(buf + 6, h->opcode);
	put32(buf + 8, h->len);
	put32(buf + 12, (uint32_t)h->status);
	put64(buf + 16, h->req_id);
}

int kvs_wire_hdr_decode(const uint8_t *buf, size_t n, uint32_t max_payload,
			kvs_wire_hdr *h)
{
	if (n < KVS_WIRE_HDR_SIZE)
		return -EAGAIN;
	h->magic = get32(buf);
	h->version = get16(buf + 4);
	h->opcode = get16(buf + 6);
	h->len = get32(buf + 8);
	h->status = (int32_t)get32(buf + 12);
	h->req_id = get64(buf + 16);
	if (h->magic != KVS_WIRE_MAGIC)
		return KVS_E_PROTO;
	if (h->len > max_payload)
		return KVS_E_TOOBIG;
	if (h->version != KVS_WIRE_VERSION)
		return KVS_E_VERSION;
	return 0;
}

/* HELLO: flags u32, the layout's seven u32 (kvs_ns.h: KVS_LAYOUT_DIMS),
 * 3 x u16 string lengths, u16 zero, then strings. */
#define HELLO_FIXED (4 + KVS_LAYOUT_DIMS_BYTES + 4 * 2)

static size_t name_len(const char *s)
{
	return s ? strlen(s) : 0;
}

int kvs_wire_hello_encode(const kvs_layout *l, uint8_t *buf, size_t cap)
{
	return kvs_wire_hello_encode_flags(l, 0, buf, cap);
}

int kvs_wire_hello_encode_flags(const kvs_layout *l, uint32_t flags,
				uint8_t *buf, size_t cap)
{
	size_t ml, al, sl, need;
	uint8_t *p = buf;

	if (flags & ~KVS_HELLO_GPU || (flags && !l))
		return -EINVAL;
	if (!l) {
		if (cap < HELLO_FIXED)
			return -ENOBUFS;
		memset(buf, 0, HELLO_FIXED);
		put32(buf, KVS_HELLO_CONTROL);
		return HELLO_FIXED;
	}
	ml = name_len(l->model);
	al = name_len(l->adapter);
	sl = name_len(l->salt);
	if (ml > KVS_NAME_MAX || al > KVS_NAME_MAX || sl > KVS_NAME_MAX)
		return -EINVAL;
	need = HELLO_FIXED + ml + al + sl;
	if (cap < need)
		return -ENOBUFS;
	put32(p, flags);
	kvs_layout_dims_put(p + 4, l);
	put16(p + 32, (uint16_t)ml);
	put16(p + 34, (uint16_t)al);
	put16(p + 36, (uint16_t)sl);
	put16(p + 38, 0);
	p += HELLO_FIXED;
	if (ml)
		memcpy(p, l->model, ml);
	if (al)
		memcpy(p + ml, l->adapter, al);
	if (sl)
		memcpy(p + ml + al, l->salt, sl);
	return (int)need;
}

int kvs_wire_hello_decode(const uint8_t *p, size_t n, kvs_wire_hello *o)
{
	if (n < HELLO_FIXED)
		return KVS_E_PROTO;
	o->flags = get32(p);
	kvs_layout_dims_get(p + 4, o);
	o->model_len = get16(p + 32);
	o->adapter_len = get16(p + 34);
	o->salt_len = get16(p + 36);
	if (o->flags & ~(KVS_HELLO_CONTROL | KVS_HELLO_GPU) ||
	    (o->flags & KVS_HELLO_CONTROL && o->flags & KVS_HELLO_GPU) ||
	    get16(p + 38) != 0)
		return KVS_E_PROTO;
	if (o->model_len > KVS_NAME_MAX || o->adapter_len > KVS_NAME_MAX ||
	    o->salt_len > KVS_NAME_MAX)
		return KVS_E_PROTO;
	if (n != HELLO_FIXED + (size_t)o->model_len + o->adapter_len + o->salt_len)
		return KVS_E_PROTO;
	o->model = (const char *)p + HELLO_FIXED;
	o->adapter = o->model + o->model_len;
	o->salt = o->adapter + o->adapter_len;
	/* Names are C strings everywhere else: a NUL inside one would make a
	 * layout that never matches itself (a new namespace per attach). */
	if (memchr(o->model, '\0', (size_t)o->model_len + o->adapter_len + o->salt_len))
		return KVS_E_PROTO;
	return 0;
}

#define HELLO_REPLY_SIZE 32
#define HELLO_REPLY_GPU_SIZE 48 /* arena_count 2 */

int kvs_wire_hello_reply_encode(const kvs_wire_hello_reply *r, uint8_t *buf,
				size_t cap)
{
	size_t n = r->arena_count == 2 ? HELLO_REPLY_GPU_SIZE : HELLO_REPLY_SIZE;

	if (r->arena_count > 2)
		return -EINVAL;
	if (cap < n)
		return -ENOBUFS;
	put32(buf, r->ns_id);
	put32(buf + 4, r->arena_count);
	put64(buf + 8, r->block_bytes);
	put64(buf + 16, r->host_arena_bytes);
	put64(buf + 24, r->host_arena_id);
	if (r->arena_count == 2) {
		put64(buf + 32, r->gpu_arena_bytes);
		put32(buf + 40, r->gpu_kind);
		put32(buf + 44, r->gpu_device);
	}
	return (int)n;
}

int kvs_wire_hello_reply_decode(const uint8_t *p, size_t n,
				kvs_wire_hello_reply *o)
{
	memset(o, 0, sizeof(*o));
	if (n != HELLO_REPLY_SIZE && n != HELLO_REPLY_GPU_SIZE)
		return KVS_E_PROTO;
	o->ns_id = get32(p);
	o->arena_count = get32(p + 4);
	o->block_bytes = get64(p + 8);
	o->host_arena_bytes = get64(p + 16);
	o->host_arena_id = get64(p + 24);
	if (o->arena_count > 2 ||
	    (o->arena_count == 2) != (n == HELLO_REPLY_GPU_SIZE))
		return KVS_E_PROTO;
	if (n == HELLO_REPLY_GPU_SIZE) {
		o->gpu_arena_bytes = get64(p + 32);
		o->gpu_kind = get32(p + 40);
		o->gpu_device = get32(p + 44);
	}
	return 0;
}

int kvs_wire_hashes_encode(const kvs_hash *hashes, uint32_t count,
			   uint32_t flags, uint8_t *buf, size_t cap)
{
	size_t need = 8 + (size_t)count * KVS_WIRE_HASH_SIZE;

	if (count > KVS_MAX_HASHES)
		return KVS_E_TOOMANY;
	if (cap < need)
		return -ENOBUFS;
	put32(buf, count);
	put32(buf + 4, flags);
	for (uint32_t i = 0; i < count; i++) {
		puth(buf + 8 + 16 * (size_t)i, hashes[i]);
	}
	return (int)need;
}

/* Hashes whose flags may hold the bits of @allowed only. */
static int hashes_decode(const uint8_t *p, size_t n, uint32_t allowed,
			 kvs_wire_hashes *o)
{
	if (n < 8)
		return KVS_E_PROTO;
	o->count = get32(p);
	o->flags = get32(p + 4);
	if (o->count > KVS_MAX_HASHES)
		return KVS_E_TOOMANY;
	if (o->flags & ~allowed)
		return KVS_E_PROTO;
	if (n != 8 + (size_t)o->count * KVS_WIRE_HASH_SIZE)
		return KVS_E_PROTO;
	o->hashes = p + 8;
	return 0;
}

int kvs_wire_hashes_decode(const uint8_t *p, size_t n, kvs_wire_hashes *o)
{
	return hashes_decode(p, n, 0, o);
}

int kvs_wire_lookup_decode(const uint8_t *p, size_t n, kvs_wire_hashes *o)
{
	int rc = hashes_decode(p, n, KVS_LOOKUP_QUERY | KVS_LOOKUP_REMOTE, o);

	if (rc == 0 && (o->flags & KVS_LOOKUP_REMOTE) && !(o->flags & KVS_LOOKUP_QUERY))
		return KVS_E_PROTO;
	return rc;
}

int kvs_wire_reserve_decode(const uint8_t *p, size_t n, kvs_wire_hashes *o)
{
	int rc = hashes_decode(p, n, KVS_RESERVE_AFTER, o);

	/* AFTER names a parent: a chain without one is malformed. */
	if (rc == 0 && (o->flags & KVS_RESERVE_AFTER) && o->count == 0)
		return KVS_E_PROTO;
	return rc;
}

/* Block entry: offset u64, gen u32, tier u8, status u8, u16 zero. */
int kvs_wire_blocks_encode(uint64_t lease, const kvs_block *blocks,
			   uint32_t count, uint8_t *buf, size_t cap)
{
	size_t need = 16 + (size_t)count * KVS_WIRE_BLOCK_SIZE;

	if (count > KVS_MAX_HASHES)
		return KVS_E_TOOMANY;
	if (cap < need)
		return -ENOBUFS;
	put64(buf, lease);
	put32(buf + 8, count);
	put32(buf + 12, 0);
	for (uint32_t i = 0; i < count; i++) {
		uint8_t *e = buf + 16 + (size_t)i * KVS_WIRE_BLOCK_SIZE;

		put64(e, blocks[i].offset);
		put32(e + 8, blocks[i].gen);
		e[12] = blocks[i].tier;
		e[13] = blocks[i].status;
		put16(e + 14, 0);
	}
	return (int)need;
}

int kvs_wire_blocks_decode(const uint8_t *p, size_t n, kvs_wire_blocks *o)
{
	if (n < 16)
		return KVS_E_PROTO;
	o->lease = get64(p);
	o->count = get32(p + 8);
	if (o->count > KVS_MAX_HASHES)
		return KVS_E_TOOMANY;
	if (get32(p + 12) != 0 ||
	    n != 16 + (size_t)o->count * KVS_WIRE_BLOCK_SIZE)
		return KVS_E_PROTO;
	for (uint32_t i = 0; i < o->count; i++)
		if (get16(p + 16 + (size_t)i * KVS_WIRE_BLOCK_SIZE + 14) != 0)
			return KVS_E_PROTO;
	o->blocks = p + 16;
	return 0;
}

int kvs_wire_u64_encode(uint64_t v, uint8_t *buf, size_t cap)
{
	if (cap < 8)
		return -ENOBUFS;
	put64(buf, v);
	return 8;
}

int kvs_wire_u64_decode(const uint8_t *p, size_t n, uint64_t *out)
{
	if (n != 8)
		return KVS_E_PROTO;
	*out = get64(p);
	return 0;
}

int kvs_wire_report_encode(const kvs_engine_report *r, uint8_t *buf,
			   size_t cap)
{
	uint8_t *p = buf;

	if (cap < KVS_WIRE_REPORT_SIZE)
		return -ENOBUFS;
#define PUT(f) put64(p, r->f), p += 8;
	KVS_WIRE_REPORT_FIELDS(PUT)
#undef PUT
	return KVS_WIRE_REPORT_SIZE;
}

int kvs_wire_report_decode(const uint8_t *p, size_t n, kvs_engine_report *out)
{
	if (n != KVS_WIRE_REPORT_SIZE)
		return KVS_E_PROTO;
#define GET(f) out->f = get64(p), p += 8;
	KVS_WIRE_REPORT_FIELDS(GET)
#undef GET
	return 0;
}

int kvs_wire_fast_req_encode(uint32_t flags, uint8_t *buf, size_t cap)
{
	if (cap < KVS_WIRE_FAST_REQ_SIZE)
		return -ENOBUFS;
	put32(buf, flags);
	put32(buf + 4, 0);
	return KVS_WIRE_FAST_REQ_SIZE;
}

int kvs_wire_fast_req_decode(const uint8_t *p, size_t n, uint32_t *flags)
{
	if (n != KVS_WIRE_FAST_REQ_SIZE || get32(p) != 0 || get32(p + 4) != 0)
		return KVS_E_PROTO;
	*flags = 0;
	return 0;
}

int kvs_wire_fast_reply_encode(const kvs_wire_fast_reply *r, uint8_t *buf,
			       size_t cap)
{
	if (cap < KVS_WIRE_FAST_REPLY_SIZE)
		return -ENOBUFS;
	put64(buf, r->index_bytes);
	put64(buf + 8, r->pins_bytes);
	put64(buf + 16, r->arena_id);
	put32(buf + 24, r->entries);
	put32(buf + 28, r->pin_cap);
	put32(buf + 32, r->version);
	put32(buf + 36, 0);
	return KVS_WIRE_FAST_REPLY_SIZE;
}

int kvs_wire_fast_reply_decode(const uint8_t *p, size_t n,
			       kvs_wire_fast_reply *r)
{
	if (n != KVS_WIRE_FAST_REPLY_SIZE || get32(p + 36) != 0)
		return KVS_E_PROTO;
	r->index_bytes = get64(p);
	r->pins_bytes = get64(p + 8);
	r->arena_id = get64(p + 16);
	r->entries = get32(p + 24);
	r->pin_cap = get32(p + 28);
	r->version = get32(p + 32);
	if (r->entries == 0 || (r->entries & (r->entries - 1)) || r->pin_cap == 0)
		return KVS_E_PROTO;
	return 0;
}

kvs_hash kvs_wire_hash_at(const uint8_t *hashes, uint32_t i)
{
	return geth(hashes + 16 * (size_t)i);
}

kvs_block kvs_wire_block_at(const uint8_t *blocks, uint32_t i)
{
	const uint8_t *e = blocks + (size_t)i * KVS_WIRE_BLOCK_SIZE;
	kvs_block b;

	b.offset = get64(e);
	b.gen = get32(e + 8);
	b.tier = e[12];
	b.status = e[13];
	return b;
}

const char *kvs_wire_opcode_name(uint32_t op)
{
	static const char *const names[KVS_OP__COUNT] = {
#define KVS_WIRE_OP_NAME(op, num, name) [KVS_OP_##op] = name,
		KVS_WIRE_OPCODES(KVS_WIRE_OP_NAME)
#undef KVS_WIRE_OP_NAME
	};
	if (op < KVS_OP__COUNT && names[op])
		return names[op];
	return "unknown";
}
