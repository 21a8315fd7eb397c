/*
 * test_remote_reshard - slots move while the engine is serving, and nothing
 * is lost:
 *  1. one slot migrated by hand (CLUSTER SETSLOT IMPORTING/MIGRATING,
 *     MIGRATE of some of its keys, then SETSLOT NODE): GETs of migrated
 *     keys go through ASK, a SET NX of a new key in that slot too, and after
 *     the move MOVED updates the map once;
 *  2. `redis-cli --cluster reshard` of 500 slots in a child process while
 *     the engine GETs every key and SETs new ones in a loop: every GET
 *     returns the exact bytes, every SET stores.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "remote_util.h"

#define SAME 6      /* keys in the hand-migrated slot */
#define OTHERS 600  /* keys anywhere */
#define NEW_MAX 400 /* keys SET during the reshard */
#define VBYTES (16u << 10)

static char keys[SAME + OTHERS + NEW_MAX][32];
static size_t klen[SAME + OTHERS + NEW_MAX];
static uint64_t knum[SAME + OTHERS + NEW_MAX];
static uint8_t *val[SAME + OTHERS + NEW_MAX];
static int nkeys;

/* Node index (port order) and id owning @slot, from CLUSTER NODES. */
static int owner(rc_cluster *c, unsigned slot, char *id)
{
	static int owners[KVS_SLOTS];
	char ids[RC_MAX_NODES][64];

	if (ru_owners(c, 0, owners, ids) < 0 || owners[slot] < 0)
		return -1;
	snprintf(id, 64, "%s", ids[owners[slot]]);
	return owners[slot];
}

static void myid(rc_cluster *c, int i, char *id)
{
	rc_cli(c, i, id, 64, "CLUSTER", "MYID", NULL);
}

/* GET every key; returns how many failed or differed. */
static int get_all(kvs_remote *r, uint8_t *buf)
{
	int bad = 0;

	ru_reset();
	for (int i = 0; i < nkeys; i++) {
		struct iovec iov = { buf + (size_t)i * VBYTES, VBYTES };

		memset(iov.iov_base, 0, VBYTES);
		if (kvs_remote_get(r, keys[i], klen[i], &iov, 1, (uint64_t)i) < 0)
			bad++;
	}
	if (kvs_remote_wait(r, 30000) < 0)
		return -1;
	for (int i = 0; i < nkeys; i++)
		if (ru_done[i].res != 0 ||
		    memcmp(buf + (size_t)i * VBYTES, val[i], VBYTES) != 0) {
			if (bad < 5)
				fprintf(stderr, "get %s: %d\n", keys[i], ru_done[i].res);
			bad++;
		}
	return bad;
}

/* Add key number @k with its value and SET NX it; returns the result. */
static int add_key(kvs_remote *r, uint64_t k)
{
	struct iovec iov;
	int i = nkeys++;

	knum[i] = k;
	klen[i] = ru_key(keys[i], k);
	val[i] = malloc(VBYTES);
	ru_fill(val[i], VBYTES, k);
	iov = (struct iovec){ val[i], VBYTES };
	ru_reset();
	if (kvs_remote_set_nx(r, keys[i], klen[i], &iov, 1, 0) < 0 ||
	    kvs_remote_wait(r, 10000) < 0)
		return -1;
	return ru_done[0].res;
}

/* The test's state: the cluster, the engine, a buffer for every value;
 * the hand-migrated slot, its owner a, the node b it goes to, the third
 * node (c's index cidx), their ids and b's port; the last key number. */
struct reshard {
	rc_cluster *c;
	kvs_remote *r;
	uint8_t *buf;
	unsigned slot;
	int a, b, cidx;
	char ida[64], idb[64], idc[64], pb[16];
	uint64_t k;
};

/* SAME keys in one slot, OTHERS anywhere (SAME..: numbers from 1e6). */
static void add_first_keys(struct reshard *s)
{
	int stored = 0;

	klen[0] = ru_key(keys[0], 1);
	s->slot = kvs_slot_of(keys[0], klen[0]);
	for (s->k = 1; nkeys < SAME; s->k++) {
		char kb[32];
		size_t kl = ru_key(kb, s->k);

		if (kvs_slot_of(kb, kl) == s->slot)
			stored += add_key(s->r, s->k) == 0;
	}
	for (s->k = 1000000; nkeys < SAME + OTHERS; s->k++)
		stored += add_key(s->r, s->k) == 0;
	CHECK_EQ(stored, SAME + OTHERS);
}

/* 1. Slot @slot from a to b by hand: ASK while it migrates, MOVED once
 * after. */
