/*
 * test_remote_proto - the engine against a scripted peer (a child process
 * that speaks RESP like a plain node but answers some keys badly), for the
 * failures real Redis does not produce on demand; and open() against
 * nothing, and against a peer that never answers. Needs no Redis.
 *
 * The peer answers CLUSTER SLOTS with "cluster support disabled", and GET
 * by key:
 *   good    $3 abc
 *   junk    a reply that does not parse ("?junk")
 *   cut     "$10\r\nabc", then closes the connection
 *   int     :1 (a reply that does not fit GET: the connection closes)
 *   slow    nothing (the request must time out)
 *   err     -ERR something
 *   oom     -OOM command not allowed ...
 *   down    -CLUSTERDOWN The cluster is down
 * and counts the connections it accepted (GET count -> :N).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvs_resp.h"
#include "remote_util.h"
#include "scripted_node.h"

static struct {
	int done, res;
} got[64];

static void cb(void *arg, const kvs_remote_cqe *c)
{
	(void)arg;
	got[c->cookie].done++;
	got[c->cookie].res = c->res;
}

/* One command @v on @fd: answer it. Returns 0, or -1 to close. */
static int answer(int fd, int l, const kvs_resp_parser *p, const kvs_resp_val *v,
		  void *arg)
{
	const kvs_resp_val *cmd = kvs_resp_elem(p, v, 0), *key = kvs_resp_elem(p, v, 1);
	const int *conns = arg;
	char buf[64];

	(void)l;
	if (!cmd || !cmd->str)
		return -1;
	if (!strcasecmp(cmd->str, "CLUSTER")) {
		sn_put(fd, "-ERR This instance has cluster support disabled\r\n");
		return 0;
	}
	if (strcasecmp(cmd->str, "GET") || !key || !key->str) {
		sn_put(fd, "-ERR unknown command\r\n");
		return 0;
	}
	if (!strcmp(key->str, "good"))
		sn_put(fd, "$3\r\nabc\r\n");
	else if (!strcmp(key->str, "junk"))
		sn_put(fd, "?junk\r\n");
	else if (!strcmp(key->str, "cut")) {
		sn_put(fd, "$10\r\nabc");
		return -1;
	} else if (!strcmp(key->str, "int"))
		sn_put(fd, ":1\r\n");
	else if (!strcmp(key->str, "err"))
		sn_put(fd, "-ERR something\r\n");
	else if (!strcmp(key->str, "oom"))
		sn_put(fd, "-OOM command not allowed when used memory > 'maxmemory'.\r\n");
	else if (!strcmp(key->str, "down"))
		sn_put(fd, "-CLUSTERDOWN The cluster is down\r\n");
	else if (!strcmp(key->str, "count")) {
		snprintf(buf, sizeof(buf), "$%d\r\n%03d\r\n", 3, *conns % 1000);
		sn_put(fd, buf);
	} /* "slow": no answer */
	return 0;
}

/* The peer: serve until killed. */
static void peer(int lfd)
{
	static int conns;

	sn_loop(&lfd, 1, answer, &conns, &conns);
}

static int get(kvs_remote *r, const char *key, size_t len, int cookie)
{
	static char buf[64][16];
	struct iovec iov = { buf[cookie], len };

	return kvs_remote_get(r, key, strlen(key), &iov, 1, (uint64_t)cookie);
}

/* Nothing listening: refused at once. */
static void open_refused(void)
{
	kvs_remote *r;
	char seeds[64];
	int lfd, port;

	lfd = sn_listen_any(&port);
	CHECK(lfd >= 0);
	close(lfd); /* the port is free now (and nothing listens on it) */
	snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", port);
	CHECK_EQ(kvs_remote_create(&r), 0);
	CHECK_EQ(kvs_remote_set_seeds(r, seeds), 0);
	CHECK_EQ(kvs_remote_open(r), -ECONNREFUSED);
	CHECK_EQ(kvs_remote_open(r), -ECONNREFUSED); /* may be tried again */
	kvs_remote_close(r);
}

static void bad_settings(void)
{
	kvs_remote *r;

	CHECK_EQ(kvs_remote_create(&r), 0);
	CHECK_EQ(kvs_remote_set_seeds(r, "nohost"), -EINVAL);
	CHECK_EQ(kvs_remote_set_seeds(r, "h:0"), -EINVAL);
	CHECK_EQ(kvs_remote_set_seeds(r, "h:1,"), -EINVAL);
	CHECK_EQ(kvs_remote_set_seeds(r, "h:65536"), -EINVAL);
	CHECK_EQ(kvs_remote_set_seeds(r, "[::1]:6379,a:1"), 0);
	CHECK_EQ(kvs_remote_set_pool(r, 0), -EINVAL);
	CHECK_EQ(kvs_remote_set_pool(r, KVS_REMOTE_POOL_MAX + 1), -EINVAL);
	CHECK_EQ(kvs_remote_set_timeout_ms(r, 0), -EINVAL);
	CHECK_EQ(kvs_remote_open(r) < 0, 1);
	kvs_remote_close(r);
}

/* A listener that never answers: open gives up at its timeout. Returns
 * the listener, its address in @seeds, for the scripted peer after. */
