/* redis_cluster.c - a private Redis Cluster for tests (see redis_cluster.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "redis_cluster_int.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char why[512];
static rc_cluster *live[4]; /* for the exit handler */

const char *rc_why(void)
{
	return why;
}

/* A short pause between polls of a condition that has no fd to wait on;
 * doubles up to 50 ms (as tools/kvsbench/bench_redis.c). */
static void backoff(double *pause)
{
	struct timespec ts = { 0, (long)(*pause * 1e9) };

	nanosleep(&ts, NULL);
	if (*pause < 0.05)
		*pause *= 2;
}

static int find_bin(const char *env, const char *name, char *buf, size_t len)
{
	const char *path = getenv("PATH"), *e = getenv(env);

	if (e && *e) {
		snprintf(buf, len, "%s", e);
		return access(buf, X_OK) == 0 ? 0 : -ENOENT;
	}
	while (path && *path) {
		const char *colon = strchr(path, ':');
		size_t dlen = colon ? (size_t)(colon - path) : strlen(path);

		if (dlen > 0) {
			snprintf(buf, len, "%.*s/%s", (int)dlen, path, name);
			if (access(buf, X_OK) == 0)
				return 0;
		}
		path = colon ? colon + 1 : NULL;
	}
	snprintf(buf, len, "/usr/bin/%s", name);
	return access(buf, X_OK) == 0 ? 0 : -ENOENT;
}

/* Whether TCP port @p is free on loopback now. */
static int port_free(int p)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

	if (fd < 0)
		return 0;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

/*
 * A port P with P and its cluster bus port P + 10000 free, both below the
 * kernel's ephemeral range when there is room (so that no outgoing
 * connection takes a node's port while it is down for a restart test).
 */
static int pick_port(void)
{
	int lo = 32768, hi = 60999, base = 10000, span;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

	if (f) {
		if (fscanf(f, "%d %d", &lo, &hi) != 2)
			lo = 32768;
		fclose(f);
	}
	span = lo - 10000 - base;
	if (span < 1000) { /* no room below: anywhere a bus port fits */
		base = 1024;
		span = 65535 - 10000 - base;
	}
	for (int tries = 0; tries < 1000; tries++) {
		int p = base + (int)((unsigned)rand() % (unsigned)span);

		if (port_free(p) && port_free(p + 10000))
			return p;
	}
	return -EADDRINUSE;
}

static void node_dir(const rc_cluster *c, int i, char *buf, size_t len)
{
	snprintf(buf, len, "%s/n%d", c->dir, i);
}

