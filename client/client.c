/*
 * client.c - libkvshare: the connection to kvshared, the arena mapping and the
 * request verbs (see kvshare.h for the contract, kvs_wire.h for the format).
 *
 * One AF_UNIX stream per client; each verb is one request and one reply
 * read in full before returning, within the client's deadline
 * (transport.c). Any failure that leaves the stream in an unknown state (I/O
 * error, EOF, a deadline passed, a reply we cannot frame or trust) kills the
 * client: the socket is closed at once, so the daemon drops our leases, and
 * every later call answers KVS_E_DISCONNECTED until kvs_reconnect().
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvs_client_int.h"
#include "kvs_cuda.h"
#include "kvs_gpu.h"
#include "kvs_wire.h"
#include "kvshare.h"

static int map_arena(kvs_client *c, int afd, const kvs_wire_hello_reply *r)
{
	struct stat st;
	void *p;

	if (afd < 0 || r->host_arena_bytes == 0 ||
	    r->host_arena_bytes > SIZE_MAX)
		return KVS_E_PROTO;
	/* Mapping past the file's end would turn a reader's access into SIGBUS. */
	if (fstat(afd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < r->host_arena_bytes)
		return KVS_E_PROTO;
	p = mmap(NULL, (size_t)r->host_arena_bytes, PROT_READ | PROT_WRITE,
		 MAP_SHARED, afd, 0);
	if (p == MAP_FAILED)
		return -errno;
	c->arena = p;
	c->arena_bytes = r->host_arena_bytes;
	return 0;
}

/* The GPU arena: import the fd with the engine the daemon names (CUDA VMM,
 * or the fake device of tests), reserve VA, map, set access: once per
 * attach. @gfd is the arena's from here on. The host mapping is then
 * page-locked for DMA (cuMemHostRegister) where the driver allows; a
 * refusal only costs copy bandwidth, so it is not an error. */
static int map_gpu(kvs_client *c, int gfd, const kvs_wire_hello_reply *r)
{
	int kind = (int)r->gpu_kind, rc;

	if (gfd < 0 || (kind != KVS_GPU_CUDA && kind != KVS_GPU_FAKE) ||
	    r->gpu_device > 1023) {
		if (gfd >= 0)
			close(gfd);
		return KVS_E_PROTO;
	}
	rc = kvs_gpu_open(kind, (int)r->gpu_device, &c->gpu, NULL, 0);
	if (rc < 0) {
		close(gfd);
		return rc;
	}
	rc = kvs_gpu_arena_import(c->gpu, gfd, r->gpu_arena_bytes, &c->garena);
	if (rc < 0)
		return rc == -EINVAL ? KVS_E_PROTO : rc;
	if (c->arena && kind == KVS_GPU_CUDA)
		c->host_registered =
			kvs_gpu_host_register(c->gpu, c->arena, c->arena_bytes) == 0;
	return 0;
}

static void unmap_arena(kvs_client *c)
{
	kvs__fast_detach(c);
	if (c->host_dev_ours)
		kvs_cuda_host_unregister(c->arena);
	c->host_dev = NULL;
	c->host_dev_ours = 0;
	if (c->host_registered)
		kvs_gpu_host_unregister(c->gpu, c->arena);
	c->host_registered = 0;
	kvs_gpu_arena_destroy(c->garena);
	c->garena = NULL;
	kvs_gpu_close(c->gpu);
	c->gpu = NULL;
	if (c->arena)
		munmap(c->arena, (size_t)c->arena_bytes);
	c->arena = NULL;
	c->arena_bytes = 0;
}

/* Connect, say HELLO with the saved layout, map the arena, ask for the fast
 * path: one deadline for all of it (armed by attach()). On failure the
 * client is left dead and unmapped; it may be retried. */
