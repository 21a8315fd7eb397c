/*
 * test_kernels_copy.c - the C twins of kernels/' scatter/gather against
 * plain references in higher precision, on fresh random inputs each run
 * (the seed is printed; KVS_TEST_SEED=N repeats a run): every worker dtype
 * x stored dtype x worker layout, pages smaller than and equal to the
 * block, several blocks per call in scrambled slots with scrambled pages;
 * bytes outside the jobs untouched; plain round trips bit exact; quantized
 * blocks (INT8, FP8, INT4: K per channel over token groups, V per token
 * over channel groups, K's widest channels as fp16 codes) against a long
 * double reference of kvs_kv_format.h: block size, each group's scale and
 * zero point, the outlier list, INT |x - dq| <= s/2, fp16 codes to 11 bits,
 * FP8 relative error <= 2^-4 for normal codes; gathers equal to
 * fma(code, s, zero) rounded to the worker dtype; argument errors.
 */
#include "kernels_test.h"

/* ---- scatter / gather ---- */

/* Worker layouts under test: the two named ones, and strided ones. */
enum { L_INNER, L_OUTER, L_CPU, L_HND, L_PADDED, L_COUNT };

struct kcase {
	kvs_dtype w, q;
	int layout;           /* L_* */
	uint32_t L, H, D, pt, bt, nblocks;
	int per_layer;        /* copy one layer per call */
};

/* Element strides (K|V, page, token, head) of a test layout, written out
 * independently of kvs_kv_strides(). */
static void ref_strides(const struct kcase *k, uint32_t npages, int64_t s[4])
{
	int64_t D = k->D, T = k->pt, H = k->H;

	switch (k->layout) {
	case L_INNER: /* [pages][2][T][H][D] */
		s[0] = T * H * D, s[1] = 2 * T * H * D, s[2] = H * D, s[3] = D;
		break;
	case L_OUTER: /* [2][pages][T][H][D] */
		s[0] = npages * T * H * D, s[1] = T * H * D, s[2] = H * D, s[3] = D;
		break;
	case L_CPU: /* vLLM CPU: [pages][H][T][2D] seen as [pages][H][2][T][D] */
		s[0] = T * D, s[1] = H * 2 * T * D, s[2] = D, s[3] = 2 * T * D;
		break;
	case L_HND: /* [2][pages][H][T][D] */
		s[0] = npages * H * T * D, s[1] = H * T * D, s[2] = D, s[3] = T * D;
		break;
	default: /* [pages][2][T][H][D + 3], rows padded */
		s[0] = T * H * (D + 3), s[1] = 2 * T * H * (D + 3),
		s[2] = H * (D + 3), s[3] = D + 3;
		break;
	}
}

static size_t ref_off(const int64_t s[4], uint32_t kv, size_t page, uint32_t t,
		      uint32_t h)
{
	return (size_t)(kv * s[0] + (int64_t)page * s[1] + t * s[2] + h * s[3]);
}

static double wval(kvs_dtype d, const uint8_t *p) /* independent decode */
{
	uint16_t h;
	float f;

	if (d == KVS_DTYPE_FP32) {
		memcpy(&f, p, 4);
		return f;
	}
	memcpy(&h, p, 2);
	return ref_dec(d == KVS_DTYPE_FP16 ? &F16 : &BF16, h);
}

static size_t wsize(kvs_dtype d) { return d == KVS_DTYPE_FP32 ? 4 : 2; }

static void fill_layer(kvs_dtype d, uint8_t *p, size_t rows, uint32_t D)
{
	for (size_t r = 0; r < rows; r++) {
		double mag = rnd() % 10 == 0 ? 0.0 : pow(10.0, 5.0 * unif() - 3.0);
		uint32_t spike = (uint32_t)(rnd() % (D * 4)); /* 1 in 4 rows */

		for (uint32_t e = 0; e < D; e++) {
			float x = (float)(gauss() * mag * (e == spike ? 50.0 : 1.0));
			uint8_t *q = p + (r * D + e) * wsize(d);

			if (d == KVS_DTYPE_FP32) {
				memcpy(q, &x, 4);
			} else {
				uint16_t h = (uint16_t)ref_round(d == KVS_DTYPE_FP16 ? &F16 : &BF16, x);
				memcpy(q, &h, 2);
			}
		}
	}
}

