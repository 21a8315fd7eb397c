/*
 * kvsctl - operator tool for kvshared, on the public client API only.
 *
 *   kvsctl [--socket PATH] stats [--json]
 *
 * Subcommands live in one table; each parses its own options.
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvshare.h"

struct cmd {
	const char *name;
	int (*fn)(const char *sock, int argc, char **argv);
	const char *help;
};

static int cmd_stats(const char *sock, int argc, char **argv);

static const struct cmd cmds[] = {
	{ "stats", cmd_stats, "print the daemon's counters [--json]" },
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static void usage(void)
{
	char def[128];

	if (kvs_default_socket_path(def, sizeof(def)) < 0)
		strcpy(def, "$XDG_RUNTIME_DIR/kvshare/kvshared.sock");
	fprintf(stderr,
		"usage: kvsctl [--socket PATH] COMMAND [OPTIONS]\n"
		"\n"
		"options:\n"
		"  -s, --socket PATH  the daemon's socket (default: %s)\n"
		"  -h, --help         this help; COMMAND --help for a command's\n"
		"\n"
		"commands:\n",
		def);
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(stderr, "  %-10s %s\n", cmds[i].name, cmds[i].help);
}

static int fail(const char *what, int rc)
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

static void json_str(const char *s)
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

static double hit_ratio(const char *text)
{
	int64_t hit = 0, miss = 0;

	if (kvs_stats_value(text, "blocks.lookup_hit", &hit) < 0)
		hit = 0;
	if (kvs_stats_value(text, "blocks.lookup_miss", &miss) < 0)
		miss = 0;
	return hit + miss > 0 ? (double)hit / (double)(hit + miss) : 0.0;
}

static void print_json(const struct stat_line *l, size_t n, double ratio)
{
	putchar('{');
	for (size_t i = 0; i < n; i++) {
		int first_of_sec = i == 0 || strcmp(l[i].sec, l[i - 1].sec);

		if (first_of_sec) {
			if (i)
				fputs("},", stdout);
			json_str(l[i].sec);
			fputs(":{", stdout);
		} else {
			putchar(',');
		}
		json_str(l[i].name);
		putchar(':');
		if (is_number(l[i].value))
			fputs(l[i].value, stdout);
		else
			json_str(l[i].value);
	}
	if (n)
		fputs("},", stdout);
	printf("\"derived\":{\"hit_ratio\":%.6f}}\n", ratio);
}

static void print_human(const struct stat_line *l, size_t n, double ratio)
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
		"  -j, --json  one JSON object: {\"section\":{\"name\":value},...,\n"
		"              \"derived\":{\"hit_ratio\":x}}\n");
}

static int cmd_stats(const char *sock, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct stat_line *lines;
	kvs_client *c;
	char *text;
	size_t n, max = 1;
	int json = 0, o, rc;

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
		return fail("connect", rc);
	rc = kvs_stats(c, &text);
	kvs_close(c);
	if (rc < 0)
		return fail("stats", rc);
	for (const char *p = text; *p; p++)
		max += *p == '\n';
	lines = calloc(max, sizeof(*lines));
	if (!lines) {
		free(text);
		return fail("stats", -ENOMEM);
	}
	double ratio = hit_ratio(text); /* before parse_stats cuts the text */
	n = parse_stats(text, lines, max);
	group_sections(lines, n);
	if (json)
		print_json(lines, n, ratio);
	else
		print_human(lines, n, ratio);
	free(lines);
	free(text);
	return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *sock = NULL;
	int o;

	/* '+': stop at the command, whose options are its own. */
	while ((o = getopt_long(argc, argv, "+s:h", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			sock = optarg;
			break;
		case 'h':
			usage();
			return 0;
		default:
			usage();
			return 2;
		}
	}
	if (optind >= argc) {
		usage();
		return 2;
	}
	for (size_t i = 0; i < NCMDS; i++) {
		if (strcmp(argv[optind], cmds[i].name))
			continue;
		argc -= optind;
		argv += optind;
		optind = 0; /* glibc: restart getopt on the command's argv */
		return cmds[i].fn(sock, argc, argv);
	}
	fprintf(stderr, "kvsctl: unknown command '%s'\n", argv[optind]);
	usage();
	return 2;
}
