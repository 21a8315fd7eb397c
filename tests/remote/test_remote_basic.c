/*
 * test_remote_basic - the remote engine against a real 3-master Redis
 * Cluster: our key slots equal CLUSTER KEYSLOT; SET NX / GET / EXISTS of
 * 1 MiB values (header + payload iovecs) round trip bit exact; a second
 * SET NX is refused; a miss; a value of the wrong size is an error and the
 * connection goes on; the engine's fd drives it from a plain poll() loop;
 * the counters add up.
 */
#include <poll.h>

#include "kvs_remote_value.h"
#include "remote_util.h"

#define NKEYS 24
#define VBYTES (1u << 20)

static void test_keyslot(rc_cluster *c)
{
	static const char alpha[] = "abcdefghijklmnopqrstuvwxyz0123456789{}:";
	int mismatches = 0;

	for (int i = 0; i < 100; i++) {
		char key[40], out[64];
		size_t len = 1 + (size_t)rand() % 30;

		for (size_t k = 0; k < len; k++)
			key[k] = alpha[(size_t)rand() % (sizeof(alpha) - 1)];
		key[len] = '\0';
		if (rc_cli(c, i % 3, out, sizeof(out), "CLUSTER", "KEYSLOT", key,
			   NULL) != 0 ||
		    (unsigned)atoi(out) != kvs_slot_of(key, len)) {
			fprintf(stderr, "keyslot %s: redis %s, ours %u\n", key, out,
				kvs_slot_of(key, len));
			mismatches++;
		}
	}
	CHECK_EQ(mismatches, 0);
}

/* Drive the engine from poll() on its fd until @n completions came. */
static void poll_until(kvs_remote *r, int n, double timeout_s)
{
	double end = ru_now() + timeout_s;

	while (ru_ndone < n && ru_now() < end) {
		struct pollfd p = { .fd = kvs_remote_fd(r), .events = POLLIN };

		poll(&p, 1, 100);
		kvs_remote_poll(r);
	}
	CHECK_EQ(ru_ndone, n);
}

/* The test's state: the cluster, the engine, and the NKEYS values with
 * their headers and keys (8 more keys for the EXISTS batch's absent ones). */
struct basic {
	rc_cluster *c;
	kvs_remote *r;
	kvs_rval_mac *mac;
	uint8_t *val[NKEYS], *got[NKEYS];
	uint8_t hdr[NKEYS][KVS_RVAL_HDR_BYTES], ghdr[NKEYS][KVS_RVAL_HDR_BYTES];
	char keys[NKEYS + 8][32];
	size_t klen[NKEYS + 8];
	const void *kp[NKEYS + 8];
	int eres[NKEYS + 8];
};

/* SET NX of NKEYS values: header iovec + payload iovec, pipelined. */
static void set_nx_values(struct basic *t)
{
	kvs_remote *r = t->r;
	char out[256];

	CHECK_EQ(kvs_rval_mac_create(NULL, 0, &t->mac), 0);
	ru_reset();
	for (int i = 0; i < NKEYS; i++) {
		kvs_rval_info info = { .block_bytes = VBYTES, .ns_fp = 42,
				       .hash = { (uint64_t)i, 7 } };
		struct iovec iov[2];

		t->val[i] = malloc(VBYTES);
		t->got[i] = malloc(VBYTES);
		ru_fill(t->val[i], VBYTES, (uint64_t)i);
		CHECK_EQ(kvs_rval_seal(t->mac, &info, t->val[i], t->hdr[i]), 0);
		t->klen[i] = ru_key(t->keys[i], (uint64_t)i + 1000);
		iov[0] = (struct iovec){ t->hdr[i], KVS_RVAL_HDR_BYTES };
		iov[1] = (struct iovec){ t->val[i], VBYTES };
		CHECK_EQ(kvs_remote_set_nx(r, t->keys[i], t->klen[i], iov, 2,
					   (uint64_t)i), 0);
	}
	poll_until(r, NKEYS, 30);
	for (int i = 0; i < NKEYS; i++)
		CHECK_EQ(ru_done[i].res, 0);
	/* Redis holds header + payload under each key. */
	CHECK_EQ(rc_cli(t->c, 0, out, sizeof(out), "-c", "STRLEN", t->keys[0], NULL), 0);
	CHECK_EQ(atol(out), KVS_RVAL_HDR_BYTES + VBYTES);
}

