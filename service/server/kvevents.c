/* kvevents.c - the pool as vLLM KV events: sockets, what each record was
 * published as, the batch of a loop turn, the replay buffer (see
 * kvs_kvevents.h). */
#include "kvs_kvevents.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <zmq.h>

#include "kvevents_int.h"
#include "kvs_cache_admin.h"
#include "kvs_log.h"
#include "kvs_types.h"

#define BATCH_BYTES_MAX (1u << 20) /* a batch is sent once past this */
/* One replay answer: at most this many batches and bytes (and at least one
 * batch), then the end marker; the requester asks again for more. */
#define REPLAY_BATCHES 256u
#define REPLAY_BYTES (8u << 20)

typedef struct kept_batch {
	uint64_t seq;
	size_t len;
	uint8_t *buf;
} kept_batch;

struct kvs_kvev {
	kvs_cache *cache;
	kvs_counters *st;
	void *zctx, *pub, *rep;
	struct event *flush_ev, *rep_ev;
	char *topic;
	size_t topic_len;
	/* By record index: the tier it was published in (0: none), its side
	 * record. */
	uint8_t *pub_tier;
	kvev_side **side;
	uint32_t cap;
	/* The batch being made: its events packed, without its head. */
	msgpack_sbuffer evbuf;
	msgpack_packer pk;
	uint32_t nev;
	uint64_t seq; /* the next batch's */
	/* Replay: the latest batches, oldest at head, a ring of ring_cap. */
	kept_batch *ring;
	uint32_t ring_cap, ring_head, ring_n;
	uint64_t ring_bytes, ring_max;
};

/* ---- what a record is published as ------------------------------------ */

static void tier_names(uint8_t tier, kvev_event *ev)
{
	ev->locality = tier == KVS_TIER_REMOTE ? "REMOTE" : "LOCAL";
	ev->medium = tier == KVS_TIER_HOST  ? "CPU"
		     : tier == KVS_TIER_GPU ? "GPU"
					    : "STORAGE";
}

static void hash_bytes(kvs_hash h, uint8_t out[16])
{
	for (int i = 0; i < 8; i++) {
		out[i] = (uint8_t)(h.hi >> (56 - 8 * i));
		out[8 + i] = (uint8_t)(h.lo >> (56 - 8 * i));
	}
}

/* Without a side record: kvshare's hashes, the namespace's block size and
 * adapter, no token ids. @hb and @pb hold the hashes' bytes. */
static void rec_event(const kvs_kvev *e, const kvs_rec *r,
		      kvev_event *ev, uint8_t hb[16], uint8_t pb[16])
{
	const kvs_ns_info *ns = kvs_cache_ns_at(e->cache, r->ns);
	const kvev_side *ps;

	hash_bytes(kvs_cache_rec_hash(r), hb);
	ev->hash_kind = KVS_DESC_HASH_BYTES;
	ev->hash_len = 16;
	ev->hash = hb;
	ev->block_size = ns ? ns->block_tokens : 0;
	ev->lora = ns && ns->adapter ? ns->adapter : "";
	ev->lora_len = (uint32_t)strlen(ev->lora);
	if (r->parent == KVS_NONE)
		return;
	ps = r->parent < e->cap ? e->side[r->parent] : NULL;
	if (ps) { /* the parent as it was published */
		ev->parent_kind = ps->hash_kind;
		ev->parent_len = ps->hash_len;
		ev->parent = ps->hash;
		return;
	}
	hash_bytes(kvs_cache_rec_hash(kvs_cache_rec_at(e->cache, r->parent)), pb);
	ev->parent_kind = KVS_DESC_HASH_BYTES;
	ev->parent_len = 16;
	ev->parent = pb;
}

/* kvshare_ns of @r: its namespace's layout seed without adapter and salt. */
static const uint8_t *ns_name(const kvs_kvev *e, const kvs_rec *r,
			      uint8_t out[KVEV_NS_LEN])
{
	const kvs_ns_info *ns = kvs_cache_ns_at(e->cache, r->ns);
	kvs_layout l;

	if (!ns)
		return NULL;
	l = (kvs_layout){ .model = ns->model, .layers = ns->layers,
			  .kv_heads = ns->kv_heads, .head_dim = ns->head_dim,
			  .block_tokens = ns->block_tokens,
			  .tp_rank = ns->tp_rank, .tp_size = ns->tp_size,
			  .dtype = (kvs_dtype)ns->dtype };
	hash_bytes(kvs_hash_layout_seed(&l), out);
	return out;
}

