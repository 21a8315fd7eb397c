/*
 * kvshare.h - the client library of kvshare, a KV-cache service for LLM workers
 * on one machine.
 *
 * A worker attaches to the daemon (kvshared) over a Unix socket with the layout
 * of its KV cache, maps the daemon's host arena (a memfd handed over at attach),
 * and then moves block contents itself: the socket carries only metadata.
 *
 *   kvs_client *c;
 *   kvs_connect(NULL, &layout, &c);              // NULL: the default socket
 *   n = kvs_hash_tokens(c, tokens, ntok, hashes, max);
 *   hits = kvs_lookup(c, hashes, n, &lease, blocks);   // pins the hits
 *   ... copy kvs_block_ptr(c, &blocks[i]) into the model's KV cache ...
 *   kvs_release(c, lease);
 *   new = kvs_reserve(c, hashes, n, &wlease, blocks);  // slots for the misses
 *   ... write KV of blocks[i] with status KVS_BLOCK_NEW ...
 *   kvs_commit(c, wlease);                        // publish atomically
 *
 * Caveats
 *  - An arena is a trust domain: every client that maps it can read and write
 *    all of it. Namespaces separate layouts and salts, not adversaries.
 *  - A committed block is immutable: never write through a pointer obtained
 *    from kvs_lookup(), only into blocks of status KVS_BLOCK_NEW before commit.
 *  - A pointer from kvs_block_ptr() is valid only while its lease is held;
 *    after release the slot may be reused for another block at any time.
 *  - Leases die with the connection: if the process exits or the daemon goes
 *    away, every pin is dropped and every uncommitted slot is freed.
 *  - fork(): a client belongs to the process that connected it. In a child,
 *    every call on a client inherited from the parent that would use the
 *    connection or the fast path returns KVS_E_DISCONNECTED (the child's copy
 *    of the socket is closed, nothing the parent shares is written), until
 *    kvs_reconnect() gives the child a connection of its own; blocks and
 *    leases from before are the parent's. The parent's client is unaffected.
 *  - No call waits forever: each has a deadline (kvs_set_timeout(), 5 s by
 *    default) that covers all of it, the connect and every message of the
 *    call included. A daemon that stops answering (stopped, stalled) is
 *    treated as one that died: the connection is closed and the call
 *    returns KVS_E_DISCONNECTED; kvs_reconnect() works once it answers.
 *  - Reserve always takes the whole hash chain from block 0 (as returned by
 *    kvs_hash_tokens()): the daemon links each block to its parent, and
 *    blocks that already exist are reported, not rewritten. A chain longer
 *    than the host tier is published in windows (see kvs_reserve()): the
 *    uncommitted slots of one reserve are pinned and cannot move to SSD.
 *    kvs_reserve_after() goes on from a parent that is already cached.
 *
 * Errors: every function returns 0 (or a count) on success and a negative
 * number on failure: -errno for system errors, KVS_E_* for kvshare's own.
 * kvs_strerror() (kvs_types.h) names both. Nothing here sets errno, exits or aborts.
 *
 * Thread: a kvs_client is not thread-safe; use one per thread, or lock.
 */
#ifndef KVSHARE_H
#define KVSHARE_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_types.h" /* the vocabulary: errors, hashes, layouts, blocks */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_client kvs_client;

/* The layout, the block and its status, the lease, the request's limit and
 * the functions of no connection (the default socket path, sizes, hashing)
 * are the vocabulary this library shares with the daemon: kvs_types.h. */

/*
 * kvs_connect - connect to the daemon and attach with a layout.
 * @socket_path: the daemon's socket, or NULL for kvs_default_socket_path().
 * @layout: the worker's KV layout, or NULL for a control-only connection
 *          (stats and operator commands; no arena is mapped).
 * @out: the new client.
 * Errors: KVS_E_NODAEMON (nothing listening), KVS_E_LAYOUT, KVS_E_VERSION,
 *         KVS_E_PROTO (also: the daemon's block size disagrees with the
 *         layout's), KVS_E_PERM (the daemon's --allow-uid/--allow-gid lists
 *         do not name this process), KVS_E_LIMIT (the daemon serves
 *         --max-clients connections already), -EACCES (the socket's mode
 *         does not let this process connect), KVS_E_DISCONNECTED (no
 *         answer within the default deadline: kvs_connect_timeout()),
 *         -ENOMEM, other -errno from socket/mmap.
 * Any failure that leaves the connection in an unknown state (I/O error, a
 * reply out of order, a deadline passed) closes it, so the daemon drops its
 * leases at once; every later call returns KVS_E_DISCONNECTED until
 * kvs_reconnect().
 * Ownership: *out belongs to the caller until kvs_close(). The layout's
 *            strings are copied.
 * Thread: any; the client then belongs to the calling thread.
 */
