/*
 * test_cache - blocks, namespaces, leases and eviction (service/cache/cache.c)
 * without a socket: reserve/commit/lookup semantics, namespace isolation,
 * leaf-first LRU eviction, pins, aborts, lease errors and limits, the flat
 * "lru" policy's ghosts, and arenas per tenant. The randomized runs:
 * test_cache_random.
 */
#include "cache_test.h"


static void test_basic(void)
{
	kvs_cache *c = mk_cache(16 * PAGE, 64);
	kvs_layout l = layout("m", NULL, 64);
	kvs_owner *o = attach(c, &l);
	kvs_block b[64];
	uint64_t lease, rl;
	chain ch;

	mk_chain(&ch, &l, 1, 4);
	CHECK_EQ(kvs_cache_reserve(c, o, H(&ch, 0), 4, &lease, b), 4);
	CHECK(lease != 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(b[i].status, KVS_BLOCK_NEW);
	CHECK_EQ(hits(c, o, &ch, 0, 4), 0); /* invisible until commit */
	CHECK_EQ(kvs_cache_commit(c, o, lease), 4);
	CHECK_EQ(kvs_cache_commit(c, o, lease), KVS_E_NOLEASE); /* ended */
	CHECK_EQ(kvs_cache_lookup(c, o, H(&ch, 0), 4, &rl, b), 4);
	/* The ended lease's slot is the read lease's now: the old id, an older
	 * generation of the same slot, stays dead. */
	CHECK_EQ((uint32_t)rl, (uint32_t)lease);
	CHECK(rl != lease);
	CHECK_EQ(kvs_cache_release(c, o, lease), KVS_E_NOLEASE);
	CHECK_EQ(b[3].status, KVS_BLOCK_HIT);
	CHECK_EQ(b[0].tier, KVS_TIER_HOST);
	CHECK_EQ(kvs_cache_commit(c, o, rl), KVS_E_LEASEKIND);
	CHECK_EQ(kvs_cache_abort(c, o, rl), KVS_E_LEASEKIND);
	CHECK_EQ(kvs_cache_release(c, o, rl), 4);
	CHECK_EQ(kvs_cache_reserve(c, o, H(&ch, 0), 4, &lease, b), 0);
	CHECK_EQ(lease, 0);
	CHECK_EQ(b[2].status, KVS_BLOCK_EXISTS);
	CHECK_EQ(kvs_cache_release(c, o, 12345), KVS_E_NOLEASE);
	CHECK_EQ(stats.blocks_committed, 4);
	CHECK_EQ(stats.blocks_lookup_hit, 4);
	CHECK(kvs_cache_check(c) == 0);
	kvs_cache_owner_free(c, o);
	kvs_cache_destroy(c);
}

static void test_isolation_and_layouts(void)
{
	kvs_cache *c = mk_cache(16 * PAGE, 64);
	kvs_layout a = layout("m", NULL, 64), salted = layout("m", "tenant-b", 64);
	kvs_layout other = layout("m2", NULL, 64), bad = a, huge = layout("m", NULL, 4096);
	kvs_owner *oa = attach(c, &a), *ob = attach(c, &salted);
	kvs_owner *o3 = kvs_cache_owner_new(c);
	kvs_ns_desc h;
	uint32_t ns;
	uint64_t bb;
	chain ca, cb;

	mk_chain(&ca, &a, 7, 3);
	mk_chain(&cb, &salted, 7, 3); /* same tokens, other salt */
	CHECK(memcmp(ca.h, cb.h, sizeof(kvs_hash)) != 0);
	CHECK_EQ(publish(c, oa, &ca), 3);
	CHECK_EQ(hits(c, ob, &cb, 0, 3), 0);
	/* Even presenting the other tenant's exact hashes finds nothing. */
	CHECK_EQ(hits(c, ob, &ca, 0, 3), 0);
	/* Nor hash values made so that, in ob's namespace (2), the table key
	 * is that of oa's block (namespace 1): a client may send any value,
	 * and the key only mixes the namespace in (its own inverse). */
	{
		chain cx = { .n = 1 };

		cx.h[0] = cache_ns_key(2, cache_ns_key(1, ca.h[0]));
		CHECK_EQ(hits(c, ob, &cx, 0, 1), 0);
		CHECK_EQ(hits(c, oa, &ca, 0, 1), 1);
	}
	CHECK_EQ(hits(c, oa, &ca, 0, 3), 3);
	/* Re-attaching with another layout is refused; the same is fine. */
	h = desc_of(&other);
	CHECK_EQ(kvs_cache_attach(c, oa, &h, 0, &ns, &bb), KVS_E_ATTACHED);
	h = desc_of(&a);
	CHECK_EQ(kvs_cache_attach(c, oa, &h, 0, &ns, &bb), 0);
	bad.layers = 0;
	h = desc_of(&bad);
	CHECK_EQ(kvs_cache_attach(c, o3, &h, 0, &ns, &bb), KVS_E_LAYOUT);
	bad = a;
	bad.tp_rank = 1; /* of tp_size 1 */
	h = desc_of(&bad);
	CHECK_EQ(kvs_cache_attach(c, o3, &h, 0, &ns, &bb), KVS_E_LAYOUT);
	h = desc_of(&huge); /* 4 MiB block, 1 MiB arena */
	CHECK_EQ(kvs_cache_attach(c, o3, &h, 0, &ns, &bb), KVS_E_LAYOUT);
	CHECK_EQ(kvs_cache_lookup(c, o3, H(&ca, 0), 3, &bb, NULL), KVS_E_NOTATTACHED);
	CHECK(stats.errors_layout >= 4);
	kvs_cache_owner_free(c, oa);
	kvs_cache_owner_free(c, ob);
	kvs_cache_owner_free(c, o3);
	kvs_cache_destroy(c);
}

static void test_leaf_first_lru(void)
{
	/* 8 slots of 64 KiB. */
	kvs_cache *c = mk_cache(8 * PAGE, 64);
	kvs_layout l = layout("m", NULL, 64);
	kvs_owner *o = attach(c, &l);
	chain a, b, n1, n2;

	mk_chain(&a, &l, 1, 4);
	mk_chain(&b, &l, 2, 4);
	mk_chain(&n1, &l, 3, 1);
	mk_chain(&n2, &l, 4, 2);
	CHECK_EQ(publish(c, o, &a), 4);
	CHECK_EQ(publish(c, o, &b), 4);
	/* A's root is the least recently used block, but it is not a leaf:
	 * A's tail goes first. */
	CHECK_EQ(publish(c, o, &n1), 1);
	CHECK_EQ(stats.blocks_evicted, 1);
	CHECK_EQ(hits(c, o, &a, 0, 4), 3);
	CHECK_EQ(hits(c, o, &a, 3, 1), 0);
	CHECK_EQ(hits(c, o, &b, 0, 4), 4);
	/* Leaves now, oldest first: N1 (committed, never read), B's tail, A's
	 * tail (A read last). Two new blocks take N1 and B's tail. */
	CHECK_EQ(hits(c, o, &a, 0, 3), 3);
	CHECK_EQ(publish(c, o, &n2), 2);
	CHECK_EQ(hits(c, o, &n1, 0, 1), 0);
	CHECK_EQ(hits(c, o, &a, 0, 4), 3);
	CHECK_EQ(hits(c, o, &b, 0, 4), 3);
	CHECK_EQ(hits(c, o, &b, 3, 1), 0);
	CHECK_EQ(stats.blocks_evicted, 3);
	CHECK(kvs_cache_check(c) == 0);
	kvs_cache_owner_free(c, o);
	kvs_cache_destroy(c);
}

/* What a worker uid's leases hold is budgeted in slabs (a slab is one block
 * here): with a share of 50% of 8 slabs, its reserve gets 4 slots and its
 * lookups pin 4 slabs, on any number of connections; another uid has a
 * share of its own; an operator is not budgeted. */
static void test_pinned_share(void)
{
	kvs_layout l = layout("m", NULL, 64);
	kvs_owner *w, *w2, *x, *op;
	kvs_block bl[64];
	uint64_t lw, lr, lx;
	kvs_cache *c;
	chain a;

	pinned_share = 50;
	c = mk_cache(8 * PAGE, 64);
	pinned_share = 0;
	w = attach(c, &l);
	w2 = attach(c, &l);
	x = attach(c, &l);
	op = attach(c, &l);
	kvs_cache_owner_set_uid(w, 1000);
	kvs_cache_owner_set_uid(w2, 1000);
	kvs_cache_owner_set_uid(x, 1001);
	kvs_cache_owner_set_uid(op, 0);
	kvs_cache_owner_set_operator(op, 1);
	mk_chain(&a, &l, 1, 8);
	CHECK_EQ(kvs_cache_reserve(c, w, H(&a, 0), 8, &lw, bl), 4);
	CHECK_EQ(bl[4].status, KVS_BLOCK_FULL);
	CHECK_EQ(stats.leases_refused_slabs, 1);
	CHECK(kvs_cache_check(c) == 0);
	CHECK_EQ(kvs_cache_commit(c, w, lw), 4);
	CHECK_EQ(kvs_cache_reserve(c, op, H(&a, 0), 8, &lw, bl), 4);
	CHECK_EQ(kvs_cache_commit(c, op, lw), 4);
	CHECK_EQ(kvs_cache_lookup(c, w, H(&a, 0), 8, &lr, bl), 4);
	CHECK_EQ(stats.leases_refused_slabs, 2);
	CHECK_EQ(hits(c, w2, &a, 0, 4), 4); /* the slabs uid 1000 holds */
	CHECK_EQ(kvs_cache_lookup(c, x, H(&a, 0), 8, &lx, bl), 4);
	CHECK_EQ(stats.leases_refused_slabs, 3);
	CHECK_EQ(hits(c, op, &a, 0, 8), 8);
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.leases_pinned_slab_bytes, 8 * PAGE);
	CHECK(kvs_cache_check(c) == 0);
	CHECK(kvs_cache_release(c, w, lr) >= 0);
	CHECK(kvs_cache_release(c, x, lx) >= 0);
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.leases_pinned_slab_bytes, 0);
	CHECK_EQ(hits(c, w, &a, 0, 8), 4); /* its share: half the slabs */
	CHECK(kvs_cache_check(c) == 0);
	kvs_cache_owner_free(c, w);
	kvs_cache_owner_free(c, w2);
	kvs_cache_owner_free(c, x);
	kvs_cache_owner_free(c, op);
	kvs_cache_destroy(c);
}

