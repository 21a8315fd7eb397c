/*
 * test_share - several real processes share one prefix through one daemon.
 *
 * 1. Publish, then share: the parent publishes a prefix; until it commits,
 *    another connection neither sees the blocks nor may write them (BUSY).
 *    Then READERS processes look the prefix up at once: all of it hits, the
 *    bytes are the writer's, and every block pointer lies in the same shared
 *    memfd mapping at the block's offset (the bytes came through memory, the
 *    socket carried only offsets). Each reader then adds its own suffix
 *    (prefix EXISTS, suffix NEW). Stats count every step.
 * 2. Race: RACERS processes want the same prefix at the same moment; exactly
 *    one writes it (the others see BUSY, then hit), and all read it back.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <stdlib.h>
#include <string.h>

#define BT 16
#define PREFIX 8
#define SUFFIX 4
#define READERS 4
#define RACERS 4
#define SEED_PREFIX 11
#define SEED_RACE 12
#define SEED_SUFFIX(i) (1000 + (uint64_t)(i))

static th_daemon d;
static kvs_layout L;

/* What the parent learned about its mapping, handed to children by fork. */
static uint64_t arena_inode;
static uint64_t prefix_offsets[PREFIX];

/* Check that a block's pointer is in a MAP_SHARED memfd mapping, at the
 * block's offset, and return the mapping's inode (0 when it is not). */
static uint64_t check_block_mapping(kvs_client *c, const kvs_block *b)
{
	uint64_t bb = kvs_block_bytes(c);
	void *p = kvs_block_ptr(c, b);
	th_mapping m;

	if (!CHECK(p != NULL))
		return 0;
	if (!CHECK_RC(th_mapping_of(p, bb, &m), 0))
		return 0;
	CHECK(m.shared);
	CHECK(m.writable);
	if (!CHECK(strstr(m.path, "memfd:") != NULL))
		th_note("block mapping is '%s', not a memfd", m.path);
	CHECK_EQ((uintptr_t)p - m.start, b->offset - m.file_offset);
	return m.inode;
}

static void check_hash_tokens_agree(kvs_client *c)
{
	uint32_t tok[3 * BT + 5];
	kvs_hash a[3], b[3];

	/* The client's hashing (a trailing partial block is not hashed) must
	 * agree with the connectionless one the harness uses. */
	th_tokens(tok, 3 * BT, 77);
	th_tokens(tok + 3 * BT, 5, 78);
	CHECK_RC(kvs_hash_tokens(c, tok, 3 * BT + 5, a, 3), 3);
	CHECK_EQ(kvs_hash_chain(kvs_hash_layout_seed(&L), BT, tok, 3 * BT, b, 3), 3);
	CHECK(memcmp(a, b, sizeof(a)) == 0);
}

static int reader(void *arg, int fd)
{
	int idx = (int)(intptr_t)arg;
	kvs_hash h[PREFIX + SUFFIX];
	kvs_block b[PREFIX + SUFFIX];
	kvs_client *c = th_connect(&d, &L);
	uint64_t bb = kvs_block_bytes(c), go;
	kvs_lease lease = 0;
	size_t bad;
	int hits;

	th_chain(&L, SEED_PREFIX, PREFIX, SEED_SUFFIX(idx), SUFFIX, h);
	hits = kvs_lookup(c, h, PREFIX + SUFFIX, &lease, b);
	CHECK_RC(hits, PREFIX);
	CHECK_NE(lease, 0);
	for (int i = 0; i < hits && i < PREFIX; i++) {
		const void *p = kvs_block_ptr(c, &b[i]);

		CHECK_EQ(b[i].status, KVS_BLOCK_HIT);
		CHECK_EQ(b[i].tier, KVS_TIER_HOST);
		CHECK_EQ(b[i].offset, prefix_offsets[i]);
		CHECK_EQ(check_block_mapping(c, &b[i]), arena_inode);
		if (p && !CHECK_EQ(th_pattern_check(p, bb, h[i], 0), -1))
			th_note("reader %d: block %d differs from what the writer wrote", idx, i);
	}
	/* Hold the pins while the parent counts them. */
	CHECK_RC(th_send_u64(fd, 1), 0);
	CHECK_RC(th_recv_u64(fd, &go, 20000), 0);
	CHECK_RC(kvs_release(c, lease), 0);

	/* Add this reader's own suffix: the prefix exists, the suffix is new. */
	CHECK_RC(th_publish(c, h, PREFIX + SUFFIX, b), SUFFIX);
	for (int i = 0; i < PREFIX + SUFFIX; i++)
		CHECK_EQ(b[i].status, i < PREFIX ? KVS_BLOCK_EXISTS : KVS_BLOCK_NEW);
	CHECK_RC(th_verify(c, h, PREFIX + SUFFIX, &bad), PREFIX + SUFFIX);
	CHECK_EQ(bad, 0);
	kvs_close(c);
	return 0;
}