static void emit(kvs_kvev *e, uint32_t idx, const kvs_rec *r, uint8_t tier,
		 int stored)
{
	kvev_event ev = { .stored = stored };
	uint8_t hb[16], pb[16], nb[KVEV_NS_LEN];

	tier_names(tier, &ev);
	ev.ns = ns_name(e, r, nb);
	if (e->side[idx])
		kvev_side_event(e->side[idx], &ev);
	else
		rec_event(e, r, &ev, hb, pb);
	if (kvev_pack_event(&e->pk, &ev) < 0) {
		kvs_warn("kv events: out of memory: an event is lost");
		return;
	}
	if (++e->nev == 1)
		event_active(e->flush_ev, EV_TIMEOUT, 1);
	if (e->nev >= KVS_KVEV_BATCH_MAX || e->evbuf.size >= BATCH_BYTES_MAX)
		kvs_kvev_flush(e);
}

static int grow(kvs_kvev *e, uint32_t idx)
{
	uint32_t cap = e->cap ? e->cap : 1024;
	uint8_t *t;
	kvev_side **s;

	while (cap <= idx)
		cap *= 2;
	t = realloc(e->pub_tier, cap);
	if (t)
		e->pub_tier = t;
	s = t ? realloc(e->side, cap * sizeof(*s)) : NULL;
	if (!s)
		return -ENOMEM;
	e->side = s;
	memset(e->pub_tier + e->cap, 0, cap - e->cap);
	memset(e->side + e->cap, 0, (cap - e->cap) * sizeof(*s));
	e->cap = cap;
	return 0;
}

static void side_free(kvs_kvev *e, uint32_t idx)
{
	kvev_side *s = e->side[idx];

	if (!s)
		return;
	e->st->kv_events_side_records--;
	e->st->kv_events_side_bytes -= s->bytes;
	free(s);
	e->side[idx] = NULL;
}

static void on_resid(void *arg, uint32_t idx, const kvs_rec *r, int gone)
{
	kvs_kvev *e = arg;
	uint8_t want = !gone && r->state == KVS_REC_READY ? r->tier : 0;
	uint8_t had;

	if (idx >= e->cap && (want == 0 || grow(e, idx) < 0))
		return; /* never published; or no memory: not published */
	had = e->pub_tier[idx];
	if (had != want) {
		if (had)
			emit(e, idx, r, had, 0);
		if (want)
			emit(e, idx, r, want, 1);
		e->pub_tier[idx] = want;
	}
	if (gone)
		side_free(e, idx);
}

int kvs_kvev_describe(kvs_kvev *e, uint32_t idx, const kvs_block_desc *d)
{
	kvev_side *s;

	if (d->extra_len && kvev_extra_check(d->extra, d->extra_len) < 0) {
		e->st->kv_events_side_bad++;
		return KVS_E_PROTO;
	}
	if (idx >= e->cap && grow(e, idx) < 0)
		return -ENOMEM;
	if (e->pub_tier[idx])
		return 0;
	s = kvev_side_new(d);
	if (!s)
		return -ENOMEM;
	side_free(e, idx);
	e->side[idx] = s;
	e->st->kv_events_side_records++;
	e->st->kv_events_side_bytes += s->bytes;
	return 1;
}

int kvs_kvev_describe_all(kvs_kvev *e, kvs_cache *cache, uint32_t ns,
			  const kvs_wire_describe *w, uint64_t *kept)
{
	const uint8_t *p = w->recs;
	kvs_block_desc d;
	int rc;

	*kept = 0;
	if (!e)
		return 0;
	for (uint32_t i = 0; i < w->count; i++) {
		kvs_wire_desc_next(&p, &d);
		if (d.extra_len && kvev_extra_check(d.extra, d.extra_len) < 0) {
			e->st->kv_events_side_bad++;
			return KVS_E_PROTO;
		}
	}
	p = w->recs;
	for (uint32_t i = 0; i < w->count; i++) {
		uint32_t idx;

		kvs_wire_desc_next(&p, &d);
		idx = kvs_cache_find(cache, ns, (kvs_hash){ d.hash_lo, d.hash_hi });
		if (idx == KVS_NONE)
			continue;
		rc = kvs_kvev_describe(e, idx, &d);
		if (rc < 0)
			return rc;
		*kept += (uint64_t)rc;
	}
	return 0;
}