int kvs_connect(const char *socket_path, const kvs_layout *layout,
		kvs_client **out);

/*
 * kvs_connect_flags - kvs_connect() with options.
 * @flags: KVS_CONNECT_GPU: this worker keeps its KV on a GPU. When the
 *         daemon's GPU tier is on, the client imports and maps the GPU arena
 *         (CUDA VMM, device memory shared by file descriptor) once per attach,
 *         the host arena mapping is page-locked for DMA where the driver
 *         allows, and this client's reserves are placed in the GPU tier first
 *         (the host tier when the GPU tier has no room). Lookups then also
 *         return blocks in the GPU tier (tier KVS_TIER_GPU). When the daemon
 *         has no GPU tier, the flag changes nothing. Needs a layout.
 *         A daemon older than the GPU tier refuses the flag (KVS_E_PROTO).
 * Errors: as kvs_connect(); -EINVAL (unknown flag); -ENODEV / -EIO when the
 * GPU arena cannot be imported in this process (no driver, another device).
 * Thread: as kvs_connect().
 */
#define KVS_CONNECT_GPU 0x1u
/* KVS_CONNECT_NO_FASTPATH: every lookup goes over the socket. By default a
 * worker's lookups of host-tier blocks are answered from a shared index the
 * daemon publishes, with no system call (docs/architecture.md, "Hits without
 * a round trip"); the results are the same either way. The environment
 * variable KVS_NO_FASTPATH=1 does the same for every client of a process
 * (benchmarks, tests). GPU workers (KVS_CONNECT_GPU) always use the socket. */
#define KVS_CONNECT_NO_FASTPATH 0x2u
int kvs_connect_flags(const char *socket_path, const kvs_layout *layout,
		      uint32_t flags, kvs_client **out);

/*
 * kvs_connect_timeout - kvs_connect_flags() with the client's deadline set
 * before it connects (as kvs_set_timeout() sets it), so that the connect
 * itself is bounded by it: the connect() (which waits while the daemon's
 * listen backlog is full), the HELLO and its arena fds, the fast path's
 * attach, all within one deadline.
 * @timeout_ms: milliseconds, or 0 for the default (KVS_TIMEOUT_DEFAULT_MS,
 *              or $KVSHARE_TIMEOUT_MS when that is a positive number).
 * Errors: as kvs_connect_flags(); -EINVAL (@timeout_ms < 0);
 *         KVS_E_DISCONNECTED (the daemon accepted nothing, or did not
 *         answer the HELLO, within the deadline: stopped or stuck).
 * Ownership, Thread: as kvs_connect().
 */
#define KVS_TIMEOUT_DEFAULT_MS 5000
int kvs_connect_timeout(const char *socket_path, const kvs_layout *layout,
			uint32_t flags, int timeout_ms, kvs_client **out);

/*
 * kvs_set_timeout - the deadline of each later call of @c, and of its
 * kvs_reconnect(): a call gives up @timeout_ms after it starts, whatever
 * it waits for (room to send, a reply, a reply's fds; every message of a
 * call of several). Past it the connection is closed, exactly as when the
 * daemon dies (the daemon drops its leases when it runs again; fast-path
 * pins are dropped here), and the call returns KVS_E_DISCONNECTED. Time is
 * CLOCK_MONOTONIC; a reply already received when the deadline passes is
 * still taken. A request that timed out was sent, and a daemon that runs
 * again carries it out before it sees the connection closed: a commit
 * that returned KVS_E_DISCONNECTED so may have published its blocks (whole:
 * they were written before the commit). Calls that the daemon answers only
 * when slow work is done (kvs_verify() reads the whole SSD tier) need a
 * deadline that allows it.
 * @timeout_ms: milliseconds, or 0 for the default (KVS_TIMEOUT_DEFAULT_MS,
 *              or $KVSHARE_TIMEOUT_MS when that is a positive number).
 * Errors: -EINVAL (@c NULL, @timeout_ms < 0).
 * Thread: the client's.
 */
