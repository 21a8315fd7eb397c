/*
 * test_kv_copy - kvs_kv_store / kvs_kv_load through a real daemon: an engine
 * of one paged layout publishes blocks layer by layer, an engine of another
 * layout loads them, and every row it gets is the row the first one wrote
 * (bit exact in a plain namespace, within the quantization bound in an INT8 or INT4
 * one). Then every error path: nothing is written by a call that fails.
 */
#include "harness.h"
#include "harness_client.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LAYERS 3
#define HEADS 3 /* odd on purpose */
#define HDIM 64
#define BT 32
#define NBLOCKS 4

static th_daemon d;

/* An engine's paged cache: every layer a separate tensor. */
struct engine {
	kvs_paged_kind kind;
	kvs_paged_cache pc;
	uint32_t esize;
	void *layer[LAYERS];
	size_t layer_bytes;
};

/* Element offset of (kv, page, token, head) in a layer, from the kind's
 * shape as the header declares it (written out here, not taken from pc). */
static size_t row_at(const struct engine *e, uint32_t kv, uint32_t page,
		     uint32_t t, uint32_t h)
{
	size_t N = e->pc.num_pages, T = e->pc.page_tokens, H = HEADS, D = HDIM;

	switch (e->kind) {
	case KVS_PAGED_NHD:
		return (((kv * N + page) * T + t) * H + h) * D;
	case KVS_PAGED_HND:
		return (((kv * N + page) * H + h) * T + t) * D;
	case KVS_PAGED_CPU: /* [N][H][T][2D] read as [N][H][2][T][D] */
		return (((page * H + h) * 2 + kv) * T + t) * D;
	default: /* KVS_PAGED_NHD_KV_INNER */
		return (((page * 2 + kv) * T + t) * H + h) * D;
	}
}

static void engine_init(struct engine *e, kvs_client *c, kvs_paged_kind kind,
			uint32_t pages, uint32_t pt, kvs_dtype dt, uint64_t seed)
{
	e->kind = kind;
	CHECK_RC(kvs_paged_cache_init(c, kind, pages, pt, dt, &e->pc), 0);
	e->esize = dt == KVS_DTYPE_FP32 ? 4 : 2;
	e->layer_bytes = (size_t)pages * 2 * pt * HEADS * HDIM * e->esize;
	for (int l = 0; l < LAYERS; l++) {
		e->layer[l] = malloc(e->layer_bytes);
		if (dt == KVS_DTYPE_FP32) {
			float *f = e->layer[l];

			srand((unsigned)(seed * 7 + l));
			for (size_t i = 0; i < e->layer_bytes / 4; i++)
				f[i] = (float)((rand() % 20001) - 10000) / 997.0f;
		} else {
			th_pattern_fill(e->layer[l], e->layer_bytes,
					(kvs_hash){ seed, (uint64_t)l }, 5);
		}
	}
}

static void engine_free(struct engine *e)
{
	for (int l = 0; l < LAYERS; l++)
		free(e->layer[l]);
}

/* Rows of block i (token t) are in page ids[i * ppb + t / pt]. */
static const uint8_t *row_ptr(const struct engine *e, int l, const int32_t *ids,
			      uint32_t i, uint32_t kv, uint32_t t, uint32_t h)
{
	uint32_t pt = e->pc.page_tokens, ppb = BT / pt;

	return (const uint8_t *)e->layer[l] +
	       row_at(e, kv, (uint32_t)ids[i * ppb + t / pt], t % pt, h) * e->esize;
}

/* Rows of @n blocks that differ between two engines (bit for bit), or,
 * with @tol, by more than tol * the absmax of the row's (block, layer,
 * K|V, head) over the block's tokens (fp32 only): K is quantized per
 * channel over the block's tokens, V per token. */
