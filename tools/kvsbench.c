/*
 * kvsbench - benchmarks for kvshared, on the public client API only.
 *
 *   kvsbench [--socket PATH] COMMAND [OPTIONS]
 *
 * One file per command (tools/bench_*.c); this one parses the global options
 * and dispatches. `kvsbench COMMAND --help` describes each.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "bench_data.h"
#include "bench_ops.h"
#include "bench_replay.h"
#include "bench_ssd.h"
#include "bench_quality.h"
#include "bench_share.h"
#include "kvshare.h"

struct cmd {
	const char *name;
	int (*fn)(const char *sock, int argc, char **argv);
	const char *help;
};

/* quality needs no daemon: it measures the kernels' quantization alone. */
static int cmd_quality(const char *sock, int argc, char **argv)
{
	(void)sock;
	return kvsbench_quality(argc, argv);
}

static const struct cmd cmds[] = {
	{ "share", kvsb_cmd_share,
	  "N workers share one prefix: publish once, hit everywhere, verify" },
	{ "quality", cmd_quality,
	  "attention error of KV stored as fp16/bf16/int8/fp8 (kernels' twins)" },
	{ "ops", kvsb_cmd_ops,
	  "control plane: lookup+release ops/s, p50/p99, beside Redis MGET" },
	{ "data", kvsb_cmd_data,
	  "data plane: GB/s copying leased blocks, beside memcpy and Redis GET" },
	{ "ssd", kvsb_cmd_ssd,
	  "SSD tier: demotion and promotion GB/s beside fio (io_uring, O_DIRECT)" },
	{ "replay", kvsbench_replay,
	  "replay a Mooncake-format trace through its own daemon: hit ratio" },
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static void usage(void)
{
	fprintf(stderr,
		"usage: kvsbench [--socket PATH] COMMAND [OPTIONS]\n"
		"\n"
		"options:\n"
		"  -s, --socket PATH  the daemon's socket (default: the daemon's)\n"
		"  -h, --help         this help; COMMAND --help for a command's\n"
		"\n"
		"commands:\n");
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(stderr, "  %-8s %s\n", cmds[i].name, cmds[i].help);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *sock = NULL;
	int o;

	while ((o = getopt_long(argc, argv, "+s:h", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			sock = optarg;
			break;
		case 'h':
			usage();
			return 0;
		default:
			usage();
			return 2;
		}
	}
	if (optind >= argc) {
		usage();
		return 2;
	}
	for (size_t i = 0; i < NCMDS; i++) {
		if (strcmp(argv[optind], cmds[i].name))
			continue;
		argc -= optind;
		argv += optind;
		optind = 0; /* glibc: restart getopt on the command's argv */
		return cmds[i].fn(sock, argc, argv);
	}
	fprintf(stderr, "kvsbench: unknown command '%s'\n", argv[optind]);
	usage();
	return 2;
}