static void test_pins_and_full(void)
{
	kvs_cache *c = mk_cache(8 * PAGE, 64);
	kvs_layout l = layout("m", NULL, 64);
	kvs_owner *o = attach(c, &l), *r = attach(c, &l);
	kvs_block bl[64];
	uint64_t pin, lease;
	chain a, b, d, e;

	mk_chain(&a, &l, 1, 4);
	mk_chain(&b, &l, 2, 4);
	mk_chain(&d, &l, 3, 5);
	mk_chain(&e, &l, 4, 1);
	CHECK_EQ(publish(c, o, &a), 4);
	CHECK_EQ(kvs_cache_lookup(c, r, H(&a, 0), 4, &pin, bl), 4);
	CHECK_EQ(publish(c, o, &b), 4);
	/* Only B is evictable: D gets 4 slots, its fifth block is FULL. */
	CHECK_EQ(kvs_cache_reserve(c, o, H(&d, 0), 5, &lease, bl), 4);
	CHECK_EQ(bl[3].status, KVS_BLOCK_NEW);
	CHECK_EQ(bl[4].status, KVS_BLOCK_FULL);
	CHECK_EQ(hits(c, r, &a, 0, 4), 4);
	/* Everything is pinned or being written now. */
	CHECK_EQ(kvs_cache_reserve(c, o, H(&e, 0), 1, &pin, bl), KVS_E_FULL);
	CHECK(stats.errors_full == 1);
	CHECK_EQ(kvs_cache_commit(c, o, lease), 4);
	CHECK(kvs_cache_check(c) == 0);
	/* The reader's connection dies: its pins go, A becomes evictable. */
	kvs_cache_owner_free(c, r);
	CHECK_EQ(publish(c, o, &e), 1);
	CHECK(kvs_cache_check(c) == 0);
	kvs_cache_owner_free(c, o);
	kvs_cache_destroy(c);
}

