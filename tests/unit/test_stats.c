/*
 * test_stats - the stats sections (service/base/kvs_stats.h) and their one
 * renderer: every section the daemon renders (the server's head and tail,
 * every tier's through kvs_tiers_stats, on or off) has names unique across
 * the daemon and fits the zeros of an off tier; every line of the STATS
 * text parses as "section.name value" and every Prometheus sample as its
 * HELP, TYPE and value lines, with the value at the descriptor's offset
 * (distinct values per field, so a wrong offset or a skipped line shows).
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cache.h"
#include "kvs_check.h"
#include "kvs_fastidx.h"
#include "kvs_tiers_table.h"
#include "server_int.h" /* server_stats_parts */
#include "tier_gpu.h"

#define NPARTS SERVER_STATS_PARTS
#define MAXSTATS 512

static kvs_counters stats;

typedef struct want {
	char sec[64], name[64];
	const kvs_stat *st;
	int64_t v;
} want;

static want wants[MAXSTATS];
static uint32_t nwants;

static const char *sec_of(const kvs_stats_part *p, const kvs_stat *st)
{
	return st->sec ? st->sec : p->sec->name;
}

static int64_t value_at(const void *vals, const kvs_stat *st)
{
	int64_t v;

	memcpy(&v, (const char *)vals + st->off, sizeof(v));
	return v;
}

/* What every line must say, from the descriptors alone. */
static void expect(const kvs_stats_part *parts, uint32_t n)
{
	nwants = 0;
	for (uint32_t i = 0; i < n; i++) {
		const kvs_stats_section *s = parts[i].sec;

		CHECK(s->n > 0);
		CHECK(s->tier == 0 || s->n <= KVS_STATS_ZERO_MAX);
		for (uint32_t j = 0; j < s->n && nwants < MAXSTATS; j++) {
			want *w = &wants[nwants++];

			CHECK(snprintf(w->sec, sizeof(w->sec), "%s",
				       sec_of(&parts[i], &s->stats[j])) <
			      (int)sizeof(w->sec));
			CHECK(snprintf(w->name, sizeof(w->name), "%s",
				       s->stats[j].name) <
			      (int)sizeof(w->name));
			w->st = &s->stats[j];
			w->v = value_at(parts[i].vals, &s->stats[j]);
			CHECK(s->stats[j].off % sizeof(int64_t) == 0);
			CHECK(s->stats[j].kind == KVS_STAT_COUNTER ||
			      s->stats[j].kind == KVS_STAT_GAUGE);
			CHECK(strchr(s->stats[j].help, '\n') == NULL);
		}
	}
}

static void check_unique(void)
{
	for (uint32_t i = 0; i < nwants; i++)
		for (uint32_t j = i + 1; j < nwants; j++)
			if (!strcmp(wants[i].sec, wants[j].sec) &&
			    !strcmp(wants[i].name, wants[j].name)) {
				fprintf(stderr, "%s.%s twice\n", wants[i].sec,
					wants[i].name);
				CHECK(!"a stat named twice");
			}
}

static char *render(const kvs_stats_part *parts, uint32_t n, int prometheus)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	kvs_stats_render(parts, n, prometheus, f);
	fclose(f);
	return text;
}

static void check_text(const char *text)
{
	const char *p = text;
	uint32_t k = 0;

	while (p && *p) {
		const char *nl = strchr(p, '\n');
		char line[512], sec[64], name[64];
		long long v;
		int used = 0;

		CHECK(nl != NULL);
		if (!nl)
			break;
		snprintf(line, sizeof(line), "%.*s", (int)(nl - p), p);
		CHECK(sscanf(line, "%63[a-z_].%63[a-z0-9_] %lld%n", sec, name,
			     &v, &used) == 3);
		CHECK_EQ(used, (int)strlen(line));
		CHECK(k < nwants);
		if (k < nwants) {
			CHECK(!strcmp(sec, wants[k].sec));
			CHECK(!strcmp(name, wants[k].name));
			CHECK_EQ(v, wants[k].v);
		}
		k++;
		p = nl + 1;
	}
	CHECK_EQ(k, nwants);
}

static int metric_name_ok(const char *s)
{
	if (!*s || !(isalpha((unsigned char)*s) || *s == '_' || *s == ':'))
		return 0;
	for (; *s; s++)
		if (!(isalnum((unsigned char)*s) || *s == '_' || *s == ':'))
			return 0;
	return 1;
}

/* One line of @text from *@p into @line; 0 at the end. */
static int next_line(const char **p, char *line, size_t cap)
{
	const char *nl = *p ? strchr(*p, '\n') : NULL;

	if (!nl)
		return 0;
	snprintf(line, cap, "%.*s", (int)(nl - *p), *p);
	*p = nl + 1;
	return 1;
}

