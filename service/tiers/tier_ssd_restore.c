/* tier_ssd_restore.c - what makes the SSD tier survive a restart: the
 * namespaces file (storage/ssd/nsfile.c) and the warm load of the index, in
 * the background after READY (see tier_ssd_int.h, docs/ssd.md "Warm
 * restart"). */
#define _GNU_SOURCE
#include "tier_ssd_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "kvs_log.h"
#include "kvs_types.h" /* kvs_strerror */
#include "kvs_nsfile.h"

/* The entry of namespace @id, made if the array is short (NULL: no
 * memory). */
static ssd_ns *ns_of(ssd_tier *t, uint32_t id)
{
	ssd_ns *nv;

	if (id == 0)
		return NULL;
	if (id > t->nnsv) {
		nv = realloc(t->nsv, (size_t)id * sizeof(*nv));
		if (!nv)
			return NULL;
		memset(nv + t->nnsv, 0, (size_t)(id - t->nnsv) * sizeof(*nv));
		t->nsv = nv;
		t->nnsv = id;
	}
	return &t->nsv[id - 1];
}

static void ns_set(ssd_ns *n, int state)
{
	free(n->buf);
	n->buf = NULL;
	n->state = state;
}

void ssd_ns_free(ssd_tier *t)
{
	for (uint32_t i = 0; i < t->nnsv; i++)
		free(t->nsv[i].buf);
	free(t->nsv);
	t->nsv = NULL;
	t->nnsv = 0;
}

/* A namespace (new, or a new layout for a reclaimed id): kept to be filed
 * at its first block (a namespace that never has one costs the file
 * nothing). Its entry carries the id: a missing entry shifts no other. */
void ssd_ns_created(kvs_tier_mod *tt, uint32_t id, const kvs_ns_desc *d)
{
	ssd_tier *t = ssd_of(tt);
	size_t ml = strlen(d->model), al = strlen(d->adapter);
	ssd_ns *n = ns_of(t, id);
	uint8_t *buf;

	if (!n)
		return; /* NSF_NONE: its blocks are not written */
	ns_set(n, NSF_NEVER);
	if (ml > KVS_NS_STR_MAX || al > KVS_NS_STR_MAX ||
	    d->salt_len > KVS_NS_STR_MAX) {
		kvs_warn("SSD tier: namespace %u cannot be persisted: its blocks "
			 "are not written to SSD", id);
		return;
	}
	buf = malloc(ml + al + d->salt_len + 1);
	if (!buf)
		return;
	memcpy(buf, d->model, ml);
	memcpy(buf + ml, d->adapter, al);
	if (d->salt_len)
		memcpy(buf + ml + al, d->salt, d->salt_len);
	n->buf = buf;
	n->state = NSF_PENDING;
	n->entry = (kvs_ns_layout){
		.model = (const char *)buf, .adapter = (const char *)buf + ml,
		.salt = buf + ml + al, .model_len = (uint32_t)ml,
		.adapter_len = (uint32_t)al, .salt_len = d->salt_len,
		.layers = d->layers, .kv_heads = d->kv_heads,
		.head_dim = d->head_dim, .block_tokens = d->block_tokens,
		.tp_rank = d->tp_rank, .tp_size = d->tp_size, .dtype = d->dtype,
		.id = id };
}

/* Append @n's entry; on failure, not again for NS_RETRY_MS. */
static int ns_file(ssd_tier *t, ssd_ns *n, uint32_t id)
{
	uint64_t now = now_ms(), held;
	int rc;

	if (now < n->retry_at)
		return -EAGAIN;
	rc = kvs_nsfile_append(t->dir, &n->entry);
	if (rc == 0) {
		ns_set(n, NSF_FILED);
		return 0;
	}
	if (rc == -EINVAL)
		ns_set(n, NSF_NEVER);
	n->retry_at = now + NS_RETRY_MS;
	t->counts.ns_file_errors++;
	if (kvs_ratelimit_ok(&t->rl_ns, now, 1000, &held))
		kvs_err("SSD tier: cannot persist namespace %u in %s/%s: %s (its "
			"blocks stay in RAM until it is; %" PRIu64 " such lines "
			"not logged)", id, t->dir, KVS_NSFILE_NAME,
			kvs_strerror(rc), held);
	return rc;
}

