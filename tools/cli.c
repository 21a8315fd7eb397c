/*
 * cli.c - the command dispatch of kvsctl and kvsbench (contract in cli.h).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_list(const struct cli_cmd *cmds, size_t n, int width)
{
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, "  %-*s %s\n", width, cmds[i].name, cmds[i].help);
}

/*
 * Take the global options out of a command's arguments (argv[1..argc), up to
 * a "--"), so that `PROG COMMAND --socket S` means `PROG --socket S COMMAND`.
 * Only the exact spellings are taken (--socket S, --socket=S, -s S, -sS): an
 * abbreviation after the command belongs to the command's own getopt. The
 * last one given wins, as with getopt before the command.
 * Returns the new argc (argv is compacted in place), or -1 when --socket
 * lacks its argument.
 */
static int take_globals(const char *prog, int argc, char **argv,
			const char **sock)
{
	int out = 1, i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--"))
			break;
		if (!strcmp(a, "--socket") || !strcmp(a, "-s")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "%s: option '%s' requires an "
					"argument\n", prog, a);
				return -1;
			}
			*sock = argv[++i];
		} else if (!strncmp(a, "--socket=", 9)) {
			*sock = a + 9;
		} else if (!strncmp(a, "-s", 2) && a[2]) {
			*sock = a + 2;
		} else {
			argv[out++] = argv[i];
		}
	}
	while (i < argc)
		argv[out++] = argv[i++];
	argv[out] = NULL;
	return out;
}

/* --timeout MS: the deadline of every call of the command's clients, given
 * to the library the way any process can give it (KVSHARE_TIMEOUT_MS), so
 * that no command needs to know of it. */
static int set_timeout(const char *prog, const char *ms)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(ms, &end, 10);
	if (errno || end == ms || *end || v <= 0 || v > INT_MAX) {
		fprintf(stderr, "%s: bad --timeout '%s' (milliseconds > 0)\n", prog,
			ms);
		return -1;
	}
	return setenv("KVSHARE_TIMEOUT_MS", ms, 1);
}

int cli_main(const char *prog, const struct cli_cmd *cmds, size_t n,
	     void (*usage)(void), int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "timeout", required_argument, NULL, 't' },
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
		case 't':
			if (set_timeout(prog, optarg) < 0)
				return 2;
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
	for (size_t i = 0; i < n; i++) {
		if (strcmp(argv[optind], cmds[i].name))
			continue;
		argc -= optind;
		argv += optind;
		if ((argc = take_globals(prog, argc, argv, &sock)) < 0) {
			usage();
			return 2;
		}
		optind = 0; /* glibc: restart getopt on the command's argv */
		return cmds[i].fn(sock, argc, argv);
	}
	fprintf(stderr, "%s: unknown command '%s'\n", prog, argv[optind]);
	usage();
	return 2;
}
