/* admin.c - the operator's requests and the event stream (see kvs_admin.h). */
#include "kvs_admin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cache_admin.h"
#include "kvs_log.h"
#include "kvs_wire_admin.h"

struct kvs_admin_sub {
	kvs_admin_sub *next;
	kvs_admin_domain dom; /* the namespaces whose events it gets */
	struct evbuffer *out;
	uint64_t req_id;
	uint64_t dropped; /* not yet told to the subscriber */
	void (*wake)(void *arg);
	void *arg;
};

struct kvs_admin {
	kvs_admin_config cfg;
	kvs_cache *cache;
	kvs_counters *stats;
	uint8_t *pinned;   /* by record: an operator pin is held */
	uint32_t npinned_cap;
	uint64_t pinned_bytes;
	kvs_admin_sub *subs;
	kvs_wire_event *pending;
	uint32_t npending;
	uint64_t seq;
};

#define PENDING_MAX 4096 /* events per EVENT message */

/* ---- events ----------------------------------------------------------- */

static void add_event(kvs_admin *a, uint32_t kind, const kvs_rec *r)
{
	if (!a->subs)
		return;
	if (a->npending == PENDING_MAX)
		kvs_admin_publish(a);
	a->pending[a->npending++] = (kvs_wire_event){
		.kind = kind, .ns = r->ns, .hash = kvs_cache_rec_hash(r),
		.seq = ++a->seq,
	};
}

/* The cache's events as the wire names them. */
static const uint32_t wire_event[] = {
	[KVS_CACHE_EVENT_STORED] = KVS_EVENT_STORED,
	[KVS_CACHE_EVENT_EVICTED] = KVS_EVENT_EVICTED,
	[KVS_CACHE_EVENT_FLUSHED] = KVS_EVENT_FLUSHED,
};

static void on_cache_event(void *arg, kvs_cache_event kind, const kvs_rec *r)
{
	add_event(arg, wire_event[kind], r);
}

/* The events of @s's domain among the pending ones, encoded after the
 * EVENT header's 16 bytes at @p; returns how many. */
static uint32_t events_encode(const kvs_admin *a, const kvs_admin_sub *s,
			      uint8_t *p)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < a->npending; i++)
		if (kvs_admin_domain_has(a, &s->dom, a->pending[i].ns))
			kvs_wire_event_encode(&a->pending[i],
					      p + 16 + (size_t)n++ * KVS_WIRE_EVENT_SIZE,
					      KVS_WIRE_EVENT_SIZE);
	return n;
}

void kvs_admin_publish(kvs_admin *a)
{
	uint8_t *msg;

	if (a->npending == 0)
		return;
	msg = malloc(KVS_WIRE_HDR_SIZE + 16 +
		     (size_t)a->npending * KVS_WIRE_EVENT_SIZE);
	for (kvs_admin_sub *s = a->subs; s; s = s->next) {
		uint8_t *p = msg + KVS_WIRE_HDR_SIZE;
		uint32_t n = msg ? events_encode(a, s, p) : a->npending;
		size_t len = 16 + (size_t)n * KVS_WIRE_EVENT_SIZE;
		kvs_wire_hdr h = { .magic = KVS_WIRE_MAGIC,
				   .version = KVS_WIRE_VERSION,
				   .opcode = KVS_OP_EVENT, .len = (uint32_t)len,
				   .req_id = s->req_id };

		if (n == 0)
			continue;
		if (!msg || evbuffer_get_length(s->out) + KVS_WIRE_HDR_SIZE + len >
				    a->cfg.watch_buffer) {
			s->dropped += n;
			a->stats->events_dropped += n;
			continue;
		}
		kvs_wire_hdr_encode(&h, msg);
		kvs_wire_events_hdr_encode(n, s->dropped, p, 16);
		if (evbuffer_add(s->out, msg, KVS_WIRE_HDR_SIZE + len) < 0) {
			s->dropped += n;
			a->stats->events_dropped += n;
			continue;
		}
		s->dropped = 0;
		a->stats->events_published += n;
		s->wake(s->arg);
	}
	free(msg);
	a->npending = 0;
}

