/* tier_remote.c - the remote tier (see tier_remote.h, docs/remote.md). */
#define _GNU_SOURCE
#include "tier_remote.h"
#include "tier_remote_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvs_log.h"
#include "kvs_ns.h"
#include "kvs_remote.h"
#include "kvs_remote_value.h"
#include "kvs_types.h" /* kvs_strerror */

static remote_tier *remote_of(const kvs_tier_mod *t)
{
	return (remote_tier *)t;
}

/* ---- jobs ------------------------------------------------------------- */

int remote_job_new(remote_tier *t, uint8_t kind, uint32_t *out)
{
	rjob *b;

	if (kvs_pool_alloc(&t->jobs, out) < 0)
		return -ENOMEM;
	b = remote_job(t, *out);
	b->self = *out;
	b->kind = kind;
	b->buf = NULL;
	b->pinned = 0;
	return 0;
}

void remote_job_free(remote_tier *t, uint32_t j)
{
	rjob *b = remote_job(t, j);

	if (b->buf) {
		remote_stage_put(t, b->buf, b->bytes);
		t->staged -= b->bytes;
	}
	if (b->pinned) {
		kvs_tier_pin(&t->base, b->idx, -1);
		t->pinned_bytes -= b->bytes;
	}
	b->pinned = 0;
	b->buf = NULL;
	b->kind = JOB_FREE;
	kvs_pool_free(&t->jobs, j);
}

void remote_count_error(remote_tier *t, int res)
{
	kvs_tier_remote_stats *st = &t->counts;

	if (res == -ENOENT)
		st->misses++;
	else if (res == -ETIMEDOUT)
		st->errors_timeout++;
	else if (res == -ENETDOWN)
		st->errors_clusterdown++;
	else if (res == -ECONNREFUSED || res == -ECONNRESET || res == -EPIPE ||
		 res == -EHOSTUNREACH || res == -ENETUNREACH || res == -ENOTCONN)
		st->errors_down++;
	else
		st->errors_other++;
}

uint64_t remote_fingerprint(const remote_tier *t, uint32_t ns)
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

	if (n == 0 || n > PROBE_MAX || remote_fingerprint(t, b[0].ns) == 0)
		return -EINVAL;
	if ((rc = remote_job_new(t, JOB_PROBE, &j)) < 0)
		return rc;
	p = remote_job(t, j);
	p->cookie = cookie;
	p->n = n;
	for (uint32_t i = 0; i < n; i++) {
		kvs_rval_key(p->keys[i], remote_fingerprint(t, b[i].ns), b[i].hash);
		keys[i] = p->keys[i];
		klens[i] = KVS_RVAL_KEY_BYTES;
	}
	rc = kvs_remote_exists(t->eng, keys, klens, n, p->res, j);
	if (rc < 0) {
		remote_job_free(t, j);
		return rc;
	}
	t->counts.probes++;
	t->counts.probe_keys += n;
	return 1;
}

/* The EXISTS of a probe: the chain's present prefix. */
static void probe_done(remote_tier *t, uint32_t j, const kvs_remote_cqe *q)
{
	rjob *p = remote_job(t, j);
	uint64_t cookie = p->cookie;
	uint32_t k = 0;

	while (q->res >= 0 && k < p->n && p->res[k] == 1)
		k++;
	if (q->res < 0)
		remote_count_error(t, q->res);
	else if (k < p->n && p->res[k] < 0)
		remote_count_error(t, p->res[k]); /* the chain stops at a failed key */
	else
		t->counts.misses += k < p->n; /* where the chain stops */
	remote_job_free(t, j);
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

	if ((rc = remote_job_new(t, JOB_FETCH, &j)) < 0)
		return rc;
	f = remote_job(t, j);
	f->cookie = cookie;
	f->dst = dst;
	f->idx = b->idx;
	f->bytes = b->bytes;
	f->want = (kvs_rval_info){ .block_bytes = b->bytes,
				   .ns_fp = remote_fingerprint(t, b->ns), .hash = b->hash };
	kvs_rval_key(key, f->want.ns_fp, b->hash);
	iov[0] = (struct iovec){ f->hdr, KVS_RVAL_HDR_BYTES };
	iov[1] = (struct iovec){ dst, b->bytes };
	rc = kvs_remote_get(t->eng, key, sizeof(key), iov, 2, j);
	if (rc < 0) {
		remote_job_free(t, j);
		return rc;
	}
	return 1;
}