int kvs_set_timeout(kvs_client *c, int timeout_ms);

/*
 * kvs_gpu_info - the GPU arena this client maps, if any.
 * @base: set to the arena's start in this process: a CUDA device address
 *        (or a host address with the test-only fake device); may be NULL.
 * @bytes, @device: its size and the daemon's device ordinal; may be NULL.
 * Returns 0 when no GPU arena is mapped (the tier is off, or the client did
 * not ask), 1 for a CUDA arena, 2 for the fake device (KVS_GPU_FAKE=1 in the
 * daemon's environment, tests only).
 * Errors: -EINVAL, KVS_E_DISCONNECTED.
 * Thread: the client's.
 */
int kvs_gpu_info(const kvs_client *c, void **base, uint64_t *bytes,
		 int *device);

/*
 * kvs_reconnect - after KVS_E_DISCONNECTED, connect and attach again with the
 * same socket path and layout, mapping the (possibly new) daemon's arena.
 * Blocks and pointers from before are invalid.
 * Errors: as kvs_connect().
 * Thread: the client's.
 */
int kvs_reconnect(kvs_client *c);

/*
 * kvs_close - detach and free the client. Leases still held are dropped by
 * the daemon. @c may be NULL.
 * Thread: the client's.
 */
void kvs_close(kvs_client *c);

/*
 * kvs_block_bytes - bytes of one block of this client's namespace
 * (0 for a control-only client).
 * Thread: the client's.
 */
uint64_t kvs_block_bytes(const kvs_client *c);

/*
 * kvs_namespace_id - the daemon's id of this client's namespace (0 if none).
 * Thread: the client's.
 */
uint32_t kvs_namespace_id(const kvs_client *c);

/*
 * kvs_hash_tokens - chained hashes of the full blocks of a token array:
 * h_i = XXH3_128(h_{i-1} || tokens of block i), h_{-1} derived from the
 * namespace (layout and salt). A trailing partial block is not hashed.
 * @tokens, @ntokens: token ids.
 * @out, @max: where to write at most @max hashes.
 * Returns the number of hashes written (ntokens / block_tokens, capped at max).
 * Errors: KVS_E_NOTATTACHED for a control-only client, -EINVAL.
 * Ownership: caller's arrays. Thread: the client's.
 */
int kvs_hash_tokens(const kvs_client *c, const uint32_t *tokens,
		    size_t ntokens, kvs_hash *out, size_t max);

/*
 * kvs_lookup - find the longest cached prefix of a hash chain and pin it.
 * @hashes, @n: the chain, from block 0 (n <= KVS_MAX_HASHES). A hash names
 *          its whole prefix, so a reader that has copied blocks 0..k-1
 *          (under an earlier lease) may go on from hashes[k]: a chain
 *          longer than the host tier is read a window at a time, each
 *          window's hits pinned (and promoted from SSD) together.
 * @lease: set to the lease pinning the hits (0 when there are none).
 * @blocks: n entries; the first <return value> are filled (status HIT).
 * Returns the number of leading blocks present (0..n).
 * Errors: KVS_E_NOTATTACHED, KVS_E_TOOMANY, KVS_E_LIMIT, KVS_E_DISCONNECTED.
 * Fast path: when every hit is a committed block in the host tier, the
 * library answers from the daemon's shared index and pins in its own pin
 * area, with no system call; the lease is then the library's (its release
 * is a few stores). Anything else asks the daemon. The answer is the same
 * (see KVS_CONNECT_NO_FASTPATH); the per-client limits count socket leases,
 * and after the daemon is killed a fast lookup may still hit (the blocks
 * are intact) for up to 250 ms before KVS_E_DISCONNECTED; after it is
 * stopped, the same, then the socket's deadline (kvs_set_timeout()).
 * Ownership: caller's arrays; the lease must be released with kvs_release().
 * Thread: the client's.
 */
int kvs_lookup(kvs_client *c, const kvs_hash *hashes, size_t n,
	       kvs_lease *lease, kvs_block *blocks);

/* kvs_query flags */
#define KVS_QUERY_REMOTE 0x1u /* also ask the remote tier (EXISTS, bounded) */

