/*
 * test_remote_tls - the remote engine over TLS, against real Redis with TLS
 * only (tests/support/redis_cluster.c's TLS mode, certificates made by the test):
 *  1. a plain-text engine on a TLS port fails open at once (well before its
 *     connect timeout) with a line that names the cause;
 *  2. a CA that signed nothing here, and a server name the certificate does
 *     not show: open fails with -EKEYREJECTED and "certificate verify failed";
 *     the name "localhost" (a DNS SAN) opens;
 *  3. on a 3-master TLS cluster: SET NX / GET / EXISTS of values of 4 KiB to
 *     24 MiB (over the read budget, in several iovecs) round trip bit exact,
 *     pipelined; a MOVED (a slot reassigned by hand) is followed; a node
 *     killed fails its keys fast while the others serve;
 *  4. AUTH with TLS on a peer the test controls: the first bytes the
 *     engine sends are a TLS ClientHello and the password never arrives;
 *     a TLS peer with a certificate of the right CA that does not name
 *     127.0.0.1 (the IP SAN check of a numeric host) is refused;
 *  5. mutual TLS (a node with tls-auth-clients yes): refused without a
 *     client certificate, served with one.
 */
#define _GNU_SOURCE /* memmem */
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "remote_util.h"

#define NKEYS 12
#define BIG (24u << 20)

static kvs_remote *tls_open(const char *seeds, const struct kvs_remote_tls *t,
			    const char *user, const char *pw, int *rc,
			    char *why, size_t cap)
{
	kvs_remote *r;

	*rc = kvs_remote_create(&r);
	if (*rc < 0)
		return NULL;
	kvs_remote_set_seeds(r, seeds);
	kvs_remote_set_callback(r, ru_cb, NULL);
	kvs_remote_set_timeout_ms(r, 10000);
	kvs_remote_set_connect_timeout_ms(r, 8000);
	if (pw)
		kvs_remote_set_auth(r, user, pw);
	*rc = t ? kvs_remote_set_tls(r, t) : 0;
	if (*rc == 0)
		*rc = kvs_remote_open(r);
	if (why)
		snprintf(why, cap, "%s", kvs_remote_last_error(r));
	if (*rc < 0) {
		kvs_remote_close(r);
		return NULL;
	}
	return r;
}

static void test_refusals(rc_cluster *c)
{
	struct kvs_remote_tls t = { .ca_file = rc_tls_file(c, "other-ca.crt") };
	char why[400], ca[512];
	double t0 = ru_now();
	kvs_remote *r;
	int rc;

	/* 1. plain text to a TLS port */
	r = tls_open(rc_seeds(c), NULL, NULL, NULL, &rc, why, sizeof(why));
	CHECK(r == NULL);
	CHECK(rc < 0);
	CHECK(ru_now() - t0 < 4.0); /* 8 s connect timeout: not a hang */
	CHECK(strstr(why, "TLS port") != NULL);
	printf("plain text to a TLS port: %s (%.0f ms)\n", why,
	       (ru_now() - t0) * 1e3);

	/* 2. the wrong CA, the wrong name */
	r = tls_open(rc_seeds(c), &t, NULL, NULL, &rc, why, sizeof(why));
	CHECK(r == NULL);
	CHECK_EQ(rc, -EKEYREJECTED);
	CHECK(strstr(why, "certificate verify failed") != NULL);
	printf("wrong CA: %s\n", why);
	snprintf(ca, sizeof(ca), "%s", rc_tls_file(c, "ca.crt"));
	t.ca_file = ca;
	t.server_name = "kvs.example.org";
	r = tls_open(rc_seeds(c), &t, NULL, NULL, &rc, why, sizeof(why));
	CHECK(r == NULL);
	CHECK_EQ(rc, -EKEYREJECTED);
	printf("wrong name: %s\n", why);
	t.server_name = "localhost";
	r = tls_open(rc_seeds(c), &t, NULL, NULL, &rc, why, sizeof(why));
	CHECK_EQ(rc, 0);
	kvs_remote_close(r);

	/* Settings refused before any connection. */
	CHECK_EQ(kvs_remote_create(&r), 0);
	CHECK_EQ(kvs_remote_set_tls(r, &(struct kvs_remote_tls){
				     .ca_file = ca, .cert_file = ca }), -EINVAL);
	CHECK_EQ(kvs_remote_set_tls(r, &(struct kvs_remote_tls){
				     .ca_file = "/nonexistent/ca.crt" }), -ENOENT);
	CHECK(strstr(kvs_remote_last_error(r), "/nonexistent/ca.crt") != NULL);
	kvs_remote_close(r);
}

