/*
 * kvs_client_int.h - libkvshare's internals, shared by its files only: the
 * client struct (client.c, transport.c, fast.c) and what each file lends
 * the others, in one section per file: transport.c (the socket, deadlines,
 * round trips), fast.c (hits without a round trip) and client.c (one
 * request, the layout, the arenas' mappings: admin.c, paged_copy.c and
 * regions.c use only these). Hidden by the version script, not part of
 * the API.
 */
#ifndef KVS_CLIENT_INT_H
#define KVS_CLIENT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kvs_gpu.h"
#include "kvshare.h"

/* The client, for client.c, transport.c and fast.c (admin.c uses the
 * functions below only). */
#define KVS_MAX_FDS 4 /* ancillary room; at most two fds are expected */

struct kvs_client {
	int fd;             /* -1 when dead or not yet connected */
	int dead;           /* set by die(); cleared by a successful attach */
	uint64_t next_id;   /* req_id of the last request sent */
	char *path;         /* socket path, owned */
	int has_layout;
	kvs_layout layout;  /* deep copy: strings below are owned */
	char *model, *adapter, *salt;
	kvs_hash seed;      /* h_{-1} of the layout, computed once */
	uint32_t ns_id;
	uint64_t block_bytes;
	uint8_t *arena;     /* host arena mapping, or NULL */
	uint64_t arena_bytes;
	uint64_t arena_id;  /* HELLO's host_arena_id */
	uint32_t flags;     /* KVS_CONNECT_* */
	kvs_gpu *gpu;       /* engine of the GPU arena's kind, or NULL */
	kvs_gpu_arena *garena; /* GPU arena mapping, or NULL */
	int host_registered; /* the host mapping is page-locked for DMA */
	void *host_dev;     /* the host arena for CUDA kernels, or NULL */
	int host_dev_ours;  /* host_dev came from our own registration */
	uint8_t *buf;       /* request and reply payload scratch */
	size_t cap;
	/* Bytes received and not yet consumed: a reply is read with as few
	 * recvmsg calls as the kernel allows (header and payload together),
	 * and replies of pipelined requests may follow it. */
	uint8_t *in;
	size_t in_cap, in_head, in_tail;
	uint64_t acked_id;  /* req_id of the last reply consumed */
	uint32_t unacked;   /* kvs_release_nowait() replies still to consume */
	struct kvs_fastpath *fast; /* fast.c: index and pins, or NULL */
	uint32_t fast_gen;  /* fast lease ids handed out, across reconnects */
	uint32_t fork_gen;  /* kvs__fork_gen() when it connected (fast.c) */
	int timeout_ms;     /* each call's deadline (kvs_set_timeout) */
	int64_t deadline;   /* the call in progress: CLOCK_MONOTONIC ns by which
			     * it gives up; 0 between calls */
};

/* Release replies left unread before one is read synchronously: far below
 * what the socket buffers hold, so neither side ever blocks on the other. */
#define KVS_MAX_UNACKED 256

/* ---- transport.c ---- */

/* Close the socket and drop the fast path; the client answers
 * KVS_E_DISCONNECTED from then on. */
void kvs__kill(kvs_client *c);
/* Kill @c and return @err: a lost peer (EOF is 0) or a passed deadline
 * (-ETIMEDOUT) reads as DISCONNECTED. */
int kvs__die(kvs_client *c, int err);
/* The deadline of a call when none is set: $KVSHARE_TIMEOUT_MS when it is a
 * positive number of milliseconds, else KVS_TIMEOUT_DEFAULT_MS. */
int kvs__timeout_default(void);
/* Start the deadline of a call (now + c->timeout_ms) unless one runs
 * already (a call of several messages armed it): 1 when this armed it.
 * kvs__disarm(c, that) ends it. */
