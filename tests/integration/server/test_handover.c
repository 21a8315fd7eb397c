/*
 * test_handover - kvshared --take-over: one daemon hands its pool and its
 * socket to the next, with real daemons and real clients.
 *
 *  other_uid: a HANDOVER from a peer of another uid (the socket open to
 *             everyone, so that only SO_PEERCRED stands in the way) is
 *             refused with KVS_E_PERM, counted and logged, and kvshared
 *             --take-over run as that uid says why and exits 1; the daemon
 *             serves on. Needs root (to become another uid): skipped
 *             otherwise.
 *  version:   a HANDOVER asking for a hand-over format the daemon does not
 *             write is refused with KVS_E_VERSION, the daemon serves on with
 *             every block; a successor whose predecessor answers with a
 *             format it cannot read starts cold on its own socket, says why,
 *             and sends no acknowledgement.
 *  many_fds:  a predecessor sending more fds than an answer may carry (in
 *             two messages): the successor keeps none, says why, exits 1.
 *  alive:     a predecessor that takes the ACK and closes the connection
 *             but does not exit: the successor does not use its fds.
 *  no_ack:    a successor that takes the fds and closes without its
 *             acknowledgement: the daemon exits (never serves the pool
 *             once the fds are out).
 *  load:      two workers publish and hit through the switch: every hit's
 *             bytes are checked, each worker reconnects as after a restart;
 *             the old daemon exits 0 once the new one has the socket; the
 *             blocks kept are those committed before the switch (every one
 *             of them a hit after it) and what was reserved and not
 *             committed at the switch is gone.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"
#include "harness_raw.h"
#include "kvs_le.h"

#include <poll.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define BT 16
#define NPRE 48
#define WORKERS 2
#define MAXW 512 /* chains one worker publishes, at most */
#define CHAIN 2

static th_daemon a, b, c;
static kvs_layout L;
static kvs_hash pre[NPRE];

/* A HANDOVER request asking for hand-over format @version. */
static int send_handover(int fd, uint32_t version)
{
	uint8_t p[8];

	put32(p, version);
	put32(p + 4, 0);
	return th_raw_request(fd, KVS_OP_HANDOVER, 7, p, sizeof(p));
}

static int handover_status(const th_daemon *d, uint32_t version)
{
	kvs_wire_hdr h;
	uint8_t buf[64];
	int fd = th_raw_connect(d), rc;

	if (fd < 0)
		return fd;
	rc = send_handover(fd, version);
	if (rc == 0)
		rc = th_raw_recv(fd, &h, buf, sizeof(buf), TH_WAIT_MS);
	close(fd);
	return rc < 0 ? rc : h.status;
}

static int as_nobody(void *arg, int sync_fd)
{
	(void)arg;
	(void)sync_fd;
	char cmd[512], out[4096] = "";
	FILE *f;
	size_t n;

	if (setgid(65534) < 0 || setuid(65534) < 0)
		return 3;
	CHECK_EQ(handover_status(&a, 1), KVS_E_PERM);
	/* kvshared --take-over says so, and exits 1 */
	snprintf(cmd, sizeof(cmd), "'%s' --socket /nonexistent/kvshared.sock "
		 "--take-over '%s' --host-size 16M --gpu off 2>&1",
		 getenv("KVSHARED"), a.socket);
	f = popen(cmd, "r");
	if (!f)
		return 4;
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	CHECK_EQ(pclose(f), 1 << 8);
	if (!CHECK(strstr(out, "refused: only the daemon's own uid may take over")))
		th_note("kvshared --take-over as uid 65534 said: %s", out);
	return 0;
}

static void other_uid(void)
{
	kvs_client *w;

	if (geteuid() != 0) {
		th_skip_part("other_uid: not root, cannot ask as another uid");
		return;
	}
	th_open_dir_to(&a, 65534, 65534);
	CHECK_EQ(th_run_child(as_nobody, NULL, TH_WAIT_MS * 2), 0);
	CHECK(th_log_contains(&a, "take-over refused: client"));
	CHECK_EQ(th_stat_get(&a, "start.handover_refused"), 2);
	w = th_connect(&a, &L);
	CHECK_EQ(th_probe(w, pre, NPRE), NPRE);
	kvs_close(w);
}