static long rows_differ(const struct engine *a, const int32_t *ida,
			const struct engine *b, const int32_t *idb, uint32_t n,
			double tol)
{
	long bad = 0;

	for (int l = 0; l < LAYERS; l++)
	for (uint32_t i = 0; i < n; i++)
	for (uint32_t kv = 0; kv < 2; kv++)
	for (uint32_t h = 0; h < HEADS; h++) {
	double amax = 0;

	for (uint32_t t = 0; tol != 0 && t < BT; t++)
		for (int k = 0; k < HDIM; k++)
			amax = fmax(amax, fabs(((const float *)row_ptr(a, l, ida, i,
								       kv, t, h))[k]));
	for (uint32_t t = 0; t < BT; t++) {
		const uint8_t *x = row_ptr(a, l, ida, i, kv, t, h);
		const uint8_t *y = row_ptr(b, l, idb, i, kv, t, h);

		if (tol == 0) {
			bad += memcmp(x, y, HDIM * a->esize) != 0;
			continue;
		}
		const float *fx = (const float *)x, *fy = (const float *)y;
		double err = 0;

		for (int k = 0; k < HDIM; k++)
			err = fmax(err, fabs(fx[k] - fy[k]));
		bad += err > tol * amax + 1e-30;
	}
	}
	return bad;
}

static void shuffled_ids(int32_t *ids, uint32_t n, uint32_t pages, uint64_t seed)
{
	srand((unsigned)seed);
	for (uint32_t i = 0; i < pages; i++)
		ids[i] = (int32_t)i;
	for (uint32_t i = pages - 1; i > 0; i--) {
		uint32_t j = (uint32_t)rand() % (i + 1);
		int32_t t = ids[i];

		ids[i] = ids[j], ids[j] = t;
	}
	(void)n;
}

/* Writer of kind @wk (pages of @wpt tokens) publishes a chain; a second
 * connection of kind @rk (pages of @rpt) loads it, layers in reverse order. */
static void share_case(kvs_dtype ns_dtype, kvs_dtype eng_dtype,
		       kvs_paged_kind wk, uint32_t wpt, kvs_paged_kind rk,
		       uint32_t rpt, uint64_t seed)
{
	kvs_layout L = th_layout("kv-copy", BT);
	kvs_client *w, *r;
	struct engine ew, er;
	uint32_t wpages = NBLOCKS * (BT / wpt) + 3, rpages = NBLOCKS * (BT / rpt) + 5;
	int32_t wids[64], rids[64];
	kvs_hash h[NBLOCKS];
	kvs_block blocks[NBLOCKS];
	kvs_lease lease;

	L.layers = LAYERS;
	L.kv_heads = HEADS;
	L.head_dim = HDIM;
	L.dtype = ns_dtype;
	L.salt = ns_dtype == KVS_DTYPE_INT8 ? "int8" :
		 ns_dtype == KVS_DTYPE_INT4 ? "int4" : "plain";
	w = th_connect(&d, &L);
	r = th_connect(&d, &L);
	th_chain(&L, seed, NBLOCKS, 0, 0, h);
	engine_init(&ew, w, wk, wpages, wpt, eng_dtype, seed);
	engine_init(&er, r, rk, rpages, rpt, eng_dtype, seed + 100);
	shuffled_ids(wids, NBLOCKS, wpages, seed);
	shuffled_ids(rids, NBLOCKS, rpages, seed + 1);

	CHECK_RC(kvs_reserve(w, h, NBLOCKS, &lease, blocks), NBLOCKS);
	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK_RC(kvs_kv_store(w, &ew.pc, l, ew.layer[l], blocks, wids,
				      NBLOCKS, NULL), 0);
	CHECK_RC(kvs_commit(w, lease), NBLOCKS);

	CHECK_RC(kvs_lookup(r, h, NBLOCKS, &lease, blocks), NBLOCKS);
	for (uint32_t l = LAYERS; l-- > 0;)
		CHECK_RC(kvs_kv_load(r, &er.pc, l, er.layer[l], blocks, rids,
				     NBLOCKS, NULL), 0);
	CHECK_RC(kvs_release(r, lease), 0);
	/* |x - dq| <= s / 2 with s = (group range) / qmax <= 2 * absmax / qmax
	 * (qmax 255 for INT8, 15 for INT4), plus rounding. */
	if (!CHECK_EQ(rows_differ(&ew, wids, &er, rids, NBLOCKS,
				  ns_dtype == KVS_DTYPE_INT8 ? 1.0 / 255 * 1.001 :
				  ns_dtype == KVS_DTYPE_INT4 ? 1.0 / 15 * 1.001 : 0), 0))
		th_note("writer kind %d pt %u -> reader kind %d pt %u", wk, wpt,
			rk, rpt);
	engine_free(&ew);
	engine_free(&er);
	kvs_close(w);
	kvs_close(r);
}