/* Value sizes: 24 MiB, just over the engine's 16 MiB read budget, then
 * 2 KiB to 2 MiB. (Redis writes 64 KiB per event to a client, so the
 * budget is rarely what stops a read here: the path for bytes SSL holds
 * past it, kvs_rmt_conn_more, is not reached for sure by this test.) */
static size_t vsize(int i)
{
	if (i < 2)
		return i == 0 ? BIG : (16u << 20) + 20000;
	return (size_t)1024 << (i % 12);
}

/* What test_data's steps share: the engine, the NKEYS values and keys. */
struct tls_data {
	kvs_remote *r;
	uint8_t *val[NKEYS], *got[NKEYS];
	char keys[NKEYS][32];
	const void *kp[NKEYS];
	size_t klen[NKEYS];
};

/* SET NX of every value in three iovecs, pipelined. */
static void set_values(struct tls_data *d)
{
	ru_reset();
	for (int i = 0; i < NKEYS; i++) {
		size_t n = vsize(i), h = n / 3;
		struct iovec iov[3] = { { NULL, h }, { NULL, h }, { NULL, n - 2 * h } };

		d->val[i] = malloc(n);
		d->got[i] = malloc(n);
		ru_fill(d->val[i], n, (uint64_t)i + 900);
		iov[0].iov_base = d->val[i];
		iov[1].iov_base = d->val[i] + h;
		iov[2].iov_base = d->val[i] + 2 * h;
		d->klen[i] = ru_key(d->keys[i], (uint64_t)i + 900);
		d->kp[i] = d->keys[i];
		CHECK_EQ(kvs_remote_set_nx(d->r, d->keys[i], d->klen[i], iov, 3,
					   (uint64_t)i), 0);
	}
	CHECK_EQ(kvs_remote_wait(d->r, 30000), 0);
	for (int i = 0; i < NKEYS; i++)
		CHECK_EQ(ru_done[i].res, 0);
}

/* GET every value in two iovecs and EXISTS them all: bit exact, present. */
static void get_values_back(struct tls_data *d)
{
	kvs_remote_stats st;
	int res[NKEYS];

	ru_reset();
	for (int i = 0; i < NKEYS; i++) {
		size_t n = vsize(i), h = n / 2;
		struct iovec iov[2] = { { d->got[i], h }, { d->got[i] + h, n - h } };

		memset(d->got[i], 0, n);
		CHECK_EQ(kvs_remote_get(d->r, d->keys[i], d->klen[i], iov, 2,
					(uint64_t)i), 0);
	}
	CHECK_EQ(kvs_remote_exists(d->r, d->kp, d->klen, NKEYS, res, 100), 0);
	CHECK_EQ(kvs_remote_wait(d->r, 30000), 0);
	for (int i = 0; i < NKEYS; i++) {
		CHECK_EQ(ru_done[i].res, 0);
		CHECK(!memcmp(d->got[i], d->val[i], vsize(i)));
		CHECK_EQ(res[i], 1);
	}
	CHECK_EQ(ru_done[100].res, NKEYS);
	kvs_remote_get_stats(d->r, &st);
	CHECK_EQ(st.hits, NKEYS);
	CHECK(st.bytes_in_direct > BIG / 2);
	CHECK_EQ(st.err_proto, 0);
}

/* MOVED: a key's (empty) slot given to another master by hand. */
static void follow_moved(rc_cluster *c, struct tls_data *d)
{
	char moved_key[32], ids[RC_MAX_NODES][64], out[256], sl[16];
	int owners[KVS_SLOTS];
	kvs_remote_stats st;
	size_t mlen;

	mlen = ru_key(moved_key, 4242);
	CHECK_EQ(ru_owners(c, 0, owners, ids), 0);
	{
		unsigned s = kvs_slot_of(moved_key, mlen);
		int to = (owners[s] + 1) % rc_nodes(c);
		struct iovec iov = { d->got[1], 16 };

		/* IMPORTING first, so that SETSLOT NODE on the new owner bumps
		 * its epoch (else gossip may give the slot back meanwhile) */
		snprintf(sl, sizeof(sl), "%u", s);
		CHECK_EQ(rc_cli(c, to, out, sizeof(out), "CLUSTER", "SETSLOT", sl,
				"IMPORTING", ids[owners[s]], NULL), 0);
		CHECK_EQ(rc_cli(c, owners[s], out, sizeof(out), "CLUSTER", "SETSLOT", sl,
				"MIGRATING", ids[to], NULL), 0);
		for (int k = 0; k < rc_nodes(c); k++)
			CHECK_EQ(rc_cli(c, (to + k) % rc_nodes(c), out, sizeof(out), "CLUSTER",
					"SETSLOT", sl, "NODE", ids[to], NULL), 0);
		ru_reset();
		CHECK_EQ(kvs_remote_set_nx(d->r, moved_key, mlen, &iov, 1, 0), 0);
		CHECK_EQ(kvs_remote_wait(d->r, 10000), 0);
		CHECK_EQ(ru_done[0].res, 0);
		kvs_remote_get_stats(d->r, &st);
		CHECK(st.moved >= 1);
	}
}