/* A fake predecessor's listener on @path: tells the parent it listens,
 * takes one connection and reads its HANDOVER request into @req (@n
 * bytes). The connection, or minus the child's exit code (2: no listener,
 * 3: no connection, 4: no request); the listener in *lfd. */
static int fake_accept(const char *path, int sync_fd, int *lfd, uint8_t *req,
		       size_t n)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct pollfd p = { .events = POLLIN };
	int fd;

	*lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (*lfd < 0 || bind(*lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(*lfd, 4) < 0)
		return -2;
	th_send_u64(sync_fd, 1);
	p.fd = *lfd;
	if (poll(&p, 1, TH_READY_TIMEOUT_MS) != 1 || (fd = accept(*lfd, NULL, NULL)) < 0)
		return -3;
	if (recv(fd, req, n, MSG_WAITALL) != (ssize_t)n)
		return -4;
	return fd;
}

/* The fake predecessor, on @arg's path: answers a HANDOVER with format 99
 * and no fds, and checks that no acknowledgement comes (the successor
 * closes). Tells the parent when it listens, then when it is done. */
static int fake_old(void *arg, int sync_fd)
{
	uint8_t req[KVS_WIRE_HDR_SIZE + 8], reply[KVS_WIRE_HDR_SIZE + 8];
	kvs_wire_hdr h = { .magic = KVS_WIRE_MAGIC, .version = KVS_WIRE_VERSION,
			   .opcode = KVS_OP_HANDOVER, .len = 8 };
	int lfd, fd = fake_accept(arg, sync_fd, &lfd, req, sizeof(req));

	if (fd < 0)
		return -fd;
	CHECK_EQ(get16(req + 6), KVS_OP_HANDOVER);
	CHECK_EQ(get32(req + KVS_WIRE_HDR_SIZE), 1);
	h.req_id = get64(req + 16);
	kvs_wire_hdr_encode(&h, reply);
	put32(reply + KVS_WIRE_HDR_SIZE, 99);
	put32(reply + KVS_WIRE_HDR_SIZE + 4, 0);
	if (send(fd, reply, sizeof(reply), MSG_NOSIGNAL) != (ssize_t)sizeof(reply))
		return 5;
	CHECK_EQ(recv(fd, req, sizeof(req), MSG_WAITALL), 0); /* no ACK */
	th_send_u64(sync_fd, 2);
	close(fd);
	close(lfd);
	return 0;
}

static void version(void)
{
	static char fake[108]; /* an argument of c: lives as long */
	th_child ch;
	kvs_client *w;
	uint64_t msg = 0;

	CHECK_EQ(handover_status(&a, 99), KVS_E_VERSION);
	CHECK(th_log_contains(&a, "reads hand-over format 99"));
	w = th_connect(&a, &L);
	CHECK_EQ(th_probe(w, pre, NPRE), NPRE);
	kvs_close(w);

	/* A successor meeting a format it cannot read. */
	if (th_daemon_init(&c, TH_ARGS("--host-size", "16M", "--gpu", "off",
				       "--take-over", fake)) < 0)
		th_fatal("temp dir");
	snprintf(fake, sizeof(fake), "%s/fake.sock", c.dir);
	th_spawn(&ch, fake_old, fake);
	CHECK_EQ(th_recv_u64(ch.fd, &msg, TH_WAIT_MS), 0);
	if (CHECK_RC(th_daemon_start(&c), 0)) {
		CHECK_EQ(th_stat_get(&c, "start.mode"), 0);
		CHECK(th_log_contains(&c, "wrote hand-over format 99"));
		CHECK(th_log_contains(&c, "starting cold"));
		w = th_connect(&c, &L);
		th_round_trip(w, &L, 77, 4);
		kvs_close(w);
	}
	CHECK_EQ(th_recv_u64(ch.fd, &msg, TH_WAIT_MS), 0);
	CHECK_EQ(msg, 2);
	CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
}

/* 0: fake_many sends 2 x 40 fds; 1: one fd, then it takes the ACK, closes
 * the connection and lives on until told. */
static int fake_mode;

/* The fake predecessor of many_fds and alive: answers a HANDOVER in the
 * format asked with one name, and (fake_mode 0) 2 x 40 fds (more than any
 * answer may carry) in two messages, the header's and the payload's. */
