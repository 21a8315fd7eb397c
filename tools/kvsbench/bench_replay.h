/*
 * bench_replay.h - `kvsbench replay`: a KV-cache workload trace in the
 * Mooncake FAST'25 format replayed through a kvshared of its own.
 *
 *   kvsbench replay --trace FILE --capacity-tokens C [--block-tokens 512]
 *                   [--policy P] [--daemon PATH] [--json]
 *
 * It starts a kvshared (the one beside kvsbench, or --daemon) in a fresh
 * temp directory, sized to hold exactly floor(C / block_tokens) blocks, and
 * counts hit tokens as the reference model of shared/traces/SOURCES.md does.
 * Beside the daemon's number it prints the offline models of the same trace
 * and capacity (replay_models.h: LRU, Belady with bypass, S3-FIFO, ARC) and
 * the daemon's share of the optimum ("of_optimum"); an --policy lru run fails
 * unless the daemon's hit tokens equal the offline LRU's. After those it
 * prints what the daemon's policy learned by the end (its policy.* stats,
 * "learned") and, last, "hit_ratio: X". docs/benchmarks.md has the numbers.
 */
#ifndef KVS_BENCH_REPLAY_H
#define KVS_BENCH_REPLAY_H

/*
 * kvsbench_replay - run the replay subcommand.
 * @sock: kvsbench's global --socket; unused: the replay always starts its
 *        own daemon (a shared one would not have the capacity asked for).
 * @argc, @argv: the subcommand's arguments, argv[0] = "replay".
 * Returns the process exit status: 0 done, 1 failed, 2 bad usage.
 * Thread: the main thread (it forks the daemon and waits for it).
 */
int kvsbench_replay(const char *sock, int argc, char **argv);

#endif /* KVS_BENCH_REPLAY_H */
