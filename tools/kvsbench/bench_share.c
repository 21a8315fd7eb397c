/*
 * bench_share.c - `kvsbench share`: N worker processes with one shared
 * prompt prefix and private suffixes. Worker 1 runs alone and publishes;
 * workers 2..N then run at once and should find the whole shared prefix.
 * Every byte of every hit is checked against a pattern derived from the
 * block's hash, so a hit that serves the wrong KV, or KV scribbled on after
 * commit, is caught and counted.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_proc.h"
#include "bench_share_int.h"
#include "bench_util.h"

static uint64_t pattern_seed(kvs_hash h)
{
	return h.lo ^ (h.hi << 23 | h.hi >> 41);
}

/* The expected contents of a block: a function of its hash alone. */
static void pattern_fill(uint8_t *p, uint64_t n, kvs_hash h)
{
	uint64_t s = pattern_seed(h), i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t v = kvsb_splitmix64(&s);
		memcpy(p + i, &v, 8);
	}
	if (i < n) {
		uint64_t v = kvsb_splitmix64(&s);
		memcpy(p + i, &v, n - i);
	}
}

static int pattern_check(const uint8_t *p, uint64_t n, kvs_hash h)
{
	uint64_t s = pattern_seed(h), i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t v = kvsb_splitmix64(&s);
		if (memcmp(p + i, &v, 8))
			return -1;
	}
	if (i < n) {
		uint64_t v = kvsb_splitmix64(&s);
		if (memcmp(p + i, &v, n - i))
			return -1;
	}
	return 0;
}

/* Set r->where to @name and pass @rc through: the step that failed. */
static int fail_at(struct report *r, const char *name, int rc)
{
	snprintf(r->where, sizeof(r->where), "%s", name);
	return rc;
}

/* The blocks' expected bytes computed privately (RAG mode's @scratch): the
 * time an engine takes to prefill KV it cannot get from the cache. */
static void compute_privately(uint8_t *scratch, uint64_t bb, const kvs_hash *h,
			      int from, int to)
{
	for (int i = from; scratch && i < to; i++)
		pattern_fill(scratch, bb, h[i]);
}

/*
 * Read the chain h[0..n) window by window: look up h[k..k+W), verify every
 * hit's bytes, release, and go on while the whole window hit. A hash names
 * its whole prefix, so a window is found by its own hashes, and a reader of
 * a chain longer than the host tier pins one window at a time (promoting it
 * from SSD as needed). Returns the number of leading blocks that hit, or an
 * error.
 */
static int read_windows(const struct share_opts *o, kvs_client *c,
			const kvs_hash *h, int n, kvs_block *b, unsigned idx,
			struct report *r)
{
	uint64_t bb = kvs_block_bytes(c);
	int k = 0, rc;

	while (k < n) {
		int len = n - k < (int)o->window ? n - k : (int)o->window, hits;
		kvs_lease lease;

		rc = kvs_lookup(c, h + k, (size_t)len, &lease, b + k);
		if (rc < 0)
			return fail_at(r, "lookup", rc);
		hits = rc;
		for (int i = k; i < k + hits; i++) {
			const uint8_t *p = kvs_block_ptr(c, &b[i]);

			if (!p || pattern_check(p, bb, h[i]) < 0) {
				fprintf(stderr, "kvsbench: worker %u: block %d %s\n",
					idx, i, p ? "corrupt" :
					"not readable in the host tier");
				r->corrupt_blocks++;
			} else {
				r->verified_bytes += bb;
			}
		}
		/* RAG mode sends the release ahead of the next request, as a
		 * worker that issues many requests would; plain share keeps
		 * its round trip. */
		rc = o->rag ? kvs_release_nowait(c, lease) : kvs_release(c, lease);
		if (rc < 0)
			return fail_at(r, "release", rc);
		/* A window cut short ends the read: a miss, or no room to
		 * promote the rest now; either way one lookup per request
		 * when the chain fits in one window, as without windows. */
		k += hits;
		if (hits < len)
			break;
	}
	return k;
}

/*
 * Publish the chain h[0..n) window by window: reserve h[0..end) (always the
 * chain from block 0, as kvs_reserve() requires), write every NEW block of
 * the answer, commit, and move on. The blocks of earlier windows answer
 * EXISTS, or NEW again when they were evicted meanwhile (they are written
 * again, never committed unwritten). Committed blocks can leave host RAM
 * for the SSD tier to make room for the next window, so a chain longer than
 * the host tier goes through. A window cut short by FULL is committed and
 * the next one starts at the first FULL block; FULL with no progress at all
 * (every evictable block is pinned), or BUSY (another writer has the rest),
 * ends the chain: those blocks are counted, not a failure. @hits: the
 * leading blocks the read found. With @scratch (RAG mode) the worker
 * computes the blocks it does not write privately, as an engine must.
 */
