/* tier_remote.c - the remote tier (see tier_remote.h, docs/remote.md). */
#define _GNU_SOURCE
#include "tier_remote.h"
#include "tier_remote_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvs_log.h"
#include "kvs_nsfile.h"
#include "kvs_remote.h"
#include "kvs_remote_value.h"
#include "kvshare.h" /* kvs_strerror */

/* Blocks being published are copied first (their slot may be evicted and
 * reused before the SET completes); past this many bytes of copies in
 * flight a block is not published (counted as skipped). */
#define MAX_STAGED_BYTES (256ull << 20)
#define PROBE_MAX 64 /* the cache asks about at most KVS_FETCH_MAX blocks */
/* Staging copies are kept for reuse, up to this many bytes: a fresh 1-2 MiB
 * malloc is a new mapping whose page faults cost as much as the copy
 * (kvsbench remote: the commit of 32 MiB took 30 ms, 13 ms with reuse). */
#define SPARE_MAX 64
#define SPARE_BYTES (128ull << 20) /* half of MAX_STAGED_BYTES */

enum job_kind { JOB_FREE = 0, JOB_PROBE, JOB_FETCH, JOB_CHECK, JOB_PUBLISH };

typedef struct rjob {
	uint8_t kind;
	uint32_t next;        /* free list */
	uint64_t cookie;      /* the cache's (probe, fetch) */
	uint32_t n;           /* probe: keys asked */
	int res[PROBE_MAX];   /* probe: per key */
	uint8_t keys[PROBE_MAX][KVS_RVAL_KEY_BYTES];
	uint8_t hdr[KVS_RVAL_HDR_BYTES];
	kvs_rval_info want;   /* fetch: what must arrive */
	void *dst;            /* fetch: the payload's slot */
	void *buf;            /* publish: the payload's copy, or NULL */
	const void *src;      /* publish: the payload sent (the copy, or the
			       * slot of a record pinned until the SET ends) */
	uint32_t idx;         /* fetch, pinned publish: the record */
	int pinned;
	uint64_t bytes;
} rjob;

typedef struct remote_tier {
	kvs_tier_mod base;    /* first: the cache's handle */
	kvs_remote *eng;
	int write_through;
	uint64_t *ns_fp;      /* by namespace id - 1 */
	uint32_t nns;
	rjob **jobs;          /* each its own allocation: the engine holds
			       * pointers into a job (header, results) */
	uint32_t njobs, free_job;
	uint64_t staged;
	void *spare[SPARE_MAX]; /* staging buffers free for reuse */
	uint64_t spare_len[SPARE_MAX], spare_bytes;
	uint32_t nspare;
	/* By record index: the block came from the cluster (fetched and
	 * verified), so its eviction publishes nothing: a daemon in demote
	 * mode would otherwise copy, checksum and EXISTS every block it ever
	 * fetched (kvsbench remote: promotion 0.63 GB/s, 1.47 without). */
	uint8_t *fetched;
	uint32_t nfetched;    /* bytes of the bitmap */
	int corrupt_logged;   /* one line per episode of corrupt values */
	int attaching;        /* started before the cluster answered */
	kvs_counters own;     /* tier_remote.* counted here, copied in stats */
} remote_tier;

static remote_tier *remote_of(const kvs_tier_mod *t)
{
	return (remote_tier *)t;
}

/* ---- jobs ------------------------------------------------------------- */

static int job_new(remote_tier *t, uint8_t kind, uint32_t *out)
{
	if (t->free_job == UINT32_MAX) {
		uint32_t n = t->njobs ? t->njobs * 2 : 64;
		rjob **nj = realloc(t->jobs, (size_t)n * sizeof(*nj));

		if (!nj)
			return -ENOMEM;
		t->jobs = nj;
		for (uint32_t i = n; i-- > t->njobs;) {
			nj[i] = calloc(1, sizeof(rjob));
			if (!nj[i]) {
				for (uint32_t k = i + 1; k < n; k++)
					free(nj[k]);
				t->free_job = UINT32_MAX;
				return -ENOMEM;
			}
			nj[i]->next = t->free_job;
			t->free_job = i;
		}
		t->njobs = n;
	}
	*out = t->free_job;
	t->free_job = t->jobs[*out]->next;
	t->jobs[*out]->kind = kind;
	t->jobs[*out]->buf = NULL;
	t->jobs[*out]->pinned = 0;
	return 0;
}

