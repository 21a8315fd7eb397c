/*
 * test_remote_tier_verify - the values' MAC runs on the remote tier's
 * workers, off the loop, and still decides what is
 * served. A private 3-master cluster; A publishes at commit, C only reads,
 * both with the same --remote-secret-file. 256 KiB blocks, chains of 32:
 * a lookup's window asks about all 32 at once, so their 32 GETs and 32
 * verifies are in flight together.
 *  many:  in each of 4 chains A published, one value is replaced in Redis
 *         by a forgery (header fields right, sealed with no secret, other
 *         bytes), at position 5, 12, 20, 29. C's lookup of each hits
 *         exactly the blocks before it, every hit's bytes checked; each
 *         forgery counted once in tier_remote.forged; every value fetched
 *         verified by the workers (tier_remote.macs). A tier that served a
 *         block before its verify returned would hit all 32, forged bytes
 *         among them.
 *  gone:  a raw client asks C for a chain of 64 (not fetched before) and
 *         closes its connection while the verifies are under way (seen in
 *         tier_remote.macs or mac_queued first, where the machine is slow
 *         enough to see it); then nothing is left behind: no MAC job,
 *         lease, pin or uncommitted slot, every host slot a block's; and a
 *         new client's lookup hits the whole chain, its bytes right.
 * Skips (77) without redis-server.
 */
#include "remote_tier_util.h"
#include "harness_raw.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvs_remote.h"
#include "kvs_wire.h"

#define BLOCK_TOKENS 256 /* 256 KiB blocks */
#define BLOCK_BYTES (BLOCK_TOKENS * 1024)
#define LEN 32
#define CHAINS 4
#define GONE_LEN 64 /* one window (a gone lookup asks no next one), 16 MiB */

static th_daemon A, C;
static kvs_layout L;
static uint64_t seed = 9100;
static char sdir[256], secret[300];
static const char SECRET[] = "9d2c4e6f8a0b1c3d5e7f9a1b3c5d7e9f0a2b4c6d8e";

static int forger_res;

static void forger_done(void *arg, const kvs_remote_cqe *q)
{
	(void)arg;
	if (q->res < 0)
		forger_res = q->res;
}

/* Replace block @h[@i]'s value with a forgery: the right header fields,
 * sealed with the unauthenticated key, a payload of other bytes. */
static void forge(kvs_remote *r, const kvs_rval_mac *none, const kvs_hash *h, int i)
{
	static uint8_t payload[BLOCK_BYTES];
	uint8_t hdr[KVS_RVAL_HDR_BYTES], key[KVS_RVAL_KEY_BYTES];
	kvs_rval_info info = { .block_bytes = BLOCK_BYTES, .ns_fp = rt_fp(&L),
			       .hash = h[i], .parent = i ? h[i - 1] : (kvs_hash){ 0, 0 } };
	struct iovec iov[2] = { { hdr, KVS_RVAL_HDR_BYTES }, { payload, BLOCK_BYTES } };

	th_pattern_fill(payload, BLOCK_BYTES, h[i], 77); /* not the block's */
	CHECK_EQ(kvs_rval_seal(none, &info, payload, hdr), 0);
	kvs_rval_key(key, info.ns_fp, h[i]);
	forger_res = 0;
	CHECK_EQ(kvs_remote_set(r, key, sizeof(key), iov, 2, 0), 0);
	CHECK_EQ(kvs_remote_wait(r, 10000), 0);
	CHECK_EQ(forger_res, 0);
}

static void many(rc_cluster *c, kvs_client *ca, kvs_client *cc)
{
	static kvs_hash h[CHAINS][LEN];
	static const int at[CHAINS] = { 5, 12, 20, 29 };
	int64_t pub = th_stat_get(&A, "tier_remote.published");
	int64_t forged = th_stat_get(&C, "tier_remote.forged");
	int64_t macs = th_stat_get(&C, "tier_remote.macs");
	int64_t gets = th_stat_get(&C, "tier_remote.hits") + forged;
	kvs_rval_mac *none;
	kvs_remote *r;

	for (int k = 0; k < CHAINS; k++) {
		th_chain(&L, seed++, LEN, 0, 0, h[k]);
		CHECK_RC(th_publish(ca, h[k], LEN, NULL), LEN);
	}
	CHECK(rt_wait_ge(&A, "tier_remote.published", pub + CHAINS * LEN, TH_WAIT_MS));
	CHECK_EQ(kvs_rval_mac_create(NULL, 0, &none), 0);
	CHECK_EQ(kvs_remote_create(&r), 0);
	CHECK_EQ(kvs_remote_set_seeds(r, rc_seeds(c)), 0);
	kvs_remote_set_callback(r, forger_done, NULL);
	if (kvs_remote_open(r) < 0)
		th_fatal("forger: cannot open the cluster");
	for (int k = 0; k < CHAINS; k++)
		forge(r, none, h[k], at[k]);
	kvs_remote_close(r);
	kvs_rval_mac_free(none);

	for (int k = 0; k < CHAINS; k++) {
		size_t bad = 0;

		CHECK_EQ(th_verify(cc, h[k], LEN, &bad), at[k]);
		CHECK_EQ(bad, 0);
		CHECK_EQ(th_stat_get(&C, "tier_remote.forged"), forged + k + 1);
	}
	/* every value that came was verified by the workers: the hits and
	 * the forgeries (none failed otherwise) */
	CHECK_EQ(th_stat_get(&C, "tier_remote.macs") - macs,
		 th_stat_get(&C, "tier_remote.hits") + th_stat_get(&C, "tier_remote.forged") -
			 gets);
	CHECK_EQ(th_stat_get(&C, "tier_remote.mac_queued"), 0);
	th_note("many: %d chains of %d, a forgery in each: C hits up to it, %" PRId64
		" values verified off the loop", CHAINS, LEN,
		th_stat_get(&C, "tier_remote.macs") - macs);
}

