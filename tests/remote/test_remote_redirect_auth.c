/*
 * test_remote_redirect_auth - the AUTH rule (kvs_remote.h): the password is
 * never sent to a host that only a MOVED or ASK names. Two scripted nodes
 * in a child process, A (the seed) and T (a listener the test controls):
 *  1. A's slot map gives every slot to A, and A answers every GET and SET
 *     with MOVED (then ASK) to T: the requests fail, and T sees no
 *     connection at all (so no AUTH, no password);
 *  2. A's map then gives every slot to T: the next redirect refreshes the
 *     map first, then the request goes to T, which now gets AUTH (the map
 *     names it) and serves.
 * Without AUTH set, a redirect is followed at once (the existing tests).
 * Needs no Redis.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvs_check.h"
#include "kvs_remote.h"
#include "kvs_resp.h"
#include "scripted_node.h"

#define PASSWORD "never-to-strangers"

/* Shared with the child: what each node saw; the phase the test is in. */
static struct shared {
	int phase;            /* 0: the map names A only; 1: T only */
	int conns[2];         /* connections accepted by A, T */
	int auths[2];         /* AUTH commands with the right password */
	int port[2];
} *sh;

static struct {
	int done, res;
} got[8];

static void cb(void *arg, const kvs_remote_cqe *c)
{
	(void)arg;
	got[c->cookie].done++;
	got[c->cookie].res = c->res;
}

/* Node @me's answer to command @v. */
static int answer(int fd, int me, const kvs_resp_parser *p, const kvs_resp_val *v,
		  void *arg)
{
	const kvs_resp_val *cmd = kvs_resp_elem(p, v, 0);
	const kvs_resp_val *a1 = kvs_resp_elem(p, v, 1), *a2 = kvs_resp_elem(p, v, 2);
	char buf[256];
	int owner = sh->phase;

	(void)arg;
	if (!cmd || !cmd->str) {
		sn_put(fd, "-ERR\r\n");
	} else if (!strcasecmp(cmd->str, "AUTH")) {
		if (a2 && a2->str && !strcmp(a2->str, PASSWORD))
			__atomic_add_fetch(&sh->auths[me], 1, __ATOMIC_SEQ_CST);
		sn_put(fd, "+OK\r\n");
	} else if (!strcasecmp(cmd->str, "CLUSTER")) {
		snprintf(buf, sizeof(buf),
			 "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n"
			 "$40\r\n%040d\r\n", sh->port[owner], owner);
		sn_put(fd, buf);
	} else if (!strcasecmp(cmd->str, "ASKING")) {
		sn_put(fd, "+OK\r\n");
	} else if (me == 0) {
		/* A: GET "ask..." is an ASK, anything else a MOVED, to T */
		int ask = a1 && a1->str && !strncmp(a1->str, "ask", 3);

		snprintf(buf, sizeof(buf), "-%s 1234 127.0.0.1:%d\r\n",
			 ask ? "ASK" : "MOVED", sh->port[1]);
		sn_put(fd, buf);
	} else if (!strcasecmp(cmd->str, "GET")) {
		sn_put(fd, "$3\r\nabc\r\n");
	} else {
		sn_put(fd, "+OK\r\n");
	}
	return 0;
}

static void serve(int lfd[2])
{
	sn_loop(lfd, 2, answer, NULL, sh->conns);
}

static int run(kvs_remote *r, const char *key, int op, int cookie)
{
	static char buf[8][16];
	struct iovec iov = { buf[cookie], 3 };
	int rc = op == KVS_REMOTE_GET
			 ? kvs_remote_get(r, key, strlen(key), &iov, 1, (uint64_t)cookie)
			 : kvs_remote_set_nx(r, key, strlen(key), &iov, 1, (uint64_t)cookie);

	if (rc < 0)
		return rc;
	if (kvs_remote_wait(r, 10000) < 0)
		return -ETIMEDOUT;
	return got[cookie].res;
}

int main(void)
{
	int lfd[2], rc;
	char seeds[64];
	kvs_remote *r;
	kvs_remote_stats st;
	pid_t pid;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		  -1, 0);
	CHECK(sh != MAP_FAILED);
	lfd[0] = sn_listen_any(&sh->port[0]);
	lfd[1] = sn_listen_any(&sh->port[1]);
	CHECK(lfd[0] >= 0 && lfd[1] >= 0);
	pid = fork();
	if (pid == 0) {
		serve(lfd);
		_exit(0);
	}
	close(lfd[0]);
	close(lfd[1]);
	snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", sh->port[0]);

	CHECK_EQ(kvs_remote_create(&r), 0);
	CHECK_EQ(kvs_remote_set_seeds(r, seeds), 0);
	CHECK_EQ(kvs_remote_set_auth(r, "kvs", PASSWORD), 0);
	CHECK_EQ(kvs_remote_set_timeout_ms(r, 3000), 0);
	kvs_remote_set_callback(r, cb, NULL);
	CHECK_EQ(kvs_remote_open(r), 0);
	CHECK_EQ(kvs_remote_is_cluster(r), 1);
	CHECK_EQ(sh->auths[0], 1); /* the seed's open */

	/* 1. redirects to a node no map names: failed, T never contacted */
	rc = run(r, "key-moved", KVS_REMOTE_GET, 0);
	printf("GET redirected by MOVED to a stranger: %d (%s)\n", rc, strerror(-rc));
	CHECK(rc < 0);
	CHECK(run(r, "ask-key", KVS_REMOTE_GET, 1) < 0);
	CHECK(run(r, "key-set", KVS_REMOTE_SET, 2) < 0);
	kvs_remote_get_stats(r, &st);
	CHECK(st.moved >= 2);
	CHECK(st.ask >= 1);
	CHECK(st.map_refreshes >= 2); /* each redirect asked the map first */
	CHECK_EQ(__atomic_load_n(&sh->conns[1], __ATOMIC_SEQ_CST), 0);
	CHECK_EQ(__atomic_load_n(&sh->auths[1], __ATOMIC_SEQ_CST), 0);
	printf("T: %d connections, %d AUTH; A: %d AUTH\n", sh->conns[1], sh->auths[1],
	       sh->auths[0]);

	/* 2. the map names T now: the redirect's refresh confirms it */
	__atomic_store_n(&sh->phase, 1, __ATOMIC_SEQ_CST);
	rc = run(r, "key-moved", KVS_REMOTE_GET, 3);
	CHECK_EQ(rc, 0);
	CHECK_EQ(__atomic_load_n(&sh->auths[1], __ATOMIC_SEQ_CST), 1);
	kvs_remote_close(r);

	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return check_summary("test_remote_redirect_auth");
}
