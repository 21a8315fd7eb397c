/*
 * slab_test.h - what the slot allocator's tests share (test_slab,
 * test_slab_mixed): their CHECK and its counts, the seeded generator of
 * kvs_test_rand.h, a map of the arena's 64-byte cells to the slot
 * covering each, and the stats' layout invariants. Random parts are seeded
 * from the clock; the seed is printed, and KVS_TEST_SEED=<n> replays a run.
 */
#ifndef KVS_SLAB_TEST_H
#define KVS_SLAB_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvs_slab.h"
#include "kvs_test_rand.h"
#include "kvs_types.h"

#define KiB (1024ULL)
#define MiB (1024ULL * 1024)

static unsigned checks, failures;

#define CHECK(cond, ...)						\
	do {								\
		checks++;						\
		if (!(cond)) {						\
			failures++;					\
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__,	\
				__LINE__, #cond);			\
			fprintf(stderr, __VA_ARGS__);			\
			fputc('\n', stderr);				\
		}							\
	} while (0)

/* The random parts' state (kvs_test_rnd). */
static uint64_t rng_state;

static inline uint64_t rnd(void)
{
	return kvs_test_rnd(&rng_state);
}

static inline uint64_t rnd_below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

/*
 * The arena in 64-byte cells, each naming the slot that covers it (0 =
 * none). Offsets are 64-aligned and strides are blocks rounded to 64, so no
 * two live slots may share even a cell: stricter than a byte map, and 64x
 * smaller.
 */
struct cellmap {
	uint32_t *cell;
	uint64_t ncells;
};

static inline int cells_init(struct cellmap *m, uint64_t arena)
{
	m->ncells = arena / 64;
	m->cell = calloc(m->ncells, sizeof(*m->cell));
	return m->cell ? 0 : -1;
}

/* Mark [off, off+bytes) as @tag; 0 when it was all free and in range. */
static inline int cells_mark(struct cellmap *m, uint64_t off, uint64_t bytes,
		      uint32_t tag)
{
	uint64_t i, first = off / 64, end = (off + bytes + 63) / 64;

	if (off % 64 || end > m->ncells)
		return -1;
	for (i = first; i < end; i++)
		if (m->cell[i])
			return -1;
	for (i = first; i < end; i++)
		m->cell[i] = tag;
	return 0;
}

static inline void cells_clear(struct cellmap *m, uint64_t off, uint64_t bytes)
{
	memset(&m->cell[off / 64], 0, (bytes + 63) / 64 * sizeof(*m->cell));
}

/* Fields that depend only on the layout and what is allocated. */
static inline int stats_consistent(const kvs_slab_stats *st)
{
	uint64_t used_pages = st->pages_total - st->pages_free;

	return st->arena_bytes == st->pages_total * st->page_bytes &&
	       st->slab_bytes == used_pages * st->page_bytes &&
	       st->slot_bytes_used <= st->slab_bytes &&
	       (st->slabs == 0) == (st->slab_bytes == 0);
}

/* Seed the random parts ($KVS_TEST_SEED, else the clock) and say so. */
static inline uint64_t slab_test_seed(const char *name)
{
	rng_state = kvs_test_seed(name);
	return rng_state;
}

/* The summary line; the exit status (0 pass, 1 fail). */
static inline int slab_test_end(const char *name, uint64_t seed)
{
	if (failures) {
		printf("%s: %u of %u checks FAILED (seed %" PRIu64 ")\n", name,
		       failures, checks, seed);
		return 1;
	}
	printf("%s: %u checks passed\n", name, checks);
	return 0;
}

#endif /* KVS_SLAB_TEST_H */