static void migrate_slot_by_hand(struct reshard *s)
{
	rc_cluster *c = s->c;
	kvs_remote *r = s->r;
	kvs_remote_stats st, st2;
	char sl[16], out[512];
	uint64_t k;

	snprintf(sl, sizeof(sl), "%u", s->slot);
	CHECK_EQ(rc_cli(c, s->b, out, sizeof(out), "CLUSTER", "SETSLOT", sl,
			"IMPORTING", s->ida, NULL), 0);
	CHECK_EQ(rc_cli(c, s->a, out, sizeof(out), "CLUSTER", "SETSLOT", sl,
			"MIGRATING", s->idb, NULL), 0);
	CHECK_EQ(get_all(r, s->buf), 0);
	CHECK_EQ(rc_cli(c, s->a, out, sizeof(out), "MIGRATE", "127.0.0.1", s->pb, "",
			"0", "5000", "KEYS", keys[0], keys[1], keys[2], NULL), 0);
	CHECK(!strcmp(out, "OK"));
	kvs_remote_get_stats(r, &st);
	CHECK_EQ(get_all(r, s->buf), 0);
	kvs_remote_get_stats(r, &st2);
	CHECK_EQ(st2.ask - st.ask, 3); /* the three migrated keys */
	/* a new key of the slot, stored through ASK on b */
	for (k = s->k + 1;; k++) {
		char kb[32];
		size_t kl = ru_key(kb, k);

		if (kvs_slot_of(kb, kl) == s->slot)
			break;
	}
	s->k = k;
	CHECK_EQ(add_key(r, k), 0);
	CHECK_EQ(rc_cli(c, s->a, out, sizeof(out), "MIGRATE", "127.0.0.1", s->pb, "",
			"0", "5000", "KEYS", keys[3], keys[4], keys[5], NULL), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(rc_cli(c, i, out, sizeof(out), "CLUSTER", "SETSLOT", sl,
				"NODE", s->idb, NULL), 0);
	kvs_remote_get_stats(r, &st);
	CHECK_EQ(get_all(r, s->buf), 0);
	kvs_remote_get_stats(r, &st2);
	/* the slot's 7 GETs were all sent to a at once: 7 MOVED; the
	 * map learnt from the first, so the next round has none */
	CHECK_EQ(st2.moved - st.moved, SAME + 1);
	CHECK_EQ(get_all(r, s->buf), 0);
	kvs_remote_get_stats(r, &st);
	CHECK_EQ(st.moved, st2.moved);
	CHECK(owner(c, s->slot, s->ida) == s->b);
}

/* A child running `redis-cli --cluster reshard` of 500 slots, c -> b. */
static pid_t start_reshard(struct reshard *s)
{
	pid_t child = fork();

	if (child == 0) {
		char addr[32];
		const char *argv[] = { "--cluster", "reshard", addr, "--cluster-from",
				       s->idc, "--cluster-to", s->idb, "--cluster-slots",
				       "500", "--cluster-yes" };
		static char log[65536];
		int rc;

		snprintf(addr, sizeof(addr), "127.0.0.1:%d", rc_port(s->c, 0));
		rc_set_cli_timeout(s->c, 200);
		rc = rc_cli_argv(s->c, 0, log, sizeof(log), 10, argv);
		if (rc != 0) /* the end of its output says why */
			fprintf(stderr, "reshard: exit %d\n...%s\n", rc,
				log + (strlen(log) > 4000 ? strlen(log) - 4000 : 0));
		_exit(rc == 0 ? 0 : 1);
	}
	return child;
}

/* 2. The reshard under traffic: every GET exact, every SET stored. */
static void reshard_under_traffic(struct reshard *s)
{
	kvs_remote *r = s->r;
	kvs_remote_stats st;
	int rounds = 0, bad = 0;
	pid_t child;

	myid(s->c, s->cidx, s->idc);
	child = start_reshard(s);
	CHECK(child > 0);
	{
		double end = ru_now() + 240;
		int status = 0, done = 0;

		s->k = 2000000;
		while (!done && ru_now() < end) {
			done = waitpid(child, &status, WNOHANG) == child;
			bad += get_all(r, s->buf) != 0;
			if (nkeys < SAME + OTHERS + NEW_MAX)
				bad += add_key(r, s->k++) != 0;
			rounds++;
		}
		if (!done) {
			kill(child, SIGKILL);
			waitpid(child, &status, 0);
		}
		CHECK(done);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	CHECK_EQ(bad, 0);
	CHECK(rounds >= 1);
	CHECK_EQ(get_all(r, s->buf), 0);
	kvs_remote_get_stats(r, &st);
	printf("test_remote_reshard: %d rounds during the reshard; moved %llu, ask %llu, "
	       "refreshes %llu, keys %d\n", rounds, (unsigned long long)st.moved,
	       (unsigned long long)st.ask, (unsigned long long)st.map_refreshes, nkeys);
	CHECK_EQ(st.err_timeout + st.err_down + st.err_proto + st.err_server +
			 st.err_redirect + st.err_clusterdown,
		 0);
}

int main(void)
{
	struct reshard s = { 0 };

	s.buf = malloc((size_t)(SAME + OTHERS + NEW_MAX) * VBYTES);
	s.c = ru_cluster("test_remote_reshard", &(rc_opts){ .masters = 3 });
	s.r = ru_open(rc_seeds(s.c), 10000);
	CHECK(s.r != NULL);
	if (!s.r)
		goto out;

	add_first_keys(&s);
	s.a = owner(s.c, s.slot, s.ida);
	CHECK(s.a >= 0);
	if (s.a < 0)
		goto out;
	s.b = (s.a + 1) % 3;
	s.cidx = (s.a + 2) % 3;
	myid(s.c, s.b, s.idb);
	myid(s.c, s.cidx, s.idc);
	snprintf(s.pb, sizeof(s.pb), "%d", rc_port(s.c, s.b));
	CHECK_EQ(get_all(s.r, s.buf), 0);

	migrate_slot_by_hand(&s);
	reshard_under_traffic(&s);
	kvs_remote_close(s.r);
out:
	for (int i = 0; i < nkeys; i++)
		free(val[i]);
	free(s.buf);
	rc_stop(s.c);
	return check_summary("test_remote_reshard");
}
