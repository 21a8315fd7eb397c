/*
 * test_scope - operator commands are an operator's; a worker sees and
 * touches only its own domain (docs/reliability.md, "Hostile clients").
 *
 * An operator is the daemon's uid, root or a uid of --admin-uid; every other
 * peer is a worker. Clients of other uids are child processes that drop to
 * them with setresgid/setresuid, and the first daemon runs as a uid of its
 * own (setpriv), so that the daemon's uid and root are two operators: the
 * test needs root; it skips (77) otherwise (without setpriv the daemon runs
 * as root, and the note says what that leaves untested).
 *
 *  - --tenant-arenas uid: worker A (65534) publishes a chain of NBLK blocks;
 *    worker B (65533), never attached to A's namespace, gets none of A's
 *    `stored` events on its WATCH (its own block's, yes); INSPECT of A's
 *    block with namespace 0 is a miss, with A's namespace KVS_E_PERM; LIST
 *    shows its own namespace only; EVICT and FLUSH of scope all, EVICT of
 *    A's namespace, PIN and VERIFY are KVS_E_PERM (kvsctl evict --all says
 *    "kvsctl: evict failed: <kvs_strerror(KVS_E_PERM)>"), A's blocks all
 *    stay (A's next lookup: NBLK hits); B inspects and evicts its own
 *    namespace's blocks;
 *  - the operators, root (the test), the daemon's uid (65531) and an
 *    --admin-uid (65532), see both namespaces in LIST and A's block with
 *    INSPECT namespace 0, may watch, pin A's chain, and EVICT of scope all
 *    frees A's blocks;
 *  - one shared arena (no --tenant-arenas): the arena is one trust domain,
 *    so worker B lists and inspects A's namespace and evicts a prefix of
 *    it, but a WATCH (of every namespace), EVICT or FLUSH of scope all and
 *    PIN are an operator's: KVS_E_PERM, counted in errors.perm.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"
#include "kvshare_admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BT 16
#define NBLK 32
#define UID_A 65534      /* a worker */
#define UID_B 65533      /* another worker */
#define UID_ADMIN 65532  /* --admin-uid */
#define UID_DAEMON 65531 /* the daemon's own */
#define SEED_A 4242
#define NRES 24          /* results a child sends */

static kvs_layout L;
static char setpriv_bin[] = "/usr/bin/setpriv";
static uint32_t daemon_uid; /* UID_DAEMON, or 0 (root) without setpriv */

/* A child's job: become @uid, run @fn on daemon @d, send its results. */
typedef struct job {
	const th_daemon *d;
	uint32_t uid;
	void (*fn)(const th_daemon *d, int sync_fd, int64_t *res);
} job;

static int as_uid(void *arg, int sync_fd)
{
	const job *j = arg;
	int64_t res[NRES];

	for (int i = 0; i < NRES; i++)
		res[i] = INT64_MIN;
	if (th_become(j->uid) < 0)
		return 3;
	j->fn(j->d, sync_fd, res);
	for (int i = 0; i < NRES; i++)
		th_send_u64(sync_fd, (uint64_t)res[i]);
	return 0;
}

/* Run @fn as @uid against @d; its results into @res. */
static void run_as(const th_daemon *d, uint32_t uid,
		   void (*fn)(const th_daemon *, int, int64_t *), int64_t *res)
{
	job j = { .d = d, .uid = uid, .fn = fn };
	th_child ch;

	th_spawn(&ch, as_uid, &j);
	for (int i = 0; i < NRES; i++) {
		uint64_t v = (uint64_t)INT64_MIN;

		if (!CHECK_RC(th_recv_u64(ch.fd, &v, TH_WAIT_MS), 0))
			break;
		res[i] = (int64_t)v;
	}
	CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
}

static void chain_a(kvs_hash *h)
{
	th_chain(&L, SEED_A, NBLK, 0, 0, h);
}

/* ---- what the children do ------------------------------------------------ */

/* Worker A: publish its chain (res[0]: NEW blocks), or with @probe only
 * look it up (res[0]: hits). */
static void a_publish(const th_daemon *d, int sync_fd, int64_t *res)
{
	kvs_client *c = NULL;
	kvs_hash h[NBLK];

	chain_a(h);
	if ((res[0] = kvs_connect(d->socket, &L, &c)) == 0)
		res[0] = th_publish(c, h, NBLK, NULL);
	kvs_close(c);
}

