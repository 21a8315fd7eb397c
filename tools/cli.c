/*
 * cli.c - the command dispatch of kvsctl and kvsbench (contract in cli.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

void cli_list(const struct cli_cmd *cmds, size_t n, int width)
{
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, "  %-*s %s\n", width, cmds[i].name, cmds[i].help);
}

int cli_main(const char *prog, const struct cli_cmd *cmds, size_t n,
	     void (*usage)(void), int argc, char **argv)
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
	for (size_t i = 0; i < n; i++) {
		if (strcmp(argv[optind], cmds[i].name))
			continue;
		argc -= optind;
		argv += optind;
		optind = 0; /* glibc: restart getopt on the command's argv */
		return cmds[i].fn(sock, argc, argv);
	}
	fprintf(stderr, "%s: unknown command '%s'\n", prog, argv[optind]);
	usage();
	return 2;
}
