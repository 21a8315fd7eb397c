/*
 * test_reconnect - clients outlive their daemon.
 *
 *  nodaemon: kvs_connect to a path where nothing listens (no file, or a stale
 *            socket file) answers KVS_E_NODAEMON.
 *  stop:     a worker process holding a read lease, a write lease and a
 *            control connection sees its daemon stop (SIGTERM: exit 0, socket
 *            removed); every call then answers KVS_E_DISCONNECTED, again and
 *            again, without SIGPIPE (SIGPIPE keeps its default action here, so
 *            a library that raises it kills the worker and the test says so);
 *            kvs_reconnect fails with KVS_E_NODAEMON while nothing listens,
 *            then works once the daemon is back on the same socket, with a
 *            fresh arena mapped.
 *  kill:     after SIGKILL the socket file is stale; a new daemon replaces it
 *            and clients reconnect.
 *  sigint:   SIGINT stops the daemon like SIGTERM.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define BT 16
#define NBLK 4

static th_daemon d;
static kvs_layout L;

static void no_daemon(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	kvs_client *c = NULL;
	char path[sizeof(sa.sun_path)];
	int fd;

	snprintf(path, sizeof(path), "%s/absent.sock", d.dir);
	CHECK_RC(kvs_connect(path, &L, &c), KVS_E_NODAEMON);
	CHECK(c == NULL);
	CHECK_RC(kvs_connect(path, NULL, &c), KVS_E_NODAEMON);

	/* A socket file nobody listens on any more. */
	snprintf(path, sizeof(path), "%s/stale.sock", d.dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK_RC(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	CHECK_RC(kvs_connect(path, &L, &c), KVS_E_NODAEMON);
	CHECK(c == NULL);
	unlink(path);
}

enum { MSG_READY = 1, MSG_STOPPED, MSG_CHECKED, MSG_STARTED };

/* Every verb of a client whose daemon is gone. */
static void check_all_disconnected(kvs_client *c, kvs_client *ctl,
				   kvs_lease rl, kvs_lease wl)
{
	kvs_hash h[NBLK];
	kvs_block b[NBLK];
	kvs_lease lease = 1;
	char *text = NULL;

	th_chain(&L, 42, NBLK, 0, 0, h);
	CHECK_RC(kvs_lookup(c, h, NBLK, &lease, b), KVS_E_DISCONNECTED);
	CHECK_EQ(lease, 0);
	CHECK_RC(kvs_reserve(c, h, NBLK, &lease, b), KVS_E_DISCONNECTED);
	CHECK_RC(kvs_commit(c, wl), KVS_E_DISCONNECTED);
	CHECK_RC(kvs_abort(c, wl), KVS_E_DISCONNECTED);
	CHECK_RC(kvs_release(c, rl), KVS_E_DISCONNECTED);
	CHECK_RC(kvs_stats(c, &text), KVS_E_DISCONNECTED);
	CHECK(text == NULL);
	CHECK_RC(kvs_stats(ctl, &text), KVS_E_DISCONNECTED);
	CHECK(text == NULL);
}

/* A worker: attach, hold leases, then live through the daemon's restart. */
static int worker(void *arg, int fd)
{
	kvs_client *c = th_connect(&d, &L), *ctl = th_connect(&d, NULL);
	uint64_t bb = kvs_block_bytes(c), msg, pid;
	kvs_hash h[NBLK], w[NBLK];
	kvs_block b[NBLK];
	kvs_lease rl = 0, wl = 0;
	int64_t v;
	char *text;

	(void)arg;
	th_chain(&L, 1, NBLK, 0, 0, h);
	th_chain(&L, 2, NBLK, 0, 0, w);
	CHECK_RC(th_publish(c, h, NBLK, NULL), NBLK);
	CHECK_RC(kvs_lookup(c, h, NBLK, &rl, b), NBLK);
	CHECK_RC(kvs_reserve(c, w, NBLK, &wl, b), NBLK);
	CHECK_RC(th_send_u64(fd, MSG_READY), 0);

	CHECK_RC(th_recv_u64(fd, &msg, 30000), 0);
	CHECK_EQ(msg, MSG_STOPPED);
	/* Twice: a dead client stays dead and polite. */
	check_all_disconnected(c, ctl, rl, wl);
	check_all_disconnected(c, ctl, rl, wl);
	CHECK_RC(kvs_reconnect(c), KVS_E_NODAEMON);
	CHECK_RC(kvs_reconnect(ctl), KVS_E_NODAEMON);
	check_all_disconnected(c, ctl, rl, wl);
	CHECK_RC(th_send_u64(fd, MSG_CHECKED), 0);

	CHECK_RC(th_recv_u64(fd, &pid, 30000), 0);
	CHECK_RC(kvs_reconnect(c), 0);
	CHECK_RC(kvs_reconnect(ctl), 0);
	CHECK_EQ(kvs_block_bytes(c), bb);
	CHECK_NE(kvs_namespace_id(c), 0);
	/* The new daemon: its own pid, its own (empty) arena, and it works. */
	CHECK_RC(kvs_stats(ctl, &text), 0);
	if (text) {
		CHECK_RC(kvs_stats_value(text, "server.pid", &v), 0);
		CHECK_EQ(v, pid);
		free(text);
	}
	CHECK_RC(kvs_release(c, 0), 0);
	th_round_trip(c, &L, 3, NBLK);
	th_round_trip(c, &L, 2, NBLK); /* the chain reserved before the restart: free again */
	kvs_close(ctl);
	kvs_close(c);
	return 0;
}

static void daemon_stops(void)
{
	th_child kid;
	uint64_t msg;
	int st;

	th_spawn(&kid, worker, NULL);
	CHECK_RC(th_recv_u64(kid.fd, &msg, 10000), 0);
	CHECK_EQ(th_stat_get(&d, "leases.active"), 2);

	CHECK_RC(th_daemon_stop(&d, SIGTERM), 0);
	CHECK(access(d.socket, F_OK) != 0);
	CHECK_RC(th_send_u64(kid.fd, MSG_STOPPED), 0);
	CHECK_RC(th_recv_u64(kid.fd, &msg, 30000), 0);
	CHECK_EQ(msg, MSG_CHECKED);

	CHECK_RC(th_daemon_start(&d), 0);
	CHECK_RC(th_send_u64(kid.fd, (uint64_t)d.pid), 0);
	st = th_child_wait(&kid, 30000);
	if (st == 128 + SIGPIPE)
		th_note("the worker died of SIGPIPE: the client library wrote to a "
			"closed socket without MSG_NOSIGNAL");
	CHECK_RC(st, 0);
	CHECK(th_wait_stat(&d, "leases.active", 0, TH_WAIT_MS));
	CHECK(th_wait_stat(&d, "tier_host.blocks_writing", 0, TH_WAIT_MS));
}

static void daemon_killed(void)
{
	kvs_client *c = th_connect(&d, &L), *c2 = NULL;
	kvs_hash h[NBLK];
	kvs_block b[NBLK];
	kvs_lease lease = 0;

	th_round_trip(c, &L, 10, NBLK);
	CHECK_RC(th_daemon_kill(&d), 128 + SIGKILL);
	CHECK(access(d.socket, F_OK) == 0); /* left behind: stale */
	th_chain(&L, 10, NBLK, 0, 0, h);
	/* The fast path may answer from the index (intact: nobody evicts)
	 * until the daemon's heartbeat is stale (KVS_FAST_STALE_MS); a killed
	 * daemon closes nothing itself. Then the socket says it. */
	{
		int64_t until = th_now_ms() + 2000;
		int rc;

		while ((rc = kvs_lookup(c, h, NBLK, &lease, b)) >= 0 &&
		       th_now_ms() < until) {
			kvs_release(c, lease);
			th_poll_pause();
		}
		CHECK_RC(rc, KVS_E_DISCONNECTED);
	}
	CHECK_RC(kvs_connect(d.socket, &L, &c2), KVS_E_NODAEMON);
	CHECK_RC(kvs_reconnect(c), KVS_E_NODAEMON);

	/* A new daemon takes over the stale socket. */
	CHECK_RC(th_daemon_start(&d), 0);
	CHECK_RC(kvs_reconnect(c), 0);
	th_round_trip(c, &L, 11, NBLK);
	kvs_close(c);
}

static void daemon_sigint(void)
{
	kvs_client *c = th_connect(&d, &L);
	kvs_lease lease = 0;
	kvs_hash h[NBLK];
	kvs_block b[NBLK];

	th_round_trip(c, &L, 20, NBLK);
	CHECK_RC(th_daemon_stop(&d, SIGINT), 0);
	CHECK(access(d.socket, F_OK) != 0);
	th_chain(&L, 20, NBLK, 0, 0, h);
	CHECK_RC(kvs_lookup(c, h, NBLK, &lease, b), KVS_E_DISCONNECTED);
	CHECK_RC(th_daemon_start(&d), 0);
	CHECK_RC(kvs_reconnect(c), 0);
	th_round_trip(c, &L, 21, NBLK);
	kvs_close(c);
}

int main(void)
{
	th_init("test_reconnect");
	L = th_layout("reconnect-model", BT);
	th_daemon_up(&d, TH_ARGS("--host-size", "8M"));
	no_daemon();
	daemon_stops();
	daemon_killed();
	daemon_sigint();
	return th_finish();
}
