/*
 * kvs_le.h - little-endian field access, the one encoding of every byte
 * format: the wire codecs (proto/wire.c, wire_admin.c), the SSD index's keys
 * and values (storage/ssd/index.c) and the SSD record headers and superblocks
 * (storage/ssd/ssd_format.c). Internal: not installed, not part of the API. Byte by
 * byte, so any alignment and any host byte order give the same bytes.
 * Needs only kvs_types.h (kvs_hash), so storage/ may include it.
 */
#ifndef KVS_LE_H
#define KVS_LE_H

#include <stdint.h>

#include "kvs_types.h"

static inline void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void puth(uint8_t *p, kvs_hash h)
{
	put64(p, h.lo);
	put64(p + 8, h.hi);
}
static inline uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}
static inline uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}
static inline kvs_hash geth(const uint8_t *p)
{
	return (kvs_hash){ .lo = get64(p), .hi = get64(p + 8) };
}

#endif /* KVS_LE_H */