/* GET them back into other buffers, and verify. */
static void get_and_verify(struct basic *t)
{
	kvs_remote *r = t->r;
	kvs_remote_stats st;

	ru_reset();
	for (int i = 0; i < NKEYS; i++) {
		struct iovec iov[2] = { { t->ghdr[i], KVS_RVAL_HDR_BYTES },
					{ t->got[i], VBYTES } };

		memset(t->got[i], 0, VBYTES);
		CHECK_EQ(kvs_remote_get(r, t->keys[i], t->klen[i], iov, 2, (uint64_t)i), 0);
	}
	CHECK_EQ(kvs_remote_wait(r, 30000), 0);
	for (int i = 0; i < NKEYS; i++) {
		kvs_rval_info want = { .block_bytes = VBYTES, .ns_fp = 42,
				       .hash = { (uint64_t)i, 7 } };

		CHECK_EQ(ru_done[i].res, 0);
		CHECK(!memcmp(t->got[i], t->val[i], VBYTES));
		CHECK_EQ(kvs_rval_verify(t->mac, t->ghdr[i], t->got[i], VBYTES, &want,
					 NULL), 0);
	}
	/* No intermediate copy: of the 1 MiB values, at most the 4 KiB read
	 * with each reply's header went through the engine's buffer. */
	kvs_remote_get_stats(r, &st);
	printf("bytes_in %llu, of which read directly %llu\n",
	       (unsigned long long)st.bytes_in, (unsigned long long)st.bytes_in_direct);
	CHECK_EQ(st.bytes_in, (uint64_t)NKEYS * (VBYTES + KVS_RVAL_HDR_BYTES));
	CHECK(st.bytes_in_direct >= st.bytes_in - (uint64_t)NKEYS * 4096);
}

/* A second SET NX refused, a miss, values of the wrong size: each its own
 * error, and the connection goes on serving. */
static void refused_miss_wrong_sizes(struct basic *t)
{
	kvs_remote *r = t->r;

	/* A second SET NX is refused; the value stays. */
	ru_reset();
	{
		struct iovec iov[2] = { { t->hdr[1], KVS_RVAL_HDR_BYTES },
					{ t->val[1], VBYTES } };

		CHECK_EQ(kvs_remote_set_nx(r, t->keys[0], t->klen[0], iov, 2, 0), 0);
	}
	/* A miss. */
	{
		struct iovec iov[2] = { { t->ghdr[0], KVS_RVAL_HDR_BYTES },
					{ t->got[0], VBYTES } };
		char k[32];
		size_t kl = ru_key(k, 999999);

		CHECK_EQ(kvs_remote_get(r, k, kl, iov, 2, 1), 0);
	}
	/* Wrong sizes, then a right one: a value one byte short is skipped
	 * (-EMSGSIZE); one far longer than the buffers (1 MiB for a header)
	 * is past the GET's reply budget: refused at its header, -EPROTO, its
	 * connection closed; the requests behind it are resent. */
	{
		struct iovec small[2] = { { t->ghdr[2], KVS_RVAL_HDR_BYTES },
					  { t->got[2], VBYTES - 1 } };
		struct iovec big[2] = { { t->ghdr[3], KVS_RVAL_HDR_BYTES },
					{ t->got[3], VBYTES } };
		struct iovec ok[2] = { { t->ghdr[4], KVS_RVAL_HDR_BYTES },
				       { t->got[4], VBYTES } };

		CHECK_EQ(kvs_remote_get(r, t->keys[2], t->klen[2], small, 2, 2), 0);
		/* hdr only */
		CHECK_EQ(kvs_remote_get(r, t->keys[3], t->klen[3], big, 1, 3), 0);
		memset(t->got[4], 0, VBYTES);
		CHECK_EQ(kvs_remote_get(r, t->keys[4], t->klen[4], ok, 2, 4), 0);
	}
	CHECK_EQ(kvs_remote_wait(r, 30000), 0);
	CHECK_EQ(ru_done[0].res, -EEXIST);
	CHECK_EQ(ru_done[1].res, -ENOENT);
	CHECK_EQ(ru_done[2].res, -EMSGSIZE);
	CHECK_EQ(ru_done[3].res, -EPROTO);
	CHECK_EQ(ru_done[4].res, 0);
	CHECK(!memcmp(t->got[4], t->val[4], VBYTES));
	{
		struct iovec iov[2] = { { t->ghdr[0], KVS_RVAL_HDR_BYTES },
					{ t->got[0], VBYTES } };

		ru_reset();
		CHECK_EQ(kvs_remote_get(r, t->keys[0], t->klen[0], iov, 2, 0), 0);
		CHECK_EQ(kvs_remote_wait(r, 30000), 0);
		CHECK_EQ(ru_done[0].res, 0);
		CHECK(!memcmp(t->got[0], t->val[0], VBYTES));
	}
}

