/*
 * kvsctl - operator tool for kvshared, on the public client API only.
 *
 *   kvsctl [--socket PATH] stats [--json]
 *   kvsctl [--socket PATH] ls|inspect|evict|flush|pin|unpin|prefix|watch|verify ...
 *          (kvsctl_cache.c, kvsctl_pin.c)
 *   kvsctl [--socket PATH] top [--interval SECONDS] (kvsctl_top.c)
 *   kvsctl [--socket PATH] plan (--preset NAME | --layers L --kv-heads H
 *          --head-dim D) [--dtype T] [--tokens N] [--attention A] [--json]
 *
 * Subcommands live in one table; each parses its own options.
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvsctl.h"
#include "kvshare.h"
#include "kvshare_admin.h"

static int cmd_stats(const char *sock, int argc, char **argv);
static int cmd_plan(const char *sock, int argc, char **argv);

static const struct cli_cmd cmds[] = {
	{ "stats", cmd_stats, "print the daemon's counters [--json]" },
	{ "plan", cmd_plan, "KV bytes per token of a model, and how many tokens "
			    "of prefix fit in the running daemon's tiers" },
	{ "ls", kvsctl_ls, "namespaces and their cached prefix trees [--json]" },
	{ "inspect", kvsctl_inspect, "one block by hash [--json]" },
	{ "evict", kvsctl_evict, "free unpinned blocks of a namespace, a prefix or all" },
	{ "flush", kvsctl_flush, "as evict, from every tier" },
	{ "pin", kvsctl_pin, "keep a prefix cached (hashes or tokens)" },
	{ "unpin", kvsctl_unpin, "stop keeping a prefix cached" },
	{ "prefix", kvsctl_prefix, "leading tokens of a prompt the pool holds, "
				   "per tier [--json]" },
	{ "watch", kvsctl_watch, "stream KV events as lines [--json]" },
	{ "verify", kvsctl_verify, "read back the SSD tier's blocks and check them" },
	{ "top", kvsctl_top, "a live view: ops/s, hit ratio, tiers, namespaces" },
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static void usage(void)
{
	char def[128];

	if (kvs_default_socket_path(def, sizeof(def)) < 0)
		strcpy(def, "$XDG_RUNTIME_DIR/kvshare/kvshared.sock");
	fprintf(stderr,
		"usage: kvsctl [--socket PATH] [--timeout MS] COMMAND [OPTIONS]\n"
		"\n"
		"options:\n"
		"  -s, --socket PATH  the daemon's socket (default: %s)\n"
		"  --timeout MS       each request's deadline: a daemon that does not\n"
		"                     answer in time (stopped, stuck) fails the command\n"
		"                     (default: $KVSHARE_TIMEOUT_MS, else 5000; verify:\n"
		"                     none unless set)\n"
		"  -h, --help         this help; COMMAND --help for a command's\n"
		"--socket may also follow COMMAND, among its options.\n"
		"\n"
		"commands:\n",
		def);
	cli_list(cmds, NCMDS, 10);
}

int kvsctl_fail(const char *what, int rc)
{
	fprintf(stderr, "kvsctl: %s failed: %s\n", what, kvs_strerror(rc));
	return 1;
}

/* ---- stats ---- */

struct stat_line {
	const char *sec;  /* points into the text, NUL-terminated there */
	const char *name;
	const char *value;
};

/* Split "section.name value" lines in place. Lines that do not parse are
 * skipped rather than fatal: an older tool must survive a newer daemon. */
static size_t parse_stats(char *text, struct stat_line *out, size_t max)
{
	size_t n = 0;
	char *save = NULL;

	for (char *line = strtok_r(text, "\n", &save); line && n < max;
	     line = strtok_r(NULL, "\n", &save)) {
		char *sp = strpbrk(line, " \t"), *dot;

		if (!sp)
			continue;
		*sp++ = '\0';
		sp += strspn(sp, " \t");
		dot = strchr(line, '.');
		if (!dot || dot == line || !dot[1] || !*sp)
			continue;
		*dot = '\0';
		out[n].sec = line;
		out[n].name = dot + 1;
		out[n].value = sp;
		n++;
	}
	return n;
}