static int all_bytes(const uint8_t *p, size_t n, uint8_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

/* One value of a quantized group: its bound against x, and the gather. */
static void check_val(const struct kcase *k, double qmax, float s, float z,
		      double x, uint32_t code, int out16, uint16_t y16,
		      double g, int *bad_data, int *bad_bound, int *bad_gather)
{
	int fp8 = k->q == KVS_DTYPE_FP8_E4M3;
	double v, dq, want;

	if (out16) { /* an fp16 code: y = (x - z) / s to 11 bits */
		*bad_data += code != 0;
		v = ref_dec(&F16, y16);
		dq = v * s + z;
		*bad_bound += fabs(x - dq) > s * qmax * 0x1p-11 * (1 + 0x1p-10) +
					      0x1p-22 * (fabs(x) + fabs(z));
	} else if (fp8) {
		v = ref_dec(&E4M3, code);
		dq = v * s;
		*bad_bound += (code & 0x7f) == 0x7f || z != 0.0f ||
			      fabs(dq) > 448.0 * s * (1 + 0x1p-20);
		if (fabs(x) >= 0x1p-6 * s)
			*bad_bound += fabs(x - dq) > 0x1p-4 * fabs(x) * (1 + 0x1p-18);
		else
			*bad_bound += fabs(x - dq) > 0x1p-10 * s * (1 + 0x1p-10);
	} else {
		v = code;
		dq = v * s + z;
		*bad_bound += code > qmax ||
			      fabs(x - dq) > s * (0.5 + qmax * 0x1p-21) +
					     0x1p-22 * (fabs(x) + fabs(z));
	}
	/* The gather: fma(v, s, z) rounded once to fp32, then to the worker. */
	want = (float)((long double)v * s + z);
	if (k->w != KVS_DTYPE_FP32)
		want = ref_dec(k->w == KVS_DTYPE_FP16 ? &F16 : &BF16,
			       ref_round(k->w == KVS_DTYPE_FP16 ? &F16 : &BF16, want));
	*bad_gather += g != want;
}

/* A group's scale and zero point against its span (x[0], x[step], ...). */
static int check_par(const struct kcase *k, double qmax, const double *x,
		     uint32_t n, size_t step, float s, float z)
{
	double lo = INFINITY, hi = -INFINITY, want_s, want_z;

	for (uint32_t i = 0; i < n; i++) {
		lo = fmin(lo, x[i * step]);
		hi = fmax(hi, x[i * step]);
	}
	if (k->q == KVS_DTYPE_FP8_E4M3) {
		want_z = 0.0;
		want_s = fmax(-lo, hi) / qmax;
	} else {
		want_z = lo;
		want_s = (hi - lo) / qmax;
	}
	return z != want_z ||
	       fabs(s - want_s) > 0x1p-22 * (fabs(hi) + fabs(lo)) / qmax;
}

/* One quantized block under check: its format, the values of one (layer,
 * head, K|V) in and out, and the counts of what failed. */
struct qcheck {
	const struct kcase *k;
	const uint8_t *blk;
	kvs_kv_format f;
	double qmax;
	double *x, *g;  /* bt x D values written, and gathered back */
	int32_t *slot;  /* the outlier slot of each channel, or -1 */
	int *bad_data, *bad_scale, *bad_bound, *bad_gather;
};

/* The values of (layer l, head h, K|V kv) of block j, in and out. */
static void quant_load(struct qcheck *c, void *const *src, void *const *dst,
		       const int64_t st[4], const int32_t *ids, uint32_t j,
		       uint32_t l, uint32_t h, uint32_t kv)
{
	const struct kcase *k = c->k;
	size_t w = wsize(k->w);
	uint32_t ppb = k->bt / k->pt, D = k->D, bt = k->bt;

	for (uint32_t t = 0; t < bt; t++) {
		size_t wo = ref_off(st, kv, (size_t)ids[j * ppb + t / k->pt],
				    t % k->pt, h) * w;

		for (uint32_t d = 0; d < D; d++) {
			c->x[t * D + d] = wval(k->w, (uint8_t *)src[l] + wo + d * w);
			c->g[t * D + d] = wval(k->w, (uint8_t *)dst[l] + wo + d * w);
		}
	}
}

/* K's outliers of (l, h): distinct, and the widest channels. */
static void quant_outliers(struct qcheck *c, uint32_t l, uint32_t h)
{
	uint32_t D = c->k->D, bt = c->k->bt;
	double wmin = INFINITY, wmax = 0.0;

	for (uint32_t o = 0; o < c->f.nout; o++) {
		uint16_t d;

		memcpy(&d, c->blk + kvs_kv_fmt_oidx(&c->f, l, h, o), 2);
		if (d >= D || c->slot[d] >= 0) {
			(*c->bad_data)++;
			continue;
		}
		c->slot[d] = (int32_t)o;
	}
	for (uint32_t d = 0; d < D; d++) {
		double lo = INFINITY, hi = -INFINITY;

		for (uint32_t t = 0; t < bt; t++) {
			lo = fmin(lo, c->x[t * D + d]);
			hi = fmax(hi, c->x[t * D + d]);
		}
		if (c->slot[d] >= 0)
			wmin = fmin(wmin, hi - lo);
		else
			wmax = fmax(wmax, hi - lo);
	}
	*c->bad_data += c->f.nout < D && wmin < wmax * (1 - 0x1p-20);
}

/* The rows of (l, h, kv): each group's scale and zero point, each code. */
static void quant_rows(struct qcheck *c, uint32_t l, uint32_t h, uint32_t kv)
{
	const struct kcase *k = c->k;
	const kvs_kv_format *f = &c->f;
	const uint8_t *blk = c->blk;
	uint32_t D = k->D, bt = k->bt;
	double qmax = c->qmax, *x = c->x;
	int32_t *slot = c->slot;
	float s, z;

	for (uint32_t t = 0; t < bt; t++) {
		const uint8_t *row = blk + kvs_kv_fmt_row(f, l, kv, t, h);

		for (uint32_t d = 0; d < D; d++) {
			uint32_t code = k->q == KVS_DTYPE_INT4 ?
					(row[d / 2] >> (4 * (d % 2))) & 15u : row[d];
			uint16_t y16 = 0;
			const uint8_t *par;

			if (kv == 0)
				par = blk + kvs_kv_fmt_kpar(f, l, t / f->kgroup, h, d);
			else
				par = blk + kvs_kv_fmt_vpar(f, l, t, h, d / f->vgroup);
			memcpy(&s, par, 4);
			memcpy(&z, par + 4, 4);
			if (kv == 0 && t % f->kgroup == 0)
				*c->bad_scale += check_par(k, qmax, x + t * D + d,
							   bt - t < f->kgroup ? bt - t : f->kgroup,
							   D, s, z);
			if (kv == 1 && d % f->vgroup == 0)
				*c->bad_scale += check_par(k, qmax, x + t * D + d,
							   D - d < f->vgroup ? D - d : f->vgroup,
							   1, s, z);
			if (slot[d] >= 0)
				memcpy(&y16, blk + kvs_kv_fmt_oval(f, l, h, (uint32_t)slot[d], t), 2);
			check_val(k, qmax, s, z, x[t * D + d], code, slot[d] >= 0,
				  y16, c->g[t * D + d], c->bad_data, c->bad_bound,
				  c->bad_gather);
		}
		/* INT4 pads an odd row with a zero nibble. */
		if (k->q == KVS_DTYPE_INT4 && D % 2)
			*c->bad_data += (row[D / 2] >> 4) != 0;
	}
}

/* Block j of a quantized case, every layer and head, against a reference
 * of kvs_kv_format.h in long double. */
static void check_quant(const struct kcase *k, const uint8_t *blk,
			void *const *src, void *const *dst, const int64_t st[4],
			const int32_t *ids, uint32_t j, int *bad_data,
			int *bad_scale, int *bad_bound, int *bad_gather)
{
	uint32_t D = k->D, bt = k->bt;
	struct qcheck c = {
		.k = k, .blk = blk,
		.qmax = k->q == KVS_DTYPE_FP8_E4M3 ? 448.0 :
			k->q == KVS_DTYPE_INT4 ? 15.0 : 255.0,
		.bad_data = bad_data, .bad_scale = bad_scale,
		.bad_bound = bad_bound, .bad_gather = bad_gather,
	};

	c.x = malloc(sizeof(double) * bt * D);
	c.g = malloc(sizeof(double) * bt * D);
	c.slot = malloc(sizeof(int32_t) * D);
	CHECK_EQ(kvs_kv_format_init(&c.f, k->L, bt, k->H, D, k->q), 0);
	for (uint32_t l = 0; l < k->L; l++)
	for (uint32_t h = 0; h < k->H; h++)
	for (uint32_t kv = 0; kv < 2; kv++) {
		quant_load(&c, src, dst, st, ids, j, l, h, kv);
		for (uint32_t d = 0; d < D; d++)
			c.slot[d] = -1;
		if (kv == 0)
			quant_outliers(&c, l, h);
		quant_rows(&c, l, h, kv);
	}
	free(c.x);
	free(c.g);
	free(c.slot);
}

/* kvs_kv_block_bytes of a quantized case, from the format's description. */
static uint64_t quant_block_bytes(const struct kcase *k)
{
	uint64_t L = k->L, bt = k->bt, H = k->H, D = k->D;
	uint64_t kg = k->q == KVS_DTYPE_INT4 && bt > 32 ? 32 : bt;
	uint64_t vg = k->q == KVS_DTYPE_INT4 && D > 32 ? 32 : D;
	uint64_t row = k->q == KVS_DTYPE_INT4 ? (D + 1) / 2 : D;
	uint64_t nout = (D + 31) / 32;

	return L * 2 * bt * H * row + L * ((bt + kg - 1) / kg) * H * D * 8 +
	       L * bt * H * ((D + vg - 1) / vg) * 8 + L * H * nout * 2 +
	       L * H * nout * bt * 2;
}

/* One case's worker cache, block arena and what they are checked with. */
struct run {
	const struct kcase *k;
	uint32_t ppb, npages;
	size_t w, q, wrow, layer_bytes;
	void *src[8], *dst[8];
	int32_t *ids;
	uint32_t *slot;
	uint64_t *off, bb, stride;
	uint8_t *arena, *used;
	uint8_t *touched; /* bytes a row of a used page covers */
	kvs_kv_cache c;
	kvs_kv_blocks b;
	int64_t st[4];
};

/* The cache's strides and the block's size, checked against the format. */
static void run_layout(struct run *r)
{
	const struct kcase *k = r->k;
	kvs_layout lay = { .layers = k->L, .kv_heads = k->H, .head_dim = k->D,
			   .block_tokens = k->bt, .dtype = k->q };

	ref_strides(k, r->npages, r->st);
	if (r->c.layout == KVS_KV_STRIDED)
		memcpy(r->c.strides, r->st, sizeof(r->st));
	r->layer_bytes = (ref_off(r->st, 1, r->npages - 1, k->pt - 1, k->H - 1) +
			  k->D) * r->w;
	r->touched = calloc(r->layer_bytes, 1);

	r->b.count = k->nblocks;
	r->b.block_tokens = k->bt;
	r->b.dtype = k->q;
	r->bb = kvs_kv_block_bytes(&r->c, &r->b);
	CHECK_EQ(r->bb, kvs_layout_block_bytes(&lay));
	if (k->q != k->w)
		CHECK_EQ(r->bb, quant_block_bytes(k));
	else
		CHECK_EQ(r->bb, (uint64_t)k->L * 2 * k->bt * k->H * k->D * r->w);
}

/* The arena with a canary gap after each block, blocks in scrambled slots
 * of scrambled pages; the rows of the used pages marked in touched. */
static void run_scramble(struct run *r)
{
	const struct kcase *k = r->k;

	r->stride = (r->bb + 15) / 16 * 16 + 16;
	r->arena = malloc(r->stride * (k->nblocks + 2));
	memset(r->arena, 0xa5, r->stride * (k->nblocks + 2));
	for (uint32_t i = 0; i < r->npages; i++)
		r->ids[i] = (int32_t)i;
	for (uint32_t i = 0; i < k->nblocks + 2; i++)
		r->slot[i] = i;
	for (uint32_t i = r->npages - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rnd() % (i + 1));
		int32_t t = r->ids[i];
		r->ids[i] = r->ids[j], r->ids[j] = t;
	}
	for (uint32_t i = k->nblocks + 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rnd() % (i + 1)), t = r->slot[i];
		r->slot[i] = r->slot[j], r->slot[j] = t;
	}
	for (uint32_t i = 0; i < k->nblocks; i++)
		r->off[i] = r->slot[i] * r->stride;
	for (uint32_t i = 0; i < k->nblocks * r->ppb; i++)
		r->used[r->ids[i]] = 1;
	for (uint32_t p = 0; p < r->npages; p++)
	for (uint32_t kv = 0; r->used[p] && kv < 2; kv++)
	for (uint32_t t = 0; t < k->pt; t++)
	for (uint32_t h = 0; h < k->H; h++)
		memset(r->touched + ref_off(r->st, kv, p, t, h) * r->w, 1, r->wrow);
}

