/*
 * cli.h - the front of kvsctl and kvsbench: PROG [--socket PATH] COMMAND
 * [OPTIONS], a table of commands, each parsing its own options. The global
 * --socket may also come after COMMAND, among its options.
 */
#ifndef KVS_CLI_H
#define KVS_CLI_H

#include <stddef.h>

/* One command: @fn gets --socket (NULL: not given) and its own argv
 * (argv[0] is its name), and returns the exit status. */
struct cli_cmd {
	const char *name;
	int (*fn)(const char *sock, int argc, char **argv);
	const char *help;
};

/*
 * cli_list - the usage's command list on stderr: "  NAME HELP" lines, the
 * names padded to @width.
 */
void cli_list(const struct cli_cmd *cmds, size_t n, int width);

/*
 * cli_main - parse --socket, --timeout and --help up to the command, then run
 * the command of @cmds named by the next argument (getopt restarted on its
 * argv). --timeout MS (before the command only) sets $KVSHARE_TIMEOUT_MS,
 * the deadline of every library call the command makes.
 * A --socket (-s) after the command, before any "--", is taken out of the
 * command's argv and counts as if given before it; --help after the command
 * is the command's own.
 * @prog: the program's name, for "PROG: unknown command".
 * @usage: prints the program's usage on stderr.
 * Returns the command's exit status; 0 for --help; 2 for bad usage.
 * Thread: the main thread (getopt).
 */
int cli_main(const char *prog, const struct cli_cmd *cmds, size_t n,
	     void (*usage)(void), int argc, char **argv);

#endif /* KVS_CLI_H */
