/* resp.c - RESP2 encoders and incremental reply parser (see kvs_resp.h). */
#include "kvs_resp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_LINE, ST_BULK, ST_CRLF };
enum { BULK_KEEP, BULK_SKIP, BULK_DIRECT };

struct frame {
	uint32_t base; /* index of element 0 */
	uint32_t n, i; /* elements, next one to fill */
};

struct kvs_resp_parser {
	size_t keep_max;
	kvs_resp_limits lim; /* elems, depth filled in (never 0 here) */
	uint64_t reply_bytes; /* of the reply being parsed, counted ahead for
			       * a bulk's payload and CRLF */
	int state;
	int active; /* a reply is partly parsed */
	int done;   /* a complete reply is in vals[0] */

	/* header line being gathered (split input) */
	char line[KVS_RESP_LINE_MAX + 2];
	size_t line_len;

	/* bulk payload being read */
	int64_t bulk_left;
	int bulk_mode;
	uint32_t bulk_slot;
	int crlf_got;

	/* the expected destination of the next top-level bulk */
	const struct iovec *iov;
	int iovcnt;
	size_t iov_total;
	int iov_i;
	size_t iov_off;

	struct frame stack[KVS_RESP_DEPTH_MAX];
	int depth;

	kvs_resp_val *vals;
	size_t *soff; /* kept strings: offset in arena, per value */
	uint32_t nvals, cap_vals;
	char *arena;
	size_t arena_len, arena_cap;
};

int kvs_resp_parser_create(size_t keep_max, kvs_resp_parser **out)
{
	kvs_resp_parser *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->keep_max = keep_max;
	kvs_resp_limit(p, NULL);
	*out = p;
	return 0;
}

void kvs_resp_parser_free(kvs_resp_parser *p)
{
	if (!p)
		return;
	free(p->vals);
	free(p->soff);
	free(p->arena);
	free(p);
}

static void begin_reply(kvs_resp_parser *p)
{
	/* What a large reply made the parser grow to is given back here, when
	 * nothing points into it any more. */
	if (p->cap_vals > KVS_RESP_KEEP_VALS) {
		free(p->vals);
		free(p->soff);
		p->vals = NULL;
		p->soff = NULL;
		p->cap_vals = 0;
	}
	if (p->arena_cap > KVS_RESP_KEEP_ARENA) {
		free(p->arena);
		p->arena = NULL;
		p->arena_cap = 0;
	}
	p->reply_bytes = 0;
	p->state = ST_LINE;
	p->line_len = 0;
	p->depth = 0;
	p->nvals = 0;
	p->arena_len = 0;
	p->done = 0;
}

void kvs_resp_reset(kvs_resp_parser *p)
{
	begin_reply(p);
	p->active = 0;
	p->iov = NULL;
	p->iovcnt = 0;
	p->iov_total = 0;
}

int kvs_resp_expect(kvs_resp_parser *p, const struct iovec *iov, int iovcnt)
{
	size_t total = 0;

	if (p->active)
		return -EBUSY;
	if (iovcnt < 0 || iovcnt > KVS_RESP_IOV_MAX)
		return -EINVAL;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	p->iov = iovcnt ? iov : NULL;
	p->iovcnt = iovcnt;
	p->iov_total = total;
	p->iov_i = 0;
	p->iov_off = 0;
	return 0;
}

int kvs_resp_limit(kvs_resp_parser *p, const kvs_resp_limits *l)
{
	if (p->active)
		return -EBUSY;
	if (l && l->depth > KVS_RESP_DEPTH_MAX)
		return -EINVAL;
	p->lim.bytes = l ? l->bytes : 0;
	p->lim.elems = l && l->elems && l->elems < KVS_RESP_ELEMS_MAX
			       ? l->elems : KVS_RESP_ELEMS_MAX;
	p->lim.depth = l ? l->depth : KVS_RESP_DEPTH_MAX;
	return 0;
}

size_t kvs_resp_parser_mem(const kvs_resp_parser *p)
{
	return sizeof(*p) + p->arena_cap +
	       (size_t)p->cap_vals * (sizeof(*p->vals) + sizeof(*p->soff));
}

/* @n more bytes of the reply on the wire: -EPROTO past its budget. */
static int spend(kvs_resp_parser *p, uint64_t n)
{
	if (p->lim.bytes && n > p->lim.bytes - p->reply_bytes)
		return -EPROTO;
	p->reply_bytes += n;
	return 0;
}

