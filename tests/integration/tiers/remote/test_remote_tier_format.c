/*
 * test_remote_tier_format - the two value formats through real daemons on
 * a private 3-master cluster, and what a writer without the secret or a
 * hostile node can put under a key. O publishes at commit with
 * --remote-mac hmac (version 2), W and R with the default (Poly1305,
 * version 3), R reading first; the three share one 0600 secret file. 16 KiB blocks.
 *  rollout:  O's chain is version 2 in Redis, W's version 3 (read back raw);
 *            R, O and W serve both whole, bytes checked, nothing refused.
 *  refused:  for each kind, a new chain W published, with the value of its
 *            block 4 replaced straight in the cluster: sealed without the
 *            secret; our key id over a tag of no secret; W's header over
 *            other bytes; truncated by 1 KiB; relabelled version 2; the
 *            value of block 5 moved under block 4's key, as it is and with
 *            its hash rewritten to 4's; random bytes of the right length.
 *            R's lookup is exactly blocks 0-3, every byte checked, and the
 *            kind's counter (tier_remote.forged or .corrupt) +1, the other
 *            unchanged; the value is then replaced by W's next publish of
 *            the block (R, which missed it, recomputes it: repaired), and
 *            O's lookup is whole.
 * Skips (77) without redis-server.
 */
#include "remote_tier_util.h"

#include <fcntl.h>
#include <inttypes.h>
#include <unistd.h>

#include "kvs_le.h"
#include "kvs_remote.h"

#define BLOCK_TOKENS 16 /* 16 KiB blocks */
#define BLOCK_BYTES (BLOCK_TOKENS * 1024)
#define VAL_BYTES (KVS_RVAL_HDR_BYTES + BLOCK_BYTES)
#define LEN 8
#define AT 4 /* the block replaced */

static th_daemon O, W, R;
static kvs_layout L;
static uint64_t seed = 9100;
static char sdir[256], secret[300];
static const char SECRET[] = "9a8b7c6d5e4f30211f2e3d4c5b6a79880123456789abcdef";
static kvs_remote *raw;
static int raw_res;
static uint64_t ours_id; /* the secret's key id */

static void raw_done(void *arg, const kvs_remote_cqe *q)
{
	(void)arg;
	raw_res = q->res;
}

/* GET the value of block @h into @val[VAL_BYTES]: 0 or the error. */
static int raw_get(kvs_hash h, uint8_t *val)
{
	uint8_t key[KVS_RVAL_KEY_BYTES];
	struct iovec iov = { val, VAL_BYTES };

	kvs_rval_key(key, rt_fp(&L), h);
	raw_res = 1;
	if (!CHECK_EQ(kvs_remote_get(raw, key, sizeof(key), &iov, 1, 0), 0) ||
	    !CHECK_EQ(kvs_remote_wait(raw, 10000), 0))
		return -EIO;
	return raw_res;
}

/* SET the value of block @h to @val[@len]. */
static void raw_set(kvs_hash h, const uint8_t *val, size_t len)
{
	uint8_t key[KVS_RVAL_KEY_BYTES];
	struct iovec iov = { (void *)val, len };

	kvs_rval_key(key, rt_fp(&L), h);
	raw_res = 1;
	CHECK_EQ(kvs_remote_set(raw, key, sizeof(key), &iov, 1, 0), 0);
	CHECK_EQ(kvs_remote_wait(raw, 10000), 0);
	CHECK_EQ(raw_res, 0);
}

/* Publish chain @h through @d's client @c and wait for its SETs. */
static void publish(th_daemon *d, kvs_client *c, const kvs_hash *h)
{
	int64_t pub = th_stat_get(d, "tier_remote.published");

	CHECK_RC(th_publish(c, h, LEN, NULL), LEN);
	CHECK(rt_wait_ge(d, "tier_remote.published", pub + LEN, TH_WAIT_MS));
}

