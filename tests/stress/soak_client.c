/*
 * soak_client - one client of tests/stress/soak.sh: until its deadline, a random mix
 * of lookup (every hit's bytes checked against the pattern of its hash, then
 * released or held for a while), reserve (every NEW block filled with its
 * pattern, then commit, abort, release or left for the disconnect), a
 * disconnect with leases held and a reconnect, and (rarely) an exit in the
 * middle of a write, as a crash would leave it.
 *
 *   soak_client SOCKET SECONDS SEED
 *
 * Prints one line "soak_client: ops N hits H bytes B corrupt C" on exit.
 * Exit status: 0 clean (also after a planned crash: 3), 1 corrupt bytes
 * seen, 2 an unexpected error. Public client API only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvshare.h"
#include "kvs_clock.h"

#define BT 16
#define MAX_CHAIN 8
#define PROMPTS 256  /* prompts of up to 8 blocks: 2048 distinct blocks */
#define HELD_MAX 4

static uint64_t rng;
static unsigned long long ops, hits, bytes, corrupt;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* The bytes of block @h: a stream seeded by the hash alone, so every writer
 * of the block writes the same and a reader knows what to expect. */
static uint64_t pattern_seed(kvs_hash h)
{
	uint64_t s = h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull);

	return s ? s : 1;
}

static void fill(uint8_t *p, size_t len, kvs_hash h)
{
	uint64_t s = pattern_seed(h);

	for (size_t i = 0; i + 8 <= len; i += 8) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		memcpy(p + i, &s, 8);
	}
}

static unsigned long long check(const uint8_t *p, size_t len, kvs_hash h)
{
	uint64_t s = pattern_seed(h), w;
	unsigned long long bad = 0;

	for (size_t i = 0; i + 8 <= len; i += 8) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		memcpy(&w, p + i, 8);
		if (w != s)
			for (int b = 0; b < 8; b++)
				bad += ((w >> (8 * b)) & 0xff) != ((s >> (8 * b)) & 0xff);
	}
	return bad;
}

static size_t chain(const kvs_layout *l, kvs_hash *h)
{
	uint32_t tok[MAX_CHAIN * BT];
	uint32_t prompt = (uint32_t)(next() % PROMPTS);
	size_t n = 1 + next() % MAX_CHAIN;

	for (size_t i = 0; i < n * BT; i++)
		tok[i] = prompt * 100003u + (uint32_t)i;
	return kvs_hash_chain(kvs_hash_layout_seed(l), BT, tok, n * BT, h, MAX_CHAIN);
}

static void report(void)
{
	printf("soak_client: ops %llu hits %llu bytes %llu corrupt %llu\n", ops,
	       hits, bytes, corrupt);
	fflush(stdout);
}

/* An error that a healthy run may see. */
static int expected(int rc)
{
	return rc >= 0 || rc == KVS_E_FULL || rc == KVS_E_LIMIT;
}

/* A client's connection, the leases it holds for later, and the result of
 * its last call (what a failure reports). */
struct soak {
	kvs_client *c;
	kvs_lease held[HELD_MAX];
	int nheld, rc;
};

/* Lookup, check every hit's bytes, release now or later. Returns 0 on an
 * unexpected error. */
static int soak_lookup(struct soak *s, const kvs_hash *h, size_t n, size_t bb)
{
	kvs_block b[MAX_CHAIN];
	kvs_lease lease;

	s->rc = kvs_lookup(s->c, h, n, &lease, b);
	if (!expected(s->rc))
		return 0;
	for (int i = 0; i < s->rc; i++) {
		const uint8_t *p = kvs_block_ptr(s->c, &b[i]);

		if (!p) {
			/* Said: what the daemon answered is the clue. */
			fprintf(stderr, "soak_client: hit %d of %d (of %zu "
				"asked): no pointer: tier %u, offset %llu, "
				"gen %u, status %u\n", i, s->rc, n, b[i].tier,
				(unsigned long long)b[i].offset, b[i].gen,
				b[i].status);
			corrupt += bb;
			continue;
		}
		corrupt += check(p, bb, h[i]);
		bytes += bb;
	}
	hits += s->rc > 0 ? (unsigned)s->rc : 0;
	if (s->rc > 0 && s->nheld < HELD_MAX && next() % 4 == 0) {
		s->held[s->nheld++] = lease;
	} else if (s->rc > 0 && (s->rc = kvs_release(s->c, lease)) < 0) {
		return 0;
	}
	return 1;
}

