/*
 * replay_models.h - offline cache models for `kvsbench replay`: the same
 * trace and capacity counted as shared/traces/SOURCES.md counts them, but
 * without a daemon, so that every daemon run stands beside the bound
 * (Belady with bypass) and the classic policies (S3-FIFO, ARC).
 *
 * The counting (SOURCES.md): a cache of @blocks blocks; a request's hit is
 * the longest run of its leading ids in the cache, counted as
 * min(k * block_tokens, input_length) tokens; then every id of the request
 * is accessed (inserted or touched) in order. The models are flat: any
 * block may be evicted, parent or not, as the reference LRU does.
 *
 * - REPLAY_LRU: least recently used; equals the daemon's "lru" run exactly
 *   (kvsbench replay checks it on every --policy lru run).
 * - REPLAY_BELADY: the offline optimum with bypass: on a miss with the
 *   cache full, the incoming block is not cached if its next use is later
 *   than every cached block's (never used again counts as latest); else the
 *   cached block whose next use is furthest goes.
 * - REPLAY_S3FIFO: S3-FIFO (Yang et al., SOSP'23, Algorithm 1): a small
 *   FIFO of 10% of the blocks, a main FIFO, a ghost FIFO of main's size,
 *   2-bit frequencies; a small-queue tail seen more than once moves to main.
 * - REPLAY_ARC: ARC (Megiddo and Modha, FAST'03): T1/T2 with ghosts B1/B2
 *   and the adaptive target p.
 *
 * Thread: any; the functions share nothing.
 */
#ifndef KVS_REPLAY_MODELS_H
#define KVS_REPLAY_MODELS_H

#include <stddef.h>
#include <stdint.h>

#include "replay_trace.h"

typedef enum replay_model {
	REPLAY_LRU,
	REPLAY_BELADY,
	REPLAY_S3FIFO,
	REPLAY_ARC,
	REPLAY_NMODELS
} replay_model;

typedef struct replay_count {
	uint64_t input_tokens, hit_tokens, hit_blocks;
} replay_count;

/* replay_model_name - "lru", "belady", "s3fifo", "arc"; NULL past the last. */
const char *replay_model_name(replay_model m);

/*
 * replay_model_run - count trace @t through model @m with room for @blocks
 * blocks of @block_tokens tokens each; *out gets the totals.
 * Errors: -EINVAL (@blocks 0, @m unknown), -ENOMEM.
 * Ownership: @t is only read.
 */
int replay_model_run(replay_model m, const replay_trace *t, uint64_t blocks,
		     uint32_t block_tokens, replay_count *out);

#endif /* KVS_REPLAY_MODELS_H */
