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

#include "kvs_test_rand.h" /* kvs_test_seed, kvs_test_rnd */

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