static int attach_armed(kvs_client *c)
{
	const kvs_layout *l = c->has_layout ? &c->layout : NULL;
	kvs_wire_hello_reply r;
	uint32_t rlen = 0;
	int afd[2] = { -1, -1 }, rc, n;

	c->fd = kvs__sock_connect(c->path, c->deadline);
	if (c->fd < 0) {
		rc = c->fd;
		c->fd = -1;
		return rc;
	}
	c->dead = 0;
	c->fork_gen = kvs__fork_gen(); /* a child of ours must reconnect */
	c->in_head = c->in_tail = 0;
	c->next_id = c->acked_id = 0;
	c->unacked = 0;
	rc = kvs__grow(c, 64 + 3 * KVS_NAME_MAX);
	if (rc < 0)
		return kvs__die(c, rc);
	n = kvs_wire_hello_encode_flags(l, l && (c->flags & KVS_CONNECT_GPU)
					    ? KVS_HELLO_GPU : 0, c->buf, c->cap);
	if (n < 0)
		return kvs__die(c, KVS_E_LAYOUT);
	rc = kvs__call(c, KVS_OP_HELLO, (size_t)n, &rlen, afd);
	if (rc == 0 && kvs_wire_hello_reply_decode(c->buf, rlen, &r) < 0)
		rc = KVS_E_PROTO;
	/* A second arena only when we asked for it. */
	if (rc == 0 && r.arena_count == 2 && !(c->flags & KVS_CONNECT_GPU))
		rc = KVS_E_PROTO;
	/* Blocks are sized by the layout on both sides; a disagreement means
	 * the two would read each other's KV with different shapes. */
	if (rc == 0 && l && r.block_bytes != kvs_layout_block_bytes(l))
		rc = KVS_E_PROTO;
	if (rc == 0 && r.arena_count >= 1)
		rc = map_arena(c, afd[0], &r);
	if (rc == 0 && r.arena_count == 2) {
		rc = map_gpu(c, afd[1], &r);
		afd[1] = -1; /* the GPU arena's now */
	}
	if (afd[0] >= 0)
		close(afd[0]);
	if (afd[1] >= 0)
		close(afd[1]);
	if (rc < 0) {
		unmap_arena(c);
		return kvs__die(c, rc);
	}
	c->ns_id = r.ns_id;
	c->block_bytes = l ? r.block_bytes : 0;
	c->arena_id = r.host_arena_id;
	rc = kvs__fast_attach(c);
	if (rc < 0)
		unmap_arena(c); /* the connection is gone */
	return rc;
}

static int attach(kvs_client *c)
{
	int armed = kvs__arm(c), rc = attach_armed(c);

	kvs__disarm(c, armed);
	return rc;
}

static int dup_name(const char *s, char **out)
{
	*out = NULL;
	if (!s)
		return 0;
	if (strlen(s) > KVS_NAME_MAX)
		return KVS_E_LAYOUT;
	*out = strdup(s);
	return *out ? 0 : -ENOMEM;
}

static void free_client(kvs_client *c)
{
	unmap_arena(c);
	if (c->fd >= 0)
		close(c->fd);
	free(c->path);
	free(c->model);
	free(c->adapter);
	free(c->salt);
	free(c->buf);
	free(c->in);
	free(c);
}

int kvs_connect(const char *socket_path, const kvs_layout *layout,
		kvs_client **out)
{
	return kvs_connect_flags(socket_path, layout, 0, out);
}

int kvs_connect_flags(const char *socket_path, const kvs_layout *layout,
		      uint32_t flags, kvs_client **out)
{
	return kvs_connect_timeout(socket_path, layout, flags, 0, out);
}

