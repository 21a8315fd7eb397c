/*
 * test_replay_models - kvsbench replay's offline models (tools/
 * replay_models.c) on tiny traces whose answers are worked out by hand in
 * the comments, then on random traces against properties: LRU equals a
 * naive array LRU, and with one block per request (hits are then plain
 * block hits) Belady with bypass is never beaten by LRU, S3-FIFO or ARC.
 */
#include <errno.h>
#include <string.h>

#include "kvs_check.h"
#include "replay_models.h"

enum { MAXR = 4096, MAXIDS = 16384 };

static replay_req reqs[MAXR];
static uint64_t ids[MAXIDS];
static replay_trace tr;

/* A trace from "1 2 | 1 | 3" (ids, requests split by '|'); each request's
 * input is @tok tokens per block unless @input overrides the last. */
static void build(const char *s, uint32_t tok)
{
	memset(&tr, 0, sizeof(tr));
	tr.reqs = reqs;
	tr.ids = ids;
	reqs[0] = (replay_req){ 0, 0, 0 };
	for (const char *p = s;; p++) {
		if (*p == '|' || *p == 0) {
			replay_req *r = &reqs[tr.nreqs++];

			r->input = (uint64_t)r->n * tok;
			if (*p == 0)
				break;
			reqs[tr.nreqs] = (replay_req){ tr.nids, 0, 0 };
		} else if (*p >= '0' && *p <= '9') {
			ids[tr.nids++] = strtoull(p, (char **)&p, 10);
			reqs[tr.nreqs].n++;
			p--;
		}
	}
}

static uint64_t hits(replay_model m, uint64_t cap, uint32_t tok)
{
	replay_count c;

	CHECK_EQ(replay_model_run(m, &tr, cap, tok, &c), 0);
	return c.hit_tokens;
}

static void hand_made(void)
{
	/* Capacity 2, one block per request: 1 2 1 3 2 1.
	 * LRU: 1 hits at its 2nd use; 3 evicts 2, 2 evicts 1, 1 evicts 3: 1.
	 * Belady: 3 is never used again, so it bypasses; 2 and 1 hit: 3.
	 * S3-FIFO (small 1, main 1, ghost 1): 1 hits in small (freq 1); 3
	 * pushes 1 (freq 1, not > 1) to the ghost; 2 hits in small; 1 comes
	 * back from the ghost (a miss) into main, pushing 2 out: 2.
	 * ARC (p = 0): 1 hits, moves to T2; 3: T1 = {2} > p, 2 goes to B1;
	 * 2 is a B1 ghost (miss, p = 1), T2's 1 goes to B2; 1 is a B2 ghost
	 * (miss): 1. */
	build("1|2|1|3|2|1", 1);
	CHECK_EQ(hits(REPLAY_LRU, 2, 1), 1);
	CHECK_EQ(hits(REPLAY_BELADY, 2, 1), 3);
	CHECK_EQ(hits(REPLAY_S3FIFO, 2, 1), 2);
	CHECK_EQ(hits(REPLAY_ARC, 2, 1), 1);

	/* The counting: leading run only, clipped to input_length. Blocks of
	 * 2 tokens, capacity 3. [1 2 3] input 5 misses; again: 3 blocks, 6
	 * tokens, clipped to 5; [1 4]: 1 hits (2), 4 evicts 2 (the oldest);
	 * [5 3]: 3 is there but 5 is not: 0. Total 7 of 5 + 5 + 4 + 4. */
	build("1 2 3|1 2 3|1 4|5 3", 2);
	reqs[0].input = 5;
	reqs[1].input = 5;
	{
		replay_count c;

		CHECK_EQ(replay_model_run(REPLAY_LRU, &tr, 3, 2, &c), 0);
		CHECK_EQ(c.hit_tokens, 7);
		CHECK_EQ(c.input_tokens, 18);
		CHECK_EQ(c.hit_blocks, 4);
	}

	/* Belady's bypass: capacity 1, 1 2 1: 2 (never used again) is not
	 * cached, so 1 hits; LRU caches 2 and misses. */
	build("1|2|1", 1);
	CHECK_EQ(hits(REPLAY_BELADY, 1, 1), 1);
	CHECK_EQ(hits(REPLAY_LRU, 1, 1), 0);
	/* Belady's eviction: capacity 2, 1 2 3 3 2 1: 3 (next use at 3)
	 * replaces 1 (next use at 5, the furthest); 3 and 2 hit, 1 misses. */
	build("1|2|3|3|2|1", 1);
	CHECK_EQ(hits(REPLAY_BELADY, 2, 1), 2);
	/* A request longer than the cache evicts its own first blocks. */
	build("1 2 3|1 2 3", 1);
	CHECK_EQ(hits(REPLAY_LRU, 2, 1), 0);
	CHECK_EQ(hits(REPLAY_BELADY, 2, 1), 2);

	CHECK_EQ(replay_model_run(REPLAY_LRU, &tr, 0, 1, &(replay_count){ 0 }),
		 -EINVAL);
}

