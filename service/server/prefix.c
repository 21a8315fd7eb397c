/* prefix.c - POST /v1/prefix on the metrics port: how many leading tokens
 * of a prompt the node's pool holds, per tier (docs/routers.md). The body
 * is JSON (jansson parses it); the chain's hashes are computed as the
 * library computes them (kvs_hash_layout_seed, kvs_hash_chain) and looked
 * up one by one (kvs_cache_prefix): the work is the chain's length, capped
 * with the body's size, never the pool's. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kvs_cache_admin.h"
#include "kvs_types.h"
#include "server_int.h"

/* A request's token_ids: at most this many (1 MiB of body holds fewer of
 * any real vocabulary's ids). */
#define PREFIX_MAX_TOKENS 262144u

typedef struct prefix_req {
	kvs_layout l;
	kvs_hash *h;
	uint32_t n; /* hashes in h */
} prefix_req;

static int fail(FILE *f, const char *msg)
{
	json_t *o = json_pack("{s:s}", "error", msg);

	if (o)
		json_dumpf(o, f, JSON_COMPACT);
	json_decref(o);
	fputc('\n', f);
	return 400;
}

/* Field @key of @o as a u32 (@def when absent, -1 without a default). */
static int get_u32(json_t *o, const char *key, long long def, uint32_t *out)
{
	json_t *v = json_object_get(o, key);
	json_int_t x;

	if (!v) {
		*out = (uint32_t)def;
		return def < 0 ? -1 : 0;
	}
	if (!json_is_integer(v))
		return -1;
	x = json_integer_value(v);
	if (x < 0 || x > UINT32_MAX)
		return -1;
	*out = (uint32_t)x;
	return 0;
}

/* Field @key of @o as a string without NULs of at most KVS_NAME_MAX bytes;
 * NULL when absent or null. Returns -1 for any other type or size. */
static int get_str(json_t *o, const char *key, const char **out)
{
	json_t *v = json_object_get(o, key);

	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v) || json_string_length(v) > KVS_NAME_MAX ||
	    strlen(json_string_value(v)) != json_string_length(v))
		return -1;
	*out = json_string_value(v);
	return 0;
}

static int get_dtype(json_t *o, kvs_dtype *out)
{
	const char *s;

	if (get_str(o, "dtype", &s) < 0)
		return -1;
	*out = KVS_DTYPE_FP16;
	return s && kvs_dtype_parse(s, out) < 0 ? -1 : 0;
}

/* The layout: the fields a worker's kvs_layout has. NULL or a message. */
static const char *parse_layout(json_t *o, kvs_layout *l)
{
	if (get_str(o, "model", &l->model) < 0 || !l->model || !l->model[0])
		return "model: a non-empty string (at most 255 bytes) is required";
	if (get_str(o, "adapter", &l->adapter) < 0 ||
	    get_str(o, "salt", &l->salt) < 0)
		return "adapter, salt: strings (at most 255 bytes, no NUL) or null";
	if (get_u32(o, "layers", -1, &l->layers) < 0 ||
	    get_u32(o, "kv_heads", -1, &l->kv_heads) < 0 ||
	    get_u32(o, "head_dim", -1, &l->head_dim) < 0 ||
	    get_u32(o, "block_tokens", -1, &l->block_tokens) < 0 ||
	    get_u32(o, "tp_rank", 0, &l->tp_rank) < 0 ||
	    get_u32(o, "tp_size", 1, &l->tp_size) < 0)
		return "layers, kv_heads, head_dim, block_tokens (required), "
		       "tp_rank, tp_size: integers from 0 to 2^32-1";
	if (!l->layers || !l->kv_heads || !l->head_dim || !l->block_tokens ||
	    !l->tp_size || l->tp_rank >= l->tp_size)
		return "layers, kv_heads, head_dim, block_tokens, tp_size must "
		       "be positive and tp_rank below tp_size";
	if (get_dtype(o, &l->dtype) < 0)
		return "dtype: one of fp16, bf16, fp32, fp8_e4m3, int8, int4";
	return NULL;
}

