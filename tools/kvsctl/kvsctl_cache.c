/*
 * kvsctl_cache.c - kvsctl's commands on what is cached: ls, inspect,
 * evict/flush, pin/unpin, watch, verify. On the public API only (kvshare.h,
 * kvshare_admin.h).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvsctl.h"
#include "kvshare.h"
#include "kvshare_admin.h"

static const char *tier_name(kvs_tier t)
{
	switch (t) {
	case KVS_TIER_GPU: return "gpu";
	case KVS_TIER_HOST: return "host";
	case KVS_TIER_SSD: return "ssd";
	default: return "none";
	}
}

static const char *state_name(kvs_block_state s)
{
	switch (s) {
	case KVS_STATE_WRITING: return "writing";
	case KVS_STATE_READY: return "ready";
	case KVS_STATE_GHOST: return "ghost";
	}
	return "unknown";
}

/* A subcommand with no positional arguments but what it names. */
static int extra_args(const char *cmd, int argc, char **argv, int want,
		      void (*usage)(void))
{
	if (argc - optind != want) {
		if (argc - optind > want)
			fprintf(stderr, "kvsctl: %s: unexpected argument '%s'\n", cmd,
				argv[optind + want]);
		else
			fprintf(stderr, "kvsctl: %s: missing argument\n", cmd);
		usage();
		return 1;
	}
	return 0;
}

/* ---- ls ---------------------------------------------------------------- */

static void ls_usage(void)
{
	fprintf(stderr,
		"usage: kvsctl [--socket PATH] ls [--namespace N] [--top K] [--json]\n"
		"  namespaces: layout, block size, blocks, hits, operator pins, and a\n"
		"  summary of the cached prefix trees (roots, longest chain, the K most\n"
		"  hit prefixes by their leaf-most block's hits, then their first's)\n"
		"  -n, --namespace N  only namespace N\n"
		"  -t, --top K        prefixes per namespace, 0..%d (default 5)\n"
		"  With per-uid tenant arenas (kvshared --tenant-arenas uid) each\n"
		"  namespace shows the uid owning its arena (JSON: tenant_uid, else null).\n"
		"  -j, --json         {\"namespaces\":[{...,\"trees\":{...},\n"
		"                     \"top_prefixes\":[...]}]}\n",
		KVS_LIST_TOP_MAX);
}

static void ls_json(const kvs_ns_summary *v, int n)
{
	char hx[33];

	fputs("{\"namespaces\":[", stdout);
	for (int i = 0; i < n; i++) {
		const kvs_ns_summary *s = &v[i];

		printf("%s{\"id\":%u,\"model\":", i ? "," : "", s->id);
		kvsctl_json_str(s->model);
		fputs(",\"adapter\":", stdout);
		kvsctl_json_str(s->adapter);
		printf(",\"salted\":%s,\"layers\":%u,\"kv_heads\":%u,\"head_dim\":%u,"
		       "\"dtype\":\"%s\",\"block_tokens\":%u,\"tp_rank\":%u,"
		       "\"tp_size\":%u,\"block_bytes\":%" PRIu64 ",\"blocks\":%" PRIu64
		       ",\"bytes\":%" PRIu64 ",\"writing\":%" PRIu64 ",\"hits\":%" PRIu64
		       ",\"pinned\":%" PRIu64 ",\"clients\":%u,",

		       s->salted ? "true" : "false", s->layers, s->kv_heads,
		       s->head_dim, kvs_dtype_name(s->dtype), s->block_tokens,
		       s->tp_rank, s->tp_size, s->block_bytes, s->blocks,
		       s->blocks * s->block_bytes, s->writing, s->hits, s->pinned,
		       s->clients);
		if (s->tenant)
			printf("\"tenant_uid\":%u,", s->uid);
		else
			fputs("\"tenant_uid\":null,", stdout);
		printf("\"trees\":{\"roots\":%u,\"longest_chain\":%u},"
		       "\"top_prefixes\":[", s->roots, s->longest);
		for (uint32_t j = 0; j < s->ntop; j++) {
			kvs_hash_format(s->top[j].hash, hx);
			printf("%s{\"hash\":\"%s\",\"depth\":%u,\"hits\":%" PRIu64
			       ",\"root_hits\":%" PRIu64 ",\"pinned\":%s}",
			       j ? "," : "", hx, s->top[j].depth, s->top[j].hits,
			       s->top[j].root_hits, s->top[j].pinned ? "true" : "false");
		}
		fputs("]}", stdout);
	}
	fputs("]}\n", stdout);
}

