/*
 * test_admin - the operator's verbs against a real daemon, through the
 * public API (kvshare_admin.h) and through kvsctl with --json parsed by
 * python3:
 *  list:    namespaces, blocks, prefix trees (roots, longest chain) and the
 *           most-hit prefixes in order.
 *  inspect: a block's namespace, tier, state, parent, depth, hits, refs;
 *           a missing block is -ENOENT; a worker connection may not evict.
 *  watch:   a scripted sequence (stored, pinned, flushed, unpinned, evicted)
 *           is seen in order, with the right hashes.
 *  evict:   flush --all skips pinned blocks and reports them; --prefix frees
 *           a block and what is under it; --namespace the rest.
 *  pin:     pins outlive the pinning connection and survive eviction
 *           pressure; a pin over --max-pinned-share is KVS_E_LIMIT.
 *  kvsctl:  ls/inspect/flush/pin --json parsed and checked; errors exit 1
 *           with "kvsctl: <what> failed: <reason>".
 */
#include "harness.h"
#include "harness_client.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvshare_admin.h"

#define BT 16 /* 16 KiB blocks with th_layout() */

static th_daemon d;

static bool same(kvs_hash a, kvs_hash b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

/* Run a shell command line; returns its exit status (or -1). */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	if (st == -1 || !WIFEXITED(st))
		return -1;
	if (WEXITSTATUS(st) != 0)
		th_note("command exited %d: %s", WEXITSTATUS(st), cmd);
	return WEXITSTATUS(st);
}

static void expect_event(kvs_watch *w, kvs_event_kind kind, kvs_hash h,
			 uint64_t *seq)
{
	kvs_event ev;

	if (!CHECK_RC(kvs_watch_next(w, &ev, TH_WAIT_MS), 1))
		return;
	if (!CHECK_EQ(ev.kind, kind))
		th_note("got %s, wanted %s", kvs_event_name(ev.kind),
			kvs_event_name(kind));
	CHECK(same(ev.hash, h));
	CHECK_EQ(ev.ns, 1);
	CHECK_EQ(ev.seq, *seq + 1);
	*seq = ev.seq;
}

/* LIST: one namespace, its blocks, trees and most-hit prefixes. */
static void api_list(kvs_client *ctl, const kvs_hash *a, const kvs_hash *b)
{
	kvs_ns_summary *v;
	int n;

	n = kvs_list(ctl, 0, 5, &v);
	if (CHECK_RC(n, 1)) {
		CHECK_EQ(v[0].id, 1);
		CHECK(!strcmp(v[0].model, "admin-model"));
		CHECK_EQ(v[0].blocks, 6);
		CHECK_EQ(v[0].roots, 1);
		CHECK_EQ(v[0].longest, 4);
		CHECK_EQ(v[0].hits, 3 * 2 + 2 * 2 + 1 * 2); /* a0,a1 x3; a2,a3 x2; b2,b3 x1 */
		CHECK_EQ(v[0].block_bytes, 1024 * BT);
		if (CHECK_EQ(v[0].ntop, 2)) {
			CHECK(same(v[0].top[0].hash, a[3]));
			CHECK_EQ(v[0].top[0].hits, 2);
			CHECK_EQ(v[0].top[0].root_hits, 3);
			CHECK_EQ(v[0].top[0].depth, 4);
			CHECK(same(v[0].top[1].hash, b[3]));
			CHECK_EQ(v[0].top[1].hits, 1);
		}
		free(v);
	}
	CHECK_RC(kvs_list(ctl, 2, 5, &v), -ENOENT);
}

/* INSPECT a block, a parent, a missing block; what a worker may not do. */
static void api_inspect(kvs_client *w, kvs_client *ctl, const kvs_hash *a,
			kvs_hash none)
{
	kvs_block_info bi;
	kvs_evict_result res;

	if (CHECK_RC(kvs_inspect(ctl, 0, a[3], &bi), 0)) {
		CHECK_EQ(bi.ns, 1);
		CHECK_EQ(bi.state, KVS_STATE_READY);
		CHECK_EQ(bi.tier, KVS_TIER_HOST);
		CHECK(bi.has_parent && same(bi.parent, a[2]));
		CHECK_EQ(bi.depth, 4);
		CHECK_EQ(bi.hits, 2);
		CHECK_EQ(bi.refs, 0);
		CHECK_EQ(bi.children, 0);
		CHECK(!bi.pinned);
		CHECK_LE(bi.age_s, 5);
	}
	if (CHECK_RC(kvs_inspect(ctl, 1, a[1], &bi), 0))
		CHECK_EQ(bi.children, 2);
	CHECK_RC(kvs_inspect(ctl, 0, none, &bi), -ENOENT);
	CHECK_RC(kvs_inspect(w, 0, a[0], &bi), 0); /* own namespace */
	CHECK_RC(kvs_evict(w, KVS_SCOPE_ALL, 0, none, 1, &res), -EPERM);
	CHECK_RC(kvs_pin(w, 0, a, 4), -EPERM);
}