/* Random source layers, canary-filled destination layers, and the blocks'
 * descriptor pointed at the arena. */
static void run_layers(struct run *r)
{
	const struct kcase *k = r->k;

	for (uint32_t l = 0; l < k->L; l++) {
		r->src[l] = malloc(r->layer_bytes + r->wrow);
		r->dst[l] = malloc(r->layer_bytes);
		fill_layer(k->w, r->src[l], r->layer_bytes / r->wrow + 1, k->D);
		memset(r->dst[l], 0xa5, r->layer_bytes);
	}
	r->b.arena = r->arena;
	r->b.arena_bytes = r->stride * (k->nblocks + 2);
	r->b.offsets = r->off;
	r->b.page_ids = r->ids;
}

/* Scatter src into the arena, then gather it into dst (per layer: in
 * reverse order). */
static void run_copy(struct run *r)
{
	const struct kcase *k = r->k;
	int rc;

	for (uint32_t l = 0; l < (k->per_layer ? k->L : 1); l++) {
		r->b.layer_first = l;
		r->b.layer_count = k->per_layer ? 1 : 0;
		rc = kvs_kv_scatter(&r->c, &r->b);
		CHECK_EQ(rc, 0);
	}
	r->c.layer_ptrs = r->dst;
	for (uint32_t l = 0; l < (k->per_layer ? k->L : 1); l++) {
		r->b.layer_first = k->per_layer ? k->L - 1 - l : 0;
		r->b.layer_count = k->per_layer ? 1 : 0;
		rc = kvs_kv_gather(&r->c, &r->b);
		CHECK_EQ(rc, 0);
	}
}