/* Reserve, write, then one of four ends (or, rarely, exit as a crash
 * would). Returns 0 on an unexpected error. */
static int soak_reserve(struct soak *s, const kvs_hash *h, size_t n, size_t bb)
{
	uint64_t how = next() % 100;
	kvs_block b[MAX_CHAIN];
	kvs_lease lease;

	s->rc = kvs_reserve(s->c, h, n, &lease, b);
	if (!expected(s->rc))
		return 0;
	if (s->rc <= 0)
		return 1;
	for (size_t i = 0; i < n; i++) {
		uint8_t *p;

		if (b[i].status != KVS_BLOCK_NEW)
			continue;
		p = kvs_block_ptr(s->c, &b[i]);
		if (!p)
			return 0;
		fill(p, bb, h[i]);
	}
	if (how < 1) {
		report(); /* a crash between reserve and commit */
		_exit(3);
	}
	if (how < 75)
		s->rc = kvs_commit(s->c, lease);
	else if (how < 88)
		s->rc = kvs_abort(s->c, lease);
	else if (how < 96)
		s->rc = kvs_release(s->c, lease);
	else if (s->nheld < HELD_MAX)
		s->held[s->nheld++] = lease; /* dropped by a disconnect */
	else
		s->rc = kvs_abort(s->c, lease);
	return s->rc >= 0;
}

/* Release what is held. Returns 0 on an unexpected error. */
static int soak_release_held(struct soak *s)
{
	while (s->nheld > 0)
		if ((s->rc = kvs_release(s->c, s->held[--s->nheld])) < 0)
			return 0;
	return 1;
}

/* Disconnect with leases held, reconnect. Returns 0 on an error. */
static int soak_reconnect(struct soak *s)
{
	s->nheld = 0;
	s->rc = kvs_reconnect(s->c);
	return s->rc >= 0;
}

int main(int argc, char **argv)
{
	kvs_layout l = { .model = "soak-model", .layers = 2, .kv_heads = 2,
			 .head_dim = 64, .block_tokens = BT, .tp_size = 1,
			 .dtype = KVS_DTYPE_FP16 };
	struct soak s = { .c = NULL, .nheld = 0 };
	double end;

	if (argc != 4) {
		fprintf(stderr, "usage: soak_client SOCKET SECONDS SEED\n");
		return 2;
	}
	end = now_s() + atof(argv[2]);
	rng = strtoull(argv[3], NULL, 10) * 2654435761u + 1;
	s.rc = kvs_connect(argv[1], &l, &s.c);
	if (s.rc < 0) {
		fprintf(stderr, "soak_client: connect: %s\n",
			kvs_strerror(s.rc));
		return 2;
	}
	while (now_s() < end) {
		kvs_hash h[MAX_CHAIN];
		size_t n = chain(&l, h);
		uint64_t dice = next() % 100;
		size_t bb = kvs_block_bytes(s.c);
		int ok;

		ops++;
		if (dice < 50)
			ok = soak_lookup(&s, h, n, bb);
		else if (dice < 90)
			ok = soak_reserve(&s, h, n, bb);
		else if (dice < 97)
			ok = soak_release_held(&s);
		else
			ok = soak_reconnect(&s);
		if (!ok)
			goto fail;
	}
	kvs_close(s.c);
	report();
	return corrupt ? 1 : 0;
fail:
	fprintf(stderr, "soak_client: unexpected error: %s\n",
		kvs_strerror(s.rc));
	kvs_close(s.c);
	report();
	return 2;
}
