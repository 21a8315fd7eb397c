/* index.c - the SSD tier's LMDB index (see kvs_index.h). */
#define _GNU_SOURCE
#include "kvs_index.h"

#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#include "kvs_clock.h"
#include "kvs_le.h"

#define KEY_BYTES KVS_INDEX_KEY_BYTES
#define VAL_BYTES KVS_INDEX_VAL_BYTES
#define FORMAT 1
#define MiB (1ULL << 20)

enum { Q_PUT, Q_DEL, Q_DELSEG };

/* A queued operation, already in its on-disk encoding. */
struct qop {
	uint8_t kind;
	uint32_t seg; /* Q_DELSEG; Q_PUT: the new value's segment */
	uint8_t key[KEY_BYTES];
	uint8_t val[VAL_BYTES];
};

struct kvs_index {
	MDB_env *env;
	MDB_dbi blocks, segs, meta;
	uint64_t mapsize;
	unsigned flags;
	int opened;
	struct qop *q;
	size_t nq, capq;
	uint8_t *scratch; /* keys of a segment being deleted */
	size_t scratch_cap;
	kvs_index_stats st;
	/* A walk may run on another thread (kvs_index_walk): it holds this
	 * shared, growing the map exclusive (no transaction may be open). */
	pthread_rwlock_t grow;
};

static int map_err(int rc)
{
	switch (rc) {
	case MDB_SUCCESS:
		return 0;
	case MDB_NOTFOUND:
		return -ENOENT;
	case MDB_MAP_FULL:
		return -ENOSPC;
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
		return -EBADMSG;
	case MDB_VERSION_MISMATCH:
		return -EPROTO;
	}
	return rc > 0 ? -rc : -EIO;
}

/* ---- encoding: fixed little-endian fields, so keys sort the same anywhere
 * (kvs_le.h) */

void kvs_index_key_encode(uint8_t *p, const kvs_index_key *k)
{
	put32(p, k->ns);
	put64(p + 4, k->hash.lo);
	put64(p + 12, k->hash.hi);
}

int kvs_index_key_decode(const uint8_t *p, size_t n, kvs_index_key *k)
{
	if (n != KEY_BYTES)
		return -EBADMSG;
	k->ns = get32(p);
	k->hash.lo = get64(p + 4);
	k->hash.hi = get64(p + 12);
	return 0;
}

void kvs_index_val_encode(uint8_t *p, const kvs_index_val *v)
{
	put32(p, v->seg);
	put32(p + 4, v->len);
	put64(p + 8, v->gen);
	put64(p + 16, v->off);
	put64(p + 24, v->csum);
	put64(p + 32, v->parent.lo);
	put64(p + 40, v->parent.hi);
	put64(p + 48, v->atime);
}

/* The 4 KiB superblock and alignment are the segment store's format
 * (kvs_ssd.h); an entry breaking them was never written by the daemon. */
int kvs_index_val_decode(const uint8_t *p, size_t n, kvs_index_val *v)
{
	kvs_index_val t;

	if (n != VAL_BYTES)
		return -EBADMSG;
	t.seg = get32(p);
	t.len = get32(p + 4);
	t.gen = get64(p + 8);
	t.off = get64(p + 16);
	t.csum = get64(p + 24);
	t.parent.lo = get64(p + 32);
	t.parent.hi = get64(p + 40);
	t.atime = get64(p + 48);
	if (t.len == 0 || t.gen == 0 || t.off < 4096 || t.off % 4096)
		return -EBADMSG;
	*v = t;
	return 0;
}

/* ---- settings, open, close */

int kvs_index_create(kvs_index **out)
{
	kvs_index *ix = calloc(1, sizeof(*ix));

	if (!ix)
		return -ENOMEM;
	if (pthread_rwlock_init(&ix->grow, NULL)) {
		free(ix);
		return -ENOMEM;
	}
	ix->mapsize = 64 * MiB;
	*out = ix;
	return 0;
}

int kvs_index_set_mapsize(kvs_index *ix, uint64_t bytes)
{
	if (ix->opened)
		return -EBUSY;
	bytes = (bytes + MiB - 1) / MiB * MiB;
	ix->mapsize = bytes ? bytes : MiB;
	return 0;
}

