/* policy.c - eviction policy registry and dispatch (see kvs_policy.h). */
#include "kvs_policy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

extern const kvs_policy_ops kvs_policy_leaf_lru, kvs_policy_lru,
	kvs_policy_leaf_2q, kvs_policy_leaf_learn;

/* The first is the default. */
static const kvs_policy_ops *const policies[] = {
	&kvs_policy_leaf_learn, &kvs_policy_leaf_2q, &kvs_policy_leaf_lru,
	&kvs_policy_lru, NULL
};

struct kvs_policy {
	const kvs_policy_ops *ops;
	void *state;
	kvs_table *table;
};

int kvs_policy_create(const char *name, kvs_table *t, kvs_policy **out)
{
	kvs_policy *p;
	int rc;

	for (int i = 0; policies[i]; i++) {
		if (strcmp(policies[i]->name, name) != 0)
			continue;
		p = calloc(1, sizeof(*p));
		if (!p)
			return -ENOMEM;
		p->ops = policies[i];
		p->table = t;
		rc = p->ops->create(t, &p->state);
		if (rc < 0) {
			free(p);
			return rc;
		}
		*out = p;
		return 0;
	}
	return -EINVAL;
}

void kvs_policy_destroy(kvs_policy *p)
{
	if (!p)
		return;
	p->ops->destroy(p->state);
	free(p);
}

const char *kvs_policy_name(const kvs_policy *p) { return p->ops->name; }
int kvs_policy_leaf_only(const kvs_policy *p) { return p->ops->leaf_only; }
void kvs_policy_add(kvs_policy *p, uint32_t idx) { p->ops->add(p->state, idx); }
void kvs_policy_del(kvs_policy *p, uint32_t idx) { p->ops->del(p->state, idx); }
void kvs_policy_touch(kvs_policy *p, uint32_t idx) { p->ops->touch(p->state, idx); }

uint32_t kvs_policy_victim(kvs_policy *p, uint32_t cls)
{
	return p->ops->victim(p->state, cls);
}

int kvs_policy_reused(const kvs_policy *p, uint32_t idx)
{
	if (p->ops->reused)
		return p->ops->reused(p->state, idx);
	return kvs_table_rec(p->table, idx)->hits > 0;
}

void kvs_policy_stats_get(const kvs_policy *p, kvs_policy_stats *st)
{
	*st = (kvs_policy_stats){ 0 };
	if (p->ops->stats)
		p->ops->stats(p->state, st);
}

const char *kvs_policy_name_at(unsigned i)
{
	return i < sizeof(policies) / sizeof(policies[0]) - 1 ? policies[i]->name
								: NULL;
}

int kvs_policy_known(const char *name)
{
	for (int i = 0; policies[i]; i++)
		if (strcmp(policies[i]->name, name) == 0)
			return 1;
	return 0;
}