static void a_probe(const th_daemon *d, int sync_fd, int64_t *res)
{
	kvs_client *c = NULL;
	kvs_hash h[NBLK];

	chain_a(h);
	if ((res[0] = kvs_connect(d->socket, &L, &c)) == 0)
		res[0] = th_probe(c, h, NBLK);
	kvs_close(c);
}

/* `kvsctl --socket S evict --all`: 1 when it failed with the refusal's
 * words on stderr, 0 when not, -1 without $KVSCTL. */
static int64_t kvsctl_refused(const th_daemon *d)
{
	const char *bin = getenv("KVSCTL");
	char cmd[512], out[1024], want[256];
	size_t n;
	FILE *f;
	int st;

	if (!bin || !*bin)
		return -1;
	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' evict --all 2>&1", bin,
		 d->socket);
	if (!(f = popen(cmd, "r")))
		return 0;
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	st = pclose(f);
	snprintf(want, sizeof(want), "kvsctl: evict failed: %s",
		 kvs_strerror(KVS_E_PERM));
	if (!strstr(out, want))
		fprintf(stderr, "kvsctl evict --all as uid %u said: %s\n",
			(unsigned)getuid(), out);
	return WIFEXITED(st) && WEXITSTATUS(st) == 1 && strstr(out, want);
}

/* Worker B: watch from before A publishes (the parent says when A is
 * done), then publish one block of its own and read events until its own
 * arrives: res[0] watch open, res[1] its own block seen, res[2] events of
 * other blocks. Then, on a control connection, every request that reaches
 * into A's namespace. */
enum { B_WATCH, B_OWN_SEEN, B_FOREIGN, B_INSPECT_ANY, B_INSPECT_A, B_LIST,
       B_LIST_UID, B_LIST_A, B_EVICT_ALL, B_FLUSH_ALL, B_EVICT_NS_A,
       B_EVICT_PREFIX, B_PIN_A, B_PIN_ANY, B_VERIFY, B_KVSCTL,
       B_INSPECT_OWN, B_EVICT_OWN };

static void b_watch(const th_daemon *d, int sync_fd, int64_t *res)
{
	kvs_watch *w = NULL;
	kvs_client *c = NULL;
	kvs_hash own;
	uint64_t go = 0;
	int64_t deadline;
	kvs_event ev;

	res[B_WATCH] = kvs_watch_open(d->socket, &w);
	th_send_u64(sync_fd, (uint64_t)res[B_WATCH]);
	if (th_recv_u64(sync_fd, &go, TH_WAIT_MS) < 0 || res[B_WATCH] < 0)
		return;
	th_chain(&L, 777, 1, 0, 0, &own);
	if (kvs_connect(d->socket, &L, &c) < 0 || th_publish(c, &own, 1, NULL) != 1)
		return;
	kvs_close(c);
	res[B_OWN_SEEN] = 0;
	res[B_FOREIGN] = 0;
	/* Events come in order: A's (if any reach it) before its own. */
	deadline = th_now_ms() + TH_WAIT_MS;
	while (!res[B_OWN_SEEN] && th_now_ms() < deadline) {
		int n = kvs_watch_next(w, &ev, 100);

		if (n < 0)
			break;
		if (n == 0)
			continue;
		if (ev.hash.lo == own.lo && ev.hash.hi == own.hi)
			res[B_OWN_SEEN] = 1;
		else
			res[B_FOREIGN]++;
	}
	kvs_watch_close(w);
}