int kvs_admin_subscribe(kvs_admin *a, const kvs_admin_domain *dom,
			struct evbuffer *out, uint64_t req_id,
			void (*wake)(void *arg), void *arg, kvs_admin_sub **sub)
{
	kvs_admin_sub *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->dom = *dom;
	s->out = out;
	s->req_id = req_id;
	s->wake = wake;
	s->arg = arg;
	s->next = a->subs;
	a->subs = s;
	a->stats->events_subscribers++;
	*sub = s;
	return 0;
}

void kvs_admin_unsubscribe(kvs_admin *a, kvs_admin_sub *sub)
{
	for (kvs_admin_sub **pp = &a->subs; sub && *pp; pp = &(*pp)->next) {
		if (*pp == sub) {
			*pp = sub->next;
			a->stats->events_subscribers--;
			free(sub);
			break;
		}
	}
	if (!a->subs)
		a->npending = 0;
}

/* ---- life cycle ------------------------------------------------------- */

int kvs_admin_create(const kvs_admin_config *cfg, kvs_cache *cache,
		     kvs_counters *stats, kvs_admin **out)
{
	kvs_admin *a = calloc(1, sizeof(*a));

	if (!a || !(a->pending = malloc(PENDING_MAX * sizeof(*a->pending)))) {
		free(a);
		return -ENOMEM;
	}
	a->cfg = *cfg;
	a->cache = cache;
	a->stats = stats;
	kvs_cache_set_event_hook(cache, on_cache_event, a);
	*out = a;
	return 0;
}

void kvs_admin_destroy(kvs_admin *a)
{
	if (!a)
		return;
	kvs_cache_set_event_hook(a->cache, NULL, NULL);
	while (a->subs)
		kvs_admin_unsubscribe(a, a->subs);
	free(a->pending);
	free(a->pinned);
	free(a);
}

static int is_pinned(const kvs_admin *a, uint32_t idx)
{
	return idx < a->npinned_cap && a->pinned[idx];
}

/* ---- domains ---------------------------------------------------------- */

int kvs_admin_domain_has(const kvs_admin *a, const kvs_admin_domain *d,
			 uint32_t ns)
{
	const kvs_ns_info *ni;

	if (d->all)
		return 1;
	ni = kvs_cache_ns_at(a->cache, ns);
	return ni && ni->tenant && ni->uid == d->uid;
}

uint32_t kvs_admin_domain_find(const kvs_admin *a, const kvs_admin_domain *d,
			       kvs_hash h)
{
	const kvs_cache *c = a->cache;
	uint32_t idx;

	if (d->all) {
		idx = kvs_cache_find(c, 0, h);
		return idx == KVS_NONE ? 0 : kvs_cache_rec_at(c, idx)->ns;
	}
	for (uint32_t id = 1; id <= kvs_cache_ns_count(c); id++)
		if (kvs_admin_domain_has(a, d, id) &&
		    kvs_cache_find(c, id, h) != KVS_NONE)
			return id;
	return 0;
}

/* ---- trees ------------------------------------------------------------ */

/* Fill val[idx] for every record below @span by walking parent links once:
 * val of a root is root_val(idx), of any other record step(val of parent,
 * idx). @path is scratch of @span entries. Values must be non-zero. */
typedef uint32_t (*tree_fn)(void *arg, uint32_t idx, uint32_t parent_val);