static int fake_many(void *arg, int sync_fd)
{
	uint8_t req[KVS_WIRE_HDR_SIZE + 8], reply[KVS_WIRE_HDR_SIZE + 8 + 32];
	kvs_wire_hdr h = { .magic = KVS_WIRE_MAGIC, .version = KVS_WIRE_VERSION,
			   .opcode = KVS_OP_HANDOVER, .len = 8 + 32 };
	union {
		char b[CMSG_SPACE(sizeof(int) * 40)];
		struct cmsghdr align;
	} u;
	int lfd, fd = fake_accept(arg, sync_fd, &lfd, req, sizeof(req)), many[40];

	if (fd < 0)
		return -fd;
	h.req_id = get64(req + 16);
	memset(reply, 0, sizeof(reply));
	kvs_wire_hdr_encode(&h, reply);
	put32(reply + KVS_WIRE_HDR_SIZE, 1);
	put32(reply + KVS_WIRE_HDR_SIZE + 4, 1);
	memcpy(reply + KVS_WIRE_HDR_SIZE + 8, "kvs-meta", 8);
	for (int i = 0; i < 40; i++)
		many[i] = lfd;
	for (int part = 0; part < 2; part++) {
		size_t nfd = fake_mode == 0 ? 40 : part == 0;

		struct iovec iov = { reply + (part ? KVS_WIRE_HDR_SIZE : 0),
				     part ? 8 + 32 : KVS_WIRE_HDR_SIZE };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = u.b, .msg_controllen = sizeof(u.b) };
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfd * sizeof(int));
		mh.msg_controllen = nfd ? CMSG_SPACE(nfd * sizeof(int)) : 0;
		memcpy(CMSG_DATA(cm), many, nfd * sizeof(int));
		if (!nfd)
			mh.msg_control = NULL;
		if (sendmsg(fd, &mh, MSG_NOSIGNAL) != (ssize_t)iov.iov_len)
			return 5;
	}
	if (fake_mode == 1) { /* the ACK; then gone from the link, not dead */
		uint64_t m = 0;

		CHECK_EQ(recv(fd, req, sizeof(req), MSG_WAITALL), (ssize_t)sizeof(req));
		CHECK_EQ(get32(req + KVS_WIRE_HDR_SIZE + 4), 1);
		close(fd);
		th_send_u64(sync_fd, 2);
		th_recv_u64(sync_fd, &m, TH_WAIT_MS * 4);
		close(lfd);
		return 0;
	}
	CHECK_EQ(recv(fd, req, sizeof(req), MSG_WAITALL), 0); /* no ACK */
	th_send_u64(sync_fd, 2);
	close(fd);
	close(lfd);
	return 0;
}

/* A predecessor that takes the ACK and closes the link but does not exit
 * (one that went on serving): the successor does not use its fds; it
 * says so and, the socket still answered, exits 1. */
static void alive(void)
{
	static char fake[108];
	static th_daemon m;
	th_child ch;
	uint64_t msg = 0;

	fake_mode = 1;
	if (th_daemon_init(&m, TH_ARGS("--host-size", "16M", "--gpu", "off",
				       "--take-over", fake)) < 0)
		th_fatal("temp dir");
	snprintf(fake, sizeof(fake), "%s/fake.sock", m.dir);
	th_spawn(&ch, fake_many, fake);
	CHECK_EQ(th_recv_u64(ch.fd, &msg, TH_WAIT_MS), 0);
	CHECK_EQ(th_daemon_start(&m), -ECHILD);
	CHECK_EQ(m.last_status, 1);
	CHECK(th_log_contains(&m, "has not exited within 5000 ms"));
	CHECK(!th_log_contains(&m, "started handed over"));
	CHECK_EQ(th_recv_u64(ch.fd, &msg, TH_WAIT_MS), 0);
	CHECK_EQ(msg, 2);
	th_send_u64(ch.fd, 3);
	CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
	th_daemon_destroy(&m);
}

/* A predecessor sending more fds than an answer may carry: the successor
 * keeps none of them, says why and exits 1 (no overflow, no crash). */
