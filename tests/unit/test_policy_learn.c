/*
 * test_policy_learn - the "leaf-learn" eviction policy (service/
 * policy_learn.c) against a model: random admissions, add/del, touches,
 * lookups (hits) and evictions over several slot classes. The model knows
 * the rule and nothing of heaps, stamps or rings:
 *
 * - a record's uses are its hits plus what the ghost carried: when it was
 *   admitted while its hash was remembered from an eviction (a del of a
 *   record still committed, unpinned and childless), the uses it had then
 *   plus one, at most 7; with uses it is protected, else in probation;
 * - what it learns: per use count f, evictions ev[f] and the evicted blocks
 *   written again while remembered, ret[f]; every table-count admissions,
 *   bonus[f] = r(f) / r(1) - 1 turnovers for f >= 2 (r = ret / ev, with at
 *   least 16 evictions counted; 0..4), then the counts halve;
 * - the window, a share of the records (2% at first, 0.5%..90%): a block
 *   back from the ghost with 0 uses grows it by max(1, em / ep) / records
 *   if it was evicted at most 4 windows of admissions ago (by the ghost's
 *   clock, in ticks of records / 64, mod 256), one with uses shrinks it by
 *   max(1, ep / em) / records (ep, em: evictions with 0 uses and with some);
 * - a protected record's key is its access clock plus bonus[uses] x
 *   (records x clock / admissions);
 * - the victim is the least recently accessed probation member if it was
 *   last accessed more than the window's share of the table's record count
 *   of admissions ago, else the protected member of least key, else whichever segment has
 *   one; per class, or across classes;
 * - pol != NONE exactly for members;
 * - what it exports (kvs_policy_stats, the daemon's policy.*) is the
 *   model's: members per segment, window, bonuses, ghost returns, moves.
 *
 * What it learns, seen in what it does, is test_policy_learn_cases. Then
 * the policy drives a real cache (service/cache/cache.c) through
 * requests that share prefixes, with evictions, pins and aborts: every
 * cache invariant holds after each step (kvs_cache_check: pinned blocks
 * stay, a parent never goes before its children), and prefix closure too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvs_cache.h"
#include "kvs_check.h"
#include "kvs_log.h"
#include "kvs_policy.h"
#include "unit/policy_run.h"

/* Evictions stay few enough that no ghost bucket (8 ways, 1000 buckets for
 * 2000 records) overflows: the model remembers every eviction. */
enum { N = 2000, CLASSES = 3, STEPS = 300000, MAX_EVICTIONS = 600, NF = 8 };

typedef struct model {
	uint32_t idx;
	int in;            /* a member of the evictable set */
	unsigned carried;  /* uses the ghost carried at its admission */
	uint64_t order;    /* the clock at the last touch */
	uint64_t key;      /* its key at the last touch */
	uint64_t adm;      /* admissions counted at the last touch */
	int fresh;         /* inserted, not touched yet */
	uint32_t gen;      /* bumped when written anew: a new hash */
} model;

static model m[N];
static int ghosted[N];          /* evicted with its current hash: uses + 1 */
static uint32_t gtick[N];       /* ... at this tick */
static uint64_t clk, admissions, epoch;
static double ev[NF], ret[NF], bonus[NF], win = 0.02;
static int grew, shrank, returned;
static int chose[2]; /* model victims with both segments there: prob, prot */
static int bonused;  /* keys that got a bonus */
static kvs_table *t;
static kvs_policy *p;

static kvs_hash hash_of(int i)
{
	/* 0 < hi < 2^20 and unique: so is the policy's 20-bit fingerprint (the
	 * high word folded), and no false ghost match can upset the model. */
	return (kvs_hash){ .lo = ((uint64_t)i << 20 | m[i].gen) *
				 0x9e3779b97f4a7c15ull + 1,
			   .hi = ((uint64_t)m[i].gen << 11 | (uint64_t)i) + 1 };
}

static kvs_rec *rec(int i) { return kvs_table_rec(t, m[i].idx); }

static unsigned uses(int i)
{
	unsigned u = rec(i)->hits + m[i].carried;

	return u < NF ? u : NF - 1;
}

static int prot(int i) { return uses(i) > 0; }

