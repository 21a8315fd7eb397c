/*
 * test_index.c - the SSD tier's LMDB index (storage/ssd/index.c) alone.
 *
 * Runs in a mkdtemp directory under $TMPDIR or /var/tmp. Prints the time to
 * iterate 100k entries and to load 1M entries (the warm-restart cost), cold
 * (file pages dropped from the page cache first) and warm.
 * Exit: 0 pass, 1 fail, 77 no temp directory.
 */
#define _GNU_SOURCE
#include "kvs_check.h"
#include "kvs_index.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "kvs_clock.h"

static char base[4096];

static uint64_t rng = 0x5eed;
static uint64_t rnd(void)
{
	return kvs_test_rnd(&rng);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st; (void)flag; (void)f;
	return remove(p);
}

static void path(char *out, size_t n, const char *name)
{
	snprintf(out, n, "%s/%s", base, name);
}

static kvs_index *open_ix(const char *dir, uint64_t mapsize, int *rc)
{
	kvs_index *ix;

	if (kvs_index_create(&ix))
		return NULL;
	if (mapsize)
		kvs_index_set_mapsize(ix, mapsize);
	*rc = kvs_index_open(ix, dir);
	if (*rc) {
		kvs_index_close(ix);
		return NULL;
	}
	return ix;
}

/* Entry i, reproducible: key and value derive from i alone. */
static kvs_index_key key_of(uint64_t i)
{
	kvs_index_key k = { .ns = (uint32_t)(i % 3) + 1,
			    .hash = { i * 0x9e3779b97f4a7c15ULL + 1, ~i } };

	return k;
}

static kvs_index_val val_of(uint64_t i, uint32_t seg)
{
	kvs_index_val v = { .seg = seg, .len = 65536, .gen = 1000 + seg,
			    .off = 4096 + i * 69632, .csum = i ^ 0xabcdef,
			    .parent = { i, i + 1 }, .atime = i * 3 };

	return v;
}

static int val_eq(const kvs_index_val *a, const kvs_index_val *b)
{
	return a->seg == b->seg && a->len == b->len && a->gen == b->gen &&
	       a->off == b->off && a->csum == b->csum &&
	       a->parent.lo == b->parent.lo && a->parent.hi == b->parent.hi &&
	       a->atime == b->atime;
}

