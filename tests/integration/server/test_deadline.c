/*
 * test_deadline - no caller waits forever on a daemon that is stuck rather
 * than dead.
 *
 *  args:     kvs_set_timeout() and kvs_connect_timeout() refuse a negative
 *            deadline (-EINVAL).
 *  stopped:  clients attached to a daemon that is then SIGSTOPped: a lookup
 *            (socket path), a reserve, the commit of a write lease taken
 *            before, stats, and an operator verb (kvs_list) each return
 *            KVS_E_DISCONNECTED after at least the client's deadline (and
 *            well before a hang guard); the client stays dead (the next
 *            call answers at once). A kvs_connect to the stopped daemon
 *            (the kernel queues the connection, nobody answers HELLO) and a
 *            kvs_watch_open do the same under $KVSHARE_TIMEOUT_MS. After
 *            SIGCONT every client reconnects and round-trips, and the
 *            daemon serves on. (A request that timed out was sent: the
 *            daemon carries it out when it runs again, so the commit
 *            publishes what was written before it, whole, or nothing.)
 *  fast:     with the fast path on, lookups hit from the shared index until
 *            its heartbeat goes stale (250 ms), then fall to the socket,
 *            which must time out too; the fast lease taken before is gone
 *            with the connection; after SIGCONT a reconnect hits again.
 *  backlog:  a listener whose backlog is full (nobody accepts: connect()
 *            itself would block): kvs_connect_timeout() returns
 *            KVS_E_DISCONNECTED after its deadline, kvs_connect() after
 *            $KVSHARE_TIMEOUT_MS, and without it after the default 5 s.
 *
 * A daemon is stopped only between stop() and cont(), with no early return
 * between them (CHECKs never leave); if the test dies anyway (th_fatal, the
 * watchdog, a crash), the harness SIGKILLs its daemons, stopped or not.
 * Elapsed times are checked from below (the deadline was waited for) and
 * against a generous hang guard, never tightly.
 */
#include "harness.h"
#include "harness_client.h"
#include "kvshare_admin.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define BT 16
#define NBLK 4
#define T_MS 300       /* the deadline of the clients under test */
#define ENV_MS 400     /* $KVSHARE_TIMEOUT_MS where the default is tested */
#define GUARD_MS 5000  /* past deadline + this (or past the default, for a
			* shorter deadline) the call waited too long */

static th_daemon d;
static kvs_layout L;
static int stopped;

static void stop(void)
{
	CHECK_EQ(kill(d.pid, SIGSTOP), 0);
	stopped = 1;
}

static void cont(void)
{
	if (stopped)
		CHECK_EQ(kill(d.pid, SIGCONT), 0);
	stopped = 0;
}

static kvs_client *connect_t(const kvs_layout *l, uint32_t flags)
{
	kvs_client *c = NULL;
	int rc = kvs_connect_timeout(d.socket, l, flags, T_MS, &c);

	if (rc)
		th_fatal("kvs_connect_timeout: %s", kvs_strerror(rc));
	return c;
}

/* A call took at least @want ms, and returned well before a hang; a
 * deadline shorter than the default was the one applied (the call did not
 * wait the default instead). */
static void check_waited(const char *what, int64_t t0, int want)
{
	int64_t ms = th_now_ms() - t0;
	int max = want < KVS_TIMEOUT_DEFAULT_MS ? KVS_TIMEOUT_DEFAULT_MS
						: want + GUARD_MS;

	th_note("%s: KVS_E_DISCONNECTED after %lld ms (deadline %d ms)", what,
		(long long)ms, want);
	CHECK_GE(ms, want);
	CHECK_LT(ms, max);
}

#define TIMED(what, call, want)                                               \
	do {                                                                  \
		int64_t t0_ = th_now_ms();                                    \
		CHECK_RC(call, KVS_E_DISCONNECTED);                           \
		check_waited(what, t0_, want);                                \
	} while (0)

static void args(void)
{
	kvs_client *c = NULL;

	CHECK_RC(kvs_connect_timeout(d.socket, &L, 0, -1, &c), -EINVAL);
	CHECK(c == NULL);
	c = connect_t(&L, 0);
	CHECK_RC(kvs_set_timeout(c, -1), -EINVAL);
	CHECK_RC(kvs_set_timeout(NULL, 100), -EINVAL);
	CHECK_RC(kvs_set_timeout(c, 0), 0);
	CHECK_RC(kvs_set_timeout(c, T_MS), 0);
	th_round_trip(c, &L, 1, NBLK);
	kvs_close(c);
}

