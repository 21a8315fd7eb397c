/*
 * server_stats.c - the server's stats: every module's counters, request
 * latencies and namespaces rendered as the STATS text and as Prometheus
 * text for /metrics (see server_int.h).
 */
#include "server_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvs_cache_admin.h"
#include "kvs_log.h"
#include "kvs_persist.h"

/* Namespaces whose engine counts are rendered one by one: STATS must fit
 * one reply and a scrape stay small, while a daemon may hold thousands of
 * namespaces (256 per uid, a salt each). The rest count in the totals. */
#define ENGINES_NS_SHOWN 64

/* Private resident memory (RssAnon): the daemon's own footprint, apart from
 * the arena that it shares with its clients. */
static int64_t rss_anon_bytes(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long long kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssAnon: %lld kB", &kb) == 1)
			break;
	fclose(f);
	return kb * 1024;
}

static void ns_line(const kvs_ns_info *ns, void *arg)
{
	FILE *f = arg;

	fprintf(f, "namespace.%u.blocks %" PRIu64 "\n", ns->id, ns->blocks);
	fprintf(f, "namespace.%u.writing %" PRIu64 "\n", ns->id, ns->writing);
	fprintf(f, "namespace.%u.block_bytes %" PRIu64 "\n", ns->id, ns->block_bytes);
	fprintf(f, "namespace.%u.clients %u\n", ns->id, ns->clients);
	fprintf(f, "namespace.%u.lookup_hit %" PRIu64 "\n", ns->id, ns->lookup_hit);
	fprintf(f, "namespace.%u.lookup_miss %" PRIu64 "\n", ns->id, ns->lookup_miss);
}

/* Refresh every gauge before rendering. */
static void stats_refresh(kvs_server *s)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	s->stats.server_uptime_seconds = now.tv_sec - s->started.tv_sec;
	s->stats.server_pid = getpid();
	s->stats.server_rss_anon_bytes = rss_anon_bytes();
	s->stats.server_log_dropped = (int64_t)kvs_log_dropped();
	s->stats.persist_pending = (int64_t)kvs_persist_pending(s->cache);
	s->stats.server_metrics_port = s->metrics ? kvs_metrics_port(s->metrics) : 0;
	if (s->metrics) {
		uint64_t open, refused, timed_out;

		kvs_metrics_counts(s->metrics, &open, &refused, &timed_out);
		s->stats.server_metrics_open = (int64_t)open;
		s->stats.server_metrics_refused = refused;
		s->stats.server_metrics_timed_out = timed_out;
	}
	s->stats.clients_connected = s->nconns; /* served, not refusing */
	kvs_cache_stats_fill(s->cache);
	kvs_fast_stats_fill(s->fast);
}

uint32_t server_stats_parts(const kvs_counters *st, const kvs_fast *fast,
			    const kvs_cache *c,
			    kvs_stats_part out[SERVER_STATS_PARTS])
{
	const kvs_fast_stats *fs = kvs_fast_counters(fast);
	uint32_t n = 0;

	out[n++] = (kvs_stats_part){ &kvs_stats_head, st };
	out[n++] = (kvs_stats_part){ &kvs_fast_section,
				     fs ? (const void *)fs : kvs_stats_zeros };
	out[n++] = (kvs_stats_part){ &kvs_stats_mid, st };
	n += kvs_tiers_stats(c, out + n);
	out[n++] = (kvs_stats_part){ &kvs_stats_tail, st };
	return n;
}

static void sections(kvs_server *s, int prometheus, FILE *f)
{
	kvs_stats_part parts[SERVER_STATS_PARTS];
	uint32_t n = server_stats_parts(&s->stats, s->fast, s->cache, parts);

	kvs_stats_render(parts, n, prometheus, f);
}

static void latency_lines(kvs_server *s, FILE *f)
{
	for (uint32_t op = 1; op < KVS_OP__COUNT; op++) {
		const kvs_hist *hh = &s->latency[op];
		const char *name = kvs_wire_opcode_name(op);

		fprintf(f, "latency.%s_count %" PRIu64 "\n", name, hh->count);
		fprintf(f, "latency.%s_p50_ns %" PRIu64 "\n", name,
			kvs_hist_quantile(hh, 0.50));
		fprintf(f, "latency.%s_p99_ns %" PRIu64 "\n", name,
			kvs_hist_quantile(hh, 0.99));
	}
}

/* Bytes of the UTF-8 sequence at @p: 1 to 4, or 0 when it is none (a
 * stray continuation, a truncated sequence, an overlong or surrogate form,
 * past U+10FFFF). */
static size_t utf8_len(const unsigned char *p)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xbf;
	size_t n;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return n;
}

/* A Prometheus label value: backslash, quote and newline escaped, and each
 * byte that is not UTF-8 written as '?', since the exposition format is
 * UTF-8 and one such byte in a model name would fail the whole scrape. */
