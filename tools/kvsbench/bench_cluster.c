/*
 * bench_cluster.c - the private Redis Cluster of `kvsbench remote` (see
 * bench_cluster.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_cluster.h"
#include "bench_proc.h"
#include "bench_util.h"

int kvsb_cluster_start(kvsb_cluster *cl, int tls)
{
	char bin[PATH_MAX], line[1024];
	int in[2], out[2];
	FILE *f;
	int rc = kvsb_beside_exe("kvs-redis-cluster", bin, sizeof(bin));

	if (rc < 0)
		return rc;
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
		return -errno;
	cl->pid = fork();
	if (cl->pid < 0)
		return -errno;
	if (cl->pid == 0) {
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		execl(bin, bin, "--masters", "3", tls ? "--tls" : NULL, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	cl->in = in[1];
	f = fdopen(out[0], "r");
	rc = -ECHILD;
	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!strncmp(line, "SEEDS=", 6)) {
			snprintf(cl->seeds, sizeof(cl->seeds), "%s", line + 6);
		} else if (!strncmp(line, "TLS_SEEDS=", 10)) {
			snprintf(cl->tls_seeds, sizeof(cl->tls_seeds), "%s", line + 10);
		} else if (!strncmp(line, "DIR=", 4)) {
			snprintf(cl->ca, sizeof(cl->ca), "%.*s/tls/ca.crt",
				 PATH_MAX - 16, line + 4);
		} else if (!strncmp(line, "PORTS=", 6)) {
			char *p = line + 6;

			while (*p && cl->nports < KVSB_CLUSTER_MAX_PORTS) {
				cl->ports[cl->nports++] = (int)strtol(p, &p, 10);
				p += strspn(p, ", ");
			}
		} else if (!strcmp(line, "READY")) {
			rc = 0;
			break;
		} else if (strstr(line, "SKIP")) {
			fprintf(stderr, "kvsbench: remote: %s\n", line);
			rc = -ENOENT;
		}
	}
	if (f)
		fclose(f);
	return rc;
}

void kvsb_cluster_stop(kvsb_cluster *cl)
{
	if (cl->pid <= 0)
		return;
	close(cl->in);
	if (kvsb_reap(cl->pid, 30.0) == -ETIMEDOUT) {
		kill(cl->pid, SIGKILL);
		kvsb_reap(cl->pid, 5.0);
	}
	cl->pid = 0;
}

/* FLUSHALL on every node of the private cluster, between repetitions. */
void kvsb_cluster_flush(const kvsb_cluster *cl)
{
	char out[256], port[16];

	for (int i = 0; i < cl->nports; i++) {
		char *argv[] = { "redis-cli", "-p", port, "FLUSHALL", NULL };

		snprintf(port, sizeof(port), "%d", cl->ports[i]);
		kvsb_run_capture(argv, out, sizeof(out), 30);
	}
}