/* A JSON number exactly: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int is_number(const char *s)
{
	const char *d;

	s += *s == '-';
	if (*s == '0')
		s++;
	else if (*s >= '1' && *s <= '9')
		s += strspn(s, "0123456789");
	else
		return 0;
	if (*s == '.') {
		d = ++s;
		s += strspn(s, "0123456789");
		if (s == d)
			return 0;
	}
	if (*s == 'e' || *s == 'E') {
		s++;
		s += *s == '+' || *s == '-';
		d = s;
		s += strspn(s, "0123456789");
		if (s == d)
			return 0;
	}
	return *s == '\0';
}

void kvsctl_json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

static int64_t stat_or_0(const char *text, const char *name)
{
	int64_t v;

	return kvs_stats_value(text, name, &v) < 0 || v < 0 ? 0 : v;
}

/* How the daemon started: the values of its start.mode (the stats help
 * of start.mode says the same); "" for a daemon without the field. */
static const char *start_mode(const char *text)
{
	static const char *const names[] = { "cold", "handed over", "recovered" };
	int64_t v;

	if (kvs_stats_value(text, "start.mode", &v) < 0)
		return "";
	return v >= 0 && v < 3 ? names[v] : "unknown";
}

/* Blocks hit / blocks asked for: the daemon's blocks.lookup_* count every
 * path (socket, fast path, promotion). */
static double hit_ratio(const char *text)
{
	double hit = (double)stat_or_0(text, "blocks.lookup_hit");
	double miss = (double)stat_or_0(text, "blocks.lookup_miss");

	return hit + miss > 0 ? hit / (hit + miss) : 0.0;
}

/* The engines' counts of namespace @id (lines "namespace.ID.engines.F"):
 * the index of the next one at or after *@i, its field name into *@field;
 * -1 when there is none. */
static long ns_engine_next(const struct stat_line *l, size_t n, size_t *i,
			   uint32_t id, const char **field)
{
	char pre[32];
	int k = snprintf(pre, sizeof(pre), "%u.engines.", id);

	for (; *i < n; (*i)++)
		if (!strcmp(l[*i].sec, "namespace") && !strncmp(l[*i].name, pre, (size_t)k)) {
			*field = l[*i].name + k;
			return (long)(*i)++;
		}
	return -1;
}

/* Per namespace, with its model (from kvs_list): what its engines reported.
 * Namespaces the daemon did not render (none reported, or past its bound)
 * are left out. */
static void print_engines_ns(const struct stat_line *l, size_t n,
			     const kvs_ns_summary *ns, int nns, int json)
{
	int any = 0;

	for (int j = 0; j < nns; j++) {
		const char *field;
		size_t i = 0;
		long at;
		int first = 1;

		while ((at = ns_engine_next(l, n, &i, ns[j].id, &field)) >= 0) {
			if (first && json) {
				printf("%s{\"ns\":%u,\"model\":", any ? "," : "", ns[j].id);
				kvsctl_json_str(ns[j].model);
			} else if (first) {
				printf("%s  namespace %u: model %s\n", any ? "\n" : "",
				       ns[j].id, ns[j].model);
			}
			first = 0;
			any = 1;
			if (json)
				printf(",\"%s\":%s", field,
				       is_number(l[at].value) ? l[at].value : "null");
			else
				printf("    %-18s %12s\n", field, l[at].value);
		}
		if (!first && json)
			putchar('}');
	}
}

static void print_json(const struct stat_line *l, size_t n, double ratio,
		       const char *started, const kvs_ns_summary *ns, int nns)
{
	putchar('{');
	for (size_t i = 0; i < n; i++) {
		int first_of_sec = i == 0 || strcmp(l[i].sec, l[i - 1].sec);

		if (first_of_sec) {
			if (i)
				fputs("},", stdout);
			kvsctl_json_str(l[i].sec);
			fputs(":{", stdout);
		} else {
			putchar(',');
		}
		kvsctl_json_str(l[i].name);
		putchar(':');
		if (is_number(l[i].value))
			fputs(l[i].value, stdout);
		else
			kvsctl_json_str(l[i].value);
	}
	if (n)
		fputs("},", stdout);
	fputs("\"engines_by_namespace\":[", stdout);
	print_engines_ns(l, n, ns, nns, 1);
	printf("],\"derived\":{\"hit_ratio\":%.6f,\"started\":", ratio);
	kvsctl_json_str(started);
	fputs("}}\n", stdout);
}

