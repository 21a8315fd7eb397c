/*
 * kvevents_int.h - what kvevents.c (sockets, the batch, replay) and
 * kvevents_pack.c (msgpack as vLLM's msgspec decodes it, side records)
 * share. Nothing outside these two files includes it.
 */
#ifndef KVEVENTS_INT_H
#define KVEVENTS_INT_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "kvs_types.h"

/* A block's side record as the daemon keeps it: one allocation, the
 * tokens, the LoRA name and the extra keys after the fixed part. */
typedef struct kvev_side {
	uint32_t bytes; /* of the allocation */
	uint32_t block_size, ntokens;
	uint16_t lora_len, extra_len;
	uint8_t hash_kind, hash_len, parent_kind, parent_len;
	uint8_t hash[KVS_DESC_HASH_MAX], parent[KVS_DESC_HASH_MAX];
	uint8_t data[]; /* u32 tokens[ntokens], lora, extra */
} kvev_side;

/* What one event says about one block (kvs_block_desc's fields, or those
 * the daemon knows without one). */
typedef struct kvev_event {
	int stored;           /* 1: BlockStored; 0: BlockRemoved */
	const char *medium;   /* "CPU", "STORAGE", "GPU" */
	const char *locality; /* "LOCAL", "REMOTE" */
	uint8_t hash_kind, hash_len, parent_kind, parent_len;
	const uint8_t *hash, *parent;
	uint32_t block_size, ntokens;
	const uint8_t *tokens; /* ntokens little-endian u32 (as the wire's) */
	const char *lora;
	uint32_t lora_len;
	const uint8_t *extra;  /* one msgpack object, or NULL */
	uint32_t extra_len;
	const uint8_t *ns;     /* KVEV_NS_LEN bytes, or NULL: kvshare_ns */
} kvev_event;

/* kvshare_ns, in every event: the seed of the block's namespace's layout
 * without its adapter and salt (kvs_hash_layout_seed, hi then lo,
 * big-endian), so that an engine's connector keeps its model's blocks. */
#define KVEV_NS_LEN 16

/* The ownership every event names. */
#define KVEV_OWNERSHIP "kvshare"

/* kvev_pack_event - @ev as a tagged msgspec struct (a map whose "type" is
 * the class name). Returns msgpack's status: 0, or -1 out of memory. */
int kvev_pack_event(msgpack_packer *pk, const kvev_event *ev);
/* kvev_pack_batch_head - KVEventBatch (array_like): [ts, [ then @n
 * events follow, then kvev_pack_batch_tail: ], data_parallel_rank 0]. */
int kvev_pack_batch_head(msgpack_packer *pk, double ts, uint32_t n);
int kvev_pack_batch_tail(msgpack_packer *pk);
/* kvev_extra_check - 0 when @p[0..n) is exactly one msgpack array or nil
 * (an extra_keys entry), else KVS_E_PROTO. */
int kvev_extra_check(const uint8_t *p, size_t n);
/* kvev_side_new - a copy of @d, or NULL (ENOMEM). Checks nothing: the
 * caller has (kvs_wire_describe_decode and kvev_extra_check). */
kvev_side *kvev_side_new(const kvs_block_desc *d);
/* kvev_side_event - fill @ev's block fields from @s. */
void kvev_side_event(const kvev_side *s, kvev_event *ev);

#endif /* KVEVENTS_INT_H */