static void b_reach(const th_daemon *d, int sync_fd, int64_t *res)
{
	kvs_client *c = NULL;
	kvs_hash h[NBLK], own;
	kvs_block_info bi;
	kvs_evict_result er;
	kvs_verify_result vr;
	kvs_verify_failure *vf = NULL;
	kvs_ns_summary *v = NULL;

	chain_a(h);
	th_chain(&L, 777, 1, 0, 0, &own);
	if (kvs_connect(d->socket, NULL, &c) < 0)
		return;
	res[B_INSPECT_ANY] = kvs_inspect(c, 0, h[NBLK - 1], &bi);
	res[B_INSPECT_A] = kvs_inspect(c, 1, h[NBLK - 1], &bi);
	res[B_LIST] = kvs_list(c, 0, 4, &v);
	res[B_LIST_UID] = res[B_LIST] > 0 ? (int64_t)v[0].uid : -1;
	free(v);
	v = NULL;
	res[B_LIST_A] = kvs_list(c, 1, 4, &v);
	free(v);
	res[B_EVICT_ALL] = kvs_evict(c, KVS_SCOPE_ALL, 0, own, 0, &er);
	res[B_FLUSH_ALL] = kvs_evict(c, KVS_SCOPE_ALL, 0, own, 1, &er);
	res[B_EVICT_NS_A] = kvs_evict(c, KVS_SCOPE_NAMESPACE, 1, own, 0, &er);
	res[B_EVICT_PREFIX] = kvs_evict(c, KVS_SCOPE_PREFIX, 0, h[0], 1, &er);
	res[B_PIN_A] = kvs_pin(c, 1, h, NBLK);
	res[B_PIN_ANY] = kvs_pin(c, 0, h, NBLK);
	res[B_VERIFY] = kvs_verify(c, 0, 4, &vr, &vf);
	free(vf);
	res[B_KVSCTL] = kvsctl_refused(d);
	/* Its own namespace (2) is its to manage. */
	res[B_INSPECT_OWN] = kvs_inspect(c, 0, own, &bi) == 0 ? (int64_t)bi.ns : -1;
	res[B_EVICT_OWN] = kvs_evict(c, KVS_SCOPE_NAMESPACE, 2, own, 1, &er) == 0
				   ? (int64_t)er.freed : -1;
	kvs_close(c);
}

/* An operator: res[0] namespaces listed, res[1] the namespace INSPECT 0
 * finds A's leaf in, res[2] watch open, res[3] A's chain pinned (then
 * unpinned: res[4]). */
static void operator_sees(const th_daemon *d, int sync_fd, int64_t *res)
{
	kvs_client *c = NULL;
	kvs_ns_summary *v = NULL;
	kvs_block_info bi;
	kvs_watch *w = NULL;
	kvs_hash h[NBLK];

	chain_a(h);
	if (kvs_connect(d->socket, NULL, &c) < 0)
		return;
	res[0] = kvs_list(c, 0, 0, &v);
	free(v);
	res[1] = kvs_inspect(c, 0, h[NBLK - 1], &bi) == 0 ? (int64_t)bi.ns : -1;
	res[2] = kvs_watch_open(d->socket, &w);
	kvs_watch_close(w);
	res[3] = kvs_pin(c, 0, h, NBLK);
	res[4] = kvs_unpin(c, 0, h, NBLK);
	kvs_close(c);
}

/* The daemon's uid: EVICT of scope all (res[0]: freed). */
static void operator_evicts(const th_daemon *d, int sync_fd, int64_t *res)
{
	kvs_client *c = NULL;
	kvs_evict_result er = { 0 };

	if (kvs_connect(d->socket, NULL, &c) < 0)
		return;
	res[0] = kvs_evict(c, KVS_SCOPE_ALL, 0, (kvs_hash){ 0 }, 0, &er);
	res[1] = (int64_t)er.freed;
	kvs_close(c);
}

/* ---- the daemons ----------------------------------------------------------- */

/* Start @d (after th_daemon_init) as uid UID_DAEMON: $KVSHARED through a
 * setpriv wrapper written in its directory, which that uid owns. Without
 * setpriv it runs as root. */
static void start_as_daemon_uid(th_daemon *d)
{
	const char *real = getenv("KVSHARED");
	char wrap[160], saved[512];
	FILE *f;

	if (!daemon_uid) {
		if (th_daemon_start(d) < 0)
			th_fatal("the daemon did not start");
		return;
	}
	snprintf(wrap, sizeof(wrap), "%s/as-daemon-uid.sh", d->dir);
	snprintf(saved, sizeof(saved), "%s", real);
	f = fopen(wrap, "w");
	if (!f)
		th_fatal("%s: %s", wrap, strerror(errno));
	fprintf(f, "#!/bin/sh\nexec %s --reuid=%d --regid=%d --clear-groups "
		   "'%s' \"$@\"\n", setpriv_bin, UID_DAEMON, UID_DAEMON, saved);
	fclose(f);
	if (chmod(wrap, 0755) < 0 || chown(d->dir, UID_DAEMON, UID_DAEMON) < 0)
		th_fatal("%s: %s", wrap, strerror(errno));
	setenv("KVSHARED", wrap, 1);
	if (th_daemon_start(d) < 0)
		th_fatal("the daemon did not start as uid %d", UID_DAEMON);
	setenv("KVSHARED", saved, 1);
}

