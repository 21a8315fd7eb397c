/*
 * test_layout_sizes - a HELLO whose layout's block size overflows 64 bits
 * is refused by the layout check itself (cache_ns_check, through
 * kvs_layout_block_bytes and kvs_kv_format_init), before the daemon does
 * anything for it.
 *
 * A layout whose products overflow 32 bits only (heads x dim = 2^32) has
 * a real size, 8 GiB here: it is refused as a block larger than a domain's
 * arena, also before the uid's arena is made for it (before, the arena was
 * made and the slab allocator refused the block;
 * tests/badinput/layout-overflow-32 replays it against a default daemon).
 *
 * A daemon with --tenant-arenas uid: raw HELLOs (the library refuses these
 * layouts before sending them) get KVS_E_LAYOUT, errors.layout counts each,
 * and no tenant arena is made for them (tenants.domains stays 0: before
 * every product was checked, 8 x heads x dim wrapped 64 bits, the wrapped
 * size passed the check, the uid's arena was made, and only the slab
 * allocator refused the block). kvs_connect refuses the same layouts with
 * KVS_E_LAYOUT without a round trip. The daemon keeps serving: a good
 * client then attaches, which makes the one arena, and publishes.
 * (tests/badinput/layout-overflow-* replay the same HELLOs against a
 * default daemon.)
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_raw.h"

#include <unistd.h>

int main(void)
{
	static th_daemon d;
	static const struct {
		uint32_t heads, dim;
		kvs_dtype dtype;
	} big[] = {
		{ 1u << 30, 1u << 31, KVS_DTYPE_INT8 },  /* 8 x heads x dim = 2^64 */
		{ 1u << 31, 1u << 30, KVS_DTYPE_INT4 },
		{ 1u << 30, (1u << 31) + 5, KVS_DTYPE_FP8_E4M3 },
	};
	const size_t n = sizeof(big) / sizeof(big[0]);
	kvs_layout good, l;
	kvs_client *c = NULL;
	kvs_hash h[4];

	th_init("test_layout_sizes");
	good = th_layout("sizes", 16);
	th_daemon_up(&d, TH_ARGS("--host-size", "16M", "--tenant-arenas", "uid"));
	for (size_t i = 0; i < n; i++) {
		int fd = th_raw_connect(&d);

		l = good;
		l.layers = 1;
		l.block_tokens = 1;
		l.kv_heads = big[i].heads;
		l.head_dim = big[i].dim;
		l.dtype = big[i].dtype;
		CHECK(fd >= 0);
		CHECK_RC(th_raw_hello(fd, &l, 1), KVS_E_LAYOUT);
		close(fd);
		CHECK_EQ(kvs_layout_block_bytes(&l), 0);
		CHECK_RC(kvs_connect(d.socket, &l, &c), KVS_E_LAYOUT);
		CHECK(c == NULL);
	}
	l = good;
	l.layers = 1;
	l.block_tokens = 1;
	l.kv_heads = 1u << 16;
	l.head_dim = 1u << 16;
	l.dtype = KVS_DTYPE_INT8;
	CHECK(kvs_layout_block_bytes(&l) > (8ull << 30));
	CHECK_RC(kvs_connect(d.socket, &l, &c), KVS_E_LAYOUT);
	CHECK(c == NULL);
	CHECK_EQ(th_stat_get(&d, "errors.layout"), (int64_t)n + 1);
	CHECK_EQ(th_stat_get(&d, "tenants.domains"), 0);
	CHECK_EQ(th_stat_get(&d, "namespaces.count"), 0);

	c = th_connect(&d, &good);
	th_chain(&good, 7, 4, 0, 0, h);
	CHECK_EQ(th_publish(c, h, 4, NULL), 4);
	CHECK_EQ(th_verify(c, h, 4, NULL), 4);
	CHECK_EQ(th_stat_get(&d, "tenants.domains"), 1);
	kvs_close(c);
	return th_finish();
}