/* Nothing a lookup held is left: no MAC job, lease, pin or reserved slot;
 * every host slot in use holds a block. */
static void nothing_left(th_daemon *d)
{
	CHECK(th_wait_stat(d, "tier_remote.mac_queued", 0, TH_WAIT_MS));
	CHECK(th_wait_stat(d, "leases.active", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(d, "leases.pinned_blocks"), 0);
	CHECK(th_wait_stat(d, "tier_host.blocks_writing", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(d, "tier_remote.pinned_bytes"), 0);
	CHECK_EQ(th_stat_get(d, "tier_host.slots_used"), th_stat_get(d, "tier_host.blocks"));
}

static void gone(kvs_client *ca, kvs_client *cc)
{
	static kvs_hash h[GONE_LEN];
	size_t cap = 8 + (size_t)GONE_LEN * KVS_WIRE_HASH_SIZE, bad = 0;
	uint8_t *buf = malloc(cap);
	int64_t pub = th_stat_get(&A, "tier_remote.published");
	int64_t macs = th_stat_get(&C, "tier_remote.macs");
	int64_t end, seen = 0, queued = 0;
	int64_t hits = th_stat_get(&C, "tier_remote.hits");
	int fd, len;

	th_chain(&L, seed++, GONE_LEN, 0, 0, h);
	CHECK_RC(th_publish(ca, h, GONE_LEN, NULL), GONE_LEN);
	CHECK(rt_wait_ge(&A, "tier_remote.published", pub + GONE_LEN, TH_WAIT_MS));
	fd = th_raw_connect(&C);
	CHECK_GE(fd, 0);
	CHECK_EQ(th_raw_hello(fd, &L, 1), 0);
	len = kvs_wire_hashes_encode(h, GONE_LEN, 0, buf, cap);
	CHECK_GE(len, 0);
	CHECK_RC(th_raw_request(fd, KVS_OP_LOOKUP, 2, buf, (size_t)len), 0);
	/* gone while its verifies are under way: once the first is done (a
	 * fast machine may finish them all before a stats call returns) */
	for (end = th_now_ms() + TH_WAIT_MS; th_now_ms() < end; th_poll_pause()) {
		seen = th_stat_get(&C, "tier_remote.macs") - macs;
		queued = th_stat_get(&C, "tier_remote.mac_queued");
		if (seen > 0 || queued > 0)
			break;
	}
	close(fd);
	free(buf);
	/* its fetches go on to their end (kept: fetched, verified) */
	CHECK(rt_wait_ge(&C, "tier_remote.hits", hits + GONE_LEN, TH_WAIT_MS));
	nothing_left(&C);
	th_note("gone: the client left after %" PRId64 " of %d verifies (%" PRId64
		" at the workers), %" PRId64 " at the end", seen, GONE_LEN, queued,
		th_stat_get(&C, "tier_remote.macs") - macs);
	/* the chain is there for the next client, whole and right */
	CHECK_EQ(th_verify(cc, h, GONE_LEN, &bad), GONE_LEN);
	CHECK_EQ(bad, 0);
	nothing_left(&C);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	rc_cluster *c;
	kvs_client *ca, *cc;
	int ret, fd;

	setenv("TH_TIMEOUT", "180", 0);
	th_init("test_remote_tier_verify");
	c = rt_cluster(&(rc_opts){ .masters = 3 });
	snprintf(sdir, sizeof(sdir), "%s/kvs-verify-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(sdir))
		th_fatal("mkdtemp: %s", strerror(errno));
	snprintf(secret, sizeof(secret), "%s/secret", sdir);
	fd = open(secret, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || dprintf(fd, "%s\n", SECRET) < 0)
		th_fatal("%s: %s", secret, strerror(errno));
	close(fd);
	th_daemon_up(&A, TH_ARGS("--host-size", "128M", "--page-size", "256K",
				 "--remote", rc_seeds(c), "--remote-write", "through",
				 "--remote-secret-file", secret));
	th_daemon_up(&C, TH_ARGS("--host-size", "128M", "--page-size", "256K",
				 "--remote", rc_seeds(c), "--remote-secret-file", secret));
	L = th_layout("remote-verify", BLOCK_TOKENS);
	ca = th_connect(&A, &L);
	cc = th_connect(&C, &L);

	many(c, ca, cc);
	gone(ca, cc);

	kvs_close(ca);
	kvs_close(cc);
	ret = th_finish();
	rc_stop(c);
	unlink(secret);
	rmdir(sdir);
	return ret;
}