/* Start @d with one arena per uid, as the daemon's uid. */
static void tenant_daemon_start(th_daemon *d)
{
	if (th_daemon_init(d, TH_ARGS("--host-size", "32M", "--socket-mode",
				      "0666", "--tenant-arenas", "uid",
				      "--max-tenants", "4", "--admin-uid",
				      "65532")) < 0)
		th_fatal("th_daemon_init failed");
	/* First: a chroot whose / is 0700 lets no other uid through, the
	 * daemon's included (a skip, with the reason). */
	th_open_dir_to(d, UID_A, UID_A);
	start_as_daemon_uid(d);
}

/* B watches from before A publishes: it sees its own block's event, none
 * of A's. @r: B's results. */
static void b_watches_a_publish(th_daemon *d, int64_t *r)
{
	uint64_t go = 1, v = 1;
	job jb;
	th_child ch;

	jb = (job){ .d = d, .uid = UID_B, .fn = b_watch };
	th_spawn(&ch, as_uid, &jb);
	CHECK_RC(th_recv_u64(ch.fd, &v, TH_WAIT_MS), 0);
	CHECK_EQ((int64_t)v, 0);
	run_as(d, UID_A, a_publish, r);
	CHECK_EQ(r[0], NBLK);
	th_send_u64(ch.fd, go);
	for (int i = 0; i < NRES; i++) {
		uint64_t x = (uint64_t)INT64_MIN;

		if (!CHECK_RC(th_recv_u64(ch.fd, &x, TH_WAIT_MS), 0))
			break;
		r[i] = (int64_t)x;
	}
	CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
	CHECK_EQ(r[B_WATCH], 0);
	CHECK_EQ(r[B_OWN_SEEN], 1);
	if (!CHECK_EQ(r[B_FOREIGN], 0))
		th_note("worker B's watch got %lld events of A's blocks",
			(long long)r[B_FOREIGN]);
}

/* B reaches for A's namespace (1) on a control connection: refused, and
 * A's blocks are all there. */
static void b_reaches_for_a(th_daemon *d, int64_t *r)
{
	run_as(d, UID_B, b_reach, r);
	CHECK_RC(r[B_INSPECT_ANY], -ENOENT);
	CHECK_RC(r[B_INSPECT_A], KVS_E_PERM);
	CHECK_EQ(r[B_LIST], 1);
	CHECK_EQ(r[B_LIST_UID], UID_B);
	CHECK_RC(r[B_LIST_A], KVS_E_PERM);
	CHECK_RC(r[B_EVICT_ALL], KVS_E_PERM);
	CHECK_RC(r[B_FLUSH_ALL], KVS_E_PERM);
	CHECK_RC(r[B_EVICT_NS_A], KVS_E_PERM);
	CHECK_RC(r[B_EVICT_PREFIX], -ENOENT);
	CHECK_RC(r[B_PIN_A], KVS_E_PERM);
	CHECK_RC(r[B_PIN_ANY], KVS_E_PERM);
	CHECK_RC(r[B_VERIFY], KVS_E_PERM);
	if (r[B_KVSCTL] >= 0)
		CHECK_EQ(r[B_KVSCTL], 1);
	CHECK_EQ(r[B_INSPECT_OWN], 2);
	CHECK_EQ(r[B_EVICT_OWN], 1);
	CHECK_GE(th_stat_get(d, "errors.perm"), 8);
	/* A's blocks are all there. */
	run_as(d, UID_A, a_probe, r);
	CHECK_EQ(r[0], NBLK);
}

/* Root's watch @w saw both namespaces' blocks; then it is closed. */
static void root_watch_saw_both(kvs_watch *w)
{
	int64_t per_ns[3] = { 0 };
	int64_t deadline;
	kvs_event ev;

	deadline = th_now_ms() + TH_WAIT_MS;
	while ((per_ns[1] < NBLK || per_ns[2] < 1) && th_now_ms() < deadline) {
		int n = kvs_watch_next(w, &ev, 100);

		if (n < 0)
			break;
		if (n == 1 && ev.kind == KVS_EV_STORED && ev.ns >= 1 && ev.ns <= 2)
			per_ns[ev.ns]++;
	}
	CHECK_EQ(per_ns[1], NBLK);
	CHECK_EQ(per_ns[2], 1);
	kvs_watch_close(w);
}

/* The operators: root, the daemon's uid, --admin-uid see and pin A's
 * chain; the daemon's uid evicts it all. @op, @r: results. */