int ssd_ns_filed(ssd_tier *t, uint32_t id)
{
	ssd_ns *n = id && id <= t->nnsv ? &t->nsv[id - 1] : NULL;

	if (n && (n->state == NSF_FILED || n->state == NSF_RESTORED))
		return 1;
	if (n && n->state == NSF_PENDING && ns_file(t, n, id) == 0)
		return 1;
	t->counts.ns_unfiled++;
	return 0;
}

/* One entry of the namespaces file: the namespace gets its id back. One
 * that cannot (its layout no longer fits, no memory) stays out: its blocks
 * are dropped from the index as the load comes to them. */
static int ns_restore_one(void *arg, const kvs_ns_layout *f)
{
	ssd_tier *t = arg;
	char model[KVS_NS_STR_MAX + 1], adapter[KVS_NS_STR_MAX + 1];
	kvs_ns_desc d = { .model = model, .adapter = adapter, .salt = f->salt,
			  .salt_len = f->salt_len, .layers = f->layers,
			  .kv_heads = f->kv_heads, .head_dim = f->head_dim,
			  .block_tokens = f->block_tokens, .tp_rank = f->tp_rank,
			  .tp_size = f->tp_size, .dtype = f->dtype };
	ssd_ns *n = ns_of(t, f->id);
	int rc = -ENOMEM;

	memcpy(model, f->model, f->model_len);
	model[f->model_len] = '\0';
	memcpy(adapter, f->adapter, f->adapter_len);
	adapter[f->adapter_len] = '\0';
	/* Every entry is read on (one that stopped the load would cut the
	 * file there). */
	if (n)
		rc = kvs_tier_ns_restore(&t->base, &d, f->id);
	if (n)
		ns_set(n, rc < 0 ? NSF_NONE : NSF_RESTORED);
	if (rc < 0)
		kvs_warn("SSD tier: namespace %u of %s/%s not restored: %s", f->id,
			 t->dir, KVS_NSFILE_NAME, kvs_strerror(rc));
	return 0;
}

/* Whether index entry @v can name a copy now: its segment is in use under
 * the same generation (a recycled segment has a newer one: the bytes there
 * are another block's), and its offset fits a loc. */
static int entry_ok(const ssd_tier *t, const kvs_index_val *v)
{
	return v->gen != 0 && kvs_ssd_segment_gen(t->ssd, v->seg) == v->gen &&
	       !(v->off & 4095) && (v->off >> 12) <= LOC_MAX_OFF4K;
}

static int restored(const ssd_tier *t, uint32_t id)
{
	return id && id <= t->nnsv && t->nsv[id - 1].state == NSF_RESTORED;
}

/* Whether this run wrote block @k to SSD. Its entry was put then, maybe
 * after the batch that read this older one: deleting that as stale would
 * take the new entry out of the index. */
static int written_here(const ssd_tier *t, const kvs_index_key *k)
{
	uint32_t idx = kvs_tier_rec_find(&t->base, k->ns, k->hash);

	return idx != KVS_NONE && (loc_flags(ssd_loc(t, idx)) & LOC_SSD);
}

static int pend_room(ssd_load *ld)
{
	uint64_t cap = ld->cap ? ld->cap * 2 : 4096;
	ssd_pend *np = realloc(ld->pend, cap * sizeof(*np));

	if (!np)
		return -ENOMEM;
	ld->pend = np;
	ld->cap = cap;
	return 0;
}

/*
 * load_put - entry (@k, @v) becomes an SSD-only READY record, linked to its
 * parent if the table has it, else remembered for the link pass at the
 * end. A key the table has already is skipped: the table is the live truth
 * (a block written, demoted or loaded by a lookup since the start), newer
 * than any entry read here. A stale entry is deleted from the index, but
 * for a block this run wrote to SSD (written_here): the index's entry is
 * that write's.
 * Returns 0, 1 (skipped or stale) or -ENOMEM.
 */
