/*
 * bench_remote.h - `kvsbench remote`: the remote tier through two daemons,
 * beside redis-benchmark on the same Redis Cluster.
 *
 *   kvsbench remote [--seeds HOST:PORT,...] [--blocks N] [--reps N]
 *                   [--warmup N] [--clients C] [--keys R] [--sizes 1M,2M]
 *
 * Starts (or is given with --seeds) a Redis Cluster, and two private
 * kvshared daemons with --remote to it: A publishes at commit
 * (--remote-write through), B fetches. Per block size and repetition, in
 * one run and interleaved: publish GB/s (A: reserve, write and commit a new
 * chain of N blocks, until tier_remote.published has them all), promotion
 * GB/s (B: one lookup of that chain, which B does not have: probe, fetch,
 * verify into its host tier; the bytes are checked after the clock stops),
 * then `redis-benchmark --cluster -t set,get -d SIZE -c C -r R -n 24R` on
 * the same cluster. Warm-up repetitions first (not reported), so that the
 * daemons' host tiers recycle slots as a daemon that has run a while does.
 * Medians and the ratios ours / redis-benchmark.
 * docs/remote.md and docs/benchmarks.md describe the setup and the numbers.
 */
#ifndef KVSB_REMOTE_H
#define KVSB_REMOTE_H

/*
 * kvsb_cmd_remote - the `remote` subcommand.
 * @sock: kvsbench's --socket: not used (the command starts its daemons).
 * @argc, @argv: the command's arguments, argv[0] = "remote".
 * Returns the process exit status: 0 ran clean, 1 a step failed or a block
 * read back wrong, 2 usage, 77 no redis-server / cluster helper here.
 * Thread: the main thread; it forks.
 */
int kvsb_cmd_remote(const char *sock, int argc, char **argv);

#endif /* KVSB_REMOTE_H */
