/*
 * test_uid_caps - what one peer uid may take of the daemon (DESIGN.md:
 * connections and namespaces are capped per uid), each refusal a clean
 * KVS_E_LIMIT while everybody else is served:
 *
 *  - --max-namespaces-per-uid 4: attaches with 4 distinct salts make 4
 *    namespaces; a 5th salt is refused (KVS_E_LIMIT, namespaces.refused,
 *    errors.limit, one log line); once clients left, their namespaces
 *    are reclaimed for new salts, oldest first (namespaces.reclaimed), one
 *    with a client never, and past those the next is refused; a salt it
 *    has still attaches, and a client attached before is served all
 *    along;
 *    as root, another uid (nobody) still makes its own namespace;
 *  - --max-clients 8 --max-clients-per-uid 3: the stats client and two
 *    workers are this uid's 3; a 4th connection is refused (KVS_E_LIMIT,
 *    clients.refused_uid) while the workers are served; one leaving makes
 *    room; as root, nobody connects while this uid is at its cap;
 *  - the default (auto): all of --max-clients on a private socket (0600),
 *    half of it on a shared one (0666).
 * An API user that picks cache salts (the vLLM connector makes one
 * connection and namespace per salt) is what these caps bound.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BT 16
#define NOBODY 65534
#define NS_CAP 4

static kvs_layout L;

static kvs_layout salted(int i)
{
	static char salts[16][24];
	kvs_layout l = L;

	snprintf(salts[i], sizeof(salts[i]), "salt-%d", i);
	l.salt = salts[i];
	return l;
}

/* Child: become nobody, connect with the layout @arg, report the result,
 * and on success whether a round trip worked. */
static int as_nobody(void *arg, int sync_fd)
{
	const kvs_layout *l = arg;
	const char *sock = getenv("TH_UID_CAPS_SOCKET");
	kvs_client *c = NULL;
	kvs_hash h[2];
	size_t bad = 1;
	int rc;

	if (th_become(NOBODY) < 0)
		return 3;
	rc = kvs_connect(sock, l, &c);
	th_send_u64(sync_fd, (uint64_t)(int64_t)rc);
	if (rc < 0)
		return 0;
	th_chain(l, (uint64_t)getpid(), 2, 0, 0, h);
	rc = th_publish(c, h, 2, NULL);
	if (rc == 2)
		rc = th_verify(c, h, 2, &bad);
	th_send_u64(sync_fd, (uint64_t)(int64_t)(rc == 2 && bad == 0 ? 0 : -1));
	kvs_close(c);
	return 0;
}

/* kvs_connect() as nobody with layout @l: its result; *served: a round
 * trip worked after it. */
static int connect_as_nobody(th_daemon *d, kvs_layout *l, bool *served)
{
	th_child ch;
	uint64_t v = 1, ok = 1;

	*served = false;
	setenv("TH_UID_CAPS_SOCKET", d->socket, 1);
	th_spawn(&ch, as_nobody, l);
	if (!CHECK_RC(th_recv_u64(ch.fd, &v, TH_WAIT_MS), 0)) {
		th_child_wait(&ch, TH_WAIT_MS);
		return INT32_MIN;
	}
	if ((int64_t)v == 0 && CHECK_RC(th_recv_u64(ch.fd, &ok, TH_WAIT_MS), 0))
		*served = ok == 0;
	CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
	return (int)(int64_t)v;
}