/* ---- batches: sent, kept for replay ----------------------------------- */

static void keep(kvs_kvev *e, uint64_t seq, uint8_t *buf, size_t len)
{
	kept_batch *k;

	if (e->ring_n == e->ring_cap) {
		uint32_t cap = e->ring_cap ? 2 * e->ring_cap : 64;
		kept_batch *r = malloc(cap * sizeof(*r));

		if (!r) {
			free(buf);
			return;
		}
		for (uint32_t i = 0; i < e->ring_n; i++)
			r[i] = e->ring[(e->ring_head + i) % e->ring_cap];
		free(e->ring);
		e->ring = r;
		e->ring_cap = cap;
		e->ring_head = 0;
	}
	e->ring[(e->ring_head + e->ring_n++) % e->ring_cap] =
		(kept_batch){ seq, len, buf };
	e->ring_bytes += len;
	while (e->ring_n > 1 && e->ring_bytes > e->ring_max) {
		k = &e->ring[e->ring_head];
		e->ring_bytes -= k->len;
		free(k->buf);
		e->ring_head = (e->ring_head + 1) % e->ring_cap;
		e->ring_n--;
	}
	e->st->kv_events_buffered_bytes = (int64_t)e->ring_bytes;
}

static void seq_bytes(uint64_t seq, uint8_t out[8])
{
	for (int i = 0; i < 8; i++)
		out[i] = (uint8_t)(seq >> (56 - 8 * i));
}