/* The writer @c reserves and fills the prefix @h in its mapping; until it
 * commits, @other neither sees the blocks nor may write them. */
static void write_prefix(kvs_client *c, kvs_client *other, const kvs_hash *h,
			 uint64_t bb)
{
	kvs_block b[PREFIX], b2[PREFIX];
	kvs_lease lease = 0, lease2 = 7;

	CHECK_RC(th_probe(c, h, PREFIX), 0);
	CHECK_RC(kvs_reserve(c, h, PREFIX, &lease, b), PREFIX);
	CHECK_NE(lease, 0);
	for (int i = 0; i < PREFIX; i++) {
		void *p = kvs_block_ptr(c, &b[i]);

		CHECK_EQ(b[i].status, KVS_BLOCK_NEW);
		CHECK_EQ(b[i].tier, KVS_TIER_HOST);
		arena_inode = check_block_mapping(c, &b[i]);
		prefix_offsets[i] = b[i].offset;
		if (p)
			th_pattern_fill(p, bb, h[i], 0);
	}
	CHECK_NE(arena_inode, 0);

	/* Not committed yet: invisible to others, and theirs to wait for. */
	CHECK_RC(th_probe(other, h, PREFIX), 0);
	CHECK_RC(kvs_reserve(other, h, PREFIX, &lease2, b2), 0);
	CHECK_EQ(lease2, 0);
	for (int i = 0; i < PREFIX; i++)
		CHECK_EQ(b2[i].status, KVS_BLOCK_BUSY);
	CHECK_EQ(th_stat_get(&d, "tier_host.blocks_writing"), PREFIX);
	CHECK_EQ(th_stat_get(&d, "tier_host.blocks"), 0);

	CHECK_RC(kvs_commit(c, lease), PREFIX);
	CHECK_EQ(th_stat_get(&d, "tier_host.blocks"), PREFIX);
	CHECK_EQ(th_stat_get(&d, "tier_host.blocks_writing"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_host.slots_used"), PREFIX);
	CHECK_EQ(th_stat_get(&d, "leases.active"), 0);
}

/* Every reader holds the whole prefix at the same time, then adds its own
 * suffix; @s1 is taken before they start. */
static void readers_share_prefix(th_stats *s1)
{
	th_child kids[READERS];
	th_stats s2;
	uint64_t msg;

	th_stats_take(&d, s1);
	for (int i = 0; i < READERS; i++)
		th_spawn(&kids[i], reader, (void *)(intptr_t)i);
	for (int i = 0; i < READERS; i++)
		CHECK_RC(th_recv_u64(kids[i].fd, &msg, 20000), 0);
	CHECK_EQ(th_stat_get(&d, "leases.active"), READERS);
	CHECK_EQ(th_stat_get(&d, "leases.pinned_blocks"), READERS * PREFIX);
	th_stats_take(&d, &s2);
	/* One lookup each: a request, or one answered by the fast path. */
	CHECK_EQ(th_stats_delta(s1, &s2, "ops.lookup") +
		 th_stats_delta(s1, &s2, "fast.lookups"), READERS);
	/* blocks.lookup_* count every path's blocks, once. */
	CHECK_EQ(th_stats_delta(s1, &s2, "blocks.lookup_hit"), READERS * PREFIX);
	CHECK_EQ(th_stats_delta(s1, &s2, "blocks.lookup_miss"), READERS * SUFFIX);
	th_stats_free(&s2);
	for (int i = 0; i < READERS; i++)
		CHECK_RC(th_send_u64(kids[i].fd, 1), 0);
	for (int i = 0; i < READERS; i++)
		CHECK_RC(th_child_wait(&kids[i], 20000), 0);
}

/* Once the readers are gone: what the whole story counted since @s0; frees
 * @s0 and @s1. */
static void share_totals(th_stats *s0, th_stats *s1, uint64_t bb)
{
	th_stats s2;

	CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS));
	CHECK(th_wait_stat(&d, "leases.pinned_blocks", 0, TH_WAIT_MS));
	th_stats_take(&d, &s2);
	CHECK_EQ(th_stats_delta(s0, &s2, "blocks.reserved"), PREFIX + READERS * SUFFIX);
	CHECK_EQ(th_stats_delta(s0, &s2, "blocks.committed"), PREFIX + READERS * SUFFIX);
	CHECK_EQ(th_stats_delta(s0, &s2, "blocks.reserve_busy"), PREFIX);
	CHECK_EQ(th_stats_delta(s0, &s2, "blocks.reserve_exists"), READERS * PREFIX);
	CHECK_EQ(th_stats_delta(s0, &s2, "blocks.evicted"), 0);
	CHECK_EQ(th_stats_delta(s0, &s2, "errors.total"), 0);
	CHECK_EQ(th_stats_val(&s2, "tier_host.blocks"), PREFIX + READERS * SUFFIX);
	CHECK_EQ(th_stats_val(&s2, "tier_host.slots_used"), PREFIX + READERS * SUFFIX);
	CHECK_EQ(th_stats_val(&s2, "tier_host.bytes_used"), (PREFIX + READERS * SUFFIX) * bb);
	th_stats_free(s0);
	th_stats_free(s1);
	th_stats_free(&s2);
}

