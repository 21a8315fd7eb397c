/*
 * kvs_check.h - the checks every unit test uses: count, report file:line and
 * the expression that failed, and end with "<name>: N checks passed, M failed".
 * Exit codes: 0 pass, 1 fail, 77 skip. A test with random parts seeds them
 * with kvs_test_seed(): KVS_TEST_SEED=<n> replays a run.
 */
#ifndef KVS_CHECK_H
#define KVS_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int kvs_checks, kvs_failures;

#define CHECK(cond)                                                         \
	do {                                                                \
		kvs_checks++;                                               \
		if (!(cond)) {                                              \
			kvs_failures++;                                     \
			fprintf(stderr, "%s:%d: check failed: %s\n",        \
				__FILE__, __LINE__, #cond);                 \
		}                                                           \
	} while (0)

/* CHECK_EQ - like CHECK(a == b), printing both values when they differ. */
#define CHECK_EQ(a, b)                                                      \
	do {                                                                \
		int64_t va_ = (int64_t)(a), vb_ = (int64_t)(b);             \
		kvs_checks++;                                               \
		if (va_ != vb_) {                                           \
			kvs_failures++;                                     \
			fprintf(stderr,                                     \
				"%s:%d: check failed: %s == %s (%" PRId64   \
				" != %" PRId64 ")\n",                       \
				__FILE__, __LINE__, #a, #b, va_, vb_);      \
		}                                                           \
	} while (0)

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

static inline int check_summary(const char *name)
{
	printf("%s: %d checks passed, %d failed\n", name,
	       kvs_checks - kvs_failures, kvs_failures);
	if (kvs_failures && kvs_seeded)
		printf("%s: FAILED with seed %llu: KVS_TEST_SEED=%llu replays it\n",
		       name, kvs_seed, kvs_seed);
	return kvs_failures ? 1 : 0;
}

#endif /* KVS_CHECK_H */