static int load_put(ssd_tier *t, const kvs_index_key *k, const kvs_index_val *v,
		    uint32_t *out)
{
	ssd_load *ld = &t->ld;
	uint32_t idx;
	int rc = -EINVAL;

	if ((v->parent.lo || v->parent.hi) && ld->n == ld->cap && pend_room(ld) < 0)
		return -ENOMEM;
	/* Only namespaces the file gave back had blocks in the index before
	 * the start: an entry of another id is this run's (the table has its
	 * block), or of a namespace gone (its id may be given to another
	 * layout since: it must not take its blocks). */
	if (!restored(t, k->ns))
		rc = kvs_tier_rec_has(&t->base, k->ns, k->hash) ? -EEXIST : -EINVAL;
	else if (written_here(t, k))
		return 1;
	else if (entry_ok(t, v))
		rc = kvs_tier_rec_restore(&t->base, k->ns, k->hash, v->len,
					  v->atime, &idx);
	if (rc == -ENOMEM)
		return rc;
	if (rc == -EEXIST)
		return 1;
	if (rc < 0) {
		/* Stale, or of no known namespace. */
		kvs_index_del(t->ix, k);
		ld->dropped++;
		return 1;
	}
	t->loc[idx] = (loc){ .seg = v->seg,
			     .word = (uint32_t)(v->off >> 12) << LOC_FLAG_BITS | LOC_SSD };
	t->blocks++;
	ld->loaded++;
	if ((v->parent.lo || v->parent.hi) &&
	    !kvs_tier_rec_link(&t->base, idx, v->parent))
		ld->pend[ld->n++] = (ssd_pend){ .idx = idx, .ns = k->ns,
						.hash = k->hash, .parent = v->parent };
	if (out)
		*out = idx;
	return 0;
}

static int walk_one(void *arg, const kvs_index_key *k, const kvs_index_val *v)
{
	int rc = load_put(arg, k, v, NULL);

	return rc < 0 ? rc : 0;
}

/* The knobs of a test that needs the load to take a while (docs/ssd.md):
 * entries per slice, a pause after each, and whether a reader thread reads
 * the index (0: the loop walks it itself). */
static uint32_t env_u32(const char *name, uint32_t dflt, uint32_t max)
{
	const char *v = getenv(name);
	char *end;
	unsigned long x;

	if (!v || !*v)
		return dflt;
	x = strtoul(v, &end, 10);
	return *end || x > max ? dflt : (uint32_t)x;
}

static uint64_t ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* Signed: the nanosecond part of the difference may be negative. */
	return (uint64_t)(((int64_t)(t1.tv_sec - t0->tv_sec) * 1000000000 +
			   (t1.tv_nsec - t0->tv_nsec)) / 1000000);
}

static void load_end(ssd_tier *t, int err)
{
	ssd_load *ld = &t->ld;
	uint64_t ms = ms_since(&ld->t0);

	ssd_load_stop(t);
	free(ld->pend);
	ld->pend = NULL;
	ld->n = ld->cap = 0;
	ld->on = 0;
	t->counts.restart_blocks = (int64_t)ld->loaded;
	t->counts.restart_ms = (int64_t)ms;
	if (err < 0)
		kvs_err("SSD tier: loading the index failed after %" PRIu64
			" blocks: %s (the rest are misses)", ld->loaded,
			kvs_strerror(err));
	else
		kvs_info("SSD tier: index fully loaded: %" PRIu64 " blocks in %"
			 PRIu64 " ms (%" PRIu64 " stale entries dropped, %" PRIu64
			 " loaded early by lookups, longest slice %" PRIu64 " us, "
			 "at most %" PRIu64 " us of CPU and %" PRIu64 " page faults "
			 "from disk in a slice, %" PRIu64 " batches read again)",
			 ld->loaded, ms, ld->dropped, ld->faults,
			 ld->slice_max_us, ld->slice_max_cpu_us,
			 ld->slice_max_majflt, ld->rewinds);
}

/*
 * The link pass: blocks loaded before their parent get their link now that
 * every parent that will come is in. A pending record may have gone (its
 * copy dropped) and its index been reused; only the same block, still
 * unlinked, is linked.
 */
static void link_some(ssd_tier *t, uint64_t max)
{
	ssd_load *ld = &t->ld;
	kvs_tier_blk b;

	for (; max && ld->linked < ld->n; max--) {
		const ssd_pend *p = &ld->pend[ld->linked++];

		if (kvs_tier_rec(&t->base, p->idx, &b) == 0 && b.ns == p->ns &&
		    b.hash.lo == p->hash.lo && b.hash.hi == p->hash.hi &&
		    !b.parent.lo && !b.parent.hi)
			kvs_tier_rec_link(&t->base, p->idx, p->parent);
	}
}

/* CPU time of the calling thread, microseconds. */
static uint64_t cpu_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Page faults that read from disk, of the calling thread so far. */
static uint64_t majflt_now(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_THREAD, &ru) == 0 ? (uint64_t)ru.ru_majflt : 0;
}

/* ---- the reader thread ------------------------------------------------ */

static int collect_one(void *arg, const kvs_index_key *k, const kvs_index_val *v)
{
	ssd_batch *b = arg;

	b->e[b->n++] = (ssd_entry){ *k, *v };
	return 0;
}