/* A fetch ends: with @res 0 its value was verified (the record becomes
 * READY in kvs_tier_read_done, and not before), else it is a miss. */
static void fetch_end(remote_tier *t, uint32_t j, int res, const kvs_rval_info *got)
{
	rjob *f = remote_job(t, j);
	uint64_t cookie = f->cookie;

	if (res == -EMSGSIZE) {
		/* a value of another length (cut, or not ours): its header
		 * cannot say it is this block, and the next publish replaces it */
		remote_rejected(t, f, -EBADMSG, got);
	} else if (res == -EBADMSG || res == -EKEYREJECTED) {
		remote_rejected(t, f, res, got);
	} else if (res == 0) {
		if (f->idx / 8 < t->nfetched)
			t->fetched[f->idx / 8] |= (uint8_t)(1u << (f->idx % 8));
		t->counts.hits++;
		t->counts.bytes_in += f->bytes;
		t->corrupt_logged = 0;
		t->forged_logged = 0;
	} else {
		remote_count_error(t, res);
	}
	remote_job_free(t, j);
	kvs_tier_read_done(&t->base, cookie, res);
}

/* The GET of a fetch: served only when its header says it is the block
 * asked for and its MAC is one our secret makes, which the MAC workers
 * decide: the lookup waits for them (its slot held, the record not READY). */
static void fetch_done(remote_tier *t, uint32_t j, const kvs_remote_cqe *q)
{
	static const kvs_rval_info none;

	if (q->res == 0) {
		remote_job(t, j)->got = none;
		remote_work_submit(t, j);
		return;
	}
	fetch_end(t, j, q->res, &none);
}

void remote_fetch_verified(remote_tier *t, uint32_t j)
{
	fetch_end(t, j, remote_job(t, j)->wres, &remote_job(t, j)->got);
}

