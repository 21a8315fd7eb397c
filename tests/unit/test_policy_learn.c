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
 * Then what it learns, seen in what it does: blocks with 3 uses that come
 * back after their eviction (where blocks with 1 never do) outlive younger
 * blocks with 1 use; the other way round, the order stays least recently
 * used. Then the policy drives a real cache (service/cache/cache.c) through
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

/* ---- what it learns, in what it does ---------------------------------- */

/* A fresh policy over @n protected records, half with 1 use, half with 3.
 * Rounds of victims: the victims of one kind are written again (the ghost
 * sees them back), of the other kind replaced by new blocks. Then an old
 * 3-use block and a young 1-use block: the victim is the young one when
 * 3-use blocks came back, the old one (least recently used) when they did
 * not. */
static void learning_case(int frequent_return)
{
	enum { L = 512 };
	static uint32_t idx[L];
	static int gen[L];
	kvs_table *lt;
	kvs_policy *lp;
	uint32_t v;

	CHECK(kvs_table_create(&lt) == 0);
	CHECK(kvs_policy_create("leaf-learn", lt, &lp) == 0);
	for (int i = 0; i < L; i++) {
		kvs_rec *r;

		CHECK(kvs_table_insert(lt, (kvs_hash){ .lo = (uint64_t)i * 0x9e3779b97f4a7c15ull + 7,
						       .hi = (uint64_t)i + 1 }, &idx[i]) == 0);
		r = kvs_table_rec(lt, idx[i]);
		r->state = KVS_REC_READY;
		r->hits = i % 2 ? 3 : 1;
		kvs_policy_touch(lp, idx[i]);
		kvs_policy_add(lp, idx[i]);
	}
	for (int round = 0; round < 20 * L; round++) {
		kvs_rec *r;
		int i, back;

		v = kvs_policy_victim(lp, KVS_CLASS_ANY);
		CHECK(v != KVS_NONE);
		if (v == KVS_NONE)
			break;
		for (i = 0; i < L && idx[i] != v; i++)
			;
		CHECK(i < L);
		if (i == L)
			break;
		kvs_policy_del(lp, v); /* evictable as it leaves: an eviction */
		kvs_table_remove(lt, v);
		back = (i % 2 == 1) == frequent_return;
		if (!back)
			gen[i]++;
		CHECK(kvs_table_insert(lt, (kvs_hash){
			.lo = ((uint64_t)i << 20 | (uint64_t)gen[i]) * 0x9e3779b97f4a7c15ull + 7,
			.hi = ((uint64_t)gen[i] << 9 | (uint64_t)i) + 1 }, &idx[i]) == 0);
		r = kvs_table_rec(lt, idx[i]);
		r->state = KVS_REC_READY;
		/* Its own uses again: a 3-use kind written back comes with
		 * its ghost's count, a new one gets them as hits. */
		r->hits = back ? 0 : (i % 2 ? 3 : 1);
		kvs_policy_touch(lp, idx[i]);
		kvs_policy_add(lp, idx[i]);
		/* Touch a few others, so that ages differ. */
		kvs_policy_touch(lp, idx[(i * 7 + round) % L]);
	}
	/* The oldest 3-use record: touched long ago. Then every 1-use one,
	 * then the rest of the 3-use ones. The old 3-use one goes first
	 * when 3-use blocks did not come back; a 1-use one goes first when
	 * they did. */
	{
		int old3 = -1;
		kvs_rec *r;

		for (int i = 1; i < L; i += 2)
			if (kvs_table_rec(lt, idx[i])->hits >= 3 ||
			    frequent_return) {
				old3 = i;
				break;
			}
		CHECK(old3 >= 0);
		if (old3 < 0)
			goto out;
		r = kvs_table_rec(lt, idx[old3]);
		r->hits = 3;
		kvs_policy_touch(lp, idx[old3]);
		for (int i = 0; i < L; i += 2) {
			r = kvs_table_rec(lt, idx[i]);
			r->hits = 1;
			kvs_policy_touch(lp, idx[i]);
		}
		for (int i = 1; i < L; i += 2)
			if (i != old3)
				kvs_policy_touch(lp, idx[i]);
		v = kvs_policy_victim(lp, KVS_CLASS_ANY);
		printf("test_policy_learn: learning (%s come back): victim has "
		       "%u uses\n", frequent_return ? "3-use blocks" :
		       "1-use blocks", kvs_table_rec(lt, v)->hits);
		if (frequent_return)
			CHECK(v != idx[old3] && kvs_table_rec(lt, v)->hits == 1);
		else
			CHECK_EQ(v, idx[old3]);
	}
	{ /* ... and the bonus it learned, as policy.bonus_f3_milli shows it */
		kvs_policy_stats st;

		kvs_policy_stats_get(lp, &st);
		printf("test_policy_learn: learned bonus for 3 uses: %lld/1000 turnover\n",
		       (long long)st.bonus_milli[3]);
		CHECK(frequent_return ? st.bonus_milli[3] > 0 : st.bonus_milli[3] == 0);
		CHECK(st.ghost_returns > 0);
	}
out:
	kvs_policy_destroy(lp);
	kvs_table_destroy(lt);
}


