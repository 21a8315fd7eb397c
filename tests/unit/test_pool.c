/*
 * test_pool - the id pool (service/kvs_pool.h): growth across chunks with
 * addresses that stay put, the free list's order and reuse, stale ids
 * refused, its limits, and a randomized run against a model (seed printed;
 * KVS_TEST_SEED replays it).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_check.h"
#include "kvs_pool.h"

typedef struct item {
	uint64_t tag;
	uint32_t self;
	char pad[13]; /* an odd size: the pool rounds it */
} item;

/* Elements made across many chunks keep their addresses and contents; the
 * first ones are handed out in index order and are zeroed. */
static void test_growth(void)
{
	enum { N = 1000 };
	kvs_pool p;
	item *at[N];

	CHECK_EQ(kvs_pool_init(&p, sizeof(item), 4, 1u << 20), 0);
	CHECK_EQ(kvs_pool_cap(&p), 0);
	for (uint32_t i = 0; i < N; i++) {
		uint32_t idx = KVS_NONE;
		item *it;

		CHECK_EQ(kvs_pool_alloc(&p, &idx), 0);
		CHECK_EQ(idx, i);
		it = kvs_pool_at(&p, idx);
		CHECK(it->tag == 0 && it->self == 0);
		CHECK(((uintptr_t)it & 7) == 0);
		it->tag = 0xabcd0000u + i;
		it->self = i;
		at[i] = it;
	}
	CHECK_EQ(kvs_pool_count(&p), N);
	/* 1000 in chunks of 16: 63 chunks made. */
	CHECK_EQ(kvs_pool_cap(&p), 63 * 16);
	for (uint32_t i = 0; i < N; i++) {
		CHECK(kvs_pool_at(&p, i) == at[i]);
		CHECK(kvs_pool_live_at(&p, i) == at[i]);
		CHECK(at[i]->tag == 0xabcd0000u + i && at[i]->self == i);
	}
	CHECK(kvs_pool_live_at(&p, N) == NULL); /* made, free */
	CHECK(kvs_pool_live_at(&p, 63 * 16) == NULL); /* never made */
	kvs_pool_fini(&p);
	CHECK_EQ(kvs_pool_cap(&p), 0);
	kvs_pool_fini(&p); /* idempotent */
}

/* Last in, first out; a freed element keeps its bytes; ids go stale. */
static void test_free_reuse(void)
{
	kvs_pool p;
	uint32_t a, b, c, x;
	uint64_t ida, idb;
	item *ia;

	CHECK_EQ(kvs_pool_init(&p, sizeof(item), 3, 64), 0);
	CHECK_EQ(kvs_pool_alloc(&p, &a), 0);
	CHECK_EQ(kvs_pool_alloc(&p, &b), 0);
	CHECK_EQ(kvs_pool_alloc(&p, &c), 0);
	CHECK(a == 0 && b == 1 && c == 2);
	ida = kvs_pool_id(&p, a);
	idb = kvs_pool_id(&p, b);
	CHECK(ida == (1ull << 32 | 0)); /* generation 1 first: never id 0 */
	CHECK(idb == (1ull << 32 | 1));
	CHECK(kvs_pool_find(&p, ida, &x) == 0 && x == a);
	ia = kvs_pool_at(&p, a);
	ia->tag = 77;

	kvs_pool_free(&p, b);
	kvs_pool_free(&p, a);
	CHECK_EQ(kvs_pool_count(&p), 1);
	CHECK(kvs_pool_live_at(&p, a) == NULL);
	x = KVS_NONE;
	CHECK_EQ(kvs_pool_find(&p, ida, &x), -ESTALE);
	CHECK_EQ(kvs_pool_find(&p, idb, &x), -ESTALE);
	CHECK_EQ(x, KVS_NONE);
	/* The current generation of a free element is not an id either. */
	CHECK_EQ(kvs_pool_find(&p, kvs_pool_id(&p, a), &x), -ENOENT);
	CHECK_EQ(kvs_pool_find(&p, 1ull << 32 | 40, &x), -ENOENT); /* free */
	CHECK_EQ(kvs_pool_find(&p, 1ull << 32 | 64, &x), -ENOENT); /* not made */
	CHECK_EQ(kvs_pool_find(&p, 5, &x), -ENOENT); /* generation 0: never */

	CHECK_EQ(kvs_pool_alloc(&p, &x), 0);
	CHECK_EQ(x, a); /* the last freed first */
	CHECK(kvs_pool_at(&p, x) == ia && ia->tag == 77); /* as left */
	CHECK(kvs_pool_id(&p, x) == (2ull << 32 | 0));
	CHECK_EQ(kvs_pool_find(&p, ida, &x), -ESTALE);
	CHECK_EQ(kvs_pool_alloc(&p, &x), 0);
	CHECK_EQ(x, b);
	CHECK_EQ(kvs_pool_alloc(&p, &x), 0);
	CHECK_EQ(x, 3); /* then the chunk's unused ones, in order */
	kvs_pool_fini(&p);
}