/* The textbook LRU: an array ordered oldest first. */
static uint64_t naive_lru(uint64_t cap, uint32_t tok)
{
	static uint64_t c[MAXIDS];
	uint64_t n = 0, hit = 0;

	for (size_t i = 0; i < tr.nreqs; i++) {
		const replay_req *r = &reqs[i];
		uint64_t k = 0;

		for (; k < r->n; k++) {
			uint64_t j = 0;

			while (j < n && c[j] != ids[r->first + k])
				j++;
			if (j == n)
				break;
		}
		hit += k * tok < r->input ? k * tok : r->input;
		for (uint32_t b = 0; b < r->n; b++) {
			uint64_t x = ids[r->first + b], j = 0;

			while (j < n && c[j] != x)
				j++;
			if (j == n && n == cap)
				j = 0; /* the oldest goes */
			else if (j == n)
				n++;
			memmove(&c[j], &c[j + 1], (n - 1 - j) * sizeof(*c));
			c[n - 1] = x;
		}
	}
	return hit;
}

/* Chains that share prefixes, as a prompt trace does: each request takes
 * a prefix of one of a few chains and extends it with fresh ids. */
static void random_trace(int nreq, int single)
{
	static uint64_t chains[8][16];
	uint64_t next = 1000;

	memset(&tr, 0, sizeof(tr));
	tr.reqs = reqs;
	tr.ids = ids;
	for (int c = 0; c < 8; c++)
		for (int j = 0; j < 16; j++)
			chains[c][j] = (uint64_t)c * 100 + (uint64_t)j;
	for (int i = 0; i < nreq; i++) {
		replay_req *r = &reqs[tr.nreqs++];
		int c = rand() % 8, share = rand() % 8, extra = rand() % 4;

		*r = (replay_req){ tr.nids, 0, 0 };
		if (single) {
			ids[tr.nids++] = rand() % 3 ? (uint64_t)(rand() % 40)
						    : next++;
			r->n = 1;
		} else {
			for (int j = 0; j < share; j++)
				ids[tr.nids++] = chains[c][j];
			for (int j = 0; j < extra; j++)
				ids[tr.nids++] = next++;
			r->n = (uint32_t)(share + extra);
		}
		r->input = r->n * 4 - (r->n && rand() % 2);
	}
}

static void random_runs(void)
{
	for (int round = 0; round < 200; round++) {
		uint64_t cap = 1 + (uint64_t)(rand() % 40);

		random_trace(300, 0);
		CHECK_EQ(hits(REPLAY_LRU, cap, 4), naive_lru(cap, 4));
		random_trace(600, 1);
		{
			uint64_t best = hits(REPLAY_BELADY, cap, 1);

			CHECK(best >= hits(REPLAY_LRU, cap, 1));
			CHECK(best >= hits(REPLAY_S3FIFO, cap, 1));
			CHECK(best >= hits(REPLAY_ARC, cap, 1));
		}
	}
}

int main(void)
{
	srand((unsigned)kvs_test_seed("test_replay_models"));
	hand_made();
	random_runs();
	for (int m = 0; m < REPLAY_NMODELS; m++)
		CHECK(replay_model_name(m) != NULL);
	CHECK(replay_model_name(REPLAY_NMODELS) == NULL);
	return check_summary("test_replay_models");
}