static void relearn(void)
{
	double r1 = ev[1] >= 16 ? ret[1] / ev[1] : 0;

	for (int f = 0; f < NF; f++) {
		double b = 0;

		if (f >= 2 && ev[f] >= 16 && r1 > 0)
			b = ret[f] / ev[f] / r1 - 1;
		else if (f >= 2)
			b = bonus[f - 1];
		bonus[f] = b < 0 ? 0 : b > 4 ? 4 : b;
	}
	for (int f = 0; f < NF; f++) {
		ev[f] /= 2;
		ret[f] /= 2;
	}
	epoch = 0;
}

static uint64_t tick_len(void)
{
	uint64_t n = kvs_table_count(t) / 64;

	return n ? n : 1;
}

static uint32_t tick_now(void)
{
	return (uint32_t)(admissions / tick_len()) & 255;
}

static void adapt(unsigned u, uint64_t d)
{
	double n = (double)kvs_table_count(t), ep = ev[0], em = 0;

	if (u == 0 && (double)d > 4.0 * win * n)
		return;
	for (int f = 1; f < NF; f++)
		em += ev[f];
	if (u == 0) {
		win += (ep > 0 && em > ep ? em / ep : 1) / n;
		grew++;
	} else {
		win -= (em > 0 && ep > em ? ep / em : 1) / n;
		shrank++;
	}
	win = win < 0.005 ? 0.005 : win > 0.9 ? 0.9 : win;
}

static void touch(int i)
{
	unsigned u;

	if (m[i].fresh) {
		m[i].fresh = 0;
		if (ghosted[i]) {
			ret[ghosted[i] - 1]++;
			returned++;
			adapt((unsigned)ghosted[i] - 1,
			      (uint64_t)((tick_now() - gtick[i]) & 255) * tick_len());
		}
		admissions++;
		if (++epoch >= kvs_table_count(t))
			relearn();
	}
	clk++;
	u = uses(i);
	m[i].order = clk;
	m[i].key = clk;
	if (u && bonus[u] != 0) {
		double turn = (double)kvs_table_count(t) * (double)clk /
			      (double)admissions;

		m[i].key = clk + (uint64_t)(bonus[u] * turn);
		bonused++;
	}
	m[i].adm = admissions;
	kvs_policy_touch(p, m[i].idx);
}

/* A record (re)created for slot i: same hash if @same, else a new one. */
static void create(int i, int same, uint16_t cls)
{
	kvs_rec *r;

	if (!same) {
		m[i].gen++;
		CHECK(m[i].gen < 500); /* hi stays below 2^20 */
		ghosted[i] = 0;
	}
	CHECK(kvs_table_insert(t, hash_of(i), &m[i].idx) == 0);
	r = rec(i);
	r->cls = cls;
	r->state = KVS_REC_READY;
	m[i].in = 0;
	m[i].fresh = 1;
	m[i].carried = ghosted[i] ? (ghosted[i] < NF ? ghosted[i] : NF - 1) : 0;
}

/* Evict member @j as the cache does: out of the policy while evictable. */
static void evict(int j)
{
	unsigned u = uses(j);

	kvs_policy_del(p, m[j].idx);
	m[j].in = 0;
	ev[u]++;
	gtick[j] = tick_now();
	kvs_table_remove(t, m[j].idx);
	ghosted[j] = (int)u + 1;
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
		if (best[s] < 0 || m[i].key < m[best[s]].key)
			best[s] = i;
	}
	if (best[0] < 0 || best[1] < 0) {
		int b = best[0] >= 0 ? best[0] : best[1];

		return b >= 0 ? m[b].idx : KVS_NONE;
	}
	window = (uint64_t)((double)kvs_table_count(t) * win);
	age = admissions - m[best[0]].adm;
	chose[age <= window]++;
	return m[age > window ? best[0] : best[1]].idx;
}

static int slot_of(uint32_t idx)
{
	for (int j = 0; j < N; j++)
		if (m[j].idx == idx && !m[j].fresh)
			return j;
	for (int j = 0; j < N; j++)
		if (m[j].idx == idx)
			return j;
	return -1;
}

/* Keys can tie (a bonus makes two keys meet): the policy's victim is right
 * if it is the model's or has the same key in the same segment. */
static void check_victim(uint32_t cls)
{
	uint32_t v = kvs_policy_victim(p, cls), w = model_victim(cls);
	int a, b;

	if (v == w)
		return;
	a = v == KVS_NONE ? -1 : slot_of(v);
	b = w == KVS_NONE ? -1 : slot_of(w);
	CHECK(a >= 0 && b >= 0 && m[a].in && prot(a) == prot(b) &&
	      m[a].key == m[b].key);
}

