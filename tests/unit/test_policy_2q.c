/*
 * test_policy_2q - the "leaf-2q" eviction policy (service/cache/policy_2q.c)
 * against a model: random admissions, add/del, touches, lookups (hits) and
 * evictions over several slot classes. The model knows the rule and nothing
 * of heaps or stamps:
 *
 * - a record is protected when it has hits, or when it was admitted while
 *   its hash was remembered from an eviction (a del of a record that is
 *   still committed, unpinned and childless), else in probation;
 * - the victim is the least recently accessed probation member if it was
 *   last accessed more than 10% of the table's record count of admissions
 *   ago, else the least recently accessed protected member, else whichever
 *   segment has one; per class, or across classes;
 * - pol != NONE exactly for members;
 * - its kvs_policy_stats (the daemon's policy.*) count the model's members
 *   per segment, with the fixed 10% window and nothing learned.
 *
 * Then the policy drives a real cache (service/cache/cache.c) through requests
 * that share prefixes, with evictions, pins and aborts: every cache
 * invariant holds after each step (kvs_cache_check), and prefix closure
 * too: no block of a chain is present after its first missing one.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "kvs_cache.h"
#include "kvs_check.h"
#include "kvs_log.h"
#include "kvs_policy.h"
#include "unit/policy_run.h"

/* Evictions stay few enough that no ghost bucket (8 ways, 500 buckets for
 * 2000 records) overflows: the model remembers every eviction. */
enum { N = 2000, CLASSES = 3, STEPS = 300000, MAX_EVICTIONS = 300 };

typedef struct model {
	uint32_t idx;
	int in;            /* a member of the evictable set */
	int remembered;    /* admitted on a ghost match */
	uint64_t order;    /* global access order of the last touch */
	uint64_t adm;      /* admissions counted at the last touch */
	int fresh;         /* inserted, not touched yet */
	uint32_t gen;      /* bumped when written anew: a new hash */
} model;

static model m[N];
static int ghosted[N];          /* evicted with its current hash */
static uint64_t order_clock, admissions;
static int chose[2]; /* model victims with both segments there: prob, prot */
static kvs_table *t;
static kvs_policy *p;

static kvs_hash hash_of(int i)
{
	/* hi < 2^32 and unique: so is the policy's 32-bit fingerprint, and no
	 * false ghost match can upset the model. */
	return (kvs_hash){ .lo = ((uint64_t)i << 20 | m[i].gen) *
				 0x9e3779b97f4a7c15ull + 1,
			   .hi = (uint64_t)m[i].gen << 16 | (uint64_t)i };
}

static kvs_rec *rec(int i) { return kvs_table_rec(t, m[i].idx); }

static int prot(int i) { return rec(i)->hits > 0 || m[i].remembered; }

static void touch(int i)
{
	if (m[i].fresh) {
		admissions++;
		m[i].fresh = 0;
	}
	m[i].order = ++order_clock;
	m[i].adm = admissions;
	kvs_policy_touch(p, m[i].idx);
}

/* A record (re)created for slot i: same hash if @same, else a new one. */
static void create(int i, int same, uint16_t cls)
{
	kvs_rec *r;

	if (!same)
		m[i].gen++;
	CHECK(kvs_table_insert(t, hash_of(i), &m[i].idx) == 0);
	r = rec(i);
	r->cls = cls;
	r->state = KVS_REC_READY;
	m[i].in = 0;
	m[i].fresh = 1;
	m[i].remembered = same && ghosted[i];
	ghosted[i] = 0;
}

static uint32_t model_victim(uint32_t cls)
{
	int best[2] = { -1, -1 };
	uint64_t window, age;

	for (int i = 0; i < N; i++) {
		int s;

		if (!m[i].in || (cls != KVS_CLASS_ANY && rec(i)->cls != cls))
			continue;
		s = prot(i);
		if (best[s] < 0 || m[i].order < m[best[s]].order)
			best[s] = i;
	}
	if (best[0] < 0 || best[1] < 0) {
		int b = best[0] >= 0 ? best[0] : best[1];

		return b >= 0 ? m[b].idx : KVS_NONE;
	}
	window = (uint64_t)kvs_table_count(t) * 10 / 100;
	age = admissions - m[best[0]].adm;
	chose[age <= window]++;
	return m[age > window ? best[0] : best[1]].idx;
}

static void check_membership(void)
{
	for (int i = 0; i < N; i++)
		CHECK_EQ(rec(i)->pol != KVS_NONE, m[i].in);
}

/* policy.* (kvs_policy_stats): the members of each segment, and the fixed
 * window; nothing learned. */
static void check_stats(void)
{
	kvs_policy_stats st;
	int64_t n[2] = { 0, 0 };

	for (int i = 0; i < N; i++)
		if (m[i].in)
			n[prot(i)]++;
	kvs_policy_stats_get(p, &st);
	CHECK_EQ(st.probation, n[0]);
	CHECK_EQ(st.protected_, n[1]);
	CHECK_EQ(st.window_ppm, 100000);
	CHECK_EQ(st.ghost_returns + st.window_grew + st.bonus_milli[2], 0);
}

/* A ghost match protects: B, evicted and written again, is chosen over the
 * older but young-enough probation record A. Then the same without the
 * eviction (B's del was a pin, not an eviction): A goes first. */
