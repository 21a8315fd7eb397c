/*
 * test_engines_ns - engines' reports (kvs_report) counted per namespace as
 * well as in total, against a real daemon:
 *  - two namespaces report (one with a hostile model name: quote,
 *    backslash, newline, braces), an unattached connection too: each
 *    namespace's namespace.ID.engines.* is what its connections reported,
 *    and those plus the unattached report sum to the engines.* totals;
 *  - kvsctl stats --json and /metrics (parsed by engines_ns_check.py as
 *    the Prometheus text format, label escapes undone) say the same, the
 *    hostile model name round-tripped; a model name that is not UTF-8
 *    still leaves /metrics UTF-8;
 *  - past 64 reporting namespaces only the 64 with the most hit tokens are
 *    rendered, and engines.namespaces_omitted counts the rest.
 */
#include "harness.h"
#include "harness_client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "kvshare_admin.h"

#define BT 16
#define SHOWN 64 /* ENGINES_NS_SHOWN of service/server/server_stats.c */
#define EXTRA 70 /* namespaces added for the bound */

static th_daemon d;

static const char hostile[] = "evil\"mo\\del\nx{le=\"1\"},";
/* Not UTF-8 (a stray continuation, a truncated sequence, a surrogate) around
 * UTF-8 ("é"): /metrics shows '?' for each bad byte. It does not report:
 * kvsctl's JSON would carry the bytes as they are. */
static const char not_utf8[] = "raw\x80x\xe2\x82y\xed\xa0\x80z\xc3\xa9";

static kvs_engine_report times(const kvs_engine_report *r, uint64_t k)
{
	return (kvs_engine_report){ r->hit_tokens * k, r->loaded_blocks * k,
				    r->loaded_bytes * k, r->load_us * k,
				    r->load_errors * k, r->published_blocks * k,
				    r->publish_us * k, r->skipped_blocks * k };
}

static uint32_t ns_id_of(kvs_client *ctl, const char *model)
{
	kvs_ns_summary *ns;
	int n = kvs_list(ctl, 0, 0, &ns);
	uint32_t id = 0;

	for (int i = 0; i < n; i++)
		if (!strcmp(ns[i].model, model))
			id = ns[i].id;
	if (n > 0)
		free(ns);
	return id;
}

static int64_t ns_stat(uint32_t id, const char *field)
{
	char name[96];

	snprintf(name, sizeof(name), "namespace.%u.engines.%s", id, field);
	return th_stat_get(&d, name);
}

/* kvsctl stats --json and /metrics, checked by engines_ns_check.py. */
static void check_renderings(uint32_t a, uint32_t b, const kvs_engine_report *ra,
			     const kvs_engine_report *rb)
{
	const char *ctl = getenv("KVSCTL"), *src = getenv("KVS_SOURCE_DIR");
	char cmd[4096], model[128];
	int st;

	if (!ctl || !src) {
		th_skip_part("$KVSCTL or $KVS_SOURCE_DIR unset (ctest sets them): "
			     "kvsctl and /metrics not checked");
		return;
	}
	snprintf(model, sizeof(model), "%s/model", d.dir);
	FILE *f = fopen(model, "w");

	if (!CHECK(f != NULL))
		return;
	fputs(hostile, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd),
		 "python3 '%s/tests/integration/server/engines_ns_check.py' '%s' '%s' %lld "
		 "'%s' %u %u %llu %llu %llu %llu",
		 src, ctl, d.socket, (long long)th_stat_get(&d, "server.metrics_port"),
		 model, a, b, (unsigned long long)ra->hit_tokens,
		 (unsigned long long)ra->loaded_bytes,
		 (unsigned long long)rb->hit_tokens,
		 (unsigned long long)rb->loaded_bytes);
	st = system(cmd);
	CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
	kvs_layout la = th_layout("engines-ns-a", BT), lb = th_layout(hostile, BT);
	kvs_layout lc = th_layout(not_utf8, BT);
	kvs_client *ctl, *a1, *a2, *b, *raw;
	kvs_engine_report r = { 96, 6, 98304, 700, 1, 4, 300, 2 };
	kvs_engine_report s = { 32, 2, 32768, 200, 0, 9, 900, 1 };
	kvs_engine_report u = { 5, 5, 5, 5, 5, 5, 5, 5 };
	kvs_engine_report ra = times(&r, 2), rb = s;
	uint32_t ida, idb;

	th_init("test_engines_ns");
	th_daemon_up(&d, TH_ARGS("--host-size", "64M", "--metrics-addr", "127.0.0.1:0"));
	ctl = th_connect(&d, NULL);
	a1 = th_connect(&d, &la);
	a2 = th_connect(&d, &la);
	b = th_connect(&d, &lb);
	raw = th_connect(&d, &lc);
	CHECK_RC(kvs_report(a1, &r), 0);
	CHECK_RC(kvs_report(a2, &r), 0); /* two engines, one namespace */
	CHECK_RC(kvs_report(b, &s), 0);
	CHECK_RC(kvs_report(ctl, &u), 0); /* unattached: the totals only */
	ida = ns_id_of(ctl, "engines-ns-a");
	idb = ns_id_of(ctl, hostile);
	CHECK(ida && idb && ida != idb);

