/*
 * kvs-pool-fill - fill a running kvshared's host tier with many small
 * blocks, or check them: the tests' and benchmarks' client for a pool that
 * must survive a restart (tests/integration/server/test_systemd.sh,
 * tools/dev/bench_handover.sh --restarts).
 *
 *   kvs-pool-fill fill|check --socket PATH --blocks N [--chain L]
 *                 [--block-tokens T] [--head-dim D] [--seed S] [--every K]
 *
 * The blocks are N / L chains of L blocks (the last one shorter), chain i
 * the prompt of tokens from seed S + i (th_chain), in one namespace of the
 * layout 1 layer, 1 KV head, D head dim, T tokens a block, fp16 (block
 * bytes 4 * T * D: 64 with the defaults T 16, D 1). Each block's bytes are
 * its hash's pattern (th_pattern_fill).
 *   fill   publishes every chain: one reserve and one commit a chain (the
 *          fastest path through the socket: a chain of L is one request
 *          each way), and prints the blocks committed and the time taken.
 *   check  looks up every K-th chain (--every, default 1: all of them) and
 *          checks every hit's bytes against its pattern; prints the blocks
 *          asked, hit and wrong.
 * Output: one line, key=value pairs. Exit: 0 when fill committed N blocks
 * or check found every block asked, bit exact; 1 otherwise; 2 usage.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness_client.h"
#include "kvs_clock.h"

typedef struct opts {
	const char *cmd, *sock;
	uint64_t blocks, seed;
	uint32_t chain, block_tokens, head_dim, every;
} opts;

static int usage(void)
{
	fprintf(stderr, "usage: kvs-pool-fill fill|check --socket PATH --blocks N "
		"[--chain L] [--block-tokens T] [--head-dim D] [--seed S] "
		"[--every K]\n");
	return 2;
}

static int parse(opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "blocks", required_argument, NULL, 'n' },
		{ "chain", required_argument, NULL, 'l' },
		{ "block-tokens", required_argument, NULL, 't' },
		{ "head-dim", required_argument, NULL, 'd' },
		{ "seed", required_argument, NULL, 'S' },
		{ "every", required_argument, NULL, 'e' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	if (argc < 2)
		return -1;
	o->cmd = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		unsigned long long v = optarg ? strtoull(optarg, NULL, 10) : 0;

		switch (c) {
		case 's': o->sock = optarg; break;
		case 'n': o->blocks = v; break;
		case 'l': o->chain = (uint32_t)v; break;
		case 't': o->block_tokens = (uint32_t)v; break;
		case 'd': o->head_dim = (uint32_t)v; break;
		case 'S': o->seed = v; break;
		case 'e': o->every = (uint32_t)v; break;
		default: return -1;
		}
	}
	if (!o->sock || !o->blocks || !o->chain || o->chain > KVS_MAX_HASHES ||
	    !o->block_tokens || !o->head_dim || !o->every ||
	    (strcmp(o->cmd, "fill") && strcmp(o->cmd, "check")))
		return -1;
	return 0;
}

static kvs_layout layout_of(const opts *o)
{
	kvs_layout l = th_layout("kvs-pool-fill", o->block_tokens);

	l.layers = 1;
	l.kv_heads = 1;
	l.head_dim = o->head_dim;
	return l;
}

/* Every chain of @o, published (fill) or looked up and checked (check). */
static int run(const opts *o, kvs_client *c)
{
	kvs_layout l = layout_of(o);
	kvs_hash *h = calloc(o->chain, sizeof(*h));
	uint64_t nchains = (o->blocks + o->chain - 1) / o->chain, asked = 0;
	uint64_t done = 0, bad = 0;
	int fill = !strcmp(o->cmd, "fill"), rc = 0;
	double t0 = now_s();

	if (!h)
		return 1;
	for (uint64_t i = 0; i < nchains && rc >= 0; i += fill ? 1 : o->every) {
		uint64_t left = o->blocks - i * o->chain;
		size_t n = left < o->chain ? (size_t)left : o->chain, wrong = 0;

		th_chain(&l, o->seed + i, n, 0, 0, h);
		rc = fill ? th_publish(c, h, n, NULL) : th_verify(c, h, n, &wrong);
		if (rc > 0)
			done += (uint64_t)rc;
		bad += wrong;
		asked += n;
	}
	free(h);
	if (rc < 0)
		fprintf(stderr, "kvs-pool-fill %s: %s\n", o->cmd, kvs_strerror(rc));
	if (fill)
		printf("filled=%" PRIu64 " of=%" PRIu64 " block_bytes=%" PRIu64
		       " seconds=%.3f\n", done, o->blocks, kvs_block_bytes(c),
		       now_s() - t0);
	else
		printf("asked=%" PRIu64 " hit=%" PRIu64 " wrong=%" PRIu64
		       " seconds=%.3f\n", asked, done, bad, now_s() - t0);
	return rc < 0 || done != asked || bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	opts o = { .chain = 1024, .block_tokens = 16, .head_dim = 1,
		   .every = 1, .seed = 1 };
	kvs_layout l;
	kvs_client *c;
	int rc;

	if (parse(&o, argc, argv) < 0)
		return usage();
	l = layout_of(&o);
	rc = kvs_connect(o.sock, &l, &c);
	if (rc != 0) {
		fprintf(stderr, "kvs-pool-fill: connect %s: %s\n", o.sock,
			kvs_strerror(rc));
		return 1;
	}
	rc = run(&o, c);
	kvs_close(c);
	return rc;
}
