/*
 * test_fdstore - kvshared under a service manager's fd store: the tests'
 * stand-in for systemd (tests/support/fdstore.c) is its $NOTIFY_SOCKET,
 * keeps what it stores (FDSTORE=1) and passes it back to the next start
 * ($LISTEN_FDS), as systemd does for a unit with FileDescriptorStoreMax=.
 *
 *  store:    once ready, the daemon has stored the pool's fds and its
 *            listening socket (names "kvs-meta", "kvs-arena-0", "listen").
 *  restart:  `systemctl restart` (SIGTERM, STOPPING=1, a new start with the
 *            fds): the new daemon starts "handed over", every block kept and
 *            every hit bit exact; a client reconnects as after any restart.
 *  crash:    kill -9 and the restart Restart=on-failure makes: the new daemon
 *            starts "recovered", with the blocks committed and verified
 *            (persist.pending 0) before the crash.
 *  off:      a restart with --persist off (its config file changed)
 *            starts cold, saying so; its clients reconnect and miss; the
 *            pool's fds the store passed it are removed from the store
 *            (FDSTOREREMOVE=1: no stale memfd pins RAM there), which keeps
 *            the listening socket alone.
 *  tenants:  with --tenant-arenas uid, the arena made on a uid's first
 *            attach after READY is stored then (kvs-arena-0): a crash
 *            recovers that uid's blocks. Needs root (a second uid).
 *  stop:     a stop releases the store; the socket's path goes with it (the
 *            unit's runtime directory does under systemd).
 * Under a real systemd: tests/integration/server/test_systemd.sh.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BT 16
#define N 32

static th_daemon d;
static kvs_layout L;

/* The stand-in's names= now. */
static void stored_names(const th_daemon *x, char *names, size_t cap)
{
	FILE *f = fopen(x->state, "r");
	char line[512];

	names[0] = '\0';
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "names=", 6))
			snprintf(names, cap, "%s", line + 6);
	if (f)
		fclose(f);
}

static void check_names(void)
{
	char names[512];

	stored_names(&d, names, sizeof(names));
	CHECK(strstr(names, "kvs-meta") != NULL);
	CHECK(strstr(names, "kvs-arena-0") != NULL);
	CHECK(strstr(names, "listen") != NULL);
	th_note("stored: %s", names);
}

/* Every block of @h a hit, bit exact, through a client that was connected
 * before the restart (it reconnects). */
static void check_kept(kvs_client *w, const kvs_hash *h, size_t n)
{
	size_t bad = 0;
	int rc = th_verify(w, h, n, &bad);

	if (rc == KVS_E_DISCONNECTED) {
		CHECK_RC(kvs_reconnect(w), 0);
		rc = th_verify(w, h, n, &bad);
	}
	CHECK_EQ(rc, (int)n);
	CHECK_EQ(bad, 0);
}

/* o's config file: `persist = on|off`, read at each start. */
static char conf[160];

static void write_conf(const char *persist)
{
	FILE *f = fopen(conf, "w");

	if (!f)
		th_fatal("%s: cannot write", conf);
	fprintf(f, "[kvshared]\npersist = %s\n", persist);
	fclose(f);
}

/* A restart with --persist off (the config changed): it starts cold, its
 * clients miss, and the pool's fds the store passed it are removed from the
 * store (FDSTOREREMOVE=1): only the listening socket is kept. */
static th_daemon o; /* alive until th_finish */

static void off_part(void)
{
	kvs_hash c[N];
	kvs_client *w;
	char names[512];

	if (th_daemon_init(&o, TH_ARGS("--config", conf, "--host-size", "32M",
				       "--gpu", "off")) < 0)
		th_fatal("temp dir");
	snprintf(conf, sizeof(conf), "%s/kvshared.conf", o.dir);
	write_conf("on");
	o.fdstore = true;
	if (th_daemon_start(&o) < 0)
		th_fatal("kvshared under the stand-in did not start");
	CHECK(th_fdstore_wait(&o, "fds", 3) && th_fdstore_wait(&o, "ready", 1));
	th_chain(&L, 3, N, 0, 0, c);
	w = th_connect(&o, &L);
	CHECK_EQ(th_publish(w, c, N, NULL), N);
	write_conf("off");
	CHECK_RC(th_fdstore_restart(&o), 0);
	CHECK_EQ(th_stat_get(&o, "start.mode"), 0);
	CHECK_EQ(th_stat_get(&o, "start.blocks_kept"), 0);
	CHECK(th_log_contains(&o, "--persist off"));
	CHECK(th_log_contains(&o, "fd store: kvs-meta, kvs-arena-0 removed: "
			      "not used by this start (cold)"));
	/* READY=1 came after the removal: the store holds the socket alone */
	CHECK_EQ(th_fdstore_get(&o, "fds"), 1);
	stored_names(&o, names, sizeof(names));
	CHECK(strstr(names, "listen") != NULL);
	CHECK(strstr(names, "kvs-meta") == NULL);
	CHECK(strstr(names, "kvs-arena") == NULL);
	th_note("stored after a restart with --persist off: %s", names);
	if (th_probe(w, c, N) == KVS_E_DISCONNECTED)
		CHECK_RC(kvs_reconnect(w), 0);
	CHECK_EQ(th_probe(w, c, N), 0);
	kvs_close(w);
	/* and a restart from there (nothing passed but the socket) stays so */
	CHECK_RC(th_fdstore_restart(&o), 0);
	CHECK_EQ(th_fdstore_get(&o, "fds"), 1);
}