static void test_abort_busy_and_limits(void)
{
	kvs_cache *c = mk_cache(16 * PAGE, 2);
	kvs_layout l = layout("m", NULL, 64);
	kvs_owner *w = attach(c, &l), *x = attach(c, &l);
	kvs_block bl[64];
	uint64_t lw, lx, l1, l2;
	chain a, longer;

	mk_chain(&a, &l, 1, 3);
	mk_chain(&longer, &l, 1, 5); /* same first 3 blocks */
	CHECK_EQ(kvs_cache_reserve(c, w, H(&a, 0), 3, &lw, bl), 3);
	/* Someone else writing: BUSY, and the rest of the chain too. */
	CHECK_EQ(kvs_cache_reserve(c, x, H(&longer, 0), 5, &lx, bl), 0);
	CHECK_EQ(bl[0].status, KVS_BLOCK_BUSY);
	CHECK_EQ(bl[4].status, KVS_BLOCK_BUSY);
	CHECK_EQ(kvs_cache_commit(c, x, lw), KVS_E_NOTOWNER);
	CHECK_EQ(kvs_cache_abort(c, w, lw), 3);
	CHECK_EQ(stats.blocks_aborted, 3);
	CHECK_EQ(kvs_cache_reserve(c, x, H(&longer, 0), 5, &lx, bl), 5);
	CHECK_EQ(kvs_cache_commit(c, x, lx), 5);
	/* Two leases at most per owner here. */
	CHECK_EQ(kvs_cache_lookup(c, w, H(&a, 0), 3, &l1, bl), 3);
	CHECK_EQ(kvs_cache_lookup(c, w, H(&a, 0), 3, &l2, bl), 3);
	CHECK_EQ(kvs_cache_lookup(c, w, H(&a, 0), 3, &lw, bl), KVS_E_LIMIT);
	CHECK_EQ(stats.leases_active, 0); /* a gauge: filled on demand */
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.leases_active, 2);
	CHECK_EQ(stats.leases_pinned_blocks, 6);
	CHECK(kvs_cache_check(c) == 0);
	/* A writer that vanishes mid-write leaves nothing behind. */
	CHECK_EQ(kvs_cache_reserve(c, x, H(&longer, 0), 5, &lx, bl), 0);
	mk_chain(&a, &l, 9, 4);
	CHECK_EQ(kvs_cache_reserve(c, x, H(&a, 0), 4, &lx, bl), 4);
	kvs_cache_owner_free(c, x);
	kvs_cache_owner_free(c, w);
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.tier_host_slots_used, 5);
	CHECK_EQ(stats.tier_host_blocks_writing, 0);
	CHECK_EQ(stats.leases_active, 0);
	CHECK_EQ(stats.leases_pinned_blocks, 0);
	CHECK(kvs_cache_check(c) == 0);
	kvs_cache_destroy(c);
}

