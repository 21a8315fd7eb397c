/* remote_cluster_slots.c - key slots and the CLUSTER SLOTS decoder (see
 * kvs_remote_cluster_slots.h). */
#include "kvs_remote_cluster_slots.h"

#include <errno.h>
#include <string.h>

uint16_t kvs_slot_crc16(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint16_t crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)(p[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = crc & 0x8000 ? (uint16_t)(crc << 1 ^ 0x1021)
					   : (uint16_t)(crc << 1);
	}
	return crc;
}

unsigned kvs_slot_of(const void *key, size_t len)
{
	const char *k = key;
	const char *open = memchr(k, '{', len);

	if (open) {
		size_t from = (size_t)(open - k) + 1;
		const char *close = memchr(k + from, '}', len - from);

		if (close && close > k + from)
			return kvs_slot_crc16(k + from, (size_t)(close - (k + from))) &
			       (KVS_SLOTS - 1);
	}
	return kvs_slot_crc16(k, len) & (KVS_SLOTS - 1);
}

int kvs_slot_map_decode(const kvs_resp_parser *p, const kvs_resp_val *v,
			kvs_slot_range *out, size_t max, size_t *n)
{
	*n = 0;
	if (!v || v->type != KVS_RESP_ARRAY)
		return -EPROTO;
	for (size_t i = 0; i < (size_t)v->n; i++) {
		const kvs_resp_val *e = kvs_resp_elem(p, v, i);
		const kvs_resp_val *first = kvs_resp_elem(p, e, 0);
		const kvs_resp_val *last = kvs_resp_elem(p, e, 1);
		const kvs_resp_val *node = kvs_resp_elem(p, e, 2);
		const kvs_resp_val *host = kvs_resp_elem(p, node, 0);
		const kvs_resp_val *port = kvs_resp_elem(p, node, 1);
		kvs_slot_range *r;

		if (!first || !last || !host || !port ||
		    first->type != KVS_RESP_INT || last->type != KVS_RESP_INT ||
		    port->type != KVS_RESP_INT || first->n < 0 ||
		    first->n > last->n || last->n >= KVS_SLOTS || port->n < 1 ||
		    port->n > 65535)
			return -EPROTO;
		if (host->type != KVS_RESP_BULK || !host->str ||
		    host->n >= KVS_SLOT_HOST_MAX ||
		    memchr(host->str, '\0', (size_t)host->n))
			return -EPROTO;
		if (*n == max)
			return -ENOSPC;
		r = &out[(*n)++];
		r->first = (uint16_t)first->n;
		r->last = (uint16_t)last->n;
		r->port = (uint16_t)port->n;
		memcpy(r->host, host->str, (size_t)host->n);
		r->host[host->n] = '\0';
	}
	return 0;
}