static pid_t spawn_server(const rc_cluster *c, int i)
{
	char dir[PATH_MAX], port[16], log[PATH_MAX + 16];
	const char *argv[CLI_ARGS_MAX];
	int argc = 0;
	pid_t pid;

	node_dir(c, i, dir, sizeof(dir));
	snprintf(port, sizeof(port), "%d", c->port[i]);
	snprintf(log, sizeof(log), "%s/redis.log", dir);
	argv[argc++] = c->server;
	argv[argc++] = "--port";
	if (c->tls) {
		static char cert[PATH_MAX], key[PATH_MAX], ca[PATH_MAX], tport[16];

		snprintf(cert, sizeof(cert), "%s", rc_tls_file(c, "node.crt"));
		snprintf(key, sizeof(key), "%s", rc_tls_file(c, "node.key"));
		snprintf(ca, sizeof(ca), "%s", rc_tls_file(c, "ca.crt"));
		snprintf(tport, sizeof(tport), "%d", c->tls_port[i]);
		argv[argc++] = c->tls_and_plain ? port : "0";
		argv[argc++] = "--tls-port";
		argv[argc++] = c->tls_and_plain ? tport : port;
		argv[argc++] = "--tls-cert-file";
		argv[argc++] = cert;
		argv[argc++] = "--tls-key-file";
		argv[argc++] = key;
		argv[argc++] = "--tls-ca-cert-file";
		argv[argc++] = ca;
		argv[argc++] = "--tls-auth-clients";
		argv[argc++] = c->tls_auth_clients ? "yes" : "no";
		argv[argc++] = "--tls-replication";
		argv[argc++] = "yes";
		if (!c->plain) {
			argv[argc++] = "--tls-cluster";
			argv[argc++] = "yes";
		}
	} else {
		argv[argc++] = port;
	}
	argv[argc++] = "--bind";
	argv[argc++] = "127.0.0.1";
	argv[argc++] = "--dir";
	argv[argc++] = dir;
	argv[argc++] = "--logfile";
	argv[argc++] = log;
	argv[argc++] = "--save";
	argv[argc++] = "";
	argv[argc++] = "--appendonly";
	argv[argc++] = "no";
	argv[argc++] = "--daemonize";
	argv[argc++] = "no";
	if (!c->plain) {
		argv[argc++] = "--cluster-enabled";
		argv[argc++] = "yes";
		argv[argc++] = "--cluster-config-file";
		argv[argc++] = "nodes.conf";
		argv[argc++] = "--cluster-node-timeout";
		argv[argc++] = c->node_timeout;
		argv[argc++] = "--cluster-require-full-coverage";
		argv[argc++] = "no";
	}
	for (int k = 0; c->extra && c->extra[k] && argc < CLI_ARGS_MAX - 1; k++)
		argv[argc++] = c->extra[k];
	argv[argc] = NULL;
	pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, STDIN_FILENO);
			dup2(fd, STDOUT_FILENO);
		}
		execv(c->server, (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* 1 when node @i answers PING, 0 not yet, <0 when its process is gone. */
static int ping(rc_cluster *c, int i)
{
	char out[64];
	int status;

	if (waitpid(c->pid[i], &status, WNOHANG) == c->pid[i]) {
		c->pid[i] = 0;
		return -ECHILD;
	}
	return rc_cli(c, i, out, sizeof(out), "PING", NULL) == 0 &&
	       !strcmp(out, "PONG");
}

static int wait_ping(rc_cluster *c, int i, double end)
{
	double pause = 0.002;
	int rc;

	while ((rc = ping(c, i)) == 0) {
		if (now_s() > end)
			return -ETIMEDOUT;
		backoff(&pause);
	}
	return rc < 0 ? rc : 0;
}

/* Node @i says the cluster is whole. */
static int node_ok(const rc_cluster *c, int i)
{
	char out[2048], known[48];

	if (rc_cli(c, i, out, sizeof(out), "CLUSTER", "INFO", NULL) != 0)
		return 0;
	snprintf(known, sizeof(known), "cluster_known_nodes:%d", c->n);
	return strstr(out, "cluster_state:ok") &&
	       strstr(out, "cluster_slots_assigned:16384") && strstr(out, known);
}

int rc_wait_ok(rc_cluster *c, double timeout_s)
{
	double end = now_s() + timeout_s, pause = 0.005;

	if (c->plain)
		return 0;
	for (int i = 0; i < c->n; i++) {
		if (!c->pid[i])
			continue;
		while (!node_ok(c, i)) {
			if (now_s() > end) {
				snprintf(why, sizeof(why),
					 "node %d (port %d): cluster not ok after %.0f s",
					 i, c->port[i], timeout_s);
				return -ETIMEDOUT;
			}
			backoff(&pause);
		}
	}
	return 0;
}

static void remove_tree(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;

	if (!d) {
		unlink(path);
		return;
	}
	while ((e = readdir(d)) != NULL) {
		char p[PATH_MAX + 256];

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		remove_tree(p);
	}
	closedir(d);
	rmdir(path);
}

static void reap(pid_t pid)
{
	double end = now_s() + 10, pause = 0.001;
	int status;

	while (waitpid(pid, &status, WNOHANG) == 0 && now_s() < end)
		backoff(&pause);
}

void rc_stop(rc_cluster *c)
{
	const char *keep = getenv("RC_KEEP");

	if (!c)
		return;
	for (int i = 0; i < c->n; i++)
		if (c->pid[i] > 0) {
			kill(c->pid[i], SIGKILL);
			reap(c->pid[i]);
			c->pid[i] = 0;
		}
	if (keep && !strcmp(keep, "1"))
		fprintf(stderr, "redis_cluster: kept %s\n", c->dir);
	else
		remove_tree(c->dir);
	for (size_t k = 0; k < sizeof(live) / sizeof(live[0]); k++)
		if (live[k] == c)
			live[k] = NULL;
	free(c);
}

static void at_exit(void)
{
	for (size_t k = 0; k < sizeof(live) / sizeof(live[0]); k++)
		if (live[k])
			rc_stop(live[k]);
}

int rc_pid(const rc_cluster *c, int i)
{
	return c->pid[i] > 0 ? c->pid[i] : 0;
}

int rc_kill(rc_cluster *c, int i)
{
	if (c->pid[i] <= 0)
		return -ESRCH;
	kill(c->pid[i], SIGKILL);
	reap(c->pid[i]);
	c->pid[i] = 0;
	return 0;
}

int rc_restart(rc_cluster *c, int i, double timeout_s)
{
	double end = now_s() + timeout_s;
	int rc;

	if (c->pid[i] > 0)
		return -EBUSY;
	c->pid[i] = spawn_server(c, i);
	if (c->pid[i] < 0)
		return -errno;
	rc = wait_ping(c, i, end);
	if (rc < 0)
		return rc;
	return rc_wait_ok(c, end - now_s());
}

static void print_log(const rc_cluster *c, int i)
{
	char p[PATH_MAX + 32], line[512];
	FILE *f;

	snprintf(p, sizeof(p), "%s/n%d/redis.log", c->dir, i);
	f = fopen(p, "r");
	if (!f)
		return;
	fprintf(stderr, "---- %s (tail)\n", p);
	fseek(f, -2048, SEEK_END);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

const char *rc_tls_file(const rc_cluster *c, const char *name)
{
	static char path[PATH_MAX];

	if (!c->tls)
		return NULL;
	snprintf(path, sizeof(path), "%s/tls/%s", c->dir, name);
	return path;
}

static int start_nodes(rc_cluster *c, double end)
{
	for (int i = 0; i < c->n; i++) {
		char dir[PATH_MAX];
		int rc = -EADDRINUSE;

		node_dir(c, i, dir, sizeof(dir));
		if (mkdir(dir, 0700) < 0 && errno != EEXIST)
			return -errno;
		/* A port can be taken between the check and the bind: retry. */
		for (int tries = 0; tries < 5 && rc < 0; tries++) {
			c->port[i] = pick_port();
			if (c->port[i] < 0)
				return c->port[i];
			c->tls_port[i] = c->port[i];
			if (c->tls_and_plain && (c->tls_port[i] = pick_port()) < 0)
				return c->tls_port[i];
			c->pid[i] = spawn_server(c, i);
			if (c->pid[i] < 0)
				return -errno;
			rc = wait_ping(c, i, end);
			if (rc == -ETIMEDOUT) {
				print_log(c, i);
				return rc;
			}
			/* A build without TLS exits on the first tls- option. */
			if (rc == -ECHILD && c->tls) {
				print_log(c, i);
				snprintf(why, sizeof(why), "redis-server exited at once "
					 "with TLS options: built without TLS?");
				return -ENOENT;
			}
		}
		if (rc < 0) {
			print_log(c, i);
			snprintf(why, sizeof(why), "redis-server did not start");
			return rc;
		}
	}
	return 0;
}

/* Node @i's CLUSTER NODES line for itself ("myself"), into @out. */
static int myself(const rc_cluster *c, int i, char *out, size_t cap)
{
	static char all[16384];
	char *line, *save = NULL;

	if (rc_cli(c, i, all, sizeof(all), "CLUSTER", "NODES", NULL) != 0)
		return -EIO;
	for (line = strtok_r(all, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (strstr(line, "myself")) {
			snprintf(out, cap, "%s", line);
			return 0;
		}
	return -ENOENT;
}

/*
 * redis-cli picks which node replicates which master (on one host, not in
 * the order given): make node masters + i the replica of master i, with
 * CLUSTER REPLICATE, and wait until each one says so. Then
 * rc_replica_of() is a formula a test can use.
 */
static int replicas_pin(rc_cluster *c, double end)
{
	for (int i = 0; i < c->masters; i++) {
		char line[1024], id[64], out[256], info[2048], port[32];
		int r = c->masters + i;
		double pause = 0.005;

		if (myself(c, i, line, sizeof(line)) < 0 ||
		    sscanf(line, "%63s", id) != 1 || !strstr(line, "master"))
			return -EIO;
		snprintf(port, sizeof(port), "master_port:%d\r", c->port[i]);
		for (;;) {
			/* a replica of master i, and synced with it: a replica
			 * whose link stayed down refuses to fail over */
			if (myself(c, r, line, sizeof(line)) == 0 && strstr(line, "slave") &&
			    strstr(line, id) &&
			    rc_cli(c, r, info, sizeof(info), "INFO", "replication", NULL) == 0 &&
			    strstr(info, port) && strstr(info, "master_link_status:up"))
				break;
			if (!strstr(line, id))
				rc_cli(c, r, out, sizeof(out), "CLUSTER", "REPLICATE", id, NULL);
			if (now_s() > end) {
				snprintf(why, sizeof(why), "node %d: not a replica of %d", r, i);
				return -ETIMEDOUT;
			}
			backoff(&pause);
		}
	}
	return rc_wait_ok(c, end - now_s());
}

int rc_replica_of(const rc_cluster *c, int i)
{
	return c->replicas && i < c->masters ? c->masters + i : -1;
}

int rc_wait_failover(rc_cluster *c, int i, double timeout_s)
{
	double end = now_s() + timeout_s, pause = 0.01;
	int r = rc_replica_of(c, i);
	char line[1024];

	if (r < 0)
		return -EINVAL;
	while (myself(c, r, line, sizeof(line)) < 0 || !strstr(line, "master")) {
		if (now_s() > end) {
			snprintf(why, sizeof(why), "node %d: no failover of %d in %.0f s",
				 r, i, timeout_s);
			return -ETIMEDOUT;
		}
		backoff(&pause);
	}
	return rc_wait_ok(c, end - now_s());
}

/* A cluster of @o's shape, its binaries found, its directory made;
 * nothing started. */
static int cluster_new(const rc_opts *o, rc_cluster **out)
{
	const char *tmp = getenv("TMPDIR");
	rc_cluster *c;
	int rc;

	if (o->masters < 1 || o->replicas < 0 || o->replicas > 1 ||
	    o->masters * (1 + o->replicas) > RC_MAX_NODES ||
	    (o->plain && (o->masters != 1 || o->replicas)))
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	if (find_bin("REDIS_SERVER", "redis-server", c->server, sizeof(c->server)) < 0 ||
	    find_bin("REDIS_CLI", "redis-cli", c->cli, sizeof(c->cli)) < 0) {
		snprintf(why, sizeof(why), "redis-server or redis-cli not found "
			 "(Debian: apt-get install redis-server redis-tools)");
		free(c);
		return -ENOENT;
	}
	c->masters = o->masters;
	c->replicas = o->replicas;
	c->n = o->masters * (1 + o->replicas);
	snprintf(c->node_timeout, sizeof(c->node_timeout), "%d",
		 o->node_timeout_ms > 0 ? o->node_timeout_ms : 2000);
	c->cli_timeout_s = CLI_TIMEOUT_S;
	c->plain = o->plain;
	c->extra = o->extra;
	c->tls = o->tls || o->tls_and_plain;
	c->tls_auth_clients = o->tls_auth_clients;
	c->tls_and_plain = o->tls_and_plain;
	snprintf(c->dir, sizeof(c->dir), "%s/kvs-redis-cluster.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(c->dir)) {
		rc = -errno;
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* Stopped by the exit handler if the test does not stop it (four at most). */
static void register_live(rc_cluster *c)
{
	size_t slot;

	for (slot = 0; slot < sizeof(live) / sizeof(live[0]) && live[slot]; slot++)
		;
	if (slot < sizeof(live) / sizeof(live[0])) {
		static int registered;

		live[slot] = c;
		if (!registered++)
			atexit(at_exit);
	}
}

/* redis-cli --cluster create over every node, then wait until the cluster
 * is whole and each replica follows its master. */
static int cluster_create(rc_cluster *c, double end)
{
	const char *argv[CLI_ARGS_MAX];
	char addr[RC_MAX_NODES][32], outb[8192];
	int argc = 0, rc = 0;

	argv[argc++] = "--cluster";
	argv[argc++] = "create";
	for (int i = 0; i < c->n; i++) {
		snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", c->port[i]);
		argv[argc++] = addr[i];
	}
	argv[argc++] = "--cluster-replicas";
	argv[argc++] = c->replicas ? "1" : "0";
	argv[argc++] = "--cluster-yes";
	if (c->masters < 3) /* redis-cli wants 3 masters; fewer: by hand */
		rc = -EINVAL;
	else if (rc_cli_argv(c, 0, outb, sizeof(outb), argc, argv) != 0) {
		fprintf(stderr, "redis_cluster: cluster create failed:\n%s\n", outb);
		rc = -EIO;
	}
	if (rc == 0)
		rc = rc_wait_ok(c, end - now_s());
	if (rc == 0 && c->replicas)
		rc = replicas_pin(c, end);
	return rc;
}

/* rc_seeds() and rc_tls_seeds(): every node, comma-separated. */
static void seeds_fill(rc_cluster *c)
{
	for (int i = 0; i < c->n; i++) {
		size_t len = strlen(c->seeds);

		snprintf(c->seeds + len, sizeof(c->seeds) - len, "%s127.0.0.1:%d",
			 i ? "," : "", c->port[i]);
		len = strlen(c->tls_seeds);
		snprintf(c->tls_seeds + len, sizeof(c->tls_seeds) - len, "%s127.0.0.1:%d",
			 i ? "," : "", c->tls_port[i]);
	}
}

int rc_start(const rc_opts *o, rc_cluster **out)
{
	double timeout = o->timeout_s > 0 ? o->timeout_s : 60, end = now_s() + timeout;
	rc_cluster *c = NULL;
	int rc = cluster_new(o, &c);

	if (rc < 0)
		return rc;
	srand((unsigned)getpid() ^ (unsigned)(now_s() * 1e6));
	register_live(c);
	if (c->tls) {
		char tdir[PATH_MAX];

		snprintf(tdir, sizeof(tdir), "%s/tls", c->dir);
		rc = rc_make_certs(tdir, c->cli_timeout_s * 3, why, sizeof(why));
	}
	if (rc == 0)
		rc = start_nodes(c, end);
	if (rc == 0 && !c->plain)
		rc = cluster_create(c, end);
	if (rc < 0) {
		if (!why[0])
			snprintf(why, sizeof(why), "start failed: %s", strerror(-rc));
		rc_stop(c);
		return rc;
	}
	seeds_fill(c);
	*out = c;
	return 0;
}

int rc_nodes(const rc_cluster *c)
{
	return c->n;
}

int rc_port(const rc_cluster *c, int i)
{
	return c->port[i];
}

const char *rc_seeds(const rc_cluster *c)
{
	return c->seeds;
}

const char *rc_tls_seeds(const rc_cluster *c)
{
	return c->tls ? c->tls_seeds : NULL;
}

const char *rc_dir(const rc_cluster *c)
{
	return c->dir;
}