/* The window learned from the reuse distance. Probation blocks are evicted
 * one by one; each is written again at once (@far 0: its ghost hit comes 0
 * admissions after its eviction) or 2000 admissions later (@far 1: far
 * beyond 4 windows of 2%). Then every block is touched, 100 new ones are
 * admitted, and the oldest probation block (100 admissions old, 9% of the
 * records) stands against a protected one: near returns grew the window
 * past it (the protected block goes), far ones taught nothing (the
 * probation block goes, as with the first 2% window). */
static void window_case(int far)
{
	enum { W = 1000, ROUNDS = 3000, LATER = 2000, NEW = 100 };
	static kvs_hash queue[ROUNDS];
	static uint32_t all[W + ROUNDS + NEW + 1];
	uint64_t next = 1;
	uint32_t nall = 0, qhead = 0, qtail = 0, pidx, v;
	kvs_table *lt;
	kvs_policy *lp;

	CHECK(kvs_table_create(&lt) == 0);
	CHECK(kvs_policy_create("leaf-learn", lt, &lp) == 0);
#define FRESH() ((kvs_hash){ .lo = next * 0x9e3779b97f4a7c15ull + 3, .hi = next++ })
#define PUT(h, hits_)                                                        \
	do {                                                                 \
		uint32_t x_;                                                 \
		CHECK(kvs_table_insert(lt, (h), &x_) == 0);                  \
		kvs_table_rec(lt, x_)->state = KVS_REC_READY;                \
		kvs_table_rec(lt, x_)->hits = (hits_);                       \
		kvs_policy_touch(lp, x_);                                    \
		kvs_policy_add(lp, x_);                                      \
		all[nall++] = x_;                                            \
	} while (0)
	PUT(FRESH(), 1);
	pidx = all[0];
	for (int i = 0; i < W; i++)
		PUT(FRESH(), 0);
	for (int round = 0; round < ROUNDS; round++) {
		kvs_hash h;

		v = kvs_policy_victim(lp, KVS_CLASS_ANY);
		CHECK(v != KVS_NONE);
		/* Near returns grow the window until the probation blocks
		 * are all inside it: then the protected one is the victim. */
		if (v == pidx)
			CHECK(!far);
		if (v == KVS_NONE || v == pidx)
			break;
		h = kvs_table_rec(lt, v)->hash;
		kvs_policy_del(lp, v); /* evictable as it leaves: an eviction */
		kvs_table_remove(lt, v);
		for (uint32_t i = 0; i < nall; i++)
			if (all[i] == v)
				all[i] = all[--nall];
		if (!far) {
			PUT(h, 0);
			continue;
		}
		/* Evicted at round k, written again at round k + LATER. */
		queue[qtail++] = h;
		if ((uint32_t)round - qhead >= LATER)
			PUT(queue[qhead++], 0);
		else
			PUT(FRESH(), 0);
	}
	for (uint32_t i = 0; i < nall; i++)
		kvs_policy_touch(lp, all[i]);
	for (int i = 0; i < NEW; i++)
		PUT(FRESH(), 0);
#undef PUT
#undef FRESH
	v = kvs_policy_victim(lp, KVS_CLASS_ANY);
	printf("test_policy_learn: window (%s returns): the victim is %s\n",
	       far ? "far" : "near", v == pidx ? "protected" : "in probation");
	CHECK_EQ(v == pidx, !far);
	kvs_policy_destroy(lp);
	kvs_table_destroy(lt);
}

int main(void)
{
	unsigned seed = (unsigned)kvs_test_seed("test_policy_learn");
	int evictions = 0, moves = 0, remembered = 0;

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
	for (int s = 0; s < STEPS; s++) {
		int i = rand() % N, op = rand() % 8;

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
				moves += !prot(i);
				rec(i)->hits++;
			}
			touch(i);
			break;
		case 4: { /* evict the victim of a class; write it again later */
			uint32_t cls = (uint32_t)(rand() % CLASSES), v;
			int j;

			if (evictions >= MAX_EVICTIONS)
				break;
			v = kvs_policy_victim(p, cls);
			check_victim(cls);
			if (v == KVS_NONE)
				break;
			j = slot_of(v);
			CHECK(j >= 0);
			if (j < 0)
				break;
			CHECK(rec(j)->cls == cls);
			evict(j);
			evictions++;
			/* Written again (its own hash, or a new block). */
			create(j, rand() % 2, (uint16_t)cls);
			remembered += m[j].carried > 0;
			touch(j);
			break;
		}
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
		if (s % 97 == 0) {
			uint32_t cls = (uint32_t)(rand() % (CLASSES + 1));

			check_victim(cls == CLASSES ? KVS_CLASS_ANY : cls);
		}
		if (s % 9973 == 0) {
			check_membership();
			check_stats();
		}
	}
	check_membership();
	check_stats();
	printf("test_policy_learn: %d evictions, %d written again remembered, "
	       "%d segment moves, %d keys with a bonus, window grown %d and "
	       "shrunk %d times (now %.4f); with both segments, %d probation "
	       "and %d protected victims\n", evictions, remembered, moves,
	       bonused, grew, shrank, win, chose[0], chose[1]);
	CHECK(grew > 0 && shrank > 0);
	CHECK(remembered > 0);
	CHECK(chose[0] > 0 && chose[1] > 0);
	/* Draining by victims empties the set, each victim a member. */
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
	check_membership();
	kvs_policy_destroy(p);
	kvs_table_destroy(t);
	learning_case(1);
	learning_case(0);
	window_case(0);
	window_case(1);
	policy_cache_run("test_policy_learn", "leaf-learn", seed);
	return check_summary("test_policy_learn");
}