int kvs_index_set_flags(kvs_index *ix, unsigned flags)
{
	if (ix->opened)
		return -EBUSY;
	ix->flags = flags;
	return 0;
}

uint64_t kvs_index_mapsize_for(uint64_t ssd_bytes, uint64_t block_bytes)
{
	/* A record is a 4 KiB header sector plus the payload in sectors. */
	uint64_t rec = 4096 + ((block_bytes ? block_bytes : 1) + 4095) / 4096 * 4096;
	uint64_t bytes = ssd_bytes / rec * 512;

	if (bytes < 16 * MiB)
		bytes = 16 * MiB;
	return (bytes + MiB - 1) / MiB * MiB;
}

/* open_dbs - the three databases, and the format check, in one write txn. */
static int open_dbs(kvs_index *ix)
{
	MDB_val k = { 6, "format" }, d;
	uint8_t buf[4];
	MDB_txn *txn;
	int rc;

	rc = mdb_txn_begin(ix->env, NULL, 0, &txn);
	if (rc)
		return map_err(rc);
	rc = mdb_dbi_open(txn, "blocks", MDB_CREATE, &ix->blocks);
	if (!rc)
		rc = mdb_dbi_open(txn, "segs", MDB_CREATE | MDB_DUPSORT | MDB_DUPFIXED |
				  MDB_INTEGERKEY, &ix->segs);
	if (!rc)
		rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &ix->meta);
	if (!rc)
		rc = mdb_get(txn, ix->meta, &k, &d);
	if (rc == MDB_NOTFOUND) {
		put32(buf, FORMAT);
		d = (MDB_val){ sizeof(buf), buf };
		rc = mdb_put(txn, ix->meta, &k, &d, 0);
	} else if (!rc && (d.mv_size != 4 || get32(d.mv_data) != FORMAT)) {
		mdb_txn_abort(txn);
		return -EPROTO;
	}
	if (rc) {
		mdb_txn_abort(txn);
		return map_err(rc);
	}
	return map_err(mdb_txn_commit(txn));
}

int kvs_index_open(kvs_index *ix, const char *dir)
{
	unsigned flags = MDB_NOTLS;
	int rc, dead, fd;

	if (ix->opened)
		return -EBUSY;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	rc = mdb_env_create(&ix->env);
	if (rc)
		return map_err(rc);
	/* See the header: NOSYNC keeps fsync off the loop; SYNC syncs data
	 * pages per commit and leaves only the meta page to the kernel. */
	flags |= (ix->flags & KVS_INDEX_SYNC) ? MDB_NOMETASYNC : MDB_NOSYNC;
	rc = mdb_env_set_maxdbs(ix->env, 4);
	if (!rc)
		rc = mdb_env_set_mapsize(ix->env, ix->mapsize);
	if (!rc)
		rc = mdb_env_open(ix->env, dir, flags, 0600);
	if (rc) {
		rc = map_err(rc);
		goto fail;
	}
	/* LMDB lets two processes write one environment; two daemons would
	 * corrupt each other's view of the segments, so refuse the second. */
	if (mdb_env_get_fd(ix->env, &fd) == 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		goto fail;
	}
	/* Reader slots of a process killed mid-read would pin old pages. */
	mdb_reader_check(ix->env, &dead);
	rc = open_dbs(ix);
	if (rc)
		goto fail;
	ix->opened = 1;
	return 0;
fail:
	mdb_env_close(ix->env);
	ix->env = NULL;
	return rc;
}

void kvs_index_close(kvs_index *ix)
{
	if (!ix)
		return;
	if (ix->opened) {
		kvs_index_flush(ix);
		mdb_env_sync(ix->env, 1);
		mdb_env_close(ix->env);
	}
	free(ix->q);
	free(ix->scratch);
	pthread_rwlock_destroy(&ix->grow);
	free(ix);
}

/* ---- the queue */

static struct qop *q_add(kvs_index *ix, int kind)
{
	struct qop *n;

	if (!ix->opened)
		return NULL;
	if (ix->nq == ix->capq) {
		size_t cap = ix->capq ? ix->capq * 2 : 256;

		n = realloc(ix->q, cap * sizeof(*n));
		if (!n)
			return NULL;
		ix->q = n;
		ix->capq = cap;
	}
	n = &ix->q[ix->nq++];
	n->kind = (uint8_t)kind;
	return n;
}

