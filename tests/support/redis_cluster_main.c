/*
 * kvs-redis-cluster - tests/support/redis_cluster.c as a program, for shell tests:
 * starts a private cluster (or plain node), prints what a script needs, and
 * takes commands on stdin until EOF, then stops everything.
 *
 *   kvs-redis-cluster [--masters N] [--replicas 0|1] [--node-timeout MS] [--plain] [--tls]
 *
 * Output, one line each, then "READY":
 *   SEEDS=127.0.0.1:P1,127.0.0.1:P2,...
 *   PORTS=P1 P2 ...
 *   DIR=/tmp/kvs-redis-cluster.XXXXXX
 *   TLS_SEEDS=127.0.0.1:T1,...  (--tls: nodes listen with TLS too, on
 *                               these ports; DIR/tls/ca.crt signed theirs)
 * Commands (stdin, one a line), each answered "OK" or "ERR <why>":
 *   kill I | restart I | stop I (SIGSTOP) | cont I (SIGCONT) | wait-ok
 * Exit 0, 1 on a start failure, 77 without redis-server (reason on stdout).
 *
 * A shell test:
 *   coproc RC { "$BUILD/kvs-redis-cluster" --masters 3; }
 *   while read -r line <&"${RC[0]}"; do [[ $line == READY ]] && break; ...; done
 *   echo "kill 1" >&"${RC[1]}"; read -r ok <&"${RC[0]}"
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_cluster.h"

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "masters", required_argument, NULL, 'm' },
					    { "plain", no_argument, NULL, 'p' },
					    { "tls", no_argument, NULL, 'T' },
					    { "replicas", required_argument, NULL, 'r' },
					    { "node-timeout", required_argument, NULL, 't' },
					    { "help", no_argument, NULL, 'h' },
					    { NULL, 0, NULL, 0 } };
	rc_opts o = { .masters = 3 };
	char line[256];
	rc_cluster *c;
	int ch, rc;

	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'm': o.masters = atoi(optarg); break;
		case 'p': o.plain = 1; o.masters = 1; break;
		case 'T': o.tls_and_plain = 1; break;
		case 'r': o.replicas = atoi(optarg); break;
		case 't': o.node_timeout_ms = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: kvs-redis-cluster [--masters N] "
				"[--replicas 0|1] [--node-timeout MS] [--plain] [--tls]\n");
			return ch == 'h' ? 0 : 2;
		}
	}
	rc = rc_start(&o, &c);
	if (rc == -ENOENT) {
		printf("SKIP %s\n", rc_why());
		return 77;
	}
	if (rc < 0) {
		printf("FAIL %s (%s)\n", strerror(-rc), rc_why());
		return 1;
	}
	printf("SEEDS=%s\nPORTS=", rc_seeds(c));
	for (int i = 0; i < rc_nodes(c); i++)
		printf("%s%d", i ? " " : "", rc_port(c, i));
	printf("\nDIR=%s\n", rc_dir(c));
	if (rc_tls_seeds(c))
		printf("TLS_SEEDS=%s\n", rc_tls_seeds(c));
	printf("READY\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		char cmd[32];
		int i = -1, n = sscanf(line, "%31s %d", cmd, &i);

		if (n < 1)
			continue;
		if (!strcmp(cmd, "wait-ok")) {
			rc = rc_wait_ok(c, 60);
		} else if (n != 2 || i < 0 || i >= rc_nodes(c)) {
			rc = -EINVAL;
		} else if (!strcmp(cmd, "kill")) {
			rc = rc_kill(c, i);
		} else if (!strcmp(cmd, "restart")) {
			rc = rc_restart(c, i, 60);
		} else if (!strcmp(cmd, "stop") || !strcmp(cmd, "cont")) {
			rc = rc_pid(c, i) ? kill(rc_pid(c, i),
						 cmd[0] == 's' ? SIGSTOP : SIGCONT)
					  : -ESRCH;
		} else {
			rc = -EINVAL;
		}
		if (rc < 0)
			printf("ERR %s\n", strerror(-rc));
		else
			printf("OK\n");
		fflush(stdout);
	}
	rc_stop(c);
	return 0;
}