void kvs_kvev_flush(kvs_kvev *e)
{
	msgpack_sbuffer head;
	msgpack_packer hp;
	struct timeval tv;
	uint8_t sb[8], *buf;
	size_t len;

	if (e->nev == 0)
		return;
	gettimeofday(&tv, NULL);
	msgpack_sbuffer_init(&head);
	msgpack_packer_init(&hp, &head, msgpack_sbuffer_write);
	if (kvev_pack_batch_head(&hp, tv.tv_sec + tv.tv_usec / 1e6, e->nev) ||
	    kvev_pack_batch_tail(&e->pk) ||
	    !(buf = malloc(head.size + e->evbuf.size))) {
		msgpack_sbuffer_destroy(&head);
		kvs_warn("kv events: out of memory: a batch is lost");
		goto reset;
	}
	len = head.size + e->evbuf.size;
	memcpy(buf, head.data, head.size);
	memcpy(buf + head.size, e->evbuf.data, e->evbuf.size);
	msgpack_sbuffer_destroy(&head);
	seq_bytes(e->seq, sb);
	/* No subscriber may hold the loop: at its high-water mark the whole
	 * message is refused (ZMQ_XPUB_NODROP) and only replay has it. */
	if (zmq_send(e->pub, e->topic, e->topic_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
		e->st->kv_events_dropped++;
	else if (zmq_send(e->pub, sb, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
		 zmq_send(e->pub, buf, len, ZMQ_DONTWAIT) < 0)
		e->st->kv_events_dropped++;
	e->st->kv_events_published += e->nev;
	e->st->kv_events_batches++;
	keep(e, e->seq++, buf, len);
reset:
	msgpack_sbuffer_clear(&e->evbuf);
	e->nev = 0;
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	kvs_kvev_flush(arg);
}

/* ---- replay ----------------------------------------------------------- */

/* Reads one request, whole; 0 with @id set for a well-formed one. */
static int replay_read(kvs_kvev *e, uint8_t *id, size_t *idlen,
		       uint64_t *start)
{
	int more = 1, nframes = 0, bad = 0;
	size_t sz;

	while (more) {
		zmq_msg_t m;
		size_t n;
		const uint8_t *p;

		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, e->rep, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			return -EAGAIN;
		}
		n = zmq_msg_size(&m);
		p = zmq_msg_data(&m);
		if (nframes == 0 && n <= 255) {
			memcpy(id, p, n);
			*idlen = n;
		} else if (nframes == 1) {
			bad |= n != 0;
		} else if (nframes == 2 && n == 8) {
			*start = 0;
			for (size_t i = 0; i < 8; i++)
				*start = *start << 8 | p[i];
		} else {
			bad = 1;
		}
		nframes++;
		sz = sizeof(more);
		if (zmq_getsockopt(e->rep, ZMQ_RCVMORE, &more, &sz) < 0)
			more = 0;
		zmq_msg_close(&m);
	}
	return bad || nframes != 3 ? KVS_E_PROTO : 0;
}

static int send_frames(kvs_kvev *e, const void *const *f, const size_t *n,
		       int count)
{
	for (int i = 0; i < count; i++)
		if (zmq_send(e->rep, f[i], n[i],
			     ZMQ_DONTWAIT | (i + 1 < count ? ZMQ_SNDMORE : 0)) < 0)
			return -errno;
	return 0;
}

/* The batches from @start, then the end marker. A requester that does not
 * read them (its pipe full) loses the rest of its answer. */
static void replay_answer(kvs_kvev *e, const uint8_t *id, size_t idlen,
			  uint64_t start)
{
	static const uint8_t end_seq[8] = { 0xff, 0xff, 0xff, 0xff,
					    0xff, 0xff, 0xff, 0xff };
	uint8_t sb[8];
	uint32_t sent = 0;
	uint64_t bytes = 0;
	int rc = 0;

	for (uint32_t i = 0; rc == 0 && i < e->ring_n; i++) {
		const kept_batch *k = &e->ring[(e->ring_head + i) % e->ring_cap];
		const void *f[] = { id, "", e->topic, sb, k->buf };
		size_t n[] = { idlen, 0, e->topic_len, 8, k->len };

		if (k->seq < start)
			continue;
		if (sent == REPLAY_BATCHES ||
		    (sent && bytes + k->len > REPLAY_BYTES))
			break;
		seq_bytes(k->seq, sb);
		rc = send_frames(e, f, n, 5);
		sent++;
		bytes += k->len;
	}
	if (rc == 0) {
		const void *f[] = { id, "", "", end_seq, "" };
		size_t n[] = { idlen, 0, 0, 8, 0 };

		rc = send_frames(e, f, n, 5);
	}
	if (rc < 0)
		kvs_warn("kv events: a replay was cut short: %s",
			 kvs_strerror(rc));
	e->st->kv_events_replays++;
}

static void on_replay(evutil_socket_t fd, short what, void *arg)
{
	kvs_kvev *e = arg;
	uint8_t id[255];
	size_t idlen = 0;
	uint64_t start = 0;

	(void)fd;
	(void)what;
	/* ZMQ_FD is edge-triggered: read until ZMQ_EVENTS has no POLLIN. */
	for (int n = 0; n < 64; n++) {
		int ev = 0, rc;
		size_t sz = sizeof(ev);

		if (zmq_getsockopt(e->rep, ZMQ_EVENTS, &ev, &sz) < 0 ||
		    !(ev & ZMQ_POLLIN))
			return;
		rc = replay_read(e, id, &idlen, &start);
		if (rc == 0)
			replay_answer(e, id, idlen, start);
		else if (rc == KVS_E_PROTO)
			e->st->kv_events_replay_bad++;
	}
	event_active(e->rep_ev, EV_READ, 1); /* more next turn */
}

/* ---- life cycle ------------------------------------------------------- */

/* Bound as vLLM binds them ("*", "::", ipc://, inproc://); else connected. */
static int open_endpoint(void *sock, const char *ep, int bind_always)
{
	char last[256];
	size_t sz = sizeof(last);
	int rc;

	if (bind_always || strchr(ep, '*') || strstr(ep, "::") ||
	    !strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9))
		rc = zmq_bind(sock, ep);
	else
		rc = zmq_connect(sock, ep);
	if (rc < 0) {
		kvs_err("kv events: %s: %s", ep, zmq_strerror(errno));
		return -EINVAL;
	}
	if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, last, &sz) == 0 && last[0])
		kvs_info("kv events: %s", last);
	return 0;
}