static void errors(void)
{
	kvs_layout L = th_layout("kv-copy-errors", BT);
	kvs_client *c, *ctl;
	struct engine e;
	kvs_paged_cache pc;
	int32_t ids[4] = { 0, 1, 2, 3 };
	kvs_hash h[2];
	kvs_block nb[2], hb[2];
	kvs_lease wl, rl;
	uint8_t *copy;

	L.layers = LAYERS;
	L.kv_heads = HEADS;
	L.head_dim = HDIM;
	c = th_connect(&d, &L);
	ctl = th_connect(&d, NULL);
	engine_init(&e, c, KVS_PAGED_NHD, 4, 16, KVS_DTYPE_FP16, 77);
	th_chain(&L, 77, 2, 0, 0, h);
	CHECK_RC(kvs_reserve(c, h, 1, &wl, nb), 1);

	CHECK_RC(kvs_paged_cache_init(ctl, KVS_PAGED_NHD, 4, 16, KVS_DTYPE_FP16, &pc),
		 KVS_E_NOTATTACHED);
	CHECK_RC(kvs_paged_cache_init(c, (kvs_paged_kind)9, 4, 16, KVS_DTYPE_FP16, &pc),
		 -EINVAL);
	CHECK_RC(kvs_paged_cache_init(c, KVS_PAGED_NHD, 4, 16, KVS_DTYPE_INT8, &pc),
		 -EINVAL);
	CHECK_RC(kvs_paged_cache_init(c, KVS_PAGED_NHD, 0, 16, KVS_DTYPE_FP16, &pc),
		 -EINVAL);
	CHECK_RC(kvs_kv_store(ctl, &e.pc, 0, e.layer[0], nb, ids, 1, NULL),
		 KVS_E_NOTATTACHED);
	CHECK_RC(kvs_kv_store(c, &e.pc, LAYERS, e.layer[0], nb, ids, 1, NULL), -EINVAL);
	CHECK_RC(kvs_kv_store(c, NULL, 0, e.layer[0], nb, ids, 1, NULL), -EINVAL);
	CHECK_RC(kvs_kv_store(c, &e.pc, 0, NULL, nb, ids, 1, NULL), -EINVAL);
	CHECK_RC(kvs_kv_store(c, &e.pc, 0, e.layer[0], NULL, ids, 1, NULL), -EINVAL);
	CHECK_RC(kvs_kv_store(c, &e.pc, 0, e.layer[0], nb, ids, 0, NULL), 0);
	pc = e.pc;
	pc.page_tokens = 12; /* does not divide the block */
	CHECK_RC(kvs_kv_store(c, &pc, 0, e.layer[0], nb, ids, 1, NULL), -EINVAL);
	pc = e.pc;
	pc.dtype = KVS_DTYPE_FP32; /* plain namespace of another dtype */
	CHECK_RC(kvs_kv_store(c, &pc, 0, e.layer[0], nb, ids, 1, NULL), -EINVAL);
	pc = e.pc;
	pc.stride_token = -1;
	CHECK_RC(kvs_kv_store(c, &pc, 0, e.layer[0], nb, ids, 1, NULL), -EINVAL);
	pc = e.pc;
	pc.on_device = 1;
	CHECK_RC(kvs_kv_store(c, &pc, 0, e.layer[0], nb, ids, 1, NULL), -ENODEV);

	/* A page id out of range or a block beyond the arena writes nothing. */
	copy = malloc(kvs_block_bytes(c));
	memcpy(copy, kvs_block_ptr(c, &nb[0]), kvs_block_bytes(c));
	ids[1] = 4;
	CHECK_RC(kvs_kv_store(c, &e.pc, 0, e.layer[0], nb, ids, 1, NULL), -ERANGE);
	ids[1] = -1;
	CHECK_RC(kvs_kv_store(c, &e.pc, 0, e.layer[0], nb, ids, 1, NULL), -ERANGE);
	ids[1] = 1;
	hb[0] = nb[0];
	hb[0].offset = UINT64_MAX - 10;
	CHECK_RC(kvs_kv_store(c, &e.pc, 0, e.layer[0], hb, ids, 1, NULL), -ERANGE);
	CHECK(memcmp(copy, kvs_block_ptr(c, &nb[0]), kvs_block_bytes(c)) == 0);
	hb[0] = nb[0];
	hb[0].tier = KVS_TIER_GPU; /* not mapped, and not the host's */
	CHECK_RC(kvs_kv_store(c, &e.pc, 0, e.layer[0], hb, ids, 1, NULL), -EINVAL);
	/* A NEW block cannot be loaded from, a hit cannot be stored into. */
	CHECK_RC(kvs_kv_load(c, &e.pc, 0, e.layer[0], nb, ids, 1, NULL), -EINVAL);
	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK_RC(kvs_kv_store(c, &e.pc, l, e.layer[l], nb, ids, 1, NULL), 0);
	CHECK_RC(kvs_commit(c, wl), 1);
	CHECK_RC(kvs_lookup(c, h, 2, &rl, hb), 1);
	CHECK_RC(kvs_kv_store(c, &e.pc, 0, e.layer[0], hb, ids, 1, NULL), -EINVAL);
	CHECK_RC(kvs_kv_load(c, &e.pc, 0, e.layer[0], hb, ids, 1, NULL), 0);
	CHECK_RC(kvs_release(c, rl), 0);
	CHECK_EQ(kvs_version(), (KVSHARE_VERSION_MAJOR << 16) | KVSHARE_VERSION_MINOR);
	free(copy);
	engine_free(&e);
	kvs_close(c);
	kvs_close(ctl);
}

