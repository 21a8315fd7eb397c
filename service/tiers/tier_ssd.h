/*
 * tier_ssd.h - the SSD tier: a store tier (kvs_tier_ops.h) below the host
 * tier, over the segment store (storage/ssd/ssd.c) and its LMDB index
 * (storage/ssd/index.c). Blocks the host tier evicts are written to segment
 * files (demotion); a lookup that reaches one promotes it back; the index
 * and the namespaces file make the tier warm after a restart. See
 * docs/ssd.md.
 *
 * Its counters are the tier_ssd.* stats. Only the daemon's tier table
 * (tiers_table.c) and tests include this header.
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_TIER_SSD_H
#define KVS_TIER_SSD_H

#include <stdint.h>

#include "kvs_tier_ops.h"

/* Its stats section (tier_ssd.*): X(name, kind, help) lines (kvs_stats.h),
 * the tier's kvs_tier_ssd_stats, described by kvs_tier_ssd_section. */
#define KVS_TIER_SSD_STATS(X)                                                 \
	X(enabled, GAUGE, "1 when demotion to SSD is on")                     \
	X(bytes_total, GAUGE, "SSD tier bytes (segment files)")               \
	X(bytes_used, GAUGE, "bytes of used segments")                        \
	X(bytes_free, GAUGE, "bytes of free segments and tails")              \
	X(blocks, GAUGE, "blocks with an SSD copy")                           \
	X(blocks_ssd_only, GAUGE, "blocks only on SSD")                       \
	X(writes_inflight, GAUGE, "demotion writes not completed")            \
	X(writes, COUNTER, "blocks written to SSD")                           \
	X(writes_direct, COUNTER, "SSD writes submitted from the arena slot") \
	X(writes_staged, COUNTER, "SSD writes submitted from a staging copy") \
	X(held_waits, COUNTER, "allocations that waited for a slot held by a demotion write") \
	X(reads_direct, COUNTER, "promotion reads submitted straight into the slot") \
	X(reads_bounced, COUNTER, "promotion reads submitted through a bounce buffer") \
	X(bytes_written, COUNTER, "payload bytes written to SSD")             \
	X(reads, COUNTER, "blocks read from SSD and verified")                \
	X(bytes_read, COUNTER, "payload bytes read and verified")             \
	X(demotions, COUNTER, "blocks evicted from RAM kept on SSD")          \
	X(promotions, COUNTER, "blocks read back into RAM by lookups")        \
	X(lookup_hits, COUNTER, "lookup hits served after promotion")         \
	X(admission_rejected, COUNTER, "evicted blocks not admitted")         \
	X(ns_unfiled, COUNTER, "blocks not written: their namespace is not in the namespaces file yet") \
	X(ns_file_errors, COUNTER, "appends to the namespaces file that failed (tried again 1 s later)") \
	X(corrupt_blocks, COUNTER, "reads failing verification: dropped")     \
	X(verify_runs, COUNTER, "verify requests finished")                   \
	X(verified_blocks, COUNTER, "blocks read back by verify")             \
	X(stale_blocks, COUNTER, "blocks of recycled segments dropped")       \
	X(recycled_segments, COUNTER, "segments recycled")                    \
	X(recycle_forced, COUNTER, "segments recycled with pinned blocks in RAM (their copies dropped)") \
	X(stalls, COUNTER, "episodes with no segment to write (demotion stays on)") \
	X(stall_drops, COUNTER, "SSD writes dropped in stalls")               \
	X(stall_ms, COUNTER, "time in stalls, ms (ended episodes)")           \
	X(io_errors, COUNTER, "I/O errors and ENOSPC (demotion off for a while)") \
	X(error_retries, COUNTER, "times demotion was tried again after an error") \
	X(write_lat_avg_us, GAUGE, "average SSD write latency")               \
	X(write_lat_p99_us, GAUGE, "p99 SSD write latency")                   \
	X(read_lat_avg_us, GAUGE, "average SSD read latency")                 \
	X(read_lat_p99_us, GAUGE, "p99 SSD read latency")                     \
	X(index_entries, GAUGE, "entries committed in the index")             \
	X(restart_blocks, GAUGE, "blocks loaded from the index at start, once fully loaded")\
	X(restart_ms, GAUGE, "time to load the whole index at start (in the background), ms")\
	X(index_loading, GAUGE, "1 while the index loads in the background")  \
	X(index_loaded, GAUGE, "blocks loaded from the index since start")    \
	X(index_faults, COUNTER, "blocks a lookup loaded from the index before the background load came to them")\
	X(index_rereads, GAUGE, "batches of the background load read again: older than a copy dropped since")

typedef struct kvs_tier_ssd_stats {
	KVS_TIER_SSD_STATS(KVS_STAT_FIELD)
} kvs_tier_ssd_stats;
extern const kvs_stats_section kvs_tier_ssd_section;

typedef struct kvs_tier_ssd_config {
	const char *dir;        /* existing, writable directory */
	uint64_t bytes;         /* tier size; 0: 4 segments */
	uint64_t segment_bytes; /* segment file size */
	int admit_hit;          /* demote only blocks hit at least once */
	int write_through;      /* commit also writes to SSD */
	unsigned queue_depth;   /* I/Os in the kernel at once; 0: the store's 32 */
	unsigned error_retry_s; /* demotion off this long after an I/O error or
				 * ENOSPC, doubling per failed try (to 300 s);
				 * 0: off until restart */
} kvs_tier_ssd_config;

/*
 * kvs_tier_ssd_open - open the segment store and its index under
 * cfg->dir, ready for kvs_cache_tier_add() (which restores the namespaces
 * and starts loading every valid indexed block as an SSD-only hit, in
 * slices from the tier's poll: warm restart, docs/ssd.md).
 * Blocking; call before serving.
 * Errors: -ENOENT, -ENOTDIR, -EACCES, -EROFS (dir), -EBUSY (another daemon
 * has it), -ENOSPC, -EINVAL (sizes), -ENOMEM, other -errno. Logs why.
 * Ownership: *out is the caller's until kvs_cache_tier_add() takes it
 * (or its ops->close()).
 */
int kvs_tier_ssd_open(const kvs_tier_ssd_config *cfg, kvs_tier_mod **out);

#endif /* KVS_TIER_SSD_H */