static void ghost_case(void)
{
	int a = 0, b = 1;

	for (int pinned = 0; pinned <= 1; pinned++) {
		touch(a);
		if (!m[a].in) {
			kvs_policy_add(p, m[a].idx);
			m[a].in = 1;
		}
		if (!m[b].in)
			kvs_policy_add(p, m[b].idx);
		rec(b)->refs = (uint32_t)pinned;
		kvs_policy_del(p, m[b].idx);
		m[b].in = 0;
		rec(b)->refs = 0;
		kvs_table_remove(t, m[b].idx);
		create(b, 1, rec(a)->cls);
		m[b].remembered = !pinned;
		touch(b);
		kvs_policy_add(p, m[b].idx);
		m[b].in = 1;
		CHECK_EQ(prot(b), !pinned);
		CHECK_EQ(kvs_policy_victim(p, rec(a)->cls), model_victim(rec(a)->cls));
		CHECK_EQ(kvs_policy_victim(p, rec(a)->cls),
			 pinned ? m[a].idx : m[b].idx);
	}
}

/* What the random run counts, for its summary line and its checks. */
typedef struct run_counts {
	int evictions, moves, remembered;
} run_counts;

/* Evict the victim of a random class, checked against the model; write it
 * again later. */
static void evict_one(run_counts *rc)
{
	uint32_t cls = (uint32_t)(rand() % CLASSES), v;
	int j;

	if (rc->evictions >= MAX_EVICTIONS)
		return;
	v = kvs_policy_victim(p, cls);
	CHECK_EQ(v, model_victim(cls));
	if (v == KVS_NONE)
		return;
	for (j = 0; j < N && m[j].idx != v; j++)
		;
	CHECK(j < N);
	if (j == N)
		return;
	CHECK(rec(j)->cls == cls);
	kvs_policy_del(p, v); /* still evictable: an eviction */
	m[j].in = 0;
	kvs_table_remove(t, v);
	ghosted[j] = 1;
	rc->evictions++;
	/* Written again (its own hash, or a new block). */
	create(j, rand() % 2, (uint16_t)cls);
	rc->remembered += m[j].remembered;
	touch(j);
}

/* One random operation (op 0-7) on record i, in policy and model alike. */
static void random_op(run_counts *rc, int i, int op)
{
	switch (op) {
	case 0: /* becomes evictable */
		if (!m[i].in) {
			kvs_policy_add(p, m[i].idx);
			m[i].in = 1;
		}
		break;
	case 1: /* pinned or grew a child: leaves the set, kept */
		if (m[i].in) {
			rec(i)->refs = 1;
			kvs_policy_del(p, m[i].idx);
			rec(i)->refs = 0;
			m[i].in = 0;
		}
		break;
	case 2: /* a lookup hit, as the cache does it: pin, touch, unpin */
		if (m[i].in) {
			rec(i)->refs = 1;
			kvs_policy_del(p, m[i].idx);
			m[i].in = 0;
		}
		rec(i)->hits++;
		touch(i);
		rec(i)->refs = 0;
		kvs_policy_add(p, m[i].idx);
		m[i].in = 1;
		break;
	case 3: /* a hit counted while a member: it moves segments */
		if (m[i].in && !prot(i)) {
			rec(i)->hits++;
			rc->moves++;
		}
		touch(i);
		break;
	case 4: /* evict the victim of a class; write it again later */
		evict_one(rc);
		break;
	case 5: /* a non-member freed and written anew: an admission */
		if (!m[i].in) {
			uint16_t cls = rec(i)->cls;

			kvs_table_remove(t, m[i].idx);
			create(i, 0, cls);
			touch(i);
		}
		break;
	default:
		touch(i);
		break;
	}
}

/* STEPS random operations; the victim checked against the model every 97,
 * membership and stats every 9973. */
static void random_run(run_counts *rc)
{
	for (int s = 0; s < STEPS; s++) {
		int i = rand() % N, op = rand() % 8;

		random_op(rc, i, op);
		if (s % 97 == 0) {
			uint32_t cls = (uint32_t)(rand() % (CLASSES + 1));

			if (cls == CLASSES)
				cls = KVS_CLASS_ANY;
			CHECK_EQ(kvs_policy_victim(p, cls), model_victim(cls));
		}
		if (s % 9973 == 0) {
			check_membership();
			check_stats();
		}
	}
}

/* Draining by victims empties the set, each victim a member. */
static void drain_victims(void)
{
	for (;;) {
		uint32_t v = kvs_policy_victim(p, KVS_CLASS_ANY);
		int j;

		CHECK_EQ(v, model_victim(KVS_CLASS_ANY));
		if (v == KVS_NONE)
			break;
		for (j = 0; j < N && m[j].idx != v; j++)
			;
		CHECK(j < N && m[j].in);
		if (j == N)
			break;
		kvs_policy_del(p, v);
		m[j].in = 0;
	}
}

int main(void)
{
	unsigned seed = (unsigned)kvs_test_seed("test_policy_2q");
	run_counts rc = { 0, 0, 0 };

	kvs_log_set_level(KVS_LOG_WARN);
	srand(seed);
	CHECK(kvs_table_create(&t) == 0);
	CHECK(kvs_policy_create("leaf-2q", t, &p) == 0);
	CHECK(kvs_policy_known("leaf-2q"));
	for (int i = 0; i < N; i++)
		create(i, 0, (uint16_t)(i % CLASSES));
	/* Admit them all, and make a few of them evictable. */
	for (int i = 0; i < N; i++)
		touch(i);
	ghost_case();
	random_run(&rc);
	check_membership();
	check_stats();
	printf("test_policy_2q: %d evictions, %d written again remembered, "
	       "%d segment moves; with both segments, %d probation and %d "
	       "protected victims\n", rc.evictions, rc.remembered, rc.moves,
	       chose[0], chose[1]);
	CHECK(rc.remembered > 0);
	CHECK(chose[0] > 0 && chose[1] > 0);
	drain_victims();
	check_membership();
	kvs_policy_destroy(p);
	kvs_table_destroy(t);
	policy_cache_run("test_policy_2q", "leaf-2q", seed);
	return check_summary("test_policy_2q");
}