static void label_escape(const char *in, char *out, size_t cap)
{
	const unsigned char *p = (const unsigned char *)in;
	size_t j = 0;

	while (*p && j + 4 < cap) {
		size_t n = utf8_len(p);

		if (n == 0) {
			out[j++] = '?';
			p++;
			continue;
		}
		if (*p == '\\' || *p == '"' || *p == '\n')
			out[j++] = '\\';
		if (*p == '\n') {
			out[j++] = 'n';
			p++;
			continue;
		}
		memcpy(out + j, p, n);
		j += n;
		p += n;
	}
	out[j] = '\0';
}

static void ns_prometheus(const kvs_ns_info *ns, void *arg)
{
	FILE *f = arg;
	char model[2 * KVS_NAME_MAX + 5]; /* every byte escaped, and the NUL */

	label_escape(ns->model, model, sizeof(model));
	fprintf(f, "kvshare_namespace_blocks{ns=\"%u\",model=\"%s\"} %" PRIu64 "\n",
		ns->id, model, ns->blocks);
	fprintf(f, "kvshare_namespace_block_bytes{ns=\"%u\",model=\"%s\"} %" PRIu64 "\n",
		ns->id, model, ns->block_bytes);
	fprintf(f, "kvshare_namespace_clients{ns=\"%u\",model=\"%s\"} %u\n",
		ns->id, model, ns->clients);
}

/* One family each, its samples together: blocks.lookup_hit and _miss
 * split by namespace. */
static void ns_lookup_hit(const kvs_ns_info *ns, void *arg)
{
	char model[2 * KVS_NAME_MAX + 5];

	label_escape(ns->model, model, sizeof(model));
	fprintf(arg, "kvshare_namespace_lookup_hit_total{ns=\"%u\",model=\"%s\"} %"
		PRIu64 "\n", ns->id, model, ns->lookup_hit);
}

static void ns_lookup_miss(const kvs_ns_info *ns, void *arg)
{
	char model[2 * KVS_NAME_MAX + 5];

	label_escape(ns->model, model, sizeof(model));
	fprintf(arg, "kvshare_namespace_lookup_miss_total{ns=\"%u\",model=\"%s\"} %"
		PRIu64 "\n", ns->id, model, ns->lookup_miss);
}

/* ---- engines per namespace ---- */

static int64_t sat_add(int64_t to, uint64_t d)
{
	return d > (uint64_t)(INT64_MAX - to) ? INT64_MAX : to + (int64_t)d;
}

void server_engines_add(kvs_server *s, uint32_t ns, const kvs_engine_report *r)
{
	kvs_counters *st = &s->stats;
	kvs_engine_report *e;

#define ADD(f) st->engines_##f = sat_add(st->engines_##f, r->f);
	KVS_WIRE_REPORT_FIELDS(ADD)
#undef ADD
	if (ns == 0)
		return;
	if (ns > s->nns_engines) {
		e = realloc(s->ns_engines, (size_t)ns * sizeof(*e));
		if (!e)
			return;
		memset(e + s->nns_engines, 0, (size_t)(ns - s->nns_engines) * sizeof(*e));
		s->ns_engines = e;
		s->nns_engines = ns;
	}
	e = &s->ns_engines[ns - 1];
#define ADD(f) e->f = (uint64_t)sat_add((int64_t)e->f, r->f); /* <= INT64_MAX */
	KVS_WIRE_REPORT_FIELDS(ADD)
#undef ADD
}

static int engines_reported(const kvs_engine_report *e)
{
	static const kvs_engine_report zero;

	return memcmp(e, &zero, sizeof(zero)) != 0;
}

/* Ranks before @b: more hit tokens, then the lower id. */
static int engines_before(const kvs_server *s, uint32_t a, uint32_t b)
{
	uint64_t ha = s->ns_engines[a - 1].hit_tokens, hb = s->ns_engines[b - 1].hit_tokens;

	return ha != hb ? ha > hb : a < b;
}

/* The namespaces rendered: those that reported, best first by
 * engines_before, at most ENGINES_NS_SHOWN, into @ids; returns how many.
 * Sets the gauges engines.namespaces and engines.namespaces_omitted. */
static uint32_t engines_shown(kvs_server *s, uint32_t ids[ENGINES_NS_SHOWN])
{
	uint32_t n = 0, reported = 0;

	for (uint32_t id = 1; id <= s->nns_engines; id++) {
		uint32_t j;

		if (!engines_reported(&s->ns_engines[id - 1]))
			continue;
		reported++;
		if (n == ENGINES_NS_SHOWN && !engines_before(s, id, ids[n - 1]))
			continue;
		j = n < ENGINES_NS_SHOWN ? n++ : n - 1; /* the last one drops out */
		for (; j > 0 && engines_before(s, id, ids[j - 1]); j--)
			ids[j] = ids[j - 1];
		ids[j] = id;
	}
	s->stats.engines_namespaces = reported;
	s->stats.engines_namespaces_omitted = reported - n;
	return n;
}