/* PIN, then EVICT of every scope: all, a prefix, a namespace. */
static void api_pin_evict(kvs_client *w, kvs_client *ctl, const kvs_hash *a,
			  const kvs_hash *b, kvs_hash none)
{
	kvs_block_info bi;
	kvs_evict_result res;

	/* pin, then flush everything: the pinned chain stays */
	CHECK_RC(kvs_pin(ctl, 0, a, 4), 4);
	CHECK_RC(kvs_pin(ctl, 0, a, 4), 4); /* again: no change */
	if (CHECK_RC(kvs_inspect(ctl, 0, a[2], &bi), 0)) {
		CHECK(bi.pinned);
		CHECK_EQ(bi.refs, 1);
	}
	CHECK_EQ(th_stat_get(&d, "pins.blocks"), 4);
	CHECK_RC(kvs_evict(ctl, KVS_SCOPE_ALL, 0, none, 1, &res), 0);
	CHECK_EQ(res.freed, 2);
	CHECK_EQ(res.pinned, 4);
	CHECK_EQ(res.kept, 0);
	CHECK_RC(th_probe(w, a, 4), 4);
	CHECK_RC(th_probe(w, b, 4), 2);
	CHECK_RC(kvs_unpin(ctl, 0, a, 4), 4);
	CHECK_EQ(th_stat_get(&d, "pins.blocks"), 0);
	/* prefix: a[2] and what is under it */
	CHECK_RC(kvs_evict(ctl, KVS_SCOPE_PREFIX, 0, a[2], 1, &res), 0);
	CHECK_EQ(res.freed, 2);
	CHECK_RC(th_probe(w, a, 4), 2);
	CHECK_RC(kvs_evict(ctl, KVS_SCOPE_PREFIX, 0, a[2], 1, &res), -ENOENT);
	/* namespace: the rest */
	CHECK_RC(kvs_evict(ctl, KVS_SCOPE_NAMESPACE, 1, none, 0, &res), 0);
	CHECK_EQ(res.freed, 2);
	CHECK_RC(th_probe(w, a, 4), 0);
	CHECK_RC(kvs_evict(ctl, KVS_SCOPE_NAMESPACE, 9, none, 0, &res), -ENOENT);
}

/* The same story from the watcher, in order; then the watch is closed. */
static void api_watch_story(kvs_watch *watch, const kvs_hash *a,
			    const kvs_hash *b)
{
	uint64_t seq = 0;
	kvs_event ev;

	for (int i = 0; i < 4; i++)
		expect_event(watch, KVS_EV_STORED, a[i], &seq);
	expect_event(watch, KVS_EV_STORED, b[2], &seq);
	expect_event(watch, KVS_EV_STORED, b[3], &seq);
	for (int i = 0; i < 4; i++)
		expect_event(watch, KVS_EV_PINNED, a[i], &seq);
	expect_event(watch, KVS_EV_FLUSHED, b[3], &seq);
	expect_event(watch, KVS_EV_FLUSHED, b[2], &seq);
	for (int i = 0; i < 4; i++)
		expect_event(watch, KVS_EV_UNPINNED, a[i], &seq);
	expect_event(watch, KVS_EV_FLUSHED, a[3], &seq);
	expect_event(watch, KVS_EV_FLUSHED, a[2], &seq);
	expect_event(watch, KVS_EV_EVICTED, a[1], &seq);
	expect_event(watch, KVS_EV_EVICTED, a[0], &seq);
	CHECK_RC(kvs_watch_next(watch, &ev, 50), 0);
	CHECK_EQ(kvs_watch_dropped(watch), 0);
	CHECK_EQ(th_stat_get(&d, "events.subscribers"), 1);
	kvs_watch_close(watch);
	CHECK(th_wait_stat(&d, "events.subscribers", 0, TH_WAIT_MS));
	CHECK_EQ(th_stat_get(&d, "events.dropped"), 0);
}

