/*
 * test_policy_learn_cases - what the "leaf-learn" eviction policy
 * (service/cache/policy_learn.c) learns, seen in what it does, each case on
 * a table and a policy of its own: blocks with 3 uses that come back after
 * their eviction (where blocks with 1 never do) outlive younger blocks with
 * 1 use; the other way round, the order stays least recently used; and the
 * probation window grows with near returns from the ghost, not with far
 * ones. test_policy_learn checks the policy's rule against a model.
 */
#include <stdio.h>

#include "kvs_check.h"
#include "kvs_policy.h"
#include "kvs_table.h"

/* ---- what it learns, in what it does ---------------------------------- */

/* A learning case's own table and policy, and its L records: their slots
 * and how often each was written anew (a new hash). */
enum { L = 512 };

typedef struct learn_case {
	kvs_table *lt;
	kvs_policy *lp;
	uint32_t *idx;
	int *gen;
	int frequent_return;
} learn_case;

/* L protected records, half with 1 use, half with 3. */
static void learn_fill(learn_case *lc)
{
	kvs_table *lt = lc->lt;
	kvs_policy *lp = lc->lp;
	uint32_t *idx = lc->idx;

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
}

/* Rounds of victims: the victims of one kind are written again (the ghost
 * sees them back), of the other kind replaced by new blocks. */
static void learn_rounds(learn_case *lc)
{
	kvs_table *lt = lc->lt;
	kvs_policy *lp = lc->lp;
	uint32_t *idx = lc->idx, v;
	int *gen = lc->gen;

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
		back = (i % 2 == 1) == lc->frequent_return;
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
}

/* The oldest 3-use record: touched long ago. Then every 1-use one, then the
 * rest of the 3-use ones. The old 3-use one goes first when 3-use blocks
 * did not come back; a 1-use one goes first when they did. Returns -1 when
 * no 3-use record was found. */
static int learn_old_against_young(learn_case *lc)
{
	kvs_table *lt = lc->lt;
	kvs_policy *lp = lc->lp;
	uint32_t *idx = lc->idx, v;
	int frequent_return = lc->frequent_return;
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
		return -1;
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
	return 0;
}

/* ... and the bonus it learned, as policy.bonus_f3_milli shows it. */
static void learn_bonus_shown(const learn_case *lc)
{
	kvs_policy_stats st;

	kvs_policy_stats_get(lc->lp, &st);
	printf("test_policy_learn: learned bonus for 3 uses: %lld/1000 turnover\n",
	       (long long)st.bonus_milli[3]);
	CHECK(lc->frequent_return ? st.bonus_milli[3] > 0 :
	      st.bonus_milli[3] == 0);
	CHECK(st.ghost_returns > 0);
}

/* A fresh policy over L protected records, half with 1 use, half with 3.
 * Rounds of victims: the victims of one kind are written again (the ghost
 * sees them back), of the other kind replaced by new blocks. Then an old
 * 3-use block and a young 1-use block: the victim is the young one when
 * 3-use blocks came back, the old one (least recently used) when they did
 * not. The gens are static: the second case goes on from the first's. */
static void learning_case(int frequent_return)
{
	static uint32_t idx[L];
	static int gen[L];
	learn_case lc = { .idx = idx, .gen = gen,
			  .frequent_return = frequent_return };

	CHECK(kvs_table_create(&lc.lt) == 0);
	CHECK(kvs_policy_create("leaf-learn", lc.lt, &lc.lp) == 0);
	learn_fill(&lc);
	learn_rounds(&lc);
	if (learn_old_against_young(&lc) == 0)
		learn_bonus_shown(&lc);
	kvs_policy_destroy(lc.lp);
	kvs_table_destroy(lc.lt);
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
	learning_case(1);
	learning_case(0);
	window_case(0);
	window_case(1);
	return check_summary("test_policy_learn_cases");
}