static void many_fds(void)
{
	static char fake[108];
	static th_daemon m;
	th_child ch;
	uint64_t msg = 0;

	if (th_daemon_init(&m, TH_ARGS("--host-size", "16M", "--gpu", "off",
				       "--take-over", fake)) < 0)
		th_fatal("temp dir");
	snprintf(fake, sizeof(fake), "%s/fake.sock", m.dir);
	th_spawn(&ch, fake_many, fake);
	CHECK_EQ(th_recv_u64(ch.fd, &msg, TH_WAIT_MS), 0);
	CHECK_EQ(th_daemon_start(&m), -ECHILD);
	CHECK_EQ(m.last_status, 1);
	CHECK(th_log_contains(&m, "a malformed answer (more than 64 fds)"));
	CHECK_EQ(th_recv_u64(ch.fd, &msg, TH_WAIT_MS), 0);
	CHECK_EQ(msg, 2);
	CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
	th_daemon_destroy(&m);
}

/* Wait until @name is at least @want. */
static bool wait_ge(th_daemon *d, const char *name, int64_t want)
{
	int64_t deadline = th_now_ms() + TH_WAIT_MS;

	while (th_stat_get(d, name) < want)
		if (th_now_ms() > deadline)
			return false;
		else
			th_poll_pause();
	return true;
}

/* A successor that takes the fds and vanishes without its ACK: once the
 * fds are out the daemon (b, after the load) never serves again, it exits
 * 0 and leaves the socket. */
static void no_ack(void)
{
	uint8_t buf[4096];
	kvs_wire_hdr h;
	int fd = th_raw_connect(&b), n, st = -1;
	int64_t deadline = th_now_ms() + TH_WAIT_MS;

	if (!CHECK_GE(fd, 0))
		return;
	CHECK_EQ(send_handover(fd, 1), 0);
	n = th_raw_recv(fd, &h, buf, sizeof(buf), TH_WAIT_MS); /* fds closed */
	CHECK_EQ(h.status, 0);
	CHECK_GE(n, 8 + 3 * 32); /* kvs-meta, kvs-arena-0, listen */
	if (n >= 8)
		CHECK_EQ(get32(buf + 4), (n - 8) / 32);
	close(fd);
	while (!th_daemon_exited(&b, &st) && th_now_ms() < deadline)
		th_poll_pause();
	CHECK_EQ(st, 0);
	CHECK(th_log_contains(&b, "hand-over: the successor closed the connection "
				  "after the fds went out: exiting without serving again"));
}

/* ---- a hand-over under load ---------------------------------------------- */

struct worker_report {
	uint64_t committed_before, kept_after, lost_after, bad, disconnects,
		 committed_after;
};

/* Call again after a reconnect, until @deadline. */
static bool reconnect(kvs_client *w, int64_t deadline)
{
	while (th_now_ms() < deadline) {
		if (kvs_reconnect(w) == 0)
			return true;
		th_poll_pause();
	}
	return false;
}

static int worker(void *arg, int sync_fd)
{
	static kvs_hash mine[MAXW][CHAIN], lost[MAXW][CHAIN];
	uint64_t id = (uint64_t)(uintptr_t)arg, stop = 0;
	struct worker_report r = { 0 };
	uint32_t nmine = 0, nlost = 0;
	kvs_client *w = th_connect(&a, &L);
	int64_t deadline = th_now_ms() + 60000;
	size_t bad;
	int rc;

	for (uint32_t i = 0; i < MAXW && th_now_ms() < deadline; i++) {
		kvs_hash h[CHAIN];

		if (th_fd_readable(sync_fd) && r.disconnects)
			break;
		bad = 0;
		rc = th_verify(w, pre, NPRE, &bad);
		r.bad += bad;
		if (rc == KVS_E_DISCONNECTED) {
			r.disconnects++;
			if (!reconnect(w, deadline))
				return 3;
			continue;
		}
		th_chain(&L, 1000 * id + i, CHAIN, 0, 0, h);
		rc = th_publish(w, h, CHAIN, NULL);
		if (rc == CHAIN && !r.disconnects) {
			memcpy(mine[nmine++], h, sizeof(h));
			r.committed_before += CHAIN;
		} else if (rc == CHAIN) {
			r.committed_after += CHAIN;
		} else if (rc == KVS_E_DISCONNECTED) {
			memcpy(lost[nlost++], h, sizeof(h));
			r.disconnects++;
			if (!reconnect(w, deadline))
				return 3;
		} else {
			th_note("worker %llu: publish: %s", (unsigned long long)id,
				kvs_strerror(rc));
			return 4;
		}
	}
	th_recv_u64(sync_fd, &stop, TH_WAIT_MS);
	for (uint32_t i = 0; i < nmine; i++) {
		bad = 0;
		rc = th_verify(w, mine[i], CHAIN, &bad);
		r.kept_after += rc > 0 ? (uint64_t)rc : 0;
		r.bad += bad;
	}
	for (uint32_t i = 0; i < nlost; i++) {
		rc = th_probe(w, lost[i], CHAIN);
		r.lost_after += rc > 0 ? (uint64_t)rc : 0;
	}
	kvs_close(w);
	for (size_t k = 0; k < sizeof(r) / 8; k++)
		th_send_u64(sync_fd, ((uint64_t *)&r)[k]);
	return 0;
}

