/* ns.c - a namespace record's codec (see kvs_ns.h). */
#include "kvs_ns.h"

#include <errno.h>
#include <string.h>

#include "kvs_le.h"

/* flags, the seven numbers, three string lengths and a zero u16. */
#define FIXED (4 + KVS_LAYOUT_DIMS_BYTES + 4 * 2)
/* A record of the current form: its id follows the fixed part. */
#define WITH_ID 4

int kvs_ns_encode(const kvs_ns_layout *ns, uint8_t *buf, size_t cap)
{
	size_t idb = ns->id ? WITH_ID : 0;
	size_t body = FIXED + idb + (size_t)ns->model_len + ns->adapter_len +
		      ns->salt_len;
	uint8_t *p = buf + 4;

	if (ns->model_len > KVS_NS_STR_MAX || ns->adapter_len > KVS_NS_STR_MAX ||
	    ns->salt_len > KVS_NS_STR_MAX)
		return -EINVAL;
	/* Names are C strings where they are used (see decode). */
	if (memchr(ns->model, '\0', ns->model_len) ||
	    memchr(ns->adapter, '\0', ns->adapter_len) ||
	    (ns->salt_len && memchr(ns->salt, '\0', ns->salt_len)))
		return -EINVAL;
	if (cap < 4 + body)
		return -ENOBUFS;
	put32(buf, (uint32_t)body);
	put32(p, ns->id ? KVS_NS_F_ID : 0);
	kvs_layout_dims_put(p + 4, ns);
	put16(p + 32, (uint16_t)ns->model_len);
	put16(p + 34, (uint16_t)ns->adapter_len);
	put16(p + 36, (uint16_t)ns->salt_len);
	put16(p + 38, 0);
	if (ns->id)
		put32(p + FIXED, ns->id);
	p += FIXED + idb;
	memcpy(p, ns->model, ns->model_len);
	memcpy(p + ns->model_len, ns->adapter, ns->adapter_len);
	if (ns->salt_len)
		memcpy(p + ns->model_len + ns->adapter_len, ns->salt, ns->salt_len);
	return (int)(4 + body);
}

int kvs_ns_decode(const uint8_t *p, size_t n, kvs_ns_layout *o)
{
	uint32_t len, flags, idb;

	if (n < 4)
		return -EAGAIN;
	len = get32(p);
	if (len < FIXED || len > KVS_NS_ENTRY_MAX - 4)
		return -EBADMSG;
	if (n < 4 + (size_t)len)
		return -EAGAIN;
	p += 4;
	flags = get32(p);
	idb = flags == KVS_NS_F_ID ? WITH_ID : 0;
	if ((flags != 0 && flags != KVS_NS_F_ID) || len < FIXED + idb)
		return -EBADMSG;
	*o = (kvs_ns_layout){
		.model_len = get16(p + 32), .adapter_len = get16(p + 34),
		.salt_len = get16(p + 36), .id = idb ? get32(p + FIXED) : 0,
	};
	kvs_layout_dims_get(p + 4, o);
	if (get16(p + 38) != 0 || (idb && o->id == 0) ||
	    len != FIXED + idb + o->model_len + o->adapter_len + o->salt_len ||
	    o->model_len > KVS_NS_STR_MAX || o->adapter_len > KVS_NS_STR_MAX ||
	    o->salt_len > KVS_NS_STR_MAX)
		return -EBADMSG;
	o->model = (const char *)p + FIXED + idb;
	o->adapter = o->model + o->model_len;
	o->salt = (const uint8_t *)o->adapter + o->adapter_len;
	/* Names are C strings where they are used: no NUL inside. */
	if (memchr(o->model, '\0', (size_t)o->model_len + o->adapter_len + o->salt_len))
		return -EBADMSG;
	return (int)(4 + len);
}
