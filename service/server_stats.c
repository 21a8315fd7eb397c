/*
 * server_stats.c - the server's stats: every module's counters, request
 * latencies and namespaces rendered as the STATS text and as Prometheus
 * text for /metrics (see server_int.h).
 */
#include "server_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "kvs_log.h"

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
	s->stats.server_metrics_port = s->metrics ? kvs_metrics_port(s->metrics) : 0;
	s->stats.clients_connected = s->nconns; /* served, not refusing */
	kvs_cache_stats_fill(s->cache);
	kvs_fast_stats_fill(s->fast);
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

static void ns_prometheus(const kvs_ns_info *ns, void *arg)
{
	FILE *f = arg;
	char model[2 * KVS_NAME_MAX + 1];
	size_t j = 0;

	/* Label values escape backslash, quote and newline. */
	for (const char *p = ns->model; *p && j + 2 < sizeof(model); p++) {
		if (*p == '\\' || *p == '"' || *p == '\n')
			model[j++] = '\\';
		model[j++] = *p == '\n' ? 'n' : *p;
	}
	model[j] = '\0';
	fprintf(f, "kvshare_namespace_blocks{ns=\"%u\",model=\"%s\"} %" PRIu64 "\n",
		ns->id, model, ns->blocks);
	fprintf(f, "kvshare_namespace_block_bytes{ns=\"%u\",model=\"%s\"} %" PRIu64 "\n",
		ns->id, model, ns->block_bytes);
	fprintf(f, "kvshare_namespace_clients{ns=\"%u\",model=\"%s\"} %u\n",
		ns->id, model, ns->clients);
}

void server_render_prometheus(FILE *f, void *arg)
{
	kvs_server *s = arg;

	stats_refresh(s);
	kvs_stats_print_prometheus(&s->stats, f);
	fprintf(f, "# HELP kvshare_namespace_blocks committed blocks per namespace\n"
		   "# TYPE kvshare_namespace_blocks gauge\n"
		   "# HELP kvshare_namespace_block_bytes bytes of one block\n"
		   "# TYPE kvshare_namespace_block_bytes gauge\n"
		   "# HELP kvshare_namespace_clients attached connections\n"
		   "# TYPE kvshare_namespace_clients gauge\n");
	kvs_cache_ns_foreach(s->cache, ns_prometheus, f);
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
	FILE *f;

	*text = NULL;
	*len = 0;
	stats_refresh(s);
	f = open_memstream(text, len);
	if (!f)
		return -ENOMEM;
	kvs_stats_print(&s->stats, f);
	latency_lines(s, f);
	kvs_cache_ns_foreach(s->cache, ns_line, f);
	if (fclose(f) != 0 || *len > KVS_WIRE_MAX_PAYLOAD) {
		free(*text);
		*text = NULL;
		return -ENOMEM;
	}
	return 0;
}