/* kvs_report: an engine's counts land in the daemon's "engines" stats,
 * added up, saturating; a control-only client may report too. */
static void report(void)
{
	kvs_layout L = th_layout("kv-copy-report", BT);
	kvs_client *c = th_connect(&d, &L), *ctl = th_connect(&d, NULL);
	kvs_engine_report r = { 288, 9, 1179648, 1500, 1, 9, 700, 2 };
	kvs_engine_report huge = { .hit_tokens = UINT64_MAX };

	CHECK_RC(kvs_report(c, &r), 0);
	CHECK_RC(kvs_report(ctl, &r), 0);
	CHECK_RC(kvs_report(c, NULL), -EINVAL);
	CHECK_EQ(th_stat_get(&d, "engines.hit_tokens"), 576);
	CHECK_EQ(th_stat_get(&d, "engines.loaded_blocks"), 18);
	CHECK_EQ(th_stat_get(&d, "engines.loaded_bytes"), 2359296);
	CHECK_EQ(th_stat_get(&d, "engines.load_us"), 3000);
	CHECK_EQ(th_stat_get(&d, "engines.load_errors"), 2);
	CHECK_EQ(th_stat_get(&d, "engines.published_blocks"), 18);
	CHECK_EQ(th_stat_get(&d, "engines.publish_us"), 1400);
	CHECK_EQ(th_stat_get(&d, "engines.skipped_blocks"), 4);
	CHECK_EQ(th_stat_get(&d, "ops.report"), 2);
	CHECK_RC(kvs_report(c, &huge), 0);
	CHECK_RC(kvs_report(c, &huge), 0);
	CHECK_EQ(th_stat_get(&d, "engines.hit_tokens"), INT64_MAX);
	kvs_close(c);
	kvs_close(ctl);
}

int main(void)
{
	static const kvs_paged_kind kinds[] = { KVS_PAGED_NHD, KVS_PAGED_HND,
						KVS_PAGED_CPU,
						KVS_PAGED_NHD_KV_INNER };
	uint64_t seed = 1;

	th_init("test_kv_copy");
	th_daemon_up(&d, TH_ARGS("--host-size", "64M"));
	/* Every writer kind to every reader kind, pages smaller than and equal
	 * to the block on either side. */
	for (int a = 0; a < 4; a++)
		for (int b = 0; b < 4; b++)
			share_case(KVS_DTYPE_FP16, KVS_DTYPE_FP16, kinds[a],
				   a % 2 ? 16 : 32, kinds[b], b % 2 ? 32 : 16,
				   seed++);
	share_case(KVS_DTYPE_BF16, KVS_DTYPE_BF16, KVS_PAGED_CPU, 32,
		   KVS_PAGED_NHD, 16, seed++);
	share_case(KVS_DTYPE_INT8, KVS_DTYPE_FP32, KVS_PAGED_CPU, 16,
		   KVS_PAGED_HND, 32, seed++);
	share_case(KVS_DTYPE_INT8, KVS_DTYPE_FP32, KVS_PAGED_NHD, 32,
		   KVS_PAGED_CPU, 32, seed++);
	share_case(KVS_DTYPE_INT4, KVS_DTYPE_FP32, KVS_PAGED_HND, 16,
		   KVS_PAGED_NHD, 32, seed++);
	errors();
	report();
	return th_finish();
}
