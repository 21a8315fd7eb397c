/*
 * bench_replay.c - kvsbench replay: a trace through a real kvshared (see
 * bench_replay.h), on the public client API only.
 *
 * The replay model is the one of shared/traces/SOURCES.md: capacity is
 * floor(C / block_tokens) blocks; a request's hit is the longest run of its
 * leading hash ids in the cache, counted as min(k * block_tokens,
 * input_length) tokens; then every block of the request is inserted or
 * touched, in order.
 *
 * Two things make the daemon count exactly like that model:
 *
 * - One reserve + commit per block, in order. A reserve pins every block it
 *   creates until the commit, and pinned blocks cannot be evicted; so a
 *   whole-chain reserve of a request longer than the cache runs out of room
 *   (FULL) where the model evicts the request's own earlier blocks, and even
 *   a request that fits would give its new blocks their access stamps at the
 *   commit, after the blocks it merely touched, where the model stamps them
 *   in chain order. Each reserve names two hashes, [h_{j-1}, h_j]: h_{j-1}
 *   (just written or touched, the most recent block) answers EXISTS, so the
 *   daemon links h_j to it as its parent; the leading hash of a chain is
 *   reserved alone. The extra touch of h_{j-1} keeps the order of the model,
 *   since h_{j-1} was the most recent block already.
 * - The leading hits are not reserved again: the lookup touched them in
 *   chain order, which is the order the model's touches give them, and
 *   nothing is evicted between the lookup and the first reserve.
 *
 * Hash ids become 128-bit block hashes by a fixed mixing function, so a run
 * is deterministic and two runs of one trace name the same blocks.
 */
#define _GNU_SOURCE
#include "bench_replay.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_proc.h"
#include "bench_util.h"
#include "kvshare.h"
#include "replay_models.h"
#include "replay_trace.h"

#define REPLAY_HASH_HI 0x6b76737265706c61ull /* "kvsrepla" */
#define READY_TIMEOUT_S 30.0

/* The daemon's layout: one block is exactly 4096 bytes (1 layer x K,V x
 * 16 tokens x 1 head x 64 dims x fp16), one 4 KiB page, one slot. */
#define SLOT_BYTES 4096u
static const kvs_layout replay_layout = {
	.model = "kvsbench-replay", .layers = 1, .kv_heads = 1,
	.head_dim = 64, .block_tokens = 16, .tp_rank = 0, .tp_size = 1,
	.dtype = KVS_DTYPE_FP16,
};

typedef struct replay_opts {
	const char *trace, *policy, *daemon;
	uint64_t capacity_tokens;
	uint32_t block_tokens;
	int json;
} replay_opts;

#define NLEARNED 12

typedef struct replay_result {
	uint64_t input_tokens, hit_tokens, hit_blocks;
	uint64_t new_blocks, exists_blocks, full_blocks, relinked;
	int64_t evicted;
	double seconds;
	replay_count model[REPLAY_NMODELS]; /* the offline models, same trace */
	int64_t learned[NLEARNED]; /* the daemon's policy.* at the end (-1: absent) */
} replay_result;

/* What the daemon's policy learned (docs/operations.md, policy.*), read from
 * its stats at the end of the replay and printed with the result. */
static const char *const learned_names[NLEARNED] = {
	"window_ppm", "bonus_f2_milli", "bonus_f3_milli", "bonus_f4_milli",
	"bonus_f5_milli", "bonus_f6_milli", "bonus_f7_milli", "ghost_returns",
	"window_grew", "window_shrank", "probation_blocks", "protected_blocks",
};

static void learned_read(const char *stats, replay_result *r)
{
	char name[64];

	for (int i = 0; i < NLEARNED; i++) {
		snprintf(name, sizeof(name), "policy.%s", learned_names[i]);
		if (kvs_stats_value(stats, name, &r->learned[i]) < 0)
			r->learned[i] = -1;
	}
}

static kvs_hash id_hash(uint64_t id)
{
	uint64_t z = id + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (kvs_hash){ .lo = z ^ (z >> 31), .hi = id ^ REPLAY_HASH_HI };
}

/* ---- the replay ------------------------------------------------------- */

#define TRY(where, expr)                                                     \
	do {                                                                 \
		rc = (expr);                                                 \
		if (rc < 0) {                                                \
			fprintf(stderr, "kvsbench: replay: %s failed: %s\n", \
				where, kvs_strerror(rc));                    \
			goto out;                                            \
		}                                                            \
	} while (0)