int kvs_connect_timeout(const char *socket_path, const kvs_layout *layout,
			uint32_t flags, int timeout_ms, kvs_client **out)
{
	char def[sizeof(((struct sockaddr_un *)0)->sun_path)];
	kvs_client *c;
	int rc;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (timeout_ms < 0)
		return -EINVAL;
	if (!socket_path) {
		rc = kvs_default_socket_path(def, sizeof(def));
		if (rc < 0)
			return rc;
		socket_path = def;
	}
	if (layout && (!layout->model || !layout->model[0] ||
		       kvs_layout_block_bytes(layout) == 0))
		return KVS_E_LAYOUT;
	if (flags & ~(KVS_CONNECT_GPU | KVS_CONNECT_NO_FASTPATH))
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = -1;
	c->flags = flags;
	kvs_set_timeout(c, timeout_ms);
	c->path = strdup(socket_path);
	rc = c->path ? 0 : -ENOMEM;
	if (rc == 0 && layout) {
		c->has_layout = 1;
		c->layout = *layout;
		rc = dup_name(layout->model, &c->model);
		if (rc == 0)
			rc = dup_name(layout->adapter, &c->adapter);
		if (rc == 0)
			rc = dup_name(layout->salt, &c->salt);
		c->layout.model = c->model;
		c->layout.adapter = c->adapter;
		c->layout.salt = c->salt;
		c->seed = kvs_hash_layout_seed(&c->layout);
	}
	if (rc == 0)
		rc = attach(c);
	if (rc < 0) {
		free_client(c);
		return rc;
	}
	*out = c;
	return 0;
}

int kvs_reconnect(kvs_client *c)
{
	if (!c)
		return -EINVAL;
	kvs__kill(c);
	unmap_arena(c);
	c->ns_id = 0;
	return attach(c);
}

int kvs_set_timeout(kvs_client *c, int timeout_ms)
{
	if (!c || timeout_ms < 0)
		return -EINVAL;
	c->timeout_ms = timeout_ms ? timeout_ms : kvs__timeout_default();
	return 0;
}

void kvs_close(kvs_client *c)
{
	if (c)
		free_client(c);
}

uint64_t kvs_block_bytes(const kvs_client *c)
{
	return c ? c->block_bytes : 0;
}

uint32_t kvs_namespace_id(const kvs_client *c)
{
	return c ? c->ns_id : 0;
}

int kvs_hash_tokens(const kvs_client *c, const uint32_t *tokens,
		    size_t ntokens, kvs_hash *out, size_t max)
{
	if (!c)
		return -EINVAL;
	if (!c->has_layout)
		return KVS_E_NOTATTACHED;
	if ((!tokens && ntokens) || (!out && max))
		return -EINVAL;
	if (max > INT_MAX)
		max = INT_MAX;
	return (int)kvs_hash_chain(c->seed, c->layout.block_tokens, tokens,
				   ntokens, out, max);
}

/* The checks every hashes request shares: 1 to send it, 0 or an error
 * to answer at once. */
static int hashes_ok(const kvs_client *c, size_t n)
{
	if (c->dead)
		return KVS_E_DISCONNECTED;
	if (!c->has_layout)
		return KVS_E_NOTATTACHED;
	if (n > KVS_MAX_HASHES)
		return KVS_E_TOOMANY;
	return n > 0;
}

/* Send @op with @hashes[@n] and @flags; the reply's length in *@rlen. */
static int hashes_call(kvs_client *c, uint16_t op, const kvs_hash *hashes,
		       size_t n, uint32_t flags, uint32_t *rlen)
{
	int rc = kvs__grow(c, 8 + n * KVS_WIRE_HASH_SIZE);

	if (rc < 0)
		return rc;
	rc = kvs_wire_hashes_encode(hashes, (uint32_t)n, flags, c->buf, c->cap);
	if (rc < 0)
		return rc;
	return kvs__call(c, op, (size_t)rc, rlen, NULL);
}

