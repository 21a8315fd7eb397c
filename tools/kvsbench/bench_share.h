/*
 * bench_share.h - `kvsbench share`: N worker processes sharing a prompt
 * prefix against one daemon; every hit's bytes are verified.
 *
 *   kvsbench [--socket S] share [--workers N] [--prefix-tokens T]
 *                               [--suffix-tokens U] [layout options]
 *                               [--json-only]
 *
 * Worker 1 runs alone and publishes the prefix; workers 2..N then run at
 * once and should hit all of it. The last line of output is one JSON object.
 *
 *   kvsbench share --rag [--docs D] [--docs-per-request K] [--doc-tokens T]
 *                        [--requests R] [--order sorted|random] [--seed S]
 *
 * RAG mode: all N workers at once, R requests each, every request the
 * prefix, then K of D documents (sorted by id or in draw order), then a
 * private question; reports the hit ratio in tokens (whole blocks) and the
 * bytes reused. docs/benchmarks.md describes both and has the numbers.
 */
#ifndef KVSB_SHARE_H
#define KVSB_SHARE_H

/*
 * kvsb_cmd_share - the `share` subcommand.
 * @sock: kvsbench's --socket, or NULL (the daemon's default socket).
 * @argc, @argv: the command's arguments, argv[0] = "share".
 * Returns the process exit status: 0 ran clean, 1 a worker failed or a
 * corrupt block was read, 2 usage.
 * Thread: the main thread; it forks.
 */
int kvsb_cmd_share(const char *sock, int argc, char **argv);

#endif /* KVSB_SHARE_H */
