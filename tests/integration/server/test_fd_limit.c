/*
 * test_fd_limit - a daemon with few file descriptors refuses cleanly and
 * never spins (DESIGN.md: the daemon raises its own fd limit and refuses
 * cleanly past it).
 *
 * The daemon starts with RLIMIT_NOFILE soft 32, hard 64:
 *  - it raises the soft limit to the hard one (server.fd_limit 64, a log
 *    line) and lowers --max-clients (1024 by default) to what 64 fds allow
 *    (clients.max, a log line);
 *  - workers connect until one is refused: the refusal is KVS_E_LIMIT, after
 *    exactly clients.max served connections (the stats client is one);
 *  - then 150 raw connections that say nothing: the daemon accepts them as
 *    refused peers until accept() finds no fd (EMFILE), and pauses its
 *    listener instead of being woken for the waiting connection again at
 *    once. Over a saturated second the pauses are counted
 *    (clients.accept_paused: a handful, not thousands), the daemon's CPU
 *    time is read from /proc/PID/stat (ticks, not wall time) and its log
 *    grows by a few lines; a served worker keeps getting answers;
 *  - once the raw connections close, a worker that leaves makes room and a
 *    new one is served.
 * Without the backoff the listener spins at 100% CPU and logs "Too many open
 * files" thousands of times a second.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_raw.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define BT 16
#define MAX_WORKERS 64
#define RAW 150
#define SATURATED_MS 1000

static kvs_layout L;

/* The daemon's user + system CPU time in clock ticks, or -1. */
static long long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* Fields after the command's ")": state is field 3, utime 14, stime 15. */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
			 "%llu %llu", &ut, &st) != 2)
		return -1;
	return (long long)(ut + st);
}