/* Bytes written outside the jobs: the arena's gaps and free slots, and
 * anything outside the used pages' rows (padding, other pages). */
static int run_canaries(const struct run *r)
{
	const struct kcase *k = r->k;
	uint64_t bb = r->bb, stride = r->stride;
	int bad_canary = 0;

	for (uint32_t i = 0; i < k->nblocks + 2; i++) /* gaps and free slots */
		bad_canary += !all_bytes(r->arena + r->slot[i] * stride + (i < k->nblocks ? bb : 0),
					 stride - (i < k->nblocks ? bb : 0), 0xa5);
	for (uint32_t l = 0; l < k->L; l++)
	for (size_t i = 0; i < r->layer_bytes; i++)
		bad_canary += !r->touched[i] && ((uint8_t *)r->dst[l])[i] != 0xa5;
	return bad_canary;
}

/* A plain case: every row of every block is the source's, in the arena
 * and gathered back. */
static void run_check_plain(const struct run *r, int *bad_data, int *bad_gather)
{
	const struct kcase *k = r->k;

	for (uint32_t j = 0; j < k->nblocks; j++)
	for (uint32_t l = 0; l < k->L; l++)
	for (uint32_t kv = 0; kv < 2; kv++)
	for (uint32_t t = 0; t < k->bt; t++)
	for (uint32_t h = 0; h < k->H; h++) {
		size_t page = (size_t)r->ids[j * r->ppb + t / k->pt];
		size_t wo = ref_off(r->st, kv, page, t % k->pt, h) * r->w;
		const uint8_t *x = (uint8_t *)r->src[l] + wo, *g = (uint8_t *)r->dst[l] + wo;
		size_t row = (((size_t)l * 2 + kv) * k->bt + t) * k->H + h;
		const uint8_t *data = r->arena + r->off[j] + row * k->D * r->q;

		*bad_data += memcmp(data, x, r->wrow) != 0;
		*bad_gather += memcmp(g, x, r->wrow) != 0;
	}
}