/* A staging buffer of @bytes: a spare one of that size, else a new one. */
static void *stage_get(remote_tier *t, uint64_t bytes)
{
	for (uint32_t i = 0; i < t->nspare; i++)
		if (t->spare_len[i] == bytes) {
			void *buf = t->spare[i];

			t->spare_bytes -= bytes;
			t->nspare--;
			t->spare[i] = t->spare[t->nspare];
			t->spare_len[i] = t->spare_len[t->nspare];
			return buf;
		}
	return malloc(bytes);
}

static void stage_put(remote_tier *t, void *buf, uint64_t bytes)
{
	if (t->nspare < SPARE_MAX && t->spare_bytes + bytes <= SPARE_BYTES) {
		t->spare[t->nspare] = buf;
		t->spare_len[t->nspare++] = bytes;
		t->spare_bytes += bytes;
	} else {
		free(buf);
	}
}

static void job_free(remote_tier *t, uint32_t j)
{
	rjob *b = t->jobs[j];

	if (b->buf) {
		stage_put(t, b->buf, b->bytes);
		t->staged -= b->bytes;
	}
	if (b->pinned)
		kvs_tier_pin(&t->base, b->idx, -1);
	b->pinned = 0;
	b->buf = NULL;
	b->kind = JOB_FREE;
	b->next = t->free_job;
	t->free_job = j;
}

/* A failed request, counted by kind. */
static void count_error(remote_tier *t, int res)
{
	kvs_counters *st = &t->own;

	if (res == -ENOENT)
		st->tier_remote_misses++;
	else if (res == -ETIMEDOUT)
		st->tier_remote_errors_timeout++;
	else if (res == -ENETDOWN)
		st->tier_remote_errors_clusterdown++;
	else if (res == -ECONNREFUSED || res == -ECONNRESET || res == -EPIPE ||
		 res == -EHOSTUNREACH || res == -ENETUNREACH || res == -ENOTCONN)
		st->tier_remote_errors_down++;
	else
		st->tier_remote_errors_other++;
}

static uint64_t fingerprint(const remote_tier *t, uint32_t ns)
{
	return ns >= 1 && ns <= t->nns ? t->ns_fp[ns - 1] : 0;
}

/* ---- lookups: probe, then fetch --------------------------------------- */

static int remote_probe(kvs_tier_mod *tt, const kvs_tier_blk *b, uint32_t n,
			uint64_t cookie)
{
	remote_tier *t = remote_of(tt);
	const void *keys[PROBE_MAX];
	size_t klens[PROBE_MAX];
	uint32_t j;
	rjob *p;
	int rc;

	if (n == 0 || n > PROBE_MAX || fingerprint(t, b[0].ns) == 0)
		return -EINVAL;
	if ((rc = job_new(t, JOB_PROBE, &j)) < 0)
		return rc;
	p = t->jobs[j];
	p->cookie = cookie;
	p->n = n;
	for (uint32_t i = 0; i < n; i++) {
		kvs_rval_key(p->keys[i], b[i].hash);
		keys[i] = p->keys[i];
		klens[i] = KVS_RVAL_KEY_BYTES;
	}
	rc = kvs_remote_exists(t->eng, keys, klens, n, p->res, j);
	if (rc < 0) {
		job_free(t, j);
		return rc;
	}
	t->own.tier_remote_probes++;
	t->own.tier_remote_probe_keys += n;
	return 1;
}