/* SET without NX replaces a value (the tier's repair), and never answers
 * -EEXIST; SET NX still refuses after it. */
static void set_replaces(struct basic *t)
{
	kvs_remote *r = t->r;
	struct iovec sv[2] = { { t->hdr[1], KVS_RVAL_HDR_BYTES }, { t->val[1], VBYTES } };
	struct iovec gv[2] = { { t->ghdr[0], KVS_RVAL_HDR_BYTES }, { t->got[0], VBYTES } };

	ru_reset();
	CHECK_EQ(kvs_remote_set(r, t->keys[0], t->klen[0], sv, 2, 0), 0);
	CHECK_EQ(kvs_remote_wait(r, 30000), 0);
	CHECK_EQ(ru_done[0].res, 0);
	ru_reset();
	CHECK_EQ(kvs_remote_get(r, t->keys[0], t->klen[0], gv, 2, 0), 0);
	CHECK_EQ(kvs_remote_wait(r, 30000), 0);
	CHECK_EQ(ru_done[0].res, 0);
	CHECK(!memcmp(t->got[0], t->val[1], VBYTES));
	CHECK(!memcmp(t->ghdr[0], t->hdr[1], KVS_RVAL_HDR_BYTES));
	ru_reset();
	CHECK_EQ(kvs_remote_set_nx(r, t->keys[0], t->klen[0], sv, 2, 0), 0);
	CHECK_EQ(kvs_remote_wait(r, 30000), 0);
	CHECK_EQ(ru_done[0].res, -EEXIST);
}

/* A value written by redis-cli reads back through the engine. */
static void cli_value_reads_back(struct basic *t)
{
	kvs_remote *r = t->r;
	char out[256];

	CHECK_EQ(rc_cli(t->c, 0, out, sizeof(out), "-c", "SET", "plain:hello", "hello",
			NULL), 0);
	{
		char five[5];
		struct iovec iov = { five, 5 };

		ru_reset();
		CHECK_EQ(kvs_remote_get(r, "plain:hello", 11, &iov, 1, 7), 0);
		CHECK_EQ(kvs_remote_wait(r, 10000), 0);
		CHECK_EQ(ru_done[7].res, 0);
		CHECK(!memcmp(five, "hello", 5));
	}
}

/* EXISTS: NKEYS present and 8 absent, one batch. */
static void exists_batch(struct basic *t)
{
	kvs_remote *r = t->r;

	for (int i = 0; i < NKEYS + 8; i++) {
		if (i >= NKEYS)
			t->klen[i] = ru_key(t->keys[i], (uint64_t)i + 5000000);
		t->kp[i] = t->keys[i];
		t->eres[i] = -999;
	}
	ru_reset();
	CHECK_EQ(kvs_remote_exists(r, t->kp, t->klen, NKEYS + 8, t->eres, 9), 0);
	CHECK_EQ(kvs_remote_wait(r, 10000), 0);
	CHECK_EQ(ru_done[9].done, 1);
	CHECK_EQ(ru_done[9].res, NKEYS);
	for (int i = 0; i < NKEYS + 8; i++)
		CHECK_EQ(t->eres[i], i < NKEYS ? 1 : 0);
	CHECK_EQ(ru_ndone, 1);
}

/* Many small requests at once: 2000 SET NX of 4 KiB values split over
 * three iovecs, an EXISTS batch of them all, 2000 GETs. */
