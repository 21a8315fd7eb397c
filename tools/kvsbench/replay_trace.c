/*
 * replay_trace.c - the Mooncake trace format for kvsbench replay (see
 * replay_trace.h).
 */
#define _GNU_SOURCE
#include "replay_trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "kvshare.h"

#define LINE_MAX_BYTES (64u << 20)

/* ---- trace parsing ---------------------------------------------------- */

/* A JSON object per line, of numbers, strings and arrays of numbers: all
 * this format has. Anything else is an error with its line number. */
typedef struct cursor {
	const char *p, *end;
} cursor;

static void skip_ws(cursor *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' ||
				 *c->p == '\r' || *c->p == '\n'))
		c->p++;
}

/* 1, and past it, if the next character is @ch; else 0. */
static int accept(cursor *c, char ch)
{
	skip_ws(c);
	if (c->p >= c->end || *c->p != ch)
		return 0;
	c->p++;
	return 1;
}

static int expect(cursor *c, char ch)
{
	return accept(c, ch) ? 0 : -1;
}

/* A string; *s, *len: its bytes between the quotes (escapes kept raw). */
static int parse_string(cursor *c, const char **s, size_t *len)
{
	if (expect(c, '"') < 0)
		return -1;
	*s = c->p;
	while (c->p < c->end && *c->p != '"')
		c->p += *c->p == '\\' ? 2 : 1;
	if (c->p >= c->end)
		return -1;
	*len = (size_t)(c->p - *s);
	c->p++;
	return 0;
}

/* A non-negative integer (a number with a fraction or exponent is
 * accepted and truncated: timestamps may be floats). */
static int parse_uint64(cursor *c, uint64_t *v)
{
	char buf[64];
	size_t n = 0;
	char *e;
	double d;

	skip_ws(c);
	while (c->p + n < c->end && n < sizeof(buf) - 1 &&
	       strchr("0123456789+-.eE", c->p[n]))
		n++;
	if (n == 0 || n == sizeof(buf) - 1)
		return -1;
	memcpy(buf, c->p, n);
	buf[n] = 0;
	if (buf[0] == '-')
		return -1;
	errno = 0;
	*v = strtoull(buf, &e, 10);
	if (*e) {
		d = strtod(buf, &e);
		if (*e || d < 0 || d >= 18446744073709551615.0)
			return -1;
		*v = (uint64_t)d;
	}
	if (errno)
		return -1;
	c->p += n;
	return 0;
}

static int push_id(replay_trace *t, uint64_t id)
{
	if (t->nids == t->capids) {
		size_t cap = t->capids ? t->capids * 2 : 1u << 16;
		uint64_t *n = realloc(t->ids, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		t->ids = n;
		t->capids = cap;
	}
	t->ids[t->nids++] = id;
	return 0;
}

static int skip_value(cursor *c);

/* An array: of hash ids, appended to t->ids and counted in r->n, or of
 * anything, skipped, when @t is NULL. */
static int parse_array(cursor *c, replay_trace *t, replay_req *r)
{
	uint64_t id;

	if (expect(c, '[') < 0)
		return -1;
	if (accept(c, ']'))
		return 0;
	do {
		if (!t) {
			if (skip_value(c) < 0)
				return -1;
		} else if (parse_uint64(c, &id) < 0 || push_id(t, id) < 0) {
			return -1;
		} else {
			r->n++;
		}
	} while (accept(c, ','));
	return expect(c, ']');
}

static int skip_value(cursor *c)
{
	const char *s;
	size_t len;
	uint64_t v;

	skip_ws(c);
	if (c->p < c->end && *c->p == '"')
		return parse_string(c, &s, &len);
	if (c->p < c->end && *c->p == '[')
		return parse_array(c, NULL, NULL);
	for (const char *w = "true\0false\0null\0"; *w; w += strlen(w) + 1) {
		size_t n = strlen(w);

		if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, w, n)) {
			c->p += n;
			return 0;
		}
	}
	return parse_uint64(c, &v);
}

/* One record: its hash ids are appended to t->ids. */
static int parse_record(replay_trace *t, const char *line, size_t len, replay_req *r)
{
	cursor c = { line, line + len };
	int have_ids = 0, have_input = 0;

	r->first = t->nids;
	r->n = 0;
	if (expect(&c, '{') < 0)
		return -1;
	do {
		const char *k;
		size_t klen;

		if (parse_string(&c, &k, &klen) < 0 || expect(&c, ':') < 0)
			return -1;
		if (klen == 8 && !memcmp(k, "hash_ids", 8)) {
			if (have_ids++ || parse_array(&c, t, r) < 0)
				return -1;
		} else if (klen == 12 && !memcmp(k, "input_length", 12)) {
			if (have_input++ || parse_uint64(&c, &r->input) < 0)
				return -1;
		} else if (skip_value(&c) < 0) {
			return -1;
		}
	} while (accept(&c, ','));
	if (expect(&c, '}') < 0)
		return -1;
	skip_ws(&c);
	return have_ids && have_input && c.p == c.end ? 0 : -1;
}

void replay_trace_free(replay_trace *t)
{
	free(t->reqs);
	free(t->ids);
	memset(t, 0, sizeof(*t));
}

int replay_trace_load(const char *path, replay_trace *t)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	unsigned long lineno = 0;
	int rc = 0;

	memset(t, 0, sizeof(*t));
	if (!f) {
		rc = -errno;
		fprintf(stderr, "kvsbench: replay: open %s failed: %s\n", path,
			kvs_strerror(rc));
		return rc;
	}
	while ((len = getline(&line, &cap, f)) > 0) {
		const char *p = line;
		replay_req r;

		lineno++;
		while (len > 0 && strchr(" \t\r\n", p[len - 1]))
			len--;
		if (len == 0)
			continue;
		if ((size_t)len > LINE_MAX_BYTES ||
		    parse_record(t, p, (size_t)len, &r) < 0) {
			fprintf(stderr, "kvsbench: replay: %s:%lu: not a trace "
				"record (a JSON object with hash_ids and "
				"input_length)\n", path, lineno);
			rc = -EINVAL;
			break;
		}
		if (r.n > KVS_MAX_HASHES) {
			fprintf(stderr, "kvsbench: replay: %s:%lu: %u blocks, "
				"more than %d per request\n", path, lineno, r.n,
				KVS_MAX_HASHES);
			rc = -EINVAL;
			break;
		}
		if (t->nreqs == t->capreqs) {
			size_t n = t->capreqs ? t->capreqs * 2 : 4096;
			replay_req *nr = realloc(t->reqs, n * sizeof(*nr));

			if (!nr) {
				rc = -ENOMEM;
				break;
			}
			t->reqs = nr;
			t->capreqs = n;
		}
		t->reqs[t->nreqs++] = r;
		if (r.n > t->max_n)
			t->max_n = r.n;
	}
	if (rc == 0 && ferror(f)) {
		rc = -EIO;
		fprintf(stderr, "kvsbench: replay: read %s failed: %s\n", path,
			kvs_strerror(rc));
	}
	if (rc == 0 && t->nreqs == 0) {
		rc = -EINVAL;
		fprintf(stderr, "kvsbench: replay: %s has no records\n", path);
	}
	free(line);
	fclose(f);
	if (rc < 0)
		replay_trace_free(t);
	return rc;
}