/* A node killed: its keys fail fast, the others' keys are served. */
static void kill_one_master(rc_cluster *c, struct tls_data *d)
{
	int owners[KVS_SLOTS], victim = -1, down = 0, served = 0;

	CHECK_EQ(ru_owners(c, 0, owners, NULL), 0);
	victim = owners[kvs_slot_of(d->keys[1], d->klen[1])];
	CHECK_EQ(rc_kill(c, victim), 0);
	ru_reset();
	for (int i = 1; i < NKEYS; i++) {
		size_t n = vsize(i);
		struct iovec iov = { d->got[i], n };

		CHECK_EQ(kvs_remote_get(d->r, d->keys[i], d->klen[i], &iov, 1,
					(uint64_t)i), 0);
	}
	CHECK_EQ(kvs_remote_wait(d->r, 15000), 0);
	for (int i = 1; i < NKEYS; i++) {
		int mine = owners[kvs_slot_of(d->keys[i], d->klen[i])] == victim;

		if (mine) {
			CHECK(ru_done[i].res < 0);
			down++;
		} else {
			CHECK_EQ(ru_done[i].res, 0);
			served += ru_done[i].res == 0;
		}
	}
	printf("node %d killed: %d keys failed, %d served\n", victim, down, served);
	CHECK(down >= 1);
	CHECK(served >= 1);
}

static void test_data(rc_cluster *c)
{
	static struct tls_data d;
	char ca[512];
	int rc;

	snprintf(ca, sizeof(ca), "%s", rc_tls_file(c, "ca.crt"));
	d.r = tls_open(rc_seeds(c), &(struct kvs_remote_tls){ .ca_file = ca }, NULL,
		       NULL, &rc, NULL, 0);
	CHECK_EQ(rc, 0);
	if (!d.r)
		return;
	CHECK_EQ(kvs_remote_is_cluster(d.r), 1);
	set_values(&d);
	get_values_back(&d);
	follow_moved(c, &d);
	kill_one_master(c, &d);
	kvs_remote_close(d.r);
	for (int i = 0; i < NKEYS; i++) {
		free(d.val[i]);
		free(d.got[i]);
	}
}

/* ---- 4: what a TLS engine sends first ------------------------------------- */

static struct {
	int lfd;
	uint8_t buf[8192];
	size_t len;
} trap;

/* Accept one connection, take what comes for a while, answer junk, close. */
static void *trap_run(void *arg)
{
	int fd = accept(trap.lfd, NULL, NULL);
	double end = ru_now() + 2;

	(void)arg;
	if (fd < 0)
		return NULL;
	while (trap.len < sizeof(trap.buf) && ru_now() < end) {
		struct timeval tv = { 0, 200000 };
		ssize_t k;

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		k = read(fd, trap.buf + trap.len, sizeof(trap.buf) - trap.len);
		if (k <= 0)
			break;
		trap.len += (size_t)k;
	}
	if (write(fd, "+OK\r\n", 5) < 0) {
		/* the engine may have gone */
	}
	close(fd);
	return NULL;
}

