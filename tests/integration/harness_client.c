/*
 * harness_client.c - the integration-test harness: clients, stats, and the
 * blocks tests store (see harness_client.h).
 */
#include "harness_client.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- clients and stats ---------------------------------------------------- */

kvs_client *th_connect(const th_daemon *d, const kvs_layout *layout)
{
	kvs_client *c = NULL;
	int rc = kvs_connect(d->socket, layout, &c);

	if (rc)
		th_fatal("kvs_connect(%s, %s): %s", d->socket,
			 layout ? layout->model : "control", kvs_strerror(rc));
	return c;
}

/* Stats text through the control client; reconnects once after a restart. */
static int stats_text(th_daemon *d, char **text)
{
	int rc;

	if (d->ctl && d->ctl_owner != getpid())
		d->ctl = NULL; /* inherited from the parent: its fd is closed */
	if (!d->ctl) {
		rc = kvs_connect(d->socket, NULL, &d->ctl);
		if (rc) {
			d->ctl = NULL;
			return rc;
		}
		d->ctl_owner = getpid();
	}
	rc = kvs_stats(d->ctl, text);
	if (rc == KVS_E_DISCONNECTED) {
		rc = kvs_reconnect(d->ctl);
		if (rc == 0)
			rc = kvs_stats(d->ctl, text);
	}
	return rc;
}

int th_stat(th_daemon *d, const char *name, int64_t *value)
{
	char *text = NULL;
	int rc = stats_text(d, &text);

	if (rc)
		return rc;
	rc = kvs_stats_value(text, name, value);
	free(text);
	return rc;
}

int64_t th_stat_get(th_daemon *d, const char *name)
{
	int64_t v;
	int rc = th_stat(d, name, &v);

	if (rc) {
		th_note("stat %s: %s", name, kvs_strerror(rc));
		return INT64_MIN;
	}
	return v;
}

bool th_wait_stat(th_daemon *d, const char *name, int64_t expected,
		  int timeout_ms)
{
	int64_t deadline = th_now_ms() + timeout_ms;
	int64_t v = 0;
	int rc;

	for (;;) {
		rc = th_stat(d, name, &v);
		if (rc == 0 && v == expected)
			return true;
		if (th_now_ms() > deadline)
			break;
		th_poll_pause();
	}
	if (rc)
		th_note("wait_stat %s: %s", name, kvs_strerror(rc));
	else
		th_note("wait_stat %s: still %lld after %d ms, expected %lld", name,
			(long long)v, timeout_ms, (long long)expected);
	return false;
}

void th_stats_take(th_daemon *d, th_stats *s)
{
	int rc = stats_text(d, &s->text);

	if (rc)
		th_fatal("stats: %s", kvs_strerror(rc));
}

void th_stats_free(th_stats *s)
{
	free(s->text);
	s->text = NULL;
}

int64_t th_stats_val(const th_stats *s, const char *name)
{
	int64_t v;

	if (kvs_stats_value(s->text, name, &v) != 0) {
		th_note("stat %s is missing from the stats text", name);
		return INT64_MIN;
	}
	return v;
}

int64_t th_stats_delta(const th_stats *before, const th_stats *after,
		       const char *name)
{
	int64_t a = th_stats_val(before, name), b = th_stats_val(after, name);

	if (a == INT64_MIN || b == INT64_MIN)
		return INT64_MIN;
	return b - a;
}

/* ---- layouts, tokens, hashes, block contents ------------------------------- */

kvs_layout th_layout(const char *model, uint32_t block_tokens)
{
	kvs_layout l = {
		.model = model,
		.layers = 2,
		.kv_heads = 2,
		.head_dim = 64,
		.block_tokens = block_tokens,
		.tp_rank = 0,
		.tp_size = 1,
		.dtype = KVS_DTYPE_FP16,
	};
	return l;
}

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void th_tokens(uint32_t *out, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x2545f4914f6cdd1dull + 1;

	for (size_t i = 0; i < n; i++)
		out[i] = (uint32_t)(splitmix64(&x) % 128000);
}

size_t th_chain(const kvs_layout *l, uint64_t prefix_seed, size_t nprefix,
		uint64_t suffix_seed, size_t nsuffix, kvs_hash *out)
{
	size_t bt = l->block_tokens, n = nprefix + nsuffix, got;
	uint32_t *tok = malloc((n ? n : 1) * bt * sizeof(*tok));

	if (!tok)
		th_fatal("out of memory");
	th_tokens(tok, nprefix * bt, prefix_seed);
	th_tokens(tok + nprefix * bt, nsuffix * bt, suffix_seed);
	got = kvs_hash_chain(kvs_hash_layout_seed(l), l->block_tokens, tok,
			     n * bt, out, n);
	free(tok);
	if (got != n)
		th_fatal("kvs_hash_chain made %zu hashes, expected %zu", got, n);
	return n;
}

static uint64_t pattern_seed(kvs_hash h, uint64_t salt)
{
	return h.lo ^ (h.hi << 32 | h.hi >> 32) ^ (salt * 0xd6e8feb86659fd93ull);
}

void th_pattern_fill(void *dst, size_t len, kvs_hash h, uint64_t salt)
{
	uint64_t x = pattern_seed(h, salt), v;
	uint8_t *p = dst;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		v = splitmix64(&x);
		memcpy(p + i, &v, 8);
	}
	if (i < len) {
		v = splitmix64(&x);
		memcpy(p + i, &v, len - i);
	}
}