static int open_times_out(char *seeds, size_t cap)
{
	kvs_remote *r;
	struct timespec t0, t1;
	int lfd, port;

	lfd = sn_listen_any(&port);
	snprintf(seeds, cap, "127.0.0.1:%d", port);
	CHECK_EQ(kvs_remote_create(&r), 0);
	kvs_remote_set_seeds(r, seeds);
	kvs_remote_set_connect_timeout_ms(r, 200);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK_EQ(kvs_remote_open(r), -ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 2000);
	kvs_remote_close(r);
	return lfd;
}

/* Replies that fit, and error replies: the connection goes on; the one
 * that does not fit GET (:1) closes it, and the requests behind it are
 * resent on a new one. */
static void replies_and_errors(kvs_remote *r)
{
	kvs_remote_stats st;

	get(r, "good", 3, 0);
	get(r, "int", 3, 1);
	get(r, "err", 3, 2);
	get(r, "oom", 3, 3);
	get(r, "down", 3, 4);
	get(r, "good", 4, 5); /* wrong size */
	get(r, "good", 3, 6);
	CHECK_EQ(kvs_remote_wait(r, 5000), 0);
	CHECK_EQ(got[0].res, 0);
	CHECK_EQ(got[1].res, -EPROTO);
	CHECK_EQ(got[2].res, -EIO);
	CHECK_EQ(got[3].res, -EIO);
	CHECK_EQ(got[4].res, -ENETDOWN);
	CHECK_EQ(got[5].res, -EMSGSIZE);
	CHECK_EQ(got[6].res, 0);
	kvs_remote_get_stats(r, &st);
	CHECK_EQ(st.connects, 2);
	CHECK_EQ(st.resent, 5);
}

static void junk_and_cut_replies(kvs_remote *r)
{
	/* A reply that does not parse: that request fails, the connection is
	 * replaced; requests behind it are resent and served. */
	get(r, "junk", 3, 10);
	get(r, "good", 3, 11);
	CHECK_EQ(kvs_remote_wait(r, 5000), 0);
	CHECK_EQ(got[10].res, -EPROTO);
	CHECK_EQ(got[11].res, 0);

	/* Cut in mid-reply: resent once, cut again: a connection error. */
	get(r, "cut", 3, 12);
	CHECK_EQ(kvs_remote_wait(r, 5000), 0);
	CHECK_EQ(got[12].res, -ECONNRESET);
	get(r, "good", 3, 13);
	CHECK_EQ(kvs_remote_wait(r, 5000), 0);
	CHECK_EQ(got[13].res, 0);
}

/* No answer: a timeout, bounded; then served again after the backoff. */
static void timeout_then_served(kvs_remote *r)
{
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	get(r, "slow", 3, 14);
	CHECK_EQ(kvs_remote_wait(r, 5000), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK_EQ(got[14].res, -ETIMEDOUT);
	CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 1000);
	/* Served again once the node's backoff (100 ms) passed: poll that
	 * condition against a deadline. */
	{
		struct timespec end;
		int ok = 0;

		clock_gettime(CLOCK_MONOTONIC, &end);
		end.tv_sec += 3;
		while (!ok) {
			struct timespec now;

			got[15].done = 0;
			get(r, "good", 3, 15);
			CHECK_EQ(kvs_remote_wait(r, 5000), 0);
			ok = got[15].res == 0;
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (ok || now.tv_sec > end.tv_sec ||
			    (now.tv_sec == end.tv_sec && now.tv_nsec > end.tv_nsec))
				break;
			poll(NULL, 0, 10);
		}
		CHECK(ok);
	}
}

/* The error counters of the scripted peer's replies. */
static void check_error_stats(kvs_remote *r)
{
	kvs_remote_stats st;

	kvs_remote_get_stats(r, &st);
	CHECK_EQ(st.err_proto, 2);
	CHECK_EQ(st.err_server, 2);
	CHECK_EQ(st.err_clusterdown, 1);
	CHECK_EQ(st.err_wrong_size, 1);
	CHECK(st.err_timeout >= 1);
	CHECK(st.err_down >= 1);
	CHECK_EQ(kvs_remote_pending(r), 0);
}

int main(void)
{
	kvs_remote *r;
	char seeds[64];
	int lfd, rc;
	pid_t child;

	open_refused();
	bad_settings();
	lfd = open_times_out(seeds, sizeof(seeds));

	/* The scripted peer on the same listener. */
	child = fork();
	if (child == 0) {
		peer(lfd);
		_exit(0);
	}
	close(lfd);
	CHECK_EQ(kvs_remote_create(&r), 0);
	kvs_remote_set_seeds(r, seeds);
	kvs_remote_set_timeout_ms(r, 300);
	kvs_remote_set_pool(r, 1);
	kvs_remote_set_callback(r, cb, NULL);
	rc = kvs_remote_open(r);
	CHECK_EQ(rc, 0);
	if (rc < 0)
		goto out;
	CHECK_EQ(kvs_remote_is_cluster(r), 0);

	replies_and_errors(r);
	junk_and_cut_replies(r);
	timeout_then_served(r);
	check_error_stats(r);
	kvs_remote_close(r);
out:
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return check_summary("test_remote_proto");
}
