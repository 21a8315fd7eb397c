/*
 * kvs-ssd-fill - build an SSD tier directory of N indexed 4 KiB blocks
 * quickly, through the storage engines' API (storage/ssd/kvs_ssd.h,
 * storage/ssd/kvs_index.h), for measuring the daemon's warm restart
 * (tools/dev/bench_restart.sh). Not installed.
 *
 *   kvs-ssd-fill --dir DIR --blocks N [--chain L]
 *
 * Writes N real records (header + 4 KiB payload, verifiable) into
 * preallocated 256 MiB segments with io_uring + O_DIRECT, indexes each once
 * its write completed (parent = the previous block of its chain of L), and
 * writes DIR/namespaces with the one layout the blocks belong to, in the
 * daemon's format (storage/ssd/kvs_nsfile.h, proto/kvs_ns.h). Prints the
 * kvshared flags that open the directory as it was built:
 *   --ssd-segment 268435456 --ssd-size BYTES
 * DIR must exist and be empty of a previous tier.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvs_clock.h"
#include "kvs_index.h"
#include "kvs_ssd.h"
#include "kvs_nsfile.h"
#include "kvs_types.h"

#define SEG (256ull << 20)
#define BLOCK 4096u
#define RING 512u /* payload buffers, so writes in flight */
#define NS_ID 1u

static const kvs_layout layout = {
	.model = "kvs-ssd-fill", .layers = 1, .kv_heads = 1, .head_dim = 64,
	.block_tokens = 16, .tp_size = 1, .dtype = KVS_DTYPE_FP16,
}; /* 1 * 2 * 16 * 1 * 64 * 2 = 4096 bytes per block */

typedef struct fill {
	kvs_ssd *ssd;
	kvs_index *ix;
	kvs_hash *h;
	uint64_t done, failed;
	unsigned chain;
} fill;

static void on_cqe(void *arg, const kvs_ssd_cqe *q)
{
	fill *f = arg;
	uint64_t i = q->cookie;
	kvs_index_key k = { .ns = NS_ID, .hash = f->h[i] };
	kvs_index_val v = { .seg = q->loc.seg, .len = q->loc.len,
			    .gen = q->loc.gen, .off = q->loc.off,
			    .csum = q->blk.csum };

	f->done++;
	if (q->res < 0) {
		f->failed++;
		return;
	}
	if (i % f->chain)
		v.parent = f->h[i - 1];
	if (kvs_index_put(f->ix, &k, &v) < 0)
		f->failed++;
}

static void reap_wait(fill *f)
{
	struct pollfd p = { kvs_ssd_event_fd(f->ssd), POLLIN, 0 };

	poll(&p, 1, 1000);
	kvs_ssd_reap(f->ssd, on_cqe, f);
}

static int write_ns(const char *dir)
{
	kvs_ns_layout ns = { .model = layout.model,
			     .model_len = (uint32_t)strlen(layout.model),
			     .adapter = "", .layers = layout.layers,
			     .kv_heads = layout.kv_heads, .head_dim = layout.head_dim,
			     .block_tokens = layout.block_tokens,
			     .tp_rank = layout.tp_rank, .tp_size = layout.tp_size,
			     .dtype = layout.dtype, .id = NS_ID };

	return kvs_nsfile_append(dir, &ns);
}

static void usage(void)
{
	fprintf(stderr, "usage: kvs-ssd-fill --dir DIR --blocks N [--chain L]\n");
}

/* @n block hashes into f->h: chains of f->chain blocks of random tokens
 * (@tok holds one chain's), hashed under the layout as a worker would. */
static void make_chains(fill *f, uint64_t n, uint32_t *tok)
{
	for (uint64_t c = 0; c * f->chain < n; c++) {
		uint64_t s = 0x66696c6c2d73736full ^ (c * 0x9e3779b97f4a7c15ull);
		uint64_t first = c * f->chain, len = n - first < f->chain ? n - first : f->chain;

		for (size_t j = 0; j < len * layout.block_tokens; j++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			tok[j] = (uint32_t)(s % 128256);
		}
		kvs_hash_chain(kvs_hash_layout_seed(&layout), layout.block_tokens,
			       tok, len * layout.block_tokens, f->h + first, len);
	}
}

/* The @n blocks written through a ring of RING buffers at @ring, each
 * block's first bytes its hash, the index flushed every 65,536. */
