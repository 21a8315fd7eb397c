/*
 * slab_attack.h - what test_pinned_slabs and test_fast_slabs share: a
 * worker (nobody) fills a 64 MiB arena with 62 KiB blocks (on 64 KiB pages
 * a slab of them is 31 pages: 33 such slabs and a short one) and finds one
 * block in each slab; another block size's reserve by root, and another
 * worker uid's round trip of that size, show whether the pins held denied
 * the arena. Static inline: each test takes what it uses.
 */
#ifndef KVS_SLAB_ATTACK_H
#define KVS_SLAB_ATTACK_H

#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#define NOBODY 65534
#define OTHER 65533
#define A_TOKENS 62   /* 62 KiB blocks */
#define B_TOKENS 16   /* another block size */
#define CHAIN 64
#define CHAINS 40     /* 2,560 blocks: twice what the arena holds */
#define SLAB_BYTES (31u * 65536u)
#define MAX_SLABS 64

/* The daemon's socket, for the children. */
static const char *sock;

/* One block of a slab: where its hash is (h[chain][idx]) and the block
 * (chain < 0: none found in that slab). */
typedef struct slab_pick {
	int chain, idx;
	kvs_block b;
} slab_pick;

/* Publish CHAINS chains of CHAIN blocks of @la through @a (hashes in @h):
 * twice what the arena holds. */
static inline void slab_fill(kvs_client *a, const kvs_layout *la,
			     kvs_hash (*h)[CHAIN])
{
	for (uint32_t i = 0; i < CHAINS; i++) {
		th_chain(la, 100 + i, CHAIN, 0, 0, h[i]);
		CHECK_GE(th_publish(a, h[i], CHAIN, NULL), 0);
	}
}

/* One block of each slab of A's blocks in the arena (by offset: slab i is
 * [i, i + 1) x SLAB_BYTES), found by lookups let go at once, so that no
 * lease is held before any is kept. Returns how many slabs have one. */
static inline uint32_t slab_one_each(kvs_client *a, kvs_hash (*h)[CHAIN],
				     slab_pick *pick)
{
	static kvs_block blk[CHAIN];
	uint32_t n = 0;

	for (uint32_t s = 0; s < MAX_SLABS; s++)
		pick[s].chain = -1;
	for (int i = 0; i < CHAINS; i++) {
		kvs_lease l = 0;
		int hits = kvs_lookup(a, h[i], CHAIN, &l, blk);

		CHECK_GE(hits, 0);
		if (l)
			kvs_release(a, l);
		for (int j = 0; j < hits; j++) {
			uint64_t s = blk[j].offset / SLAB_BYTES;

			if (s < MAX_SLABS && pick[s].chain < 0) {
				pick[s] = (slab_pick){ i, j, blk[j] };
				n++;
			}
		}
	}
	return n;
}

/* Child, as another worker uid: a chain of 64 B blocks of the model @arg
 * (16 slabs of one page) published and read back; sends 0 when it worked. */
static inline int slab_other_worker(void *arg, int fd)
{
	kvs_layout lb = th_layout(arg, B_TOKENS);
	kvs_client *c = NULL;
	int ok;

	if (th_become(OTHER) < 0 || kvs_connect(sock, &lb, &c) < 0)
		return 3;
	ok = th_round_trip(c, &lb, 21, 64);
	th_send_u64(fd, ok ? 0 : 1);
	kvs_close(c);
	return 0;
}

/* One block of B's size of the model @model reserved (and aborted) by this
 * process (root): the reserve's result. */
static inline int slab_reserve_b(th_daemon *d, const char *model)
{
	kvs_layout lb = th_layout(model, B_TOKENS);
	kvs_client *b = th_connect(d, &lb);
	kvs_lease w = 0;
	kvs_block blk;
	kvs_hash h;
	int rc;

	th_chain(&lb, 7, 1, 0, 0, &h);
	rc = kvs_reserve(b, &h, 1, &w, &blk);
	if (w)
		kvs_abort(b, w);
	kvs_close(b);
	return rc;
}

#endif /* KVS_SLAB_ATTACK_H */
