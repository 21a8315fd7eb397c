/*
 * test_remote_tier_trust - who can make a daemon serve KV through the remote
 * tier. A private 3-master cluster; A and B publish at
 * commit and C only reads, the three with the same 0600
 * --remote-secret-file; D publishes with another secret. 16 KiB blocks.
 *  control:  a chain published through A is a whole hit on C, bytes checked.
 *  forged:   values written straight to the cluster by a client without the
 *            secret, under the right keys, with right header fields and a
 *            payload of other bytes: sealed with no secret (the HMAC anyone
 *            can compute), or with our key id copied and an XXH3 of the
 *            payload in the MAC's place (the old format's check). C's
 *            lookups are misses, never their bytes, counted in
 *            tier_remote.forged, logged.
 *  secret:   D (another secret) publishes a chain: C does not serve it
 *            (forged, logged as another secret).
 *  squat:    a client of namespace X (salt "tenant-x") publishes the
 *            hashes of namespace Y's chain first; Y's client then publishes
 *            it through A, stored (not "existed"), and C's Y client hits it
 *            whole: the fingerprint in the key keeps them apart.
 *  repair:   one of A's values changed in Redis (SETRANGE): B's lookup
 *            stops before it; B publishes the chain (it recomputed it):
 *            the value is replaced (tier_remote.repaired), and C's lookup
 *            hits the whole chain.
 *  files:    a secret under 16 bytes stops kvshared at start (exit 1, one
 *            line, the secret not in it); a 0644 secret file is a warning;
 *            no secret file: a warning, tier_remote.authenticated 0; the
 *            secret is in no log.
 * Skips (77) without redis-server.
 */
#include "remote_tier_util.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvs_le.h"
#include "kvs_remote.h"

#define BLOCK_TOKENS 16 /* 16 KiB blocks */
#define BLOCK_BYTES (BLOCK_TOKENS * 1024)
#define LEN 8

static th_daemon A, B, C, D, S, P, N;
static kvs_layout L;
static uint64_t seed = 7000;
static char sdir[256], secret1[300], secret2[300];
static const char SECRET1[] = "5f1c0e4b9a7d2e8f3c6b1a0d9e8f7c6b5a4d3c2b1a0f9e8d";
static const char SECRET2[] = "another-secret-entirely-0123456789abcdef";

/* A 0600 file @name in sdir holding @text, its path in @out. */
static void secret_file(const char *name, const char *text, char *out, size_t cap)
{
	int fd;

	snprintf(out, cap, "%s/%s", sdir, name);
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || dprintf(fd, "%s\n", text) < 0)
		th_fatal("%s: %s", out, strerror(errno));
	close(fd);
}

/* ---- a writer without the secret: the engine, straight to the cluster -- */

static int forger_res;

static void forger_done(void *arg, const kvs_remote_cqe *q)
{
	(void)arg;
	if (q->res < 0)
		forger_res = q->res;
}

/* SET the key of block @h (layout @l) to header @hdr + @payload. */
static void forge(kvs_remote *r, const kvs_layout *l, kvs_hash h,
		  const uint8_t *hdr, const void *payload)
{
	uint8_t key[KVS_RVAL_KEY_BYTES];
	struct iovec iov[2] = { { (void *)hdr, KVS_RVAL_HDR_BYTES },
				{ (void *)payload, BLOCK_BYTES } };

	kvs_rval_key(key, rt_fp(l), h);
	forger_res = 0;
	CHECK_EQ(kvs_remote_set(r, key, sizeof(key), iov, 2, 0), 0);
	CHECK_EQ(kvs_remote_wait(r, 10000), 0);
	CHECK_EQ(forger_res, 0);
}

