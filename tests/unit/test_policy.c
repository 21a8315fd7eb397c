/*
 * test_policy - the LRU eviction policy against a reference model: random
 * add/del/touch over several slot classes; the victim of a class is always
 * its evictable record with the oldest access, and across classes the oldest
 * of all.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "kvs_check.h"
#include "kvs_policy.h"

enum { N = 2000, CLASSES = 4, STEPS = 200000 };

static uint32_t model_victim(kvs_table *t, const int *in, const uint32_t *idx,
			     uint32_t cls)
{
	uint32_t best = KVS_REC_NONE;

	for (int i = 0; i < N; i++) {
		kvs_rec *r = kvs_table_rec(t, idx[i]);

		if (!in[i] || (cls != KVS_CLASS_ANY && r->cls != cls))
			continue;
		if (best == KVS_REC_NONE || r->stamp < kvs_table_rec(t, best)->stamp)
			best = idx[i];
	}
	return best;
}

int main(void)
{
	unsigned seed = (unsigned)time(NULL);
	static uint32_t idx[N];
	static int in[N];
	kvs_table *t;
	kvs_policy *p;

	printf("test_policy: seed %u\n", seed);
	srand(seed);
	CHECK(kvs_table_create(&t) == 0);
	CHECK_EQ(kvs_policy_create("no-such-policy", t, &p), -EINVAL);
	CHECK(kvs_policy_create("lru", t, &p) == 0);
	for (int i = 0; i < N; i++) {
		kvs_hash h = { .lo = (uint64_t)i * 0x9e3779b97f4a7c15ull + 1, .hi = (uint64_t)i };

		CHECK(kvs_table_insert(t, h, &idx[i]) == 0);
		kvs_table_rec(t, idx[i])->cls = (uint16_t)(i % CLASSES);
		kvs_policy_touch(p, idx[i]);
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
			kvs_policy_touch(p, idx[i]);
		}
		if (s % 101 == 0) {
			uint32_t cls = (uint32_t)(rand() % (CLASSES + 1));

			if (cls == CLASSES)
				cls = KVS_CLASS_ANY;
			CHECK_EQ(kvs_policy_victim(p, cls), model_victim(t, in, idx, cls));
		}
	}
	/* Draining by victims yields records oldest first. */
	for (uint64_t last = 0;;) {
		uint32_t v = kvs_policy_victim(p, KVS_CLASS_ANY);

		if (v == KVS_REC_NONE)
			break;
		CHECK(kvs_table_rec(t, v)->stamp >= last);
		last = kvs_table_rec(t, v)->stamp;
		kvs_policy_del(p, v);
	}
	kvs_policy_destroy(p);
	kvs_table_destroy(t);
	return check_summary("test_policy");
}