static void on_done(void *arg, const kvs_remote_cqe *q)
{
	remote_tier *t = arg;
	uint32_t j = (uint32_t)q->cookie;

	switch (remote_job(t, j)->kind) {
	case JOB_PROBE:
		probe_done(t, j, q);
		break;
	case JOB_FETCH:
		fetch_done(t, j, q);
		break;
	case JOB_CHECK:
		remote_check_done(t, j, q);
		break;
	case JOB_PUBLISH:
	case JOB_REPAIR:
		remote_publish_done(t, j, q);
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
		t->counts.existed++; /* it came from there */
	else if (!t->write_through)
		remote_publish(t, b, 0);
	return KVS_TIER_REFUSED;
}

static void remote_committed(kvs_tier_mod *tt, const kvs_tier_blk *b)
{
	remote_tier *t = remote_of(tt);

	if (t->write_through)
		remote_publish(t, b, 1);
}

/* The namespace's fingerprint: its layout and salt, as a namespace record
 * (kvs_ns.h) encodes them (the same bytes on every machine). */
static void remote_ns_created(kvs_tier_mod *tt, uint32_t id, const kvs_ns_desc *d)
{
	remote_tier *t = remote_of(tt);
	kvs_ns_layout ns = {
		.model = d->model, .model_len = (uint32_t)strlen(d->model),
		.adapter = d->adapter, .adapter_len = (uint32_t)strlen(d->adapter),
		.salt = d->salt, .salt_len = d->salt_len, .layers = d->layers,
		.kv_heads = d->kv_heads, .head_dim = d->head_dim,
		.block_tokens = d->block_tokens, .tp_rank = d->tp_rank,
		.tp_size = d->tp_size, .dtype = d->dtype };

	if (id > t->nns) {
		uint64_t *nf = realloc(t->ns_fp, (size_t)id * sizeof(*nf));

		if (!nf)
			return; /* no fingerprint: not shared */
		memset(nf + t->nns, 0, (size_t)(id - t->nns) * sizeof(*nf));
		t->ns_fp = nf;
		t->nns = id;
	}
	/* 0 means "none": a namespace that cannot be encoded is not shared. */
	t->ns_fp[id - 1] = kvs_rval_ns_fp(&ns);
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
	kvs_tier_remote_stats *c = &t->counts;
	kvs_remote_stats rs;

	kvs_remote_get_stats(t->eng, &rs);
	c->enabled = 1;
	c->authenticated = kvs_rval_mac_id(t->mac) != 0;
	c->pinned_bytes = (int64_t)t->pinned_bytes;
	c->mac_queued = (int64_t)t->work.queued;
	c->cluster = kvs_remote_is_cluster(t->eng);
	c->attached = (int64_t)rs.attached;
	c->maps_refused = rs.maps_refused;
	c->errors_proto = rs.err_proto;
	c->nodes = (int64_t)rs.nodes;
	c->nodes_down = (int64_t)rs.nodes_down;
	c->inflight_bytes = (int64_t)rs.inflight_bytes;
	c->lat_p50_us = (int64_t)lat_bound(&rs, 0.5);
	c->lat_p99_us = (int64_t)lat_bound(&rs, 0.99);
}

static int remote_event_fd(const kvs_tier_mod *tt)
{
	return remote_of(tt)->work.epfd;
}

static void remote_poll(kvs_tier_mod *tt)
{
	remote_tier *t = remote_of(tt);

	remote_work_poll(t);
	kvs_remote_poll(t->eng);
}

static void remote_close(kvs_tier_mod *tt)
{
	remote_tier *t = remote_of(tt);

	remote_work_stop(t); /* first: the workers read jobs' buffers */
	kvs_remote_close(t->eng); /* pending requests dropped: buffers ours */
	for (uint32_t i = 0; i < kvs_pool_cap(&t->jobs); i++)
		if (remote_job(t, i)->kind != JOB_FREE)
			free(remote_job(t, i)->buf);
	kvs_pool_fini(&t->jobs);
	for (uint32_t i = 0; i < t->nspare; i++)
		free(t->spare[i]);
	free(t->ns_fp);
	free(t->fetched);
	kvs_rval_mac_free(t->mac);
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

#define KVS_STAT_TYPE kvs_tier_remote_stats
KVS_STATS_SECTION_DEFINE(kvs_tier_remote_section, "tier_remote",
			 KVS_TIER_REMOTE, KVS_TIER_REMOTE_STATS);
#undef KVS_STAT_TYPE

static const kvs_tier_store_ops remote_store_ops = {
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

static const kvs_tier_ops remote_ops = {
	.name = "remote",
	.tier = KVS_TIER_REMOTE,
	.close = remote_close,
	.event_fd = remote_event_fd,
	.poll = remote_poll,
	.stats = remote_stats,
	.stats_section = &kvs_tier_remote_section,
	.store = &remote_store_ops,
};

/* ---- open ------------------------------------------------------------- */

/* The MAC key from the secret file: its bytes, a final newline dropped.
 * Without a file the values are checked, not authenticated: said at start
 * (and by the tier_remote.authenticated gauge). */
static int read_secret(const char *path, kvs_rval_mac **mac)
{
	uint8_t buf[4096];
	struct stat st;
	size_t n;
	int rc, fd;

	if (!path || !path[0]) {
		kvs_warn("remote tier: no --remote-secret-file: values are checked "
			 "but not authenticated, so anyone who can write to the "
			 "cluster can serve KV to this daemon (docs/remote.md, \"Trust\")");
		return kvs_rval_mac_create(NULL, 0, mac);
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		kvs_err("--remote-secret-file %s: %s", path, kvs_strerror(rc));
		return rc;
	}
	if (fstat(fd, &st) == 0 && (st.st_mode & 077))
		kvs_warn("--remote-secret-file %s: readable by others (chmod 600)", path);
	n = 0;
	while (n < sizeof(buf)) {
		ssize_t r = read(fd, buf + n, sizeof(buf) - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	rc = n >= KVS_RVAL_SECRET_MIN && n < sizeof(buf) ? kvs_rval_mac_create(buf, n, mac)
							 : -EINVAL;
	explicit_bzero(buf, sizeof(buf));
	if (rc == -EINVAL)
		kvs_err("--remote-secret-file %s: want %d to %zu bytes of secret "
			"(e.g. openssl rand -hex 32)", path, KVS_RVAL_SECRET_MIN,
			sizeof(buf) - 1);
	else if (rc < 0)
		kvs_err("remote tier: no HMAC-SHA-256 or Poly1305 in OpenSSL: %s",
			kvs_strerror(rc));
	return rc;
}

int kvs_tier_remote_open(const kvs_tier_remote_config *cfg, kvs_tier_mod **out)
{
	remote_tier *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return -ENOMEM;
	t->base.ops = &remote_ops;
	t->base.counters = &t->counts;
	t->write_through = cfg->write_through;
	t->pin_share = cfg->pin_share;
	/* Jobs by the 64 (the first array's size before the pool). */
	rc = kvs_pool_init(&t->jobs, sizeof(rjob), 6, KVS_POOL_MAX);
	if (rc == 0)
		rc = read_secret(cfg->secret_file, &t->mac);
	if (rc == 0 && cfg->mac_version)
		rc = kvs_rval_mac_set_version(t->mac, cfg->mac_version);
	if (rc == 0)
		rc = kvs_remote_create(&t->eng);
	if (rc == 0)
		rc = kvs_remote_set_seeds(t->eng, cfg->seeds);
	if (rc == 0 && cfg->auth_file && cfg->auth_file[0])
		rc = kvs_tier_remote_auth(t->eng, cfg->auth_file);
	if (rc == 0)
		rc = kvs_remote_set_timeout_ms(t->eng, cfg->timeout_ms);
	if (rc == 0)
		rc = kvs_remote_set_connect_timeout_ms(t->eng, cfg->timeout_ms);
	if (rc == 0 && cfg->tls && (rc = kvs_remote_set_tls(t->eng, cfg->tls)) < 0)
		kvs_err("remote tier: %s", kvs_remote_last_error(t->eng));
	if (rc == 0) {
		kvs_remote_set_callback(t->eng, on_done, t);
		kvs_remote_set_event_fn(t->eng, kvs_tier_remote_event, t->eng);
		rc = kvs_tier_remote_start(t->eng, cfg->seeds, &t->attaching);
	}
	if (rc == 0)
		rc = remote_work_start(t, REMOTE_WORKERS);
	if (rc < 0) {
		remote_close(&t->base);
		return rc;
	}
	kvs_info("remote tier: %s (%s%s), publish on %s, timeout %u ms, values %s "
		 "(key id %016" PRIx64 ", %s)", cfg->seeds,
		 t->attaching ? "not answering yet"
		 : kvs_remote_is_cluster(t->eng) ? "Redis Cluster" : "one node",
		 cfg->tls ? ", TLS" : "", t->write_through ? "commit" : "eviction",
		 cfg->timeout_ms,
		 kvs_rval_mac_id(t->mac) ? "authenticated" : "NOT authenticated",
		 kvs_rval_mac_id(t->mac),
		 kvs_rval_mac_version(t->mac) == KVS_RVAL_V_HMAC ? "HMAC-SHA-256" : "Poly1305");
	*out = &t->base;
	return 0;
}