static void run_free(struct run *r)
{
	for (uint32_t l = 0; l < r->k->L; l++) {
		free(r->src[l]);
		free(r->dst[l]);
	}
	free(r->ids);
	free(r->slot);
	free(r->off);
	free(r->arena);
	free(r->used);
	free(r->touched);
}

static void run_case(const struct kcase *k)
{
	struct run r = { .k = k };
	int quant = k->q != k->w;
	int bad_data = 0, bad_scale = 0, bad_bound = 0, bad_gather = 0;
	int bad_canary;

	r.ppb = k->bt / k->pt;
	r.npages = k->nblocks * r.ppb + 5;
	r.w = wsize(k->w);
	r.q = k->q == k->w ? r.w : 1;
	r.wrow = (size_t)k->D * r.w;
	r.ids = malloc(sizeof(int32_t) * r.npages);
	r.slot = malloc(sizeof(uint32_t) * (k->nblocks + 2));
	r.off = malloc(sizeof(uint64_t) * k->nblocks);
	r.used = calloc(r.npages, 1);
	r.c = (kvs_kv_cache){ r.src, k->L, r.npages, k->pt, k->H, k->D, k->w,
			      k->layout == L_INNER ? KVS_KV_KV_INNER :
			      k->layout == L_OUTER ? KVS_KV_KV_OUTER : KVS_KV_STRIDED,
			      { 0 } };
	run_layout(&r);
	run_scramble(&r);
	run_layers(&r);
	run_copy(&r);

	bad_canary = run_canaries(&r);
	for (uint32_t j = 0; quant && j < k->nblocks; j++)
		check_quant(k, r.arena + r.off[j], r.src, r.dst, r.st, r.ids, j,
			    &bad_data, &bad_scale, &bad_bound, &bad_gather);
	if (!quant)
		run_check_plain(&r, &bad_data, &bad_gather);
	if (bad_data + bad_scale + bad_bound + bad_gather + bad_canary)
		fprintf(stderr, "case w=%d q=%d layout=%d L=%u H=%u D=%u pt=%u bt=%u "
			"blocks=%u per_layer=%d: data %d scale %d bound %d gather %d "
			"canary %d\n",
			k->w, k->q, k->layout, k->L, k->H, k->D, k->pt, k->bt,
			k->nblocks, k->per_layer, bad_data, bad_scale, bad_bound, bad_gather, bad_canary);
	CHECK_EQ(bad_data, 0);
	CHECK_EQ(bad_scale, 0);
	CHECK_EQ(bad_bound, 0);
	CHECK_EQ(bad_gather, 0);
	CHECK_EQ(bad_canary, 0);
	run_free(&r);
}

