/* admin.c - libkvshare's operator verbs and event watch (kvshare_admin.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvs_client_int.h"
#include "kvs_clock.h"
#include "kvs_wire_admin.h"
#include "kvshare_admin.h"

#define SAME(a, b) _Static_assert((int)(a) == (int)(b), #a)
SAME(KVS_SCOPE_NAMESPACE, KVS_EVICT_NAMESPACE);
SAME(KVS_SCOPE_PREFIX, KVS_EVICT_PREFIX);
SAME(KVS_SCOPE_ALL, KVS_EVICT_ALL);
SAME(KVS_EV_STORED, KVS_EVENT_STORED);
SAME(KVS_EV_EVICTED, KVS_EVENT_EVICTED);
SAME(KVS_EV_PINNED, KVS_EVENT_PINNED);
SAME(KVS_EV_UNPINNED, KVS_EVENT_UNPINNED);
SAME(KVS_EV_FLUSHED, KVS_EVENT_FLUSHED);
_Static_assert(KVS_LIST_TOP_MAX == KVS_WIRE_LIST_TOP_MAX, "top");
_Static_assert(KVS_VERIFY_FAILED_MAX == KVS_WIRE_VERIFY_FAILED_MAX, "failed");

/* Ranked as the daemon ranks them: hits, then root_hits, then depth. */
static int prefix_before(const kvs_prefix_info *x, const kvs_prefix_info *y)
{
	if (x->hits != y->hits)
		return x->hits > y->hits;
	if (x->root_hits != y->root_hits)
		return x->root_hits > y->root_hits;
	return x->depth > y->depth;
}

static void top_merge(kvs_ns_summary *s, uint32_t top, const kvs_prefix_info *p)
{
	uint32_t i;

	if (s->ntop == top && (top == 0 || !prefix_before(p, &s->top[top - 1])))
		return;
	i = s->ntop < top ? s->ntop++ : top - 1;
	while (i > 0 && prefix_before(p, &s->top[i - 1])) {
		s->top[i] = s->top[i - 1];
		i--;
	}
	s->top[i] = *p;
}

/* One page's entry @w into @s: the namespace as it is now, the sums over
 * the records of the pages so far. */
static void ns_merge(kvs_ns_summary *s, const kvs_wire_ns *w, uint32_t top)
{
	s->id = w->id;
	memcpy(s->model, w->model, w->model_len);
	s->model[w->model_len] = '\0';
	memcpy(s->adapter, w->adapter, w->adapter_len);
	s->adapter[w->adapter_len] = '\0';
	s->salted = !!(w->flags & KVS_WIRE_NS_SALTED);
	s->tenant = !!(w->flags & KVS_WIRE_NS_TENANT);
	s->uid = w->uid;
	s->layers = w->layers;
	s->kv_heads = w->kv_heads;
	s->head_dim = w->head_dim;
	s->block_tokens = w->block_tokens;
	s->tp_rank = w->tp_rank;
	s->tp_size = w->tp_size;
	s->dtype = (kvs_dtype)w->dtype;
	s->clients = w->clients;
	s->block_bytes = w->block_bytes;
	s->blocks = w->blocks;
	s->writing = w->writing;
	s->hits = w->hits; /* the namespace's lookup hits: every page says it */
	s->pinned += w->pinned;
	s->roots += w->roots;
	if (w->longest > s->longest)
		s->longest = w->longest;
	for (uint32_t j = 0; j < w->ntop; j++) {
		kvs_wire_prefix px = kvs_wire_prefix_at(w->top, j);
		kvs_prefix_info pi = {
			.hash = px.hash, .hits = px.hits,
			.root_hits = px.root_hits, .depth = px.depth,
			.pinned = !!(px.flags & KVS_WIRE_PREFIX_PINNED),
		};

		top_merge(s, top, &pi);
	}
}

/* One reply's entries merged into *v (*n of them, by id: a namespace made
 * between two pages joins). Returns 0, KVS_E_PROTO or -ENOMEM. */
static int list_merge(const uint8_t *p, uint32_t rlen, size_t off,
		      uint32_t count, uint32_t top, kvs_ns_summary **v,
		      uint32_t *n)
{
	if (count > rlen / KVS_WIRE_NS_FIXED)
		return KVS_E_PROTO;
	for (uint32_t i = 0; i < count; i++) {
		kvs_wire_ns w;
		size_t used;
		uint32_t k = 0;

		if (kvs_wire_ns_decode(p + off, rlen - off, &w, &used) < 0 ||
		    w.ntop > top)
			return KVS_E_PROTO;
		off += used;
		while (k < *n && (*v)[k].id != w.id)
			k++;
		if (k == *n) {
			kvs_ns_summary *nv = realloc(*v, (*n + 1) * sizeof(**v));

			if (!nv)
				return -ENOMEM;
			*v = nv;
			memset(&nv[k], 0, sizeof(nv[k]));
			(*n)++;
		}
		ns_merge(&(*v)[k], &w, top);
	}
	return off == rlen ? 0 : KVS_E_PROTO;
}

