/*
 * kvs_hist.h - a latency histogram in power-of-two nanosecond buckets.
 *
 * Bucket i counts samples in [2^i, 2^(i+1)) ns (bucket 0 also takes 0 and 1),
 * so recording is a count-leading-zeros and an increment: cheap enough for
 * every request. Quantiles are reported as the upper bound of the bucket that
 * holds them, so they are exact to within a factor of two, which is what an
 * operator needs to see a p99 move.
 *
 * Thread: the loop thread.
 */
#ifndef KVS_HIST_H
#define KVS_HIST_H

#include <stdint.h>

#define KVS_HIST_BUCKETS 40 /* up to 2^40 ns, ~18 minutes */

typedef struct kvs_hist {
	uint64_t count;
	uint64_t sum_ns;
	uint64_t bucket[KVS_HIST_BUCKETS];
} kvs_hist;

static inline void kvs_hist_add(kvs_hist *h, uint64_t ns)
{
	int i = ns > 1 ? 63 - __builtin_clzll(ns) : 0;

	if (i >= KVS_HIST_BUCKETS)
		i = KVS_HIST_BUCKETS - 1;
	h->bucket[i]++;
	h->count++;
	h->sum_ns += ns;
}

/* kvs_hist_quantile - upper bound in ns of the bucket holding quantile @q
 * (0 < q <= 1); 0 when empty. */
static inline uint64_t kvs_hist_quantile(const kvs_hist *h, double q)
{
	uint64_t rank = (uint64_t)(q * (double)h->count + 0.999999), seen = 0;

	if (h->count == 0)
		return 0;
	for (int i = 0; i < KVS_HIST_BUCKETS; i++) {
		seen += h->bucket[i];
		if (seen >= rank)
			return 2ull << i;
	}
	return 2ull << (KVS_HIST_BUCKETS - 1);
}

#endif /* KVS_HIST_H */