/* Insert or touch block j of a chain (see the top of this file). Returns
 * 0, or 1 when the daemon had no room (the rest of the request is not
 * inserted: its parent link would be missing), or an error. */
static int put_block(kvs_client *c, const kvs_hash *h, uint32_t j,
		     replay_result *res)
{
	kvs_block b[2];
	kvs_lease lease = 0;
	uint32_t n = j ? 2 : 1;
	const kvs_block *mine = &b[n - 1];
	int rc;

	rc = kvs_reserve(c, h + (j ? j - 1 : 0), n, &lease, b);
	if (rc == KVS_E_FULL) {
		res->full_blocks++;
		return 1;
	}
	if (rc < 0) {
		fprintf(stderr, "kvsbench: replay: reserve failed: %s\n",
			kvs_strerror(rc));
		return rc;
	}
	/* h_{j-1} is the most recent block and is there, unless the cache
	 * holds a single block; counted, so a run shows it. */
	if (n == 2 && b[0].status != KVS_BLOCK_EXISTS)
		res->relinked++;
	switch (mine->status) {
	case KVS_BLOCK_NEW:
		res->new_blocks++;
		break;
	case KVS_BLOCK_EXISTS:
		res->exists_blocks++;
		break;
	case KVS_BLOCK_FULL:
		res->full_blocks++;
		break;
	default:
		fprintf(stderr, "kvsbench: replay: reserve answered status %u "
			"(busy) with no other client\n", mine->status);
		kvs_abort(c, lease);
		return KVS_E_INTERNAL;
	}
	if (lease) {
		rc = kvs_commit(c, lease);
		if (rc < 0) {
			fprintf(stderr, "kvsbench: replay: commit failed: %s\n",
				kvs_strerror(rc));
			return rc;
		}
	}
	return mine->status == KVS_BLOCK_FULL ? 1 : 0;
}

static int replay_run(kvs_client *c, const replay_trace *t, uint32_t block_tokens,
		      replay_result *res)
{
	kvs_hash *h = calloc(t->max_n + 1, sizeof(*h));
	kvs_block *b = calloc(t->max_n + 1, sizeof(*b));
	double t0 = now_s();
	int rc = 0;

	if (!h || !b) {
		rc = -ENOMEM;
		fprintf(stderr, "kvsbench: replay: alloc failed: %s\n",
			kvs_strerror(rc));
		goto out;
	}
	for (size_t i = 0; i < t->nreqs; i++) {
		const replay_req *r = &t->reqs[i];
		kvs_lease lease = 0;
		uint64_t hit;
		int k = 0;

		for (uint32_t j = 0; j < r->n; j++)
			h[j] = id_hash(t->ids[r->first + j]);
		if (r->n)
			TRY("lookup", k = kvs_lookup(c, h, r->n, &lease, b));
		if (lease)
			TRY("release", kvs_release(c, lease));
		hit = (uint64_t)k * block_tokens;
		res->hit_tokens += hit < r->input ? hit : r->input;
		res->input_tokens += r->input;
		res->hit_blocks += (uint64_t)k;
		for (uint32_t j = (uint32_t)k; j < r->n; j++) {
			rc = put_block(c, h, j, res);
			if (rc < 0)
				goto out;
			if (rc == 1)
				break;
		}
		rc = 0;
	}
out:
	res->seconds = now_s() - t0;
	free(h);
	free(b);
	return rc;
}

static void replay_usage(void)
{
	fprintf(stderr,
		"usage: kvsbench replay --trace FILE --capacity-tokens C [OPTIONS]\n"
		"Replays a Mooncake-format trace (JSONL: input_length, hash_ids)\n"
		"through a kvshared started for the run, sized for C tokens.\n"
		"  -t, --trace FILE           the trace (one JSON object per line)\n"
		"  -c, --capacity-tokens C    cache capacity in tokens (e.g. 1e6)\n"
		"  -b, --block-tokens B       tokens per hash id (default 512)\n"
		"  -p, --policy P             the daemon's --eviction-policy\n"
		"                             (default: the daemon's default)\n"
		"  -d, --daemon PATH          kvshared to run (default: the one\n"
		"                             beside kvsbench)\n"
		"      --json                 one JSON object line for the result\n"
		"The last line is always \"hit_ratio: X\" (hit tokens / input tokens).\n");
}