/* Walk the index into the free batches, ahead of the loop, which finds
 * them ready without a page fault of its own. A batch holds the committed
 * state of its read: one that the loop finds older than a delete it made
 * (a dropped copy) is read again (load_take). */
static void *load_reader(void *arg)
{
	ssd_tier *t = arg;
	ssd_load *ld = &t->ld;

	pthread_mutex_lock(&ld->mu);
	for (;;) {
		ssd_batch *b;
		kvs_index_pos pos;
		uint64_t epoch;
		int64_t rc;

		while (!ld->stop && (ld->nready == LOAD_BATCHES || ld->next.done))
			pthread_cond_wait(&ld->cv, &ld->mu);
		if (ld->stop)
			break;
		b = &ld->b[(ld->head + ld->nready) % LOAD_BATCHES];
		epoch = ld->epoch;
		pos = b->from = ld->next;
		b->seq = ld->flushed; /* before the transaction: it has those */
		b->n = 0;
		pthread_mutex_unlock(&ld->mu);
		rc = kvs_index_walk(t->ix, &pos, ld->slice, collect_one, b);
		if (ld->pause_us)
			nanosleep(&(struct timespec){ 0, (long)ld->pause_us * 1000 },
				  NULL);
		pthread_mutex_lock(&ld->mu);
		if (epoch != ld->epoch)
			continue; /* rewound meanwhile: void */
		b->err = rc < 0 ? (int)rc : 0;
		b->done = pos.done || rc < 0;
		ld->next = pos;
		ld->next.done = b->done;
		ld->nready++;
		kvs_ssd_kick(t->ssd); /* eventfd_write: any thread */
	}
	pthread_mutex_unlock(&ld->mu);
	return NULL;
}

static void load_reader_start(ssd_tier *t)
{
	ssd_load *ld = &t->ld;
	int i;

	for (i = 0; i < LOAD_BATCHES; i++)
		if (!(ld->b[i].e = malloc(ld->slice * sizeof(ssd_entry))))
			break;
	if (i < LOAD_BATCHES || pthread_mutex_init(&ld->mu, NULL)) {
		while (i-- > 0)
			free(ld->b[i].e);
		return;
	}
	pthread_cond_init(&ld->cv, NULL);
	ld->next = ld->pos;
	ld->reader_on = pthread_create(&ld->reader, NULL, load_reader, t) == 0;
	if (!ld->reader_on)
		ssd_load_stop(t);
}

void ssd_load_stop(ssd_tier *t)
{
	ssd_load *ld = &t->ld;

	if (ld->reader_on) {
		pthread_mutex_lock(&ld->mu);
		ld->stop = 1;
		pthread_cond_broadcast(&ld->cv);
		pthread_mutex_unlock(&ld->mu);
		pthread_join(ld->reader, NULL);
		ld->reader_on = 0;
	} else if (!ld->b[0].e) {
		return; /* never started, or stopped */
	}
	pthread_cond_destroy(&ld->cv);
	pthread_mutex_destroy(&ld->mu);
	for (int i = 0; i < LOAD_BATCHES; i++) {
		free(ld->b[i].e);
		ld->b[i].e = NULL;
	}
}

/*
 * The next ready batch, or NULL. One older than a delete the loop made
 * since (ld->drops past its seq) may name a copy the table dropped: it is
 * read again from where it began; after LOAD_REWINDS in a row the reader
 * stops and the loop walks on from there itself, each slice right after a
 * flush (the old way: always current).
 */
static ssd_batch *load_take(ssd_tier *t)
{
	ssd_load *ld = &t->ld;
	ssd_batch *b = NULL;

	pthread_mutex_lock(&ld->mu);
	if (!kvs_index_pending(t->ix))
		ld->flushed = ld->drops;
	if (ld->nready > 0 && ld->b[ld->head].seq < ld->drops) {
		ld->pos = ld->b[ld->head].from;
		ld->next = ld->pos;
		ld->nready = 0;
		ld->epoch++;
		ld->rewinds++;
		ld->stale++;
		pthread_cond_broadcast(&ld->cv);
	} else if (ld->nready > 0) {
		b = &ld->b[ld->head];
		ld->stale = 0;
	}
	pthread_mutex_unlock(&ld->mu);
	if (ld->stale >= LOAD_REWINDS)
		ssd_load_stop(t); /* ld->pos: where the stale one began */
	return b;
}