static void publish_then_share(void)
{
	kvs_hash h[PREFIX];
	kvs_client *c = th_connect(&d, &L), *other = th_connect(&d, &L);
	uint64_t bb = kvs_block_bytes(c);
	th_stats s0, s1;

	CHECK_EQ(bb, kvs_layout_block_bytes(&L));
	CHECK_EQ(bb, 1024 * BT);
	CHECK_NE(kvs_namespace_id(c), 0);
	CHECK_EQ(kvs_namespace_id(c), kvs_namespace_id(other));
	check_hash_tokens_agree(c);
	th_chain(&L, SEED_PREFIX, PREFIX, 0, 0, h);
	th_stats_take(&d, &s0);

	write_prefix(c, other, h, bb);
	readers_share_prefix(&s1);
	share_totals(&s0, &s1, bb);

	/* Every reader's suffix is there for everyone. */
	for (int i = 0; i < READERS; i++) {
		kvs_hash hs[PREFIX + SUFFIX];
		size_t bad;

		th_chain(&L, SEED_PREFIX, PREFIX, SEED_SUFFIX(i), SUFFIX, hs);
		CHECK_RC(th_verify(other, hs, PREFIX + SUFFIX, &bad), PREFIX + SUFFIX);
		CHECK_EQ(bad, 0);
	}
	kvs_close(other);
	kvs_close(c);
}

/* A racer: wait for the start, then get the prefix by reading or writing it. */
static int racer(void *arg, int fd)
{
	kvs_hash h[PREFIX];
	kvs_block b[PREFIX];
	kvs_client *c = th_connect(&d, &L);
	int64_t deadline;
	uint64_t go, written = 0;
	size_t bad = 0;
	int hits = 0;

	(void)arg;
	th_chain(&L, SEED_RACE, PREFIX, 0, 0, h);
	CHECK_RC(th_send_u64(fd, 1), 0);
	CHECK_RC(th_recv_u64(fd, &go, 20000), 0);
	deadline = th_now_ms() + 10000;
	while (th_now_ms() < deadline) {
		hits = th_verify(c, h, PREFIX, &bad);
		if (hits == PREFIX || hits < 0)
			break;
		/* A miss: try to write it; BUSY means someone else is. */
		int n = th_publish(c, h, PREFIX, b);

		if (!CHECK_GE(n, 0))
			break;
		written += (uint64_t)n;
		if (n == 0)
			th_poll_pause();
	}
	CHECK_RC(hits, PREFIX);
	CHECK_EQ(bad, 0);
	CHECK_RC(th_send_u64(fd, written), 0);
	kvs_close(c);
	return 0;
}

static void race_for_prefix(void)
{
	th_child kids[RACERS];
	uint64_t v, total = 0, writers = 0;

	for (int i = 0; i < RACERS; i++)
		th_spawn(&kids[i], racer, NULL);
	for (int i = 0; i < RACERS; i++)
		CHECK_RC(th_recv_u64(kids[i].fd, &v, 20000), 0);
	for (int i = 0; i < RACERS; i++)
		CHECK_RC(th_send_u64(kids[i].fd, 1), 0);
	for (int i = 0; i < RACERS; i++) {
		if (CHECK_RC(th_recv_u64(kids[i].fd, &v, 20000), 0)) {
			total += v;
			writers += v > 0;
		}
		CHECK_RC(th_child_wait(&kids[i], 20000), 0);
	}
	CHECK_EQ(total, PREFIX);  /* every block written once */
	CHECK_EQ(writers, 1);     /* by the first to reserve */
}

int main(void)
{
	th_init("test_share");
	L = th_layout("share-model", BT);
	th_daemon_up(&d, TH_ARGS("--host-size", "16M", "--log-level", "info"));
	publish_then_share();
	race_for_prefix();
	return th_finish();
}