static void t_basic(void)
{
	char d[4200], f[4300];
	kvs_index *ix;
	kvs_index_key k;
	kvs_index_val v, got;
	int rc, i;

	path(f, sizeof(f), "no/such/dir");
	CHECK(open_ix(f, 0, &rc) == NULL);
	CHECK_EQ(rc, -ENOENT);
	path(d, sizeof(d), "basic");
	ix = open_ix(d, 0, &rc);
	CHECK_EQ(rc, 0);
	if (!ix)
		return;
	CHECK(open_ix(d, 0, &rc) == NULL);
	CHECK_EQ(rc, -EBUSY); /* one writer process */
	for (i = 0; i < 3; i++) {
		k = key_of((uint64_t)i);
		v = val_of((uint64_t)i, 7);
		CHECK_EQ(kvs_index_put(ix, &k, &v), 0);
	}
	k = key_of(0);
	CHECK_EQ(kvs_index_get(ix, &k, &got), -ENOENT); /* not flushed yet */
	CHECK_EQ(kvs_index_pending(ix), 3);
	CHECK_EQ(kvs_index_flush(ix), 3);
	CHECK_EQ(kvs_index_pending(ix), 0);
	CHECK_EQ(kvs_index_flush(ix), 0);
	CHECK_EQ(kvs_index_count(ix), 3);
	for (i = 0; i < 3; i++) {
		k = key_of((uint64_t)i);
		v = val_of((uint64_t)i, 7);
		CHECK_EQ(kvs_index_get(ix, &k, &got), 0);
		CHECK(val_eq(&v, &got));
	}
	/* Same hash, other namespace: another key. */
	k = key_of(1);
	k.ns = 99;
	CHECK_EQ(kvs_index_get(ix, &k, &got), -ENOENT);
	/* Delete, overwrite, delete of an absent key, in one batch, in order. */
	k = key_of(0);
	CHECK_EQ(kvs_index_del(ix, &k), 0);
	k = key_of(1);
	v = val_of(100, 8);
	CHECK_EQ(kvs_index_put(ix, &k, &v), 0);
	k = key_of(555);
	CHECK_EQ(kvs_index_del(ix, &k), 0);
	k = key_of(2);
	CHECK_EQ(kvs_index_put(ix, &k, &v), 0);
	CHECK_EQ(kvs_index_del(ix, &k), 0);
	CHECK_EQ(kvs_index_flush(ix), 5);
	k = key_of(0);
	CHECK_EQ(kvs_index_get(ix, &k, &got), -ENOENT);
	k = key_of(1);
	CHECK_EQ(kvs_index_get(ix, &k, &got), 0);
	CHECK(val_eq(&v, &got));
	k = key_of(2);
	CHECK_EQ(kvs_index_get(ix, &k, &got), -ENOENT);
	CHECK_EQ(kvs_index_count(ix), 1);
	/* Unflushed at close: close flushes. */
	k = key_of(3);
	v = val_of(3, 9);
	CHECK_EQ(kvs_index_put(ix, &k, &v), 0);
	kvs_index_close(ix);

	/* Reopen: durable. */
	ix = open_ix(d, 0, &rc);
	CHECK_EQ(rc, 0);
	if (!ix)
		return;
	CHECK_EQ(kvs_index_count(ix), 2);
	k = key_of(3);
	CHECK_EQ(kvs_index_get(ix, &k, &got), 0);
	CHECK(val_eq(&v, &got));
	kvs_index_close(ix);
}

/* kill -9 after a flush and before the next: the flushed batch survives,
 * the unflushed one is lost, and the index opens clean. */
static void t_kill(void)
{
	char d[4200];
	kvs_index *ix;
	kvs_index_key k;
	kvs_index_val v, got;
	int rc, st, i;
	pid_t pid;

	path(d, sizeof(d), "kill");
	pid = fork();
	if (pid == 0) {
		ix = open_ix(d, 0, &rc);
		if (!ix)
			_exit(3);
		for (i = 0; i < 1000; i++) {
			k = key_of((uint64_t)i);
			v = val_of((uint64_t)i, (uint32_t)(i % 5));
			kvs_index_put(ix, &k, &v);
		}
		if (kvs_index_flush(ix) != 1000)
			_exit(4);
		for (i = 1000; i < 1500; i++) {
			k = key_of((uint64_t)i);
			v = val_of((uint64_t)i, 1);
			kvs_index_put(ix, &k, &v);
		}
		kvs_index_del_segment(ix, 0);
		raise(SIGKILL);
		_exit(5);
	}
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	ix = open_ix(d, 0, &rc);
	CHECK_EQ(rc, 0);
	if (!ix)
		return;
	CHECK_EQ(kvs_index_count(ix), 1000);
	k = key_of(5); /* segment 0: its deletion was not flushed */
	v = val_of(5, 0);
	CHECK_EQ(kvs_index_get(ix, &k, &got), 0);
	CHECK(val_eq(&v, &got));
	k = key_of(1200);
	CHECK_EQ(kvs_index_get(ix, &k, &got), -ENOENT);
	kvs_index_close(ix);
}