/* LOOKUP and RESERVE: same request, same reply shape. */
static int hashes_rpc(kvs_client *c, uint16_t op, const kvs_hash *hashes,
		      size_t n, uint32_t flags, kvs_lease *lease,
		      kvs_block *blocks)
{
	kvs_wire_blocks wb;
	uint32_t rlen;
	int rc;

	if (!c || !lease || (n && (!hashes || !blocks)))
		return -EINVAL;
	*lease = 0;
	if ((rc = hashes_ok(c, n)) <= 0)
		return rc;
	if (op == KVS_OP_LOOKUP && kvs__fast_lookup(c, hashes, n, lease, blocks, &rc))
		return rc;
	if ((rc = hashes_call(c, op, hashes, n, flags, &rlen)) < 0)
		return rc;
	if (kvs_wire_blocks_decode(c->buf, rlen, &wb) < 0)
		return kvs__die(c, KVS_E_PROTO);
	/* A lookup answers the hits (a prefix), a reserve every block. */
	if (op == KVS_OP_LOOKUP ? wb.count > n : wb.count != n)
		return kvs__die(c, KVS_E_PROTO);
	for (uint32_t i = 0; i < wb.count; i++)
		blocks[i] = kvs_wire_block_at(wb.blocks, i);
	*lease = wb.lease;
	return (int)wb.count;
}

int kvs_lookup(kvs_client *c, const kvs_hash *hashes, size_t n,
	       kvs_lease *lease, kvs_block *blocks)
{
	return hashes_rpc(c, KVS_OP_LOOKUP, hashes, n, 0, lease, blocks);
}

int kvs_query(kvs_client *c, const kvs_hash *hashes, size_t n, unsigned flags)
{
	uint32_t wflags = KVS_LOOKUP_QUERY, rlen;
	uint64_t count;
	int rc;

	if (!c || (n && !hashes) || (flags & ~KVS_QUERY_REMOTE))
		return -EINVAL;
	if ((rc = hashes_ok(c, n)) <= 0)
		return rc;
	if (flags & KVS_QUERY_REMOTE)
		wflags |= KVS_LOOKUP_REMOTE;
	if ((rc = hashes_call(c, KVS_OP_LOOKUP, hashes, n, wflags, &rlen)) < 0)
		return rc;
	if (kvs_wire_u64_decode(c->buf, rlen, &count) < 0 || count > n)
		return kvs__die(c, KVS_E_PROTO);
	return (int)count;
}

static int reserve_flags(kvs_client *c, const kvs_hash *hashes, size_t n,
			 uint32_t flags, kvs_lease *lease, kvs_block *blocks)
{
	int rc = hashes_rpc(c, KVS_OP_RESERVE, hashes, n, flags, lease, blocks);
	int fresh = 0;

	if (rc < 0)
		return rc;
	for (int i = 0; i < rc; i++)
		fresh += blocks[i].status == KVS_BLOCK_NEW;
	return fresh;
}

int kvs_reserve(kvs_client *c, const kvs_hash *hashes, size_t n,
		kvs_lease *lease, kvs_block *blocks)
{
	return reserve_flags(c, hashes, n, 0, lease, blocks);
}

int kvs_reserve_after(kvs_client *c, const kvs_hash *hashes, size_t n,
		      kvs_lease *lease, kvs_block *blocks)
{
	if (n == 0 && lease)
		*lease = 0;
	return n ? reserve_flags(c, hashes, n, KVS_RESERVE_AFTER, lease, blocks)
		 : -EINVAL;
}

/* COMMIT, ABORT, RELEASE: a lease in, a count out. Lease 0 is the "no lease"
 * that lookup and reserve hand out when nothing was pinned or reserved:
 * ending it is a no-op, so callers need not special-case it. */
static int lease_rpc(kvs_client *c, uint16_t op, kvs_lease lease)
{
	uint64_t count;
	uint32_t rlen;
	int rc;

	if (!c)
		return -EINVAL;
	if (c->dead)
		return KVS_E_DISCONNECTED;
	if (lease == 0)
		return 0;
	if (kvs__fast_release(c, lease, op != KVS_OP_RELEASE, &rc))
		return rc;
	rc = kvs__grow(c, 8);
	if (rc < 0)
		return rc;
	kvs_wire_u64_encode(lease, c->buf, c->cap);
	rc = kvs__call(c, op, 8, &rlen, NULL);
	if (rc < 0)
		return rc;
	if (kvs_wire_u64_decode(c->buf, rlen, &count) < 0 || count > INT_MAX)
		return kvs__die(c, KVS_E_PROTO);
	return (int)count;
}