static void operators_reach_all(th_daemon *d, int64_t *op, int64_t *r)
{
	for (int i = 0; i < 3; i++) {
		const uint32_t uids[] = { 0, daemon_uid, UID_ADMIN };

		run_as(d, uids[i], operator_sees, op);
		if (!CHECK_EQ(op[0], 2))
			th_note("operator uid %u lists %lld namespaces",
				uids[i], (long long)op[0]);
		CHECK_EQ(op[1], 1);
		CHECK_EQ(op[2], 0);
		CHECK_EQ(op[3], NBLK);
		CHECK_EQ(op[4], NBLK);
	}
	run_as(d, daemon_uid, operator_evicts, op);
	CHECK_EQ(op[0], 0);
	CHECK_EQ(op[1], NBLK);
	run_as(d, UID_A, a_probe, r);
	CHECK_EQ(r[0], 0);
}

static void test_tenant_domains(void)
{
	static th_daemon d;
	int64_t r[NRES], op[NRES];
	kvs_watch *w = NULL;

	tenant_daemon_start(&d);
	/* Root watches everything, from the start. */
	CHECK_RC(kvs_watch_open(d.socket, &w), 0);
	b_watches_a_publish(&d, r);
	b_reaches_for_a(&d, r);
	root_watch_saw_both(w);
	operators_reach_all(&d, op, r);
}

/* Worker B in one shared arena: res[0] watch, res[1] LIST, res[2] INSPECT
 * 0 of A's leaf (its namespace), res[3..5] EVICT all, FLUSH all, PIN,
 * res[6] EVICT of A's leaf as a prefix (freed). */
static void b_shared(const th_daemon *d, int sync_fd, int64_t *res)
{
	kvs_client *c = NULL;
	kvs_watch *w = NULL;
	kvs_ns_summary *v = NULL;
	kvs_block_info bi;
	kvs_evict_result er = { 0 };
	kvs_hash h[NBLK];

	chain_a(h);
	res[0] = kvs_watch_open(d->socket, &w);
	kvs_watch_close(w);
	if (kvs_connect(d->socket, NULL, &c) < 0)
		return;
	res[1] = kvs_list(c, 0, 0, &v);
	free(v);
	res[2] = kvs_inspect(c, 0, h[NBLK - 1], &bi) == 0 ? (int64_t)bi.ns : -1;
	res[3] = kvs_evict(c, KVS_SCOPE_ALL, 0, h[0], 0, &er);
	res[4] = kvs_evict(c, KVS_SCOPE_ALL, 0, h[0], 1, &er);
	res[5] = kvs_pin(c, 0, h, NBLK);
	res[6] = kvs_evict(c, KVS_SCOPE_PREFIX, 0, h[NBLK - 1], 0, &er) == 0
			 ? (int64_t)er.freed : -1;
	kvs_close(c);
}

static void test_shared_arena(void)
{
	static th_daemon d;
	int64_t r[NRES];

	th_daemon_up(&d, TH_ARGS("--host-size", "32M", "--socket-mode", "0666"));
	th_open_dir_to(&d, UID_A, UID_A);
	run_as(&d, UID_A, a_publish, r);
	CHECK_EQ(r[0], NBLK);
	run_as(&d, UID_B, b_shared, r);
	CHECK_RC(r[0], KVS_E_PERM);
	CHECK_EQ(r[1], 1);
	CHECK_EQ(r[2], 1);
	CHECK_RC(r[3], KVS_E_PERM);
	CHECK_RC(r[4], KVS_E_PERM);
	CHECK_RC(r[5], KVS_E_PERM);
	CHECK_EQ(r[6], 1);
	CHECK_EQ(th_stat_get(&d, "errors.perm"), 4);
	run_as(&d, UID_A, a_probe, r);
	CHECK_EQ(r[0], NBLK - 1);
}

int main(void)
{
	th_init("test_scope");
	if (geteuid() != 0)
		th_skip("needs root to run clients as uids %d, %d and %d and the "
			"daemon as uid %d; NOT TESTED: workers kept to their "
			"domain (WATCH, LIST, INSPECT, EVICT, FLUSH, PIN, VERIFY), "
			"operators (root, the daemon's uid, --admin-uid) seeing "
			"every namespace", UID_A, UID_B, UID_ADMIN, UID_DAEMON);
	daemon_uid = UID_DAEMON;
	if (access(setpriv_bin, X_OK) < 0) {
		th_note("no %s: the daemon runs as root; NOT TESTED: the daemon's "
			"own uid (other than root) as an operator", setpriv_bin);
		daemon_uid = 0;
	}
	L = th_layout("scope-model", BT);
	test_tenant_domains();
	test_shared_arena();
	return th_finish();
}
