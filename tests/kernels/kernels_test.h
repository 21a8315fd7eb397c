/*
 * kernels_test.h - what test_kernels and test_kernels_copy share: the
 * random inputs (seeded once, printed, KVS_TEST_SEED=N repeats a run) and
 * the reference element formats, tables of every positive finite fp16,
 * bf16 and e4m3 value with a nearest-value search. Static inline: each
 * test takes what it uses.
 */
#ifndef KVS_KERNELS_TEST_H
#define KVS_KERNELS_TEST_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvs_attention_ref.h"
#include "kvs_check.h"
#include "kvs_cuda.h"
#include "kvs_kv_copy.h"
#include "kvs_kv_format.h"
#include "kvs_numeric.h"
#include "kvs_types.h" /* kvs_layout_block_bytes(): the client sizes blocks the same */

static uint64_t rng_state;

static inline uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline double unif(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }

static inline double gauss(void)
{
	return sqrt(-2.0 * log(1.0 - unif())) * cos(6.283185307179586 * unif());
}

/* ---- reference formats: tables of every positive finite value ---- */

struct fmt {
	const char *name;
	uint32_t n;        /* codes 0..n-1 are the positive finite values */
	uint32_t over;     /* code past the largest: inf, or the max (saturate) */
	uint32_t sign_bit;
	double *tab;
};

static inline double ref_f16(uint32_t c)
{
	uint32_t e = (c >> 10) & 31, m = c & 1023;

	return e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp(m, -24);
}

static inline double ref_bf16(uint32_t c)
{
	uint32_t e = (c >> 7) & 255, m = c & 127;

	return e ? ldexp(1.0 + m / 128.0, (int)e - 127) : ldexp(m, -133);
}

static inline double ref_e4m3(uint32_t c)
{
	uint32_t e = (c >> 3) & 15, m = c & 7;

	return e ? ldexp(1.0 + m / 8.0, (int)e - 7) : ldexp(m, -9);
}

static struct fmt F16 = { "fp16", 0x7c00, 0x7c00, 0x8000, NULL };
static struct fmt BF16 = { "bf16", 0x7f80, 0x7f80, 0x8000, NULL };
static struct fmt E4M3 = { "e4m3", 0x7f, 0x7e, 0x80, NULL };

static inline void fmt_init(struct fmt *f, double (*dec)(uint32_t))
{
	f->tab = malloc(sizeof(double) * f->n);
	for (uint32_t c = 0; c < f->n; c++)
		f->tab[c] = dec(c);
}

/* Round x to the nearest code, ties to the even code. */
static inline uint32_t ref_round(const struct fmt *f, double x)
{
	uint32_t sign = signbit(x) ? f->sign_bit : 0, lo = 0, hi = f->n - 1;
	double a = fabs(x), top = f->tab[f->n - 1];

	if (a >= top) { /* the next step would be a value of top's ulp */
		double next = top + (top - f->tab[f->n - 2]);

		if (a - top < next - a || (a - top == next - a && (f->n - 1) % 2 == 0))
			return sign | (f->n - 1);
		return sign | f->over;
	}
	while (hi - lo > 1) { /* tab[lo] <= a < tab[hi] */
		uint32_t mid = (lo + hi) / 2;

		if (f->tab[mid] <= a)
			lo = mid;
		else
			hi = mid;
	}
	if (a - f->tab[lo] < f->tab[hi] - a)
		return sign | lo;
	if (a - f->tab[lo] > f->tab[hi] - a)
		return sign | hi;
	return sign | (lo % 2 ? hi : lo);
}

static inline double ref_dec(const struct fmt *f, uint32_t c)
{
	double v = f->tab[c & ~f->sign_bit];

	return c & f->sign_bit ? -v : v;
}

/* kernels_test_begin - seed the inputs (printed) and build the format tables. */
static inline void kernels_test_begin(const char *name)
{
	const char *env = getenv("KVS_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0)
			    : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);

	printf("%s: seed %llu (KVS_TEST_SEED to repeat); cuda %s, %d device(s)\n",
	       name, (unsigned long long)seed, kvs_cuda_built() ? "built" : "not built",
	       kvs_cuda_device_count());
	rng_state = seed;
	fmt_init(&F16, ref_f16);
	fmt_init(&BF16, ref_bf16);
	fmt_init(&E4M3, ref_e4m3);
}

static inline int kernels_test_end(const char *name)
{
	free(F16.tab), free(BF16.tab), free(E4M3.tab);
	return check_summary(name);
}

#endif