static void ls_human(const kvs_ns_summary *v, int n)
{
	char hx[33];

	if (n == 0)
		printf("no namespaces (no worker has attached yet)\n");
	for (int i = 0; i < n; i++) {
		const kvs_ns_summary *s = &v[i];

		printf("%snamespace %u: model %s%s%s%s\n", i ? "\n" : "", s->id,
		       s->model, *s->adapter ? ", adapter " : "", s->adapter,
		       s->salted ? ", salted" : "");
		printf("  layout    %u layers x %u kv heads x %u dim, %s, %u tokens/block, "
		       "tp %u/%u\n", s->layers, s->kv_heads, s->head_dim,
		       kvs_dtype_name(s->dtype), s->block_tokens, s->tp_rank, s->tp_size);
		printf("  blocks    %" PRIu64 " x %" PRIu64 " bytes = %.1f MiB, %" PRIu64
		       " being written, %" PRIu64 " pinned\n", s->blocks,
		       s->block_bytes, (double)(s->blocks * s->block_bytes) / 1048576.0,
		       s->writing, s->pinned);
		printf("  hits      %" PRIu64 "   clients %u\n", s->hits, s->clients);
		if (s->tenant)
			printf("  tenant    uid %u (its own host arena)\n", s->uid);
		printf("  trees     %u roots, longest chain %u blocks\n", s->roots,
		       s->longest);
		for (uint32_t j = 0; j < s->ntop; j++) {
			kvs_hash_format(s->top[j].hash, hx);
			printf("  %s %s  depth %u, hits %" PRIu64 ", first block hits %"
			       PRIu64 "%s\n", j ? "      " : "top   ", hx,
			       s->top[j].depth, s->top[j].hits, s->top[j].root_hits,
			       s->top[j].pinned ? ", pinned" : "");
		}
	}
}