/* --max-pinned-blocks: a lookup or reserve that would pass it is refused
 * whole (nothing pinned, nothing reserved); ending leases makes room. */
static void test_pin_limit(void)
{
	kvs_cache_config cfg = { .host_bytes = 16 * PAGE, .page_bytes = PAGE,
				 .policy = policy, .max_leases = 100,
				 .max_pinned = 5 };
	kvs_cache *c = NULL;
	kvs_layout l = layout("m", NULL, 64);
	kvs_owner *w;
	kvs_block bl[64];
	uint64_t l1, l2, l3;
	chain a, b, d;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	w = attach(c, &l);
	mk_chain(&a, &l, 1, 4);
	mk_chain(&b, &l, 2, 3);
	CHECK_EQ(kvs_cache_reserve(c, w, H(&a, 0), 4, &l1, bl), 4);
	/* 4 pinned: 3 more NEW would make 7. */
	CHECK_EQ(kvs_cache_reserve(c, w, H(&b, 0), 3, &l2, bl), KVS_E_LIMIT);
	CHECK_EQ(l2, 0);
	CHECK_EQ(stats.errors_limit, 1);
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.leases_pinned_blocks, 4);
	CHECK_EQ(stats.tier_host_blocks_writing, 4);
	CHECK_EQ(stats.blocks_aborted, 0);
	CHECK(kvs_cache_check(c) == 0);
	CHECK_EQ(kvs_cache_commit(c, w, l1), 4);
	/* Exactly at the limit is fine; one more pin is not. */
	CHECK_EQ(kvs_cache_lookup(c, w, H(&a, 0), 4, &l1, bl), 4);
	CHECK_EQ(kvs_cache_reserve(c, w, H(&b, 0), 1, &l2, bl), 1);
	CHECK_EQ(kvs_cache_lookup(c, w, H(&a, 0), 1, &l3, bl), KVS_E_LIMIT);
	mk_chain(&d, &l, 3, 2);
	CHECK_EQ(kvs_cache_reserve(c, w, H(&d, 0), 2, &l3, bl), KVS_E_LIMIT);
	CHECK_EQ(stats.errors_limit, 3);
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.leases_pinned_blocks, 5);
	CHECK_EQ(stats.tier_host_blocks_writing, 1);
	CHECK(kvs_cache_check(c) == 0);
	CHECK_EQ(kvs_cache_release(c, w, l1), 4);
	CHECK_EQ(kvs_cache_reserve(c, w, H(&b, 0), 3, &l3, bl), 0); /* BUSY */
	CHECK_EQ(kvs_cache_commit(c, w, l2), 1);
	CHECK_EQ(kvs_cache_reserve(c, w, H(&b, 0), 3, &l3, bl), 2);
	CHECK_EQ(kvs_cache_commit(c, w, l3), 2);
	kvs_cache_owner_free(c, w);
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.leases_pinned_blocks, 0);
	CHECK(kvs_cache_check(c) == 0);
	kvs_cache_destroy(c);
}

