/*
 * kvs_persist_bench - what host-tier persistence (kvs_persist.h) costs and
 * gives, measured on the cache itself (no socket, no client):
 *   commit  reserve, fill and commit --blocks blocks of --block-bytes, with
 *           persistence off and on, --rounds times each, interleaved;
 *           prints the ns per block that reserve and commit took (the
 *           client's fill not counted) with each, and their ratio.
 *   adopt   publish --blocks blocks (chains of --chain) into a cache with
 *           persistence on, drop the cache with its fds held (as an fd store
 *           holds them), adopt them in a new cache: prints the time the
 *           adoption took (what a restart adds before READY) and the share
 *           of blocks kept.
 * A developer program (tools/dev/): it links the daemon's modules.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kvs_cache.h"
#include "kvs_clock.h"
#include "kvs_log.h"
#include "kvs_persist.h"

typedef struct opts {
	const char *mode;
	uint64_t blocks, block_bytes;
	uint32_t chain, rounds;
} opts;

static kvs_counters stats;

/* A layout of @bytes per block: fp16, 16 tokens, 1 layer, 1 head. */
static kvs_ns_desc desc_of(uint64_t bytes)
{
	return (kvs_ns_desc){ .model = "persist-bench", .adapter = "",
			      .layers = 1, .kv_heads = 1,
			      .head_dim = (uint32_t)(bytes / 64),
			      .block_tokens = 16, .tp_size = 1,
			      .dtype = KVS_DTYPE_FP16 };
}

static kvs_cache *mk(const opts *o, int persist)
{
	uint64_t stride = (o->block_bytes + 63) / 64 * 64;
	kvs_cache_config cfg = { .host_bytes = o->blocks * stride * 105 / 100 +
					       (64u << 20),
				 .page_bytes = 64u << 10, .policy = "leaf-lru",
				 .max_leases = 64, .persist = persist };
	kvs_cache *c = NULL;
	int rc = kvs_cache_create(&cfg, &stats, &c);

	if (rc < 0) {
		fprintf(stderr, "kvs_persist_bench: cache: %s\n", kvs_strerror(rc));
		exit(1);
	}
	return c;
}

static kvs_owner *attach(kvs_cache *c, const opts *o)
{
	kvs_ns_desc d = desc_of(o->block_bytes);
	kvs_owner *w = kvs_cache_owner_new(c);
	uint32_t ns;
	uint64_t bb;

	if (!w || kvs_cache_attach(c, w, &d, 0, &ns, &bb) < 0 ||
	    bb != o->block_bytes) {
		fprintf(stderr, "kvs_persist_bench: attach failed (block bytes "
			"must be a multiple of 64)\n");
		exit(1);
	}
	return w;
}

/* Publish every block (chains of o->chain, keys from @salt), the bytes
 * written through a mapping of the arena (touched beforehand, so that no
 * page fault is timed); returns the ns reserve and commit took. */
static uint64_t publish_all(kvs_cache *c, kvs_owner *w, const opts *o,
			    uint64_t salt)
{
	uint8_t *a = mmap(NULL, kvs_cache_arena_bytes(c), PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_POPULATE, kvs_cache_arena_fd(c), 0);
	kvs_hash h[256];
	kvs_block b[256];
	uint64_t lease, t, spent = 0, done = 0;

	if (a == MAP_FAILED)
		exit(1);
	memset(a, 0, kvs_cache_arena_bytes(c));
	while (done < o->blocks) {
		uint32_t n = o->chain;
		int got;

		for (uint32_t i = 0; i < n; i++) /* a chain: each its own key */
			h[i] = (kvs_hash){ .lo = salt ^ (done + i) * 0x9e3779b97f4a7c15ull,
					   .hi = done / n + 1 };
		t = now_ns();
		got = kvs_cache_reserve(c, w, h, n, &lease, b);
		spent += now_ns() - t;
		if (got <= 0)
			break;
		for (uint32_t i = 0; i < n; i++)
			if (b[i].status == KVS_BLOCK_NEW)
				memset(a + b[i].offset, (int)(done + i), o->block_bytes);
		t = now_ns();
		kvs_cache_commit(c, w, lease);
		spent += now_ns() - t;
		done += n;
	}
	munmap(a, kvs_cache_arena_bytes(c));
	return spent;
}