/* token_ids: hashed as the library hashes them (full blocks only). */
static const char *parse_tokens(json_t *a, prefix_req *rq)
{
	size_t ntok = json_array_size(a), nb;
	uint32_t *tok;

	if (ntok > PREFIX_MAX_TOKENS)
		return "token_ids: at most 262144 a request";
	nb = ntok / rq->l.block_tokens;
	if (nb > KVS_MAX_HASHES)
		return "token_ids: at most 16384 blocks a request";
	tok = malloc((ntok ? ntok : 1) * sizeof(*tok));
	rq->h = malloc((nb ? nb : 1) * sizeof(*rq->h));
	if (!tok || !rq->h) {
		free(tok);
		return "out of memory";
	}
	for (size_t i = 0; i < ntok; i++) {
		json_t *v = json_array_get(a, i);
		json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;

		if (x < 0 || x > UINT32_MAX) {
			free(tok);
			return "token_ids: integers from 0 to 2^32-1";
		}
		tok[i] = (uint32_t)x;
	}
	rq->n = (uint32_t)kvs_hash_chain(kvs_hash_layout_seed(&rq->l),
					 rq->l.block_tokens, tok, ntok, rq->h, nb);
	free(tok);
	return NULL;
}

/* block_hashes: 32 hex digits each, as kvsctl prints them. */
static const char *parse_hashes(json_t *a, prefix_req *rq)
{
	size_t n = json_array_size(a);

	if (n > KVS_MAX_HASHES)
		return "block_hashes: at most 16384 a request";
	rq->h = malloc((n ? n : 1) * sizeof(*rq->h));
	if (!rq->h)
		return "out of memory";
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(a, i);

		if (!json_is_string(v) ||
		    kvs_hash_parse(json_string_value(v), &rq->h[i]) < 0)
			return "block_hashes: strings of 32 hex digits";
	}
	rq->n = (uint32_t)n;
	return NULL;
}

static const char *parse(json_t *o, prefix_req *rq)
{
	json_t *tok, *hashes;
	const char *err;

	if (!json_is_object(o))
		return "the body must be a JSON object";
	if ((err = parse_layout(o, &rq->l)))
		return err;
	tok = json_object_get(o, "token_ids");
	hashes = json_object_get(o, "block_hashes");
	if (!tok == !hashes)
		return "give one of token_ids, block_hashes";
	if (tok && !json_is_array(tok))
		return "token_ids: an array of integers";
	if (hashes && !json_is_array(hashes))
		return "block_hashes: an array of strings";
	return tok ? parse_tokens(tok, rq) : parse_hashes(hashes, rq);
}

static void answer(kvs_server *s, const prefix_req *rq, FILE *f)
{
	kvs_ns_desc d = { .model = rq->l.model,
			  .adapter = rq->l.adapter ? rq->l.adapter : "",
			  .salt = (const uint8_t *)rq->l.salt,
			  .salt_len = rq->l.salt ? (uint32_t)strlen(rq->l.salt) : 0,
			  .layers = rq->l.layers, .kv_heads = rq->l.kv_heads,
			  .head_dim = rq->l.head_dim,
			  .block_tokens = rq->l.block_tokens,
			  .tp_rank = rq->l.tp_rank, .tp_size = rq->l.tp_size,
			  .dtype = rq->l.dtype };
	uint32_t t[KVS_TIER_REMOTE + 1];
	uint32_t n = kvs_cache_prefix(s->cache, &d, rq->h, rq->n, t);

	fprintf(f, "{\"tokens\":%llu,\"blocks\":%u,\"block_tokens\":%u,"
		"\"tiers\":{\"gpu\":%u,\"host\":%u,\"ssd\":%u}}\n",
		(unsigned long long)n * rq->l.block_tokens, n,
		rq->l.block_tokens, t[KVS_TIER_GPU], t[KVS_TIER_HOST],
		t[KVS_TIER_SSD]);
}

static int prefix_post(void *arg, const char *body, size_t len, FILE *f)
{
	kvs_server *s = arg;
	prefix_req rq = { .l = { .model = NULL } };
	json_error_t jerr;
	json_t *o;
	const char *err;

	o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!o) {
		char msg[JSON_ERROR_TEXT_LENGTH + 64];

		snprintf(msg, sizeof(msg), "the body is not JSON: %s (line %d, "
			 "column %d)", jerr.text, jerr.line, jerr.column);
		s->stats.server_prefix_bad++;
		return fail(f, msg);
	}
	err = parse(o, &rq);
	if (!err)
		answer(s, &rq, f);
	json_decref(o); /* after answer(): the layout's strings are o's */
	free(rq.h);
	if (err) {
		s->stats.server_prefix_bad++;
		return fail(f, err);
	}
	s->stats.server_prefix_queries++;
	return 200;
}

void server_prefix_serve(kvs_server *s)
{
	kvs_metrics_set_post(s->metrics, "/v1/prefix", prefix_post, s);
}