#define SUM(f)                                                                 \
	CHECK_EQ(ns_stat(ida, #f), ra.f);                                      \
	CHECK_EQ(ns_stat(idb, #f), rb.f);                                      \
	CHECK_EQ(th_stat_get(&d, "engines." #f),                               \
		 ns_stat(ida, #f) + ns_stat(idb, #f) + (int64_t)u.f);
	SUM(hit_tokens) SUM(loaded_blocks) SUM(loaded_bytes) SUM(load_us)
	SUM(load_errors) SUM(published_blocks) SUM(publish_us) SUM(skipped_blocks)
#undef SUM
	CHECK_EQ(th_stat_get(&d, "engines.namespaces"), 2);
	CHECK_EQ(th_stat_get(&d, "engines.namespaces_omitted"), 0);
	check_renderings(ida, idb, &ra, &rb);

	/* The bound: EXTRA more namespaces, the i-th reporting i + 1 hit
	 * tokens (all fewer than a's and b's). */
	for (uint32_t i = 0; i < EXTRA; i++) {
		char model[32];
		kvs_layout l;
		kvs_engine_report e = { .hit_tokens = i + 1 };
		kvs_client *c;

		snprintf(model, sizeof(model), "engines-ns-%u", i);
		l = th_layout(model, BT);
		c = th_connect(&d, &l);
		CHECK_RC(kvs_report(c, &e), 0);
		kvs_close(c);
	}
	CHECK_EQ(th_stat_get(&d, "engines.namespaces"), 2 + EXTRA);
	CHECK_EQ(th_stat_get(&d, "engines.namespaces_omitted"), 2 + EXTRA - SHOWN);
	/* a and b stay; of the others the SHOWN - 2 with most hits: hit
	 * tokens EXTRA down to EXTRA - SHOWN + 3. */
	CHECK_EQ(ns_stat(ida, "hit_tokens"), ra.hit_tokens);
	CHECK_EQ(ns_stat(idb, "hit_tokens"), rb.hit_tokens);
	{
		uint32_t lo = ns_id_of(ctl, "engines-ns-0");
		uint32_t cut = ns_id_of(ctl, "engines-ns-7"); /* 8 hit tokens: out */
		uint32_t in = ns_id_of(ctl, "engines-ns-8"); /* 9: the last one in */

		char name[96];
		int64_t v;

		snprintf(name, sizeof(name), "namespace.%u.engines.hit_tokens", lo);
		CHECK_RC(th_stat(&d, name, &v), -ENOENT);
		snprintf(name, sizeof(name), "namespace.%u.engines.hit_tokens", cut);
		CHECK_RC(th_stat(&d, name, &v), -ENOENT);
		CHECK_EQ(ns_stat(in, "hit_tokens"), 9);
	}
	kvs_close(a1);
	kvs_close(a2);
	kvs_close(b);
	kvs_close(raw);
	kvs_close(ctl);
	return th_finish();
}