/*
 * kvs_query - how many leading blocks of a hash chain are cached, without
 * pinning or moving any: the question a scheduler asks on every step (a
 * router outside the workers asks POST /v1/prefix: docs/routers.md).
 * @hashes, @n: the chain, from block 0 (n <= KVS_MAX_HASHES).
 * @flags: 0: the daemon's own tiers only (host, GPU for a client that maps
 *          it, SSD), answered at once; KVS_QUERY_REMOTE: also how far the
 *          chain goes on in the remote tier, asked with EXISTS (no bytes
 *          moved) and bounded by the daemon's --remote-query-timeout (20 ms
 *          by default, at most --remote-timeout): past it, the answer is
 *          what is known then (the local count at least), so a stopped
 *          node delays a query by that bound, never by --remote-timeout.
 * Returns the count (0..n). A later kvs_lookup() may find fewer (the
 *          blocks may be evicted, or a fetch fail, meanwhile): the count is
 *          a hint, and only a lookup's lease holds blocks.
 * Errors: -EINVAL (a NULL argument, an unknown flag), KVS_E_NOTATTACHED,
 *          KVS_E_TOOMANY, KVS_E_DISCONNECTED; KVS_E_PROTO from a daemon that
 *          predates queries (it refuses the LOOKUP flags).
 * Ownership: caller's array. Thread: the client's.
 */
int kvs_query(kvs_client *c, const kvs_hash *hashes, size_t n, unsigned flags);

/*
 * kvs_reserve - get slots to write the blocks of a chain that are missing.
 * @hashes, @n: the chain, from block 0 (the daemon links each block to its
 *          parent; kvs_reserve_after() goes on from a cached parent). To publish a chain longer than the room left,
 *          go a window at a time: reserve hashes[0..end), write every
 *          NEW block of the answer, kvs_commit(), move end on. The blocks
 *          of earlier windows answer EXISTS (or NEW again if evicted
 *          meanwhile). Once committed they may move down to the SSD tier
 *          (end of the chain first) to make room for the next window, which
 *          uncommitted slots never do: one reserve of a chain larger than
 *          the host tier gets FULL for what does not fit. A window cut short
 *          by FULL: commit it and start the next at its first FULL block.
 *          The NEW slots of one window must fit in the host tier at once.
 * @lease: set to the write lease (0 if no slot was reserved).
 * @blocks: n entries, all filled: status NEW (yours to write), EXISTS,
 *          BUSY (someone else is writing it) or FULL (no room; the rest of
 *          the chain is FULL too).
 * Returns the number of NEW blocks.
 * Errors: KVS_E_FULL when blocks were missing and not one slot could be
 *         made; KVS_E_NOTATTACHED, KVS_E_TOOMANY, KVS_E_LIMIT,
 *         KVS_E_DISCONNECTED.
 * Ownership: the lease must end with kvs_commit() or kvs_abort().
 * Thread: the client's.
 */
int kvs_reserve(kvs_client *c, const kvs_hash *hashes, size_t n,
		kvs_lease *lease, kvs_block *blocks);

/*
 * kvs_reserve_after - kvs_reserve() of a chain that goes on from a block
 * this client did not send (an engine that hands its pages in batches,
 * each with the keys before it: SGLang's HiCache).
 * @hashes, @n: hashes[0] is the parent, a block committed before (by any
 *          client, in any tier); hashes[1..n) go on from it. The parent is
 *          linked to and touched, never reserved: blocks[0] is EXISTS, and
 *          blocks[1..n) are as kvs_reserve() answers them.
 *          When the parent is not cached (never published, evicted, being
 *          written), nothing is reserved: every blocks[i] is
 *          KVS_BLOCK_NOPARENT, *@lease 0, and the call returns 0. A child is
 *          never published without its parent, so the blocks of a namespace
 *          stay a forest of whole prefixes (leaf-first eviction, the SSD and
 *          remote tiers work as for any chain). A caller that has the
 *          parent's bytes publishes it first; one that has not treats the
 *          batch as not stored.
 * @lease, @blocks: as kvs_reserve(); @blocks has n entries.
 * Returns the number of NEW blocks.
 * Errors: as kvs_reserve(); -EINVAL (@n 0: there is no parent);
 *         KVS_E_PROTO from a daemon older than the call (it refuses the
 *         RESERVE flag).
 * Ownership, Thread: as kvs_reserve().
 */
