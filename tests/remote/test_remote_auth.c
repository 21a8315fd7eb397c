/*
 * test_remote_auth - one plain Redis node (cluster support disabled) with an
 * ACL user: the engine detects the single node (every slot is its), AUTHs
 * with user and password on every connection, and serves; a wrong password
 * or none fails open with -EACCES; the in-flight cap holds requests back
 * without losing any.
 */
#include "remote_util.h"

#define NKEYS 16
#define VBYTES (256u << 10)

static kvs_remote *open_auth(const char *seeds, const char *user, const char *pw,
			     int *rc)
{
	kvs_remote *r;

	*rc = kvs_remote_create(&r);
	if (*rc < 0)
		return NULL;
	kvs_remote_set_seeds(r, seeds);
	kvs_remote_set_callback(r, ru_cb, NULL);
	if (pw)
		kvs_remote_set_auth(r, user, pw);
	/* small pool and cap: requests queue in the engine */
	kvs_remote_set_pool(r, 1);
	kvs_remote_set_max_inflight(r, 3 * VBYTES);
	*rc = kvs_remote_open(r);
	if (*rc < 0) {
		kvs_remote_close(r);
		return NULL;
	}
	return r;
}

int main(void)
{
	rc_cluster *c;
	kvs_remote *r;
	kvs_remote_stats st;
	char out[256], keys[NKEYS][32];
	size_t klen[NKEYS];
	static uint8_t val[NKEYS][VBYTES], got[NKEYS][VBYTES];
	int rc;

	c = ru_cluster("test_remote_auth", &(rc_opts){ .masters = 1, .plain = 1 });
	CHECK_EQ(rc_cli(c, 0, out, sizeof(out), "ACL", "SETUSER", "kvs", "on",
			">s3cret pass", "~kvs1:*", "+get", "+set", "+exists",
			"+cluster|slots", NULL), 0);
	CHECK(!strcmp(out, "OK"));
	CHECK_EQ(rc_cli(c, 0, out, sizeof(out), "ACL", "SETUSER", "default", "off",
			NULL), 0);

	/* No AUTH, a wrong password, an unknown user: refused at open. */
	CHECK(open_auth(rc_seeds(c), NULL, NULL, &rc) == NULL);
	CHECK_EQ(rc, -EACCES);
	CHECK(open_auth(rc_seeds(c), "kvs", "wrong", &rc) == NULL);
	CHECK_EQ(rc, -EACCES);
	CHECK(open_auth(rc_seeds(c), "nobody", "s3cret pass", &rc) == NULL);
	CHECK_EQ(rc, -EACCES);

	r = open_auth(rc_seeds(c), "kvs", "s3cret pass", &rc);
	CHECK_EQ(rc, 0);
	if (!r)
		goto out;
	CHECK_EQ(kvs_remote_is_cluster(r), 0);

	ru_reset();
	for (int i = 0; i < NKEYS; i++) {
		struct iovec iov = { val[i], VBYTES };

		ru_fill(val[i], VBYTES, (uint64_t)i + 77);
		klen[i] = ru_key(keys[i], (uint64_t)i);
		CHECK_EQ(kvs_remote_set_nx(r, keys[i], klen[i], &iov, 1, (uint64_t)i), 0);
	}
	kvs_remote_get_stats(r, &st);
	CHECK(st.waiting > 0);            /* the cap holds some back */
	CHECK(st.inflight_bytes <= 3 * VBYTES);
	CHECK_EQ(kvs_remote_wait(r, 10000), 0);
	for (int i = 0; i < NKEYS; i++)
		CHECK_EQ(ru_done[i].res, 0);
	ru_reset();
	for (int i = 0; i < NKEYS; i++) {
		struct iovec iov = { got[i], VBYTES };

		CHECK_EQ(kvs_remote_get(r, keys[i], klen[i], &iov, 1, (uint64_t)i), 0);
	}
	CHECK_EQ(kvs_remote_wait(r, 10000), 0);
	for (int i = 0; i < NKEYS; i++) {
		CHECK_EQ(ru_done[i].res, 0);
		CHECK(!memcmp(got[i], val[i], VBYTES));
	}
	/* A key outside the user's pattern: NOPERM, an auth error. */
	{
		struct iovec iov = { got[0], VBYTES };

		ru_reset();
		CHECK_EQ(kvs_remote_get(r, "other:key", 9, &iov, 1, 0), 0);
		CHECK_EQ(kvs_remote_wait(r, 10000), 0);
		CHECK_EQ(ru_done[0].res, -EACCES);
	}
	kvs_remote_get_stats(r, &st);
	CHECK_EQ(st.hits, NKEYS);
	CHECK_EQ(st.stored, NKEYS);
	CHECK_EQ(st.err_auth, 1);
	CHECK_EQ(st.waiting, 0);
	CHECK_EQ(st.inflight_bytes, 0);
	CHECK_EQ(st.map_refreshes, 0);
	kvs_remote_close(r);
out:
	rc_stop(c);
	return check_summary("test_remote_auth");
}