static long long file_bytes(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* A connection that says nothing, made without waiting: -1 when the
 * daemon's backlog is full. */
static int raw_silent(const th_daemon *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d->socket);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Connections the daemon has accepted, served or refused. */
static int64_t accepts(th_daemon *d)
{
	return th_stat_get(d, "clients.accepted") +
	       th_stat_get(d, "clients.refused");
}

/* Raw connections that say nothing, and a /metrics scrape: more than the
 * daemon has fds for. */
struct flood {
	int raw[RAW], nraw;
	int scrape;
	int64_t seen0; /* accepts() before the flood */
};

/* Workers connect until one is refused; returns how many were served. */
static int serve_to_limit(th_daemon *d, kvs_client **w, int64_t max)
{
	int nw = 0, rc = 0;

	while (nw < MAX_WORKERS) {
		rc = kvs_connect(d->socket, &L, &w[nw]);
		if (rc)
			break;
		nw++;
	}
	CHECK_RC(rc, KVS_E_LIMIT);
	CHECK_EQ(nw + 1, max); /* + the stats client */
	CHECK_GE(th_stat_get(d, "clients.refused"), 1);
	th_round_trip(w[0], &L, 1, 2);
	return nw;
}

/* More connections than fds: refused peers until EMFILE, then the rest
 * wait in the backlog. */
static void flood_start(th_daemon *d, struct flood *f)
{
	int64_t paused0, t0;

	paused0 = th_stat_get(d, "clients.accept_paused");
	CHECK_EQ(paused0, 0);
	f->seen0 = accepts(d);
	for (int i = 0; i < RAW; i++) {
		int fd = raw_silent(d);

		if (fd >= 0)
			f->raw[f->nraw++] = fd;
	}
	th_note("%d raw connections made", f->nraw);
	t0 = th_now_ms();
	while (th_stat_get(d, "clients.accept_paused") == 0 &&
	       th_now_ms() - t0 < TH_WAIT_MS)
		th_poll_pause();
	CHECK_GE(th_stat_get(d, "clients.accept_paused"), 1);

	/* A scrape of /metrics waits too: its listener finds no fd either. */
	f->scrape = th_tcp_connect((int)th_stat_get(d, "server.metrics_port"));
	CHECK(f->scrape >= 0);
}

/* One saturated second: pauses, CPU ticks and log bytes counted. */
static void saturated_second(th_daemon *d, kvs_client **w, int nw)
{
	long long ticks0, ticks1, log0, log1;
	int64_t paused0, paused1, t0;

	log0 = file_bytes(d->log);
	ticks0 = cpu_ticks(d->pid);
	paused0 = th_stat_get(d, "clients.accept_paused");
	t0 = th_now_ms();
	for (int i = 0; i < 5; i++)
		th_round_trip(w[i % nw], &L, 10 + (uint64_t)i, 2);
	while (th_now_ms() - t0 < SATURATED_MS)
		th_poll_pause();
	paused1 = th_stat_get(d, "clients.accept_paused");
	ticks1 = cpu_ticks(d->pid);
	log1 = file_bytes(d->log);
	th_note("saturated %d ms: %lld listener pauses, %lld CPU ticks, log +%lld "
		"bytes", SATURATED_MS, (long long)(paused1 - paused0),
		ticks1 - ticks0, log1 - log0);
	CHECK(ticks0 >= 0 && ticks1 >= 0);
	/* 100 ms doubling to 1 s: about 4 pauses a second. */
	CHECK_LE(paused1 - paused0, 12);
	/* A spinning loop burns ~100 ticks a second (USER_HZ 100). */
	CHECK_LE(ticks1 - ticks0, 30);
	CHECK_LE(log1 - log0, 4096);
	CHECK(th_log_contains(d, "not accepting for 100 ms"));
}

/* The flood's connections close; each is accepted once (a closed one too,
 * from the backlog), served for the moment it takes to read its end or
 * refused. */
static void flood_end(th_daemon *d, const struct flood *f)
{
	int64_t t0;

	for (int i = 0; i < f->nraw; i++)
		close(f->raw[i]);
	if (f->scrape >= 0)
		close(f->scrape);
	t0 = th_now_ms();
	while (accepts(d) < f->seen0 + f->nraw &&
	       th_now_ms() - t0 < 3 * TH_WAIT_MS)
		th_poll_pause();
	CHECK_EQ(accepts(d), f->seen0 + f->nraw);
}

int main(void)
{
	static th_daemon d;
	static struct flood f;
	kvs_client *w[MAX_WORKERS] = { 0 }, *x = NULL;
	int nw;
	int64_t max;

	th_init("test_fd_limit");
	L = th_layout("fd-limit-model", BT);
	if (th_daemon_init(&d, TH_ARGS("--host-size", "8M", "--client-timeout",
				       "60", "--metrics-addr", "127.0.0.1:0")))
		th_fatal("no temp dir");
	d.nofile_soft = 32;
	d.nofile_hard = 64;
	if (th_daemon_start(&d))
		th_fatal("kvshared did not start under RLIMIT_NOFILE 32/64");

	/* Raised, and --max-clients lowered to fit. */
	CHECK_EQ(th_stat_get(&d, "server.fd_limit"), 64);
	CHECK(th_log_contains(&d, "soft limit raised to 64"));
	max = th_stat_get(&d, "clients.max");
	th_note("clients.max %lld under 64 fds", (long long)max);
	if (!CHECK_LT(max, 32) || !CHECK_GE(max, 2))
		return th_finish();
	CHECK(th_log_contains(&d, "--max-clients 1024 lowered to"));

	/* Served up to the limit, then refused cleanly. */
	nw = serve_to_limit(&d, w, max);
	flood_start(&d, &f);
	saturated_second(&d, w, nw);

	/* Served again once the flood is gone and a worker leaves. */
	flood_end(&d, &f);
	kvs_close(w[--nw]);
	CHECK(th_wait_stat(&d, "clients.connected", max - 1, TH_WAIT_MS));
	CHECK_RC(kvs_connect(d.socket, &L, &x), 0);
	if (x)
		th_round_trip(x, &L, 100, 2);
	kvs_close(x);
	CHECK(th_log_contains(&d, "accepting again after"));
	for (int i = 0; i < nw; i++)
		kvs_close(w[i]);
	return th_finish();
}
