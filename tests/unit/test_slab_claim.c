/*
 * test_slab_claim - kvs_slab_claim (storage/host/slab.c), what a rebuild from
 * an arena that outlived its allocator does slot by slot (kvs_persist.h).
 */
#include "kvs_slab.h"
#include "kvs_check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#define KiB (1024ULL)
#define MiB (1024ULL * 1024)

static uint64_t rng_state;

static uint64_t rnd_below(uint64_t n)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (rng_state >> 33) % n;
}

/* kvs_slab_claim: the slots one allocator handed out, claimed in random
 * order in a fresh one over the same arena (a rebuild), come back where they
 * were; a second claim, a slot off the grid or a slab of another length is
 * refused; allocation goes on around them; freeing all empties it. */
static void test_claim(void)
{
	enum { N = 600 };
	kvs_slab *a = NULL, *b = NULL;
	uint64_t off[N], more[N];
	uint32_t first[N], np[N], ca, cb, order[N];
	kvs_slab_stats st;

	CHECK(kvs_slab_create(8 * MiB, 65536, &a) == 0);
	CHECK(kvs_slab_class(a, 40 * KiB, &ca) == 0);
	for (int i = 0; i < N / 4; i++) {
		CHECK(kvs_slab_alloc(a, ca, &off[i]) == 0);
		first[i] = kvs_slab_first(a, kvs_slab_of(a, off[i], &np[i]));
	}
	for (int i = 0; i < N / 4; i += 3) /* holes, and a slab freed */
		CHECK(kvs_slab_free(a, off[i]) == 0);
	CHECK(kvs_slab_create(8 * MiB, 65536, &b) == 0);
	CHECK(kvs_slab_class(b, 40 * KiB, &cb) == 0);
	for (uint32_t i = 0; i < N / 4; i++)
		order[i] = i;
	for (uint32_t i = N / 4 - 1; i > 0; i--) {
		uint32_t j = (uint32_t)rnd_below(i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (uint32_t k = 0; k < N / 4; k++) {
		uint32_t i = order[k];

		if (i % 3 == 0)
			continue;
		CHECK(kvs_slab_claim(b, cb, first[i], np[i], off[i]) == 0);
		CHECK(kvs_slab_claim(b, cb, first[i], np[i], off[i]) == -EEXIST);
		CHECK(kvs_slab_claim(b, cb, first[i], np[i], off[i] + 64) == -EINVAL);
		CHECK(kvs_slab_claim(b, cb, first[i], np[i] + 1, off[i]) != 0);
	}
	kvs_slab_stats_get(a, &st);
	{
		kvs_slab_stats sb;

		kvs_slab_stats_get(b, &sb);
		CHECK(st.slots_used == sb.slots_used && st.slabs == sb.slabs);
	}
	/* allocation goes on and never hands out a claimed slot */
	for (int i = 0; i < N; i++) {
		if (kvs_slab_alloc(b, cb, &more[i]) < 0) {
			more[i] = UINT64_MAX;
			continue;
		}
		for (int k = 0; k < N / 4; k++)
			CHECK(k % 3 == 0 || more[i] != off[k]);
	}
	for (int i = 0; i < N; i++)
		if (more[i] != UINT64_MAX)
			CHECK(kvs_slab_free(b, more[i]) == 0);
	for (int i = 0; i < N / 4; i++)
		if (i % 3)
			CHECK(kvs_slab_free(b, off[i]) == 0);
	kvs_slab_stats_get(b, &st);
	CHECK(st.slots_used == 0 && st.pages_free == st.pages_total);
	kvs_slab_destroy(a);
	kvs_slab_destroy(b);
}

int main(void)
{
	rng_state = kvs_test_seed("test_slab_claim");
	for (int r = 0; r < 20; r++)
		test_claim();
	return check_summary("test_slab_claim");
}