static void namespaces(bool root)
{
	static th_daemon d;
	kvs_client *keep, *c[NS_CAP + 2] = { 0 }, *x = NULL;
	kvs_layout l;
	bool served;

	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--socket-mode", "0666",
				 "--max-namespaces-per-uid", "4"));
	if (root)
		th_open_dir_to(&d, NOBODY, NOBODY);
	keep = th_connect(&d, &L); /* namespace 1: no salt */
	for (int i = 1; i < NS_CAP; i++) {
		l = salted(i);
		c[i] = th_connect(&d, &l);
	}
	CHECK_EQ(th_stat_get(&d, "namespaces.count"), NS_CAP);
	l = salted(NS_CAP);
	CHECK_RC(kvs_connect(d.socket, &l, &x), KVS_E_LIMIT);
	CHECK(x == NULL);
	CHECK_EQ(th_stat_get(&d, "namespaces.refused"), 1);
	CHECK_EQ(th_stat_get(&d, "errors.limit"), 1);
	CHECK_EQ(th_stat_get(&d, "namespaces.count"), NS_CAP);
	CHECK(th_log_contains(&d, "refusing a new namespace for uid"));
	th_round_trip(keep, &L, 1, 2);
	for (int i = 2; i < NS_CAP; i++)
		kvs_close(c[i]);
	CHECK(th_wait_stat(&d, "clients.connected", 3, TH_WAIT_MS));
	/* At the cap, a namespace with no client (and no block, or few it
	 * can free) comes back, the oldest first (salt 2, then 3); one with a
	 * client stays (salt 1): a third new salt is refused. */
	for (int i = 0; i < 3; i++) {
		l = salted(NS_CAP + 1 + i);
		CHECK_RC(kvs_connect(d.socket, &l, &c[2 + i]), i < 2 ? 0 : KVS_E_LIMIT);
	}
	CHECK_EQ(th_stat_get(&d, "namespaces.reclaimed"), 2);
	CHECK_EQ(th_stat_get(&d, "namespaces.refused"), 2);
	CHECK_EQ(th_stat_get(&d, "namespaces.count"), NS_CAP);
	/* A salt it has attaches. */
	l = salted(1);
	CHECK_RC(kvs_connect(d.socket, &l, &x), 0);
	if (x)
		th_round_trip(x, &l, 11, 2);
	kvs_close(x);
	for (int i = 1; i < 4; i++)
		kvs_close(c[i]);
	th_round_trip(keep, &L, 3, 2);
	if (root) {
		/* Another uid's namespaces are its own count. */
		l = salted(NS_CAP + 4);
		CHECK_RC(connect_as_nobody(&d, &l, &served), 0);
		CHECK(served);
		CHECK_EQ(th_stat_get(&d, "namespaces.count"), NS_CAP + 1);
	}
	kvs_close(keep);
}

static void connections(bool root)
{
	static th_daemon d;
	kvs_client *a, *b, *x = NULL;
	bool served;

	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--socket-mode", "0666",
				 "--max-clients", "8", "--max-clients-per-uid",
				 "3"));
	if (root)
		th_open_dir_to(&d, NOBODY, NOBODY);
	CHECK_EQ(th_stat_get(&d, "clients.max_per_uid"), 3); /* stats: 1 */
	a = th_connect(&d, &L);
	b = th_connect(&d, &L);
	CHECK_RC(kvs_connect(d.socket, &L, &x), KVS_E_LIMIT);
	CHECK_RC(kvs_connect(d.socket, NULL, &x), KVS_E_LIMIT);
	CHECK_EQ(th_stat_get(&d, "clients.refused_uid"), 2);
	CHECK_EQ(th_stat_get(&d, "clients.refused"), 0);
	CHECK_EQ(th_stat_get(&d, "clients.connected"), 3);
	CHECK(th_log_contains(&d, "--max-clients-per-uid"));
	th_round_trip(a, &L, 10, 2);
	th_round_trip(b, &L, 11, 2);
	if (root) {
		CHECK_RC(connect_as_nobody(&d, &L, &served), 0);
		CHECK(served);
	} else {
		th_skip_part("not root: another uid served while this one is "
			     "at --max-clients-per-uid");
	}
	kvs_close(b);
	CHECK(th_wait_stat(&d, "clients.connected", 2, TH_WAIT_MS));
	CHECK_RC(kvs_connect(d.socket, &L, &x), 0);
	if (x)
		th_round_trip(x, &L, 12, 2);
	kvs_close(x);
	kvs_close(a);
}

static void defaults(void)
{
	static th_daemon priv, shared;

	th_daemon_up(&priv, TH_ARGS("--host-size", "8M", "--max-clients", "10"));
	CHECK_EQ(th_stat_get(&priv, "clients.max_per_uid"), 10);
	th_daemon_up(&shared, TH_ARGS("--host-size", "8M", "--max-clients", "10",
				      "--socket-mode", "0666"));
	CHECK_EQ(th_stat_get(&shared, "clients.max_per_uid"), 5);
}

int main(void)
{
	bool root;

	th_init("test_uid_caps");
	L = th_layout("uid-caps-model", BT);
	root = geteuid() == 0;
	namespaces(root);
	if (!root)
		th_skip_part("not root: another uid's namespaces counted apart");
	connections(root);
	defaults();
	return th_finish();
}
