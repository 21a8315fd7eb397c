/*
 * regions.c - kvs_block_read_regions() and kvs_block_write_regions(): the
 * blocks of a batch copied from or to an engine's scattered page buffers in
 * one call (see kvshare.h). Every block and region is checked before the
 * first byte moves, so a bad batch changes nothing.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "kvs_client_int.h"
#include "kvs_gpu.h"
#include "kvshare.h"

/* 0 when every block of the batch is in a mapped arena, its regions hold
 * exactly its bytes and (@write) it is a slot of ours to fill. A total
 * short of the block would read part of it as if it were all (a target
 * buffer too small for its page), or publish a block partly unwritten. */
static int regions_check(const kvs_client *c, const kvs_block *blocks,
			 size_t n, size_t per_block, const void *const *ptrs,
			 const uint64_t *lens, int write)
{
	if (!c || (n && (!blocks || !ptrs || !lens)) || per_block == 0 ||
	    (n && per_block > SIZE_MAX / n))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		uint8_t *base;
		uint64_t bytes, sum = 0;
		int rc = kvs__tier_arena(c, blocks[i].tier, &base, &bytes);

		if (rc < 0)
			return rc;
		if (write && blocks[i].status != KVS_BLOCK_NEW)
			return -EINVAL;
		if (blocks[i].offset > bytes ||
		    c->block_bytes > bytes - blocks[i].offset)
			return -ERANGE;
		for (size_t r = i * per_block; r < (i + 1) * per_block; r++) {
			/* Each length is below the block's size, so the sum
			 * cannot wrap before it passes that size. */
			if (lens[r] > c->block_bytes ||
			    (sum += lens[r]) > c->block_bytes)
				return -EINVAL;
			if (lens[r] && !ptrs[r])
				return -EINVAL;
		}
		if (sum != c->block_bytes)
			return -EINVAL;
	}
	return 0;
}

/* Copy region by region; @write: from the caller's buffers into blocks. */
static int regions_copy(const kvs_client *c, const kvs_block *blocks, size_t n,
			size_t per_block, void *const *ptrs,
			const uint64_t *lens, int write)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t off = blocks[i].offset;
		uint8_t *base;
		uint64_t bytes;

		(void)kvs__tier_arena(c, blocks[i].tier, &base, &bytes);
		for (size_t r = i * per_block; r < (i + 1) * per_block; r++) {
			int rc = 0;

			if (blocks[i].tier == KVS_TIER_GPU)
				rc = write ? kvs_gpu_copy_from_host(c->garena, off, ptrs[r], lens[r])
					   : kvs_gpu_copy_to_host(c->garena, off, ptrs[r], lens[r]);
			else if (write)
				memcpy(base + off, ptrs[r], lens[r]);
			else
				memcpy(ptrs[r], base + off, lens[r]);
			if (rc < 0)
				return rc;
			off += lens[r];
		}
	}
	return 0;
}

int kvs_block_read_regions(const kvs_client *c, const kvs_block *blocks,
			   size_t n, size_t per_block, void *const *ptrs,
			   const uint64_t *lens)
{
	int rc = regions_check(c, blocks, n, per_block,
			       (const void *const *)ptrs, lens, 0);

	return rc < 0 ? rc : regions_copy(c, blocks, n, per_block, ptrs, lens, 0);
}

int kvs_block_write_regions(kvs_client *c, const kvs_block *blocks, size_t n,
			    size_t per_block, const void *const *ptrs,
			    const uint64_t *lens)
{
	int rc = regions_check(c, blocks, n, per_block, ptrs, lens, 1);

	/* The copy only reads the caller's buffers when it writes. */
	return rc < 0 ? rc : regions_copy(c, blocks, n, per_block,
					  (void *const *)(uintptr_t)ptrs, lens, 1);
}