static void api(void)
{
	kvs_layout l = th_layout("admin-model", BT);
	kvs_hash a[4], b[4], none = { 1, 2 };
	kvs_client *w, *ctl;
	kvs_watch *watch;

	CHECK_RC(kvs_watch_open(d.socket, &watch), 0);
	w = th_connect(&d, &l);
	ctl = th_connect(&d, NULL);
	th_chain(&l, 1, 4, 0, 0, a);
	th_chain(&l, 1, 2, 7, 2, b); /* shares a[0], a[1] */
	CHECK(same(a[1], b[1]) && !same(a[2], b[2]));
	CHECK_RC(th_publish(w, a, 4, NULL), 4);
	CHECK_RC(th_publish(w, b, 4, NULL), 2);
	CHECK_RC(th_probe(w, a, 4), 4);
	CHECK_RC(th_probe(w, a, 4), 4);
	CHECK_RC(th_probe(w, b, 4), 4);

	api_list(ctl, a, b);
	api_inspect(w, ctl, a, none);
	api_pin_evict(w, ctl, a, b, none);
	api_watch_story(watch, a, b);
	kvs_close(ctl);
	kvs_close(w);
}

/* Pins outlive their connection and survive pressure; the share is bounded.
 * Tier 4 MiB = 256 blocks of 16 KiB; 10% share = 25 blocks. */
static void pins(void)
{
	kvs_layout l = th_layout("pin-model", BT);
	static kvs_hash p[10], big[30], other[64];
	kvs_client *w = th_connect(&d, &l), *ctl = th_connect(&d, NULL);
	size_t bad = 1;

	th_chain(&l, 100, 10, 0, 0, p);
	th_chain(&l, 200, 30, 0, 0, big);
	CHECK_RC(th_publish(w, p, 10, NULL), 10);
	CHECK_RC(th_publish(w, big, 30, NULL), 30);
	CHECK_RC(kvs_pin(ctl, 0, big, 30), KVS_E_LIMIT);
	CHECK_RC(kvs_pin(ctl, 0, p, 10), 10);
	kvs_close(ctl); /* pins are not leases */
	for (uint64_t s = 0; s < 40; s++) {
		th_chain(&l, 1000 + s, 64, 0, 0, other);
		CHECK_GE(th_publish(w, other, 64, NULL), 0);
	}
	CHECK_GT(th_stat_get(&d, "blocks.evicted"), 200);
	CHECK_RC(th_verify(w, p, 10, &bad), 10);
	CHECK_EQ(bad, 0);
	ctl = th_connect(&d, NULL);
	CHECK_RC(kvs_unpin(ctl, 0, p, 10), 10);
	CHECK_EQ(th_stat_get(&d, "pins.bytes"), 0);
	kvs_close(ctl);
	kvs_close(w);
}