static void print_human(const struct stat_line *l, size_t n, double ratio,
			const char *started, const kvs_ns_summary *ns, int nns)
{
	int nw = (int)strlen("hit_ratio"), vw = 1;

	for (size_t i = 0; i < n; i++) {
		if ((int)strlen(l[i].name) > nw)
			nw = (int)strlen(l[i].name);
		if ((int)strlen(l[i].value) > vw)
			vw = (int)strlen(l[i].value);
	}
	if (vw < 6)
		vw = 6;
	for (size_t i = 0; i < n; i++) {
		if (i == 0 || strcmp(l[i].sec, l[i - 1].sec))
			printf("%s%s\n", i ? "\n" : "", l[i].sec);
		printf("  %-*s  %*s\n", nw, l[i].name, vw, l[i].value);
	}
	printf("%sderived\n  %-*s  %*.4f\n", n ? "\n" : "", nw, "hit_ratio", vw,
	       ratio);
	if (*started)
		printf("  %-*s  %*s\n", nw, "started", vw, started);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(l[i].sec, "namespace") && strstr(l[i].name, ".engines.")) {
			printf("\nengines by namespace\n");
			print_engines_ns(l, n, ns, nns, 0);
			break;
		}
}

/* The daemon renders one section's lines together; keep its order, but if a
 * section shows up again later, pull its lines up to its first appearance so
 * every section prints once. */
static void group_sections(struct stat_line *l, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		size_t j;
		struct stat_line t;

		if (!strcmp(l[i].sec, l[i - 1].sec))
			continue;
		for (j = 0; j + 1 < i && strcmp(l[j].sec, l[i].sec); j++)
			;
		if (j + 1 >= i)
			continue; /* a new section */
		while (j + 1 < i && !strcmp(l[j + 1].sec, l[i].sec))
			j++;
		t = l[i];
		memmove(&l[j + 2], &l[j + 1], (i - j - 1) * sizeof(*l));
		l[j + 1] = t;
	}
}

static void stats_usage(void)
{
	fprintf(stderr,
		"usage: kvsctl [--socket PATH] stats [--json]\n"
		"  print the daemon's counters grouped by section and the hit\n"
		"  ratio (blocks.lookup_hit / (lookup_hit + lookup_miss))\n"
		"  and what engines reported per namespace, with its model\n"
		"  -j, --json  one JSON object: {\"section\":{\"name\":value},...,\n"
		"              \"engines_by_namespace\":[{\"ns\":id,\"model\":m,\n"
		"              \"hit_tokens\":v,...}],\"derived\":{\"hit_ratio\":x,\n"
		"              \"started\":\"cold\"|\"handed over\"|\"recovered\"}}\n");
}