static void test_no_clear_password(rc_cluster *c)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	char seeds[64], ca[512];
	pthread_t th;
	int rc;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	trap.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(trap.lfd >= 0);
	CHECK_EQ(bind(trap.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_EQ(listen(trap.lfd, 4), 0);
	CHECK_EQ(getsockname(trap.lfd, (struct sockaddr *)&a, &alen), 0);
	snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", ntohs(a.sin_port));
	snprintf(ca, sizeof(ca), "%s", rc_tls_file(c, "ca.crt"));
	CHECK_EQ(pthread_create(&th, NULL, trap_run, NULL), 0);
	CHECK(tls_open(seeds, &(struct kvs_remote_tls){ .ca_file = ca }, "kvs",
		       "pw-in-the-clear", &rc, NULL, 0) == NULL);
	CHECK(rc < 0);
	pthread_join(th, NULL);
	close(trap.lfd);
	CHECK(trap.len > 5);
	CHECK_EQ(trap.buf[0], 0x16); /* a TLS handshake record */
	CHECK(memmem(trap.buf, trap.len, "pw-in-the-clear", 15) == NULL);
	CHECK(memmem(trap.buf, trap.len, "AUTH", 4) == NULL);
}

/* ---- 4b: the IP SAN check ------------------------------------------------ */

static struct {
	int lfd;
	SSL_CTX *ctx;
} fake;

/* A TLS server on loopback whose certificate (the CA's, but the client's:
 * no SAN at all) does not name 127.0.0.1: it accepts, handshakes, closes. */
static void *fake_run(void *arg)
{
	int fd = accept(fake.lfd, NULL, NULL);
	SSL *s;

	(void)arg;
	if (fd < 0)
		return NULL;
	s = SSL_new(fake.ctx);
	SSL_set_fd(s, fd);
	SSL_accept(s);
	SSL_free(s);
	close(fd);
	return NULL;
}

static void test_ip_san(rc_cluster *c)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	char seeds[64], ca[512], why[400];
	pthread_t th;
	int rc;

	fake.ctx = SSL_CTX_new(TLS_server_method());
	CHECK(fake.ctx != NULL);
	CHECK_EQ(SSL_CTX_use_certificate_file(fake.ctx, rc_tls_file(c, "client.crt"),
					      SSL_FILETYPE_PEM), 1);
	CHECK_EQ(SSL_CTX_use_PrivateKey_file(fake.ctx, rc_tls_file(c, "client.key"),
					     SSL_FILETYPE_PEM), 1);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fake.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK_EQ(bind(fake.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_EQ(listen(fake.lfd, 4), 0);
	CHECK_EQ(getsockname(fake.lfd, (struct sockaddr *)&a, &alen), 0);
	snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", ntohs(a.sin_port));
	snprintf(ca, sizeof(ca), "%s", rc_tls_file(c, "ca.crt"));
	CHECK_EQ(pthread_create(&th, NULL, fake_run, NULL), 0);
	CHECK(tls_open(seeds, &(struct kvs_remote_tls){ .ca_file = ca }, NULL, NULL,
		       &rc, why, sizeof(why)) == NULL);
	pthread_join(th, NULL);
	close(fake.lfd);
	SSL_CTX_free(fake.ctx);
	CHECK_EQ(rc, -EKEYREJECTED);
	CHECK(strstr(why, "IP address mismatch") != NULL);
	printf("a certificate of the right CA without the IP: %s\n", why);
}

/* ---- 5: mutual TLS, with AUTH -------------------------------------------- */

static void test_mutual(void)
{
	rc_cluster *m = ru_cluster("test_remote_tls", &(rc_opts){
		.masters = 1, .plain = 1, .tls = 1, .tls_auth_clients = 1 });
	char ca[512], cert[512], key[512], why[400], out[128];
	struct kvs_remote_tls t;
	uint8_t v[64], g[64];
	kvs_remote *r;
	int rc;

	snprintf(ca, sizeof(ca), "%s", rc_tls_file(m, "ca.crt"));
	snprintf(cert, sizeof(cert), "%s", rc_tls_file(m, "client.crt"));
	snprintf(key, sizeof(key), "%s", rc_tls_file(m, "client.key"));
	CHECK_EQ(rc_cli(m, 0, out, sizeof(out), "ACL", "SETUSER", "kvs", "on",
			">tls-pass", "~kvs1:*", "+get", "+set", "+exists",
			"+cluster|slots", NULL), 0);
	t = (struct kvs_remote_tls){ .ca_file = ca };
	r = tls_open(rc_seeds(m), &t, "kvs", "tls-pass", &rc, why, sizeof(why));
	CHECK(r == NULL);
	CHECK(rc < 0);
	printf("mutual TLS without a certificate: %s\n", why);
	t.cert_file = cert;
	t.key_file = key;
	r = tls_open(rc_seeds(m), &t, "kvs", "tls-pass", &rc, why, sizeof(why));
	CHECK_EQ(rc, 0);
	if (r) {
		struct iovec iv = { v, sizeof(v) }, ig = { g, sizeof(g) };

		ru_fill(v, sizeof(v), 5);
		ru_reset();
		CHECK_EQ(kvs_remote_set_nx(r, "kvs1:m", 6, &iv, 1, 0), 0);
		CHECK_EQ(kvs_remote_wait(r, 10000), 0);
		CHECK_EQ(kvs_remote_get(r, "kvs1:m", 6, &ig, 1, 1), 0);
		CHECK_EQ(kvs_remote_wait(r, 10000), 0);
		CHECK_EQ(ru_done[0].res, 0);
		CHECK_EQ(ru_done[1].res, 0);
		CHECK(!memcmp(v, g, sizeof(v)));
		kvs_remote_close(r);
	}
	rc_stop(m);
}

int main(void)
{
	rc_cluster *c;

	/* the test's own peers write to sockets the engine may have closed */
	signal(SIGPIPE, SIG_IGN);
	c = ru_cluster("test_remote_tls", &(rc_opts){ .masters = 3, .tls = 1 });

	test_refusals(c);
	test_no_clear_password(c);
	test_ip_san(c);
	test_data(c);
	rc_stop(c);
	test_mutual();
	return check_summary("test_remote_tls");
}