/* The EXISTS of a probe: the chain's present prefix. */
static void probe_done(remote_tier *t, uint32_t j, const kvs_remote_cqe *q)
{
	rjob *p = t->jobs[j];
	uint64_t cookie = p->cookie;
	uint32_t k = 0;

	while (q->res >= 0 && k < p->n && p->res[k] == 1)
		k++;
	if (q->res < 0)
		count_error(t, q->res);
	else if (k < p->n && p->res[k] < 0)
		count_error(t, p->res[k]); /* the chain stops at a failed key */
	else
		t->own.tier_remote_misses += k < p->n; /* where the chain stops */
	job_free(t, j);
	kvs_tier_probe_done(&t->base, cookie, (int)k);
}

static int remote_fetch(kvs_tier_mod *tt, const kvs_tier_blk *b, void *dst,
			uint64_t cookie)
{
	remote_tier *t = remote_of(tt);
	uint8_t key[KVS_RVAL_KEY_BYTES];
	struct iovec iov[2];
	uint32_t j;
	rjob *f;
	int rc;

	if ((rc = job_new(t, JOB_FETCH, &j)) < 0)
		return rc;
	f = t->jobs[j];
	f->cookie = cookie;
	f->dst = dst;
	f->idx = b->idx;
	f->bytes = b->bytes;
	f->want = (kvs_rval_info){ .block_bytes = b->bytes,
				   .ns_fp = fingerprint(t, b->ns), .hash = b->hash };
	kvs_rval_key(key, b->hash);
	iov[0] = (struct iovec){ f->hdr, KVS_RVAL_HDR_BYTES };
	iov[1] = (struct iovec){ dst, b->bytes };
	rc = kvs_remote_get(t->eng, key, sizeof(key), iov, 2, j);
	if (rc < 0) {
		job_free(t, j);
		return rc;
	}
	return 1;
}

/* The GET of a fetch: served only when its header and checksum say it is
 * the block asked for. */
static void fetch_done(remote_tier *t, uint32_t j, const kvs_remote_cqe *q)
{
	rjob *f = t->jobs[j];
	uint64_t cookie = f->cookie;
	int res = q->res;

	if (res == 0 && kvs_rval_verify(f->hdr, f->dst, f->bytes, &f->want, NULL) < 0) {
		res = -EBADMSG;
		t->own.tier_remote_corrupt++;
		if (!t->corrupt_logged)
			kvs_warn("remote tier: a value failed its header or checksum "
				 "check: not served (tier_remote.corrupt counts them)");
		t->corrupt_logged = 1;
	} else if (res == 0) {
		if (f->idx / 8 < t->nfetched)
			t->fetched[f->idx / 8] |= (uint8_t)(1u << (f->idx % 8));
		t->own.tier_remote_hits++;
		t->own.tier_remote_bytes_in += f->bytes;
		t->corrupt_logged = 0;
	} else {
		count_error(t, res);
	}
	job_free(t, j);
	kvs_tier_read_done(&t->base, cookie, res);
}

/* ---- publishing: EXISTS, then SET NX of what is missing --------------- */

/* Publish @b: EXISTS, then SET NX of a header and the payload. At commit
 * (@pin) the payload goes straight from the block's slot, the record
 * pinned until the SET ends (a committed block's bytes do not change, and
 * a pinned one is not evicted); at eviction the slot is about to be
 * reused, so the payload goes from a staging copy. */