static void test_copy(void)
{
	static const kvs_dtype ws[] = { KVS_DTYPE_FP16, KVS_DTYPE_BF16, KVS_DTYPE_FP32 };
	static const struct { uint32_t pt, bt, D; } shapes[] = {
		{ 4, 16, 64 },   /* pages smaller than the block */
		{ 16, 16, 128 }, /* pages equal to the block */
		{ 16, 256, 8 },  /* 16-token pages into a 256-token block */
		{ 2, 6, 12 },    /* head_dim not a multiple of 8 */
		{ 8, 48, 33 },   /* odd head_dim; INT4: a partial K token group
				    and a partial V channel group */
	};

	for (size_t wi = 0; wi < 3; wi++)
	for (int qi = 0; qi < 4; qi++)
	for (int layout = 0; layout < L_COUNT; layout++)
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		struct kcase k = {
			.w = ws[wi],
			.q = qi == 0 ? ws[wi] : qi == 1 ? KVS_DTYPE_INT8 :
			     qi == 2 ? KVS_DTYPE_FP8_E4M3 : KVS_DTYPE_INT4,
			.layout = layout, .L = 1 + (uint32_t)(rnd() % 3),
			.per_layer = (int)(rnd() % 2),
			.H = 1 + (uint32_t)(rnd() % 3), .D = shapes[si].D,
			.pt = shapes[si].pt, .bt = shapes[si].bt,
			.nblocks = 1 + (uint32_t)(rnd() % 4),
		};
		run_case(&k);
	}
}