/* A count such as 1000000, 1e6 or 3e6. */
static int parse_count(const char *opt, const char *s, uint64_t min,
		       uint64_t max, uint64_t *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || v < (double)min || v > (double)max ||
	    v != (double)(uint64_t)v) {
		fprintf(stderr, "kvsbench: --%s: '%s' is not a whole number in "
			"%" PRIu64 "..%" PRIu64 "\n", opt, s, min, max);
		return -1;
	}
	*out = (uint64_t)v;
	return 0;
}

/* @s as the inside of a JSON string. */
static void put_json_str(const char *s)
{
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned char)*s);
		else
			putchar(*s);
	}
}

static double ratio_of(uint64_t hit, uint64_t input)
{
	return input ? (double)hit / (double)input : 0.0;
}

static void print_result(const replay_opts *o, const replay_trace *t,
			 uint64_t blocks, const replay_result *r)
{
	double ratio = ratio_of(r->hit_tokens, r->input_tokens);
	double opt = ratio_of(r->model[REPLAY_BELADY].hit_tokens,
			      r->model[REPLAY_BELADY].input_tokens);
	double of_opt = opt > 0 ? ratio / opt : 0.0;
	const char *name = strrchr(o->trace, '/');
	const char *pol = o->policy ? o->policy : "(default)";

	name = name ? name + 1 : o->trace;
	if (o->json) {
		printf("{\"bench\":\"replay\",\"trace\":\"");
		put_json_str(name);
		printf("\",\"policy\":\"");
		put_json_str(o->policy ? o->policy : "");
		printf("\",\"requests\":%zu,\"trace_blocks\":%zu,"
		       "\"block_tokens\":%u,\"capacity_tokens\":%" PRIu64
		       ",\"capacity_blocks\":%" PRIu64 ",\"input_tokens\":%" PRIu64
		       ",\"hit_tokens\":%" PRIu64 ",\"hit_blocks\":%" PRIu64
		       ",\"hit_ratio\":%.6f,\"of_optimum\":%.4f,\"new_blocks\":%" PRIu64
		       ",\"exists_blocks\":%" PRIu64 ",\"full_blocks\":%" PRIu64
		       ",\"relinked\":%" PRIu64 ",\"evicted\":%" PRId64
		       ",\"seconds\":%.3f,\"models\":{",
		       t->nreqs, t->nids,
		       o->block_tokens, o->capacity_tokens, blocks,
		       r->input_tokens, r->hit_tokens, r->hit_blocks, ratio,
		       of_opt, r->new_blocks, r->exists_blocks, r->full_blocks,
		       r->relinked, r->evicted, r->seconds);
		for (int m = 0; m < REPLAY_NMODELS; m++)
			printf("%s\"%s\":{\"hit_tokens\":%" PRIu64
			       ",\"hit_ratio\":%.6f}", m ? "," : "",
			       replay_model_name(m), r->model[m].hit_tokens,
			       ratio_of(r->model[m].hit_tokens,
					r->model[m].input_tokens));
		printf("},\"learned\":{");
		for (int i = 0; i < NLEARNED; i++)
			printf("%s\"%s\":%" PRId64, i ? "," : "", learned_names[i],
			       r->learned[i]);
		printf("}}\n");
	} else {
		printf("kvsbench replay: %s, %zu requests, %zu blocks of %u "
		       "tokens\n", name, t->nreqs, t->nids, o->block_tokens);
		printf("%-10s %14s %9s %13s %13s %9s %8s %8s %6s %8s %8s\n",
		       "policy", "capacity_tok", "blocks", "input_tok",
		       "hit_tok", "hit_%", "new", "exists", "full", "evicted",
		       "seconds");
		printf("%-10s %14" PRIu64 " %9" PRIu64 " %13" PRIu64 " %13" PRIu64
		       " %8.2f%% %8" PRIu64 " %8" PRIu64 " %6" PRIu64
		       " %8" PRId64 " %8.2f\n",
		       pol, o->capacity_tokens, blocks, r->input_tokens,
		       r->hit_tokens, ratio * 100.0, r->new_blocks,
		       r->exists_blocks, r->full_blocks, r->evicted, r->seconds);
		printf("offline models (same trace and capacity, no daemon):\n");
		for (int m = 0; m < REPLAY_NMODELS; m++)
			printf("  %-8s %13" PRIu64 " %8.2f%%\n",
			       replay_model_name(m), r->model[m].hit_tokens,
			       100.0 * ratio_of(r->model[m].hit_tokens,
						r->model[m].input_tokens));
		printf("of_optimum: %.3f (the daemon's hit ratio / belady's)\n",
		       of_opt);
		printf("learned (policy.*):");
		for (int i = 0; i < NLEARNED; i++)
			printf(" %s=%" PRId64, learned_names[i], r->learned[i]);
		printf("\n");
	}
	printf("hit_ratio: %.4f\n", ratio);
}