static int sockets_open(kvs_kvev *e, const kvs_kvev_config *cfg,
			struct event_base *base)
{
	int hwm = (int)cfg->hwm, zero = 0, one = 1, fd;
	int rhwm = 4 * (REPLAY_BATCHES + 1); /* four answers unread */
	size_t sz = sizeof(fd);

	e->zctx = zmq_ctx_new();
	e->pub = e->zctx ? zmq_socket(e->zctx, ZMQ_PUB) : NULL;
	if (!e->pub)
		return -ENOMEM;
	zmq_setsockopt(e->pub, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(e->pub, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(e->pub, ZMQ_XPUB_NODROP, &one, sizeof(one));
	if (open_endpoint(e->pub, cfg->endpoint, 0) < 0)
		return -EINVAL;
	if (!cfg->replay || !cfg->replay[0])
		return 0;
	e->rep = zmq_socket(e->zctx, ZMQ_ROUTER);
	if (!e->rep)
		return -ENOMEM;
	zmq_setsockopt(e->rep, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(e->rep, ZMQ_SNDHWM, &rhwm, sizeof(rhwm));
	zmq_setsockopt(e->rep, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
	if (open_endpoint(e->rep, cfg->replay, 1) < 0 ||
	    zmq_getsockopt(e->rep, ZMQ_FD, &fd, &sz) < 0)
		return -EINVAL;
	e->rep_ev = event_new(base, fd, EV_READ | EV_PERSIST, on_replay, e);
	if (!e->rep_ev || event_add(e->rep_ev, NULL) < 0)
		return -ENOMEM;
	return 0;
}

int kvs_kvev_create(const kvs_kvev_config *cfg, struct event_base *base,
		    kvs_cache *cache, kvs_counters *stats, kvs_kvev **out)
{
	kvs_kvev *e = calloc(1, sizeof(*e));
	int rc;

	if (!e)
		return -ENOMEM;
	e->cache = cache;
	e->st = stats;
	e->ring_max = cfg->buffer_bytes;
	msgpack_sbuffer_init(&e->evbuf);
	msgpack_packer_init(&e->pk, &e->evbuf, msgpack_sbuffer_write);
	e->topic = strdup(cfg->topic ? cfg->topic : "");
	e->flush_ev = event_new(base, -1, 0, on_flush, e);
	rc = e->topic && e->flush_ev ? sockets_open(e, cfg, base) : -ENOMEM;
	if (rc < 0) {
		kvs_kvev_destroy(e);
		return rc;
	}
	e->topic_len = strlen(e->topic);
	kvs_cache_set_resid_hook(cache, on_resid, e);
	/* What the pool holds already (a warm SSD tier's blocks). */
	for (uint32_t i = 0, end = kvs_cache_rec_end(cache); i < end; i++) {
		const kvs_rec *r = kvs_cache_rec_at(cache, i);

		if (r->state == KVS_REC_READY && r->tier != KVS_TIER_NONE)
			on_resid(e, i, r, 0);
	}
	*out = e;
	return 0;
}

void kvs_kvev_destroy(kvs_kvev *e)
{
	if (!e)
		return;
	kvs_cache_set_resid_hook(e->cache, NULL, NULL);
	if (e->rep_ev)
		event_free(e->rep_ev);
	if (e->flush_ev)
		event_free(e->flush_ev);
	if (e->rep)
		zmq_close(e->rep);
	if (e->pub)
		zmq_close(e->pub);
	if (e->zctx)
		zmq_ctx_term(e->zctx);
	for (uint32_t i = 0; i < e->cap; i++)
		side_free(e, i);
	for (uint32_t i = 0; i < e->ring_n; i++)
		free(e->ring[(e->ring_head + i) % e->ring_cap].buf);
	e->st->kv_events_buffered_bytes = 0;
	free(e->ring);
	free(e->pub_tier);
	free(e->side);
	free(e->topic);
	msgpack_sbuffer_destroy(&e->evbuf);
	free(e);
}
