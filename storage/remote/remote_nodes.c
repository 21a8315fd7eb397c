/* remote_nodes.c - the remote engine's nodes (host:port, by hash, capped,
 * forgotten when no range names them) and its slot map (see kvs_remote.h, remote_int.h). */
#include "remote_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- nodes -------------------------------------------------------------- */

/* Split "HOST:PORT" (or "[V6]:PORT") of @s[@n]. */
int kvs_rmt_parse_hostport(const char *s, size_t n, char *host, uint16_t *port)
{
	const char *colon = NULL, *h = s;
	size_t hlen;
	char num[8];
	char *end;
	long p;

	for (size_t i = n; i > 0; i--)
		if (s[i - 1] == ':') {
			colon = s + i - 1;
			break;
		}
	if (!colon)
		return -EINVAL;
	hlen = (size_t)(colon - s);
	if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	if (hlen == 0 || hlen >= KVS_SLOT_HOST_MAX ||
	    (size_t)(s + n - colon - 1) >= sizeof(num) || colon + 1 == s + n)
		return -EINVAL;
	memcpy(num, colon + 1, (size_t)(s + n - colon - 1));
	num[s + n - colon - 1] = '\0';
	p = strtol(num, &end, 10);
	if (*end || p < 1 || p > 65535)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	*port = (uint16_t)p;
	return 0;
}