static void forged(rc_cluster *c, kvs_client *cc)
{
	static kvs_hash f[LEN];
	static uint8_t payload[BLOCK_BYTES];
	uint8_t hdr[KVS_RVAL_HDR_BYTES];
	kvs_rval_mac *none, *ours;
	kvs_remote *r;
	size_t bad = 0;
	int64_t before = th_stat_get(&C, "tier_remote.forged");
	int hits;

	CHECK_EQ(kvs_rval_mac_create(NULL, 0, &none), 0);
	/* only for its key id, which any value of ours shows in clear */
	CHECK_EQ(kvs_rval_mac_create(SECRET1, strlen(SECRET1), &ours), 0);
	CHECK_EQ(kvs_remote_create(&r), 0);
	CHECK_EQ(kvs_remote_set_seeds(r, rc_seeds(c)), 0);
	kvs_remote_set_callback(r, forger_done, NULL);
	if (kvs_remote_open(r) < 0)
		th_fatal("forger: cannot open the cluster");
	th_chain(&L, seed++, LEN, 0, 0, f);
	for (int i = 0; i < LEN; i++) {
		kvs_rval_info info = { .block_bytes = BLOCK_BYTES, .ns_fp = rt_fp(&L),
				       .hash = f[i], .parent = i ? f[i - 1] : (kvs_hash){ 0, 0 } };

		th_pattern_fill(payload, BLOCK_BYTES, f[i], 99); /* not the block's */
		CHECK_EQ(kvs_rval_seal(none, &info, payload, hdr), 0);
		if (i >= LEN / 2) {
			/* our key id, and the unkeyed XXH3 of the old format */
			info.key_id = kvs_rval_mac_id(ours);
			memset(info.mac, 0, sizeof(info.mac));
			put64(info.mac, XXH3_64bits(payload, BLOCK_BYTES));
			kvs_rval_encode(hdr, &info);
		}
		forge(r, &L, f[i], hdr, payload);
	}
	kvs_remote_close(r);
	kvs_rval_mac_free(none);
	kvs_rval_mac_free(ours);

	hits = th_verify(cc, f, LEN, &bad);
	CHECK_EQ(hits, 0);
	CHECK_EQ(bad, 0);
	/* each value fetched is checked and counted */
	CHECK_EQ(th_stat_get(&C, "tier_remote.forged"), before + LEN);
	hits = th_verify(cc, f + LEN / 2, LEN / 2, &bad);
	CHECK_EQ(hits, 0);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&C, "tier_remote.forged"), before + LEN + LEN / 2);
	CHECK_EQ(th_stat_get(&C, "tier_remote.hits"), (int64_t)LEN); /* control's */
	CHECK(th_log_contains(&C, "failed its MAC"));
	th_note("forged: %d values without the secret, C serves none, forged %" PRId64,
		LEN, th_stat_get(&C, "tier_remote.forged") - before);
}

static void other_secret(kvs_client *cd, kvs_client *cc)
{
	static kvs_hash g[LEN];
	size_t bad = 0;
	int64_t before = th_stat_get(&C, "tier_remote.forged");
	int64_t pub = th_stat_get(&D, "tier_remote.published");

	th_chain(&L, seed++, LEN, 0, 0, g);
	CHECK_RC(th_publish(cd, g, LEN, NULL), LEN);
	CHECK(rt_wait_ge(&D, "tier_remote.published", pub + LEN, TH_WAIT_MS));
	CHECK_EQ(th_verify(cc, g, LEN, &bad), 0);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&C, "tier_remote.forged"), before + LEN);
	CHECK(th_log_contains(&C, "another --remote-secret-file"));
	th_note("secret: D's %d values (another secret) are not served by C", LEN);
}