/* The maximum holds; a full pool says -ENOSPC and stays usable; bad
 * arguments are refused. */
static void test_limits(void)
{
	kvs_pool p;
	uint32_t x;

	CHECK_EQ(kvs_pool_init(&p, 0, 4, 16), -EINVAL);
	CHECK_EQ(kvs_pool_init(&p, 8, 17, 16), -EINVAL);
	CHECK_EQ(kvs_pool_init(&p, 8, 4, 0), -EINVAL);
	CHECK_EQ(kvs_pool_init(&p, 8, 4, KVS_POOL_MAX + 1), -EINVAL);
	CHECK_EQ(kvs_pool_init(&p, 8, 4, KVS_POOL_MAX), 0);
	kvs_pool_fini(&p);

	/* 20 rounds up to two chunks of 16. */
	CHECK_EQ(kvs_pool_init(&p, 8, 4, 20), 0);
	for (uint32_t i = 0; i < 32; i++)
		CHECK_EQ(kvs_pool_alloc(&p, &x), 0);
	x = 1234;
	CHECK_EQ(kvs_pool_alloc(&p, &x), -ENOSPC);
	CHECK_EQ(x, 1234);
	CHECK_EQ(kvs_pool_cap(&p), 32);
	kvs_pool_free(&p, 7);
	CHECK_EQ(kvs_pool_alloc(&p, &x), 0);
	CHECK_EQ(x, 7);
	kvs_pool_fini(&p);
}

/* Random allocs and frees against a model: which are live, each live
 * element's id and contents, stale ids refused, addresses stable. */
static void test_model(void)
{
	enum { MAXN = 94 * 32, STEPS = 200000 }; /* whole chunks */
	kvs_pool p;
	uint32_t *live = malloc(MAXN * sizeof(*live)), nlive = 0;
	uint64_t *id = calloc(MAXN, sizeof(*id));
	uint64_t *old = calloc(MAXN, sizeof(*old)); /* a stale id, or 0 */
	item **addr = calloc(MAXN, sizeof(*addr));
	uint32_t last_freed = KVS_NONE;
	uint64_t rng = kvs_test_seed("test_pool");
	CHECK_EQ(kvs_pool_init(&p, sizeof(item), 5, MAXN), 0);
	for (uint32_t step = 0; step < STEPS; step++) {
		uint64_t r = kvs_test_rnd(&rng);
		/* Phases that fill and drain, so that the pool grows. */
		int fill = (step / 20000) % 2 == 0;
		int alloc = nlive == 0 || (r % 100) < (fill ? 65u : 35u);

		if (alloc) {
			uint32_t x;
			int rc = kvs_pool_alloc(&p, &x);
			item *it;

			if (nlive == kvs_pool_cap(&p) && kvs_pool_cap(&p) >= MAXN) {
				CHECK_EQ(rc, -ENOSPC);
				continue;
			}
			CHECK_EQ(rc, 0);
			if (rc)
				break;
			if (last_freed != KVS_NONE)
				CHECK_EQ(x, last_freed);
			last_freed = KVS_NONE;
			CHECK(x < kvs_pool_cap(&p) && id[x] == 0);
			it = kvs_pool_at(&p, x);
			CHECK(!addr[x] || addr[x] == it);
			if (addr[x])
				CHECK(it->self == x); /* as its last user left it */
			addr[x] = it;
			it->self = x;
			it->tag = r;
			id[x] = kvs_pool_id(&p, x);
			CHECK(id[x] != old[x]);
			live[nlive++] = x;
		} else {
			uint32_t k = (uint32_t)(r >> 32) % nlive, x = live[k];
			item *it = kvs_pool_live_at(&p, x);
			uint32_t y = KVS_NONE;

			CHECK(it == addr[x]);
			CHECK(kvs_pool_find(&p, id[x], &y) == 0 && y == x);
			kvs_pool_free(&p, x);
			old[x] = id[x];
			id[x] = 0;
			live[k] = live[--nlive];
			last_freed = x;
		}
		if (step % 997 == 0) {
			uint32_t n = 0;

			for (uint32_t i = 0; i < kvs_pool_cap(&p); i++) {
				item *it = kvs_pool_live_at(&p, i);
				uint32_t y;

				CHECK((it != NULL) == (id[i] != 0));
				if (it) {
					n++;
					CHECK(it == addr[i] && it->self == i);
				}
				if (old[i] && !id[i])
					CHECK_EQ(kvs_pool_find(&p, old[i], &y), -ESTALE);
			}
			CHECK_EQ(n, nlive);
			CHECK_EQ(kvs_pool_count(&p), nlive);
		}
	}
	CHECK(kvs_pool_cap(&p) > 32); /* it grew across chunks */
	kvs_pool_fini(&p);
	free(live);
	free(id);
	free(old);
	free(addr);
}

int main(void)
{
	test_growth();
	test_free_reuse();
	test_limits();
	test_model();
	return check_summary("test_pool");
}
