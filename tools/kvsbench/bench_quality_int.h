/*
 * bench_quality_int.h - what `kvsbench quality`'s two modes share
 * (bench_quality.c: per-head KV; bench_quality_mla.c: MLA's latent rows):
 * the generator's random numbers, element access in a worker cache of any
 * plain dtype, the error measure and option parsing.
 * Thread: every function here is pure, or touches only its arguments.
 */
#ifndef KVS_BENCH_QUALITY_INT_H
#define KVS_BENCH_QUALITY_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_types.h"

uint64_t kvsq_splitmix64(uint64_t *s);
double kvsq_unif(uint64_t *s);   /* [0, 1) */
double kvsq_normal(uint64_t *s); /* N(0, 1), Box-Muller */
/* The page ids 0..@npages-1 in a random order of @seed (Fisher-Yates): a
 * worker cache's blocks scattered over its pages. */
void kvsq_page_ids(int32_t *ids, uint32_t npages, uint64_t seed);
/* Bytes of one element of @d in a worker cache (1 for the quantized ones). */
size_t kvsq_esize(kvs_dtype d);
/* Element @i of an fp16, bf16 or fp32 array at @p. */
float kvsq_elem_get(const uint8_t *p, kvs_dtype d, size_t i);
void kvsq_elem_put(uint8_t *p, kvs_dtype d, size_t i, float x);
/* Bytes per stored element of a one-layer block of K and V in @stored,
 * scales and everything else in the block included. */
double kvsq_bytes_per_elem(uint32_t block_tokens, uint32_t kv_heads, uint32_t head_dim,
			   kvs_dtype stored);
/* ||a - ref|| / ||ref|| (Frobenius; ||a - ref|| when ref is all zeros). */
double kvsq_rel_err(const float *a, const float *ref, size_t n);
/* --@name's value in [lo, hi] / a positive finite number; 1 (and a
 * message on stderr) when it is not one. */
int kvsq_parse_u32(const char *name, const char *s, uint32_t lo, uint32_t hi,
		   uint32_t *out);
int kvsq_parse_f(const char *name, const char *s, double *out);

/*
 * kvsbench_quality_mla - `kvsbench quality --mla`: the same measure on an
 * MLA latent cache (bench_quality_mla.c). Returns as kvsbench_quality().
 */
int kvsbench_quality_mla(int argc, char **argv);

#endif /* KVS_BENCH_QUALITY_INT_H */