/* The flat "lru" evicts parents too: a chain's root goes first, its
 * descendants stay as unreachable blocks under a ghost, and writing the root
 * again makes the whole chain reachable again. */
static void test_flat_lru_ghosts(void)
{
	kvs_cache *c;
	kvs_layout l = layout("m", NULL, 64);
	kvs_owner *o;
	kvs_block bl[64];
	uint64_t lease;
	chain a, n1, n2;

	policy = "lru";
	c = mk_cache(8 * PAGE, 64);
	o = attach(c, &l);
	mk_chain(&a, &l, 1, 4);
	mk_chain(&n1, &l, 2, 4);
	mk_chain(&n2, &l, 3, 1);
	CHECK_EQ(publish(c, o, &a), 4);
	CHECK_EQ(publish(c, o, &n1), 4);
	CHECK_EQ(publish(c, o, &n2), 1); /* evicts A's root, the oldest */
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.table_ghosts, 1);
	CHECK_EQ(stats.tier_host_slots_used, 8);
	CHECK_EQ(hits(c, o, &a, 0, 4), 0);
	CHECK_EQ(hits(c, o, &a, 1, 3), 3); /* still there, unreachable */
	/* Rewriting the root (evicts N1's root, now the oldest). */
	CHECK_EQ(kvs_cache_reserve(c, o, H(&a, 0), 4, &lease, bl), 1);
	CHECK_EQ(bl[0].status, KVS_BLOCK_NEW);
	CHECK_EQ(bl[1].status, KVS_BLOCK_EXISTS);
	CHECK(kvs_cache_check(c) == 0);
	/* Aborting it leaves a ghost again, then commit for real. */
	CHECK_EQ(kvs_cache_abort(c, o, lease), 1);
	CHECK(kvs_cache_check(c) == 0);
	CHECK_EQ(kvs_cache_reserve(c, o, H(&a, 0), 4, &lease, bl), 1);
	CHECK_EQ(kvs_cache_commit(c, o, lease), 1);
	CHECK_EQ(hits(c, o, &a, 0, 4), 4);
	CHECK_EQ(hits(c, o, &n1, 0, 4), 0);
	CHECK(kvs_cache_check(c) == 0);
	/* Evicting all of N1's descendants drops its ghost too. */
	mk_chain(&n1, &l, 4, 3);
	CHECK_EQ(publish(c, o, &n1), 3);
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.table_ghosts, 0);
	CHECK(kvs_cache_check(c) == 0);
	kvs_cache_owner_free(c, o);
	kvs_cache_destroy(c);
	policy = "leaf-lru";
}

/* --tenant-arenas uid: one arena, allocator and policy per uid. The same
 * layout from two uids is two namespaces over two memfds; a third uid past
 * max_tenants is refused; one tenant filling its arena evicts only its own
 * blocks. */
