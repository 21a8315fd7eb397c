/* remote_nodes.c - the remote engine's nodes (host:port, resolved once)
 * and its slot map (see kvs_remote.h, remote_int.h). */
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

static int resolve(struct node *n)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)&n->addr;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&n->addr;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	int rc;

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
	rc = getaddrinfo(n->host, NULL, &hints, &res);
	if (rc != 0)
		return -EHOSTUNREACH;
	memcpy(&n->addr, res->ai_addr, res->ai_addrlen);
	n->alen = res->ai_addrlen;
	if (res->ai_family == AF_INET)
		a4->sin_port = htons(n->port);
	else
		a6->sin6_port = htons(n->port);
	freeaddrinfo(res);
	return 1;
}

int kvs_rmt_node_find(kvs_remote *r, const char *host, uint16_t port)
{
	struct node *n;

	for (int i = 0; i < r->nnodes; i++)
		if (r->nodes[i]->port == port && !strcmp(r->nodes[i]->host, host))
			return i;
	if (r->nnodes == INT16_MAX)
		return -ENOSPC;
	if (r->nnodes == r->cap_nodes) {
		int cap = r->cap_nodes ? r->cap_nodes * 2 : 8;
		struct node **v = realloc(r->nodes, (size_t)cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		r->nodes = v;
		r->cap_nodes = cap;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->idx = r->nnodes;
	snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	n->resolved = resolve(n);
	r->nodes[r->nnodes++] = n;
	r->st.nodes = (uint64_t)r->nnodes;
	return n->idx;
}

/* Take the ranges of a CLUSTER SLOTS reply from @from (a node index, for
 * ranges whose host is empty) as the whole map. */
int kvs_rmt_map_apply(kvs_remote *r, const kvs_resp_parser *p,
		     const kvs_resp_val *v, int from)
{
	int16_t map[KVS_SLOTS];
	size_t n;
	int rc = kvs_slot_map_decode(p, v, r->ranges, MAX_RANGES, &n);

	if (rc < 0)
		return rc;
	for (int i = 0; i < KVS_SLOTS; i++)
		map[i] = -1;
	for (size_t i = 0; i < n; i++) {
		const kvs_slot_range *g = &r->ranges[i];
		const char *host = g->host;
		int idx;

		if (!*host || !strcmp(host, "?"))
			host = r->nodes[from]->host;
		idx = kvs_rmt_node_find(r, host, g->port);
		if (idx < 0)
			return idx;
		for (unsigned s = g->first; s <= g->last; s++)
			map[s] = (int16_t)idx;
	}
	for (int i = 0; i < r->nnodes; i++)
		r->nodes[i]->in_map = 0;
	for (int i = 0; i < KVS_SLOTS; i++)
		if (map[i] >= 0)
			r->nodes[map[i]]->in_map = 1;
	if (memcmp(r->map, map, sizeof(map)) != 0) {
		memcpy(r->map, map, sizeof(map));
		if (r->open && r->ev_fn)
			r->ev_fn(r->ev_arg, KVS_REMOTE_EV_MAP, r->nodes[from]->host,
				 r->nodes[from]->port, 0);
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


