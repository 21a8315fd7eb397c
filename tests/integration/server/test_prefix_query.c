/*
 * test_prefix_query - the scheduler's prefix query: POST /v1/prefix on the
 * metrics port and kvsctl prefix answer what a lookup finds, per tier. A
 * daemon with an SSD tier (host 2 MiB: 128 blocks of 16 tokens, leaf-lru
 * eviction, so that the oldest chain is the one demoted) and
 * --metrics-addr 127.0.0.1:0.
 *  host:    a chain of 8 published blocks: 128 tokens in host (the
 *           prompt's trailing partial block not counted), the same from
 *           block_hashes and from kvsctl (tokens and hashes); a prompt that
 *           leaves the chain after 3 blocks answers 48 tokens; kvs_query
 *           and a lookup agree.
 *  unknown: another model, salt or block size answers 0 tokens, 200.
 *  ssd:     after 160 more blocks demoted the chain to SSD, the endpoint
 *           and kvsctl say the same split (ssd > 0, host + ssd = blocks),
 *           then a lookup hits that many blocks.
 *  bad:     malformed JSON, wrong types, a string token, too many tokens,
 *           a bad hash, no chain, a huge Content-Length (413), no
 *           Content-Length (411), GET (405): each a 4xx with a JSON error,
 *           and the daemon goes on serving queries and workers.
 *  gpu:     a daemon with the GPU tier on its CPU twin (KVS_GPU_FAKE=1):
 *           a chain a GPU client published answers gpu 8, from the
 *           endpoint and from kvsctl.
 *  tenants: with --tenant-arenas uid every namespace is a tenant's: a
 *           published chain answers 0 tokens (the first tenant's domain is
 *           domain 0, which a shared daemon answers from).
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_ssd.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#define BT 16
#define LEN 8
#define FILLERS 20
#define LAYOUT "\"model\":\"%s\",\"layers\":2,\"kv_heads\":2,\"head_dim\":64," \
	       "\"block_tokens\":%d"

static th_daemon d;
static char ssd_dir[128];
static int port;
static char reply[1 << 16];

typedef struct counts {
	unsigned tokens, blocks, bt, gpu, host, ssd;
} counts;

static int tcp_connect(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		fd = -1;
	}
	if (fd < 0)
		th_fatal("connect to 127.0.0.1:%d: %s", port, strerror(errno));
	return fd;
}

/* Send @head then @body (may be NULL), read the reply to EOF into reply[];
 * returns the HTTP status (0 when none came). */
static int http(const char *head, const char *body, size_t blen)
{
	int64_t end = th_now_ms() + TH_WAIT_MS;
	size_t got = 0;
	int fd = tcp_connect(), code = 0;

	send(fd, head, strlen(head), MSG_NOSIGNAL);
	if (body)
		send(fd, body, blen, MSG_NOSIGNAL);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = end - th_now_ms();
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0 ||
		    got + 1 >= sizeof(reply))
			break;
		n = recv(fd, reply + got, sizeof(reply) - 1 - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	reply[got] = '\0';
	close(fd);
	sscanf(reply, "HTTP/1.1 %d", &code);
	return code;
}

static int post(const char *body)
{
	char head[256];

	snprintf(head, sizeof(head), "POST /v1/prefix HTTP/1.1\r\nHost: x\r\n"
		 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
		 strlen(body));
	return http(head, body, strlen(body));
}

static const char *body_of(void)
{
	const char *b = strstr(reply, "\r\n\r\n");

	return b ? b + 4 : "";
}

static bool parse_counts(const char *s, counts *c)
{
	return sscanf(s, "{\"tokens\":%u,\"blocks\":%u,\"block_tokens\":%u,"
		      "\"tiers\":{\"gpu\":%u,\"host\":%u,\"ssd\":%u}",
		      &c->tokens, &c->blocks, &c->bt, &c->gpu, &c->host,
		      &c->ssd) == 6;
}

/* POST @body: 200 and its counts. */
static counts query(const char *body)
{
	counts c = { 0 };

	if (CHECK_EQ(post(body), 200))
		CHECK(parse_counts(body_of(), &c));
	return c;
}

/* A body of @model's layout (@bt) and token_ids @tok[0..n), @extra added. */
static char *tokens_body(const char *model, int bt, const uint32_t *tok,
			 size_t n, const char *extra)
{
	size_t cap = 256 + n * 12, len;
	char *b = malloc(cap);

	if (!b)
		th_fatal("out of memory");
	len = (size_t)snprintf(b, cap, "{" LAYOUT "%s,\"token_ids\":[", model,
			       bt, extra);
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(b + len, cap - len, "%s%u", i ? "," : "",
					tok[i]);
	snprintf(b + len, cap - len, "]}");
	return b;
}

