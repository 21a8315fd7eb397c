/*
 * kvevents_pack.c - vLLM's KV events in msgpack, as vLLM's msgspec decoder
 * reads them (vllm/distributed/kv_events.py): KVEventBatch is array_like
 * ([ts, events, data_parallel_rank], the rank 0 as vLLM's publisher sets
 * it: consumers that decode a 3-tuple, Dynamo's, need it), each event a
 * tagged struct (a map with "type": "BlockStored" | "BlockRemoved" first),
 * hashes as bin (bytes) or uint (int), names as str. And the side records
 * the events are made from. Pure: no sockets, no cache.
 */
#include "kvevents_int.h"

#include <stdlib.h>
#include <string.h>

static int pack_cstr(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

static int pack_hash(msgpack_packer *pk, uint8_t kind, const uint8_t *h,
		     uint8_t len)
{
	uint64_t v = 0;

	if (kind == KVS_DESC_HASH_NONE)
		return msgpack_pack_nil(pk);
	if (kind == KVS_DESC_HASH_INT) {
		for (uint8_t i = 0; i < len; i++)
			v = v << 8 | h[i];
		return msgpack_pack_uint64(pk, v);
	}
	return msgpack_pack_bin(pk, len) || msgpack_pack_bin_body(pk, h, len);
}

static int pack_key(msgpack_packer *pk, const char *key)
{
	return pack_cstr(pk, key);
}

/* The fields both kinds end with: the tier as vLLM names it, who, and
 * the namespace (a key vLLM's decoder ignores). */
static int pack_where(msgpack_packer *pk, const kvev_event *ev)
{
	int rc = pack_key(pk, "locality") || pack_cstr(pk, ev->locality) ||
		 pack_key(pk, "ownership") || pack_cstr(pk, KVEV_OWNERSHIP);

	if (rc == 0 && ev->ns)
		rc = pack_key(pk, "kvshare_ns") ||
		     msgpack_pack_bin(pk, KVEV_NS_LEN) ||
		     msgpack_pack_bin_body(pk, ev->ns, KVEV_NS_LEN);
	return rc;
}

static int pack_removed(msgpack_packer *pk, const kvev_event *ev)
{
	return msgpack_pack_map(pk, 5 + !!ev->ns) || pack_key(pk, "type") ||
	       pack_cstr(pk, "BlockRemoved") || pack_key(pk, "block_hashes") ||
	       msgpack_pack_array(pk, 1) ||
	       pack_hash(pk, ev->hash_kind, ev->hash, ev->hash_len) ||
	       pack_key(pk, "medium") || pack_cstr(pk, ev->medium) ||
	       pack_where(pk, ev);
}

static int pack_tokens(msgpack_packer *pk, const kvev_event *ev)
{
	int rc = msgpack_pack_array(pk, ev->ntokens);

	for (uint32_t i = 0; rc == 0 && i < ev->ntokens; i++) {
		const uint8_t *q = ev->tokens + 4 * (size_t)i;

		rc = msgpack_pack_uint32(pk, q[0] | q[1] << 8 | q[2] << 16 |
						     (uint32_t)q[3] << 24);
	}
	return rc;
}

static int pack_stored(msgpack_packer *pk, const kvev_event *ev)
{
	int rc = msgpack_pack_map(pk, 10 + !!ev->extra + !!ev->ns) ||
		 pack_key(pk, "type") || pack_cstr(pk, "BlockStored") ||
		 pack_key(pk, "block_hashes") || msgpack_pack_array(pk, 1) ||
		 pack_hash(pk, ev->hash_kind, ev->hash, ev->hash_len) ||
		 pack_key(pk, "parent_block_hash") ||
		 pack_hash(pk, ev->parent_kind, ev->parent, ev->parent_len) ||
		 pack_key(pk, "token_ids") || pack_tokens(pk, ev) ||
		 pack_key(pk, "block_size") ||
		 msgpack_pack_uint32(pk, ev->block_size) ||
		 pack_key(pk, "lora_id") || msgpack_pack_nil(pk) ||
		 pack_key(pk, "medium") || pack_cstr(pk, ev->medium) ||
		 pack_key(pk, "lora_name");

	if (rc == 0)
		rc = ev->lora_len ? msgpack_pack_str(pk, ev->lora_len) ||
					    msgpack_pack_str_body(pk, ev->lora,
								  ev->lora_len)
				  : msgpack_pack_nil(pk);
	/* extra_keys: one entry per block hash, packed as the engine gave it. */
	if (rc == 0 && ev->extra)
		rc = pack_key(pk, "extra_keys") || msgpack_pack_array(pk, 1) ||
		     msgpack_pack_str_body(pk, ev->extra, ev->extra_len);
	return rc || pack_where(pk, ev);
}

int kvev_pack_event(msgpack_packer *pk, const kvev_event *ev)
{
	return ev->stored ? pack_stored(pk, ev) : pack_removed(pk, ev);
}

int kvev_pack_batch_head(msgpack_packer *pk, double ts, uint32_t n)
{
	return msgpack_pack_array(pk, 3) || msgpack_pack_double(pk, ts) ||
	       msgpack_pack_array(pk, n);
}

int kvev_pack_batch_tail(msgpack_packer *pk)
{
	return msgpack_pack_uint32(pk, 0);
}

int kvev_extra_check(const uint8_t *p, size_t n)
{
	msgpack_unpacked u;
	size_t off = 0;
	int rc = KVS_E_PROTO;

	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, (const char *)p, n, &off) ==
		    MSGPACK_UNPACK_SUCCESS &&
	    off == n &&
	    (u.data.type == MSGPACK_OBJECT_ARRAY ||
	     u.data.type == MSGPACK_OBJECT_NIL))
		rc = 0;
	msgpack_unpacked_destroy(&u);
	return rc;
}

