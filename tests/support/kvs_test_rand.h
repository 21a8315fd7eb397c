/*
 * kvs_test_rand.h - the tests' seed and their one small random generator:
 * kvs_test_seed() takes $KVS_TEST_SEED (a replay) or the clock and prints
 * it, kvs_test_rnd() is splitmix64 (the same sequence on every libc, so a
 * seed replays anywhere). kvs_check.h includes it; a test with a CHECK of
 * its own (slab_test.h) includes it alone.
 */
#ifndef KVS_TEST_RAND_H
#define KVS_TEST_RAND_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The seed of a test's random parts, once kvs_test_seed() chose it. */
static unsigned long long kvs_seed;
static int kvs_seeded;

/* kvs_test_seed - $KVS_TEST_SEED when set (a replay), else one from the
 * clock; printed now, and again by check_summary() when a check failed. */
static inline unsigned long long kvs_test_seed(const char *name)
{
	const char *env = getenv("KVS_TEST_SEED");
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	kvs_seed = env && *env ? strtoull(env, NULL, 0) :
		   (unsigned long long)ts.tv_sec * 1000000007ULL +
			   (unsigned long long)ts.tv_nsec;
	kvs_seeded = 1;
	printf("%s: seed %llu (KVS_TEST_SEED to replay)\n", name, kvs_seed);
	return kvs_seed;
}

/* kvs_test_rnd - the next of a splitmix64 sequence in *@state (seed it
 * with kvs_test_seed()): the tests' one small random generator. */
static inline uint64_t kvs_test_rnd(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#endif /* KVS_TEST_RAND_H */
