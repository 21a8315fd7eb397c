/*
 * tier_ssd.h - the SSD tier: a store tier (kvs_tier.h) below the host
 * tier, over the segment store (storage/ssd.c) and its LMDB index
 * (storage/index.c). Blocks the host tier evicts are written to segment
 * files (demotion); a lookup that reaches one promotes it back; the index
 * and the namespaces file make the tier warm after a restart. See
 * docs/ssd.md.
 *
 * Its counters are the tier_ssd.* stats. Only the daemon's tier table
 * (tiers.c) and tests include this header.
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_TIER_SSD_H
#define KVS_TIER_SSD_H

#include <stdint.h>

#include "kvs_tier.h"

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