/* A daemon older than paging: the whole list in one reply. */
static int list_whole(kvs_client *c, uint32_t ns, uint32_t top,
		      kvs_ns_summary **v, uint32_t *n)
{
	kvs_wire_list_req req = { .ns = ns, .top = top };
	uint8_t b[16];
	const uint8_t *p;
	uint32_t rlen, count;
	int rc;

	kvs_wire_list_req_encode(&req, b, sizeof(b));
	if ((rc = kvs__rpc(c, KVS_OP_LIST, b, 8, &p, &rlen)) < 0)
		return rc;
	if ((rc = kvs_wire_list_hdr_decode(p, rlen, &count)) < 0)
		return rc;
	return list_merge(p, rlen, 8, count, top, v, n);
}

int kvs_list(kvs_client *c, uint32_t ns, uint32_t top, kvs_ns_summary **out)
{
	kvs_wire_list_req req = { .ns = ns, .top = top, .paged = 1 };
	kvs_ns_summary *v = NULL;
	uint64_t prev = 0; /* the cursor of the page asked last */
	uint32_t n = 0;
	int rc;

	if (!out || top > KVS_LIST_TOP_MAX)
		return -EINVAL;
	*out = NULL;
	do {
		uint8_t b[16];
		const uint8_t *p;
		uint32_t rlen, count;

		kvs_wire_list_req_encode(&req, b, sizeof(b));
		rc = kvs__rpc(c, KVS_OP_LIST, b, sizeof(b), &p, &rlen);
		if (rc == KVS_E_PROTO && req.cursor == 0) {
			rc = list_whole(c, ns, top, &v, &n);
			break;
		}
		if (rc == 0)
			rc = kvs_wire_list_page_decode(p, rlen, &count, &req.cursor);
		/* Each page starts past the one before: the walk ends. */
		if (rc == 0 && req.cursor && req.cursor <= prev)
			rc = KVS_E_PROTO;
		if (rc == 0)
			rc = list_merge(p, rlen, 16, count, top, &v, &n);
		prev = req.cursor;
	} while (rc == 0 && req.cursor);
	if (rc < 0) {
		free(v);
		return rc;
	}
	*out = v ? v : calloc(1, sizeof(*v));
	if (!*out)
		return -ENOMEM;
	return (int)n;
}

int kvs_inspect(kvs_client *c, uint32_t ns, kvs_hash hash, kvs_block_info *out)
{
	kvs_wire_inspect_req req = { .ns = ns, .hash = hash };
	kvs_wire_block_info bi;
	uint8_t b[KVS_WIRE_INSPECT_REQ_SIZE];
	const uint8_t *p;
	uint32_t rlen;
	int rc;

	if (!out)
		return -EINVAL;
	kvs_wire_inspect_req_encode(&req, b, sizeof(b));
	if ((rc = kvs__rpc(c, KVS_OP_INSPECT, b, sizeof(b), &p, &rlen)) < 0)
		return rc;
	if ((rc = kvs_wire_block_info_decode(p, rlen, &bi)) < 0)
		return rc;
	*out = (kvs_block_info){
		.hash = bi.hash, .ns = bi.ns, .tier = (kvs_tier)bi.tier,
		.state = (kvs_block_state)bi.state,
		.pinned = !!(bi.flags & KVS_WIRE_INFO_PINNED),
		.offset = bi.offset, .gen = bi.gen, .refs = bi.refs,
		.children = bi.children, .hits = bi.hits, .age_s = bi.age_s,
		.depth = bi.depth,
		.has_parent = !!(bi.flags & KVS_WIRE_INFO_PARENT),
		.parent = bi.parent,
	};
	return 0;
}