static void check_prometheus(const char *text)
{
	const char *p = text;
	uint32_t k;

	for (k = 0; k < nwants; k++) {
		const want *w = &wants[k];
		int counter = w->st->kind == KVS_STAT_COUNTER;
		char metric[160], line[512], exp[720];
		long long v;
		int used = 0;

		CHECK(snprintf(metric, sizeof(metric), "kvshare_%s_%s%s", w->sec,
			       w->name, counter ? "_total" : "") < (int)sizeof(metric));
		CHECK(metric_name_ok(metric));
		CHECK(next_line(&p, line, sizeof(line)));
		CHECK(snprintf(exp, sizeof(exp), "# HELP %s %s", metric,
			       w->st->help) < (int)sizeof(exp));
		CHECK(!strcmp(line, exp));
		CHECK(next_line(&p, line, sizeof(line)));
		CHECK(snprintf(exp, sizeof(exp), "# TYPE %s %s", metric,
			       counter ? "counter" : "gauge") < (int)sizeof(exp));
		CHECK(!strcmp(line, exp));
		CHECK(next_line(&p, line, sizeof(line)));
		CHECK(snprintf(exp, sizeof(exp), "%s %%lld%%n", metric) <
		      (int)sizeof(exp));
		CHECK(sscanf(line, exp, &v, &used) == 1);
		CHECK_EQ(used, (int)strlen(line));
		CHECK_EQ(v, w->v);
	}
	CHECK(p && *p == '\0');
}

/* Distinct values in a section's own struct: a line that reads another
 * field, or zeros, shows. */
static void fill(const kvs_stats_section *sec, const void *vals, int64_t base)
{
	for (uint32_t i = 0; i < sec->n; i++) {
		int64_t x = base + i;

		memcpy((char *)vals + sec->stats[i].off, &x, sizeof(x));
	}
}

int main(void)
{
	kvs_cache_config cfg = { .host_bytes = 4u << 20, .page_bytes = 64u << 10,
				 .policy = "leaf-lru", .max_leases = 64 };
	kvs_tier_gpu_config gc = { .device = -1, .bytes = 1u << 20,
				   .page_bytes = 64u << 10 };
	kvs_stats_part parts[NPARTS];
	kvs_tier_mod *gpu = NULL;
	kvs_fast *fast = NULL;
	kvs_cache *c = NULL;
	char why[256], *text;
	int64_t v = 1;
	uint32_t n = 0;

	/* Distinct values: a line reading another field's shows. */
#define SET(sec, name, kind, help) stats.sec##_##name = v++;
	KVS_STATS_FIELDS(SET)
#undef SET
	CHECK_EQ(kvs_cache_create(&cfg, &stats, &c), 0);
	if (!c)
		return check_summary("test_stats");
	/* One tier on (its values), the others off (zeros). */
	setenv("KVS_GPU_FAKE", "1", 1);
	CHECK_EQ(kvs_tier_gpu_open(&gc, &gpu, why, sizeof(why)), 0);
	unsetenv("KVS_GPU_FAKE");
	CHECK(gpu != NULL);
	if (gpu) {
		CHECK_EQ(kvs_cache_tier_add(c, gpu), 0);
		fill(gpu->ops->stats_section, gpu->counters, 1000);
	}

	/* No fast path: its section is zeros. */
	n = server_stats_parts(&stats, NULL, c, parts);
	CHECK_EQ(n, NPARTS);
	CHECK(parts[1].sec == &kvs_fast_section && parts[1].vals == kvs_stats_zeros);
	CHECK_EQ(kvs_fast_create(c, &stats, 1024, 64, 1, &fast), 0);
	if (fast)
		fill(&kvs_fast_section, kvs_fast_counters(fast), 2000);
	n = server_stats_parts(&stats, fast, c, parts);
	/* The order of the text, older than the sections. */
	CHECK(parts[0].sec == &kvs_stats_head && parts[2].sec == &kvs_stats_mid);
	CHECK(!strcmp(parts[1].sec->name, "fast"));
	CHECK(fast && parts[1].vals == (const void *)kvs_fast_counters(fast));
	CHECK(!strcmp(parts[3].sec->name, "tier_ssd"));
	CHECK(!strcmp(parts[4].sec->name, "tier_remote"));
	CHECK(!strcmp(parts[5].sec->name, "tier_gpu"));
	CHECK(parts[3].vals == kvs_stats_zeros && parts[4].vals == kvs_stats_zeros);
	CHECK(gpu && parts[5].vals == gpu->counters);
	CHECK(parts[6].sec == &kvs_stats_tail);
	for (uint32_t i = 3; i < 3 + KVS_TIERS_SECTIONS; i++)
		CHECK_EQ(parts[i].sec->tier != 0, 1);

	expect(parts, n);
	CHECK(nwants > 150);
	CHECK(!strcmp(wants[0].sec, "server"));
	CHECK(!strcmp(wants[nwants - 1].sec, "errors"));
	check_unique();

	text = render(parts, n, 0);
	CHECK(text != NULL);
	check_text(text);
	free(text);
	text = render(parts, n, 1);
	CHECK(text != NULL);
	check_prometheus(text);
	free(text);

	kvs_cache_destroy(c);
	kvs_fast_destroy(fast);
	return check_summary("test_stats");
}
