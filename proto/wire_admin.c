/* wire_admin.c - the operator messages' codec (see kvs_wire_admin.h). */
#include <errno.h>
#include <string.h>

#include "kvs_wire_admin.h"
#include "kvs_le.h"
#include "kvs_ns.h"

/* ---- list ---- */

int kvs_wire_list_req_encode(const kvs_wire_list_req *r, uint8_t *buf, size_t cap)
{
	if (r->top > KVS_WIRE_LIST_TOP_MAX)
		return -EINVAL;
	if (r->paged > 1)
		return -EINVAL;
	if (cap < (r->paged ? 16u : 8u))
		return -ENOBUFS;
	put32(buf, r->ns);
	put32(buf + 4, r->top);
	if (!r->paged)
		return 8;
	put64(buf + 8, r->cursor);
	return 16;
}

int kvs_wire_list_req_decode(const uint8_t *p, size_t n, kvs_wire_list_req *o)
{
	if (n != 8 && n != 16)
		return KVS_E_PROTO;
	o->ns = get32(p);
	o->top = get32(p + 4);
	o->paged = n == 16;
	o->cursor = o->paged ? get64(p + 8) : 0;
	return o->top > KVS_WIRE_LIST_TOP_MAX ? KVS_E_PROTO : 0;
}

int kvs_wire_list_page_encode(uint32_t count, uint64_t next, uint8_t *buf,
			      size_t cap)
{
	if (cap < 16)
		return -ENOBUFS;
	put32(buf, count);
	put32(buf + 4, KVS_WIRE_LIST_PAGED);
	put64(buf + 8, next);
	return 16;
}

int kvs_wire_list_page_decode(const uint8_t *p, size_t n, uint32_t *count,
			      uint64_t *next)
{
	if (n < 16 || get32(p + 4) != KVS_WIRE_LIST_PAGED)
		return KVS_E_PROTO;
	*count = get32(p);
	*next = get64(p + 8);
	return 0;
}

int kvs_wire_list_hdr_encode(uint32_t count, uint8_t *buf, size_t cap)
{
	if (cap < 8)
		return -ENOBUFS;
	put32(buf, count);
	put32(buf + 4, 0);
	return 8;
}

int kvs_wire_list_hdr_decode(const uint8_t *p, size_t n, uint32_t *count)
{
	if (n < 8 || get32(p + 4) != 0)
		return KVS_E_PROTO;
	*count = get32(p);
	return 0;
}

int kvs_wire_ns_encode(const kvs_wire_ns *e, const kvs_wire_prefix *top,
		       uint8_t *buf, size_t cap)
{
	size_t need = KVS_WIRE_NS_FIXED + (size_t)e->model_len + e->adapter_len +
		      (size_t)e->ntop * KVS_WIRE_PREFIX_SIZE;
	uint8_t *p = buf;

	if (e->model_len > KVS_NAME_MAX || e->adapter_len > KVS_NAME_MAX ||
	    e->ntop > KVS_WIRE_LIST_TOP_MAX || e->flags & ~KVS_WIRE_NS_FLAGS ||
	    (e->uid && !(e->flags & KVS_WIRE_NS_TENANT)))
		return -EINVAL;
	if (cap < need)
		return -ENOBUFS;
	put32(p, e->id);
	kvs_layout_dims_put(p + 4, e);
	put32(p + 32, e->clients);
	put32(p + 36, e->flags);
	put64(p + 40, e->block_bytes);
	put64(p + 48, e->blocks);
	put64(p + 56, e->writing);
	put64(p + 64, e->hits);
	put64(p + 72, e->pinned);
	put32(p + 80, e->roots);
	put32(p + 84, e->longest);
	put16(p + 88, e->model_len);
	put16(p + 90, e->adapter_len);
	put32(p + 92, e->ntop);
	put32(p + 96, e->uid);
	put32(p + 100, 0);
	p += KVS_WIRE_NS_FIXED;
	if (e->model_len)
		memcpy(p, e->model, e->model_len);
	p += e->model_len;
	if (e->adapter_len)
		memcpy(p, e->adapter, e->adapter_len);
	p += e->adapter_len;
	for (uint32_t i = 0; i < e->ntop; i++, p += KVS_WIRE_PREFIX_SIZE) {
		if (top[i].flags & ~KVS_WIRE_PREFIX_PINNED)
			return -EINVAL;
		puth(p, top[i].hash);
		put64(p + 16, top[i].hits);
		put64(p + 24, top[i].root_hits);
		put32(p + 32, top[i].depth);
		put32(p + 36, top[i].flags);
	}
	return (int)need;
}