/* kvsctl with --json, parsed by python3. */
static void cli(void)
{
	kvs_layout l = th_layout("cli-model", BT);
	const char *ctl = getenv("KVSCTL");
	kvs_hash h[3];
	char hx[3][33], path[256], tok[256];
	kvs_client *w = th_connect(&d, &l);
	uint32_t tokens[3 * BT];
	FILE *f;

	th_tokens(tokens, 3 * BT, 55);
	CHECK_EQ(kvs_hash_tokens(w, tokens, 3 * BT, h, 3), 3);
	CHECK_RC(th_publish(w, h, 3, NULL), 3);
	CHECK_RC(th_probe(w, h, 3), 3);
	for (int i = 0; i < 3; i++)
		kvs_hash_format(h[i], hx[i]);
	snprintf(path, sizeof(path), "%s/hashes", d.dir);
	f = fopen(path, "w");
	fprintf(f, "# a chain\n%s\n%s\n%s\n", hx[0], hx[1], hx[2]);
	fclose(f);
	snprintf(tok, sizeof(tok), "%s/tokens", d.dir);
	f = fopen(tok, "w");
	for (int i = 0; i < 3 * BT; i++)
		fprintf(f, "%u%s", tokens[i], i % 8 == 7 ? "\n" : ", ");
	fclose(f);

#define PY "python3 -c 'import json,sys; d=json.load(sys.stdin); "
	CHECK_RC(sh("%s --socket %s ls --json | " PY
		    "n=[x for x in d[\"namespaces\"] if x[\"model\"]==\"cli-model\"][0]; "
		    "assert n[\"blocks\"]==3 and n[\"trees\"]==dict(roots=1,longest_chain=3), n; "
		    "assert n[\"top_prefixes\"][0][\"hash\"]==\"%s\", n; "
		    "assert n[\"top_prefixes\"][0][\"hits\"]==1 and n[\"block_bytes\"]==%d'",
		    ctl, d.socket, hx[2], 1024 * BT), 0);
	CHECK_RC(sh("%s --socket %s inspect --json %s | " PY
		    "assert d[\"parent\"]==\"%s\" and d[\"depth\"]==3 and "
		    "d[\"state\"]==\"ready\" and d[\"tier\"]==\"host\" and "
		    "d[\"hits\"]==1 and not d[\"pinned\"], d'",
		    ctl, d.socket, hx[2], hx[1]), 0);
	/* pin by tokens: the same chain as the hashes */
	CHECK_RC(sh("%s --socket %s pin --json --tokens %s --model cli-model "
		    "--layers %u --kv-heads %u --head-dim %u --block-tokens %u | " PY
		    "assert d==dict(blocks=3,chain=3), d'", ctl, d.socket, tok,
		    l.layers, l.kv_heads, l.head_dim, l.block_tokens), 0);
	CHECK_RC(sh("%s --socket %s inspect --json %s | " PY "assert d[\"pinned\"]'",
		    ctl, d.socket, hx[0]), 0);
	CHECK_RC(sh("%s --socket %s flush --json --prefix %s | " PY
		    "assert d==dict(freed=0,skipped_pinned=3,skipped_prefix=0), d'",
		    ctl, d.socket, hx[0]), 0);
	CHECK_RC(sh("%s --socket %s unpin --json --hashes %s | " PY
		    "assert d==dict(blocks=3,chain=3), d'", ctl, d.socket, path), 0);
	CHECK_RC(sh("%s --socket %s evict --json --prefix %s | " PY
		    "assert d==dict(freed=2,skipped_pinned=0,skipped_prefix=0), d'",
		    ctl, d.socket, hx[1]), 0);
	CHECK_RC(th_probe(w, h, 3), 1);
	/* errors: exit 1 and the message; usage: exit 2; --help: 0 */
	CHECK_RC(sh("%s --socket %s inspect %s 2>&1 >/dev/null | grep -qx "
		    "'kvsctl: inspect failed: block %s is not cached (in any namespace)'",
		    ctl, d.socket, hx[2], hx[2]), 0);
	CHECK_RC(sh("%s --socket %s inspect --namespace 1 %s 2>&1 >/dev/null | grep -qx "
		    "'kvsctl: inspect failed: block %s is not cached (in namespace 1)'",
		    ctl, d.socket, hx[2], hx[2]), 0);
	CHECK_RC(sh("%s --socket %s inspect %s >/dev/null 2>&1", ctl, d.socket,
		    hx[2]), 1);
	CHECK_RC(sh("%s --socket %s/nothing.sock ls >/dev/null 2>&1", ctl, d.dir), 1);
	CHECK_RC(sh("%s evict >/dev/null 2>&1", ctl), 2);
	CHECK_RC(sh("%s inspect nothex >/dev/null 2>&1", ctl), 2);
	for (const char *c = "ls inspect evict flush pin unpin watch"; *c;) {
		char name[16];
		size_t len = strcspn(c, " ");

		snprintf(name, sizeof(name), "%.*s", (int)len, c);
		CHECK_RC(sh("%s %s --help 2>&1 | grep -q '^usage: kvsctl'", ctl, name), 0);
		c += len + (c[len] == ' ');
	}
	kvs_close(w);
}

int main(void)
{
	th_init("test_admin");
	/* Both are required: a run without them would pass on the API checks
	 * alone. */
	if (!getenv("KVSCTL") || access(getenv("KVSCTL"), X_OK) != 0)
		th_skip("$KVSCTL is not set to the built kvsctl (ctest sets it): "
			"nothing tested");
	if (system("command -v python3 >/dev/null") != 0)
		th_fatal("python3 is required (scripts/deps.sh installs it) to "
			 "parse kvsctl --json");
	th_daemon_up(&d, TH_ARGS("--host-size", "4M", "--max-pinned-share", "10"));
	api();
	pins();
	cli();
	return th_finish();
}