static void tree_fill(const kvs_cache *c, uint32_t span, uint32_t *val,
		      uint32_t *path, tree_fn fn, void *arg)
{
	for (uint32_t i = 0; i < span; i++) {
		uint32_t n = 0, cur = i, v = 0;

		if (val[i] || kvs_cache_rec_at(c, i)->state == KVS_REC_FREE)
			continue;
		while (cur != KVS_NONE && !val[cur]) {
			path[n++] = cur;
			cur = kvs_cache_rec_at(c, cur)->parent;
		}
		if (cur != KVS_NONE)
			v = val[cur];
		while (n-- > 0) {
			v = fn(arg, path[n], v);
			val[path[n]] = v;
		}
	}
}

/* For a prefix: 1 in the subtree of *(uint32_t *)arg, 2 outside. */
static uint32_t under_step(void *arg, uint32_t idx, uint32_t parent_val)
{
	if (idx == *(uint32_t *)arg)
		return 1;
	return parent_val ? parent_val : 2;
}

/* ---- list ------------------------------------------------------------- */

typedef struct ns_sum {
	kvs_wire_ns w;
	kvs_wire_prefix top[KVS_WIRE_LIST_TOP_MAX];
} ns_sum;

static int prefix_better(const kvs_wire_prefix *x, const kvs_wire_prefix *y)
{
	if (x->hits != y->hits)
		return x->hits > y->hits;
	if (x->root_hits != y->root_hits)
		return x->root_hits > y->root_hits;
	return x->depth > y->depth;
}

static void top_add(ns_sum *s, uint32_t max, const kvs_wire_prefix *p)
{
	uint32_t i;

	if (s->w.ntop == max && (max == 0 || !prefix_better(p, &s->top[max - 1])))
		return;
	i = s->w.ntop < max ? s->w.ntop++ : max - 1;
	while (i > 0 && prefix_better(p, &s->top[i - 1])) {
		s->top[i] = s->top[i - 1];
		i--;
	}
	s->top[i] = *p;
}

/* ns_sums_fill - each namespace's roots, longest chain, hits, pins and top
 * prefixes (leaves by hits) among records [@lo, @hi) into sums[ns], for
 * @rq->ns only when set. */
static void ns_sums_fill(kvs_admin *a, const kvs_wire_list_req *rq,
			 uint32_t lo, uint32_t hi, ns_sum *sums)
{
	kvs_cache *c = a->cache;

	for (uint32_t i = lo; i < hi; i++) {
		const kvs_rec *r = kvs_cache_rec_at(c, i);
		uint32_t depth, root;
		ns_sum *s;

		if (r->state == KVS_REC_FREE || (rq->ns && r->ns != rq->ns))
			continue;
		s = &sums[r->ns];
		kvs_cache_rec_chain(c, i, &depth, &root);
		if (r->parent == KVS_NONE)
			s->w.roots++;
		if (depth > s->w.longest)
			s->w.longest = depth;
		if (r->state != KVS_REC_READY)
			continue;
		s->w.pinned += is_pinned(a, i);
		if (r->children == 0) {
			kvs_wire_prefix px = {
				.hash = kvs_cache_rec_hash(r), .hits = r->hits,
				.root_hits = kvs_cache_rec_at(c, root)->hits,
				.depth = depth,
				.flags = is_pinned(a, i) ? KVS_WIRE_PREFIX_PINNED : 0,
			};
			top_add(s, rq->top, &px);
		}
	}
}

/* ns_wire_fill - the namespace part of a LIST entry (@w's sums are kept). */
static void ns_wire_fill(const kvs_ns_info *ni, uint32_t id, kvs_wire_ns *w)
{
	w->id = id;
	w->layers = ni->layers;
	w->kv_heads = ni->kv_heads;
	w->head_dim = ni->head_dim;
	w->block_tokens = ni->block_tokens;
	w->tp_rank = ni->tp_rank;
	w->tp_size = ni->tp_size;
	w->dtype = ni->dtype;
	w->clients = ni->clients;
	w->flags = (ni->salted ? KVS_WIRE_NS_SALTED : 0) |
		   (ni->tenant ? KVS_WIRE_NS_TENANT : 0);
	w->uid = ni->uid;
	w->block_bytes = ni->block_bytes;
	w->blocks = ni->blocks;
	w->writing = ni->writing;
	w->hits = ni->lookup_hit; /* every path's, as blocks.lookup_hit */
	w->model = ni->model;
	w->model_len = (uint16_t)strlen(ni->model);
	w->adapter = ni->adapter;
	w->adapter_len = (uint16_t)strlen(ni->adapter);
}

