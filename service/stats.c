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