static void rollout(kvs_client *co, kvs_client *cw, kvs_client *cr)
{
	static kvs_hash ho[LEN], hw[LEN];
	static uint8_t val[VAL_BYTES];
	kvs_client *readers[] = { cr, co, cw };
	size_t bad = 0;

	th_chain(&L, seed++, LEN, 0, 0, ho);
	th_chain(&L, seed++, LEN, 0, 0, hw);
	publish(&O, co, ho);
	publish(&W, cw, hw);
	for (int i = 0; i < LEN; i++) {
		CHECK_EQ(raw_get(ho[i], val), 0);
		CHECK_EQ(get16(val + 4), KVS_RVAL_V_HMAC);
		CHECK_EQ(raw_get(hw[i], val), 0);
		CHECK_EQ(get16(val + 4), KVS_RVAL_V_POLY1305);
	}
	/* each reads the other's: O and W hold their own chain locally */
	CHECK_EQ(th_verify(cr, ho, LEN, &bad), LEN);
	CHECK_EQ(th_verify(cr, hw, LEN, &bad), LEN);
	CHECK_EQ(th_verify(co, hw, LEN, &bad), LEN);
	CHECK_EQ(th_verify(cw, ho, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	for (size_t i = 0; i < sizeof(readers) / sizeof(readers[0]); i++) {
		th_daemon *d = i == 0 ? &R : i == 1 ? &O : &W;

		CHECK_EQ(th_stat_get(d, "tier_remote.forged"), 0);
		CHECK_EQ(th_stat_get(d, "tier_remote.corrupt"), 0);
	}
	CHECK(th_log_contains(&O, "HMAC-SHA-256)"));
	CHECK(th_log_contains(&W, "Poly1305)"));
	th_note("rollout: version 2 (O) and 3 (W) chains of %d, each served whole "
		"by R, O and W", LEN);
}

enum kind { NOSECRET, KEYID, PAYLOAD, TRUNCATED, RELABEL, MOVED, MOVED_HDR, GARBAGE, KINDS };
static const char *const kind_name[KINDS] = {
	"sealed without the secret", "our key id, no secret's tag", "our header, other bytes",
	"truncated by 1 KiB", "relabelled version 2", "block 5's value as it is",
	"block 5's value, hash rewritten", "random bytes" };

/* The bad value of kind @k for block @h[AT] into @val; its length. */
static size_t make_bad(enum kind k, const kvs_hash *h, uint8_t *val)
{
	kvs_rval_info info = { .block_bytes = BLOCK_BYTES, .ns_fp = rt_fp(&L),
			       .hash = h[AT], .parent = h[AT - 1] };
	kvs_rval_mac *none;

	CHECK_EQ(raw_get(h[k == MOVED || k == MOVED_HDR ? AT + 1 : AT], val), 0);
	switch (k) {
	case NOSECRET:
	case KEYID:
		CHECK_EQ(kvs_rval_mac_create(NULL, 0, &none), 0);
		th_pattern_fill(val + KVS_RVAL_HDR_BYTES, BLOCK_BYTES, h[AT], 99);
		CHECK_EQ(kvs_rval_seal(none, &info, val + KVS_RVAL_HDR_BYTES, val), 0);
		kvs_rval_mac_free(none);
		if (k == KEYID) /* any of our values shows it in clear */
			put64(val + 56, ours_id);
		break;
	case PAYLOAD:
		th_pattern_fill(val + KVS_RVAL_HDR_BYTES, BLOCK_BYTES, h[AT], 99);
		break;
	case TRUNCATED:
		return VAL_BYTES - 1024;
	case RELABEL:
		put16(val + 4, KVS_RVAL_V_HMAC);
		break;
	case MOVED:
		break;
	case MOVED_HDR:
		puth(val + 24, h[AT]);
		break;
	case GARBAGE:
		for (size_t i = 0; i < VAL_BYTES; i++)
			val[i] = (uint8_t)rand();
		break;
	default:
		break;
	}
	return VAL_BYTES;
}

/* Kind @k at block AT of a new chain: refused with its counter, never a
 * wrong byte; then repaired by W's publish. */
static void refused(enum kind k, kvs_client *cw, kvs_client *cr, kvs_client *co)
{
	static kvs_hash h[LEN];
	static uint8_t val[VAL_BYTES];
	const char *counter = k == NOSECRET || k == KEYID || k == PAYLOAD || k == RELABEL ||
			      k == MOVED_HDR ? "tier_remote.forged" : "tier_remote.corrupt";
	const char *other = counter[12] == 'f' ? "tier_remote.corrupt" : "tier_remote.forged";
	int64_t n = th_stat_get(&R, counter), o = th_stat_get(&R, other);
	int64_t rep = th_stat_get(&R, "tier_remote.repaired"), ends;
	size_t bad = 0, len;
	int nnew;

	th_chain(&L, seed++, LEN, 0, 0, h);
	publish(&W, cw, h);
	len = make_bad(k, h, val);
	raw_set(h[AT], val, len);
	CHECK_EQ(th_verify(cr, h, LEN, &bad), AT);
	CHECK_EQ(bad, 0);
	CHECK_EQ(th_stat_get(&R, counter), n + 1);
	CHECK_EQ(th_stat_get(&R, other), o);
	/* R publishes what it lacks (it recomputed it): the value it refused
	 * is replaced; O then hits the chain whole */
	ends = rt_publish_ends(&R);
	nnew = th_publish(cr, h, LEN, NULL);
	CHECK_GE(nnew, 1); /* block AT at least: those past it may have come */
	CHECK(rt_wait_publish_ends(&R, ends + nnew, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&R, "tier_remote.repaired"), rep + 1);
	CHECK_EQ(raw_get(h[AT], val), 0);
	CHECK_EQ(get16(val + 4), KVS_RVAL_V_POLY1305);
	CHECK_EQ(th_verify(co, h, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	th_note("refused: %s: R serves blocks 0-%d of %d, %s +1, then repaired", kind_name[k],
		AT - 1, LEN, counter);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	kvs_client *co, *cw, *cr;
	kvs_rval_mac *ours;
	rc_cluster *c;
	int ret, fd;

	setenv("TH_TIMEOUT", "180", 0);
	th_init("test_remote_tier_format");
	c = rt_cluster(&(rc_opts){ .masters = 3 });
	srand((unsigned)th_now_ms()); /* the garbage: any bytes do */
	snprintf(sdir, sizeof(sdir), "%s/kvs-format-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(sdir))
		th_fatal("mkdtemp: %s", strerror(errno));
	snprintf(secret, sizeof(secret), "%s/secret", sdir);
	fd = open(secret, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || dprintf(fd, "%s\n", SECRET) < 0)
		th_fatal("%s: %s", secret, strerror(errno));
	close(fd);
	CHECK_EQ(kvs_rval_mac_create(SECRET, strlen(SECRET), &ours), 0);
	ours_id = kvs_rval_mac_id(ours);
	kvs_rval_mac_free(ours);
#define DAEMON(d, ...)                                                       \
	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--page-size", "16K",    \
				 "--remote", rc_seeds(c), "--remote-write", "through", \
				 "--remote-secret-file", secret, "--log-level", "info", \
				 __VA_ARGS__))
	DAEMON(O, "--remote-mac", "hmac");
	DAEMON(W, "--remote-timeout", "1000"); /* the default MAC */
	DAEMON(R, "--remote-mac", "poly1305");
#undef DAEMON
	L = th_layout("remote-format", BLOCK_TOKENS);
	co = th_connect(&O, &L);
	cw = th_connect(&W, &L);
	cr = th_connect(&R, &L);
	CHECK_EQ(kvs_remote_create(&raw), 0);
	CHECK_EQ(kvs_remote_set_seeds(raw, rc_seeds(c)), 0);
	kvs_remote_set_callback(raw, raw_done, NULL);
	if (kvs_remote_open(raw) < 0)
		th_fatal("cannot open the cluster");

	rollout(co, cw, cr);
	for (int k = 0; k < KINDS; k++)
		refused((enum kind)k, cw, cr, co);
	CHECK(!th_log_contains(&R, SECRET));

	kvs_remote_close(raw);
	kvs_close(co);
	kvs_close(cw);
	kvs_close(cr);
	ret = th_finish();
	rc_stop(c);
	unlink(secret);
	rmdir(sdir);
	return ret;
}