/* kvsctl prefix --json with @args, of the daemon on @sock: its counts. */
static counts kvsctl(const char *sock, const char *args)
{
	char cmd[1024], out[512] = "";
	counts c = { 0 };
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s --socket %s prefix --json %s",
		 getenv("KVSCTL"), sock, args);
	p = popen(cmd, "r");
	if (!CHECK(p != NULL))
		return c;
	if (!fgets(out, sizeof(out), p))
		out[0] = '\0';
	CHECK_EQ(pclose(p), 0);
	if (!CHECK(parse_counts(out, &c)))
		th_note("kvsctl said: %s", out);
	return c;
}

static void write_file(const char *path, const char *fmt_sep,
		       const uint32_t *tok, size_t n, const kvs_hash *h)
{
	FILE *f = fopen(path, "w");

	if (!f)
		th_fatal("%s: %s", path, strerror(errno));
	for (size_t i = 0; i < n; i++) {
		char hx[33];

		if (h) {
			kvs_hash_format(h[i], hx);
			fprintf(f, "%s\n", hx);
		} else {
			fprintf(f, "%u%s", tok[i], fmt_sep);
		}
	}
	fclose(f);
}

static char tokfile[256], hashfile[256];
#define CTL_LAYOUT "--model prefix-model --layers 2 --kv-heads 2 --head-dim 64 " \
		   "--block-tokens 16"

static bool same(counts a, counts b)
{
	return CHECK_EQ(a.tokens, b.tokens) && CHECK_EQ(a.blocks, b.blocks) &&
	       CHECK_EQ(a.host, b.host) && CHECK_EQ(a.ssd, b.ssd) &&
	       CHECK_EQ(a.gpu, b.gpu);
}

static void host_part(kvs_client *w, const uint32_t *tok, const kvs_hash *h)
{
	uint32_t other[LEN * BT + 5];
	char *b, hb[LEN * 40 + 256], args[600];
	counts c, k;
	size_t n;

	b = tokens_body("prefix-model", BT, tok, LEN * BT + 5, "");
	c = query(b);
	free(b);
	CHECK_EQ(c.tokens, LEN * BT);
	CHECK_EQ(c.blocks, LEN);
	CHECK_EQ(c.bt, BT);
	CHECK_EQ(c.host, LEN);
	CHECK_EQ(c.ssd + c.gpu, 0);

	/* The same chain by its hashes. */
	n = (size_t)snprintf(hb, sizeof(hb), "{" LAYOUT ",\"block_hashes\":[",
			     "prefix-model", BT);
	for (int i = 0; i < LEN; i++) {
		char hx[33];

		kvs_hash_format(h[i], hx);
		n += (size_t)snprintf(hb + n, sizeof(hb) - n, "%s\"%s\"",
				      i ? "," : "", hx);
	}
	snprintf(hb + n, sizeof(hb) - n, "]}");
	same(query(hb), c);

	/* kvsctl: from the tokens and from the hashes. */
	snprintf(args, sizeof(args), "--tokens %s " CTL_LAYOUT, tokfile);
	k = kvsctl(d.socket, args);
	same(k, c);
	CHECK_EQ(k.bt, BT);
	snprintf(args, sizeof(args), "--hashes %s", hashfile);
	k = kvsctl(d.socket, args);
	same(k, c);
	CHECK_EQ(k.bt, BT); /* the namespace's, found by kvsctl */

	/* A prompt that leaves the chain after 3 blocks. */
	memcpy(other, tok, sizeof(other));
	other[3 * BT + 2] ^= 0x5a5a;
	b = tokens_body("prefix-model", BT, other, LEN * BT, "");
	c = query(b);
	free(b);
	CHECK_EQ(c.tokens, 3 * BT);
	CHECK_EQ(c.host, 3);

	/* The library's count and a lookup agree. */
	CHECK_RC(kvs_query(w, h, LEN, 0), LEN);
	CHECK_RC(th_probe(w, h, LEN), LEN);
}

static void unknown_part(const uint32_t *tok)
{
	char *b;
	counts c;

	b = tokens_body("no-such-model", BT, tok, LEN * BT, "");
	c = query(b);
	free(b);
	CHECK_EQ(c.tokens, 0);
	CHECK_EQ(c.bt, BT);
	b = tokens_body("prefix-model", BT, tok, LEN * BT, ",\"salt\":\"tenant-b\"");
	CHECK_EQ(query(b).tokens, 0);
	free(b);
	b = tokens_body("prefix-model", 2 * BT, tok, LEN * BT, "");
	CHECK_EQ(query(b).tokens, 0);
	free(b);
}

/* Push the chain down to SSD with FILLERS more chains; the endpoint,
 * kvsctl and then a lookup see the same split. */