int kvs_evict(kvs_client *c, kvs_evict_scope scope, uint32_t ns,
	      kvs_hash prefix, int flush, kvs_evict_result *out)
{
	kvs_wire_evict_req req = { .scope = (uint32_t)scope, .ns = ns,
				   .flags = flush ? KVS_WIRE_EVICT_FLUSH : 0,
				   .hash = prefix };
	kvs_wire_evict_reply rep;
	uint8_t b[KVS_WIRE_EVICT_REQ_SIZE];
	const uint8_t *p;
	uint32_t rlen;
	int rc;

	if (!out)
		return -EINVAL;
	if ((rc = kvs_wire_evict_req_encode(&req, b, sizeof(b))) < 0)
		return rc;
	if ((rc = kvs__rpc(c, KVS_OP_EVICT, b, sizeof(b), &p, &rlen)) < 0)
		return rc;
	if ((rc = kvs_wire_evict_reply_decode(p, rlen, &rep)) < 0)
		return rc;
	*out = (kvs_evict_result){ .freed = rep.freed, .pinned = rep.pinned,
				   .kept = rep.kept };
	return 0;
}

int kvs_verify(kvs_client *c, uint32_t ns, uint32_t max_failed,
	       kvs_verify_result *out, kvs_verify_failure **failures)
{
	kvs_wire_verify_req req = { .ns = ns, .max_failed = max_failed };
	kvs_wire_verify_reply rep;
	kvs_verify_failure *v = NULL;
	uint8_t b[KVS_WIRE_VERIFY_REQ_SIZE];
	const uint8_t *p;
	uint32_t rlen;
	int rc;

	if (!out || !failures)
		return -EINVAL;
	*failures = NULL;
	if ((rc = kvs_wire_verify_req_encode(&req, b, sizeof(b))) < 0)
		return rc;
	if ((rc = kvs__rpc(c, KVS_OP_VERIFY, b, sizeof(b), &p, &rlen)) < 0)
		return rc;
	if ((rc = kvs_wire_verify_reply_decode(p, rlen, &rep)) < 0)
		return rc;
	if (rep.count > max_failed)
		return KVS_E_PROTO;
	if (rep.count && !(v = calloc(rep.count, sizeof(*v))))
		return -ENOMEM;
	for (uint32_t i = 0; i < rep.count; i++) {
		kvs_wire_verify_fail f = kvs_wire_verify_fail_at(rep.fails, i);

		v[i] = (kvs_verify_failure){ .hash = f.hash, .ns = f.ns,
					     .error = f.error };
	}
	*out = (kvs_verify_result){
		.ssd_tier = !!(rep.flags & KVS_WIRE_VERIFY_SSD),
		.checked = rep.checked, .ok = rep.ok, .failed = rep.failed,
		.skipped = rep.skipped, .listed = rep.count,
	};
	*failures = v;
	return 0;
}

static int pin_rpc(kvs_client *c, uint16_t op, uint32_t ns,
		   const kvs_hash *hashes, size_t n)
{
	size_t len = 12 + n * KVS_WIRE_HASH_SIZE;
	const uint8_t *p;
	uint8_t *b;
	uint32_t rlen;
	uint64_t v;
	int rc;

	if ((!hashes && n) || n > KVS_MAX_HASHES)
		return n > KVS_MAX_HASHES ? KVS_E_TOOMANY : -EINVAL;
	if (!(b = malloc(len)))
		return -ENOMEM;
	rc = kvs_wire_pin_req_encode(ns, hashes, (uint32_t)n, b, len);
	if (rc >= 0)
		rc = kvs__rpc(c, op, b, (size_t)rc, &p, &rlen);
	free(b);
	if (rc < 0)
		return rc;
	if ((rc = kvs_wire_u64_decode(p, rlen, &v)) < 0)
		return rc;
	return v > n ? KVS_E_PROTO : (int)v;
}

int kvs_pin(kvs_client *c, uint32_t ns, const kvs_hash *hashes, size_t n)
{
	return pin_rpc(c, KVS_OP_PIN, ns, hashes, n);
}

int kvs_unpin(kvs_client *c, uint32_t ns, const kvs_hash *hashes, size_t n)
{
	return pin_rpc(c, KVS_OP_UNPIN, ns, hashes, n);
}

const char *kvs_event_name(kvs_event_kind kind)
{
	static const char *const names[] = {
		[KVS_EV_STORED] = "stored",     [KVS_EV_EVICTED] = "evicted",
		[KVS_EV_PINNED] = "pinned",     [KVS_EV_UNPINNED] = "unpinned",
		[KVS_EV_FLUSHED] = "flushed",
	};

	if ((unsigned)kind < sizeof(names) / sizeof(names[0]) && names[kind])
		return names[kind];
	return "unknown";
}

/* ---- watch ------------------------------------------------------------ */