int kvs_index_put(kvs_index *ix, const kvs_index_key *key, const kvs_index_val *val)
{
	struct qop *o = q_add(ix, Q_PUT);

	if (!o)
		return ix->opened ? -ENOMEM : -EBADF;
	kvs_index_key_encode(o->key, key);
	kvs_index_val_encode(o->val, val);
	o->seg = val->seg;
	return 0;
}

int kvs_index_del(kvs_index *ix, const kvs_index_key *key)
{
	struct qop *o = q_add(ix, Q_DEL);

	if (!o)
		return ix->opened ? -ENOMEM : -EBADF;
	kvs_index_key_encode(o->key, key);
	return 0;
}

int kvs_index_del_segment(kvs_index *ix, uint32_t seg)
{
	struct qop *o = q_add(ix, Q_DELSEG);

	if (!o)
		return ix->opened ? -ENOMEM : -EBADF;
	o->seg = seg;
	return 0;
}

uint64_t kvs_index_pending(const kvs_index *ix) { return ix->nq; }

/* ---- applying the queue */

/* seg_unlink - drop @key from segment @seg's list in "segs". */
static int seg_unlink(kvs_index *ix, MDB_txn *txn, uint32_t seg, const uint8_t *key)
{
	MDB_val sk = { sizeof(seg), &seg }, sd = { KEY_BYTES, (void *)key };
	int rc = mdb_del(txn, ix->segs, &sk, &sd);

	return rc == MDB_NOTFOUND ? 0 : rc;
}

static int apply_put(kvs_index *ix, MDB_txn *txn, const struct qop *o)
{
	MDB_val k = { KEY_BYTES, (void *)o->key }, d;
	uint32_t seg = o->seg;
	MDB_val sk = { sizeof(seg), &seg }, sd = { KEY_BYTES, (void *)o->key };
	int rc = mdb_get(txn, ix->blocks, &k, &d);

	/* A key moving to another segment leaves its old segment's list, so
	 * that recycling the old segment does not find it. */
	if (rc == 0 && d.mv_size == VAL_BYTES && get32(d.mv_data) != seg)
		rc = seg_unlink(ix, txn, get32(d.mv_data), o->key);
	else if (rc == MDB_NOTFOUND)
		rc = 0;
	if (rc)
		return rc;
	d = (MDB_val){ VAL_BYTES, (void *)o->val };
	rc = mdb_put(txn, ix->blocks, &k, &d, 0);
	if (rc)
		return rc;
	rc = mdb_put(txn, ix->segs, &sk, &sd, MDB_NODUPDATA);
	return rc == MDB_KEYEXIST ? 0 : rc;
}

static int apply_del(kvs_index *ix, MDB_txn *txn, const struct qop *o)
{
	MDB_val k = { KEY_BYTES, (void *)o->key }, d;
	uint32_t seg;
	int rc = mdb_get(txn, ix->blocks, &k, &d);

	if (rc)
		return rc == MDB_NOTFOUND ? 0 : rc;
	seg = d.mv_size == VAL_BYTES ? get32(d.mv_data) : UINT32_MAX;
	rc = mdb_del(txn, ix->blocks, &k, NULL);
	return rc ? rc : seg_unlink(ix, txn, seg, o->key);
}

/*
 * apply_delseg - every entry of a segment, found through "segs": the keys
 * are copied out first (MDB_GET_MULTIPLE gives a page of them at a time),
 * then deleted from "blocks" if they still name this segment.
 */
