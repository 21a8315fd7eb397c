/*
 * test_table - the block table: insert/find/remove against a reference model
 * (including backward-shift deletion in long probe runs), growth, and the
 * memory a record costs at scale.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvs_check.h"
#include "kvs_table.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static kvs_hash key(uint32_t i, int clustered)
{
	/* Clustered keys share their low word, so they all probe from one home
	 * slot: the hard case for deletion without tombstones. */
	kvs_hash h = { .lo = clustered ? 42 : (uint64_t)i * 0x9e3779b97f4a7c15ull,
		       .hi = i };
	return h;
}

static void test_model(int clustered, uint32_t n_keys, uint32_t steps)
{
	kvs_table *t;
	uint32_t *where = malloc(n_keys * sizeof(uint32_t)); /* NONE = absent */
	uint32_t present = 0;

	CHECK(kvs_table_create(&t) == 0);
	for (uint32_t i = 0; i < n_keys; i++)
		where[i] = KVS_NONE;
	for (uint32_t s = 0; s < steps; s++) {
		uint32_t k = (uint32_t)(rnd() % n_keys), idx;

		if (where[k] == KVS_NONE) {
			CHECK(kvs_table_insert(t, key(k, clustered), &idx) == 0);
			CHECK(kvs_table_rec(t, idx)->state == KVS_REC_WRITING);
			CHECK(kvs_table_rec(t, idx)->parent == KVS_NONE);
			where[k] = idx;
			present++;
		} else if (rnd() % 3 == 0) {
			CHECK(kvs_table_insert(t, key(k, clustered), &idx) == -EEXIST);
		} else {
			kvs_table_remove(t, where[k]);
			where[k] = KVS_NONE;
			present--;
		}
		if (s % 97 == 0) {
			for (uint32_t i = 0; i < n_keys; i++)
				if (kvs_table_find(t, key(i, clustered)) != where[i]) {
					CHECK(!"find disagrees with the model");
					i = n_keys;
				}
		}
	}
	CHECK_EQ(kvs_table_count(t), present);
	for (uint32_t i = 0; i < n_keys; i++)
		CHECK_EQ(kvs_table_find(t, key(i, clustered)), where[i]);
	kvs_table_destroy(t);
	free(where);
}

static void test_scale(void)
{
	const uint32_t n = 1000000;
	kvs_table *t;
	uint32_t idx;
	double per;

	CHECK(kvs_table_create(&t) == 0);
	for (uint32_t i = 0; i < n; i++)
		if (kvs_table_insert(t, key(i, 0), &idx) != 0) {
			CHECK(!"insert failed at scale");
			break;
		}
	CHECK_EQ(kvs_table_count(t), n);
	per = (double)kvs_table_bytes(t) / n;
	printf("test_table: %u records: %zu bytes per record struct, %.1f bytes "
	       "per block with index and slack\n", n, sizeof(kvs_rec), per);
	CHECK(sizeof(kvs_rec) <= 64);
	CHECK(per <= 96.0);
	for (uint32_t i = 0; i < n; i += 7)
		CHECK(kvs_table_find(t, key(i, 0)) != KVS_NONE);
	kvs_table_destroy(t);
}

int main(void)
{
	rng_state = kvs_test_seed("test_table");
	test_model(0, 5000, 200000);
	test_model(1, 300, 20000);
	test_scale();
	return check_summary("test_table");
}