static void many_small_requests(kvs_remote *r)
{
	enum { N = 2000, SZ = 4096 };
	static uint8_t sv[N][SZ], gv[N][SZ];
	static char sk[N][32];
	static size_t skl[N];
	static const void *skp[N];
	static int sres[N];
	int bad = 0;

	ru_reset();
	for (int i = 0; i < N; i++) {
		struct iovec iov[3] = { { sv[i], 100 }, { sv[i] + 100, 1000 },
					{ sv[i] + 1100, SZ - 1100 } };

		ru_fill(sv[i], SZ, (uint64_t)i + 77777);
		skl[i] = ru_key(sk[i], (uint64_t)i + 7000000);
		skp[i] = sk[i];
		CHECK_EQ(kvs_remote_set_nx(r, sk[i], skl[i], iov, 3, (uint64_t)i), 0);
	}
	CHECK_EQ(kvs_remote_wait(r, 30000), 0);
	for (int i = 0; i < N; i++)
		bad += ru_done[i].res != 0;
	ru_reset();
	CHECK_EQ(kvs_remote_exists(r, skp, skl, N, sres, 0), 0);
	CHECK_EQ(kvs_remote_wait(r, 30000), 0);
	CHECK_EQ(ru_done[0].res, N);
	ru_reset();
	for (int i = 0; i < N; i++) {
		struct iovec iov = { gv[i], SZ };

		CHECK_EQ(kvs_remote_get(r, sk[i], skl[i], &iov, 1, (uint64_t)i), 0);
	}
	CHECK_EQ(kvs_remote_wait(r, 30000), 0);
	for (int i = 0; i < N; i++)
		bad += ru_done[i].res != 0 || memcmp(gv[i], sv[i], SZ) != 0;
	CHECK_EQ(bad, 0);
}

static void bad_arguments(struct basic *t)
{
	kvs_remote *r = t->r;
	struct iovec iov = { t->got[0], 1 };
	char longkey[KVS_REMOTE_KEY_MAX + 1] = { 0 };

	CHECK_EQ(kvs_remote_get(r, "", 0, &iov, 1, 0), -EINVAL);
	CHECK_EQ(kvs_remote_get(r, longkey, sizeof(longkey), &iov, 1, 0), -EINVAL);
	CHECK_EQ(kvs_remote_get(r, "k", 1, &iov, 0, 0), -EINVAL);
	CHECK_EQ(kvs_remote_exists(r, t->kp, t->klen, 0, t->eres, 0), -EINVAL);
	CHECK_EQ(kvs_remote_set_timeout_ms(r, 5), -EBUSY);
}

/* The counters add up over every step above. */
static void check_stats(kvs_remote *r)
{
	kvs_remote_stats st;
	uint64_t nhist = 0;

	kvs_remote_get_stats(r, &st);
	CHECK_EQ(st.sets, NKEYS + 3 + 2000);
	CHECK_EQ(st.stored, NKEYS + 1 + 2000);
	CHECK_EQ(st.existed, 2);
	CHECK_EQ(st.gets, NKEYS + 7 + 2000);
	CHECK_EQ(st.hits, NKEYS + 4 + 2000);
	CHECK_EQ(st.misses, 1);
	CHECK_EQ(st.err_wrong_size, 1);
	CHECK_EQ(st.err_proto, 1);
	CHECK_EQ(st.exists_keys, NKEYS + 8 + 2000);
	CHECK_EQ(st.bytes_out, (uint64_t)(NKEYS + 1) * (VBYTES + KVS_RVAL_HDR_BYTES) +
			       2000ull * 4096);
	CHECK(st.bytes_in_direct <= st.bytes_in);
	CHECK_EQ(st.inflight_bytes, 0);
	CHECK_EQ(st.err_timeout + st.err_down + st.err_server, 0);
	CHECK_EQ(st.nodes, 3);
	for (int b = 0; b < KVS_REMOTE_LAT_BUCKETS; b++)
		nhist += st.lat_hist[b];
	CHECK_EQ(nhist, st.sets + st.gets + 2); /* + the EXISTS batches */
	CHECK_EQ(kvs_remote_pending(r), 0);
}

int main(void)
{
	static struct basic t;

	srand((unsigned)kvs_test_seed("test_remote_basic"));
	t.c = ru_cluster("test_remote_basic", &(rc_opts){ .masters = 3 });
	test_keyslot(t.c);

	t.r = ru_open(rc_seeds(t.c), 5000);
	CHECK(t.r != NULL);
	if (!t.r)
		goto out;
	CHECK_EQ(kvs_remote_is_cluster(t.r), 1);
	CHECK(kvs_remote_fd(t.r) >= 0);

	set_nx_values(&t);
	get_and_verify(&t);
	refused_miss_wrong_sizes(&t);
	set_replaces(&t);
	cli_value_reads_back(&t);
	exists_batch(&t);
	many_small_requests(t.r);
	bad_arguments(&t);
	check_stats(t.r);

	kvs_remote_close(t.r);
	kvs_rval_mac_free(t.mac);
	for (int i = 0; i < NKEYS; i++) {
		free(t.val[i]);
		free(t.got[i]);
	}
out:
	rc_stop(t.c);
	return check_summary("test_remote_basic");
}
