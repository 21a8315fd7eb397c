/*
 * bench_data.h - kvsbench data: data-plane bandwidth of kvshare's host tier
 * beside a plain memcpy and beside Redis GET.
 *
 *   kvsbench data [--socket S] [--block-bytes B[,B...]] [--blocks K]
 *                 [--readers N] [--seconds T] [--reps R] [--json]
 *
 * For each block size B, three ways of getting K blocks of B bytes into a
 * reader's private buffer (one slot of B bytes per block, K*B in all):
 *  - kvshare: kvs_lookup() of the K cached blocks, memcpy from
 *    kvs_block_ptr() of each, kvs_release(): what a worker does on a hit;
 *  - memcpy: the same copies between two private buffers of one process,
 *    no daemon at all: the limit;
 *  - Redis: GET of K keys holding B-byte values over a Unix socket, read
 *    straight into the buffer: what LMCache's Redis backend moves.
 * N reader processes run each way at once (default 1) for T seconds; the
 * three alternate, in a rotating order, R times; reported are GB/s (1e9 B/s)
 * of each, summed over readers, and the medians of the per-repetition
 * ratios kvshare/memcpy and kvshare/Redis. The layout is chosen so that a
 * block is exactly B bytes: 1 layer, 1 KV head, fp16, 16 tokens per block,
 * head_dim = B / 64 (so B must be a multiple of 64). A figure, not a test:
 * the exit status says only whether it ran.
 */
#ifndef KVSB_DATA_H
#define KVSB_DATA_H

/*
 * kvsb_cmd_data - the `data` subcommand.
 * @sock: kvsbench's --socket, or NULL (the command's own --socket wins; with
 *        neither, a private kvshared is started beside kvsbench, sized for
 *        every block size asked for).
 * @argc, @argv: the command's arguments, argv[0] = "data".
 * Returns the process exit status: 0 ran, 1 failed, 2 usage.
 * Thread: the main thread; it forks.
 */
int kvsb_cmd_data(const char *sock, int argc, char **argv);

#endif /* KVSB_DATA_H */