static void squat(void)
{
	static kvs_hash hy[LEN];
	kvs_layout lx = L, ly = L;
	kvs_client *ax, *ay, *cy;
	int64_t pub, existed;
	size_t bad = 0;

	lx.salt = "tenant-x";
	ly.salt = "tenant-y";
	CHECK(rt_fp(&lx) != rt_fp(&ly));
	ax = th_connect(&A, &lx);
	ay = th_connect(&A, &ly);
	cy = th_connect(&C, &ly);
	th_chain(&ly, seed++, LEN, 0, 0, hy);
	/* X publishes Y's hashes first */
	pub = th_stat_get(&A, "tier_remote.published");
	CHECK_RC(th_publish(ax, hy, LEN, NULL), LEN);
	CHECK(rt_wait_ge(&A, "tier_remote.published", pub + LEN, TH_WAIT_MS));
	/* then Y: stored, not found there already */
	existed = th_stat_get(&A, "tier_remote.existed");
	CHECK_RC(th_publish(ay, hy, LEN, NULL), LEN);
	CHECK(rt_wait_ge(&A, "tier_remote.published", pub + 2 * LEN, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&A, "tier_remote.existed"), existed);
	CHECK_EQ(th_verify(cy, hy, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	th_note("squat: X published Y's %d hashes first; Y's chain still hits whole "
		"on C", LEN);
	kvs_close(ax);
	kvs_close(ay);
	kvs_close(cy);
}

static void repair(rc_cluster *c, kvs_client *ca, kvs_client *cb, kvs_client *cc)
{
	static kvs_hash h[LEN];
	size_t m, bad = 0;
	int64_t pub = th_stat_get(&A, "tier_remote.published");
	int64_t forged = th_stat_get(&B, "tier_remote.forged");
	int64_t ends;
	int nnew;

	th_chain(&L, seed++, LEN, 0, 0, h);
	CHECK_RC(th_publish(ca, h, LEN, NULL), LEN);
	CHECK(rt_wait_ge(&A, "tier_remote.published", pub + LEN, TH_WAIT_MS));
	m = rt_corrupt(c, &L, h, LEN, BLOCK_BYTES);
	if (!m)
		return;
	CHECK_EQ(th_verify(cb, h, LEN, &bad), (long long)m);
	CHECK_EQ(th_stat_get(&B, "tier_remote.forged"), forged + 1);
	/* B recomputes what it lacks (block m at least: the blocks fetched
	 * past it were verified and kept) and publishes it: the bad value is
	 * replaced */
	ends = rt_publish_ends(&B);
	nnew = th_publish(cb, h, LEN, NULL);
	CHECK_GE(nnew, 1);
	CHECK(rt_wait_publish_ends(&B, ends + nnew, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&B, "tier_remote.repaired"), 1);
	CHECK_EQ(th_verify(cc, h, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	th_note("repair: block %zu changed in Redis, B missed it and republished: "
		"repaired %" PRId64 ", C hits %d of %d", m,
		th_stat_get(&B, "tier_remote.repaired"), LEN, LEN);
}

static void files(rc_cluster *c)
{
	static char shortf[300], openf[300];

	/* too short: refused at start */
	secret_file("short", "0123456789", shortf, sizeof(shortf));
	if (th_daemon_init(&S, TH_ARGS("--host-size", "8M", "--remote", rc_seeds(c),
				       "--remote-secret-file", shortf)) < 0)
		th_fatal("daemon init failed");
	CHECK_RC(th_daemon_start(&S), -ECHILD);
	CHECK_NE(S.last_status, 0);
	CHECK(th_log_contains(&S, "want 16 to 4095 bytes"));
	CHECK(!th_log_contains(&S, "0123456789"));
	/* readable by others: a warning, and it works */
	secret_file("open", SECRET1, openf, sizeof(openf));
	CHECK_EQ(chmod(openf, 0644), 0);
	th_daemon_up(&P, TH_ARGS("--host-size", "8M", "--remote", rc_seeds(c),
				 "--remote-secret-file", openf));
	CHECK(th_log_contains(&P, "readable by others (chmod 600)"));
	CHECK_EQ(th_stat_get(&P, "tier_remote.authenticated"), 1);
	/* none: a warning, the gauge says so */
	th_daemon_up(&N, TH_ARGS("--host-size", "8M", "--remote", rc_seeds(c)));
	CHECK(th_log_contains(&N, "values are checked but not authenticated"));
	CHECK_EQ(th_stat_get(&N, "tier_remote.authenticated"), 0);
	unlink(shortf);
	unlink(openf);
}

int main(void)
{
	static kvs_hash h[LEN];
	const char *tmp = getenv("TMPDIR");
	rc_cluster *c;
	kvs_client *ca, *cb, *cc, *cd;
	size_t bad = 0;
	int ret;

	setenv("TH_TIMEOUT", "180", 0);
	th_init("test_remote_tier_trust");
	c = rt_cluster(&(rc_opts){ .masters = 3 });
	snprintf(sdir, sizeof(sdir), "%s/kvs-trust-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(sdir))
		th_fatal("mkdtemp: %s", strerror(errno));
	secret_file("secret1", SECRET1, secret1, sizeof(secret1));
	secret_file("secret2", SECRET2, secret2, sizeof(secret2));
#define DAEMON(d, ...)                                                       \
	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--page-size", "16K",    \
				 "--remote", rc_seeds(c), __VA_ARGS__))
	DAEMON(A, "--remote-write", "through", "--remote-secret-file", secret1);
	DAEMON(B, "--remote-write", "through", "--remote-secret-file", secret1);
	DAEMON(C, "--remote-secret-file", secret1);
	DAEMON(D, "--remote-write", "through", "--remote-secret-file", secret2);
#undef DAEMON
	L = th_layout("remote-trust", BLOCK_TOKENS);
	ca = th_connect(&A, &L);
	cb = th_connect(&B, &L);
	cc = th_connect(&C, &L);
	cd = th_connect(&D, &L);
	CHECK_EQ(th_stat_get(&A, "tier_remote.authenticated"), 1);
	CHECK(!th_log_contains(&A, "readable by others"));
	CHECK(!th_log_contains(&A, "not authenticated"));

	/* control: the secret shared, the chain shared */
	th_chain(&L, seed++, LEN, 0, 0, h);
	CHECK_RC(th_publish(ca, h, LEN, NULL), LEN);
	CHECK(rt_wait_ge(&A, "tier_remote.published", LEN, TH_WAIT_MS));
	CHECK_EQ(th_verify(cc, h, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);

	forged(c, cc);
	other_secret(cd, cc);
	squat();
	repair(c, ca, cb, cc);
	files(c);
	CHECK(!th_log_contains(&A, SECRET1));
	CHECK(!th_log_contains(&C, SECRET1));
	CHECK(!th_log_contains(&P, SECRET1));

	kvs_close(ca);
	kvs_close(cb);
	kvs_close(cc);
	kvs_close(cd);
	ret = th_finish();
	rc_stop(c);
	unlink(secret1);
	unlink(secret2);
	rmdir(sdir);
	return ret;
}