/* A 1 MiB map and 30k entries in one batch: the map grows, nothing is lost. */
static void t_grow(void)
{
	char d[4200];
	kvs_index_stats st;
	kvs_index *ix;
	kvs_index_key k;
	kvs_index_val v, got;
	int rc, i, ok = 1;

	path(d, sizeof(d), "grow");
	ix = open_ix(d, 1 << 20, &rc);
	CHECK_EQ(rc, 0);
	if (!ix)
		return;
	for (i = 0; i < 30000; i++) {
		k = key_of((uint64_t)i);
		v = val_of((uint64_t)i, (uint32_t)(i % 40));
		CHECK_EQ(kvs_index_put(ix, &k, &v), 0);
	}
	CHECK_EQ(kvs_index_flush(ix), 30000);
	kvs_index_stats_get(ix, &st);
	CHECK(st.map_grows >= 1);
	CHECK(st.map_bytes > (1 << 20));
	CHECK_EQ(st.entries, 30000);
	CHECK_EQ(st.commits, 1); /* one transaction, retried after growing */
	for (i = 0; i < 30000; i += 97) {
		k = key_of((uint64_t)i);
		v = val_of((uint64_t)i, (uint32_t)(i % 40));
		ok &= kvs_index_get(ix, &k, &got) == 0 && val_eq(&v, &got);
	}
	CHECK(ok);
	printf("grow: 1 MiB map -> %llu MiB after %llu grows, %llu MiB used, "
	       "flush of 30k puts %.1f ms\n",
	       (unsigned long long)(st.map_bytes >> 20),
	       (unsigned long long)st.map_grows,
	       (unsigned long long)(st.map_used_bytes >> 20), st.flush_us_last / 1e3);
	kvs_index_close(ix);
}

struct scan {
	uint64_t n, seg_n[8], sum;
	int stop_at;
};

static int on_entry(void *arg, const kvs_index_key *k, const kvs_index_val *v)
{
	struct scan *s = arg;

	s->n++;
	if (v->seg < 8)
		s->seg_n[v->seg]++;
	s->sum += v->off ^ k->hash.lo;
	return s->stop_at && s->n == (uint64_t)s->stop_at ? 42 : 0;
}

/* Deleting a segment drops exactly its entries, in batch order. */
static void t_segment(void)
{
	char d[4200];
	kvs_index *ix;
	kvs_index_key k;
	kvs_index_val v, got;
	struct scan sc = { 0 };
	int rc, i;

	path(d, sizeof(d), "segment");
	ix = open_ix(d, 0, &rc);
	CHECK_EQ(rc, 0);
	if (!ix)
		return;
	for (i = 0; i < 250; i++) { /* 0..99 seg 1, 100..199 seg 2, 200..249 seg 3 */
		k = key_of((uint64_t)i);
		v = val_of((uint64_t)i, 1 + (uint32_t)(i / 100));
		kvs_index_put(ix, &k, &v);
	}
	CHECK_EQ(kvs_index_flush(ix), 250);
	for (i = 0; i < 10; i++) { /* 10 blocks of seg 1 rewritten into seg 3 */
		k = key_of((uint64_t)i);
		v = val_of((uint64_t)i, 3);
		kvs_index_put(ix, &k, &v);
	}
	kvs_index_del_segment(ix, 1);
	CHECK_EQ(kvs_index_flush(ix), 11);
	CHECK_EQ(kvs_index_count(ix), 160);
	k = key_of(5);
	CHECK_EQ(kvs_index_get(ix, &k, &got), 0);
	CHECK_EQ(got.seg, 3);
	k = key_of(50);
	CHECK_EQ(kvs_index_get(ix, &k, &got), -ENOENT);
	/* Recycle of segment 3 then a new block in it, in one batch. */
	kvs_index_del_segment(ix, 3);
	k = key_of(9999);
	v = val_of(9999, 3);
	kvs_index_put(ix, &k, &v);
	kvs_index_del_segment(ix, 6); /* empty segment: no-op */
	CHECK_EQ(kvs_index_flush(ix), 3);
	CHECK_EQ(kvs_index_count(ix), 101);
	CHECK_EQ(kvs_index_get(ix, &k, &got), 0);
	CHECK_EQ(kvs_index_iter(ix, on_entry, &sc), 101);
	CHECK_EQ(sc.seg_n[2], 100);
	CHECK_EQ(sc.seg_n[3], 1);
	CHECK_EQ(sc.seg_n[1], 0);
	sc = (struct scan){ .stop_at = 10 };
	CHECK_EQ(kvs_index_iter(ix, on_entry, &sc), 42);
	CHECK_EQ(sc.n, 10);
	kvs_index_close(ix);
}