static void publish(remote_tier *t, const kvs_tier_blk *b, int pin)
{
	const void *key;
	size_t klen = KVS_RVAL_KEY_BYTES;
	kvs_rval_info info = { .block_bytes = b->bytes, .ns_fp = fingerprint(t, b->ns),
			       .hash = b->hash, .parent = b->parent };
	const void *slot = kvs_tier_host_ptr(&t->base, b->host_off);
	uint32_t j;
	rjob *p;

	if (info.ns_fp == 0)
		return;
	if ((!pin && t->staged + b->bytes > MAX_STAGED_BYTES) ||
	    job_new(t, JOB_CHECK, &j) < 0) {
		t->own.tier_remote_skipped++;
		return;
	}
	p = t->jobs[j];
	p->bytes = b->bytes;
	p->pinned = pin;
	p->idx = b->idx;
	if (pin) {
		kvs_tier_pin(&t->base, b->idx, 1);
		p->src = slot;
	} else {
		p->buf = stage_get(t, b->bytes);
		if (!p->buf) {
			job_free(t, j);
			t->own.tier_remote_skipped++;
			return;
		}
		t->staged += b->bytes;
		memcpy(p->buf, slot, b->bytes);
		p->src = p->buf;
	}
	info.csum = kvs_rval_csum(p->src, b->bytes);
	kvs_rval_encode(p->hdr, &info);
	kvs_rval_key(p->keys[0], b->hash);
	key = p->keys[0];
	if (kvs_remote_exists(t->eng, &key, &klen, 1, p->res, j) < 0)
		job_free(t, j);
}

/* The EXISTS before a publish: send it only if it is missing. */
static void check_done(remote_tier *t, uint32_t j, const kvs_remote_cqe *q)
{
	rjob *p = t->jobs[j];
	struct iovec iov[2] = { { p->hdr, KVS_RVAL_HDR_BYTES },
				{ (void *)p->src, p->bytes } };

	if (q->res < 0) {
		count_error(t, q->res);
		job_free(t, j);
		return;
	}
	if (p->res[0] == 1) {
		t->own.tier_remote_existed++;
		job_free(t, j);
		return;
	}
	p->kind = JOB_PUBLISH;
	if (kvs_remote_set_nx(t->eng, p->keys[0], KVS_RVAL_KEY_BYTES, iov, 2, j) < 0)
		job_free(t, j);
}

static void publish_done(remote_tier *t, uint32_t j, const kvs_remote_cqe *q)
{
	if (q->res == 0) {
		t->own.tier_remote_published++;
		t->own.tier_remote_bytes_out += t->jobs[j]->bytes;
	} else if (q->res == -EEXIST) {
		t->own.tier_remote_existed++;
	} else {
		count_error(t, q->res);
	}
	job_free(t, j);
}

static void on_done(void *arg, const kvs_remote_cqe *q)
{
	remote_tier *t = arg;
	uint32_t j = (uint32_t)q->cookie;

	switch (t->jobs[j]->kind) {
	case JOB_PROBE:
		probe_done(t, j, q);
		break;
	case JOB_FETCH:
		fetch_done(t, j, q);
		break;
	case JOB_CHECK:
		check_done(t, j, q);
		break;
	case JOB_PUBLISH:
		publish_done(t, j, q);
		break;
	}
}

/* ---- the operations --------------------------------------------------- */

static int remote_demote(kvs_tier_mod *tt, const kvs_tier_blk *b, int *holds)
{
	remote_tier *t = remote_of(tt);

	/* A copy goes out; the tier keeps nothing here, so a lower tier (SSD)
	 * may keep the block too, and without one it leaves this daemon. */
	*holds = 0;
	if (b->idx / 8 < t->nfetched && (t->fetched[b->idx / 8] >> (b->idx % 8) & 1))
		t->own.tier_remote_existed++; /* it came from there */
	else if (!t->write_through)
		publish(t, b, 0);
	return KVS_TIER_REFUSED;
}

static void remote_committed(kvs_tier_mod *tt, const kvs_tier_blk *b)
{
	remote_tier *t = remote_of(tt);

	if (t->write_through)
		publish(t, b, 1);
}

/* The namespace's fingerprint: its layout and salt, as the namespaces file
 * encodes them (the same bytes on every machine). */