static int write_windows(const struct share_opts *o, kvs_client *c,
			 const kvs_hash *h, int n, int hits, kvs_block *b,
			 uint8_t *scratch, struct report *r)
{
	uint64_t bb = kvs_block_bytes(c);
	/* Each round with progress commits a block; evictions by others
	 * can undo that, so the rounds are bounded all the same. */
	int k = 0, rc, rounds = 2 * n + 2;

	while (k < n) {
		int end = n - k < (int)o->window ? n : k + (int)o->window;
		int fresh = 0, stop = end, from;
		kvs_lease lease;

		rc = kvs_reserve(c, h, (size_t)end, &lease, b);
		if (rc == KVS_E_FULL) {
			/* No answer per block: the hits exist, the rest is FULL. */
			from = hits > k ? hits : k;
			r->exists_blocks += (uint64_t)(from - k);
			r->full_blocks += (uint64_t)(n - from);
			compute_privately(scratch, bb, h, from, n);
			return 0;
		}
		if (rc < 0)
			return fail_at(r, "reserve", rc);
		for (int i = 0; i < end && stop == end; i++) {
			uint8_t *p;

			switch (b[i].status) {
			case KVS_BLOCK_NEW:
				p = kvs_block_ptr(c, &b[i]);
				if (!p) {
					kvs_abort(c, lease);
					return fail_at(r, "write", -ERANGE);
				}
				pattern_fill(p, bb, h[i]);
				r->new_blocks++;
				fresh++;
				break;
			case KVS_BLOCK_EXISTS:
				r->exists_blocks += i >= k; /* once per block */
				break;
			default: /* BUSY or FULL: so is the rest of the chain */
				stop = i;
				break;
			}
		}
		if (lease && (rc = kvs_commit(c, lease)) < 0)
			return fail_at(r, "commit", rc);
		if (stop == end) {
			k = end;
			continue;
		}
		if (b[stop].status == KVS_BLOCK_FULL && fresh > 0 && --rounds > 0) {
			k = stop; /* committed blocks can move down now */
			continue;
		}
		from = stop > k ? stop : k;
		if (b[stop].status == KVS_BLOCK_BUSY)
			r->busy_blocks += (uint64_t)(n - from);
		else
			r->full_blocks += (uint64_t)(n - from);
		compute_privately(scratch, bb, h, from, n);
		return 0;
	}
	return 0;
}

/*
 * One request's cache traffic for the chain h[0..n): read it (verifying every
 * hit's bytes), then publish what is missing; both a window at a time.
 * Counts into @r (adding to what is there). BUSY and FULL blocks are only
 * counted: nobody waits for another writer, and a cache with no room left
 * is a figure of the run, not a failure of the worker.
 */
static int share_request(const struct share_opts *o, kvs_client *c,
			 const kvs_hash *h, int n, kvs_block *b, unsigned idx,
			 uint8_t *scratch, struct report *r)
{
	double t0 = now_s();
	int rc, hits;

	r->blocks += (uint64_t)n;
	rc = hits = read_windows(o, c, h, n, b, idx, r);
	if (rc < 0)
		return rc;
	r->hit_blocks += (uint64_t)hits;
	r->miss_blocks += (uint64_t)(n - hits);
	r->lookup_s += now_s() - t0;

	t0 = now_s();
	rc = write_windows(o, c, h, n, hits, b, scratch, r);
	r->write_s += now_s() - t0;
	return rc;
}

static int share_worker(const struct share_opts *o, unsigned idx,
			struct report *r)
{
	size_t ntok = (size_t)o->prefix + o->suffix, nb;
	uint32_t *tok = malloc(ntok * sizeof(*tok) + 1);
	kvs_hash *h = NULL;
	kvs_block *b = NULL;
	kvs_client *c = NULL;
	int rc, n;

	r->worker = idx;
	r->requests = 1;
	if (!tok) {
		rc = fail_at(r, "alloc", -ENOMEM);
		goto out;
	}
	kvsb_tokens(tok, o->prefix, PREFIX_SEED, VOCAB);
	kvsb_tokens(tok + o->prefix, o->suffix,
		    SUFFIX_SEED ^ ((uint64_t)idx << 32), VOCAB);
	r->prompt_tokens = ntok;
	rc = kvs_connect(o->sock, &o->layout, &c);
	if (rc < 0) {
		fail_at(r, "connect", rc);
		goto out;
	}
	nb = ntok / o->layout.block_tokens;
	h = calloc(nb + 1, sizeof(*h));
	b = calloc(nb + 1, sizeof(*b));
	if (!h || !b) {
		rc = fail_at(r, "alloc", -ENOMEM);
		goto out;
	}
	rc = n = kvs_hash_tokens(c, tok, ntok, h, nb);
	if (rc < 0) {
		fail_at(r, "hash", rc);
		goto out;
	}
	rc = share_request(o, c, h, n, b, idx, NULL, r);
out:
	if (rc < 0)
		fprintf(stderr, "kvsbench: worker %u: %s failed: %s\n", idx,
			r->where, kvs_strerror(rc));
	r->rc = rc < 0 ? rc : 0;
	kvs_close(c);
	free(tok);
	free(h);
	free(b);
	return r->rc;
}

