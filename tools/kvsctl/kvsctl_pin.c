/*
 * kvsctl_pin.c - kvsctl pin, unpin, prefix and watch, on the public API only.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvsctl.h"
#include "kvshare.h"
#include "kvshare_admin.h"

/* ---- pin / unpin ------------------------------------------------------- */

static int pinning;

static void pin_usage(void)
{
	const char *cmd = pinning ? "pin" : "unpin";

	fprintf(stderr,
		"usage: kvsctl [--socket PATH] %s [--namespace N] [--json]\n"
		"              (--hashes FILE | --tokens FILE --model M --layers L\n"
		"               --kv-heads H --head-dim D --block-tokens B [--dtype T]\n"
		"               [--tp-rank R --tp-size S] [--adapter A] [--salt S])\n"
		"  %s a prefix: every cached block of the chain from its first block\n"
		"  to the first one that is not cached. Operator pins belong to the\n"
		"  daemon (they outlive this command), are never evicted, and are bounded\n"
		"  by kvshared --max-pinned-share (refused beyond it).\n"
		"  --hashes FILE   the chain: one 32 hex digit hash per line ('-': stdin)\n"
		"  --tokens FILE   token ids (blank or comma separated), hashed with the\n"
		"                  layout given by the other flags, as a worker would\n"
		"  -n, --namespace N  the namespace (default: the one holding the first block)\n"
		"  -j, --json      {\"blocks\":n,\"chain\":m}\n",
		cmd, pinning ? "pin" : "unpin");
}

static FILE *open_in(const char *path)
{
	return strcmp(path, "-") ? fopen(path, "r") : stdin;
}

static int read_hashes(const char *path, kvs_hash **out, size_t *n)
{
	FILE *f = open_in(path);
	char line[256];
	size_t cap = 0;
	int lineno = 0;

	*out = NULL;
	*n = 0;
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *s = line + strspn(line, " \t");

		lineno++;
		s[strcspn(s, " \t\r\n")] = '\0';
		if (!*s || *s == '#')
			continue;
		if (*n == cap) {
			kvs_hash *nh = realloc(*out, (cap = cap ? cap * 2 : 64) * sizeof(**out));

			if (!nh)
				return -ENOMEM;
			*out = nh;
		}
		if (kvs_hash_parse(s, &(*out)[*n]) < 0) {
			fprintf(stderr, "kvsctl: %s:%d: '%s' is not 32 hex digits\n",
				path, lineno, s);
			return -EINVAL;
		}
		(*n)++;
	}
	if (f != stdin)
		fclose(f);
	return 0;
}

static int read_tokens(const char *path, uint32_t **out, size_t *n)
{
	FILE *f = open_in(path);
	size_t cap = 0;
	int ch;

	*out = NULL;
	*n = 0;
	if (!f)
		return -errno;
	for (;;) {
		char word[32];
		size_t len = 0;
		uint32_t v;

		while ((ch = fgetc(f)) != EOF && (ch == ' ' || ch == '\t' ||
						  ch == '\n' || ch == '\r' || ch == ','))
			;
		if (ch == EOF)
			break;
		while (ch != EOF && !(ch == ' ' || ch == '\t' || ch == '\n' ||
				      ch == '\r' || ch == ',') && len + 1 < sizeof(word)) {
			word[len++] = (char)ch;
			ch = fgetc(f);
		}
		word[len] = '\0';
		if (kvsctl_parse_u32(word, &v) < 0) {
			fprintf(stderr, "kvsctl: %s: '%s' is not a token id\n", path, word);
			return -EINVAL;
		}
		if (*n == cap) {
			uint32_t *nt = realloc(*out, (cap = cap ? cap * 2 : 1024) * sizeof(**out));

			if (!nt)
				return -ENOMEM;
			*out = nt;
		}
		(*out)[(*n)++] = v;
	}
	if (f != stdin)
		fclose(f);
	return 0;
}

/* The flags pin, unpin and prefix share: a chain by its hashes or by token
 * ids and the layout that hashes them. */
typedef struct chain_args {
	kvs_layout l;
	uint32_t ns;
	int json;
	kvs_hash *h;
	size_t n;
} chain_args;

/* The chain of @a, from a file of hashes (@hfile) or of tokens (@tfile,
 * hashed under @a's layout). -1: read; else the exit status (said). */
