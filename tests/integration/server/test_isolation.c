/*
 * test_isolation - layouts that differ in any field never see each other's
 * blocks; the same layout in another process does.
 *
 * A base layout publishes a prompt. For each variant (model, layers, KV heads,
 * head dim, dtype of the same width, salt, adapter, tensor-parallel rank):
 *  - the same tokens hashed in the variant's namespace miss;
 *  - even the base's own hash values miss there, and a reserve of them never
 *    answers EXISTS;
 *  - the variant publishes its own prompt (NEW, its own bytes) and the base's
 *    blocks stay intact.
 * Then another process attaches with each layout (copies of the strings, not
 * the same pointers) and gets that layout's namespace and bytes back.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <stdlib.h>
#include <string.h>

#define BT 16
#define NBLK 4
#define SEED 21

static th_daemon d;

struct variant {
	const char *what;
	kvs_layout l;
};

static struct variant variants[16];
static int nvariants;
static uint32_t ns_ids[16];

static void add_variant(const char *what, kvs_layout l)
{
	variants[nvariants].what = what;
	variants[nvariants].l = l;
	nvariants++;
}

static void make_variants(void)
{
	kvs_layout base = th_layout("iso-model", BT), l;

	add_variant("base", base);
	l = base, l.model = "iso-model-2";
	add_variant("model", l);
	l = base, l.layers = 3;
	add_variant("layers", l);
	l = base, l.kv_heads = 4;
	add_variant("kv_heads", l);
	l = base, l.head_dim = 128;
	add_variant("head_dim", l);
	l = base, l.dtype = KVS_DTYPE_BF16; /* same block bytes as fp16 */
	add_variant("dtype", l);
	l = base, l.salt = "tenant-a";
	add_variant("salt", l);
	l = base, l.salt = "tenant-b";
	add_variant("other salt", l);
	l = base, l.adapter = "lora-1";
	add_variant("adapter", l);
	l = base, l.tp_rank = 1, l.tp_size = 2;
	add_variant("tp_rank 1/2", l);
	l = base, l.tp_rank = 0, l.tp_size = 2;
	add_variant("tp_rank 0/2", l);
}

/* Hash the test prompt with the client's own kvs_hash_tokens. */
static void hash_prompt(kvs_client *c, kvs_hash *h)
{
	uint32_t tok[NBLK * BT];

	th_tokens(tok, NBLK * BT, SEED);
	CHECK_RC(kvs_hash_tokens(c, tok, NBLK * BT, h, NBLK), NBLK);
}

/* Reserve another namespace's hash values: never EXISTS. Returns how many
 * were not NEW (BUSY). */
static int check_not_exists(kvs_client *c, const kvs_hash *h)
{
	kvs_block b[NBLK];
	kvs_lease lease = 0;
	int n = kvs_reserve(c, h, NBLK, &lease, b), other = 0;

	if (!CHECK_GE(n, 0))
		return NBLK;
	for (int i = 0; i < NBLK; i++) {
		CHECK_NE(b[i].status, KVS_BLOCK_EXISTS);
		other += b[i].status != KVS_BLOCK_NEW;
	}
	CHECK_RC(kvs_abort(c, lease), n);
	return other;
}

static void check_isolation(void)
{
	kvs_client *base = th_connect(&d, &variants[0].l);
	kvs_hash hb[NBLK];
	size_t bad;
	int busy = 0;

	hash_prompt(base, hb);
	ns_ids[0] = kvs_namespace_id(base);
	CHECK_RC(th_publish(base, hb, NBLK, NULL), NBLK);

	for (int v = 1; v < nvariants; v++) {
		kvs_client *c = th_connect(&d, &variants[v].l);
		kvs_block b[NBLK];
		kvs_hash hv[NBLK];

		th_note("variant: %s", variants[v].what);
		ns_ids[v] = kvs_namespace_id(c);
		for (int u = 0; u < v; u++)
			CHECK_NE(ns_ids[v], ns_ids[u]);
		CHECK_EQ(kvs_block_bytes(c), kvs_layout_block_bytes(&variants[v].l));
		hash_prompt(c, hv);
		CHECK(memcmp(hv, hb, sizeof(hb)) != 0);
		CHECK_RC(th_probe(c, hv, NBLK), 0);
		/* The base's hash values, asked in this namespace: still a miss,
		 * and a reserve must not report them as EXISTS (that would be
		 * the base's block). Whether it answers NEW or BUSY is the
		 * daemon's choice; a slot it gives is aborted. */
		CHECK_RC(th_probe(c, hb, NBLK), 0);
		busy += check_not_exists(c, hb) > 0;
		/* Its own prompt: all NEW, filled with its own bytes. */
		CHECK_RC(th_publish_salted(c, hv, NBLK, b, (uint64_t)v), NBLK);
		for (int i = 0; i < NBLK; i++)
			CHECK_EQ(b[i].status, KVS_BLOCK_NEW);
		CHECK_RC(th_verify_salted(c, hv, NBLK, &bad, (uint64_t)v), NBLK);
		CHECK_EQ(bad, 0);
		kvs_close(c);
		/* The base's blocks are untouched. */
		CHECK_RC(th_verify(base, hb, NBLK, &bad), NBLK);
		CHECK_EQ(bad, 0);
	}
	if (busy)
		th_note("note: in %d of %d other namespaces, a reserve of the base's hash "
			"values answered BUSY (blocks are keyed by hash alone)",
			busy, nvariants - 1);
	CHECK_EQ(th_stat_get(&d, "namespaces.count"), nvariants);
	CHECK_EQ(th_stat_get(&d, "tier_host.blocks"), nvariants * NBLK);
	kvs_close(base);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* In another process, each layout (rebuilt from copies of its strings) gets
 * its own namespace back, and with it its own blocks. */
static int same_layout_elsewhere(void *arg, int fd)
{
	kvs_hash hb[NBLK];

	(void)arg;
	(void)fd;
	th_chain(&variants[0].l, SEED, NBLK, 0, 0, hb);
	for (int v = 0; v < nvariants; v++) {
		kvs_layout l = variants[v].l;
		char *model = dup_or_null(l.model), *adapter = dup_or_null(l.adapter);
		char *salt = dup_or_null(l.salt);
		kvs_client *c;
		kvs_hash hv[NBLK];
		size_t bad;

		l.model = model;
		l.adapter = adapter;
		l.salt = salt;
		c = th_connect(&d, &l);
		CHECK_EQ(kvs_namespace_id(c), ns_ids[v]);
		hash_prompt(c, hv);
		CHECK_RC(th_verify_salted(c, hv, NBLK, &bad, (uint64_t)v), NBLK);
		CHECK_EQ(bad, 0);
		if (v > 0)
			CHECK_RC(th_probe(c, hb, NBLK), 0);
		kvs_close(c);
		free(model);
		free(adapter);
		free(salt);
	}
	return 0;
}

int main(void)
{
	th_init("test_isolation");
	make_variants();
	th_daemon_up(&d, TH_ARGS("--host-size", "16M"));
	check_isolation();
	CHECK_RC(th_run_child(same_layout_elsewhere, NULL, 20000), 0);
	CHECK_EQ(th_stat_get(&d, "namespaces.count"), nvariants);
	return th_finish();
}
