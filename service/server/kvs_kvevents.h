/*
 * kvs_kvevents.h - the pool as vLLM KV events (--kv-events): a ZMQ PUB
 * socket framed as vLLM's ZmqEventPublisher frames it, [topic, seq (u64
 * big-endian), msgpack(KVEventBatch)], and its replay ROUTER socket.
 *
 * The cache's residency hook (kvs_cache_admin.h) tells which record is
 * loadable from which tier; this module remembers what it published for each
 * record and turns every change into BlockRemoved (the tier it leaves) and
 * BlockStored (the tier it enters): host RAM is medium CPU, the SSD tier
 * STORAGE, the GPU tier GPU, each with locality LOCAL; the remote tier is
 * STORAGE with locality REMOTE; ownership is "kvshare". A record freed is a
 * removal from its last tier; a flush is the removals of what it freed.
 * Events collect in one batch per turn of the loop (at most
 * KVS_KVEV_BATCH_MAX events) and go out as one message; a subscriber slower
 * than the socket's high-water mark never blocks the loop: the batch is not
 * sent (kv_events.dropped) and stays in the replay buffer.
 *
 * A block's side record (kvs_block_desc, handed over by the engine that
 * publishes it, DESCRIBE on the wire) gives its event the engine's block
 * hash, parent hash, token ids, block size, LoRA name and extra keys;
 * without one the event names the block by kvshare's hash (16 bytes, hi
 * then lo, big-endian), with no token ids. Side records are kept only while
 * events are on, and freed with their record.
 *
 * Every event also names its namespace (kvshare_ns: the seed of its layout
 * without adapter and salt), a key vLLM's decoder skips.
 *
 * Replay: a request [identity, "", start seq (u64 big-endian)] on the
 * ROUTER socket is answered with the buffered batches from that seq, at
 * most 256 and 8 MiB (at least one), [identity, "", topic, seq, payload]
 * each, then [identity, "", "", -1 as 8 bytes, ""], as vLLM ends a replay. The buffer keeps the latest batches up
 * to a byte bound (--kv-events-buffer).
 *
 * Errors: 0 or a negative KVS_E_* / -errno.
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_KVEVENTS_H
#define KVS_KVEVENTS_H

#include <stdint.h>

#include <event2/event.h>

#include "kvs_cache.h"
#include "kvs_stats.h"
#include "kvs_types.h"
#include "kvs_wire.h"

#define KVS_KVEV_BATCH_MAX 1024u /* events in one batch at most */

typedef struct kvs_kvev kvs_kvev;

typedef struct kvs_kvev_config {
	const char *endpoint; /* PUB: bound for "*", "::", ipc://, inproc://,
			       * else connected to (as vLLM's publisher) */
	const char *replay;   /* ROUTER bound there; "" or NULL: none */
	const char *topic;    /* first frame of each message */
	uint64_t buffer_bytes; /* replay buffer bound */
	uint32_t hwm;         /* PUB send high-water mark, messages */
} kvs_kvev_config;

/*
 * kvs_kvev_create - open the sockets, hook @cache's residency changes and
 * publish what the cache holds now (one stored event per loadable block).
 * Errors: -EINVAL (an endpoint ZMQ refuses: logged with ZMQ's reason),
 * -ENOMEM. Ownership: @base, @cache and @stats must outlive it.
 */
int kvs_kvev_create(const kvs_kvev_config *cfg, struct event_base *base,
		    kvs_cache *cache, kvs_counters *stats, kvs_kvev **out);
void kvs_kvev_destroy(kvs_kvev *e);

/*
 * kvs_kvev_describe - keep @d as the side record of record @idx (found by
 * the caller in the sender's namespace). A record already published keeps
 * the description it was published with. Returns 1 when kept, 0 when not
 * (published already), KVS_E_PROTO for extra keys that are not one msgpack
 * array or nil, -ENOMEM. @d is copied.
 */
int kvs_kvev_describe(kvs_kvev *e, uint32_t idx, const kvs_block_desc *d);

/*
 * kvs_kvev_describe_all - the side records of a DESCRIBE request from a
 * connection attached to namespace @ns: each kept for its block if the
 * namespace has it (*kept counts them; none with @e NULL, events off).
 * Every record's extra keys are checked first: KVS_E_PROTO for one that
 * is not a msgpack array or nil, and then none is kept.
 */
int kvs_kvev_describe_all(kvs_kvev *e, kvs_cache *cache, uint32_t ns,
			  const kvs_wire_describe *w, uint64_t *kept);

/* kvs_kvev_flush - send the batch collected so far (the loop does it once
 * per turn by itself). */
void kvs_kvev_flush(kvs_kvev *e);

#endif /* KVS_KVEVENTS_H */