static th_daemon t;

/* As uid 65534: attach to t (its arena is made now) and publish N. */
static int as_nobody(void *arg, int sync_fd)
{
	kvs_hash h[N];
	kvs_client *c;

	(void)arg;
	(void)sync_fd;
	if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
		return 3;
	if (kvs_connect(t.socket, &L, &c) != 0)
		return 4;
	th_chain(&L, 7, N, 0, 0, h);
	CHECK_EQ(th_publish(c, h, N, NULL), N);
	kvs_close(c);
	return 0;
}

static void tenants(void)
{
	if (geteuid() != 0) {
		th_skip_part("tenants: not root, no second uid; NOT TESTED: a "
			     "tenant arena stored when made");
		return;
	}
	if (th_daemon_init(&t, TH_ARGS("--host-size", "32M", "--gpu", "off",
				       "--socket-mode", "0666",
				       "--tenant-arenas", "uid")) < 0)
		th_fatal("temp dir");
	t.fdstore = true;
	if (th_daemon_start(&t) < 0)
		th_fatal("kvshared under the stand-in did not start");
	/* At READY no arena yet: kvs-meta and listen; kvs-arena-0 once uid
	 * 65534 attached */
	CHECK(th_fdstore_wait(&t, "ready", 1));
	CHECK_EQ(th_fdstore_get(&t, "fds"), 2);
	th_open_dir_to(&t, 65534, 65534);
	CHECK_EQ(th_run_child(as_nobody, NULL, TH_WAIT_MS), 0);
	CHECK(th_fdstore_wait(&t, "fds", 3));
	/* the persist worker's checksums done: a crash keeps them */
	CHECK(th_wait_stat(&t, "persist.pending", 0, TH_WAIT_MS));
	CHECK_RC(th_fdstore_crash(&t), 0);
	CHECK_EQ(th_stat_get(&t, "start.mode"), 2);
	CHECK_EQ(th_stat_get(&t, "start.blocks_kept"), N);
	CHECK_EQ(th_fdstore_get(&t, "fds"), 3);
	th_daemon_destroy(&t);
}

int main(void)
{
	kvs_hash a[N], b[N];
	kvs_client *w;

	th_init("test_fdstore");
	L = th_layout("fdstore", BT);
	if (th_daemon_init(&d, TH_ARGS("--host-size", "32M", "--gpu", "off")) < 0)
		th_fatal("temp dir");
	d.fdstore = true;
	if (th_daemon_start(&d) < 0)
		th_fatal("kvshared under the stand-in did not start");
	/* The stand-in's state may say fds=3 before ready=1: a restart
	 * counts READYs from there. */
	CHECK(th_fdstore_wait(&d, "ready", 1));
	CHECK(th_fdstore_wait(&d, "fds", 3));
	check_names();
	CHECK_EQ(th_stat_get(&d, "start.mode"), 0);

	th_chain(&L, 1, N, 0, 0, a);
	w = th_connect(&d, &L);
	CHECK_EQ(th_publish(w, a, N, NULL), N);

	/* systemctl restart */
	CHECK_RC(th_fdstore_restart(&d), 0);
	CHECK_EQ(th_fdstore_get(&d, "last_exit"), 0);
	CHECK_EQ(th_stat_get(&d, "start.mode"), 1);
	CHECK_EQ(th_stat_get(&d, "start.blocks_kept"), N);
	check_kept(w, a, N);
	/* Stored again at READY and at STOPPING, each name replaces its old
	 * fd (FDSTOREREMOVE=1; the stand-in keeps duplicates as systemd
	 * does): the store does not grow. */
	CHECK_EQ(th_fdstore_get(&d, "fds"), 3);

	/* kill -9, restarted with the fds the store kept */
	th_chain(&L, 2, N, 0, 0, b);
	CHECK_EQ(th_publish(w, b, N, NULL), N);
	/* the persist worker's checksums done: a crash keeps them */
	CHECK(th_wait_stat(&d, "persist.pending", 0, TH_WAIT_MS));
	CHECK_RC(th_fdstore_crash(&d), 0);
	CHECK_EQ(th_fdstore_get(&d, "last_exit"), 128 + SIGKILL);
	CHECK_EQ(th_fdstore_get(&d, "starts"), 3);
	CHECK_EQ(th_stat_get(&d, "start.mode"), 2);
	CHECK_EQ(th_stat_get(&d, "start.blocks_kept"), 2 * N);
	CHECK(th_fdstore_wait(&d, "ready", 3));
	CHECK_EQ(th_fdstore_get(&d, "fds"), 3);
	check_kept(w, a, N);
	check_kept(w, b, N);
	kvs_close(w);

	off_part();
	tenants();

	/* th_finish: SIGTERM to the stand-in (systemctl stop): exit 0 and the
	 * socket's path removed */
	return th_finish();
}