static void stopped_daemon(void)
{
	kvs_client *cl = connect_t(&L, KVS_CONNECT_NO_FASTPATH);
	kvs_client *cr = connect_t(&L, KVS_CONNECT_NO_FASTPATH);
	kvs_client *cc = connect_t(&L, KVS_CONNECT_NO_FASTPATH);
	kvs_client *ctl = connect_t(NULL, 0), *adm = NULL, *late = NULL;
	kvs_client *all[4];
	kvs_hash h[NBLK], w[NBLK];
	kvs_block b[NBLK];
	kvs_lease lease = 0, wl = 0;
	kvs_ns_summary *ns = NULL;
	kvs_watch *watch = NULL;
	char *text = NULL;
	size_t bad = 1;
	int rc;

	/* A control client on the default deadline, then set: the setter
	 * counts for calls after it. */
	CHECK_RC(kvs_connect(d.socket, NULL, &adm), 0);
	if (!adm)
		return;
	CHECK_RC(kvs_set_timeout(adm, T_MS), 0);
	th_chain(&L, 2, NBLK, 0, 0, h);
	th_chain(&L, 3, NBLK, 0, 0, w);
	CHECK_RC(th_publish(cl, h, NBLK, NULL), NBLK);
	CHECK_RC(kvs_reserve(cc, w, NBLK, &wl, b), NBLK);
	for (int i = 0; i < NBLK; i++) {
		void *p = kvs_block_ptr(cc, &b[i]);

		if (CHECK(p != NULL))
			th_pattern_fill(p, kvs_block_bytes(cc), w[i], 0);
	}

	stop();
	TIMED("lookup", kvs_lookup(cl, h, NBLK, &lease, b), T_MS);
	CHECK_EQ(lease, 0);
	TIMED("reserve", kvs_reserve(cr, w, NBLK, &lease, b), T_MS);
	TIMED("commit", kvs_commit(cc, wl), T_MS);
	TIMED("stats", kvs_stats(ctl, &text), T_MS);
	CHECK(text == NULL);
	TIMED("list", kvs_list(adm, 0, 0, &ns), T_MS);
	CHECK(ns == NULL);
	/* Dead now: answered without another wait. */
	CHECK_RC(kvs_lookup(cl, h, NBLK, &lease, b), KVS_E_DISCONNECTED);
	CHECK_RC(kvs_stats(ctl, &text), KVS_E_DISCONNECTED);
	/* The kernel queues the connection; nobody answers HELLO. */
	TIMED("connect", kvs_connect_timeout(d.socket, &L, 0, T_MS, &late), T_MS);
	CHECK(late == NULL);
	setenv("KVSHARE_TIMEOUT_MS", "400", 1);
	TIMED("connect (env)", kvs_connect(d.socket, NULL, &late), ENV_MS);
	TIMED("watch_open (env)", kvs_watch_open(d.socket, &watch), ENV_MS);
	CHECK(watch == NULL);
	unsetenv("KVSHARE_TIMEOUT_MS");
	cont();

	/* Back: every client reconnects and works. */
	CHECK_RC(kvs_reconnect(cl), 0);
	CHECK_RC(kvs_reconnect(cr), 0);
	CHECK_RC(kvs_reconnect(cc), 0);
	CHECK_RC(kvs_reconnect(ctl), 0);
	CHECK_RC(kvs_reconnect(adm), 0);
	/* The requests that timed out were sent, and the daemon, running
	 * again, reads them before it sees the connections closed: the commit
	 * may have published the blocks cc wrote, whole, or not at all. */
	rc = th_verify(cl, w, NBLK, &bad);
	th_note("the commit that timed out published %d of %d blocks", rc, NBLK);
	CHECK(rc == 0 || rc == NBLK);
	CHECK_EQ(bad, 0);
	th_round_trip(cl, &L, 4, NBLK);
	th_round_trip(cr, &L, 6, NBLK);
	CHECK_RC(kvs_stats(ctl, &text), 0);
	free(text);
	CHECK_RC(kvs_list(adm, 0, 0, &ns), 1);
	free(ns);
	all[0] = cl, all[1] = cr, all[2] = cc, all[3] = ctl;
	for (int i = 0; i < 4; i++)
		kvs_close(all[i]);
	kvs_close(adm);
}