static int run_commit(const opts *o)
{
	uint64_t best[2] = { UINT64_MAX, UINT64_MAX }, lag = 0, t;

	for (uint32_t r = 0; r < o->rounds; r++) {
		for (int p = 0; p < 2; p++) {
			kvs_cache *c = mk(o, p);
			kvs_owner *w = attach(c, o);
			uint64_t ns = publish_all(c, w, o, r * 2u + (uint64_t)p);

			if (ns < best[p])
				best[p] = ns;
			t = now_ns(); /* the worker's checksums still to do */
			kvs_persist_sync(c);
			if (p && now_ns() - t > lag)
				lag = now_ns() - t;
			kvs_cache_owner_free(c, w);
			kvs_cache_destroy(c);
		}
	}
	printf("reserve+commit: %" PRIu64 " blocks of %" PRIu64 " bytes, best "
	       "of %u: persistence off %.0f ns/block, on %.0f ns/block (x%.2f); "
	       "the persist worker done %.1f ms after the last commit at most\n",
	       o->blocks, o->block_bytes, o->rounds,
	       (double)best[0] / (double)o->blocks,
	       (double)best[1] / (double)o->blocks,
	       (double)best[1] / (double)best[0], (double)lag / 1e6);
	return 0;
}

static int run_adopt(const opts *o)
{
	kvs_cache *c = mk(o, 1);
	kvs_owner *w = attach(c, o);
	kvs_named_fd fds[4];
	kvs_persist_report r;
	uint64_t pub = publish_all(c, w, o, 1);
	int n = (kvs_persist_sync(c), kvs_persist_fds(c, fds, 4));

	for (int i = 0; i < n; i++)
		fds[i].fd = dup(fds[i].fd);
	kvs_cache_owner_free(c, w);
	kvs_cache_destroy(c);
	c = mk(o, 1);
	if (n < 0 || kvs_persist_adopt(c, fds, (uint32_t)n, &r) < 0)
		return 1;
	printf("adopt: %" PRIu64 " blocks of %" PRIu64 " bytes (published in "
	       "%.2f s): adopted in %.3f s, %" PRIu64 " kept (%.2f%%), %" PRIu64
	       " dropped%s%s\n", o->blocks, o->block_bytes, (double)pub / 1e9,
	       (double)r.elapsed_ns / 1e9, r.blocks_kept,
	       100.0 * (double)r.blocks_kept / (double)o->blocks,
	       r.blocks_dropped, r.reason[0] ? ": " : "", r.reason);
	kvs_cache_destroy(c);
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: kvs-persist-bench commit|adopt [--blocks N] "
		"[--block-bytes B] [--chain L] [--rounds R]\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "blocks", required_argument, NULL, 'n' },
		{ "block-bytes", required_argument, NULL, 'b' },
		{ "chain", required_argument, NULL, 'l' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 } };
	opts o = { .blocks = 20000, .block_bytes = 65536, .chain = 16, .rounds = 3 };
	int ch;

	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'n': o.blocks = strtoull(optarg, NULL, 0); break;
		case 'b': o.block_bytes = strtoull(optarg, NULL, 0); break;
		case 'l': o.chain = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'r': o.rounds = (uint32_t)strtoul(optarg, NULL, 0); break;
		default: usage(); return ch == 'h' ? 0 : 2;
		}
	}
	if (optind + 1 != argc || o.chain == 0 || o.chain > 256 ||
	    o.blocks < o.chain || o.block_bytes < 64 || o.rounds == 0) {
		usage();
		return 2;
	}
	o.blocks -= o.blocks % o.chain;
	kvs_log_set_level(KVS_LOG_WARN);
	o.mode = argv[optind];
	if (strcmp(o.mode, "commit") == 0)
		return run_commit(&o);
	if (strcmp(o.mode, "adopt") == 0)
		return run_adopt(&o);
	usage();
	return 2;
}