static int apply_delseg(kvs_index *ix, MDB_txn *txn, uint32_t seg)
{
	MDB_val sk = { sizeof(seg), &seg }, sd, k, d;
	MDB_cursor *cur;
	size_t n = 0, i;
	uint8_t *p;
	int rc;

	rc = mdb_cursor_open(txn, ix->segs, &cur);
	if (rc)
		return rc;
	rc = mdb_cursor_get(cur, &sk, &sd, MDB_SET);
	if (rc == 0)
		rc = mdb_cursor_get(cur, &sk, &sd, MDB_GET_MULTIPLE);
	while (rc == 0) {
		if (n + sd.mv_size > ix->scratch_cap) {
			size_t cap = (n + sd.mv_size) * 2;

			p = realloc(ix->scratch, cap);
			if (!p) {
				rc = ENOMEM;
				break;
			}
			ix->scratch = p;
			ix->scratch_cap = cap;
		}
		memcpy(ix->scratch + n, sd.mv_data, sd.mv_size);
		n += sd.mv_size;
		rc = mdb_cursor_get(cur, &sk, &sd, MDB_NEXT_MULTIPLE);
	}
	mdb_cursor_close(cur);
	if (rc != MDB_NOTFOUND)
		return rc;
	for (i = 0; i + KEY_BYTES <= n; i += KEY_BYTES) {
		k = (MDB_val){ KEY_BYTES, ix->scratch + i };
		rc = mdb_get(txn, ix->blocks, &k, &d);
		if (rc == 0 && d.mv_size == VAL_BYTES && get32(d.mv_data) == seg)
			rc = mdb_del(txn, ix->blocks, &k, NULL);
		if (rc && rc != MDB_NOTFOUND)
			return rc;
	}
	sk = (MDB_val){ sizeof(seg), &seg };
	rc = n ? mdb_del(txn, ix->segs, &sk, NULL) : 0;
	return rc == MDB_NOTFOUND ? 0 : rc;
}

/* commit_range - queue entries [a, b) in one write transaction. Returns an
 * LMDB code (MDB_MAP_FULL and MDB_TXN_FULL are handled by the caller). */
static int commit_range(kvs_index *ix, size_t a, size_t b)
{
	MDB_txn *txn = NULL;
	size_t i;
	int rc = mdb_txn_begin(ix->env, NULL, 0, &txn);

	for (i = a; rc == 0 && i < b; i++) {
		const struct qop *o = &ix->q[i];

		rc = o->kind == Q_PUT ? apply_put(ix, txn, o)
		   : o->kind == Q_DEL ? apply_del(ix, txn, o)
				      : apply_delseg(ix, txn, o->seg);
	}
	if (rc) {
		if (txn)
			mdb_txn_abort(txn);
		return rc;
	}
	return mdb_txn_commit(txn); /* frees txn, also on error */
}

int kvs_index_flush(kvs_index *ix)
{
	size_t start = 0, chunk = ix->nq, end, n = ix->nq;
	uint64_t t0 = now_us();
	MDB_envinfo info;
	int rc = 0;

	if (!ix->opened)
		return -EBADF;
	while (start < n) {
		end = start + chunk < n ? start + chunk : n;
		rc = commit_range(ix, start, end);
		if (rc == MDB_MAP_FULL) {
			/* Nothing of the failed txn stays; a bigger map, same ops.
			 * No txn is open now, as mdb_env_set_mapsize requires. */
			mdb_env_info(ix->env, &info);
			pthread_rwlock_wrlock(&ix->grow);
			rc = mdb_env_set_mapsize(ix->env, info.me_mapsize * 2);
			pthread_rwlock_unlock(&ix->grow);
			if (rc)
				break;
			ix->st.map_grows++;
			continue;
		}
		if (rc == MDB_TXN_FULL && end - start > 1) {
			chunk = (end - start) / 2;
			continue;
		}
		if (rc)
			break;
		ix->st.commits++;
		start = end;
	}
	ix->nq = 0;
	ix->st.flush_us_last = now_us() - t0;
	if (ix->st.flush_us_last > ix->st.flush_us_max)
		ix->st.flush_us_max = ix->st.flush_us_last;
	if (rc) {
		/* Applied chunks stay committed; the rest is dropped (misses). */
		ix->st.ops_committed += start;
		ix->st.flush_failed++;
		return map_err(rc);
	}
	ix->st.ops_committed += n;
	return (int)(n < INT32_MAX ? n : INT32_MAX);
}

int kvs_index_sync(kvs_index *ix)
{
	if (!ix->opened)
		return -EBADF;
	return map_err(mdb_env_sync(ix->env, 1));
}

/* ---- reads (committed state) */

