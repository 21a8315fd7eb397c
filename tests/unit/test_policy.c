/*
 * test_policy - the LRU eviction policy against a reference model: random
 * add/del/touch over several slot classes; the victim of a class is always
 * its evictable record with the oldest access, and across classes the oldest
 * of all. The model keeps its own access clock (stamped at each touch it
 * makes): it never reads the stamps the policy writes, so a policy that
 * ranks by insertion, or forgets a touch, differs from it.
 * KVS_TEST_SEED=<n> replays a run.
 */
#include <errno.h>
#include <stdlib.h>

#include "kvs_check.h"
#include "kvs_policy.h"

enum { N = 2000, CLASSES = 4, STEPS = 200000 };

static uint64_t order[N], order_clock; /* the model's access clock */

static void touch(kvs_policy *p, const uint32_t *idx, int i)
{
	order[i] = ++order_clock;
	kvs_policy_touch(p, idx[i]);
}

/* The member of class @cls (or any) touched longest ago, by the model's
 * clock; its position in idx[] in *pos. */
static uint32_t model_victim(const int *in, const uint32_t *idx, uint32_t cls,
			     int *pos)
{
	int best = -1;

	for (int i = 0; i < N; i++) {
		if (!in[i] || (cls != KVS_CLASS_ANY && (uint32_t)(i % CLASSES) != cls))
			continue;
		if (best < 0 || order[i] < order[best])
			best = i;
	}
	*pos = best;
	return best < 0 ? KVS_NONE : idx[best];
}

int main(void)
{
	unsigned seed = (unsigned)kvs_test_seed("test_policy");
	static uint32_t idx[N];
	static int in[N];
	kvs_table *t;
	kvs_policy *p;
	int pos, members = 0;

	srand(seed);
	CHECK(kvs_table_create(&t) == 0);
	CHECK_EQ(kvs_policy_create("no-such-policy", t, &p), -EINVAL);
	CHECK(kvs_policy_create("lru", t, &p) == 0);
	for (int i = 0; i < N; i++) {
		kvs_hash h = { .lo = (uint64_t)i * 0x9e3779b97f4a7c15ull + 1, .hi = (uint64_t)i };

		CHECK(kvs_table_insert(t, h, &idx[i]) == 0);
		kvs_table_rec(t, idx[i])->cls = (uint16_t)(i % CLASSES);
		touch(p, idx, i);
	}
	for (int s = 0; s < STEPS; s++) {
		int i = rand() % N, op = rand() % 3;

		if (op == 0 && !in[i]) {
			kvs_policy_add(p, idx[i]);
			in[i] = 1;
		} else if (op == 1 && in[i]) {
			kvs_policy_del(p, idx[i]);
			in[i] = 0;
		} else {
			touch(p, idx, i);
		}
		if (s % 101 == 0) {
			uint32_t cls = (uint32_t)(rand() % (CLASSES + 1));

			if (cls == CLASSES)
				cls = KVS_CLASS_ANY;
			CHECK_EQ(kvs_policy_victim(p, cls),
				 model_victim(in, idx, cls, &pos));
		}
	}
	/* Draining by victims yields every member, oldest first. */
	for (int i = 0; i < N; i++)
		members += in[i];
	for (int n = 0;; n++) {
		uint32_t v = kvs_policy_victim(p, KVS_CLASS_ANY);
		uint32_t want = model_victim(in, idx, KVS_CLASS_ANY, &pos);

		if (v != want) {
			CHECK_EQ(v, want);
			break;
		}
		if (v == KVS_NONE) {
			CHECK_EQ(n, members);
			break;
		}
		kvs_policy_del(p, v);
		in[pos] = 0;
	}
	kvs_policy_destroy(p);
	kvs_table_destroy(t);
	return check_summary("test_policy");
}