/* The models of the same trace; and the check that the offline LRU is the
 * daemon's "lru" (both count as SOURCES.md does: they must agree to the
 * token, or one of them is wrong). */
static int run_models(const replay_opts *o, const replay_trace *t,
		      uint64_t blocks, replay_result *r)
{
	for (int m = 0; m < REPLAY_NMODELS; m++) {
		int rc = replay_model_run(m, t, blocks, o->block_tokens,
					  &r->model[m]);

		if (rc < 0) {
			fprintf(stderr, "kvsbench: replay: model %s failed: %s\n",
				replay_model_name(m), kvs_strerror(rc));
			return rc;
		}
	}
	if (o->policy && strcmp(o->policy, "lru") == 0 &&
	    r->model[REPLAY_LRU].hit_tokens != r->hit_tokens) {
		fprintf(stderr, "kvsbench: replay: the daemon's lru hit %" PRIu64
			" tokens, the offline lru %" PRIu64 ": they must agree\n",
			r->hit_tokens, r->model[REPLAY_LRU].hit_tokens);
		return KVS_E_INTERNAL;
	}
	return 0;
}

/* The command line into @o, and the blocks its capacity holds into
 * *@blocks. 0: run; 1: --help (usage printed); 2: a usage error (said). */
static int replay_parse(int argc, char **argv, replay_opts *o, uint64_t *blocks)
{
	enum { O_JSON = 256 };
	static const struct option opts[] = {
		{ "trace", required_argument, NULL, 't' },
		{ "capacity-tokens", required_argument, NULL, 'c' },
		{ "block-tokens", required_argument, NULL, 'b' },
		{ "policy", required_argument, NULL, 'p' },
		{ "daemon", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	int opt, bad = 0;

	while ((opt = getopt_long(argc, argv, "t:c:b:p:d:h", opts, NULL)) != -1) {
		switch (opt) {
		case 't': o->trace = optarg; break;
		case 'c':
			bad |= parse_count("capacity-tokens", optarg, 1,
					   UINT64_C(1) << 50, &o->capacity_tokens);
			break;
		case 'b':
			bad |= parse_count("block-tokens", optarg, 1, 1u << 20, &v);
			o->block_tokens = (uint32_t)v;
			break;
		case 'p': o->policy = optarg; break;
		case 'd': o->daemon = optarg; break;
		case O_JSON: o->json = 1; break;
		case 'h': replay_usage(); return 1;
		default: replay_usage(); return 2;
		}
	}
	if (bad || optind < argc || !o->trace || !o->capacity_tokens) {
		if (optind < argc)
			fprintf(stderr, "kvsbench: replay: unexpected argument '%s'\n",
				argv[optind]);
		else if (!bad)
			fprintf(stderr, "kvsbench: replay: --trace and "
				"--capacity-tokens are required\n");
		replay_usage();
		return 2;
	}
	*blocks = o->capacity_tokens / o->block_tokens;
	if (*blocks == 0) {
		fprintf(stderr, "kvsbench: replay: --capacity-tokens %" PRIu64
			" holds no block of %u tokens\n", o->capacity_tokens,
			o->block_tokens);
		return 2;
	}
	return 0;
}

/* The kvshared to run, into @bin[PATH_MAX]: --daemon's, or the one beside
 * kvsbench. */
static int replay_daemon_bin(const replay_opts *o, char *bin)
{
	int rc;

	if (o->daemon) {
		snprintf(bin, PATH_MAX, "%s", o->daemon);
	} else if ((rc = kvsb_daemon_exe(bin, PATH_MAX)) < 0) {
		fprintf(stderr, "kvsbench: replay: finding kvshared failed: %s "
			"(use --daemon)\n", kvs_strerror(rc));
		return rc;
	}
	if (access(bin, X_OK) < 0) {
		rc = -errno;
		fprintf(stderr, "kvsbench: replay: %s failed: %s (use --daemon)\n",
			bin, kvs_strerror(rc));
		return rc;
	}
	return 0;
}

/* @t replayed through a private @bin of @blocks slots (--policy's eviction
 * policy), its hits, evictions and what its policy learned into @res; the
 * daemon stopped after. */
static int replay_in_daemon(const char *bin, const replay_opts *o, const replay_trace *t,
			    uint64_t blocks, replay_result *res)
{
	kvsb_daemon *d = NULL;
	char host_size[32], *stats = NULL;
	const char *args[] = { "--page-size", "4K", "--host-size", host_size,
			       "--log-level", "warn", NULL, NULL, NULL };
	kvs_client *c = NULL;
	int rc;

	snprintf(host_size, sizeof(host_size), "%" PRIu64, blocks * SLOT_BYTES);
	if (o->policy) {
		args[6] = "--eviction-policy";
		args[7] = o->policy;
	}
	rc = kvsb_daemon_start_exe(bin, args, READY_TIMEOUT_S, &d);
	if (rc < 0) {
		if (rc == -ECHILD)
			fprintf(stderr, "kvsbench: replay: %s exited before it "
				"was ready\n", bin);
		else
			fprintf(stderr, "kvsbench: replay: starting %s failed: "
				"%s\n", bin, kvs_strerror(rc));
		return rc;
	}
	/* Over the socket: fast-path hits reach the policy when the daemon
	 * drains their ring, not at the lookup, so the order of touches (and
	 * the hit ratio) would depend on timing (an lru run at 3e6 tokens gave
	 * 19,202,514 to 19,295,186 hit tokens where the model gives 19,281,874). */
	TRY("connect", kvs_connect_flags(kvsb_daemon_socket(d), &replay_layout,
					 KVS_CONNECT_NO_FASTPATH, &c));
	if (kvs_block_bytes(c) != SLOT_BYTES) {
		rc = KVS_E_PROTO;
		fprintf(stderr, "kvsbench: replay: the daemon's block is %" PRIu64
			" bytes, not %u\n", kvs_block_bytes(c), SLOT_BYTES);
		goto out;
	}
	TRY("replay", replay_run(c, t, o->block_tokens, res));
	TRY("stats", kvs_stats(c, &stats));
	if (kvs_stats_value(stats, "blocks.evicted", &res->evicted) < 0)
		res->evicted = -1;
	learned_read(stats, res);
	kvs_close(c);
	c = NULL;
	rc = kvsb_daemon_stop(d);
	d = NULL;
	if (rc < 0)
		fprintf(stderr, "kvsbench: replay: kvshared did not exit cleanly "
			"on SIGTERM: %s\n", kvs_strerror(rc));
out:
	kvs_close(c);
	kvsb_daemon_stop(d);
	free(stats);
	return rc;
}

int kvsbench_replay(const char *sock, int argc, char **argv)
{
	replay_opts o = { .block_tokens = 512 };
	replay_result res = { .evicted = -1 };
	char bin[PATH_MAX];
	replay_trace t = { 0 };
	uint64_t blocks;
	int rc;

	rc = replay_parse(argc, argv, &o, &blocks);
	if (rc)
		return rc == 1 ? 0 : 2;
	if (sock)
		fprintf(stderr, "kvsbench: replay: --socket ignored: the replay "
			"runs its own daemon\n");
	if (kvs_layout_block_bytes(&replay_layout) != SLOT_BYTES) {
		fprintf(stderr, "kvsbench: replay: layout failed: %s\n",
			kvs_strerror(KVS_E_INTERNAL));
		return 1;
	}
	if (replay_daemon_bin(&o, bin) < 0 || replay_trace_load(o.trace, &t) < 0)
		return 1;
	rc = replay_in_daemon(bin, &o, &t, blocks, &res);
	if (rc >= 0)
		rc = run_models(&o, &t, blocks, &res);
	if (rc >= 0)
		print_result(&o, &t, blocks, &res);
	replay_trace_free(&t);
	return rc < 0 ? 1 : 0;
}