static kvs_owner *attach_uid(kvs_cache *c, const kvs_layout *l, uint32_t uid,
			     int want, uint32_t *ns)
{
	kvs_ns_desc h = desc_of(l);
	kvs_owner *o = kvs_cache_owner_new(c);
	uint64_t bb;

	kvs_cache_owner_set_uid(o, uid);
	*ns = 0;
	CHECK_EQ(kvs_cache_attach(c, o, &h, 0, ns, &bb), want);
	return o;
}

static void test_tenants(void)
{
	kvs_cache_config cfg = { .host_bytes = 64 * PAGE, .page_bytes = PAGE,
				 .policy = policy, .max_leases = 64,
				 .max_tenants = 2, .tenant_bytes = 8 * PAGE };
	kvs_layout l = layout("m", "salt", 64);
	kvs_cache *c = NULL;
	kvs_owner *a, *a2, *b, *x;
	uint32_t na, na2, nb, nx;
	int fa, fa2, fb;
	uint64_t ba, bb, ia, ib;
	chain ch, other;

	memset(&stats, 0, sizeof(stats));
	CHECK(kvs_cache_create(&cfg, &stats, &c) == 0);
	CHECK_EQ(kvs_cache_tenants(c), 0); /* made on first attach */
	CHECK_EQ(kvs_cache_arena_fd(c), -1);
	a = attach_uid(c, &l, 1000, 0, &na);
	a2 = attach_uid(c, &l, 1000, 0, &na2);
	b = attach_uid(c, &l, 1001, 0, &nb);
	x = attach_uid(c, &l, 1002, KVS_E_LIMIT, &nx);
	CHECK_EQ(kvs_cache_tenants(c), 2);
	CHECK_EQ(na, na2);
	CHECK(na != nb);
	CHECK_EQ(stats.errors_limit, 1);
	CHECK_EQ(kvs_cache_owner_arena(c, x, &fa, &ba, &ia), KVS_E_NOTATTACHED);
	CHECK_EQ(kvs_cache_owner_arena(c, a, &fa, &ba, &ia), 0);
	CHECK_EQ(kvs_cache_owner_arena(c, a2, &fa2, &ba, &ia), 0);
	CHECK_EQ(kvs_cache_owner_arena(c, b, &fb, &bb, &ib), 0);
	CHECK_EQ(fa, fa2);
	CHECK(fa != fb && fa >= 0 && fb >= 0);
	CHECK(ia != ib);
	CHECK_EQ(ba, 8 * PAGE);
	CHECK_EQ(bb, 8 * PAGE);

	/* Same hashes, two domains: a's blocks are misses for b. */
	mk_chain(&ch, &l, 1, 3);
	CHECK_EQ(publish(c, a, &ch), 3);
	CHECK_EQ(hits(c, a2, &ch, 0, 3), 3);
	CHECK_EQ(hits(c, b, &ch, 0, 3), 0);
	CHECK_EQ(publish(c, b, &ch), 3); /* NEW, not EXISTS */
	CHECK(kvs_cache_check(c) == 0);

	/* b fills its arena many times over: only b's blocks are evicted. */
	for (uint32_t s = 10; s < 40; s++) {
		mk_chain(&other, &l, s, 1);
		CHECK_EQ(publish(c, b, &other), 1);
	}
	CHECK(stats.blocks_evicted > 0);
	CHECK_EQ(hits(c, a, &ch, 0, 3), 3);
	CHECK_EQ(hits(c, b, &ch, 0, 3), 0);
	CHECK(kvs_cache_check(c) == 0);
	kvs_cache_stats_fill(c);
	CHECK_EQ(stats.tenants_domains, 2);
	CHECK_EQ(stats.tier_host_bytes_total, 16 * PAGE);
	kvs_cache_owner_free(c, a);
	kvs_cache_owner_free(c, a2);
	kvs_cache_owner_free(c, b);
	kvs_cache_owner_free(c, x);
	kvs_cache_destroy(c);
}

int main(void)
{
	kvs_log_set_level(KVS_LOG_WARN);
	test_basic();
	test_tenants();
	test_isolation_and_layouts();
	test_leaf_first_lru();
	test_pins_and_full();
	test_pinned_share();
	test_abort_busy_and_limits();
	test_pin_limit();
	test_flat_lru_ghosts();
	return check_summary("test_cache");
}