static void remote_ns_created(kvs_tier_mod *tt, uint32_t id, const kvs_ns_desc *d)
{
	remote_tier *t = remote_of(tt);
	uint8_t buf[KVS_NSFILE_ENTRY_MAX];
	kvs_nsfile_ns ns = {
		.model = d->model, .model_len = (uint32_t)strlen(d->model),
		.adapter = d->adapter, .adapter_len = (uint32_t)strlen(d->adapter),
		.salt = d->salt, .salt_len = d->salt_len, .layers = d->layers,
		.kv_heads = d->kv_heads, .head_dim = d->head_dim,
		.block_tokens = d->block_tokens, .tp_rank = d->tp_rank,
		.tp_size = d->tp_size, .dtype = d->dtype };
	int n = kvs_nsfile_encode(&ns, buf, sizeof(buf));

	if (id > t->nns) {
		uint64_t *nf = realloc(t->ns_fp, (size_t)id * sizeof(*nf));

		if (!nf)
			return; /* no fingerprint: not shared */
		memset(nf + t->nns, 0, (size_t)(id - t->nns) * sizeof(*nf));
		t->ns_fp = nf;
		t->nns = id;
	}
	/* 0 means "none": a namespace that cannot be encoded is not shared. */
	t->ns_fp[id - 1] = n > 0 ? (XXH3_64bits(buf + 4, (size_t)n - 4) | 1) : 0;
}

/* The percentile @q (0..1) of the engine's latency histogram, as its
 * bucket's upper bound in microseconds. */
static uint64_t lat_bound(const kvs_remote_stats *rs, double q)
{
	uint64_t total = 0, seen = 0;

	for (int i = 0; i < KVS_REMOTE_LAT_BUCKETS; i++)
		total += rs->lat_hist[i];
	for (int i = 0; i < KVS_REMOTE_LAT_BUCKETS && total; i++) {
		seen += rs->lat_hist[i];
		if (seen >= (uint64_t)(q * (double)total))
			return 128ull << i;
	}
	return 0;
}

static void remote_stats(kvs_tier_mod *tt, kvs_counters *st)
{
	remote_tier *t = remote_of(tt);
	kvs_remote_stats rs;

#define COPY(f) st->tier_remote_##f = t->own.tier_remote_##f
	COPY(probes);
	COPY(probe_keys);
	COPY(hits);
	COPY(misses);
	COPY(corrupt);
	COPY(bytes_in);
	COPY(published);
	COPY(existed);
	COPY(bytes_out);
	COPY(skipped);
	COPY(errors_timeout);
	COPY(errors_down);
	COPY(errors_clusterdown);
	COPY(errors_other);
#undef COPY
	kvs_remote_get_stats(t->eng, &rs);
	st->tier_remote_enabled = 1;
	st->tier_remote_cluster = kvs_remote_is_cluster(t->eng);
	st->tier_remote_attached = (int64_t)rs.attached;
	st->tier_remote_maps_refused = rs.maps_refused;
	st->tier_remote_errors_proto = rs.err_proto;
	st->tier_remote_nodes = (int64_t)rs.nodes;
	st->tier_remote_nodes_down = (int64_t)rs.nodes_down;
	st->tier_remote_inflight_bytes = (int64_t)rs.inflight_bytes;
	st->tier_remote_lat_p50_us = (int64_t)lat_bound(&rs, 0.5);
	st->tier_remote_lat_p99_us = (int64_t)lat_bound(&rs, 0.99);
}

static int remote_event_fd(const kvs_tier_mod *tt)
{
	return kvs_remote_fd(remote_of(tt)->eng);
}

static void remote_poll(kvs_tier_mod *tt)
{
	kvs_remote_poll(remote_of(tt)->eng);
}

static void remote_close(kvs_tier_mod *tt)
{
	remote_tier *t = remote_of(tt);

	kvs_remote_close(t->eng); /* pending requests dropped: buffers ours */
	for (uint32_t i = 0; i < t->njobs; i++) {
		if (t->jobs[i] && t->jobs[i]->kind != JOB_FREE)
			free(t->jobs[i]->buf);
		free(t->jobs[i]);
	}
	free(t->jobs);
	for (uint32_t i = 0; i < t->nspare; i++)
		free(t->spare[i]);
	free(t->ns_fp);
	free(t->fetched);
	free(t);
}

