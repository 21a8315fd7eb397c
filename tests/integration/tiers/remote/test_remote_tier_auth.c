/*
 * test_remote_tier_auth - the remote tier's start-up checks, on one plain
 * Redis node with an ACL user (the default user off):
 *  auth:     two daemons with --remote-auth-file (a 0600 file "user
 *            password") share a chain; the password is in neither log.
 *  wrong:    a wrong password: kvshared exits nonzero at start, says why,
 *            and the password is not in its log.
 *  tenants:  --remote with --tenant-arenas uid is refused at start.
 * Skips (77) without redis-server.
 */
#include "remote_tier_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK_TOKENS 16
#define LEN 8
#define PASSWORD "s3cret-Pw-4711"
#define WRONG "wr0ng-Pw-0815"

static th_daemon A, B, W, T;
static char good[160], wrong[160];

/* Write "@user @pass" to a new 0600 file in @d's directory, path in @out. */
static void auth_file(th_daemon *d, const char *user, const char *pass, char *out,
		      size_t cap)
{
	int fd;

	snprintf(out, cap, "%s/remote-auth", d->dir);
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		th_fatal("%s: %s", out, strerror(errno));
	if (dprintf(fd, "%s %s\n", user, pass) < 0)
		th_fatal("%s: write failed", out);
	close(fd);
}

/* Whether @d's log (read now, the daemon stopped) holds @needle. */
static bool log_has(const th_daemon *d, const char *needle)
{
	static char buf[1 << 16];
	FILE *f = fopen(d->log, "r");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strstr(buf, needle) != NULL;
}

int main(void)
{
	rc_cluster *c;
	kvs_client *ca, *cb;
	kvs_layout L;
	kvs_hash h[LEN];
	char out[256];
	size_t bad;
	int ret;

	setenv("TH_TIMEOUT", "180", 0);
	th_init("test_remote_tier_auth");
	c = rt_cluster(&(rc_opts){ .masters = 1, .plain = 1 });
	CHECK_EQ(rc_cli(c, 0, out, sizeof(out), "ACL", "SETUSER", "kvs", "on",
			">" PASSWORD, "~kvs2:*", "+get", "+set", "+exists",
			"+cluster|slots", NULL), 0);
	CHECK(!strcmp(out, "OK"));
	CHECK_EQ(rc_cli(c, 0, out, sizeof(out), "ACL", "SETUSER", "default", "off",
			NULL), 0);

	/* auth: A publishes at commit, B fetches, both AUTH as kvs */
	if (th_daemon_init(&A, TH_ARGS("--host-size", "8M", "--page-size", "16K",
				       "--remote", rc_seeds(c), "--remote-write",
				       "through", "--remote-auth-file", good)) < 0 ||
	    th_daemon_init(&B, TH_ARGS("--host-size", "8M", "--page-size", "16K",
				       "--remote", rc_seeds(c), "--remote-auth-file",
				       good)) < 0)
		th_fatal("daemon init failed");
	auth_file(&A, "kvs", PASSWORD, good, sizeof(good));
	if (th_daemon_start(&A) < 0 || th_daemon_start(&B) < 0)
		th_fatal("daemons with --remote-auth-file did not start");
	CHECK_EQ(th_stat_get(&A, "tier_remote.cluster"), 0);
	L = th_layout("remote-auth", BLOCK_TOKENS);
	ca = th_connect(&A, &L);
	cb = th_connect(&B, &L);
	th_chain(&L, 7, LEN, 0, 0, h);
	CHECK_RC(th_publish(ca, h, LEN, NULL), LEN);
	CHECK(rt_wait_ge(&A, "tier_remote.published", LEN, TH_WAIT_MS));
	CHECK_EQ(th_verify(cb, h, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&B, "tier_remote.hits"), LEN);
	CHECK_EQ(th_stat_get(&B, "tier_remote.errors_other"), 0);
	kvs_close(ca);
	kvs_close(cb);

	/* wrong password: refused at start, the password never logged */
	if (th_daemon_init(&W, TH_ARGS("--host-size", "8M", "--remote", rc_seeds(c),
				       "--remote-auth-file", wrong)) < 0)
		th_fatal("daemon init failed");
	auth_file(&W, "kvs", WRONG, wrong, sizeof(wrong));
	CHECK_RC(th_daemon_start(&W), -ECHILD);
	CHECK_NE(W.last_status, 0);
	CHECK(log_has(&W, "refused AUTH"));
	CHECK(!log_has(&W, WRONG));

	/* tenants: per-uid arenas share nothing, a shared cluster would */
	if (th_daemon_init(&T, TH_ARGS("--host-size", "8M", "--remote", rc_seeds(c),
				       "--tenant-arenas", "uid")) < 0)
		th_fatal("daemon init failed");
	CHECK_RC(th_daemon_start(&T), -ECHILD);
	CHECK_NE(T.last_status, 0);
	CHECK(log_has(&T, "not supported with --remote"));

	ret = th_finish();
	/* after th_finish: A and B have stopped, their logs are complete */
	if (log_has(&A, PASSWORD) || log_has(&B, PASSWORD)) {
		fprintf(stderr, "test_remote_tier_auth: FAIL: the password is in a log\n");
		ret = 1;
	}
	rc_stop(c);
	return ret;
}