static void check_membership(void)
{
	for (int i = 0; i < N; i++)
		CHECK_EQ(rec(i)->pol != KVS_NONE, m[i].in);
}

/* What the daemon exports as policy.* (kvs_policy_stats) is the model's:
 * the members of each segment, the window, the bonuses, the ghost's
 * returns and the window's moves. */
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
	CHECK_EQ(st.window_ppm, (int64_t)(win * 1e6 + 0.5));
	for (int f = 0; f < NF; f++)
		CHECK_EQ(st.bonus_milli[f], (int64_t)(bonus[f] * 1000 + 0.5));
	CHECK_EQ(st.ghost_returns, returned);
	CHECK_EQ(st.window_grew, grew);
	CHECK_EQ(st.window_shrank, shrank);
}

/* A ghost match protects, with its uses: B (2 hits), evicted and written
 * again, comes back with 3 uses and is chosen over the older but
 * young-enough probation record A. Then the same with B's del a pin, not an
 * eviction: nothing remembered, A goes first. */
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
		m[b].in = 1;
		rec(b)->hits = 2;
		if (pinned) {
			rec(b)->refs = 1;
			kvs_policy_del(p, m[b].idx);
			m[b].in = 0;
			rec(b)->refs = 0;
			kvs_table_remove(t, m[b].idx);
			ghosted[b] = 0;
		} else {
			evict(b);
		}
		create(b, 1, rec(a)->cls);
		touch(b);
		kvs_policy_add(p, m[b].idx);
		m[b].in = 1;
		CHECK_EQ(uses(b), pinned ? 0 : 3);
		check_victim(rec(a)->cls);
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
	check_victim(cls);
	if (v == KVS_NONE)
		return;
	j = slot_of(v);
	CHECK(j >= 0);
	if (j < 0)
		return;
	CHECK(rec(j)->cls == cls);
	evict(j);
	rc->evictions++;
	/* Written again (its own hash, or a new block). */
	create(j, rand() % 2, (uint16_t)cls);
	rc->remembered += m[j].carried > 0;
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
		rec(i)->hits += 1 + (uint32_t)(rand() % 2);
		touch(i);
		rec(i)->refs = 0;
		kvs_policy_add(p, m[i].idx);
		m[i].in = 1;
		break;
	case 3: /* a hit counted while a member: it may move segments */
		if (m[i].in) {
			rc->moves += !prot(i);
			rec(i)->hits++;
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

			check_victim(cls == CLASSES ? KVS_CLASS_ANY : cls);
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

		check_victim(KVS_CLASS_ANY);
		if (v == KVS_NONE)
			break;
		j = slot_of(v);
		CHECK(j >= 0 && m[j].in);
		if (j < 0)
			break;
		kvs_policy_del(p, v);
		m[j].in = 0;
	}
}

int main(void)
{
	unsigned seed = (unsigned)kvs_test_seed("test_policy_learn");
	run_counts rc = { 0, 0, 0 };

	kvs_log_set_level(KVS_LOG_WARN);
	srand(seed);
	CHECK(kvs_table_create(&t) == 0);
	CHECK(kvs_policy_create("leaf-learn", t, &p) == 0);
	CHECK(kvs_policy_known("leaf-learn"));
	CHECK(strcmp(kvs_policy_name_at(0), "leaf-learn") == 0); /* default */
	for (int i = 0; i < N; i++)
		create(i, 0, (uint16_t)(i % CLASSES));
	for (int i = 0; i < N; i++)
		touch(i);
	ghost_case();
	random_run(&rc);
	check_membership();
	check_stats();
	printf("test_policy_learn: %d evictions, %d written again remembered, "
	       "%d segment moves, %d keys with a bonus, window grown %d and "
	       "shrunk %d times (now %.4f); with both segments, %d probation "
	       "and %d protected victims\n", rc.evictions, rc.remembered,
	       rc.moves, bonused, grew, shrank, win, chose[0], chose[1]);
	CHECK(grew > 0 && shrank > 0);
	CHECK(rc.remembered > 0);
	CHECK(chose[0] > 0 && chose[1] > 0);
	drain_victims();
	check_membership();
	kvs_policy_destroy(p);
	kvs_table_destroy(t);
	policy_cache_run("test_policy_learn", "leaf-learn", seed);
	return check_summary("test_policy_learn");
}