static int remote_rec_new(kvs_tier_mod *tt, uint32_t idx)
{
	remote_tier *t = remote_of(tt);

	if (idx / 8 >= t->nfetched) {
		uint32_t n = t->nfetched ? t->nfetched : 4096;
		uint8_t *nf;

		while (idx / 8 >= n)
			n *= 2;
		nf = realloc(t->fetched, n);
		if (!nf)
			return -ENOMEM;
		memset(nf + t->nfetched, 0, n - t->nfetched);
		t->fetched = nf;
		t->nfetched = n;
	}
	t->fetched[idx / 8] &= (uint8_t)~(1u << (idx % 8));
	return 0;
}

static int remote_has(const kvs_tier_mod *t, uint32_t idx)
{
	(void)t;
	(void)idx;
	return 0; /* what it holds is found by probe(), not by record */
}

static int remote_keeps(const kvs_tier_mod *t, const kvs_tier_blk *b)
{
	(void)t;
	(void)b;
	return 0;
}

static int remote_read(kvs_tier_mod *t, const kvs_tier_blk *b, void *dst,
		       uint64_t cookie)
{
	(void)t;
	(void)b;
	(void)dst;
	(void)cookie;
	return -EAGAIN; /* never asked: has() is 0 */
}

static void remote_drop(kvs_tier_mod *t, const kvs_tier_blk *b)
{
	(void)t;
	(void)b;
}

static const kvs_tier_ops remote_ops = {
	.name = "remote",
	.kind = KVS_TIER_STORE,
	.tier = KVS_TIER_REMOTE,
	.close = remote_close,
	.event_fd = remote_event_fd,
	.poll = remote_poll,
	.stats = remote_stats,
	.rec_new = remote_rec_new,
	.has = remote_has,
	.keeps = remote_keeps,
	.demote = remote_demote,
	.committed = remote_committed,
	.read = remote_read,
	.drop = remote_drop,
	.ns_created = remote_ns_created,
	.probe = remote_probe,
	.fetch = remote_fetch,
};

/* ---- open ------------------------------------------------------------- */

int kvs_tier_remote_open(const kvs_tier_remote_config *cfg, kvs_tier_mod **out)
{
	remote_tier *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return -ENOMEM;
	t->base.ops = &remote_ops;
	t->write_through = cfg->write_through;
	t->free_job = UINT32_MAX;
	rc = kvs_remote_create(&t->eng);
	if (rc == 0)
		rc = kvs_remote_set_seeds(t->eng, cfg->seeds);
	if (rc == 0 && cfg->auth_file && cfg->auth_file[0])
		rc = kvs_tier_remote_auth(t->eng, cfg->auth_file);
	if (rc == 0)
		rc = kvs_remote_set_timeout_ms(t->eng, cfg->timeout_ms);
	if (rc == 0)
		rc = kvs_remote_set_connect_timeout_ms(t->eng, cfg->timeout_ms);
	if (rc == 0) {
		kvs_remote_set_callback(t->eng, on_done, t);
		kvs_remote_set_event_fn(t->eng, kvs_tier_remote_event, t->eng);
		rc = kvs_tier_remote_start(t->eng, cfg->seeds, &t->attaching);
	}
	if (rc < 0) {
		remote_close(&t->base);
		return rc;
	}
	kvs_info("remote tier: %s (%s), publish on %s, timeout %u ms", cfg->seeds,
		 t->attaching ? "not answering yet"
		 : kvs_remote_is_cluster(t->eng) ? "Redis Cluster" : "one node",
		 t->write_through ? "commit" : "eviction", cfg->timeout_ms);
	*out = &t->base;
	return 0;
}
