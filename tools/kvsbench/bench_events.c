/*
 * bench_events.c - kvsbench events: the rate of vLLM KV events the daemon
 * sustains and their cost on its loop (see bench_events.h).
 */
#include "bench_events.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_proc.h"
#include "bench_util.h"
#include "kvshare.h"
#include "kvshare_admin.h"

typedef struct run {
	double wall_s, cpu_s; /* the rounds' wall time, the daemon's CPU time */
	int64_t events, dropped;
} run;

/* The daemon's user + system CPU seconds (/proc/PID/stat). */
static double cpu_of(int64_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%" PRId64 "/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')'); /* the name may hold spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
			 &ut, &st) != 2)
		return 0;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int64_t stat_of(kvs_client *c, const char *name)
{
	char *text = NULL;
	int64_t v = 0;

	if (kvs_stats(c, &text) == 0)
		kvs_stats_value(text, name, &v);
	free(text);
	return v;
}

/* @rounds of: commit @blocks blocks (one chain), then evict them all. */
static int rounds_run(const char *sock, unsigned blocks, unsigned rounds,
		      run *out)
{
	kvs_layout l = { .model = "kvsbench-events", .layers = 1, .kv_heads = 1,
			 .head_dim = 16, .block_tokens = 16, .tp_size = 1,
			 .dtype = KVS_DTYPE_FP16 };
	uint32_t *tok = malloc((size_t)blocks * 16 * sizeof(*tok));
	kvs_hash *h = malloc((size_t)blocks * sizeof(*h));
	kvs_block *b = malloc((size_t)blocks * sizeof(*b));
	kvs_client *w = NULL, *op = NULL;
	kvs_evict_result er;
	kvs_lease lease;
	int64_t pid, ev0;
	double t0, c0;
	int rc = -ENOMEM;

	if (!tok || !h || !b)
		goto out;
	KVSB_STEP("", "connect", kvs_connect(sock, &l, &w));
	KVSB_STEP("", "connect", kvs_connect(sock, NULL, &op));
	pid = stat_of(op, "server.pid");
	ev0 = stat_of(op, "kv_events.published");
	c0 = cpu_of(pid);
	t0 = now_s();
	for (unsigned r = 0; r < rounds; r++) {
		kvsb_tokens(tok, (size_t)blocks * 16, 1000 + r, 50000);
		KVSB_STEP("", "hash", kvs_hash_tokens(w, tok, (size_t)blocks * 16,
						     h, blocks));
		KVSB_STEP("", "reserve", kvs_reserve(w, h, blocks, &lease, b));
		KVSB_STEP("", "commit", kvs_commit(w, lease));
		KVSB_STEP("", "evict", kvs_evict(op, KVS_SCOPE_NAMESPACE,
						 kvs_namespace_id(w),
						 (kvs_hash){ 0 }, 0, &er));
	}
	out->wall_s = now_s() - t0;
	out->cpu_s = cpu_of(pid) - c0;
	out->events = stat_of(op, "kv_events.published") - ev0;
	out->dropped = stat_of(op, "kv_events.dropped");
	rc = 0;
out:
	kvs_close(w);
	kvs_close(op);
	free(tok);
	free(h);
	free(b);
	return rc;
}

/* One private daemon, with (@events) or without the KV events. */
static int daemon_run(int events, unsigned blocks, unsigned rounds, run *out)
{
	char ep[64];
	const char *plain[] = { "--host-size", "256M", "--log-level", "warn", NULL };
	const char *on[] = { "--host-size", "256M", "--log-level", "warn",
			     "--kv-events", ep, NULL };
	kvsb_daemon *d = NULL;
	int rc;

	/* An abstract socket: nothing in the file system to clean up. No
	 * subscriber connects: the cost measured is the daemon's own. */
	snprintf(ep, sizeof(ep), "ipc://@kvsbench-events-%d", (int)getpid());
	rc = kvsb_daemon_start_args(events ? on : plain, 30, &d);
	if (rc < 0) {
		fprintf(stderr, "kvsbench: events: daemon start failed: %s\n",
			kvs_strerror(rc));
		return rc;
	}
	rc = rounds_run(kvsb_daemon_socket(d), blocks, rounds, out);
	if (kvsb_daemon_stop(d) < 0 && rc == 0)
		rc = -ECHILD;
	return rc;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: kvsbench events [--blocks K] [--rounds R] [--json]\n"
		"  Two private daemons, one after the other: without and with\n"
		"  --kv-events (no subscriber). R rounds of commit K blocks, evict\n"
		"  them: 2K events a round. Prints events/s, the daemon's CPU time\n"
		"  per event with events on, and what events add to it.\n"
		"  -k, --blocks K  blocks a round (default 4096, at most 16384)\n"
		"  -r, --rounds R  rounds (default 50)\n"
		"  -j, --json      one JSON line\n");
}

int kvsb_cmd_events(const char *sock, int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "blocks", required_argument, NULL, 'k' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned blocks = 4096, rounds = 50;
	int json = 0, opt;
	run off = { 0 }, on = { 0 };
	double per_off, per_on;

	(void)sock; /* it starts its own daemons: the flags differ */
	optind = 1;
	while ((opt = getopt_long(argc, argv, "k:r:jh", lopts, NULL)) != -1) {
		if (opt == 'k' && kvsb_parse_uint("blocks", optarg, 1, 16384, &blocks) == 0)
			continue;
		if (opt == 'r' && kvsb_parse_uint("rounds", optarg, 1, 100000, &rounds) == 0)
			continue;
		if (opt == 'j') {
			json = 1;
			continue;
		}
		usage();
		return opt == 'h' ? 0 : 2;
	}
	if (daemon_run(0, blocks, rounds, &off) < 0 ||
	    daemon_run(1, blocks, rounds, &on) < 0)
		return 1;
	if (on.events <= 0) {
		fprintf(stderr, "kvsbench: events: the daemon published none\n");
		return 1;
	}
	per_off = off.cpu_s / ((double)blocks * 2 * rounds) * 1e9;
	per_on = on.cpu_s / (double)on.events * 1e9;
	if (json)
		printf("{\"bench\":\"events\",\"blocks\":%u,\"rounds\":%u,"
		       "\"events\":%" PRId64 ",\"dropped\":%" PRId64 ","
		       "\"events_per_s\":%.0f,\"cpu_ns_per_event_on\":%.0f,"
		       "\"cpu_ns_per_event_off\":%.0f,\"wall_ratio\":%.3f}\n",
		       blocks, rounds, on.events, on.dropped,
		       on.events / on.wall_s, per_on, per_off,
		       on.wall_s / off.wall_s);
	else
		printf("events: %" PRId64 " in %.2f s: %.0f events/s (%" PRId64
		       " batches dropped)\n"
		       "daemon CPU a block change: %.0f ns with events, %.0f ns "
		       "without: events add %.0f ns (wall time x%.2f)\n",
		       on.events, on.wall_s, on.events / on.wall_s, on.dropped,
		       per_on, per_off, per_on - per_off, on.wall_s / off.wall_s);
	return 0;
}