struct kvs_watch {
	int fd;
	uint64_t dropped;
	uint8_t *buf;          /* bytes read, not yet used: [off, len) */
	size_t off, len, cap;
	kvs_wire_events cur;   /* the message being handed out */
	uint32_t next;         /* its next event */
	int dead;
};

int kvs_watch_open(const char *socket_path, kvs_watch **out)
{
	kvs_client *c;
	kvs_watch *w;
	const uint8_t *p;
	uint32_t rlen;
	int rc;

	if (!out)
		return -EINVAL;
	if ((rc = kvs_connect(socket_path, NULL, &c)) < 0)
		return rc;
	rc = kvs__rpc(c, KVS_OP_WATCH, NULL, 0, &p, &rlen);
	if (rc == 0 && rlen != 0)
		rc = KVS_E_PROTO;
	w = rc == 0 ? calloc(1, sizeof(*w)) : NULL;
	if (rc == 0 && !w)
		rc = -ENOMEM;
	if (rc < 0) {
		kvs_close(c);
		return rc;
	}
	w->fd = kvs__take_fd(c);
	kvs_close(c);
	*out = w;
	return 0;
}

int kvs_watch_fd(const kvs_watch *w) { return w->fd; }
uint64_t kvs_watch_dropped(const kvs_watch *w) { return w->dropped; }

void kvs_watch_close(kvs_watch *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	free(w->buf);
	free(w);
}

/* Take the next whole message out of the buffer into w->cur. 1 when there
 * was one, 0 when more bytes are needed, or an error. */
static int take_message(kvs_watch *w)
{
	kvs_wire_hdr h;
	int rc = kvs_wire_hdr_decode(w->buf + w->off, w->len - w->off,
				     KVS_WIRE_MAX_PAYLOAD, &h);

	if (rc == -EAGAIN)
		return 0;
	if (rc < 0 || h.opcode != KVS_OP_EVENT || h.status != 0)
		return KVS_E_PROTO;
	if (w->len - w->off < KVS_WIRE_HDR_SIZE + (size_t)h.len)
		return 0;
	rc = kvs_wire_events_decode(w->buf + w->off + KVS_WIRE_HDR_SIZE, h.len,
				    &w->cur);
	if (rc < 0)
		return rc;
	w->off += KVS_WIRE_HDR_SIZE + (size_t)h.len;
	w->dropped += w->cur.dropped;
	w->next = 0;
	return 1;
}

int kvs_watch_next(kvs_watch *w, kvs_event *ev, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? 0 : (int64_t)now_ms() + timeout_ms;

	if (!w || !ev)
		return -EINVAL;
	for (;;) {
		int rc;
		ssize_t n;
		struct pollfd pfd = { .fd = w->fd, .events = POLLIN };

		if (w->next < w->cur.count) {
			kvs_wire_event e = kvs_wire_event_at(w->cur.events, w->next++);

			*ev = (kvs_event){ .kind = (kvs_event_kind)e.kind,
					   .ns = e.ns, .hash = e.hash,
					   .seq = e.seq };
			return 1;
		}
		w->cur.count = 0;
		if (w->dead)
			return KVS_E_DISCONNECTED;
		if ((rc = take_message(w)) < 0) {
			w->dead = 1;
			return rc;
		}
		if (rc == 1)
			continue;
		/* Need bytes: compact, make room for a whole message, read. */
		if (w->off > 0) {
			memmove(w->buf, w->buf + w->off, w->len - w->off);
			w->len -= w->off;
			w->off = 0;
		}
		if (w->cap < KVS_WIRE_HDR_SIZE + KVS_WIRE_MAX_PAYLOAD) {
			uint8_t *nb = realloc(w->buf, KVS_WIRE_HDR_SIZE +
							      KVS_WIRE_MAX_PAYLOAD);

			if (!nb)
				return -ENOMEM;
			w->buf = nb;
			w->cap = KVS_WIRE_HDR_SIZE + KVS_WIRE_MAX_PAYLOAD;
		}
		if (timeout_ms >= 0) {
			int64_t left = deadline - (int64_t)now_ms();

			rc = poll(&pfd, 1, left > 0 ? (int)left : 0);
			if (rc < 0 && errno != EINTR)
				return -errno;
			if (rc == 0)
				return 0;
			if (rc < 0)
				continue;
		}
		n = read(w->fd, w->buf + w->len, w->cap - w->len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			w->dead = 1;
			return -errno == -ECONNRESET ? KVS_E_DISCONNECTED : -errno;
		}
		if (n == 0) {
			w->dead = 1;
			return KVS_E_DISCONNECTED;
		}
		w->len += (size_t)n;
	}
}