/* Apply batch @b (memory only), then hand its buffer back. */
static int64_t load_apply(ssd_tier *t, ssd_batch *b)
{
	ssd_load *ld = &t->ld;
	int64_t rc = b->err;

	for (uint32_t i = 0; i < b->n && rc >= 0; i++) {
		int r = load_put(t, &b->e[i].k, &b->e[i].v, NULL);

		if (r < 0)
			rc = r;
	}
	ld->walked = b->done;
	pthread_mutex_lock(&ld->mu);
	ld->head = (ld->head + 1) % LOAD_BATCHES;
	ld->nready--;
	pthread_cond_broadcast(&ld->cv);
	pthread_mutex_unlock(&ld->mu);
	return rc;
}

/* ---- the loop's side --------------------------------------------------- */

void ssd_load_step(ssd_tier *t)
{
	ssd_load *ld = &t->ld;
	ssd_batch *b = NULL;
	uint64_t t0, us, f0, c0;
	int64_t rc = 0;

	if (!ld->on)
		return;
	t0 = now_us();
	c0 = cpu_us();
	f0 = majflt_now();
	if (ld->walked)
		link_some(t, ld->slice * 4);
	else if (ld->reader_on && (b = load_take(t)) != NULL)
		rc = load_apply(t, b);
	else if (!ld->reader_on && (rc = kvs_index_walk(t->ix, &ld->pos, ld->slice,
							 walk_one, t)) >= 0)
		ld->walked = ld->pos.done;
	/* How long a request may wait behind the load: logged at the end. */
	us = now_us() - t0;
	if (us > ld->slice_max_us)
		ld->slice_max_us = us;
	if (majflt_now() - f0 > ld->slice_max_majflt)
		ld->slice_max_majflt = majflt_now() - f0;
	if (cpu_us() - c0 > ld->slice_max_cpu_us)
		ld->slice_max_cpu_us = cpu_us() - c0;
	if (rc < 0) {
		load_end(t, (int)rc);
		return;
	}
	if (ld->walked && ld->linked == ld->n) {
		kvs_index_flush(t->ix);
		load_end(t, 0);
		return;
	}
	if (!ld->reader_on && ld->pause_us)
		nanosleep(&(struct timespec){ 0, (long)ld->pause_us * 1000 }, NULL);
	/* Again next turn, unless the reader kicks once a batch is ready. */
	if (ld->walked || !ld->reader_on || b)
		kvs_ssd_kick(t->ssd);
}

int ssd_find(kvs_tier_mod *tt, uint32_t ns, kvs_hash hash, uint32_t *idx)
{
	ssd_tier *t = ssd_of(tt);
	kvs_index_key k = { .ns = ns, .hash = hash };
	kvs_index_val v;
	int rc;

	/* Once the walk is done every entry that could load has. */
	if (!t->ld.on || t->ld.walked)
		return -ENOENT;
	/* As in a slice: the index as the table left it. */
	if (kvs_index_pending(t->ix))
		kvs_index_flush(t->ix);
	if (kvs_index_get(t->ix, &k, &v) < 0)
		return -ENOENT;
	rc = load_put(t, &k, &v, idx);
	if (rc != 0)
		return rc < 0 ? rc : -ENOENT;
	t->ld.faults++;
	ssd_of(tt)->counts.index_faults++;
	return 0;
}

/* The namespaces now (few, and a lookup needs them), the blocks in the
 * background: the daemon serves while they load. */
int ssd_restore(kvs_tier_mod *tt)
{
	ssd_tier *t = ssd_of(tt);
	ssd_load *ld = &t->ld;
	int rc = kvs_nsfile_load(t->dir, ns_restore_one, t);
	if (rc < 0) {
		kvs_err("SSD tier: warm restart failed: %s", kvs_strerror(rc));
		return rc;
	}
	clock_gettime(CLOCK_MONOTONIC, &ld->t0);
	ld->slice = env_u32("KVS_SSD_LOAD_SLICE", LOAD_SLICE, LOAD_SLICE_MAX);
	ld->pause_us = env_u32("KVS_SSD_LOAD_PAUSE_US", 0, 100000);
	if (!ld->slice)
		ld->slice = LOAD_SLICE;
	ld->on = 1;
	if (env_u32("KVS_SSD_LOAD_THREAD", 1, 1))
		load_reader_start(t);
	kvs_info("SSD tier: loading %" PRIu64 " index entries in the background%s",
		 kvs_index_count(t->ix), ld->reader_on ? " (a reader thread)" : "");
	kvs_ssd_kick(t->ssd);
	return 0;
}