int kvs_reserve_after(kvs_client *c, const kvs_hash *hashes, size_t n,
		      kvs_lease *lease, kvs_block *blocks);

/*
 * kvs_commit - publish every block of a write lease atomically and end it.
 * Returns the number of blocks published; lease 0 (nothing was reserved) is
 * a no-op that returns 0 without asking the daemon (so for abort and release).
 * Errors: KVS_E_NOLEASE, KVS_E_NOTOWNER, KVS_E_LEASEKIND, KVS_E_DISCONNECTED,
 *         KVS_E_NOTATTACHED (a control-only client holds no leases).
 * Thread: the client's.
 */
int kvs_commit(kvs_client *c, kvs_lease lease);

/*
 * kvs_abort - free every uncommitted slot of a write lease and end it.
 * Returns the number of slots freed.
 * Errors: as kvs_commit().
 * Thread: the client's.
 */
int kvs_abort(kvs_client *c, kvs_lease lease);

/*
 * kvs_release - drop the pins of a read lease (or abort a write lease).
 * Errors: KVS_E_NOLEASE, KVS_E_NOTOWNER, KVS_E_DISCONNECTED,
 *         KVS_E_NOTATTACHED.
 * Thread: the client's.
 */
int kvs_release(kvs_client *c, kvs_lease lease);

/*
 * kvs_release_nowait - kvs_release() without waiting for the daemon's answer:
 * the request is sent and the call returns, saving a round trip per lookup.
 * The daemon drops the pins when it reads the request, which is before it
 * handles any later request of this client, so a lookup or reserve that
 * follows sees them dropped. An error (a stale or foreign lease) is not
 * reported: the daemon counts it in errors.lease, and the answer is
 * consumed by the client's next call.
 * Errors: KVS_E_DISCONNECTED, -ENOMEM, -errno from send.
 * Thread: the client's.
 */
int kvs_release_nowait(kvs_client *c, kvs_lease lease);

/*
 * kvs_block_ptr - the address of a block in this client's mapping of its
 * tier's arena, or NULL if the tier is not mapped here or the block is out
 * of the arena's bounds.
 * For a KVS_TIER_GPU block the address is a CUDA DEVICE POINTER (in this
 * process's mapping of the GPU arena): pass it to kernels or cudaMemcpy,
 * never dereference it on the CPU. For a KVS_TIER_HOST block it is a host
 * pointer.
 * Ownership: valid while the block's lease is held.
 * Thread: the client's.
 */
void *kvs_block_ptr(const kvs_client *c, const kvs_block *b);

/*
 * kvs_block_read / kvs_block_write - copy @len bytes between a block (host
 * tier, or GPU tier when the GPU arena is mapped: a synchronous device copy)
 * and a caller host buffer (len <= kvs_block_bytes()). kvs_block_write takes
 * only blocks of status KVS_BLOCK_NEW: committed blocks are immutable.
 * Errors: -EINVAL (len too large, not a host block, write to a block that is
 * not NEW), -ERANGE (out of arena), KVS_E_DISCONNECTED.
 * Thread: the client's.
 */
int kvs_block_read(const kvs_client *c, const kvs_block *b, void *dst,
		   size_t len);
int kvs_block_write(kvs_client *c, const kvs_block *b, const void *src,
		    size_t len);

/*
 * kvs_block_read_regions / kvs_block_write_regions - kvs_block_read() and
 * kvs_block_write() of many blocks at once, each block copied from or to
 * @per_block scattered regions laid end to end in it (an engine's page
 * buffers: one per page, or per layer and K/V): block i holds regions
 * i * @per_block .. (i + 1) * @per_block - 1 in that order, from its
 * byte 0. One call for a whole batch, so that a binding pays one call
 * (and, in Python, releases the GIL once) rather than one per region.
 * @blocks, @n: host-tier blocks (GPU tier too when its arena is mapped:
 *          device copies); for a write, each of status KVS_BLOCK_NEW.
 * @ptrs, @lens: n * @per_block host addresses and byte counts (the
 *          arrays must have that many entries: the library cannot see
 *          their length, a binding checks it); the regions of one block
 *          total exactly kvs_block_bytes(), so that a read never reports
 *          a block copied into a buffer too small for it and a write never
 *          publishes a block partly unwritten.
 * Errors: -EINVAL (a NULL argument, @per_block 0, the regions of a block
 *         over or under its size, a block not in a mapped tier, a write to
 *         a block that is not NEW), -ERANGE (a block outside its arena),
 *         KVS_E_DISCONNECTED, -EIO (a device copy failed). Everything is
 *         checked before anything is copied.
 * Ownership: caller's memory; nothing is kept. Thread: the client's.
 */