static int cmp_unsigned(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;

	return (x > y) - (x < y);
}

/*
 * RAG mode: @o->requests requests on one connection. The k documents of a
 * request are a uniform random subset of the pool (a partial Fisher-Yates
 * shuffle of a permutation the worker keeps), drawn from a stream that
 * depends only on --seed and the worker, so that --order sorted and random
 * see the same subsets, in a different order.
 */
static int rag_worker(const struct share_opts *o, unsigned idx,
		      struct report *r)
{
	size_t ntok = (size_t)o->prefix + (size_t)o->per_req * o->doc_tokens +
		      o->suffix, nb = ntok / o->layout.block_tokens;
	uint32_t *tok = malloc(ntok * sizeof(*tok) + 1);
	unsigned *perm = malloc(o->docs * sizeof(*perm));
	unsigned *pick = malloc(o->per_req * sizeof(*pick));
	kvs_hash *h = calloc(nb + 1, sizeof(*h));
	kvs_block *b = calloc(nb + 1, sizeof(*b));
	uint64_t draw = DRAW_SEED ^ o->seed ^ ((uint64_t)idx << 40);
	uint8_t *scratch = malloc(kvs_layout_block_bytes(&o->layout));
	kvs_client *c = NULL;
	int rc = 0, n;

	r->worker = idx;
	if (!tok || !perm || !pick || !h || !b || !scratch) {
		rc = fail_at(r, "alloc", -ENOMEM);
		goto out;
	}
	rc = kvs_connect(o->sock, &o->layout, &c);
	if (rc < 0) {
		fail_at(r, "connect", rc);
		goto out;
	}
	kvsb_tokens(tok, o->prefix, PREFIX_SEED, VOCAB);
	for (unsigned d = 0; d < o->docs; d++)
		perm[d] = d;
	for (unsigned q = 0; q < o->requests && rc >= 0; q++) {
		uint32_t *t = tok + o->prefix;

		for (unsigned j = 0; j < o->per_req; j++) {
			unsigned k = j + (unsigned)(kvsb_splitmix64(&draw) %
						   (o->docs - j)), x = perm[j];

			perm[j] = perm[k];
			perm[k] = x;
			pick[j] = perm[j];
		}
		if (o->sorted)
			qsort(pick, o->per_req, sizeof(*pick), cmp_unsigned);
		for (unsigned j = 0; j < o->per_req; j++, t += o->doc_tokens)
			memcpy(t, o->doc_tok + (size_t)pick[j] * o->doc_tokens,
			       o->doc_tokens * sizeof(*t));
		kvsb_tokens(t, o->suffix, SUFFIX_SEED ^ o->seed ^
			    ((uint64_t)idx << 32) ^ ((uint64_t)q << 8), VOCAB);
		rc = n = kvs_hash_tokens(c, tok, ntok, h, nb);
		if (rc < 0) {
			fail_at(r, "hash", rc);
			break;
		}
		rc = share_request(o, c, h, n, b, idx, scratch, r);
		r->requests++;
		r->prompt_tokens += ntok;
	}
out:
	if (rc < 0)
		fprintf(stderr, "kvsbench: worker %u: %s failed: %s\n", idx,
			r->where, kvs_strerror(rc));
	r->rc = rc < 0 ? rc : 0;
	kvs_close(c);
	free(tok);
	free(perm);
	free(pick);
	free(scratch);
	free(h);
	free(b);
	return r->rc;
}

/* The workers of one phase: worker first + idx, reporting into its slot. */
struct phase {
	const struct share_opts *o;
	unsigned first;
};

static int phase_worker(const void *vctx, unsigned idx, kvsb_gate *g,
			void *vres)
{
	const struct phase *p = vctx;
	struct report mine = { 0 };
	int rc;

	kvsb_gate_wait(g); /* nothing to set up: the whole worker is the run */
	if (p->o->rag)
		rc = rag_worker(p->o, p->first + idx, &mine);
	else
		rc = share_worker(p->o, p->first + idx, &mine);
	/* Whole or not at all: a worker that dies early leaves no report. */
	memcpy(vres, &mine, sizeof(mine));
	return rc;
}

unsigned kvsb_share_phase(const struct share_opts *o, unsigned first,
			  unsigned last, struct report *r)
{
	struct phase p = { o, first };
	unsigned n = last - first + 1;
	int failed = kvsb_clients_run(n, phase_worker, &p, r + first - 1,
				      sizeof(*r));

	if (failed < 0) {
		fprintf(stderr, "kvsbench: share: starting workers failed: %s\n",
			strerror(-failed));
		return n;
	}
	return (unsigned)failed;
}