int kvs_wire_ns_decode(const uint8_t *p, size_t n, kvs_wire_ns *o, size_t *used)
{
	size_t need;

	if (n < KVS_WIRE_NS_FIXED)
		return KVS_E_PROTO;
	o->id = get32(p);
	kvs_layout_dims_get(p + 4, o);
	o->clients = get32(p + 32);
	o->flags = get32(p + 36);
	o->block_bytes = get64(p + 40);
	o->blocks = get64(p + 48);
	o->writing = get64(p + 56);
	o->hits = get64(p + 64);
	o->pinned = get64(p + 72);
	o->roots = get32(p + 80);
	o->longest = get32(p + 84);
	o->model_len = get16(p + 88);
	o->adapter_len = get16(p + 90);
	o->ntop = get32(p + 92);
	o->uid = get32(p + 96);
	if (get32(p + 100) != 0 || (o->uid && !(o->flags & KVS_WIRE_NS_TENANT)))
		return KVS_E_PROTO;
	if (o->flags & ~KVS_WIRE_NS_FLAGS || o->model_len > KVS_NAME_MAX ||
	    o->adapter_len > KVS_NAME_MAX || o->ntop > KVS_WIRE_LIST_TOP_MAX)
		return KVS_E_PROTO;
	need = KVS_WIRE_NS_FIXED + (size_t)o->model_len + o->adapter_len +
	       (size_t)o->ntop * KVS_WIRE_PREFIX_SIZE;
	if (n < need)
		return KVS_E_PROTO;
	o->model = (const char *)p + KVS_WIRE_NS_FIXED;
	o->adapter = o->model + o->model_len;
	if (memchr(o->model, '\0', (size_t)o->model_len + o->adapter_len))
		return KVS_E_PROTO;
	o->top = (const uint8_t *)o->adapter + o->adapter_len;
	for (uint32_t i = 0; i < o->ntop; i++)
		if (get32(o->top + (size_t)i * KVS_WIRE_PREFIX_SIZE + 36) &
		    ~KVS_WIRE_PREFIX_PINNED)
			return KVS_E_PROTO;
	*used = need;
	return 0;
}

kvs_wire_prefix kvs_wire_prefix_at(const uint8_t *top, uint32_t i)
{
	const uint8_t *e = top + (size_t)i * KVS_WIRE_PREFIX_SIZE;

	return (kvs_wire_prefix){ .hash = geth(e), .hits = get64(e + 16),
				  .root_hits = get64(e + 24),
				  .depth = get32(e + 32), .flags = get32(e + 36) };
}

/* ---- inspect ---- */

int kvs_wire_inspect_req_encode(const kvs_wire_inspect_req *r, uint8_t *buf,
				size_t cap)
{
	if (cap < KVS_WIRE_INSPECT_REQ_SIZE)
		return -ENOBUFS;
	put32(buf, r->ns);
	put32(buf + 4, 0);
	puth(buf + 8, r->hash);
	return KVS_WIRE_INSPECT_REQ_SIZE;
}

int kvs_wire_inspect_req_decode(const uint8_t *p, size_t n,
				kvs_wire_inspect_req *o)
{
	if (n != KVS_WIRE_INSPECT_REQ_SIZE || get32(p + 4) != 0)
		return KVS_E_PROTO;
	o->ns = get32(p);
	o->hash = geth(p + 8);
	return 0;
}

#define INFO_FLAGS (KVS_WIRE_INFO_PINNED | KVS_WIRE_INFO_PARENT)

/* A state (1 writing, 2 ready, 3 ghost) and tier (kvs_tier) that exist. */
static int info_ok(const kvs_wire_block_info *i)
{
	return !(i->flags & ~INFO_FLAGS) && i->state >= 1 && i->state <= 3 &&
	       i->tier <= KVS_TIER_SSD;
}

int kvs_wire_block_info_encode(const kvs_wire_block_info *i, uint8_t *buf,
			       size_t cap)
{
	if (!info_ok(i))
		return -EINVAL;
	if (cap < KVS_WIRE_BLOCK_INFO_SIZE)
		return -ENOBUFS;
	puth(buf, i->hash);
	put32(buf + 16, i->ns);
	buf[20] = i->tier;
	buf[21] = i->state;
	put16(buf + 22, i->flags);
	put64(buf + 24, i->offset);
	put32(buf + 32, i->gen);
	put32(buf + 36, i->refs);
	put32(buf + 40, i->children);
	put32(buf + 44, i->hits);
	put64(buf + 48, i->age_s);
	put32(buf + 56, i->depth);
	put32(buf + 60, 0);
	puth(buf + 64, i->parent);
	return KVS_WIRE_BLOCK_INFO_SIZE;
}

