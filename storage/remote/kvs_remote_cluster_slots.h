/*
 * kvs_remote_cluster_slots.h - Redis Cluster's hash slots (not arena
 * slots) and the slot map: CRC16 of a key (with hash tags, as Redis
 * defines them) and the decoder of a
 * `CLUSTER SLOTS` reply into ranges of slots owned by a master.
 *
 * Pure functions: no sockets, no allocation. The remote engine
 * (kvs_remote.h) keeps the map; these are its two formulas, testable and
 * fuzzable alone.
 *
 * Errors: 0 on success, -EPROTO (a reply that is not a slot map: wrong
 * types, slot or port out of range, host too long), -ENOSPC (more ranges
 * than the caller's array holds).
 * Thread: reentrant.
 */
#ifndef KVS_REMOTE_CLUSTER_SLOTS_H
#define KVS_REMOTE_CLUSTER_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_resp.h"

#define KVS_SLOTS 16384
#define KVS_SLOT_HOST_MAX 256 /* host bytes, NUL included */

/* kvs_slot_crc16 - CRC16-CCITT (XModem: poly 0x1021, init 0), Redis's. */
uint16_t kvs_slot_crc16(const void *buf, size_t len);

/*
 * kvs_slot_of - the cluster slot (0..16383) of key @key[@len]: CRC16 of the
 * key mod 16384, or of the hash tag when the key has one (the bytes between
 * the first '{' and the first '}' after it, if not empty).
 */
unsigned kvs_slot_of(const void *key, size_t len);

/* One range of a slot map: slots first..last served by master host:port.
 * An empty host means "the node that answered" (Redis 7 may say so). */
typedef struct kvs_slot_range {
	uint16_t first, last;
	uint16_t port;
	char host[KVS_SLOT_HOST_MAX];
} kvs_slot_range;

/*
 * kvs_slot_map_decode - the ranges of a `CLUSTER SLOTS` reply @v (parsed by
 * @p) into @out[@max]; *@n the count. Replicas are ignored (reads and
 * writes go to masters). Ranges are not checked for overlap or coverage:
 * slots no range names have no owner.
 * Errors: -EPROTO, -ENOSPC (see above); *@n is then unspecified.
 * Ownership: none kept.
 */
int kvs_slot_map_decode(const kvs_resp_parser *p, const kvs_resp_val *v,
			kvs_slot_range *out, size_t max, size_t *n);

#endif /* KVS_REMOTE_CLUSTER_SLOTS_H */