static void ssd_part(kvs_client *w, const kvs_layout *l, const uint32_t *tok,
		     const kvs_hash *h)
{
	kvs_hash f[LEN];
	char *b, args[600];
	counts c;

	for (int i = 0; i < FILLERS; i++) {
		th_chain(l, 5000 + (uint64_t)i, LEN, 0, 0, f);
		CHECK_RC(th_publish(w, f, LEN, NULL), LEN);
	}
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK_GT(th_stat_get(&d, "tier_ssd.demotions"), 0);
	b = tokens_body("prefix-model", BT, tok, LEN * BT, "");
	c = query(b);
	free(b);
	th_note("ssd: %u blocks, host %u, ssd %u", c.blocks, c.host, c.ssd);
	CHECK_GT(c.ssd, 0);
	CHECK_EQ(c.host + c.ssd, c.blocks);
	CHECK_EQ(c.tokens, c.blocks * BT);
	snprintf(args, sizeof(args), "--tokens %s " CTL_LAYOUT, tokfile);
	same(kvsctl(d.socket, args), c);
	CHECK_RC(kvs_query(w, h, LEN, 0), c.blocks);
	CHECK_RC(th_probe(w, h, LEN), c.blocks);
}

static void bad_part(kvs_client *w, const kvs_layout *l)
{
	static const char *const bodies[] = {
		"{\"model\":", /* malformed */
		"[1,2,3]",
		"{\"model\":\"m\",\"layers\":\"2\",\"kv_heads\":2,\"head_dim\":64,"
		"\"block_tokens\":16,\"token_ids\":[1]}",
		"{\"model\":\"m\",\"layers\":2,\"kv_heads\":2,\"head_dim\":64,"
		"\"block_tokens\":0,\"token_ids\":[1]}",
		"{\"model\":\"m\",\"layers\":2,\"kv_heads\":2,\"head_dim\":64,"
		"\"block_tokens\":16,\"token_ids\":[1,\"2\"]}",
		"{\"model\":\"m\",\"layers\":2,\"kv_heads\":2,\"head_dim\":64,"
		"\"block_tokens\":16,\"token_ids\":[-1]}",
		"{\"model\":\"m\",\"layers\":2,\"kv_heads\":2,\"head_dim\":64,"
		"\"block_tokens\":16,\"block_hashes\":[\"xyz\"]}",
		"{\"model\":\"m\",\"layers\":2,\"kv_heads\":2,\"head_dim\":64,"
		"\"block_tokens\":16}",
		"{\"model\":\"m\",\"layers\":2,\"kv_heads\":2,\"head_dim\":64,"
		"\"block_tokens\":16,\"token_ids\":[1],\"block_hashes\":[]}",
		"{\"model\":\"m\",\"model\":\"n\",\"layers\":2,\"kv_heads\":2,"
		"\"head_dim\":64,\"block_tokens\":16,\"token_ids\":[1]}",
	};
	static const char get[] = "GET /v1/prefix HTTP/1.1\r\nHost: x\r\n\r\n";
	static const char huge[] = "POST /v1/prefix HTTP/1.1\r\nHost: x\r\n"
				   "Content-Length: 2097152\r\n\r\n";
	static const char nolen[] = "POST /v1/prefix HTTP/1.1\r\nHost: x\r\n\r\n{}";
	uint32_t *many = calloc(262145, sizeof(*many));
	int64_t bad0 = th_stat_get(&d, "server.prefix_bad");
	char *b;

	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		if (!CHECK_EQ(post(bodies[i]), 400))
			th_note("body %zu: %s", i, reply);
		CHECK(strstr(body_of(), "{\"error\":\"") == body_of());
	}
	if (!many)
		th_fatal("out of memory");
	b = tokens_body("m", BT, many, 262145, ""); /* ~0.5 MiB of zeros */
	CHECK_EQ(post(b), 400);
	CHECK(strstr(body_of(), "at most 262144") != NULL);
	free(b);
	free(many);
	CHECK_EQ(http(huge, NULL, 0), 413);
	CHECK(strstr(body_of(), "{\"error\":") == body_of());
	CHECK_EQ(http(nolen, NULL, 0), 411);
	CHECK_EQ(http(get, NULL, 0), 405);
	CHECK(strstr(body_of(), "{\"error\":") == body_of());
	CHECK_EQ(th_stat_get(&d, "server.prefix_bad"), bad0 + 11);
	/* Still serving: a query, a scrape, a worker. */
	CHECK_EQ(post("{\"model\":\"m\",\"layers\":2,\"kv_heads\":2,\"head_dim\":64,"
		      "\"block_tokens\":16,\"token_ids\":[]}"), 200);
	CHECK_EQ(http("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", NULL, 0), 200);
	CHECK(th_round_trip(w, l, 99, 2));
}