static int chain_read(const char *cmd, const char *hfile, const char *tfile, chain_args *a)
{
	const kvs_layout *l = &a->l;
	uint32_t *tok = NULL;
	size_t ntok = 0;
	int rc;

	if (hfile) {
		rc = read_hashes(hfile, &a->h, &a->n);
	} else {
		rc = read_tokens(tfile, &tok, &ntok);
		if (rc == 0 && !(a->h = malloc((ntok / l->block_tokens + 1) *
					       sizeof(*a->h))))
			rc = -ENOMEM;
		if (rc == 0)
			a->n = kvs_hash_chain(kvs_hash_layout_seed(l), l->block_tokens,
					      tok, ntok, a->h,
					      ntok / l->block_tokens + 1);
		free(tok);
	}
	if (rc < 0) {
		free(a->h);
		return kvsctl_fail(hfile ? "reading hashes" : "reading tokens", rc);
	}
	if (a->n == 0) {
		free(a->h);
		fprintf(stderr, "kvsctl: %s: no full block in the input\n", cmd);
		return 1;
	}
	return -1;
}

/* Parse them and compute the chain into a->h (the caller frees it).
 * Returns -1 when it is ready, else the command's exit code. */
static int chain_parse(const char *cmd, void (*usage)(void), int argc,
		       char **argv, chain_args *a)
{
	enum { O_HASHES = 256, O_TOKENS, O_MODEL, O_LAYERS, O_HEADS, O_DIM,
	       O_BT, O_DTYPE, O_RANK, O_SIZE, O_ADAPTER, O_SALT };
	static const struct option opts[] = {
		{ "namespace", required_argument, NULL, 'n' },
		{ "hashes", required_argument, NULL, O_HASHES },
		{ "tokens", required_argument, NULL, O_TOKENS },
		{ "model", required_argument, NULL, O_MODEL },
		{ "layers", required_argument, NULL, O_LAYERS },
		{ "kv-heads", required_argument, NULL, O_HEADS },
		{ "head-dim", required_argument, NULL, O_DIM },
		{ "block-tokens", required_argument, NULL, O_BT },
		{ "dtype", required_argument, NULL, O_DTYPE },
		{ "tp-rank", required_argument, NULL, O_RANK },
		{ "tp-size", required_argument, NULL, O_SIZE },
		{ "adapter", required_argument, NULL, O_ADAPTER },
		{ "salt", required_argument, NULL, O_SALT },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *hfile = NULL, *tfile = NULL;
	kvs_layout *l = &a->l;
	uint32_t *u = NULL;
	int o;

	memset(a, 0, sizeof(*a));
	l->tp_size = 1;
	l->dtype = KVS_DTYPE_FP16;
	while ((o = getopt_long(argc, argv, "n:jh", opts, NULL)) != -1) {
		u = NULL;
		switch (o) {
		case 'n': u = &a->ns; break;
		case O_HASHES: hfile = optarg; break;
		case O_TOKENS: tfile = optarg; break;
		case O_MODEL: l->model = optarg; break;
		case O_ADAPTER: l->adapter = optarg; break;
		case O_SALT: l->salt = optarg; break;
		case O_LAYERS: u = &l->layers; break;
		case O_HEADS: u = &l->kv_heads; break;
		case O_DIM: u = &l->head_dim; break;
		case O_BT: u = &l->block_tokens; break;
		case O_RANK: u = &l->tp_rank; break;
		case O_SIZE: u = &l->tp_size; break;
		case O_DTYPE:
			if (kvs_dtype_parse(optarg, &l->dtype) < 0) {
				fprintf(stderr, "kvsctl: %s: --dtype must be fp16, bf16, "
					"fp32, fp8, int8 or int4\n", cmd);
				return 2;
			}
			break;
		case 'j': a->json = 1; break;
		case 'h': usage(); return 0;
		default: usage(); return 2;
		}
		if (u && kvsctl_parse_u32(optarg, u) < 0) {
			fprintf(stderr, "kvsctl: %s: '%s' is not a number\n", cmd, optarg);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvsctl: %s: unexpected argument '%s'\n", cmd, argv[optind]);
		usage();
		return 2;
	}
	if (!hfile == !tfile) {
		fprintf(stderr, "kvsctl: %s: give one of --hashes, --tokens\n", cmd);
		usage();
		return 2;
	}
	if (tfile && (!l->model || !l->layers || !l->kv_heads || !l->head_dim ||
		      !l->block_tokens)) {
		fprintf(stderr, "kvsctl: %s: --tokens needs --model, --layers, "
			"--kv-heads, --head-dim and --block-tokens\n", cmd);
		return 2;
	}
	return chain_read(cmd, hfile, tfile, a);
}

static int pin_run(const char *sock, int argc, char **argv)
{
	const char *cmd = pinning ? "pin" : "unpin";
	chain_args a;
	kvs_client *c;
	int rc;

	if ((rc = chain_parse(cmd, pin_usage, argc, argv, &a)) >= 0)
		return rc;
	if ((rc = kvs_connect(sock, NULL, &c)) < 0) {
		free(a.h);
		return kvsctl_fail("connect", rc);
	}
	rc = pinning ? kvs_pin(c, a.ns, a.h, a.n) : kvs_unpin(c, a.ns, a.h, a.n);
	kvs_close(c);
	free(a.h);
	if (rc < 0)
		return kvsctl_fail(cmd, rc);
	if (a.json)
		printf("{\"blocks\":%d,\"chain\":%zu}\n", rc, a.n);
	else if (pinning)
		printf("pin: %d of %zu blocks of the chain pinned%s\n", rc, a.n,
		       (size_t)rc < a.n ? " (the rest is not cached)" : "");
	else
		printf("unpin: %d blocks unpinned (chain of %zu)\n", rc, a.n);
	return fflush(stdout) == 0 ? 0 : 1;
}

int kvsctl_pin(const char *sock, int argc, char **argv)
{
	pinning = 1;
	return pin_run(sock, argc, argv);
}

int kvsctl_unpin(const char *sock, int argc, char **argv)
{
	pinning = 0;
	return pin_run(sock, argc, argv);
}

/* ---- prefix ------------------------------------------------------------ */

static void prefix_usage(void)
{
	fprintf(stderr,
		"usage: kvsctl [--socket PATH] prefix [--namespace N] [--json]\n"
		"              (--hashes FILE [--block-tokens B] | --tokens FILE --model M\n"
		"               --layers L --kv-heads H --head-dim D --block-tokens B\n"
		"               [--dtype T] [--tp-rank R --tp-size S] [--adapter A] [--salt S])\n"
		"  How many leading tokens of a prompt the daemon's pool holds, per tier\n"
		"  (a scheduler's question; POST /v1/prefix on the metrics port answers\n"
		"  the same). Nothing is pinned or moved: the answer is a hint.\n"
		"  --hashes FILE   the chain: one 32 hex digit hash per line ('-': stdin)\n"
		"  --tokens FILE   token ids (blank or comma separated), hashed with the\n"
		"                  layout given by the other flags, as a worker would\n"
		"  -n, --namespace N  the namespace (default: the one holding the first block)\n"
		"  -j, --json      {\"tokens\":n,\"blocks\":n,\"block_tokens\":b,\n"
		"                   \"tiers\":{\"gpu\":n,\"host\":n,\"ssd\":n},\"chain\":m}\n");
}

/* The chain's blocks from the first to the first one not committed, one
 * INSPECT each: *ns becomes the namespace of the first. Returns the count
 * or an error. */
static int prefix_walk(kvs_client *c, const chain_args *a, uint32_t *ns,
		       uint32_t tiers[KVS_TIER_REMOTE + 1])
{
	size_t i;

	*ns = a->ns;
	for (i = 0; i < a->n; i++) {
		kvs_block_info b;
		int rc = kvs_inspect(c, *ns, a->h[i], &b);

		if (rc == -ENOENT)
			break;
		if (rc < 0)
			return rc;
		if (b.state != KVS_STATE_READY || b.tier > KVS_TIER_REMOTE)
			break;
		*ns = b.ns;
		tiers[b.tier]++;
	}
	return (int)i;
}

int kvsctl_prefix(const char *sock, int argc, char **argv)
{
	uint32_t tiers[KVS_TIER_REMOTE + 1] = { 0 }, ns, bt;
	kvs_ns_summary *sum = NULL;
	chain_args a;
	kvs_client *c;
	int rc;

	if ((rc = chain_parse("prefix", prefix_usage, argc, argv, &a)) >= 0)
		return rc;
	if ((rc = kvs_connect(sock, NULL, &c)) < 0) {
		free(a.h);
		return kvsctl_fail("connect", rc);
	}
	rc = prefix_walk(c, &a, &ns, tiers);
	bt = a.l.block_tokens;
	/* Hashes alone: the block size is the namespace's. */
	if (rc > 0 && !bt && kvs_list(c, ns, 0, &sum) > 0)
		bt = sum[0].block_tokens;
	free(sum);
	kvs_close(c);
	free(a.h);
	if (rc < 0)
		return kvsctl_fail("prefix", rc);
	if (a.json)
		printf("{\"tokens\":%llu,\"blocks\":%d,\"block_tokens\":%u,"
		       "\"tiers\":{\"gpu\":%u,\"host\":%u,\"ssd\":%u},\"chain\":%zu}\n",
		       (unsigned long long)rc * bt, rc, bt, tiers[KVS_TIER_GPU],
		       tiers[KVS_TIER_HOST], tiers[KVS_TIER_SSD], a.n);
	else
		printf("prefix: %llu tokens (%d of %zu blocks of %u): host %u, "
		       "ssd %u, gpu %u\n", (unsigned long long)rc * bt, rc, a.n,
		       bt, tiers[KVS_TIER_HOST], tiers[KVS_TIER_SSD],
		       tiers[KVS_TIER_GPU]);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- watch ------------------------------------------------------------- */

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	stop = 1;
}

static void watch_usage(void)
{
	fprintf(stderr,
		"usage: kvsctl [--socket PATH] watch [--json] [--count N]\n"
		"  stream the daemon's KV events, one line each, until Ctrl-C:\n"
		"  stored (committed), evicted, flushed, pinned, unpinned; with the\n"
		"  namespace and block hash. The daemon drops events this watcher\n"
		"  cannot take in time (a gap in seq; stats: events.dropped); a line\n"
		"  \"-- N event(s) dropped before seq S: ...\" says so where it happened.\n"
		"  -j, --json     {\"seq\":n,\"event\":\"stored\",\"namespace\":n,\"hash\":\"..\"}\n"
		"  -c, --count N  exit after N events\n");
}

int kvsctl_watch(const char *sock, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "count", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sigaction sa = { .sa_handler = on_stop };
	uint32_t count = 0, seen = 0;
	uint64_t told = 0;
	kvs_watch *w;
	int json = 0, o, rc;

	while ((o = getopt_long(argc, argv, "jc:h", opts, NULL)) != -1) {
		switch (o) {
		case 'j': json = 1; break;
		case 'c':
			if (kvsctl_parse_u32(optarg, &count) < 0 || count == 0) {
				fprintf(stderr, "kvsctl: watch: bad count '%s'\n", optarg);
				return 2;
			}
			break;
		case 'h': watch_usage(); return 0;
		default: watch_usage(); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvsctl: watch: unexpected argument '%s'\n", argv[optind]);
		watch_usage();
		return 2;
	}
	if ((rc = kvs_watch_open(sock, &w)) < 0)
		return kvsctl_fail("watch", rc);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* The subscription is live: say so, for scripts that act next. */
	fprintf(stderr, "kvsctl: watching\n");
	while (!stop && (!count || seen < count)) {
		kvs_event ev;
		char hx[33];

		rc = kvs_watch_next(w, &ev, 200);
		if (rc == 0 || rc == -EINTR)
			continue;
		if (rc < 0)
			break;
		kvs_hash_format(ev.hash, hx);
		if (json)
			printf("{\"seq\":%" PRIu64 ",\"event\":\"%s\",\"namespace\":%u,"
			       "\"hash\":\"%s\",\"dropped\":%" PRIu64 "}\n", ev.seq,
			       kvs_event_name(ev.kind), ev.ns, hx, kvs_watch_dropped(w));
		else if (kvs_watch_dropped(w) > told)
			/* Said before the event after the gap, where it
			 * happened, as the JSON lines' "dropped" does. */
			printf("-- %" PRIu64 " event(s) dropped before seq %" PRIu64
			       ": this watcher fell behind (%" PRIu64 " in all)\n",
			       kvs_watch_dropped(w) - told, ev.seq,
			       kvs_watch_dropped(w));
		if (!json)
			printf("%-8" PRIu64 " %-8s ns %-4u %s\n", ev.seq,
			       kvs_event_name(ev.kind), ev.ns, hx);
		told = kvs_watch_dropped(w);
		fflush(stdout);
		seen++;
	}
	kvs_watch_close(w);
	if (rc < 0 && rc != -EINTR)
		return kvsctl_fail("watch", rc);
	return 0;
}