static int cmd_stats(const char *sock, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct stat_line *lines;
	kvs_ns_summary *ns = NULL;
	kvs_client *c;
	char *text;
	size_t n, max = 1;
	int json = 0, o, rc, nns;

	while ((o = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
		switch (o) {
		case 'j':
			json = 1;
			break;
		case 'h':
			stats_usage();
			return 0;
		default:
			stats_usage();
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvsctl: stats: unexpected argument '%s'\n",
			argv[optind]);
		stats_usage();
		return 2;
	}
	rc = kvs_connect(sock, NULL, &c);
	if (rc < 0)
		return kvsctl_fail("connect", rc);
	rc = kvs_stats(c, &text);
	/* The models of the namespaces; without them (an older daemon) the
	 * per-namespace lines still print in the section "namespace". */
	nns = rc < 0 ? 0 : kvs_list(c, 0, 0, &ns);
	if (nns < 0)
		nns = 0;
	kvs_close(c);
	if (rc < 0)
		return kvsctl_fail("stats", rc);
	for (const char *p = text; *p; p++)
		max += *p == '\n';
	lines = calloc(max, sizeof(*lines));
	if (!lines) {
		free(text);
		free(ns);
		return kvsctl_fail("stats", -ENOMEM);
	}
	double ratio = hit_ratio(text); /* before parse_stats cuts the text */
	const char *started = start_mode(text);
	n = parse_stats(text, lines, max);
	group_sections(lines, n);
	if (json)
		print_json(lines, n, ratio, started, ns, nns);
	else
		print_human(lines, n, ratio, started, ns, nns);
	free(ns);
	free(lines);
	free(text);
	return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	return cli_main("kvsctl", cmds, NCMDS, usage, argc, argv);
}

/* ---- plan ---- */

/* Published shapes (config.json of each model; KV heads per the GQA/MLA
 * setting). MLA caches one latent (kv_lora_rank) plus the decoupled RoPE key
 * (qk_rope_head_dim) per layer and token, shared by K and V. */
struct preset {
	const char *name;
	const char *attention; /* "gqa", "mha", "mqa" or "mla" */
	uint32_t layers, kv_heads, head_dim, latent_dim;
};

static const struct preset presets[] = {
	{ "llama-3-8b", "gqa", 32, 8, 128, 0 },
	{ "llama-3-70b", "gqa", 80, 8, 128, 0 },
	{ "llama-3.1-405b", "gqa", 126, 8, 128, 0 },
	{ "mistral-7b", "gqa", 32, 8, 128, 0 },
	{ "qwen2.5-72b", "gqa", 80, 8, 128, 0 },
	{ "llama-2-7b", "mha", 32, 32, 128, 0 },
	{ "falcon-7b", "mqa", 32, 1, 64, 0 },
	{ "deepseek-v3", "mla", 61, 1, 0, 512 + 64 },
};
#define NPRESETS (sizeof(presets) / sizeof(presets[0]))

static void plan_usage(void)
{
	fprintf(stderr,
		"usage: kvsctl plan (--preset NAME | --layers L --kv-heads H --head-dim D)\n"
		"                   [--dtype fp16|bf16|fp32|fp8|int8|int4] [--tokens N]\n"
		"                   [--attention mha|gqa|mqa|mla --latent-dim R] [--json]\n"
		"KV bytes per token (every layer, K and V; for fp8/int8/int4 with the\n"
		"scales, zero points and fp16 outlier channels that kvshare stores, as in\n"
		"256-token blocks, rounded up), for N tokens, and how many\n"
		"tokens of prefix the running daemon's tiers hold (skipped if none runs).\n"
		"mha: kv heads = attention heads; mqa: 1 kv head; mla: one latent of\n"
		"--latent-dim elements per layer and token (K and V share it).\n"
		"presets:");
	for (size_t i = 0; i < NPRESETS; i++)
		fprintf(stderr, " %s", presets[i].name);
	fprintf(stderr, "\n");
}

int kvsctl_parse_u32(const char *s, uint32_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || !*s || *end || *s == '-' || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/* The command line into @m, @dtype, @tokens, @json. 0: run; 1: --help
 * (usage printed); 2: a bad value (said). */
static int plan_parse(int argc, char **argv, struct preset *m, kvs_dtype *dtype,
		      uint32_t *tokens, int *json)
{
	static const struct option opts[] = {
		{ "preset", required_argument, NULL, 'p' },
		{ "layers", required_argument, NULL, 'l' },
		{ "kv-heads", required_argument, NULL, 'k' },
		{ "head-dim", required_argument, NULL, 'd' },
		{ "dtype", required_argument, NULL, 't' },
		{ "tokens", required_argument, NULL, 'n' },
		{ "attention", required_argument, NULL, 'a' },
		{ "latent-dim", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int bad = 0;

		switch (c) {
		case 'p':
			bad = 1;
			for (size_t i = 0; i < NPRESETS; i++)
				if (strcmp(optarg, presets[i].name) == 0) {
					*m = presets[i];
					bad = 0;
				}
			break;
		case 'l': bad = kvsctl_parse_u32(optarg, &m->layers); break;
		case 'k': bad = kvsctl_parse_u32(optarg, &m->kv_heads); break;
		case 'd': bad = kvsctl_parse_u32(optarg, &m->head_dim); break;
		case 'n': bad = kvsctl_parse_u32(optarg, tokens); break;
		case 'r': bad = kvsctl_parse_u32(optarg, &m->latent_dim); break;
		case 't': bad = kvs_dtype_parse(optarg, dtype); break;
		case 'a':
			bad = strcmp(optarg, "mha") && strcmp(optarg, "gqa") &&
			      strcmp(optarg, "mqa") && strcmp(optarg, "mla");
			if (!bad)
				m->attention = optarg;
			break;
		case 'j': *json = 1; break;
		case 'h': plan_usage(); return 1;
		default: plan_usage(); return 2;
		}
		if (bad) {
			fprintf(stderr, "kvsctl: plan: bad value '%s' (see kvsctl plan --help)\n",
				optarg);
			return 2;
		}
	}
	return 0;
}

/* KV bytes per token of @m in @dtype, as kvshare stores them in 256-token
 * blocks (rounded up); 0 when the model is not given or too large (said). */
static uint64_t plan_per_token(struct preset *m, kvs_dtype dtype)
{
	kvs_layout lay;
	uint64_t per_token;

	if (strcmp(m->attention, "mqa") == 0)
		m->kv_heads = 1;
	if (strcmp(m->attention, "mla") == 0) {
		if (!m->layers || !m->latent_dim) {
			fprintf(stderr, "kvsctl: plan: mla needs --layers and --latent-dim\n");
			return 0;
		}
		/* One latent per token: half of a block of K and V latents. */
		lay = (kvs_layout){ .layers = m->layers, .kv_heads = 1,
				    .head_dim = m->latent_dim, .block_tokens = 256,
				    .dtype = dtype };
		per_token = (kvs_layout_block_bytes(&lay) + 511) / 512;
	} else {
		if (!m->layers || !m->kv_heads || !m->head_dim) {
			fprintf(stderr, "kvsctl: plan: needs --preset or --layers, "
					"--kv-heads and --head-dim\n");
			return 0;
		}
		lay = (kvs_layout){ .layers = m->layers, .kv_heads = m->kv_heads,
				    .head_dim = m->head_dim, .block_tokens = 256,
				    .dtype = dtype };
		per_token = (kvs_layout_block_bytes(&lay) + 255) / 256;
	}
	if (per_token == 0)
		fprintf(stderr, "kvsctl: plan: the layout is too large\n");
	return per_token;
}

/* The host tier's bytes of the daemon on @sock into *@host; 0 when none
 * answers. */
static int plan_host_bytes(const char *sock, uint64_t *host)
{
	kvs_client *cl;
	char *text = NULL;
	int have = 0;

	if (kvs_connect(sock, NULL, &cl) < 0)
		return 0;
	if (kvs_stats(cl, &text) == 0) {
		int64_t v;

		if (kvs_stats_value(text, "tier_host.bytes_total", &v) == 0) {
			*host = (uint64_t)v;
			have = 1;
		}
		free(text);
	}
	kvs_close(cl);
	return have;
}

static int cmd_plan(const char *sock, int argc, char **argv)
{
	struct preset m = { "custom", "gqa", 0, 0, 0, 0 };
	kvs_dtype dtype = KVS_DTYPE_FP16;
	uint32_t tokens = 0;
	uint64_t per_token, esz, host = 0;
	int json = 0, rc, have_daemon;

	rc = plan_parse(argc, argv, &m, &dtype, &tokens, &json);
	if (rc)
		return rc == 1 ? 0 : 2;
	esz = kvs_dtype_bytes(dtype);
	per_token = plan_per_token(&m, dtype);
	if (per_token == 0)
		return 2;
	have_daemon = plan_host_bytes(sock, &host);
	if (json) {
		printf("{\"model\":\"%s\",\"attention\":\"%s\",\"layers\":%u,"
		       "\"kv_heads\":%u,\"head_dim\":%u,\"latent_dim\":%u,"
		       "\"dtype_bytes\":%llu,\"bytes_per_token\":%llu,\"tokens\":%u,"
		       "\"bytes_for_tokens\":%llu",
		       m.name, m.attention, m.layers, m.kv_heads, m.head_dim,
		       m.latent_dim, (unsigned long long)esz,
		       (unsigned long long)per_token, tokens,
		       (unsigned long long)per_token * tokens);
		if (have_daemon)
			printf(",\"host_bytes\":%llu,\"host_tokens\":%llu",
			       (unsigned long long)host,
			       (unsigned long long)(host / per_token));
		printf("}\n");
		return 0;
	}
	printf("model            %s (%s)\n", m.name, m.attention);
	printf("bytes per token  %llu (%.1f KiB)\n", (unsigned long long)per_token,
	       per_token / 1024.0);
	if (tokens)
		printf("%u tokens     %.2f MiB\n", tokens,
		       (double)per_token * tokens / (1 << 20));
	if (have_daemon)
		printf("host tier        %.2f GiB = %llu tokens of prefix\n",
		       host / (double)(1u << 30), (unsigned long long)(host / per_token));
	else
		printf("host tier        (no daemon on the socket)\n");
	return 0;
}