static int write_blocks(fill *f, uint64_t n, uint8_t *ring, const char **step)
{
	int rc;

	for (uint64_t i = 0; i < n; i++) {
		uint8_t *p = ring + (i % RING) * BLOCK;
		kvs_ssd_blk b = { .ns = NS_ID, .len = BLOCK };
		kvs_ssd_loc loc;

		/* the block's key on disk, as the daemon names it (cache_ns_key) */
		b.hash = f->h[i];
		b.hash.lo ^= (uint64_t)NS_ID * 0x9e3779b97f4a7c15ull;
		while (i - f->done >= RING)
			reap_wait(f);
		memset(p, (int)(f->h[i].lo & 0xff), BLOCK);
		memcpy(p, &f->h[i], sizeof(f->h[i]));
		if ((rc = kvs_ssd_write(f->ssd, &b, p, 0, i, &loc)) < 0)
			return rc;
		if (i % 65536 == 65535 && (rc = kvs_index_flush(f->ix)) < 0) {
			*step = "index flush";
			return rc;
		}
	}
	while (f->done < n)
		reap_wait(f);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "blocks", required_argument, NULL, 'n' },
		{ "chain", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dir = NULL, *step = "";
	uint64_t n = 0, per_seg = (SEG - 4096) / kvs_ssd_record_bytes(BLOCK), size;
	fill f = { .chain = 64 };
	uint32_t *tok = NULL;
	uint8_t *ring = NULL;
	char ixdir[4200];
	double t0;
	int opt, rc = 0;

	while ((opt = getopt_long(argc, argv, "d:n:l:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'd': dir = optarg; break;
		case 'n': n = strtoull(optarg, NULL, 10); break;
		case 'l': f.chain = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'h': usage(); return 0;
		default: usage(); return 2;
		}
	}
	if (!dir || n == 0 || f.chain == 0 || f.chain > 4096 || optind < argc) {
		usage();
		return 2;
	}
	/* One spare segment: the store never has to recycle. */
	size = ((n + per_seg - 1) / per_seg + 1) * SEG;
	f.h = calloc(n, sizeof(*f.h));
	tok = calloc((size_t)f.chain * layout.block_tokens, sizeof(*tok));
	if (!f.h || !tok || posix_memalign((void **)&ring, 4096, (size_t)RING * BLOCK)) {
		fprintf(stderr, "kvs-ssd-fill: out of memory\n");
		return 1;
	}
	make_chains(&f, n, tok);
	free(tok);
#define TRY(what, expr)                                                       \
	do {                                                                  \
		step = what;                                                  \
		if ((rc = (expr)) < 0)                                        \
			goto out;                                             \
	} while (0)
	TRY("write namespaces", write_ns(dir));
	TRY("create store", kvs_ssd_create(&f.ssd));
	TRY("segment size", kvs_ssd_set_segment_bytes(f.ssd, SEG));
	TRY("store size", kvs_ssd_set_size(f.ssd, size));
	TRY("queue depth", kvs_ssd_set_queue_depth(f.ssd, 64));
	TRY("open store", kvs_ssd_open(f.ssd, dir));
	snprintf(ixdir, sizeof(ixdir), "%s/index", dir);
	TRY("create index", kvs_index_create(&f.ix));
	TRY("index map size", kvs_index_set_mapsize(f.ix, kvs_index_mapsize_for(size, BLOCK)));
	TRY("open index", kvs_index_open(f.ix, ixdir));
	t0 = now_s();
	TRY("write", write_blocks(&f, n, ring, &step));
	TRY("index flush", kvs_index_flush(f.ix));
	fprintf(stderr, "kvs-ssd-fill: %" PRIu64 " blocks written and indexed in "
		"%.1f s (O_DIRECT %d, io_uring %d), %" PRIu64 " failed\n", n,
		now_s() - t0, kvs_ssd_direct(f.ssd), kvs_ssd_uring(f.ssd), f.failed);
	printf("--ssd-segment %" PRIu64 " --ssd-size %" PRIu64 "\n", (uint64_t)SEG, size);
	rc = f.failed ? -EIO : 0;
	step = "write completions";
out:
	if (rc < 0)
		fprintf(stderr, "kvs-ssd-fill: %s failed: %s\n", step, kvs_strerror(rc));
	kvs_ssd_close(f.ssd);
	kvs_index_close(f.ix);
	free(f.h);
	free(ring);
	return rc < 0 ? 1 : 0;
}