const kvs_resp_val *kvs_resp_reply(const kvs_resp_parser *p)
{
	return p->done ? &p->vals[0] : NULL;
}

const kvs_resp_val *kvs_resp_elem(const kvs_resp_parser *p,
				  const kvs_resp_val *v, size_t i)
{
	if (!v || v->type != KVS_RESP_ARRAY || i >= (size_t)v->n)
		return NULL;
	return &p->vals[v->child + i];
}

/* Room for @n more values (the capacity stays for later replies). */
static int reserve_vals(kvs_resp_parser *p, uint32_t n)
{
	if ((uint64_t)p->nvals + n > p->lim.elems)
		return -EPROTO;
	if (p->nvals + n > p->cap_vals) {
		uint32_t cap = p->cap_vals ? p->cap_vals : 16;
		kvs_resp_val *v;
		size_t *o;

		while (cap < p->nvals + n)
			cap *= 2;
		v = realloc(p->vals, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		p->vals = v;
		o = realloc(p->soff, cap * sizeof(*o));
		if (!o)
			return -ENOMEM;
		p->soff = o;
		p->cap_vals = cap;
	}
	/* Not initialized here: each value is when it is parsed (process_line),
	 * so that a header announcing many elements costs nothing until they
	 * come; a reply completes only when all of them did. */
	p->nvals += n;
	return 0;
}

/* Room for @n bytes + NUL in the arena; returns the offset or -ENOMEM. */
static int64_t arena_take(kvs_resp_parser *p, size_t n)
{
	size_t off = p->arena_len;

	if (p->arena_len + n + 1 > p->arena_cap) {
		size_t cap = p->arena_cap ? p->arena_cap : 256;
		char *a;

		while (cap < p->arena_len + n + 1)
			cap *= 2;
		a = realloc(p->arena, cap);
		if (!a)
			return -ENOMEM;
		p->arena = a;
		p->arena_cap = cap;
	}
	p->arena[off + n] = '\0';
	p->arena_len += n + 1;
	return (int64_t)off;
}

/* The slot the next value goes to. */
static uint32_t cur_slot(const kvs_resp_parser *p)
{
	const struct frame *f;

	if (p->depth == 0)
		return 0;
	f = &p->stack[p->depth - 1];
	return f->base + f->i;
}

/* A value was completed in the current slot: move to the next one. Returns
 * 1 when that completed the top-level reply. */
static int value_done(kvs_resp_parser *p)
{
	while (p->depth > 0) {
		struct frame *f = &p->stack[p->depth - 1];

		if (++f->i < f->n)
			return 0;
		p->depth--; /* the array is complete: it is a value too */
	}
	/* Resolve kept strings now that the arena no longer moves. */
	for (uint32_t i = 0; i < p->nvals; i++)
		if (p->soff[i] != SIZE_MAX)
			p->vals[i].str = p->arena + p->soff[i];
	p->done = 1;
	p->active = 0;
	p->iov = NULL;
	p->iovcnt = 0;
	p->iov_total = 0;
	return 1;
}

/* Strict decimal int64 of @s[@n]: optional '-', 1-19 digits. */
static int parse_int(const char *s, size_t n, int64_t *out)
{
	int neg = 0;
	uint64_t v = 0;
	size_t i = 0;

	if (n && s[0] == '-') {
		neg = 1;
		i = 1;
	}
	if (i == n || n - i > 19)
		return -EPROTO;
	for (; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EPROTO;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > (uint64_t)INT64_MAX)
		return -EPROTO;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

/* A header line (type byte included, CRLF not) is complete. Returns 1 when
 * the reply completed, 0 to go on, <0 on error. */
/* A bulk string's header (length @x): where its bytes will go. */
static int bulk_start(kvs_resp_parser *p, kvs_resp_val *v, uint32_t slot,
		      int64_t x)
{
	int64_t off;

	if (spend(p, (uint64_t)x + 2) < 0)
		return -EPROTO; /* refused at the header: nothing skipped */
	v->type = KVS_RESP_BULK;
	v->n = x;
	p->bulk_slot = slot;
	p->bulk_left = x;
	if (p->depth == 0 && p->iov) {
		if ((size_t)x == p->iov_total) {
			p->bulk_mode = BULK_DIRECT;
			v->flags = KVS_RESP_DIRECT;
		} else {
			p->bulk_mode = BULK_SKIP;
			v->flags = KVS_RESP_DROPPED;
		}
	} else if ((uint64_t)x <= p->keep_max) {
		off = arena_take(p, (size_t)x);
		if (off < 0)
			return (int)off;
		p->soff[slot] = (size_t)off;
		p->bulk_mode = BULK_KEEP;
	} else {
		p->bulk_mode = BULK_SKIP;
		v->flags = KVS_RESP_DROPPED;
	}
	p->state = x ? ST_BULK : ST_CRLF;
	p->crlf_got = 0;
	return 0;
}

/* An array's header (@x elements): its children come next. */
static int array_start(kvs_resp_parser *p, kvs_resp_val *v, uint32_t slot,
		       int64_t x)
{
	int rc;

	/* Before anything is reserved: too deep for the command, or more
	 * elements than the bytes left could carry (3 each at least, "+\r\n"). */
	if ((uint32_t)p->depth >= p->lim.depth ||
	    (p->lim.bytes && (uint64_t)x * 3 > p->lim.bytes - p->reply_bytes))
		return -EPROTO;
	v->type = KVS_RESP_ARRAY;
	v->n = x;
	if (x == 0)
		return value_done(p);
	v->child = p->nvals;
	rc = reserve_vals(p, (uint32_t)x); /* moves vals: v is stale */
	if (rc < 0)
		return rc;
	p->stack[p->depth++] = (struct frame){
		.base = p->vals[slot].child, .n = (uint32_t)x, .i = 0 };
	return 0;
}

static int process_line(kvs_resp_parser *p, const char *l, size_t n)
{
	uint32_t slot = cur_slot(p);
	kvs_resp_val *v;
	int64_t x, off;
	int rc;

	if (n == 0)
		return -EPROTO;
	if (p->depth == 0) {
		rc = reserve_vals(p, 1);
		if (rc < 0)
			return rc;
	}
	v = &p->vals[slot];
	*v = (kvs_resp_val){ 0 };
	p->soff[slot] = SIZE_MAX;
	switch (l[0]) {
	case '+':
	case '-':
		off = arena_take(p, n - 1);
		if (off < 0)
			return (int)off;
		memcpy(p->arena + off, l + 1, n - 1);
		v->type = l[0] == '+' ? KVS_RESP_STATUS : KVS_RESP_ERROR;
		v->n = (int64_t)(n - 1);
		p->soff[slot] = (size_t)off;
		return value_done(p);
	case ':':
		if (parse_int(l + 1, n - 1, &x) < 0)
			return -EPROTO;
		v->type = KVS_RESP_INT;
		v->n = x;
		return value_done(p);
	case '$':
	case '*':
		if (parse_int(l + 1, n - 1, &x) < 0 || x < -1 ||
		    x > (l[0] == '$' ? KVS_RESP_BULK_MAX : KVS_RESP_ELEMS_MAX))
			return -EPROTO;
		if (x == -1) {
			v->type = KVS_RESP_NIL;
			v->n = -1;
			return value_done(p);
		}
		return l[0] == '$' ? bulk_start(p, v, slot, x)
				   : array_start(p, v, slot, x);
	default:
		return -EPROTO;
	}
}

/* Payload bytes into the expected buffers. */
static void direct_copy(kvs_resp_parser *p, const uint8_t *src, size_t n)
{
	while (n) {
		const struct iovec *d = &p->iov[p->iov_i];
		size_t room = d->iov_len - p->iov_off, k = n < room ? n : room;

		if (src)
			memcpy((uint8_t *)d->iov_base + p->iov_off, src, k);
		p->iov_off += k;
		n -= k;
		if (src)
			src += k;
		if (p->iov_off == d->iov_len) {
			p->iov_i++;
			p->iov_off = 0;
		}
	}
}

int kvs_resp_parse(kvs_resp_parser *p, const uint8_t *buf, size_t len,
		   size_t *used)
{
	size_t pos = 0;
	int rc = 0;

	*used = 0;
	if (len == 0)
		return 0;
	if (p->done || !p->active) {
		begin_reply(p);
		p->active = 1;
	}
	while (pos < len && rc == 0) {
		if (p->state == ST_LINE) {
			const uint8_t *nl = memchr(buf + pos, '\n', len - pos);
			size_t take = nl ? (size_t)(nl - (buf + pos)) + 1 : len - pos;

			if (p->line_len + take > sizeof(p->line) ||
			    spend(p, take) < 0) {
				rc = -EPROTO;
				break;
			}
			memcpy(p->line + p->line_len, buf + pos, take);
			p->line_len += take;
			pos += take;
			if (!nl)
				continue;
			if (p->line_len < 2 || p->line[p->line_len - 2] != '\r') {
				rc = -EPROTO;
				break;
			}
			rc = process_line(p, p->line, p->line_len - 2);
			p->line_len = 0;
		} else if (p->state == ST_BULK) {
			size_t k = len - pos;

			if ((uint64_t)k > (uint64_t)p->bulk_left)
				k = (size_t)p->bulk_left;
			if (p->bulk_mode == BULK_DIRECT)
				direct_copy(p, buf + pos, k);
			else if (p->bulk_mode == BULK_KEEP)
				memcpy(p->arena + p->soff[p->bulk_slot] +
					       (size_t)(p->vals[p->bulk_slot].n -
							p->bulk_left),
				       buf + pos, k);
			p->bulk_left -= (int64_t)k;
			pos += k;
			if (p->bulk_left == 0)
				p->state = ST_CRLF;
		} else { /* ST_CRLF */
			if (buf[pos] != (p->crlf_got ? '\n' : '\r')) {
				rc = -EPROTO;
				break;
			}
			pos++;
			if (++p->crlf_got == 2) {
				p->state = ST_LINE;
				if (p->bulk_mode == BULK_DIRECT) {
					p->vals[p->bulk_slot].str =
						p->iovcnt ? p->iov[0].iov_base : NULL;
				}
				rc = value_done(p);
			}
		}
	}
	*used = pos;
	if (rc < 0) {
		p->active = 0;
		p->done = 0;
	}
	return rc;
}

int kvs_resp_direct(const kvs_resp_parser *p, struct iovec *iov, int max)
{
	size_t left;
	int n = 0, i = p->iov_i;
	size_t off = p->iov_off;

	if (!p->active || p->state != ST_BULK || p->bulk_mode != BULK_DIRECT)
		return 0;
	left = (size_t)p->bulk_left;
	while (left && n < max && i < p->iovcnt) {
		size_t k = p->iov[i].iov_len - off;

		if (k > left)
			k = left;
		if (k) {
			iov[n].iov_base = (uint8_t *)p->iov[i].iov_base + off;
			iov[n].iov_len = k;
			n++;
			left -= k;
		}
		i++;
		off = 0;
	}
	return n;
}

void kvs_resp_direct_done(kvs_resp_parser *p, size_t n)
{
	if (!p->active || p->state != ST_BULK || p->bulk_mode != BULK_DIRECT ||
	    (uint64_t)n > (uint64_t)p->bulk_left)
		return;
	direct_copy(p, NULL, n);
	p->bulk_left -= (int64_t)n;
	if (p->bulk_left == 0)
		p->state = ST_CRLF;
}

/* "<c><n>\r\n" into @buf[@cap], no NUL. */
static int encode_len(uint8_t *buf, size_t cap, char c, size_t n)
{
	char tmp[32];
	int k = snprintf(tmp, sizeof(tmp), "%c%zu\r\n", c, n);

	if (k < 0 || (size_t)k > cap)
		return -ENOSPC;
	memcpy(buf, tmp, (size_t)k);
	return k;
}

int kvs_resp_encode_array(uint8_t *buf, size_t cap, size_t n)
{
	return encode_len(buf, cap, '*', n);
}

int kvs_resp_encode_bulk_hdr(uint8_t *buf, size_t cap, size_t len)
{
	return encode_len(buf, cap, '$', len);
}

int kvs_resp_encode_bulk(uint8_t *buf, size_t cap, const void *s, size_t len)
{
	int k = kvs_resp_encode_bulk_hdr(buf, cap, len);

	if (k < 0 || cap - (size_t)k < len + 2)
		return -ENOSPC;
	memcpy(buf + k, s, len);
	memcpy(buf + k + len, "\r\n", 2);
	return k + (int)len + 2;
}

int kvs_resp_encode_cmd(uint8_t *buf, size_t cap, int argc,
			const char *const *argv, const size_t *lens)
{
	int pos, k;

	if (argc < 1)
		return -EINVAL;
	pos = kvs_resp_encode_array(buf, cap, (size_t)argc);
	if (pos < 0)
		return pos;
	for (int i = 0; i < argc; i++) {
		k = kvs_resp_encode_bulk(buf + pos, cap - (size_t)pos, argv[i],
					 lens ? lens[i] : strlen(argv[i]));
		if (k < 0)
			return k;
		pos += k;
	}
	return pos;
}