int kvs_block_read_regions(const kvs_client *c, const kvs_block *blocks,
			   size_t n, size_t per_block, void *const *ptrs,
			   const uint64_t *lens);
int kvs_block_write_regions(kvs_client *c, const kvs_block *blocks, size_t n,
			    size_t per_block, const void *const *ptrs,
			    const uint64_t *lens);

/*
 * kvs_stats - the daemon's counters and gauges as text, one
 * "section.name value" per line.
 * @text: set to a NUL-terminated string; free() it.
 * Errors: KVS_E_DISCONNECTED, -ENOMEM.
 * Thread: the client's.
 */
int kvs_stats(kvs_client *c, char **text);

/*
 * kvs_stats_value - find "name" in a kvs_stats() text.
 * Returns 0 and sets *value; -ENOENT (no such line), -EINVAL (NULL argument,
 * value not a number).
 * Thread: any.
 */
int kvs_stats_value(const char *text, const char *name, int64_t *value);

/*
 * Moving KV between an engine's paged cache and blocks
 *
 * Engines keep KV in their own paged layouts; a block has one canonical
 * layout whatever engine wrote it (docs/architecture.md), so two engines with
 * the same model and dtype (a CPU and a GPU worker among them) share blocks.
 * kvs_kv_store() and kvs_kv_load() convert one layer at a time, so that a
 * worker can load layer l while its model computes layer l - 1. For INT8 and
 * FP8_E4M3 namespaces they quantize on store and dequantize on load.
 *
 * A paged cache is described per layer: the tensor of one layer holds
 * num_pages pages of page_tokens tokens, each token kv_heads rows (the
 * layout's) of head_dim contiguous elements for K and for V. Where those rows
 * are is said by four strides, in elements: between K and V of one row,
 * between pages, between tokens, between heads. kvs_paged_cache_init() fills
 * them for the common layouts; any other layout whose rows are contiguous
 * sets them itself (e.g. from a tensor's strides).
 */
typedef enum kvs_paged_kind {
	/* [2][num_pages][page_tokens][kv_heads][head_dim]: vLLM's CUDA
	 * flash-attention layout (NHD) */
	KVS_PAGED_NHD = 0,
	/* [2][num_pages][kv_heads][page_tokens][head_dim]: vLLM's HND layout */
	KVS_PAGED_HND = 1,
	/* [num_pages][kv_heads][2][page_tokens][head_dim]: vLLM's CPU layout,
	 * which it declares as [num_pages][kv_heads][page_tokens][2 * head_dim]
	 * and reads as page_tokens K rows then page_tokens V rows per head */
	KVS_PAGED_CPU = 2,
	/* [num_pages][2][page_tokens][kv_heads][head_dim]: K and V inside a page */
	KVS_PAGED_NHD_KV_INNER = 3,
} kvs_paged_kind;

typedef struct kvs_paged_cache {
	uint32_t num_pages;   /* pages in each layer's tensor */
	uint32_t page_tokens; /* tokens per page; divides the layout's
				 block_tokens */
	kvs_dtype dtype;      /* the engine's element type: FP16, BF16, FP32 */
	uint32_t on_device;   /* 0: host memory; 1: CUDA device memory */
	int64_t stride_kv, stride_page, stride_token, stride_head; /* >= 0 */
} kvs_paged_cache;

/*
 * kvs_paged_cache_init - describe an engine's cache of a common layout, with
 * this client's kv_heads and head_dim, in host memory (set on_device for a
 * CUDA tensor).
 * Errors: -EINVAL (unknown kind, a zero size, a dtype other than FP16, BF16
 *         or FP32), KVS_E_NOTATTACHED (a control-only client).
 * Ownership: caller's struct. Thread: any.
 */
int kvs_paged_cache_init(const kvs_client *c, kvs_paged_kind kind,
			 uint32_t num_pages, uint32_t page_tokens,
			 kvs_dtype dtype, kvs_paged_cache *out);