int kvs_index_get(kvs_index *ix, const kvs_index_key *key, kvs_index_val *val)
{
	uint8_t kb[KEY_BYTES];
	MDB_val k = { KEY_BYTES, kb }, d;
	MDB_txn *txn;
	int rc;

	if (!ix->opened)
		return -EBADF;
	kvs_index_key_encode(kb, key);
	rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return map_err(rc);
	rc = mdb_get(txn, ix->blocks, &k, &d);
	if (rc == 0 && kvs_index_val_decode(d.mv_data, d.mv_size, val) < 0)
		rc = MDB_CORRUPTED;
	mdb_txn_abort(txn);
	return map_err(rc);
}

int64_t kvs_index_iter(kvs_index *ix, kvs_index_iter_fn fn, void *arg)
{
	MDB_cursor *cur;
	MDB_txn *txn;
	MDB_val k, d;
	kvs_index_key key;
	kvs_index_val val;
	int64_t n = 0;
	int rc, stop = 0;

	if (!ix->opened)
		return -EBADF;
	rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return map_err(rc);
	rc = mdb_cursor_open(txn, ix->blocks, &cur);
	if (rc) {
		mdb_txn_abort(txn);
		return map_err(rc);
	}
	while (!stop && (rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) == 0) {
		/* Anything that does not decode is not ours: skip it. */
		if (kvs_index_key_decode(k.mv_data, k.mv_size, &key) < 0 ||
		    kvs_index_val_decode(d.mv_data, d.mv_size, &val) < 0)
			continue;
		stop = fn(arg, &key, &val);
		n++;
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	if (stop)
		return stop;
	return rc == MDB_NOTFOUND ? n : map_err(rc);
}

int64_t kvs_index_walk(kvs_index *ix, kvs_index_pos *pos, uint64_t max,
		       kvs_index_iter_fn fn, void *arg)
{
	MDB_val k = { pos->len, pos->key }, d;
	kvs_index_key key;
	kvs_index_val val;
	MDB_cursor *cur;
	MDB_txn *txn;
	int64_t n = 0;
	int rc, stop = 0;

	if (!ix->opened)
		return -EBADF;
	if (pos->done)
		return 0;
	pthread_rwlock_rdlock(&ix->grow);
	rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &txn);
	if (rc) {
		pthread_rwlock_unlock(&ix->grow);
		return map_err(rc);
	}
	rc = mdb_cursor_open(txn, ix->blocks, &cur);
	if (rc) {
		mdb_txn_abort(txn);
		pthread_rwlock_unlock(&ix->grow);
		return map_err(rc);
	}
	rc = mdb_cursor_get(cur, &k, &d, pos->len ? MDB_SET_RANGE : MDB_FIRST);
	for (; rc == 0 && (uint64_t)n < max && !stop;
	     rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
		n++;
		if (kvs_index_key_decode(k.mv_data, k.mv_size, &key) < 0 ||
		    kvs_index_val_decode(d.mv_data, d.mv_size, &val) < 0)
			continue;
		stop = fn(arg, &key, &val);
	}
	/* rc == 0: the cursor is on the next entry, where the walk goes on. */
	if (rc == 0 && k.mv_size <= sizeof(pos->key)) {
		memcpy(pos->key, k.mv_data, k.mv_size);
		pos->len = (uint32_t)k.mv_size;
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	pthread_rwlock_unlock(&ix->grow);
	if (stop)
		return stop;
	if (rc == MDB_NOTFOUND) {
		pos->done = 1;
		return n;
	}
	return rc ? map_err(rc) : n;
}

uint64_t kvs_index_count(kvs_index *ix)
{
	MDB_txn *txn;
	MDB_stat st;
	uint64_t n = 0;

	if (!ix->opened || mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &txn))
		return 0;
	if (mdb_stat(txn, ix->blocks, &st) == 0)
		n = st.ms_entries;
	mdb_txn_abort(txn);
	return n;
}

void kvs_index_stats_get(kvs_index *ix, kvs_index_stats *out)
{
	MDB_envinfo info;
	MDB_stat st;

	*out = ix->st;
	out->ops_pending = ix->nq;
	if (!ix->opened)
		return;
	out->entries = kvs_index_count(ix);
	if (mdb_env_info(ix->env, &info) == 0 && mdb_env_stat(ix->env, &st) == 0) {
		out->map_bytes = info.me_mapsize;
		out->map_used_bytes = (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
	}
}
