/* stats.c - the server's sections and the one rendering of every section
 * (see kvs_stats.h). */
#include "kvs_stats.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The server's sections: their X lines carry the section, so the entries
 * of the head, the middle and the tail are made here, not by
 * KVS_STAT_DESC. */
#define SERVER_DESC(sec, name, kind, help)                                    \
	{ #sec, #name, help, KVS_STAT_##kind,                                  \
	  (uint32_t)offsetof(kvs_counters, sec##_##name) },
static const kvs_stat head[] = { KVS_STATS_HEAD(SERVER_DESC) };
static const kvs_stat mid[] = { KVS_STATS_MID(SERVER_DESC) };
static const kvs_stat tail[] = { KVS_STATS_TAIL(SERVER_DESC) };
#undef SERVER_DESC

const kvs_stats_section kvs_stats_head = {
	"server", 0, sizeof(head) / sizeof(head[0]), head
};
const kvs_stats_section kvs_stats_mid = {
	"server", 0, sizeof(mid) / sizeof(mid[0]), mid
};
const kvs_stats_section kvs_stats_tail = {
	"server", 0, sizeof(tail) / sizeof(tail[0]), tail
};
const int64_t kvs_stats_zeros[KVS_STATS_ZERO_MAX];

static int64_t value_at(const void *vals, const kvs_stat *st)
{
	int64_t v;

	memcpy(&v, (const char *)vals + st->off, sizeof(v));
	return v;
}

static void stat_line(const char *sec, const kvs_stat *st, int64_t v,
		      int prometheus, FILE *f)
{
	const char *sfx = st->kind == KVS_STAT_COUNTER ? "_total" : "";

	if (!prometheus) {
		fprintf(f, "%s.%s %" PRId64 "\n", sec, st->name, v);
		return;
	}
	fprintf(f, "# HELP kvshare_%s_%s%s %s\n"
		   "# TYPE kvshare_%s_%s%s %s\n"
		   "kvshare_%s_%s%s %" PRId64 "\n",
		sec, st->name, sfx, st->help, sec, st->name, sfx,
		st->kind == KVS_STAT_COUNTER ? "counter" : "gauge",
		sec, st->name, sfx, v);
}

void kvs_stats_render(const kvs_stats_part *parts, uint32_t n, int prometheus,
		      FILE *f)
{
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < parts[i].sec->n; j++) {
			const kvs_stat *st = &parts[i].sec->stats[j];

			stat_line(st->sec ? st->sec : parts[i].sec->name, st,
				  value_at(parts[i].vals, st), prometheus, f);
		}
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
