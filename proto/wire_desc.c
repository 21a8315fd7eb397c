/* wire_desc.c - DESCRIBE's codec: engines' side records of their blocks
 * (see kvs_wire.h, docs/protocol.md). Pure: bytes in, structs out. */
#include <errno.h>
#include <string.h>

#include "kvs_le.h"
#include "kvs_wire.h"

size_t kvs_wire_desc_size(const kvs_block_desc *d)
{
	return KVS_WIRE_DESC_FIXED + (size_t)d->hash_len + d->parent_len +
	       4 * (size_t)d->ntokens + d->lora_len + d->extra_len;
}

/* The bounds of one record's fixed part: 0, or the error the daemon
 * answers (the encoder turns any into -EINVAL). */
static int desc_check(uint32_t hkind, uint32_t hlen, uint32_t pkind,
		      uint32_t plen, uint32_t ntokens, uint32_t lora,
		      uint32_t extra)
{
	if (hkind == KVS_DESC_HASH_NONE || hkind > KVS_DESC_HASH_INT ||
	    pkind > KVS_DESC_HASH_INT)
		return KVS_E_PROTO;
	if (hlen > KVS_DESC_HASH_MAX || plen > KVS_DESC_HASH_MAX ||
	    ntokens > KVS_DESC_TOKENS_MAX || lora > KVS_DESC_LORA_MAX ||
	    extra > KVS_DESC_EXTRA_MAX)
		return KVS_E_TOOBIG;
	if (hlen == 0 || (hkind == KVS_DESC_HASH_INT && hlen != 8) ||
	    (pkind == KVS_DESC_HASH_NONE) != (plen == 0) ||
	    (pkind == KVS_DESC_HASH_INT && plen != 8))
		return KVS_E_PROTO;
	return 0;
}

static uint8_t *put_bytes(uint8_t *q, const void *src, size_t n)
{
	if (n)
		memcpy(q, src, n);
	return q + n;
}

int kvs_wire_describe_encode(const kvs_block_desc *d, uint32_t n, uint8_t *buf,
			     size_t cap)
{
	size_t need = KVS_WIRE_DESC_HEAD;
	uint8_t *q = buf;

	if (n == 0 || n > KVS_WIRE_DESC_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (desc_check(d[i].hash_kind, d[i].hash_len, d[i].parent_kind,
			       d[i].parent_len, d[i].ntokens, d[i].lora_len,
			       d[i].extra_len) < 0)
			return -EINVAL;
		need += kvs_wire_desc_size(&d[i]);
	}
	if (need > cap || need > INT32_MAX)
		return -ENOBUFS;
	put16(q, KVS_WIRE_DESC_VERSION);
	put16(q + 2, 0);
	put32(q + 4, n);
	q += KVS_WIRE_DESC_HEAD;
	for (uint32_t i = 0; i < n; i++) {
		puth(q, (kvs_hash){ d[i].hash_lo, d[i].hash_hi });
		q[16] = (uint8_t)d[i].hash_kind;
		q[17] = (uint8_t)d[i].hash_len;
		q[18] = (uint8_t)d[i].parent_kind;
		q[19] = (uint8_t)d[i].parent_len;
		put32(q + 20, d[i].block_size);
		put32(q + 24, d[i].ntokens);
		put16(q + 28, (uint16_t)d[i].lora_len);
		put16(q + 30, (uint16_t)d[i].extra_len);
		q = put_bytes(q + KVS_WIRE_DESC_FIXED, d[i].engine_hash,
			      d[i].hash_len);
		q = put_bytes(q, d[i].parent_hash, d[i].parent_len);
		for (uint32_t t = 0; t < d[i].ntokens; t++, q += 4)
			put32(q, d[i].tokens[t]);
		q = put_bytes(q, d[i].lora, d[i].lora_len);
		q = put_bytes(q, d[i].extra, d[i].extra_len);
	}
	return (int)need;
}

void kvs_wire_desc_next(const uint8_t **p, kvs_block_desc *d)
{
	const uint8_t *q = *p;
	kvs_hash h = geth(q);

	*d = (kvs_block_desc){ .hash_lo = h.lo, .hash_hi = h.hi,
			       .hash_kind = q[16], .hash_len = q[17],
			       .parent_kind = q[18], .parent_len = q[19],
			       .block_size = get32(q + 20),
			       .ntokens = get32(q + 24),
			       .lora_len = get16(q + 28),
			       .extra_len = get16(q + 30) };
	q += KVS_WIRE_DESC_FIXED;
	d->engine_hash = q;
	q += d->hash_len;
	d->parent_hash = d->parent_len ? q : NULL;
	q += d->parent_len;
	d->tokens = (const uint32_t *)(const void *)q;
	q += 4 * (size_t)d->ntokens;
	d->lora = (const char *)q;
	q += d->lora_len;
	d->extra = d->extra_len ? q : NULL;
	*p = q + d->extra_len;
}

int kvs_wire_describe_decode(const uint8_t *p, size_t n, kvs_wire_describe *out)
{
	const uint8_t *q = p + KVS_WIRE_DESC_HEAD, *end = p + n;
	uint32_t count;

	if (n < KVS_WIRE_DESC_HEAD)
		return KVS_E_PROTO;
	if (get16(p) != KVS_WIRE_DESC_VERSION)
		return KVS_E_VERSION;
	count = get32(p + 4);
	if (get16(p + 2) != 0 || count == 0)
		return KVS_E_PROTO;
	if (count > KVS_WIRE_DESC_MAX)
		return KVS_E_TOOMANY;
	for (uint32_t i = 0; i < count; i++) {
		size_t len;
		int rc;

		if ((size_t)(end - q) < KVS_WIRE_DESC_FIXED)
			return KVS_E_PROTO;
		rc = desc_check(q[16], q[17], q[18], q[19], get32(q + 24),
				get16(q + 28), get16(q + 30));
		if (rc < 0)
			return rc;
		len = KVS_WIRE_DESC_FIXED + (size_t)q[17] + q[19] +
		      4 * (size_t)get32(q + 24) + get16(q + 28) + get16(q + 30);
		if ((size_t)(end - q) < len)
			return KVS_E_PROTO;
		q += len;
	}
	if (q != end)
		return KVS_E_PROTO;
	*out = (kvs_wire_describe){ .count = count,
				    .recs = p + KVS_WIRE_DESC_HEAD,
				    .len = n - KVS_WIRE_DESC_HEAD };
	return 0;
}
