/*
 * bench_quality.h - `kvsbench quality`: relative error of attention output
 * with KV stored as each kvshare dtype (fp16, bf16, int8, fp8) against fp32
 * KV, on synthetic KV with the per-channel outliers of real models' K.
 */
#ifndef KVS_BENCH_QUALITY_H
#define KVS_BENCH_QUALITY_H

/*
 * kvsbench_quality - run the benchmark and print its table (or, with
 * --json, one JSON object) on stdout. @argv[0] is the command's name;
 * options are parsed with getopt_long (optind is reset here).
 * Returns 0, 1 when a kernel failed, 2 on a usage error.
 * Thread: the process's only getopt user while it runs.
 */
int kvsbench_quality(int argc, char **argv);

#endif /* KVS_BENCH_QUALITY_H */