kvev_side *kvev_side_new(const kvs_block_desc *d)
{
	size_t tok = 4 * (size_t)d->ntokens;
	size_t bytes = sizeof(kvev_side) + tok + d->lora_len + d->extra_len;
	kvev_side *s = malloc(bytes);

	if (!s)
		return NULL;
	*s = (kvev_side){ .bytes = (uint32_t)bytes, .block_size = d->block_size,
			  .ntokens = d->ntokens,
			  .lora_len = (uint16_t)d->lora_len,
			  .extra_len = (uint16_t)d->extra_len,
			  .hash_kind = (uint8_t)d->hash_kind,
			  .hash_len = (uint8_t)d->hash_len,
			  .parent_kind = (uint8_t)d->parent_kind,
			  .parent_len = (uint8_t)d->parent_len };
	memcpy(s->hash, d->engine_hash, d->hash_len);
	if (d->parent_len)
		memcpy(s->parent, d->parent_hash, d->parent_len);
	/* The wire's tokens may be unaligned: copied as bytes. */
	if (tok)
		memcpy(s->data, (const void *)d->tokens, tok);
	if (d->lora_len)
		memcpy(s->data + tok, d->lora, d->lora_len);
	if (d->extra_len)
		memcpy(s->data + tok + d->lora_len, d->extra, d->extra_len);
	return s;
}

void kvev_side_event(const kvev_side *s, kvev_event *ev)
{
	size_t tok = 4 * (size_t)s->ntokens;

	ev->hash_kind = s->hash_kind;
	ev->hash_len = s->hash_len;
	ev->hash = s->hash;
	ev->parent_kind = s->parent_kind;
	ev->parent_len = s->parent_len;
	ev->parent = s->parent;
	ev->block_size = s->block_size;
	ev->ntokens = s->ntokens;
	ev->tokens = s->data;
	ev->lora = (const char *)s->data + tok;
	ev->lora_len = s->lora_len;
	ev->extra = s->extra_len ? s->data + tok + s->lora_len : NULL;
	ev->extra_len = s->extra_len;
}