int kvs__arm(kvs_client *c);
void kvs__disarm(kvs_client *c, int armed);
/* c->buf holds at least @n bytes. -ENOMEM. */
int kvs__grow(kvs_client *c, size_t n);
/* Each of these three runs under the call's deadline (armed here when
 * none is), and past it kills @c: KVS_E_DISCONNECTED. */
/* Send request @op with the @len bytes at c->buf. */
int kvs__send(kvs_client *c, uint16_t op, size_t len);
/* Consume the replies of earlier kvs_release_nowait() calls. */
int kvs__drain(kvs_client *c);
/* One round trip of the @len bytes at c->buf; the reply payload replaces
 * them (*rlen bytes); up to two fds that come with it go to fd_out[0..1]
 * (NULL: closed). Returns 0, the daemon's status, or a local error. */
int kvs__call(kvs_client *c, uint16_t op, size_t len, uint32_t *rlen,
	      int *fd_out);
/* A connected AF_UNIX stream socket, or KVS_E_NODAEMON, KVS_E_DISCONNECTED
 * (@deadline, CLOCK_MONOTONIC ns, passed: the listener's backlog stayed
 * full), -errno. */
int kvs__sock_connect(const char *path, int64_t deadline);

/* ---- fast.c: hits without a round trip (kvs_fast.h) ---- */

/* Ask the daemon for the index and a pin area (after a successful attach);
 * a refusal leaves the fast path off. Errors: KVS_E_DISCONNECTED only. */
int kvs__fast_attach(kvs_client *c);
/* Unmap; the fast leases die (their ids answer KVS_E_NOLEASE). */
void kvs__fast_detach(kvs_client *c);
/* The forks this process has seen (a child's count is one more than its
 * parent's); the first call starts counting (pthread_atfork). */
uint32_t kvs__fork_gen(void);
/* 1 when @c was connected by the process this one forked from: then it is
 * killed here (our copy of the socket closed, the fast path unmapped,
 * nothing of the parent's written) and answers KVS_E_DISCONNECTED until
 * kvs_reconnect(). No system call. */
int kvs__forked(kvs_client *c);
/* A lookup on the fast path (arguments checked by the caller): 1 and *rc
 * set to what kvs_lookup() returns, or 0 when it must go to the socket. */
int kvs__fast_lookup(kvs_client *c, const kvs_hash *hashes, size_t n,
		     kvs_lease *lease, kvs_block *blocks, int *rc);
/* A fast lease's end: 1 and *rc set when @lease is one (or looks like one),
 * 0 for a daemon lease. @commit: COMMIT or ABORT (a read lease: LEASEKIND). */
int kvs__fast_release(kvs_client *c, kvs_lease lease, int commit, int *rc);

/* ---- client.c ---- */

/* One round trip: @len bytes of @req as the payload of @op. On success
 * *reply points at the reply payload (*rlen bytes), valid until the next call
 * on @c. Returns 0, the daemon's negative status, or a local error. */
int kvs__rpc(kvs_client *c, uint16_t op, const void *req, size_t len,
	     const uint8_t **reply, uint32_t *rlen);

/* The connection's socket, now the caller's: @c answers
 * KVS_E_DISCONNECTED from then on. */
int kvs__take_fd(kvs_client *c);

/* The client's layout; NULL for a control-only client. */
const kvs_layout *kvs__layout(const kvs_client *c);

/* The mapping of tier @tier in this process: the host arena (a host
 * address) or the GPU arena (a device address). -EINVAL when this client
 * does not map that tier, KVS_E_DISCONNECTED when it is dead. */
int kvs__tier_arena(const kvs_client *c, int tier, uint8_t **base,
		    uint64_t *bytes);

/* The host arena as CUDA kernels address it: page-locked and mapped for the
 * device on first use (through the CUDA runtime), until the client detaches.
 * -ENODEV without a device. */
int kvs__host_arena_device(kvs_client *c, uint8_t **dev);

#endif /* KVS_CLIENT_INT_H */
