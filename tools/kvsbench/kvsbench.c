/*
 * kvsbench - benchmarks for kvshared, on the public client API only.
 *
 *   kvsbench [--socket PATH] COMMAND [OPTIONS]
 *
 * One file per command (tools/kvsbench/bench_*.c); this one parses the global options
 * and dispatches (cli.c). `kvsbench COMMAND --help` describes each.
 */
#include <stdio.h>

#include "bench_data.h"
#include "bench_events.h"
#include "bench_ops.h"
#include "bench_replay.h"
#include "bench_ssd.h"
#include "bench_quality.h"
#include "bench_remote.h"
#include "bench_share.h"
#include "cli.h"
#include "kvshare.h"

/* quality needs no daemon: it measures the kernels' quantization alone. */
static int cmd_quality(const char *sock, int argc, char **argv)
{
	(void)sock;
	return kvsbench_quality(argc, argv);
}

static const struct cli_cmd cmds[] = {
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
	{ "remote", kvsb_cmd_remote,
	  "remote tier: publish and promotion GB/s beside redis-benchmark" },
	{ "events", kvsb_cmd_events,
	  "vLLM KV events (--kv-events): events/s, daemon CPU per event" },
	{ "replay", kvsbench_replay,
	  "replay a Mooncake-format trace through its own daemon: hit ratio" },
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static void usage(void)
{
	fprintf(stderr,
		"usage: kvsbench [--socket PATH] [--timeout MS] COMMAND [OPTIONS]\n"
		"\n"
		"options:\n"
		"  -s, --socket PATH  the daemon's socket (default: the daemon's)\n"
		"  --timeout MS       each library call's deadline (default:\n"
		"                     $KVSHARE_TIMEOUT_MS, else 5000)\n"
		"  -h, --help         this help; COMMAND --help for a command's\n"
		"--socket may also follow COMMAND, among its options.\n"
		"\n"
		"commands:\n");
	cli_list(cmds, NCMDS, 8);
}

int main(int argc, char **argv)
{
	return cli_main("kvsbench", cmds, NCMDS, usage, argc, argv);
}