int kvs_wire_block_info_decode(const uint8_t *p, size_t n,
			       kvs_wire_block_info *o)
{
	if (n != KVS_WIRE_BLOCK_INFO_SIZE || get32(p + 60) != 0)
		return KVS_E_PROTO;
	o->hash = geth(p);
	o->ns = get32(p + 16);
	o->tier = p[20];
	o->state = p[21];
	o->flags = get16(p + 22);
	o->offset = get64(p + 24);
	o->gen = get32(p + 32);
	o->refs = get32(p + 36);
	o->children = get32(p + 40);
	o->hits = get32(p + 44);
	o->age_s = get64(p + 48);
	o->depth = get32(p + 56);
	o->parent = geth(p + 64);
	return info_ok(o) ? 0 : KVS_E_PROTO;
}

/* ---- evict ---- */

static int evict_req_ok(const kvs_wire_evict_req *r)
{
	return r->scope >= KVS_EVICT_NAMESPACE && r->scope <= KVS_EVICT_ALL &&
	       !(r->flags & ~KVS_WIRE_EVICT_FLUSH) &&
	       (r->scope != KVS_EVICT_NAMESPACE || r->ns != 0);
}

int kvs_wire_evict_req_encode(const kvs_wire_evict_req *r, uint8_t *buf,
			      size_t cap)
{
	if (!evict_req_ok(r))
		return -EINVAL;
	if (cap < KVS_WIRE_EVICT_REQ_SIZE)
		return -ENOBUFS;
	put32(buf, r->scope);
	put32(buf + 4, r->flags);
	put32(buf + 8, r->ns);
	put32(buf + 12, 0);
	puth(buf + 16, r->hash);
	return KVS_WIRE_EVICT_REQ_SIZE;
}

int kvs_wire_evict_req_decode(const uint8_t *p, size_t n, kvs_wire_evict_req *o)
{
	if (n != KVS_WIRE_EVICT_REQ_SIZE || get32(p + 12) != 0)
		return KVS_E_PROTO;
	o->scope = get32(p);
	o->flags = get32(p + 4);
	o->ns = get32(p + 8);
	o->hash = geth(p + 16);
	return evict_req_ok(o) ? 0 : KVS_E_PROTO;
}

int kvs_wire_evict_reply_encode(const kvs_wire_evict_reply *r, uint8_t *buf,
				size_t cap)
{
	if (cap < KVS_WIRE_EVICT_REPLY_SIZE)
		return -ENOBUFS;
	put64(buf, r->freed);
	put64(buf + 8, r->pinned);
	put64(buf + 16, r->kept);
	return KVS_WIRE_EVICT_REPLY_SIZE;
}

int kvs_wire_evict_reply_decode(const uint8_t *p, size_t n,
				kvs_wire_evict_reply *o)
{
	if (n != KVS_WIRE_EVICT_REPLY_SIZE)
		return KVS_E_PROTO;
	o->freed = get64(p);
	o->pinned = get64(p + 8);
	o->kept = get64(p + 16);
	return 0;
}

/* ---- pin ---- */

int kvs_wire_pin_req_encode(uint32_t ns, const kvs_hash *hashes,
			    uint32_t count, uint8_t *buf, size_t cap)
{
	int rc;

	if (cap < 4)
		return -ENOBUFS;
	put32(buf, ns);
	rc = kvs_wire_hashes_encode(hashes, count, 0, buf + 4, cap - 4);
	return rc < 0 ? rc : rc + 4;
}

int kvs_wire_pin_req_decode(const uint8_t *p, size_t n, uint32_t *ns,
			    kvs_wire_hashes *o)
{
	if (n < 4)
		return KVS_E_PROTO;
	*ns = get32(p);
	return kvs_wire_hashes_decode(p + 4, n - 4, o);
}

/* ---- events ---- */

int kvs_wire_events_hdr_encode(uint32_t count, uint64_t dropped, uint8_t *buf,
			       size_t cap)
{
	if (count > KVS_WIRE_EVENTS_MAX)
		return KVS_E_TOOMANY;
	if (cap < 16)
		return -ENOBUFS;
	put32(buf, count);
	put32(buf + 4, 0);
	put64(buf + 8, dropped);
	return 16;
}

static int event_kind_ok(uint32_t k)
{
	return k >= KVS_EVENT_STORED && k <= KVS_EVENT_FLUSHED;
}

int kvs_wire_event_encode(const kvs_wire_event *e, uint8_t *buf, size_t cap)
{
	if (!event_kind_ok(e->kind))
		return -EINVAL;
	if (cap < KVS_WIRE_EVENT_SIZE)
		return -ENOBUFS;
	put32(buf, e->kind);
	put32(buf + 4, e->ns);
	puth(buf + 8, e->hash);
	put64(buf + 24, e->seq);
	return KVS_WIRE_EVENT_SIZE;
}