/* Load test: a block table's warm restart is one pass of kvs_index_iter. */
struct load {
	kvs_index_key *k;
	kvs_index_val *v;
	uint64_t n;
};

static int on_load(void *arg, const kvs_index_key *k, const kvs_index_val *v)
{
	struct load *l = arg;

	l->k[l->n] = *k;
	l->v[l->n++] = *v;
	return 0;
}

static void drop_cache(const char *dir)
{
	char f[4300];
	int fd;

	snprintf(f, sizeof(f), "%s/data.mdb", dir);
	fd = open(f, O_RDONLY);
	if (fd >= 0) {
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

static void t_scale(const char *name, uint64_t total, uint64_t batch)
{
	char d[4200];
	struct load l = { 0 };
	kvs_index_stats st;
	kvs_index *ix;
	kvs_index_key k;
	kvs_index_val v;
	double t0, tput, tcold, twarm, tdel, tturn;
	uint64_t i, ok = 1;
	int rc;

	path(d, sizeof(d), name);
	ix = open_ix(d, 0, &rc);
	CHECK_EQ(rc, 0);
	l.k = malloc(total * sizeof(*l.k));
	l.v = malloc(total * sizeof(*l.v));
	if (!ix || !l.k || !l.v)
		return;
	t0 = now_s();
	for (i = 0; i < total; i++) {
		/* random hashes: the B-tree sees inserts all over, as in use */
		k = (kvs_index_key){ .ns = 1, .hash = { rnd(), rnd() } };
		v = val_of(i, (uint32_t)(i / (total / 100))); /* 100 segments */
		kvs_index_put(ix, &k, &v);
		if ((i + 1) % batch == 0)
			CHECK_EQ(kvs_index_flush(ix), (int)batch);
	}
	kvs_index_flush(ix);
	tput = now_s() - t0;
	kvs_index_close(ix);

	drop_cache(d);
	t0 = now_s();
	ix = open_ix(d, 0, &rc);
	CHECK_EQ(rc, 0);
	if (!ix)
		return;
	CHECK_EQ(kvs_index_iter(ix, on_load, &l), (int64_t)total);
	tcold = now_s() - t0;
	CHECK_EQ(l.n, total);
	l.n = 0;
	t0 = now_s();
	CHECK_EQ(kvs_index_iter(ix, on_load, &l), (int64_t)total);
	twarm = now_s() - t0;
	for (i = 0; i < total; i++)
		ok &= l.v[i].len == 65536 && l.v[i].gen == 1000 + l.v[i].seg;
	CHECK(ok);
	/* Recycling one segment (1% of the entries) in a batch of its own. */
	t0 = now_s();
	kvs_index_del_segment(ix, 50);
	CHECK_EQ(kvs_index_flush(ix), 1);
	tdel = now_s() - t0;
	CHECK_EQ(kvs_index_count(ix), total - total / 100);
	/* What the daemon pays per loop turn: a flush of a few dozen puts. */
	t0 = now_s();
	for (i = 0; i < 200 * 32; i++) {
		k = (kvs_index_key){ .ns = 2, .hash = { rnd(), rnd() } };
		v = val_of(i, 101);
		kvs_index_put(ix, &k, &v);
		if ((i + 1) % 32 == 0)
			CHECK_EQ(kvs_index_flush(ix), 32);
	}
	tturn = (now_s() - t0) / 200;
	kvs_index_stats_get(ix, &st);
	printf("%s: %llu entries: insert in batches of %llu %.2f s (%.0f k/s); "
	       "open+load cold %.3f s, warm load %.3f s; delete a segment of %llu "
	       "%.1f ms; flush of 32 puts %.0f us; file %llu MiB (%.0f B/entry), "
	       "map %llu MiB\n",
	       name, (unsigned long long)total, (unsigned long long)batch, tput,
	       (double)total / tput / 1e3, tcold, twarm,
	       (unsigned long long)(total / 100), tdel * 1e3, tturn * 1e6,
	       (unsigned long long)(st.map_used_bytes >> 20),
	       (double)st.map_used_bytes / (double)total,
	       (unsigned long long)(st.map_bytes >> 20));
	kvs_index_close(ix);
	free(l.k);
	free(l.v);
}

typedef struct walked {
	uint8_t *seen; /* by entry number */
	uint64_t calls;
} walked;

static int walk_mark(void *arg, const kvs_index_key *k, const kvs_index_val *v)
{
	walked *w = arg;

	w->calls++;
	w->seen[v->atime / 3]++; /* val_of(i).atime = 3i */
	(void)k;
	return 0;
}

/* kvs_index_walk: slices in separate read transactions visit every entry
 * once, see an entry put ahead of the position and not one deleted ahead
 * of it, and end with pos.done. */
static void t_walk(void)
{
	enum { N = 1000, SLICE = 64, LATE = N + 1 };
	char d[4200];
	kvs_index_pos pos = { 0 };
	walked w = { .seen = calloc(LATE + 1, 1) };
	kvs_index_key k;
	kvs_index_val v;
	kvs_index *ix;
	int64_t n, total = 0;
	int rc, slices = 0, dup = 0, missing = 0;

	path(d, sizeof(d), "walk");
	ix = open_ix(d, 0, &rc);
	CHECK(ix != NULL);
	if (!ix || !w.seen)
		return;
	for (uint64_t i = 0; i < N; i++) {
		k = key_of(i);
		v = val_of(i, 1);
		kvs_index_put(ix, &k, &v);
	}
	CHECK_EQ(kvs_index_flush(ix), N);
	n = kvs_index_walk(ix, &pos, SLICE, walk_mark, &w);
	CHECK_EQ(n, SLICE);
	CHECK(!pos.done && pos.len == KVS_INDEX_KEY_BYTES);
	total += n;
	/* Between slices: one entry ahead of the position goes, one comes.
	 * Key order is byte order of the encoding: the one at the position
	 * is the next the walk visits, so delete a later one. */
	{
		/* ns 4 sorts after every key_of() (ns 1-3, first byte) */
		kvs_index_key at, late = { .ns = 4, .hash = key_of(LATE).hash };
		uint64_t gone = N;

		CHECK_EQ(kvs_index_key_decode(pos.key, pos.len, &at), 0);
		for (uint64_t i = 0; i < N && gone == N; i++) {
			uint8_t a[KVS_INDEX_KEY_BYTES], b[KVS_INDEX_KEY_BYTES];

			k = key_of(i);
			kvs_index_key_encode(a, &k);
			kvs_index_key_encode(b, &at);
			if (memcmp(a, b, sizeof(a)) > 0)
				gone = i;
		}
		k = key_of(gone);
		kvs_index_del(ix, &k);
		v = val_of(LATE, 1);
		kvs_index_put(ix, &late, &v);
		CHECK_EQ(kvs_index_flush(ix), 2);
		w.seen[gone] = 0xff - 1; /* must stay unvisited: 0xfe */
		while ((n = kvs_index_walk(ix, &pos, SLICE, walk_mark, &w)) > 0) {
			total += n;
			slices++;
		}
		CHECK_EQ(n, 0);
		CHECK(pos.done);
		CHECK_EQ(w.seen[gone], 0xfe);
		w.seen[gone] = 1;
	}
	for (uint64_t i = 0; i <= LATE; i++) {
		if (i == N)
			continue; /* no such entry */
		dup += w.seen[i] > 1;
		missing += w.seen[i] == 0;
	}
	CHECK_EQ(dup, 0);
	CHECK_EQ(missing, 0);
	CHECK_EQ(total, N);     /* N - 1 old + 1 late */
	CHECK_EQ(w.calls, N);
	CHECK(slices >= N / SLICE - 1);
	CHECK_EQ(kvs_index_walk(ix, &pos, SLICE, walk_mark, &w), 0);
	kvs_index_close(ix);
	free(w.seen);
}

/* The stored encoding alone: round trip, sizes, impossible values. */
static void t_codec(void)
{
	kvs_index_key k = { .ns = 9, .hash = { 0xaaaa, 0xbbbb } }, ok;
	kvs_index_val v = val_of(3, 2), ov;
	uint8_t kb[KVS_INDEX_KEY_BYTES + 1], vb[KVS_INDEX_VAL_BYTES + 1];

	kvs_index_key_encode(kb, &k);
	CHECK(kvs_index_key_decode(kb, KVS_INDEX_KEY_BYTES, &ok) == 0);
	CHECK(ok.ns == k.ns && ok.hash.lo == k.hash.lo && ok.hash.hi == k.hash.hi);
	CHECK(kvs_index_key_decode(kb, KVS_INDEX_KEY_BYTES - 1, &ok) == -EBADMSG);
	CHECK(kvs_index_key_decode(kb, KVS_INDEX_KEY_BYTES + 1, &ok) == -EBADMSG);

	kvs_index_val_encode(vb, &v);
	CHECK(kvs_index_val_decode(vb, KVS_INDEX_VAL_BYTES, &ov) == 0);
	CHECK(val_eq(&ov, &v));
	CHECK(kvs_index_val_decode(vb, KVS_INDEX_VAL_BYTES - 1, &ov) == -EBADMSG);
	CHECK(kvs_index_val_decode(vb, KVS_INDEX_VAL_BYTES + 1, &ov) == -EBADMSG);
	CHECK(kvs_index_val_decode(vb, 0, &ov) == -EBADMSG);
	v.len = 0;
	kvs_index_val_encode(vb, &v);
	CHECK(kvs_index_val_decode(vb, KVS_INDEX_VAL_BYTES, &ov) == -EBADMSG);
	v = val_of(3, 2);
	v.gen = 0;
	kvs_index_val_encode(vb, &v);
	CHECK(kvs_index_val_decode(vb, KVS_INDEX_VAL_BYTES, &ov) == -EBADMSG);
	v = val_of(3, 2);
	v.off = 0; /* the superblock */
	kvs_index_val_encode(vb, &v);
	CHECK(kvs_index_val_decode(vb, KVS_INDEX_VAL_BYTES, &ov) == -EBADMSG);
	v.off = 4096 + 100;
	kvs_index_val_encode(vb, &v);
	CHECK(kvs_index_val_decode(vb, KVS_INDEX_VAL_BYTES, &ov) == -EBADMSG);
	/* Little-endian whatever the host: the seg field is the first 4 bytes. */
	v = val_of(3, 0x01020304);
	kvs_index_val_encode(vb, &v);
	CHECK(vb[0] == 4 && vb[1] == 3 && vb[2] == 2 && vb[3] == 1);
}

int main(void)
{
	const char *t = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/kvs-index-XXXXXX", t && *t ? t : "/var/tmp");
	if (!mkdtemp(base)) {
		printf("skip: cannot make a temp directory: %s\n", strerror(errno));
		return 77;
	}
	printf("test_index: in %s\n", base);
	t_codec();
	t_basic();
	t_kill();
	t_grow();
	t_segment();
	t_walk();
	t_scale("iter-100k", 100000, 100000);
	t_scale("load-1M", 1000000, 100000);
	nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return check_summary("test_index");
}