long th_pattern_check(const void *src, size_t len, kvs_hash h, uint64_t salt)
{
	uint64_t x = pattern_seed(h, salt), v;
	const uint8_t *p = src;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		v = splitmix64(&x);
		if (memcmp(p + i, &v, 8))
			return (long)i;
	}
	if (i < len) {
		v = splitmix64(&x);
		if (memcmp(p + i, &v, len - i))
			return (long)i;
	}
	return -1;
}

int th_publish_salted(kvs_client *c, const kvs_hash *h, size_t n,
		      kvs_block *blocks, uint64_t salt)
{
	kvs_block *b = blocks ? blocks : calloc(n ? n : 1, sizeof(*b));
	uint64_t bb = kvs_block_bytes(c);
	kvs_lease lease = 0;
	int nnew, filled = 0, rc;

	if (!b)
		return -ENOMEM;
	nnew = kvs_reserve(c, h, n, &lease, b);
	if (nnew < 0) {
		rc = nnew;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		void *p;

		if (b[i].status != KVS_BLOCK_NEW)
			continue;
		p = kvs_block_ptr(c, &b[i]);
		if (!p) {
			th_note("publish: NEW block %zu (offset %llu) has no pointer",
				i, (unsigned long long)b[i].offset);
			continue;
		}
		th_pattern_fill(p, bb, h[i], salt);
		filled++;
	}
	if (!lease) {
		rc = nnew ? KVS_E_INTERNAL : 0;
		if (nnew)
			th_note("publish: %d NEW blocks but no lease", nnew);
		goto out;
	}
	if (filled != nnew) {
		th_note("publish: reserve said %d NEW, %d had the NEW status and a pointer",
			nnew, filled);
		kvs_abort(c, lease);
		rc = KVS_E_INTERNAL;
		goto out;
	}
	rc = kvs_commit(c, lease);
	if (rc >= 0 && rc != nnew) {
		th_note("publish: commit published %d blocks, reserve gave %d", rc, nnew);
		rc = KVS_E_INTERNAL;
	}
out:
	if (b != blocks)
		free(b);
	return rc;
}

int th_publish(kvs_client *c, const kvs_hash *h, size_t n, kvs_block *blocks)
{
	return th_publish_salted(c, h, n, blocks, 0);
}

int th_verify_salted(kvs_client *c, const kvs_hash *h, size_t n, size_t *bad,
		     uint64_t salt)
{
	kvs_block *b = calloc(n ? n : 1, sizeof(*b));
	uint64_t bb = kvs_block_bytes(c);
	kvs_lease lease = 0;
	size_t nbad = 0;
	int hits, rc;

	if (!b)
		return -ENOMEM;
	hits = kvs_lookup(c, h, n, &lease, b);
	for (int i = 0; i < hits; i++) {
		const void *p = kvs_block_ptr(c, &b[i]);
		long off = p ? th_pattern_check(p, bb, h[i], salt) : 0;

		if (!p || off >= 0 || b[i].status != KVS_BLOCK_HIT) {
			th_note("verify: block %d (offset %llu): %s", i,
				(unsigned long long)b[i].offset,
				!p ? "no pointer" : off >= 0 ? "wrong bytes" : "status not HIT");
			nbad++;
		}
	}
	rc = hits;
	if (hits > 0 && !lease) {
		th_note("verify: %d hits but no lease", hits);
		rc = KVS_E_INTERNAL;
	}
	if (lease) {
		int r = kvs_release(c, lease);

		if (r < 0)
			rc = r;
	}
	free(b);
	if (bad)
		*bad = nbad;
	return rc;
}

int th_verify(kvs_client *c, const kvs_hash *h, size_t n, size_t *bad)
{
	return th_verify_salted(c, h, n, bad, 0);
}

bool th_round_trip(kvs_client *c, const kvs_layout *l, uint64_t seed, size_t n)
{
	kvs_hash h[64];
	size_t bad = 1;

	if (!CHECK(n > 0 && n <= 64))
		return false;
	th_chain(l, seed, n, 0, 0, h);
	return CHECK_RC(th_publish(c, h, n, NULL), (long long)n) &&
	       CHECK_RC(th_verify(c, h, n, &bad), (long long)n) &&
	       CHECK_EQ(bad, 0);
}

int th_probe(kvs_client *c, const kvs_hash *h, size_t n)
{
	kvs_block *b = calloc(n ? n : 1, sizeof(*b));
	kvs_lease lease = 0;
	int hits;

	if (!b)
		return -ENOMEM;
	hits = kvs_lookup(c, h, n, &lease, b);
	if (lease) {
		int r = kvs_release(c, lease);

		if (r < 0)
			hits = r;
	}
	free(b);
	return hits;
}

int th_mapping_of(const void *addr, size_t len, th_mapping *m)
{
	uintptr_t a = (uintptr_t)addr;
	char line[512];
	FILE *f = fopen("/proc/self/maps", "re");
	int rc = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end, off, inode;
		char perms[8], path[256] = "";
		int n = sscanf(line, "%lx-%lx %7s %lx %*s %lu %255[^\n]", &start, &end,
			       perms, &off, &inode, path);

		if (n < 5 || a < start || a >= end)
			continue;
		if (a + len > end)
			break;
		m->start = start;
		m->end = end;
		m->file_offset = off;
		m->inode = inode;
		m->writable = perms[1] == 'w';
		m->shared = perms[3] == 's';
		snprintf(m->path, sizeof(m->path), "%s", path);
		rc = 0;
		break;
	}
	fclose(f);
	return rc;
}
