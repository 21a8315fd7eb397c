/*
 * bench_util.h - the small helpers kvsbench's subcommands share: the clock,
 * the median of repetitions, option parsing with kvsbench's messages, a
 * step-or-fail macro, SplitMix64 token ids, and reaping a child and showing
 * its log.
 */
#ifndef KVSB_UTIL_H
#define KVSB_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_clock.h" /* now_s(), the clock of every subcommand */

/* The most values kvsb_median() takes. */
#define KVSB_MEDIAN_MAX 100


/*
 * kvsb_median - the median of @n values (n <= KVSB_MEDIAN_MAX; sorted in a
 * copy): the mean of the middle two for an even count, 0 for none.
 */
double kvsb_median(const double *v, unsigned n);

/*
 * kvsb_parse_uint - @s as a decimal in @min..@max into *@out, or a message
 * naming --@opt on stderr and -1.
 */
int kvsb_parse_uint(const char *opt, const char *s, unsigned min,
		    unsigned max, unsigned *out);

/*
 * kvsb_parse_seconds - @s as --seconds, 0.01..3600, into *@out, or a
 * message on stderr and -1.
 */
int kvsb_parse_seconds(const char *s, double *out);

/*
 * KVSB_STEP - run @expr into the caller's `rc`; when negative, print
 * "kvsbench: WHO NAME failed: ERROR" (kvs_strerror(): the caller includes
 * kvshare.h) and leave through the caller's `out` label.
 */
#define KVSB_STEP(who, name, expr)                                            \
	do {                                                                  \
		rc = (expr);                                                  \
		if (rc < 0) {                                                 \
			fprintf(stderr, "kvsbench: %s%s failed: %s\n", who,   \
				name, kvs_strerror(rc));                      \
			goto out;                                             \
		}                                                             \
	} while (0)

/* kvsb_splitmix64 - the next value of the SplitMix64 stream at *@s. */
uint64_t kvsb_splitmix64(uint64_t *s);

/* kvsb_tokens - @n token ids below @vocab from the SplitMix64 stream @seed. */
void kvsb_tokens(uint32_t *t, size_t n, uint64_t seed, uint32_t vocab);

/*
 * kvsb_reap - reap the child @pid within @timeout_s, polling (1 ms, doubling
 * to 32 ms). Returns its wait status, -ETIMEDOUT, or -errno.
 */
int kvsb_reap(int pid, double timeout_s);

/*
 * kvsb_log_tail - the last 2 KiB of the file @path on stderr, under
 * "kvsbench: @who log (@path):". Nothing when it cannot be opened.
 */
void kvsb_log_tail(const char *who, const char *path);

#endif /* KVSB_UTIL_H */