static void engines_lines(const kvs_server *s, const uint32_t *ids, uint32_t n, FILE *f)
{
	for (uint32_t i = 0; i < n; i++) {
		const kvs_engine_report *e = &s->ns_engines[ids[i] - 1];

#define LINE(x) fprintf(f, "namespace.%u.engines." #x " %" PRIu64 "\n", ids[i], e->x);
		KVS_WIRE_REPORT_FIELDS(LINE)
#undef LINE
	}
}

/* One family per field, as kvshare_engines_*_total split by namespace:
 * a sum over this family is the unlabelled total (minus what unattached
 * connections and the namespaces past ENGINES_NS_SHOWN reported). */
static void engines_prometheus(const kvs_server *s, const uint32_t *ids, uint32_t n,
			       FILE *f)
{
	char model[ENGINES_NS_SHOWN][2 * KVS_NAME_MAX + 5];

	for (uint32_t i = 0; i < n; i++) {
		const kvs_ns_info *ns = kvs_cache_ns_at(s->cache, ids[i]);

		label_escape(ns ? ns->model : "", model[i], sizeof(model[i]));
	}
#define FAMILY(x)                                                              \
	fprintf(f, "# HELP kvshare_namespace_engines_" #x "_total "               \
		   "kvshare_engines_" #x "_total of one namespace's engines\n"     \
		   "# TYPE kvshare_namespace_engines_" #x "_total counter\n");      \
	for (uint32_t i = 0; i < n; i++)                                       \
		fprintf(f, "kvshare_namespace_engines_" #x "_total{ns=\"%u\","    \
			   "model=\"%s\"} %" PRIu64 "\n", ids[i], model[i],       \
			s->ns_engines[ids[i] - 1].x);
	KVS_WIRE_REPORT_FIELDS(FAMILY)
#undef FAMILY
}

void server_render_prometheus(FILE *f, void *arg)
{
	kvs_server *s = arg;
	uint32_t ids[ENGINES_NS_SHOWN], n;

	stats_refresh(s);
	n = engines_shown(s, ids);
	sections(s, 1, f);
	fprintf(f, "# HELP kvshare_namespace_blocks committed blocks per namespace\n"
		   "# TYPE kvshare_namespace_blocks gauge\n"
		   "# HELP kvshare_namespace_block_bytes bytes of one block\n"
		   "# TYPE kvshare_namespace_block_bytes gauge\n"
		   "# HELP kvshare_namespace_clients attached connections\n"
		   "# TYPE kvshare_namespace_clients gauge\n");
	kvs_cache_ns_foreach(s->cache, ns_prometheus, f);
	fprintf(f, "# HELP kvshare_namespace_lookup_hit_total blocks found by lookups, "
		   "per namespace (every path)\n"
		   "# TYPE kvshare_namespace_lookup_hit_total counter\n");
	kvs_cache_ns_foreach(s->cache, ns_lookup_hit, f);
	fprintf(f, "# HELP kvshare_namespace_lookup_miss_total blocks asked for and "
		   "not found, per namespace (every path)\n"
		   "# TYPE kvshare_namespace_lookup_miss_total counter\n");
	kvs_cache_ns_foreach(s->cache, ns_lookup_miss, f);
	engines_prometheus(s, ids, n, f);
	fprintf(f, "# HELP kvshare_request_duration_seconds time to handle a request\n"
		   "# TYPE kvshare_request_duration_seconds histogram\n");
	for (uint32_t op = 1; op < KVS_OP__COUNT; op++) {
		char labels[64];

		snprintf(labels, sizeof(labels), "op=\"%s\"", kvs_wire_opcode_name(op));
		kvs_hist_print_prometheus(f, "kvshare_request_duration_seconds",
					  labels, &s->latency[op]);
	}
}

int server_stats_text(kvs_server *s, char **text, size_t *len)
{
	uint32_t ids[ENGINES_NS_SHOWN], n;
	FILE *f;

	*text = NULL;
	*len = 0;
	stats_refresh(s);
	n = engines_shown(s, ids);
	f = open_memstream(text, len);
	if (!f)
		return -ENOMEM;
	sections(s, 0, f);
	latency_lines(s, f);
	kvs_cache_ns_foreach(s->cache, ns_line, f);
	engines_lines(s, ids, n, f);
	if (fclose(f) != 0 || *len > KVS_WIRE_MAX_PAYLOAD) {
		free(*text);
		*text = NULL;
		return -ENOMEM;
	}
	return 0;
}