/* Numeric addresses need no resolver: 1 when @n's host is one. */
static int resolve_numeric(struct node *n)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)&n->addr;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&n->addr;

	memset(&n->addr, 0, sizeof(n->addr));
	if (inet_pton(AF_INET, n->host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons(n->port);
		n->alen = sizeof(*a4);
		return 1;
	}
	if (inet_pton(AF_INET6, n->host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(n->port);
		n->alen = sizeof(*a6);
		return 1;
	}
	return 0;
}

void kvs_rmt_addr_set(struct node *n, const struct sockaddr *a, socklen_t len)
{
	memcpy(&n->addr, a, len);
	n->alen = len;
	if (a->sa_family == AF_INET)
		((struct sockaddr_in *)&n->addr)->sin_port = htons(n->port);
	else
		((struct sockaddr_in6 *)&n->addr)->sin6_port = htons(n->port);
}

int kvs_rmt_resolve_sync(struct node *n)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;

	if (resolve_numeric(n))
		return 1;
	if (getaddrinfo(n->host, NULL, &hints, &res) != 0)
		return -EHOSTUNREACH;
	kvs_rmt_addr_set(n, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 1;
}

static unsigned node_hash(const char *host, uint16_t port)
{
	uint32_t h = 2166136261u ^ port;

	for (const char *c = host; *c; c++)
		h = (h ^ (uint8_t)*c) * 16777619u;
	return h & (NODE_HASH - 1);
}

int kvs_rmt_node_find(kvs_remote *r, const char *host, uint16_t port)
{
	unsigned b = node_hash(host, port);
	struct node *n;
	int idx;

	for (idx = r->hash[b]; idx >= 0; idx = r->nodes[idx]->hnext)
		if (r->nodes[idx]->port == port && !strcmp(r->nodes[idx]->host, host))
			return idx;
	if (r->nlive == KVS_REMOTE_NODES_MAX)
		return -ENOSPC;
	for (idx = 0; r->nodes[idx]; idx++)
		; /* a free slot exists: nlive < KVS_REMOTE_NODES_MAX */
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->idx = idx;
	n->gen = ++r->node_gen;
	snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	n->resolved = resolve_numeric(n);
	n->named = !n->resolved;
	n->hnext = r->hash[b];
	r->hash[b] = idx;
	r->nodes[idx] = n;
	r->nlive++;
	if (idx >= r->nnodes)
		r->nnodes = idx + 1;
	r->st.nodes = (uint64_t)r->nlive;
	return idx;
}

/* Forget @n (no connection left): out of the table and its bucket. */
void kvs_rmt_node_free(kvs_remote *r, struct node *n)
{
	int32_t *pp = &r->hash[node_hash(n->host, n->port)];

	while (*pp != n->idx)
		pp = &r->nodes[*pp]->hnext;
	*pp = n->hnext;
	if (n->is_down)
		r->st.nodes_down--;
	r->nodes[n->idx] = NULL;
	while (r->nnodes > 0 && !r->nodes[r->nnodes - 1])
		r->nnodes--;
	r->nlive--;
	r->st.nodes = (uint64_t)r->nlive;
	free(n);
}

/* A node no range names any more: its idle connections are closed and,
 * once it has none, it is forgotten (so that a map that moves to new hosts
 * cannot fill the table). Kept: seeds, nodes with requests on the wire or
 * waiting to ASK them. */
static void nodes_collect(kvs_remote *r)
{
	uint8_t named[KVS_REMOTE_NODES_MAX] = { 0 };

	for (int s = 0; s < KVS_SLOTS; s++)
		if (r->map[s] >= 0)
			named[r->map[s]] = 1;
	for (struct req *q = r->wait.head; q; q = q->next)
		if (q->ask_node >= 0)
			named[q->ask_node] = 1;
	for (int i = 0; i < r->nnodes; i++) {
		struct node *n = r->nodes[i];

		if (!n || n->seed || named[i])
			continue;
		for (int j = n->nconns - 1; j >= 0; j--) {
			struct conn *c = n->conns[j];

			if (c->q.n == 0)
				kvs_rmt_conn_close(r, c);
		}
		if (n->nconns == 0) {
			kvs_rmt_node_free(r, n);
			r->st.nodes_freed++;
		}
	}
}

/* A map refused: counted, logged once per 10 s; the last map stays. */
static int map_refused(kvs_remote *r, int from, int err)
{
	uint64_t now = now_us();

	r->st.maps_refused++;
	if (!r->map_refused_us || now - r->map_refused_us >= PROTO_LOG_GAP_US) {
		r->map_refused_us = now;
		kvs_rmt_event(r, KVS_REMOTE_EV_MAP_REFUSED, r->nodes[from], err);
	}
	return err;
}

/* Take the ranges of a CLUSTER SLOTS reply from @from (a node index, for
 * ranges whose host is empty) as the whole map. */
int kvs_rmt_map_apply(kvs_remote *r, const kvs_resp_parser *p,
		     const kvs_resp_val *v, int from)
{
	int16_t map[KVS_SLOTS];
	uint64_t gen0 = r->node_gen;
	size_t n;
	int rc = kvs_slot_map_decode(p, v, r->ranges, MAX_RANGES, &n);

	if (rc < 0)
		return map_refused(r, from, rc == -ENOSPC ? -ENOSPC : -EPROTO);
	for (int i = 0; i < KVS_SLOTS; i++)
		map[i] = -1;
	for (size_t i = 0; i < n; i++) {
		const kvs_slot_range *g = &r->ranges[i];
		const char *host = g->host;
		int idx;

		if (!*host || !strcmp(host, "?"))
			host = r->nodes[from]->host;
		idx = kvs_rmt_node_find(r, host, g->port);
		if (idx < 0) {
			/* Too many nodes: the ones this map made go again
			 * (none has a connection yet). */
			for (int k = 0; k < r->nnodes; k++)
				if (r->nodes[k] && r->nodes[k]->gen > gen0)
					kvs_rmt_node_free(r, r->nodes[k]);
			return map_refused(r, from, idx);
		}
		for (unsigned s = g->first; s <= g->last; s++)
			map[s] = (int16_t)idx;
	}
	for (int i = 0; i < r->nnodes; i++)
		if (r->nodes[i])
			r->nodes[i]->in_map = 0;
	for (int i = 0; i < KVS_SLOTS; i++)
		if (map[i] >= 0)
			r->nodes[map[i]]->in_map = 1;
	if (memcmp(r->map, map, sizeof(map)) != 0) {
		memcpy(r->map, map, sizeof(map));
		if (r->open)
			kvs_rmt_event(r, KVS_REMOTE_EV_MAP, r->nodes[from], 0);
		nodes_collect(r);
	}
	r->cluster = 1;
	r->st.map_refreshes++;
	return 0;
}

void kvs_rmt_map_single(kvs_remote *r, int node)
{
	for (int i = 0; i < KVS_SLOTS; i++)
		r->map[i] = (int16_t)node;
	r->nodes[node]->in_map = 1;
	r->cluster = 0;
}



void kvs_rmt_host_print(const char *host, char *out, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (const uint8_t *c = (const uint8_t *)host; *c && o + 5 <= cap; c++) {
		if (*c > ' ' && *c <= '~' && *c != '\\') {
			out[o++] = (char)*c;
		} else {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[*c >> 4];
			out[o++] = hex[*c & 15];
		}
	}
	if (cap)
		out[o < cap ? o : cap - 1] = '\0';
}

void kvs_rmt_event(kvs_remote *r, int ev, const struct node *n, int err)
{
	char host[4 * KVS_SLOT_HOST_MAX];

	if (!r->ev_fn)
		return;
	kvs_rmt_host_print(n->host, host, sizeof(host));
	r->ev_fn(r->ev_arg, ev, host, n->port, err);
}
