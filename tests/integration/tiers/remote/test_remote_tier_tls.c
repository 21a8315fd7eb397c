/*
 * test_remote_tier_tls - the remote tier over TLS, on a 3-master cluster
 * that listens with TLS only and requires client certificates (mutual TLS;
 * tests/support/redis_cluster.c makes the CA and the certificates):
 *  share:     two daemons with --remote-tls, --remote-tls-ca and a client
 *             certificate share a chain: A publishes at commit, B's lookup
 *             fetches it, bytes verified;
 *  wrong CA:  a daemon whose --remote-tls-ca signed nothing here is refused
 *             at start with "certificate verify failed" in its log;
 *  plain:     a daemon without --remote-tls is refused at start, quickly,
 *             with a line that names TLS;
 *  no cert:   a daemon without a client certificate is refused at start;
 *  flags:     --remote-tls-cert without --remote-tls-key is refused (exit 2).
 * Skips (77) without redis-server, its TLS, or the openssl CLI.
 */
#include "remote_tier_util.h"

#include <sys/wait.h>

#define BLOCK_TOKENS 16
#define LEN 24

static th_daemon A, B, W, P, N, F;

/* share: two daemons with --remote-tls, the CA and a client certificate:
 * A publishes at commit, B's lookup fetches it, bytes verified. */
static void share_over_tls(rc_cluster *c, const char *caf, const char *cert,
			   const char *key)
{
	kvs_client *ca, *cb;
	kvs_layout L;
	kvs_hash h[LEN];
	size_t bad;

	if (th_daemon_init(&A, TH_ARGS("--host-size", "8M", "--page-size", "16K",
				       "--remote", rc_seeds(c), "--remote-write",
				       "through", "--remote-tls", "--remote-tls-ca", caf,
				       "--remote-tls-cert", cert, "--remote-tls-key",
				       key)) < 0 ||
	    th_daemon_init(&B, TH_ARGS("--host-size", "8M", "--page-size", "16K",
				       "--remote", rc_seeds(c), "--remote-tls",
				       "--remote-tls-ca", caf, "--remote-tls-cert", cert,
				       "--remote-tls-key", key)) < 0)
		th_fatal("daemon init failed");
	if (th_daemon_start(&A) < 0 || th_daemon_start(&B) < 0)
		th_fatal("daemons with --remote-tls did not start");
	CHECK(th_log_contains(&A, "Redis Cluster, TLS"));
	CHECK_EQ(th_stat_get(&A, "tier_remote.cluster"), 1);
	L = th_layout("remote-tls", BLOCK_TOKENS);
	ca = th_connect(&A, &L);
	cb = th_connect(&B, &L);
	th_chain(&L, 11, LEN, 0, 0, h);
	CHECK_RC(th_publish(ca, h, LEN, NULL), LEN);
	CHECK(rt_wait_ge(&A, "tier_remote.published", LEN, TH_WAIT_MS));
	CHECK_EQ(th_verify(cb, h, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&B, "tier_remote.hits"), LEN);
	CHECK_EQ(th_stat_get(&B, "tier_remote.corrupt"), 0);
	CHECK_EQ(th_stat_get(&B, "tier_remote.errors_other"), 0);
	kvs_close(ca);
	kvs_close(cb);
}

/* Daemons the cluster refuses at start, or whose flags are refused: the
 * wrong CA, plain text, no client certificate, a certificate without
 * its key. */
static void refused_at_start(rc_cluster *c, const char *caf, const char *other,
			     const char *cert, const char *key)
{
	int64_t t0;

	/* wrong CA */
	if (th_daemon_init(&W, TH_ARGS("--host-size", "8M", "--remote", rc_seeds(c),
				       "--remote-tls", "--remote-tls-ca", other,
				       "--remote-tls-cert", cert, "--remote-tls-key",
				       key)) < 0)
		th_fatal("daemon init failed");
	CHECK_RC(th_daemon_start(&W), -ECHILD);
	CHECK_NE(W.last_status, 0);
	CHECK(th_log_contains(&W, "certificate verify failed"));

	/* plain text to the TLS ports: refused at once, saying why */
	if (th_daemon_init(&P, TH_ARGS("--host-size", "8M", "--remote", rc_seeds(c),
				       "--remote-timeout", "10000")) < 0)
		th_fatal("daemon init failed");
	t0 = th_now_ms();
	CHECK_RC(th_daemon_start(&P), -ECHILD);
	th_note("plain daemon refused after %lld ms", (long long)(th_now_ms() - t0));
	CHECK(th_now_ms() - t0 < 5000); /* 3 seeds x 10 s timeout: no hang */
	CHECK(th_log_contains(&P, "a TLS port"));

	/* no client certificate where the nodes require one */
	if (th_daemon_init(&N, TH_ARGS("--host-size", "8M", "--remote", rc_seeds(c),
				       "--remote-tls", "--remote-tls-ca", caf)) < 0)
		th_fatal("daemon init failed");
	CHECK_RC(th_daemon_start(&N), -ECHILD);
	CHECK_NE(N.last_status, 0);
	CHECK(th_log_contains(&N, "client certificate"));

	/* a certificate without its key: a flag error */
	if (th_daemon_init(&F, TH_ARGS("--host-size", "8M", "--remote", rc_seeds(c),
				       "--remote-tls", "--remote-tls-cert", cert)) < 0)
		th_fatal("daemon init failed");
	CHECK_RC(th_daemon_start(&F), -ECHILD);
	CHECK_EQ(F.last_status, 2);
}

int main(void)
{
	rc_cluster *c;
	char caf[512], other[512], cert[512], key[512];

	setenv("TH_TIMEOUT", "240", 0);
	th_init("test_remote_tier_tls");
	c = rt_cluster(&(rc_opts){ .masters = 3, .tls = 1, .tls_auth_clients = 1 });
	snprintf(caf, sizeof(caf), "%s", rc_tls_file(c, "ca.crt"));
	snprintf(other, sizeof(other), "%s", rc_tls_file(c, "other-ca.crt"));
	snprintf(cert, sizeof(cert), "%s", rc_tls_file(c, "client.crt"));
	snprintf(key, sizeof(key), "%s", rc_tls_file(c, "client.key"));

	share_over_tls(c, caf, cert, key);
	refused_at_start(c, caf, other, cert, key);

	{
		int ret = th_finish();

		rc_stop(c);
		return ret;
	}
}