/*
 * kvs_kv_store - copy layer @layer of @n blocks out of the engine's cache:
 * block i's tokens come from the pages page_ids[i * P .. i * P + P - 1] in
 * token order, P = block_tokens / page_tokens, quantized to the layout's
 * dtype when it is INT8 or FP8_E4M3 (otherwise the dtypes must match).
 * Store every layer of a block before kvs_commit().
 * @pc: the engine's cache; @layer_base: the layer's tensor (host or device
 *      memory, as pc->on_device says).
 * @blocks: from kvs_reserve(), each of status KVS_BLOCK_NEW.
 * @stream: device memory only: a cudaStream_t (NULL: the legacy default
 *          stream). The call returns when the copy is done, on the host and
 *          on the device alike.
 * Errors: -EINVAL (a NULL argument, @layer out of range, shapes that do not
 *         fit the layout, a block not NEW, a block in a tier this call
 *         cannot reach: a GPU-tier block with host memory), -ERANGE (a page
 *         id outside [0, num_pages), a block outside its arena), -ENODEV
 *         (device memory without a usable CUDA device), -EIO (a CUDA error),
 *         -ENOMEM, KVS_E_NOTATTACHED, KVS_E_DISCONNECTED. Everything is
 *         checked before anything is written.
 * Ownership: caller's memory; nothing is kept. Thread: the client's.
 */
int kvs_kv_store(kvs_client *c, const kvs_paged_cache *pc, uint32_t layer,
		 const void *layer_base, const kvs_block *blocks,
		 const int32_t *page_ids, size_t n, void *stream);

/*
 * kvs_kv_load - the reverse of kvs_kv_store(): copy layer @layer of @n hit
 * blocks (from kvs_lookup(), status KVS_BLOCK_HIT, their lease held) into the
 * engine's pages, dequantizing INT8 and FP8_E4M3. Only the listed pages are
 * written.
 * Errors, Ownership, Thread: as kvs_kv_store(), with "a block not HIT".
 */
int kvs_kv_load(kvs_client *c, const kvs_paged_cache *pc, uint32_t layer,
		void *layer_base, const kvs_block *blocks,
		const int32_t *page_ids, size_t n, void *stream);

/*
 * kvs_report - add an engine's counters to the daemon's, where operators see
 * them beside the daemon's own (`kvsctl stats`, section "engines"; /metrics):
 * what a connector did with the blocks the daemon gave it. From an attached
 * client they count for its namespace too (namespace.<id>.engines.*).
 * @delta: the counts since this client's last report (each is added;
 *         kvs_engine_report: kvs_types.h).
 * Errors: -EINVAL, KVS_E_DISCONNECTED, KVS_E_PROTO (a daemon older than the
 *         message: it answers KVS_E_OPCODE).
 * Thread: the client's.
 */
int kvs_report(kvs_client *c, const kvs_engine_report *delta);

/*
 * kvs_describe - hand the daemon side records of blocks of the client's
 * namespace (kvs_block_desc): the engine's own block hash, parent hash,
 * token ids, block size, LoRA name and extra keys, which the daemon's vLLM
 * KV events (kvshared --kv-events, docs/routers.md) then name each block
 * by. Send them after the reserve and before the commit that publishes the
 * blocks: a block published already keeps how it was published, a hash the
 * namespace does not hold is skipped. Records are sent in as many requests
 * as they need (at most KVS_WIRE_DESC_MAX, 1024, and 1 MiB each).
 * @d: @n records, each within the KVS_DESC_*_MAX bounds; @kept (may be
 * NULL): the records the daemon kept (0 when its events are off).
 * Errors: -EINVAL (NULL, a record out of its bounds), KVS_E_NOTATTACHED,
 *         KVS_E_PROTO (extra keys that are not one msgpack array or nil:
 *         none of that request's records is kept), -EOPNOTSUPP (a daemon
 *         older than the message), KVS_E_DISCONNECTED.
 * Ownership: @d is read during the call only.
 * Thread: the client's.
 */
int kvs_describe(kvs_client *c, const kvs_block_desc *d, size_t n,
		 uint64_t *kept);

/*
 * kvs_version - the library's version: KVSHARE_VERSION_MAJOR << 16 |
 * KVSHARE_VERSION_MINOR, for bindings that load it at run time.
 * Thread: any.
 */
uint32_t kvs_version(void);

#ifdef __cplusplus
}
#endif
#endif /* KVSHARE_H */