int kvs_wire_events_decode(const uint8_t *p, size_t n, kvs_wire_events *o)
{
	if (n < 16 || get32(p + 4) != 0)
		return KVS_E_PROTO;
	o->count = get32(p);
	o->dropped = get64(p + 8);
	if (o->count > KVS_WIRE_EVENTS_MAX ||
	    n != 16 + (size_t)o->count * KVS_WIRE_EVENT_SIZE)
		return KVS_E_PROTO;
	o->events = p + 16;
	for (uint32_t i = 0; i < o->count; i++)
		if (!event_kind_ok(get32(o->events + (size_t)i * KVS_WIRE_EVENT_SIZE)))
			return KVS_E_PROTO;
	return 0;
}

kvs_wire_event kvs_wire_event_at(const uint8_t *events, uint32_t i)
{
	const uint8_t *e = events + (size_t)i * KVS_WIRE_EVENT_SIZE;

	return (kvs_wire_event){ .kind = get32(e), .ns = get32(e + 4),
				 .hash = geth(e + 8), .seq = get64(e + 24) };
}

/* ---- verify ---- */

int kvs_wire_verify_req_encode(const kvs_wire_verify_req *r, uint8_t *buf,
			       size_t cap)
{
	if (r->max_failed > KVS_WIRE_VERIFY_FAILED_MAX)
		return -EINVAL;
	if (cap < KVS_WIRE_VERIFY_REQ_SIZE)
		return -ENOBUFS;
	put32(buf, r->ns);
	put32(buf + 4, r->max_failed);
	return KVS_WIRE_VERIFY_REQ_SIZE;
}

int kvs_wire_verify_req_decode(const uint8_t *p, size_t n,
			       kvs_wire_verify_req *o)
{
	if (n != KVS_WIRE_VERIFY_REQ_SIZE)
		return KVS_E_PROTO;
	o->ns = get32(p);
	o->max_failed = get32(p + 4);
	return o->max_failed > KVS_WIRE_VERIFY_FAILED_MAX ? KVS_E_PROTO : 0;
}

/* Counts that add up: every listed failure is a failure, checked = ok +
 * failed, only known flags. */
static int verify_reply_ok(const kvs_wire_verify_reply *r)
{
	return !(r->flags & ~KVS_WIRE_VERIFY_SSD) &&
	       r->count <= KVS_WIRE_VERIFY_FAILED_MAX && r->count <= r->failed &&
	       r->ok <= r->checked && r->checked - r->ok == r->failed;
}

int kvs_wire_verify_reply_encode(const kvs_wire_verify_reply *r,
				 const kvs_wire_verify_fail *fails, uint8_t *buf,
				 size_t cap)
{
	size_t need = KVS_WIRE_VERIFY_REPLY_FIXED +
		      (size_t)r->count * KVS_WIRE_VERIFY_FAIL_SIZE;

	if (!verify_reply_ok(r))
		return -EINVAL;
	if (cap < need)
		return -ENOBUFS;
	put64(buf, r->checked);
	put64(buf + 8, r->ok);
	put64(buf + 16, r->failed);
	put64(buf + 24, r->skipped);
	put32(buf + 32, r->count);
	put32(buf + 36, r->flags);
	for (uint32_t i = 0; i < r->count; i++) {
		uint8_t *e = buf + KVS_WIRE_VERIFY_REPLY_FIXED +
			     (size_t)i * KVS_WIRE_VERIFY_FAIL_SIZE;

		puth(e, fails[i].hash);
		put32(e + 16, fails[i].ns);
		put32(e + 20, (uint32_t)fails[i].error);
	}
	return (int)need;
}

int kvs_wire_verify_reply_decode(const uint8_t *p, size_t n,
				 kvs_wire_verify_reply *o)
{
	if (n < KVS_WIRE_VERIFY_REPLY_FIXED)
		return KVS_E_PROTO;
	o->checked = get64(p);
	o->ok = get64(p + 8);
	o->failed = get64(p + 16);
	o->skipped = get64(p + 24);
	o->count = get32(p + 32);
	o->flags = get32(p + 36);
	if (!verify_reply_ok(o) ||
	    n != KVS_WIRE_VERIFY_REPLY_FIXED +
			 (size_t)o->count * KVS_WIRE_VERIFY_FAIL_SIZE)
		return KVS_E_PROTO;
	o->fails = p + KVS_WIRE_VERIFY_REPLY_FIXED;
	return 0;
}

kvs_wire_verify_fail kvs_wire_verify_fail_at(const uint8_t *fails, uint32_t i)
{
	const uint8_t *e = fails + (size_t)i * KVS_WIRE_VERIFY_FAIL_SIZE;

	return (kvs_wire_verify_fail){ .hash = geth(e), .ns = get32(e + 16),
				       .error = (int32_t)get32(e + 20) };
}