int kvs_admin_list(kvs_admin *a, uint32_t conn_ns, const kvs_admin_domain *dom,
		   const kvs_wire_list_req *rq, uint8_t *out, size_t cap,
		   size_t *len, uint32_t *visited)
{
	kvs_cache *c = a->cache;
	kvs_wire_list_req req = *rq;
	uint32_t nns = kvs_cache_ns_count(c), count = 0;
	uint32_t end = kvs_cache_rec_end(c), lo, hi;
	ns_sum *sums;
	size_t off;
	int rc = 0;

	*visited = 0;
	if (conn_ns && req.ns != conn_ns) {
		if (req.ns)
			return -EPERM;
		req.ns = conn_ns;
	}
	if (req.ns > nns)
		return -ENOENT;
	/* The form without a cursor is answered whole while that is a page. */
	if (!req.paged && end > KVS_ADMIN_LIST_PAGE)
		return KVS_E_TOOMANY;
	lo = req.cursor < end ? (uint32_t)req.cursor : end;
	hi = end - lo > KVS_ADMIN_LIST_PAGE ? lo + KVS_ADMIN_LIST_PAGE : end;
	if (!(sums = calloc((size_t)nns + 1, sizeof(*sums))))
		return -ENOMEM;
	ns_sums_fill(a, &req, lo, hi, sums);
	*visited = hi - lo;
	off = req.paged ? 16 : 8;
	for (uint32_t id = req.ns ? req.ns : 1; id <= (req.ns ? req.ns : nns); id++) {
		kvs_wire_ns *w = &sums[id].w;

		if (!kvs_cache_ns_at(c, id))
			continue; /* a free id (reclaimed) */
		if (!kvs_admin_domain_has(a, dom, id))
			continue;
		ns_wire_fill(kvs_cache_ns_at(c, id), id, w);
		rc = kvs_wire_ns_encode(w, sums[id].top, out + off, cap - off);
		if (rc < 0)
			goto out;
		off += (size_t)rc;
		count++;
	}
	if (req.paged)
		kvs_wire_list_page_encode(count, hi < end ? hi : 0, out, cap);
	else
		kvs_wire_list_hdr_encode(count, out, cap);
	*len = off;
	rc = 0;
out:
	free(sums);
	return rc;
}

/* ---- inspect ---------------------------------------------------------- */

int kvs_admin_inspect(kvs_admin *a, uint32_t conn_ns,
		      const kvs_wire_inspect_req *rq, uint8_t *out, size_t cap,
		      size_t *len)
{
	kvs_cache *c = a->cache;
	kvs_wire_inspect_req req = *rq;
	kvs_wire_block_info bi = { 0 };
	const kvs_rec *r;
	uint32_t idx, root;
	int rc;

	if (conn_ns && req.ns && req.ns != conn_ns)
		return -EPERM;
	idx = kvs_cache_find(c, conn_ns ? conn_ns : req.ns, req.hash);
	if (idx == KVS_NONE)
		return -ENOENT;
	r = kvs_cache_rec_at(c, idx);
	bi.hash = req.hash;
	bi.ns = r->ns;
	bi.tier = r->state == KVS_REC_GHOST ? KVS_TIER_NONE : r->tier;
	bi.state = r->state;
	bi.flags = is_pinned(a, idx) ? KVS_WIRE_INFO_PINNED : 0;
	bi.offset = r->state == KVS_REC_GHOST ? 0 : r->offset;
	bi.gen = r->gen;
	bi.refs = r->refs;
	bi.children = r->children;
	bi.hits = r->hits;
	bi.age_s = kvs_cache_rec_age_s(c, idx);
	kvs_cache_rec_chain(c, idx, &bi.depth, &root);
	if (r->parent != KVS_NONE) {
		bi.flags |= KVS_WIRE_INFO_PARENT;
		bi.parent = kvs_cache_rec_hash(kvs_cache_rec_at(c, r->parent));
	}
	rc = kvs_wire_block_info_encode(&bi, out, cap);
	if (rc < 0)
		return rc;
	*len = (size_t)rc;
	return 0;
}

