/*
 * bench_ssd.h - kvsbench ssd: the SSD tier's demotion and promotion
 * throughput through a real kvshared, beside fio on the same directory.
 *
 *   kvsbench ssd [--dir DIR] [--block-bytes B] [--qd N] [--bytes TOTAL]
 *                [--clients C] [--reps R] [--baseline KVSHARED] [--json]
 *
 * Each repetition starts a private kvshared with --ssd-dir in a fresh
 * directory under DIR, --ssd-queue-depth N and a host tier of a few chains,
 * then:
 *  demote:  one client publishes TOTAL bytes of B-byte blocks in chains of
 *           N blocks; the host tier evicts, every evicted block is written
 *           to SSD. The client keeps at most 2N writes in flight (it reads
 *           tier_ssd.writes_inflight after each chain), so the tier runs at
 *           its queue depth without overflowing its staging (which would
 *           drop blocks). GB/s = tier_ssd.bytes_written delta / the time
 *           from the reserve of the chain that made the first eviction
 *           (filling the empty host tier before it is not demotion) to the
 *           last write's completion.
 *  promote: C clients look every SSD-only chain up again (N reads per
 *           lookup), check each block's stamp and release. GB/s =
 *           tier_ssd.bytes_read delta / the time from the first lookup to
 *           the last release.
 * Beside them: fio --ioengine=io_uring --direct=1 --rw=write, then
 * --rw=read, --bs=B --iodepth=N --size=TOTAL on a file in the same
 * directory. With --baseline, a second kvshared (another build) runs the
 * same demote and promote in every repetition, so that two builds are
 * compared under the same load. Each repetition runs fio and every build
 * once, in an order that rotates from one repetition to the next; a ratio
 * is kvshare / fio of the same repetition. The summary gives, per build,
 * the median of each figure with its smallest and largest (the spread:
 * on a shared machine it is as telling as the median; with --baseline
 * also this build / the baseline within each repetition), and how many
 * demotion writes went straight from the arena or through a staging copy
 * (tier_ssd.writes_direct / writes_staged; n/a for a build without them).
 * Without fio, its columns say n/a and why. A figure, not a test.
 */
#ifndef KVSB_SSD_H
#define KVSB_SSD_H

/*
 * kvsb_cmd_ssd - the `ssd` subcommand. @sock must be NULL (it starts its own
 * daemon: it needs --ssd-dir); argv[0] = "ssd".
 * Returns the process exit status: 0 ran, 1 failed, 2 usage.
 * Thread: the main thread; it forks.
 */
int kvsb_cmd_ssd(const char *sock, int argc, char **argv);

#endif /* KVSB_SSD_H */
