/* stats.c - one rendering of every counter (see kvs_stats.h). */
#include "kvs_stats.h"

#include <inttypes.h>
#include <stdio.h>

void kvs_stats_print(const kvs_counters *s, FILE *f)
{
#define KVS_STATS_X(sec, name, kind, help) \
	fprintf(f, #sec "." #name " %" PRId64 "\n", s->sec##_##name);
	KVS_STATS_FIELDS(KVS_STATS_X)
#undef KVS_STATS_X
}

void kvs_stats_print_prometheus(const kvs_counters *s, FILE *f)
{
#define KVS_STATS_X(sec, name, kind, help)                                   \
	if (KVS_STATS_IS_COUNTER_##kind)                                     \
		fprintf(f, "# HELP kvshare_" #sec "_" #name "_total " help "\n" \
			   "# TYPE kvshare_" #sec "_" #name "_total counter\n"  \
			   "kvshare_" #sec "_" #name "_total %" PRId64 "\n",    \
			s->sec##_##name);                                    \
	else                                                                 \
		fprintf(f, "# HELP kvshare_" #sec "_" #name " " help "\n"     \
			   "# TYPE kvshare_" #sec "_" #name " gauge\n"          \
			   "kvshare_" #sec "_" #name " %" PRId64 "\n",          \
			s->sec##_##name);
	KVS_STATS_FIELDS(KVS_STATS_X)
#undef KVS_STATS_X
}

void kvs_hist_print_prometheus(FILE *f, const char *name, const char *labels,
			       const kvs_hist *h)
{
	uint64_t cum = 0;

	/* Buckets from 1 us to 17 s: finer or coarser ones carry no operator
	 * meaning (+Inf still counts everything). */
	for (int i = 0; i < KVS_HIST_BUCKETS; i++) {
		cum += h->bucket[i];
		if (i < 9 || i > 33)
			continue;
		fprintf(f, "%s_bucket{%s,le=\"%.9g\"} %" PRIu64 "\n", name, labels,
			(double)(2ull << i) / 1e9, cum);
	}
	fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", name, labels, h->count);
	fprintf(f, "%s_sum{%s} %.9f\n", name, labels, (double)h->sum_ns / 1e9);
	fprintf(f, "%s_count{%s} %" PRIu64 "\n", name, labels, h->count);
}