static void load_check(const struct worker_report *sum, int64_t mode)
{
	CHECK_EQ(sum->bad, 0);
	CHECK_GE(sum->disconnects, WORKERS); /* every one reconnected */
	CHECK_GT(sum->committed_after, 0);   /* and published through B */
	CHECK_EQ(sum->lost_after, 0); /* not committed at the switch: gone */
	if (mode != 1) {
		CHECK(th_log_contains(&b, "cannot rebuild a table"));
		th_skip_part("load: this build's cache cannot rebuild its table "
			     "from the arena (started cold): blocks kept not checked");
		return;
	}
	CHECK_EQ(th_stat_get(&b, "start.blocks_kept"), NPRE + sum->committed_before);
	CHECK_EQ(th_stat_get(&b, "start.blocks_dropped"), 0);
	CHECK_EQ(sum->kept_after, sum->committed_before);
}

static void load(void)
{
	th_child ch[WORKERS];
	struct worker_report sum = { 0 };
	int64_t t0, mode, deadline;
	kvs_client *w;
	int st = -1;

	for (uintptr_t i = 0; i < WORKERS; i++)
		th_spawn(&ch[i], worker, (void *)(i + 1));
	CHECK(wait_ge(&a, "ops.commit", 8));
	if (th_daemon_init(&b, TH_ARGS("--host-size", "64M", "--gpu", "off",
				       "--take-over", a.socket)) < 0)
		th_fatal("temp dir");
	strcpy(b.socket, a.socket); /* the successor serves the same path */
	t0 = th_now_ms();
	if (!CHECK_RC(th_daemon_start(&b), 0))
		return;
	th_note("take-over: the successor was ready %lld ms after it started",
		(long long)(th_now_ms() - t0));
	/* It let go of everything before B went on: gone now, exit 0. */
	deadline = th_now_ms() + TH_WAIT_MS;
	while (!th_daemon_exited(&a, &st) && th_now_ms() < deadline)
		th_poll_pause();
	CHECK_EQ(st, 0);
	mode = th_stat_get(&b, "start.mode");
	/* The old fast index goes stale before anyone is served. */
	CHECK(th_log_contains(&b, "adopted pool: accepting in 350 ms"));
	CHECK(wait_ge(&b, "ops.commit", 8));
	for (int i = 0; i < WORKERS; i++) {
		uint64_t v[sizeof(sum) / 8];

		th_send_u64(ch[i].fd, 1);
		for (size_t k = 0; k < sizeof(sum) / 8; k++) {
			v[k] = 0;
			CHECK_EQ(th_recv_u64(ch[i].fd, &v[k], 30000), 0);
			((uint64_t *)&sum)[k] += v[k];
		}
		CHECK_EQ(th_child_wait(&ch[i], TH_WAIT_MS), 0);
	}
	th_note("load: %llu blocks committed before the switch, %llu after, "
		"%llu reconnects", (unsigned long long)sum.committed_before,
		(unsigned long long)sum.committed_after,
		(unsigned long long)sum.disconnects);
	load_check(&sum, mode);
	w = th_connect(&b, &L);
	CHECK_EQ(th_probe(w, pre, NPRE), mode == 1 ? NPRE : 0);
	kvs_close(w);
}

int main(void)
{
	kvs_client *w;

	th_init("test_handover");
	L = th_layout("handover", BT);
	th_daemon_up(&a, TH_ARGS("--host-size", "64M", "--gpu", "off",
				 "--socket-mode", "0666"));
	th_chain(&L, 1, NPRE, 0, 0, pre);
	w = th_connect(&a, &L);
	CHECK_EQ(th_publish(w, pre, NPRE, NULL), NPRE);
	kvs_close(w);
	other_uid();
	version();
	many_fds();
	alive();
	load();
	no_ack();
	return th_finish();
}