/* ---- evict / flush ---------------------------------------------------- */

int kvs_admin_evict(kvs_admin *a, const kvs_wire_evict_req *rq, uint8_t *out,
		    size_t cap, size_t *len)
{
	kvs_cache *c = a->cache;
	kvs_wire_evict_req req = *rq;
	kvs_wire_evict_reply rep = { 0 };
	uint32_t span, target = KVS_NONE, *under = NULL, *path = NULL;
	uint32_t batch[KVS_CACHE_FREE_BATCH], up[KVS_CACHE_FREE_BATCH];
	kvs_cache_event kind;
	uint8_t freed[KVS_CACHE_FREE_BATCH];
	int rc;

	if (req.scope == KVS_EVICT_NAMESPACE && req.ns > kvs_cache_ns_count(c))
		return -ENOENT;
	kind = req.flags & KVS_WIRE_EVICT_FLUSH ? KVS_CACHE_EVENT_FLUSHED
						: KVS_CACHE_EVENT_EVICTED;
	span = kvs_cache_rec_span(c);
	if (req.scope == KVS_EVICT_PREFIX) {
		target = kvs_cache_find(c, req.ns, req.hash);
		if (target == KVS_NONE)
			return -ENOENT;
		under = calloc((size_t)span + 1, sizeof(uint32_t));
		path = malloc(((size_t)span + 1) * sizeof(uint32_t));
		if (!under || !path) {
			free(under);
			free(path);
			return -ENOMEM;
		}
		tree_fill(c, span, under, path, under_step, &target);
	}
#define MATCH(i)                                                            \
	(req.scope == KVS_EVICT_ALL ||                                      \
	 (req.scope == KVS_EVICT_NAMESPACE ? kvs_cache_rec_at(c, i)->ns == req.ns \
					   : under[i] == 1))
	/* Leaves first: freeing a block may make its parent a leaf, which is
	 * freed next, so one pass empties a subtree. In batches (the parents
	 * of what a batch freed, then the next records of the table), so that
	 * the fast path looks at its clients' pins once per batch, not once
	 * per block. */
	for (uint32_t i = 0, n = 0; i < span || n > 0;) {
		uint32_t m = 0;

		for (; i < span && n < KVS_CACHE_FREE_BATCH; i++)
			if (kvs_cache_rec_at(c, i)->state == KVS_REC_READY && MATCH(i))
				batch[n++] = i;
		for (uint32_t k = 0; k < n; k++)
			up[k] = kvs_cache_rec_at(c, batch[k])->parent;
		rep.freed += kvs_cache_free_recs(c, batch, n, kind, freed);
		for (uint32_t k = 0; k < n; k++)
			if (freed[k] && up[k] != KVS_NONE &&
			    kvs_cache_rec_at(c, up[k])->state == KVS_REC_READY &&
			    MATCH(up[k]))
				batch[m++] = up[k];
		n = m;
	}
	for (uint32_t i = 0; i < span; i++) {
		const kvs_rec *r = kvs_cache_rec_at(c, i);

		if (r->state != KVS_REC_READY || !MATCH(i))
			continue;
		if (r->refs > 0)
			rep.pinned++;
		else
			rep.kept++;
	}
#undef MATCH
	free(under);
	free(path);
	kvs_info("operator %s: %llu blocks freed, %llu pinned kept, %llu kept "
		 "as prefixes of pinned blocks",
		 kind == KVS_CACHE_EVENT_FLUSHED ? "flush" : "evict",
		 (unsigned long long)rep.freed, (unsigned long long)rep.pinned,
		 (unsigned long long)rep.kept);
	rc = kvs_wire_evict_reply_encode(&rep, out, cap);
	if (rc < 0)
		return rc;
	*len = (size_t)rc;
	return 0;
}

