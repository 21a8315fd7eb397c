/*
 * bench_share_int.h - what the files of `kvsbench share` share
 * (bench_share.c: the workers; bench_share_cmd.c: the options and the
 * report): the run's settings and one worker's report.
 */
#ifndef KVSB_SHARE_INT_H
#define KVSB_SHARE_INT_H

#include <stdint.h>

#include "kvshare.h"

#define MAX_WORKERS 1024
#define VOCAB 128256 /* token ids like a Llama-3 tokenizer's */
#define PREFIX_SEED 0x6b7673686172652dull
#define SUFFIX_SEED 0x7375666669782d31ull
#define DOC_SEED 0x646f632d706f6f6cull
#define DRAW_SEED 0x647261772d726e67ull

struct share_opts {
	const char *sock;
	unsigned workers, prefix, suffix;
	unsigned window; /* blocks per lookup and per reserve (0: not set) */
	kvs_layout layout;
	int json_only;
	/* RAG mode: each worker issues @requests requests of the prefix, then
	 * @per_req of the @docs documents (@doc_tokens each, @doc_tok[d * T..]),
	 * then a private question of @suffix tokens. */
	int rag, sorted;
	unsigned docs, per_req, doc_tokens, requests;
	uint64_t seed;
	uint32_t *doc_tok;
};

/* One worker's result, copied whole into its slot when the worker ends. */
struct report {
	uint32_t worker;
	int32_t rc;          /* 0, or the error of step `where` */
	char where[16];
	uint64_t requests, prompt_tokens, blocks, hit_blocks, miss_blocks, verified_bytes,
		corrupt_blocks, new_blocks, exists_blocks, busy_blocks,
		full_blocks;
	double lookup_s, write_s;
};

/* Fork workers [first, last], collect their reports into r[], wait for all.
 * Returns the number of workers that failed (no report or a bad exit). */
unsigned kvsb_share_phase(const struct share_opts *o, unsigned first,
			  unsigned last, struct report *r);

#endif /* KVSB_SHARE_INT_H */