static void gpu_part(void)
{
	static th_daemon g;
	kvs_layout l = th_layout("prefix-model", BT);
	uint32_t tok[LEN * BT];
	kvs_block blk[LEN];
	kvs_lease lease = 0;
	kvs_hash h[LEN];
	kvs_client *c = NULL;
	char *b, args[600];
	int main_port = port, rc;
	counts q;

	setenv("KVS_GPU_FAKE", "1", 1);
	th_daemon_up(&g, TH_ARGS("--gpu", "0", "--gpu-size", "3M", "--host-size",
				 "16M", "--metrics-addr", "127.0.0.1:0"));
	port = (int)th_stat_get(&g, "server.metrics_port");
	rc = kvs_connect_flags(g.socket, &l, KVS_CONNECT_GPU, &c);
	if (!CHECK_RC(rc, 0))
		goto out;
	th_tokens(tok, LEN * BT, 77);
	CHECK_RC(kvs_hash_tokens(c, tok, LEN * BT, h, LEN), LEN);
	/* The bytes do not matter to a query: reserve and commit. */
	CHECK_RC(kvs_reserve(c, h, LEN, &lease, blk), LEN);
	CHECK_EQ(blk[0].tier, KVS_TIER_GPU);
	CHECK_RC(kvs_commit(c, lease), LEN);
	b = tokens_body("prefix-model", BT, tok, LEN * BT, "");
	q = query(b);
	free(b);
	CHECK_EQ(q.gpu, LEN);
	CHECK_EQ(q.tokens, LEN * BT);
	snprintf(args, sizeof(args), "--tokens %s " CTL_LAYOUT, tokfile);
	same(kvsctl(g.socket, args), q);
	kvs_close(c);
out:
	unsetenv("KVS_GPU_FAKE");
	port = main_port;
}

static void tenants_part(void)
{
	static th_daemon t;
	kvs_layout l = th_layout("prefix-model", BT);
	uint32_t tok[LEN * BT];
	kvs_hash h[LEN];
	kvs_client *w;
	char *b;
	int main_port = port;

	th_daemon_up(&t, TH_ARGS("--host-size", "16M", "--tenant-arenas", "uid",
				 "--metrics-addr", "127.0.0.1:0"));
	port = (int)th_stat_get(&t, "server.metrics_port");
	w = th_connect(&t, &l);
	th_tokens(tok, LEN * BT, 77);
	CHECK_RC(kvs_hash_tokens(w, tok, LEN * BT, h, LEN), LEN);
	CHECK_RC(th_publish(w, h, LEN, NULL), LEN);
	CHECK_RC(kvs_query(w, h, LEN, 0), LEN); /* the tenant's own count */
	b = tokens_body("prefix-model", BT, tok, LEN * BT, "");
	CHECK_EQ(query(b).tokens, 0);
	free(b);
	kvs_close(w);
	port = main_port;
}

int main(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", "--eviction-policy", "leaf-lru",
				      "--metrics-addr",
				      "127.0.0.1:0", NULL };
	uint32_t tok[LEN * BT + 5];
	kvs_hash h[LEN];
	kvs_layout l;
	kvs_client *w;
	int64_t asked;

	th_init("test_prefix_query");
	if (!getenv("KVSCTL") || access(getenv("KVSCTL"), X_OK) != 0)
		th_skip("$KVSCTL is not set to the built kvsctl (ctest sets it)");
	th_daemon_up_ssd(&d, args, ssd_dir, sizeof(ssd_dir));
	port = (int)th_stat_get(&d, "server.metrics_port");
	if (!CHECK_GT(port, 0))
		return th_finish();
	l = th_layout("prefix-model", BT);
	w = th_connect(&d, &l);
	th_tokens(tok, LEN * BT + 5, 77);
	CHECK_RC(kvs_hash_tokens(w, tok, LEN * BT, h, LEN), LEN);
	CHECK_RC(th_publish(w, h, LEN, NULL), LEN);
	snprintf(tokfile, sizeof(tokfile), "%s/tokens", d.dir);
	snprintf(hashfile, sizeof(hashfile), "%s/hashes", d.dir);
	write_file(tokfile, ", ", tok, LEN * BT + 5, NULL);
	write_file(hashfile, NULL, NULL, LEN, h);

	asked = th_stat_get(&d, "blocks.query_asked");
	host_part(w, tok, h);
	CHECK_GT(th_stat_get(&d, "blocks.query_asked"), asked);
	CHECK_EQ(th_stat_get(&d, "server.prefix_queries"), 3); /* kvsctl's are INSPECTs */
	unknown_part(tok);
	ssd_part(w, &l, tok, h);
	bad_part(w, &l);
	kvs_close(w);
	gpu_part();
	tenants_part();
	return th_finish();
}