/* ---- pin / unpin ------------------------------------------------------ */

static int pinned_room(kvs_admin *a, uint32_t idx)
{
	if (idx >= a->npinned_cap) {
		uint32_t cap = a->npinned_cap ? a->npinned_cap : 1024;
		uint8_t *np;

		while (cap <= idx)
			cap *= 2;
		np = realloc(a->pinned, cap);
		if (!np)
			return -ENOMEM;
		memset(np + a->npinned_cap, 0, cap - a->npinned_cap);
		a->pinned = np;
		a->npinned_cap = cap;
	}
	return 0;
}

int kvs_admin_pin(kvs_admin *a, int pin, uint32_t ns,
		  const kvs_wire_hashes *rq, uint8_t *out, size_t cap, size_t *len)
{
	kvs_cache *c = a->cache;
	kvs_wire_hashes req = *rq;
	uint32_t chain = 0, fresh = 0;
	uint64_t bytes = 0, limit;
	int rc;

	if (ns > kvs_cache_ns_count(c))
		return -ENOENT;
	if (!ns && req.count > 0) {
		uint32_t idx = kvs_cache_find(c, 0, kvs_wire_hash_at(req.hashes, 0));

		ns = idx == KVS_NONE ? 0 : kvs_cache_rec_at(c, idx)->ns;
	}
	/* The cached part of the chain: blocks 0..chain-1. */
	for (; ns && chain < req.count; chain++) {
		uint32_t idx = kvs_cache_find(c, ns, kvs_wire_hash_at(req.hashes, chain));

		if (idx == KVS_NONE ||
		    kvs_cache_rec_at(c, idx)->state != KVS_REC_READY)
			break;
		if (pin && !is_pinned(a, idx)) {
			if ((rc = pinned_room(a, idx)) < 0)
				return rc;
			bytes += kvs_cache_ns_at(c, ns)->block_bytes;
		}
	}
	limit = kvs_cache_arena_bytes(c) / 100 * a->cfg.max_pinned_share;
	if (pin && a->pinned_bytes + bytes > limit) {
		a->stats->errors_limit++;
		kvs_warn("operator pin of %u blocks refused: %llu bytes pinned, "
			 "the limit is %u%% of the tier (%llu bytes)", chain,
			 (unsigned long long)(a->pinned_bytes + bytes),
			 a->cfg.max_pinned_share, (unsigned long long)limit);
		return KVS_E_LIMIT;
	}
	for (uint32_t i = 0; i < chain; i++) {
		uint32_t idx = kvs_cache_find(c, ns, kvs_wire_hash_at(req.hashes, i));

		if (is_pinned(a, idx) == pin)
			continue;
		a->pinned[idx] = (uint8_t)pin;
		kvs_cache_pin_rec(c, idx, pin ? 1 : -1);
		if (pin)
			a->pinned_bytes += kvs_cache_ns_at(c, ns)->block_bytes;
		else
			a->pinned_bytes -= kvs_cache_ns_at(c, ns)->block_bytes;
		a->stats->pins_blocks += pin ? 1 : -1;
		add_event(a, pin ? KVS_EVENT_PINNED : KVS_EVENT_UNPINNED,
			  kvs_cache_rec_at(c, idx));
		fresh++;
	}
	a->stats->pins_bytes = (int64_t)a->pinned_bytes;
	rc = kvs_wire_u64_encode(pin ? chain : fresh, out, cap);
	if (rc < 0)
		return rc;
	*len = (size_t)rc;
	return 0;
}