static void fast_path(void)
{
	kvs_client *c = connect_t(&L, 0);
	kvs_hash h[NBLK];
	kvs_block b[NBLK];
	kvs_lease first = 0, lease = 0;
	int64_t t0, limit;
	int rc, hits = 0;

	th_chain(&L, 5, NBLK, 0, 0, h);
	CHECK_RC(th_publish(c, h, NBLK, NULL), NBLK);
	CHECK_RC(kvs_lookup(c, h, NBLK, &first, b), NBLK);
	/* A fast lease (client/fast.c: 0xffff in bits 16..31): the index
	 * answered, so what follows tests the fall from it to the socket. */
	CHECK_EQ(first >> 16 & 0xffff, 0xffff);

	stop();
	/* Hits from the index until the heartbeat is stale; then the socket,
	 * which must time out: the last lookup is the one timed. */
	limit = th_now_ms() + 250 + GUARD_MS;
	do {
		t0 = th_now_ms();
		rc = kvs_lookup(c, h, NBLK, &lease, b);
		if (rc > 0) {
			hits++;
			CHECK_RC(kvs_release(c, lease), 0);
			th_poll_pause();
		}
	} while (rc > 0 && th_now_ms() < limit);
	th_note("fast: %d lookups hit from the index after the stop", hits);
	CHECK_RC(rc, KVS_E_DISCONNECTED);
	check_waited("fast lookup, stale heartbeat", t0, T_MS);
	CHECK_RC(kvs_release(c, first), KVS_E_DISCONNECTED);
	CHECK_RC(kvs_lookup(c, h, NBLK, &lease, b), KVS_E_DISCONNECTED);
	cont();

	CHECK_RC(kvs_reconnect(c), 0);
	CHECK_RC(kvs_lookup(c, h, NBLK, &lease, b), NBLK);
	CHECK_RC(kvs_release(c, lease), 0);
	kvs_close(c);
}

/* A listener nobody accepts on, its backlog filled: a connect() waits. */
static int full_listener(char *path, size_t cap, int *fill, int nfill)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd = socket(AF_UNIX, SOCK_STREAM, 0), n = 0;

	snprintf(path, cap, "%s/full.sock", d.dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(lfd, 0) < 0)
		th_fatal("listener: %s", strerror(errno));
	while (n < nfill) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);

		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			CHECK_EQ(errno, EAGAIN); /* full */
			close(fd);
			break;
		}
		fill[n++] = fd;
	}
	CHECK_GT(n, 0);
	CHECK_LT(n, nfill);
	for (int i = n; i < nfill; i++)
		fill[i] = -1;
	return lfd;
}

static void backlog(void)
{
	char path[108];
	int fill[16], lfd = full_listener(path, sizeof(path), fill, 16);
	kvs_client *c = NULL;

	TIMED("connect, backlog full", kvs_connect_timeout(path, &L, 0, T_MS, &c),
	      T_MS);
	setenv("KVSHARE_TIMEOUT_MS", "400", 1);
	TIMED("connect, backlog full (env)", kvs_connect(path, NULL, &c), ENV_MS);
	setenv("KVSHARE_TIMEOUT_MS", "not a number", 1);
	TIMED("connect, backlog full (default)", kvs_connect(path, NULL, &c),
	      KVS_TIMEOUT_DEFAULT_MS);
	unsetenv("KVSHARE_TIMEOUT_MS");
	CHECK(c == NULL);
	for (int i = 0; i < 16; i++)
		if (fill[i] >= 0)
			close(fill[i]);
	close(lfd);
	unlink(path);
}

int main(void)
{
	/* The test takes about 10 s; a call that hangs should fail it sooner
	 * than the harness's default watchdog (120 s). */
	setenv("TH_TIMEOUT", "60", 0);
	th_init("test_deadline");
	unsetenv("KVSHARE_TIMEOUT_MS");
	L = th_layout("deadline", BT);
	th_daemon_up(&d, TH_ARGS("--host-size", "16M"));
	args();
	stopped_daemon();
	fast_path();
	backlog();
	cont();
	return th_finish();
}