int kvsctl_ls(const char *sock, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "namespace", required_argument, NULL, 'n' },
		{ "top", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint32_t ns = 0, top = 5;
	kvs_ns_summary *v;
	kvs_client *c;
	int json = 0, o, rc;

	while ((o = getopt_long(argc, argv, "n:t:jh", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (kvsctl_parse_u32(optarg, &ns) < 0 || ns == 0) {
				fprintf(stderr, "kvsctl: ls: bad namespace '%s'\n", optarg);
				return 2;
			}
			break;
		case 't':
			if (kvsctl_parse_u32(optarg, &top) < 0 || top > KVS_LIST_TOP_MAX) {
				fprintf(stderr, "kvsctl: ls: --top must be 0..%d\n",
					KVS_LIST_TOP_MAX);
				return 2;
			}
			break;
		case 'j': json = 1; break;
		case 'h': ls_usage(); return 0;
		default: ls_usage(); return 2;
		}
	}
	if (extra_args("ls", argc, argv, 0, ls_usage))
		return 2;
	if ((rc = kvs_connect(sock, NULL, &c)) < 0)
		return kvsctl_fail("connect", rc);
	rc = kvs_list(c, ns, top, &v);
	kvs_close(c);
	if (rc < 0)
		return kvsctl_fail("ls", rc);
	if (json)
		ls_json(v, rc);
	else
		ls_human(v, rc);
	free(v);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- inspect ----------------------------------------------------------- */

static void inspect_usage(void)
{
	fprintf(stderr,
		"usage: kvsctl [--socket PATH] inspect [--namespace N] [--json] HASH\n"
		"  one block, by its 32 hex digit hash as ls and watch print it:\n"
		"  namespace, tier, offset, generation, refs (lease pins + operator pin),\n"
		"  state, parent, children, hits, age (seconds since stored or last hit)\n"
		"  -n, --namespace N  look only in namespace N (default: any)\n"
		"  -j, --json         one JSON object\n");
}

/* What inspect prints of @bi: a JSON object, or one field a line. */
static void inspect_print(const kvs_block_info *bi, int json)
{
	char hx[33], px[33] = "";

	kvs_hash_format(bi->hash, hx);
	if (bi->has_parent)
		kvs_hash_format(bi->parent, px);
	if (json) {
		printf("{\"hash\":\"%s\",\"namespace\":%u,\"tier\":\"%s\",\"state\":\"%s\","
		       "\"offset\":%" PRIu64 ",\"generation\":%u,\"refs\":%u,"
		       "\"pinned\":%s,\"parent\":", hx, bi->ns, tier_name(bi->tier),
		       state_name(bi->state), bi->offset, bi->gen, bi->refs,
		       bi->pinned ? "true" : "false");
		if (bi->has_parent)
			printf("\"%s\"", px);
		else
			fputs("null", stdout);
		printf(",\"children\":%u,\"depth\":%u,\"hits\":%u,\"age_s\":%" PRIu64 "}\n",
		       bi->children, bi->depth, bi->hits, bi->age_s);
	} else {
		printf("block      %s\n"
		       "namespace  %u\n"
		       "state      %s\n"
		       "tier       %s\n"
		       "offset     %" PRIu64 "\n"
		       "generation %u\n"
		       "refs       %u%s\n"
		       "parent     %s\n"
		       "children   %u\n"
		       "depth      %u\n"
		       "hits       %u\n"
		       "age        %" PRIu64 " s\n",
		       hx, bi->ns, state_name(bi->state), tier_name(bi->tier), bi->offset,
		       bi->gen, bi->refs, bi->pinned ? " (pinned by an operator)" : "",
		       bi->has_parent ? px : "none (first block of a prefix)",
		       bi->children, bi->depth, bi->hits, bi->age_s);
	}
}

int kvsctl_inspect(const char *sock, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "namespace", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint32_t ns = 0;
	kvs_block_info bi;
	kvs_client *c;
	kvs_hash h;
	int json = 0, o, rc;

	while ((o = getopt_long(argc, argv, "n:jh", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (kvsctl_parse_u32(optarg, &ns) < 0 || ns == 0) {
				fprintf(stderr, "kvsctl: inspect: bad namespace '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'j': json = 1; break;
		case 'h': inspect_usage(); return 0;
		default: inspect_usage(); return 2;
		}
	}
	if (extra_args("inspect", argc, argv, 1, inspect_usage))
		return 2;
	if (kvs_hash_parse(argv[optind], &h) < 0) {
		fprintf(stderr, "kvsctl: inspect: '%s' is not 32 hex digits\n",
			argv[optind]);
		return 2;
	}
	if ((rc = kvs_connect(sock, NULL, &c)) < 0)
		return kvsctl_fail("connect", rc);
	rc = kvs_inspect(c, ns, h, &bi);
	kvs_close(c);
	if (rc == -ENOENT) {
		char where[32] = "in any namespace";

		if (ns)
			snprintf(where, sizeof(where), "in namespace %u", ns);
		fprintf(stderr, "kvsctl: inspect failed: block %s is not cached (%s)\n",
			argv[optind], where);
		return 1;
	}
	if (rc < 0)
		return kvsctl_fail("inspect", rc);
	inspect_print(&bi, json);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- evict / flush ----------------------------------------------------- */

static int flushing;

static void evict_usage(void)
{
	const char *cmd = flushing ? "flush" : "evict";

	fprintf(stderr,
		"usage: kvsctl [--socket PATH] %s (--namespace N | --prefix HASH | --all)\n"
		"              [--json]\n"
		"  free the unpinned committed blocks of a namespace, of a prefix (the\n"
		"  block HASH and every block under it), or of every namespace, leaves\n"
		"  first; pinned blocks (by a lease or kvsctl pin) and their prefixes\n"
		"  stay and are counted as skipped. %s\n"
		"  -n, --namespace N  with --prefix: look for HASH only in namespace N\n"
		"  -j, --json         {\"freed\":n,\"skipped_pinned\":n,\"skipped_prefix\":n}\n",
		cmd, flushing ? "flush: gone from every tier (watch: \"flushed\")"
			      : "evict: leaves the host tier (watch: \"evicted\")");
}

static int evict_run(const char *sock, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "namespace", required_argument, NULL, 'n' },
		{ "prefix", required_argument, NULL, 'p' },
		{ "all", no_argument, NULL, 'a' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *cmd = flushing ? "flush" : "evict";
	kvs_evict_scope scope = 0;
	kvs_evict_result res;
	kvs_hash h = { 0, 0 };
	uint32_t ns = 0;
	kvs_client *c;
	int json = 0, o, rc, all = 0, prefix = 0;

	while ((o = getopt_long(argc, argv, "n:p:ajh", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (kvsctl_parse_u32(optarg, &ns) < 0 || ns == 0) {
				fprintf(stderr, "kvsctl: %s: bad namespace '%s'\n", cmd,
					optarg);
				return 2;
			}
			break;
		case 'p':
			if (kvs_hash_parse(optarg, &h) < 0) {
				fprintf(stderr, "kvsctl: %s: '%s' is not 32 hex digits\n",
					cmd, optarg);
				return 2;
			}
			prefix = 1;
			break;
		case 'a': all = 1; break;
		case 'j': json = 1; break;
		case 'h': evict_usage(); return 0;
		default: evict_usage(); return 2;
		}
	}
	if (extra_args(cmd, argc, argv, 0, evict_usage))
		return 2;
	if (all + prefix + (ns && !prefix) != 1) {
		fprintf(stderr, "kvsctl: %s: give one of --namespace, --prefix, --all\n",
			cmd);
		evict_usage();
		return 2;
	}
	scope = all ? KVS_SCOPE_ALL : prefix ? KVS_SCOPE_PREFIX : KVS_SCOPE_NAMESPACE;
	if ((rc = kvs_connect(sock, NULL, &c)) < 0)
		return kvsctl_fail("connect", rc);
	rc = kvs_evict(c, scope, ns, h, flushing, &res);
	kvs_close(c);
	if (rc < 0)
		return kvsctl_fail(cmd, rc);
	if (json)
		printf("{\"freed\":%" PRIu64 ",\"skipped_pinned\":%" PRIu64
		       ",\"skipped_prefix\":%" PRIu64 "}\n", res.freed, res.pinned,
		       res.kept);
	else
		printf("%s: %" PRIu64 " blocks freed; skipped %" PRIu64 " pinned and %"
		       PRIu64 " that are prefixes of pinned blocks\n", cmd, res.freed,
		       res.pinned, res.kept);
	return fflush(stdout) == 0 ? 0 : 1;
}

int kvsctl_evict(const char *sock, int argc, char **argv)
{
	flushing = 0;
	return evict_run(sock, argc, argv);
}

int kvsctl_flush(const char *sock, int argc, char **argv)
{
	flushing = 1;
	return evict_run(sock, argc, argv);
}

/* ---- verify ------------------------------------------------------------ */

#define VERIFY_FAILED_DEFAULT 100

static void verify_usage(void)
{
	fprintf(stderr,
		"usage: kvsctl [--socket PATH] verify [--namespace N] [--max-failed K]\n"
		"              [--json]\n"
		"  read back every block of the SSD tier and check it against its header\n"
		"  and checksums; a block that fails is dropped from the SSD tier (a copy\n"
		"  in host RAM stays). Waits until every block was read (no deadline\n"
		"  unless kvsctl --timeout or $KVSHARE_TIMEOUT_MS sets one).\n"
		"  -n, --namespace N   only the blocks of namespace N\n"
		"  -k, --max-failed K  list at most K failures (default %d, at most %d);\n"
		"                      all are counted\n"
		"  -j, --json          {\"ssd_tier\":b,\"checked\":n,\"ok\":n,\"failed\":n,\n"
		"                      \"skipped\":n,\"failures\":[{\"hash\":h,\"namespace\":n,\n"
		"                      \"errno\":e,\"error\":s}]}\n"
		"  exit: 0 every block checked is good (or no SSD tier), 3 some failed,\n"
		"        1 the request failed, 2 usage\n",
		VERIFY_FAILED_DEFAULT, KVS_VERIFY_FAILED_MAX);
}

/* What verify prints of @res and its listed failures @f: a JSON object, or
 * a summary and a failure a line. */
static void verify_print(const kvs_verify_result *res, const kvs_verify_failure *f, int json)
{
	if (json) {
		printf("{\"ssd_tier\":%s,\"checked\":%" PRIu64 ",\"ok\":%" PRIu64
		       ",\"failed\":%" PRIu64 ",\"skipped\":%" PRIu64 ",\"failures\":[",
		       res->ssd_tier ? "true" : "false", res->checked, res->ok,
		       res->failed, res->skipped);
		for (uint32_t i = 0; i < res->listed; i++) {
			char hex[33];

			kvs_hash_format(f[i].hash, hex);
			printf("%s{\"hash\":\"%s\",\"namespace\":%u,\"errno\":%d,"
			       "\"error\":", i ? "," : "", hex, f[i].ns, f[i].error);
			kvsctl_json_str(kvs_strerror(f[i].error));
			putchar('}');
		}
		printf("]}\n");
	} else if (!res->ssd_tier) {
		printf("verify: the daemon has no SSD tier: nothing to verify\n");
	} else {
		printf("verify: %" PRIu64 " blocks checked: %" PRIu64 " ok, %" PRIu64
		       " failed (dropped from the SSD tier), %" PRIu64 " skipped "
		       "(changed while being read)\n", res->checked, res->ok,
		       res->failed, res->skipped);
		for (uint32_t i = 0; i < res->listed; i++) {
			char hex[33];

			kvs_hash_format(f[i].hash, hex);
			printf("failed %s namespace %u: %s\n", hex, f[i].ns,
			       kvs_strerror(f[i].error));
		}
		if (res->failed > res->listed)
			printf("(%" PRIu64 " more failures not listed: --max-failed)\n",
			       res->failed - res->listed);
	}
}

int kvsctl_verify(const char *sock, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "namespace", required_argument, NULL, 'n' },
		{ "max-failed", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint32_t ns = 0, max_failed = VERIFY_FAILED_DEFAULT;
	kvs_verify_result res;
	kvs_verify_failure *f;
	kvs_client *c;
	int json = 0, o, rc;

	while ((o = getopt_long(argc, argv, "n:k:jh", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (kvsctl_parse_u32(optarg, &ns) < 0 || ns == 0) {
				fprintf(stderr, "kvsctl: verify: bad namespace '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'k':
			if (kvsctl_parse_u32(optarg, &max_failed) < 0 ||
			    max_failed > KVS_VERIFY_FAILED_MAX) {
				fprintf(stderr, "kvsctl: verify: bad --max-failed '%s' "
					"(0..%d)\n", optarg, KVS_VERIFY_FAILED_MAX);
				return 2;
			}
			break;
		case 'j': json = 1; break;
		case 'h': verify_usage(); return 0;
		default: verify_usage(); return 2;
		}
	}
	if (extra_args("verify", argc, argv, 0, verify_usage))
		return 2;
	if ((rc = kvs_connect(sock, NULL, &c)) < 0)
		return kvsctl_fail("connect", rc);
	/* The daemon answers when it has read every SSD block (seconds per GB):
	 * no deadline for that, unless the operator set one. */
	if (!getenv("KVSHARE_TIMEOUT_MS"))
		kvs_set_timeout(c, INT_MAX);
	rc = kvs_verify(c, ns, max_failed, &res, &f);
	kvs_close(c);
	if (rc < 0)
		return kvsctl_fail("verify", rc);
	verify_print(&res, f, json);
	free(f);
	if (fflush(stdout) != 0)
		return 1;
	return res.failed ? 3 : 0;
}