int kvs_commit(kvs_client *c, kvs_lease lease)
{
	return lease_rpc(c, KVS_OP_COMMIT, lease);
}

int kvs_abort(kvs_client *c, kvs_lease lease)
{
	return lease_rpc(c, KVS_OP_ABORT, lease);
}

int kvs_release(kvs_client *c, kvs_lease lease)
{
	int rc = lease_rpc(c, KVS_OP_RELEASE, lease);

	return rc < 0 ? rc : 0;
}

int kvs_release_nowait(kvs_client *c, kvs_lease lease)
{
	int rc, armed;

	if (!c)
		return -EINVAL;
	if (c->dead)
		return KVS_E_DISCONNECTED;
	if (lease == 0)
		return 0;
	if (kvs__fast_release(c, lease, 0, &rc))
		return 0; /* as for a daemon lease: errors are not reported */
	armed = kvs__arm(c); /* one deadline for the drain and the send */
	rc = c->unacked >= KVS_MAX_UNACKED ? kvs__drain(c) : 0;
	if (rc == 0)
		rc = kvs__grow(c, 8);
	if (rc == 0) {
		kvs_wire_u64_encode(lease, c->buf, c->cap);
		rc = kvs__send(c, KVS_OP_RELEASE, 8);
	}
	kvs__disarm(c, armed);
	if (rc < 0)
		return rc;
	c->unacked++;
	return 0;
}

/* 0 if @b names a whole block inside the mapped arena of its tier (host,
 * or GPU when this client maps the GPU arena). */
static int check_block(const kvs_client *c, const kvs_block *b)
{
	uint64_t bytes;

	if (!c || !b || c->block_bytes == 0)
		return -EINVAL;
	if (b->tier == KVS_TIER_HOST && c->arena)
		bytes = c->arena_bytes;
	else if (b->tier == KVS_TIER_GPU && c->garena)
		bytes = kvs_gpu_arena_bytes(c->garena);
	else
		return -EINVAL;
	if (b->offset > bytes || c->block_bytes > bytes - b->offset)
		return -ERANGE;
	return 0;
}

void *kvs_block_ptr(const kvs_client *c, const kvs_block *b)
{
	if (!c || c->dead || check_block(c, b) < 0)
		return NULL;
	if (b->tier == KVS_TIER_GPU)
		return (void *)(uintptr_t)(kvs_gpu_arena_base(c->garena) + b->offset);
	return c->arena + b->offset;
}

static int block_check_len(const kvs_client *c, const kvs_block *b, size_t len)
{
	int rc;

	if (c && c->dead)
		return KVS_E_DISCONNECTED;
	rc = check_block(c, b);
	if (rc < 0)
		return rc;
	return len > c->block_bytes ? -EINVAL : 0;
}

/* GPU-tier blocks are copied by the engine (cuMemcpy for CUDA: the
 * pointer is a device pointer), host-tier blocks by memcpy. */
int kvs_block_read(const kvs_client *c, const kvs_block *b, void *dst,
		   size_t len)
{
	int rc = block_check_len(c, b, len);

	if (rc == 0 && len && !dst)
		rc = -EINVAL;
	if (rc < 0 || len == 0)
		return rc;
	if (b->tier == KVS_TIER_GPU)
		return kvs_gpu_copy_to_host(c->garena, b->offset, dst, len);
	memcpy(dst, c->arena + b->offset, len);
	return 0;
}

int kvs_block_write(kvs_client *c, const kvs_block *b, const void *src,
		    size_t len)
{
	int rc = block_check_len(c, b, len);

	/* Only a reserved slot is ours to fill; a committed block is immutable. */
	if (rc == 0 && ((len && !src) || b->status != KVS_BLOCK_NEW))
		rc = -EINVAL;
	if (rc < 0 || len == 0)
		return rc;
	if (b->tier == KVS_TIER_GPU)
		return kvs_gpu_copy_from_host(c->garena, b->offset, src, len);
	memcpy(c->arena + b->offset, src, len);
	return 0;
}