static void test_copy_errors(void)
{
	static uint8_t layer[2 * 2 * 4 * 8 * 2] __attribute__((aligned(16)));
	static uint8_t arena[4096] __attribute__((aligned(16)));
	void *lp[1] = { layer }, *nullp[1] = { NULL };
	uint64_t off[2] = { 0, 1024 };
	int32_t ids[2] = { 0, 1 };
	const kvs_kv_cache c0 = { lp, 1, 2, 4, 2, 4, KVS_DTYPE_FP16,
				  KVS_KV_KV_INNER, { 0 } };
	const kvs_kv_blocks b0 = { arena, sizeof(arena), off, ids, 2, 4,
				   KVS_DTYPE_FP16, 0, 0 };
	kvs_kv_cache c;
	kvs_kv_blocks b;
	int cuda_none = kvs_cuda_device_count() == 0;

#define EXPECT(err, stmt)                                                    \
	do {                                                                 \
		c = c0, b = b0;                                              \
		off[0] = 0, off[1] = 1024, ids[0] = 0, ids[1] = 1;           \
		stmt;                                                        \
		CHECK_EQ(kvs_kv_scatter(&c, &b), err);                       \
		CHECK_EQ(kvs_kv_gather(&c, &b), err);                        \
		if (cuda_none && (err) == -EINVAL && kvs_kv_copy_check(&c, &b))   \
			CHECK_EQ(kvs_kv_scatter_cuda(&c, &b, NULL), -EINVAL);  \
	} while (0)
	EXPECT(0, (void)0);
	EXPECT(0, (b.count = 0, b.arena = NULL, b.offsets = NULL, b.page_ids = NULL));
	CHECK_EQ(kvs_kv_scatter(NULL, &b0), -EINVAL);
	CHECK_EQ(kvs_kv_gather(&c0, NULL), -EINVAL);
	EXPECT(-EINVAL, c.layer_ptrs = NULL);
	EXPECT(-EINVAL, c.layer_ptrs = nullp);
	EXPECT(-EINVAL, c.layers = 0);
	EXPECT(-EINVAL, c.num_pages = 0);
	EXPECT(-EINVAL, c.page_tokens = 0);
	EXPECT(-EINVAL, c.kv_heads = 0);
	EXPECT(-EINVAL, c.head_dim = 0);
	EXPECT(-EINVAL, b.block_tokens = 0);
	EXPECT(-EINVAL, b.block_tokens = 6);
	EXPECT(-EINVAL, c.dtype = KVS_DTYPE_INT8);
	EXPECT(-EINVAL, c.dtype = (kvs_dtype)0);
	EXPECT(-EINVAL, b.dtype = (kvs_dtype)99);
	EXPECT(-EINVAL, b.dtype = KVS_DTYPE_BF16);
	EXPECT(-EINVAL, c.layout = (kvs_kv_layout)7);
	EXPECT(-EINVAL, b.layer_first = 1);
	EXPECT(-EINVAL, b.layer_count = 2);
	EXPECT(-EINVAL, (b.layer_first = UINT32_MAX, b.layer_count = 2));
	/* KV_INNER's strides, given explicitly; one more page and it would
	 * reach past the layer (the twin trusts num_pages and the strides). */
	EXPECT(0, (c.layout = KVS_KV_STRIDED, c.strides[0] = 32, c.strides[1] = 64,
		   c.strides[2] = 8, c.strides[3] = 4));
	EXPECT(-EINVAL, (c.layout = KVS_KV_STRIDED, c.strides[2] = -1));
	EXPECT(-EINVAL, (c.layout = KVS_KV_STRIDED, c.strides[1] = INT64_MAX / 2));
	EXPECT(-EINVAL, b.arena = NULL);
	EXPECT(-EINVAL, b.offsets = NULL);
	EXPECT(-EINVAL, b.page_ids = NULL);
	EXPECT(-EINVAL, b.arena_bytes = 100);
	EXPECT(-EINVAL, b.arena = arena + 1);
	EXPECT(-EINVAL, (c.num_pages = UINT32_MAX, c.page_tokens = 1u << 16,
			 c.kv_heads = 1u << 16, c.head_dim = 1u << 16));
	EXPECT(-EINVAL, (c.layers = UINT32_MAX, b.block_tokens = 1u << 16,
			 c.page_tokens = 1, c.kv_heads = 1u << 16));
	EXPECT(-EINVAL, off[1] = 1025);
	EXPECT(-ERANGE, ids[1] = 2);
	EXPECT(-ERANGE, ids[1] = -1);
	EXPECT(-ERANGE, off[1] = sizeof(arena) - 100);
	EXPECT(-ERANGE, off[1] = UINT64_MAX);
#undef EXPECT
	/* Nothing is written when a later job is invalid. */
	memset(arena, 0x5a, sizeof(arena));
	ids[1] = 7;
	CHECK_EQ(kvs_kv_scatter(&c0, &b0), -ERANGE);
	CHECK(all_bytes(arena, sizeof(arena), 0x5a));
	if (cuda_none) {
		ids[1] = 1;
		CHECK_EQ(kvs_kv_scatter_cuda(&c0, &b0, NULL), -ENODEV);
		CHECK_EQ(kvs_kv_gather_cuda(&c0, &b0, NULL), -ENODEV);
	}
}

int main(void)
{
	kernels_test_begin("test_kernels_copy");
	test_copy();
	test_copy_errors();
	return kernels_test_end("test_kernels_copy");
}