int kvs_gpu_info(const kvs_client *c, void **base, uint64_t *bytes,
		 int *device)
{
	if (!c)
		return -EINVAL;
	if (c->dead)
		return KVS_E_DISCONNECTED;
	if (!c->garena)
		return 0;
	if (base)
		*base = (void *)(uintptr_t)kvs_gpu_arena_base(c->garena);
	if (bytes)
		*bytes = kvs_gpu_arena_bytes(c->garena);
	if (device)
		*device = kvs_gpu_device(c->gpu);
	return kvs_gpu_kind(c->gpu);
}

int kvs_stats(kvs_client *c, char **text)
{
	uint32_t rlen;
	char *s;
	int rc;

	if (!c || !text)
		return -EINVAL;
	*text = NULL;
	rc = kvs__call(c, KVS_OP_STATS, 0, &rlen, NULL);
	if (rc < 0)
		return rc;
	s = malloc((size_t)rlen + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, c->buf, rlen);
	s[rlen] = '\0';
	*text = s;
	return 0;
}

int kvs_stats_value(const char *text, const char *name, int64_t *value)
{
	size_t nl;

	if (!text || !name || !value || !name[0])
		return -EINVAL;
	nl = strlen(name);
	for (const char *p = text; *p; ) {
		const char *eol = strchr(p, '\n');

		if (!eol)
			eol = p + strlen(p);
		if ((size_t)(eol - p) > nl && !strncmp(p, name, nl) &&
		    (p[nl] == ' ' || p[nl] == '\t')) {
			char *end;
			long long v;

			errno = 0;
			v = strtoll(p + nl + 1, &end, 10);
			if (errno || end == p + nl + 1 || end > eol)
				return -EINVAL;
			*value = v;
			return 0;
		}
		p = *eol ? eol + 1 : eol;
	}
	return -ENOENT;
}

/* ---- internal: for admin.c (kvs_client_int.h); not exported ---------- */

int kvs__rpc(kvs_client *c, uint16_t op, const void *req, size_t len,
	     const uint8_t **reply, uint32_t *rlen)
{
	int rc;

	if (!c)
		return -EINVAL;
	if ((rc = kvs__grow(c, len)) < 0)
		return rc;
	if (len)
		memcpy(c->buf, req, len);
	rc = kvs__call(c, op, len, rlen, NULL);
	*reply = c->buf;
	return rc;
}

int kvs__take_fd(kvs_client *c)
{
	int fd = c->fd;

	c->fd = -1;
	c->dead = 1;
	return fd;
}

const kvs_layout *kvs__layout(const kvs_client *c)
{
	return c && c->has_layout ? &c->layout : NULL;
}

int kvs__tier_arena(const kvs_client *c, int tier, uint8_t **base,
		    uint64_t *bytes)
{
	if (c->dead)
		return KVS_E_DISCONNECTED;
	if (tier == KVS_TIER_HOST && c->arena) {
		*base = c->arena;
		*bytes = c->arena_bytes;
	} else if (tier == KVS_TIER_GPU && c->garena) {
		*base = (uint8_t *)(uintptr_t)kvs_gpu_arena_base(c->garena);
		*bytes = kvs_gpu_arena_bytes(c->garena);
	} else {
		return -EINVAL;
	}
	return 0;
}

int kvs__host_arena_device(kvs_client *c, uint8_t **dev)
{
	int rc;

	if (c->dead)
		return KVS_E_DISCONNECTED;
	if (!c->arena)
		return -EINVAL;
	if (!c->host_dev) {
		rc = kvs_cuda_host_register(c->arena, (size_t)c->arena_bytes,
					    &c->host_dev);
		if (rc < 0)
			return rc;
		c->host_dev_ours = rc == 0;
	}
	*dev = c->host_dev;
	return 0;
}
