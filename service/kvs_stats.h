/*
 * kvs_stats.h - the daemon's counters, declared once.
 *
 * Each X(section, name, kind, help) line makes a field of kvs_counters, its line
 * in the stats text ("section.name value"), and (later) its Prometheus metric.
 * kind is COUNTER (only grows) or GAUGE (is set). Gauges are refreshed by
 * kvs_stats_render() from the modules that own them.
 *
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_STATS_H
#define KVS_STATS_H

#include <stddef.h>
#include <stdint.h>

#define KVS_STATS_FIELDS(X)                                                   \
	X(server, uptime_seconds, GAUGE, "seconds since the daemon started")  \
	X(server, pid, GAUGE, "daemon process id")                            \
	X(server, rss_anon_bytes, GAUGE, "daemon private resident memory")    \
	X(server, log_dropped, GAUGE, "log lines dropped: stderr not keeping up")\
	X(server, metrics_port, GAUGE, "TCP port of /metrics, 0 when off")    \
	X(server, fd_limit, GAUGE, "file descriptors the daemon may open (RLIMIT_NOFILE)")\
	X(clients, connected, GAUGE, "connections open now")                  \
	X(clients, attached, GAUGE, "connections attached to a namespace")    \
	X(clients, accepted, COUNTER, "connections accepted")                 \
	X(clients, refused, COUNTER, "connections refused (--max-clients)")   \
	X(clients, refused_perm, COUNTER, "connections refused (uid/gid)")   \
	X(clients, refused_uid, COUNTER, "connections refused (--max-clients-per-uid)")\
	X(clients, max, GAUGE, "connections served at most (--max-clients, clamped to the fd limit)")\
	X(clients, max_per_uid, GAUGE, "connections served at most per uid")  \
	X(clients, accept_paused, COUNTER, "listener paused: out of file descriptors")\
	X(clients, timeout_partial, COUNTER, "closed: partial message too long")\
	X(clients, timeout_unread, COUNTER, "closed: replies left unread")    \
	X(clients, disconnected, COUNTER, "connections closed")               \
	X(ops, hello, COUNTER, "hello requests")                              \
	X(ops, lookup, COUNTER, "lookup requests")                            \
	X(ops, reserve, COUNTER, "reserve requests")                          \
	X(ops, commit, COUNTER, "commit requests")                            \
	X(ops, abort, COUNTER, "abort requests")                              \
	X(ops, release, COUNTER, "release requests")                          \
	X(ops, stats, COUNTER, "stats requests")                              \
	X(ops, list, COUNTER, "operator list requests")                       \
	X(ops, inspect, COUNTER, "operator inspect requests")                 \
	X(ops, evict, COUNTER, "operator evict and flush requests")           \
	X(ops, pin, COUNTER, "operator pin requests")                         \
	X(ops, unpin, COUNTER, "operator unpin requests")                     \
	X(ops, watch, COUNTER, "event subscriptions")                         \
	X(ops, verify, COUNTER, "operator verify requests")                   \
	X(ops, report, COUNTER, "engine counter reports (kvs_report)")         \
	X(ops, fastattach, COUNTER, "fast path attach requests")              \
	X(fast, clients, GAUGE, "connections with a fast-path pin area")      \
	X(fast, revoked, GAUGE, "pin areas of closed connections, in their grace")\
	X(fast, indexes, GAUGE, "fast-path indexes (a memfd each, one per trust domain, made at its first fast attach)")\
	X(fast, entries, GAUGE, "host blocks in the fast-path indexes")       \
	X(fast, held, GAUGE, "blocks kept now for fast-path pins")            \
	X(fast, unpublished, COUNTER, "host blocks left out of a full index") \
	X(fast, evict_skipped, COUNTER, "evictions skipped: fast-path pinned")\
	X(fast, attach_refused, COUNTER, "fast attaches refused: the domain's pins at their bound")\
	X(fast, snapshots, COUNTER, "looks at a domain's fast-path pins (one per eviction batch)")\
	X(fast, pin_reads, COUNTER, "fast-path pins read by those looks")     \
	X(fast, pin_probes, COUNTER, "hash-set probes of those looks (inserts and queries)")\
	X(fast, replayed, COUNTER, "fast-path hits replayed into the eviction order (checked by the daemon)")\
	X(fast, lookups, COUNTER, "lookups answered by the fast path (client-reported)")\
	X(fast, hit_blocks, COUNTER, "blocks hit by the fast path (client-reported)")\
	X(fast, miss_blocks, COUNTER, "blocks the fast path found absent (client-reported)")\
	X(fast, fallback_miss, COUNTER, "fast lookups sent to the socket: index miss (client-reported)")\
	X(fast, fallback_busy, COUNTER, "... : entry being written or moved (client-reported)")\
	X(fast, fallback_pins, COUNTER, "... : pin area or fast leases full (client-reported)")\
	X(fast, fallback_other, COUNTER, "... : too many hashes or index unusable (client-reported)")\
	X(fast, pins_live, GAUGE, "fast-path pins held now (client-reported)")\
	X(fast, leases_live, GAUGE, "fast-path leases held now (client-reported)")\
	X(engines, hit_tokens, COUNTER, "tokens engines' schedulers were told are cached")\
	X(engines, loaded_blocks, COUNTER, "blocks engines copied into their caches")\
	X(engines, loaded_bytes, COUNTER, "bytes engines copied into their caches")\
	X(engines, load_us, COUNTER, "microseconds engines spent loading")   \
	X(engines, load_errors, COUNTER, "blocks engines could not load (recomputed)")\
	X(engines, published_blocks, COUNTER, "blocks engines stored and committed")\
	X(engines, publish_us, COUNTER, "microseconds engines spent publishing")\
	X(engines, skipped_blocks, COUNTER, "blocks engines did not publish (busy, full)")\
	X(engines, namespaces, GAUGE, "namespaces engines reported from (their counts: namespace.ID.engines.*)")\
	X(engines, namespaces_omitted, GAUGE, "of those, not rendered per namespace (past the 64 with most hit tokens)")\
	X(blocks, lookup_hit, COUNTER, "blocks found by lookups")             \
	X(blocks, lookup_miss, COUNTER, "blocks asked for and not found")     \
	X(blocks, query_asked, COUNTER, "blocks asked about by queries (lookups that pin and fetch nothing)")\
	X(blocks, query_bounded, COUNTER, "queries answered at --remote-query-timeout, before the cluster")\
	X(blocks, lookup_room_cut, COUNTER, "lookups cut where a shared tier held more than their room (pins, host slots)")\
	X(blocks, reserved, COUNTER, "slots handed out by reserve")           \
	X(blocks, reserve_exists, COUNTER, "reserve: block already present")  \
	X(blocks, reserve_busy, COUNTER, "reserve: block being written")      \
	X(blocks, reserve_full, COUNTER, "reserve: no slot could be made")    \
	X(blocks, reserve_noparent, COUNTER, "reserve after a parent: blocks not reserved, the parent not cached")\
	X(blocks, committed, COUNTER, "blocks published by commit")           \
	X(blocks, aborted, COUNTER, "reserved slots freed uncommitted")       \
	X(blocks, evicted, COUNTER, "committed blocks evicted")               \
	X(tier_host, bytes_total, GAUGE, "host arena bytes")                  \
	X(tier_host, bytes_resident, GAUGE, "arena bytes backed by RAM now")   \
	X(tier_host, bytes_used, GAUGE, "bytes of allocated slots")           \
	X(tier_host, bytes_free, GAUGE, "arena bytes not in allocated slots") \
	X(tier_host, slots_used, GAUGE, "allocated slots (blocks+writing)")   \
	X(tier_host, blocks, GAUGE, "committed blocks in the host tier")      \
	X(tier_host, blocks_writing, GAUGE, "reserved, uncommitted blocks")   \
	X(tier_host, utilization_permille, GAUGE, "slot bytes / slab bytes")  \
	X(tier_ssd, enabled, GAUGE, "1 when demotion to SSD is on")            \
	X(tier_ssd, bytes_total, GAUGE, "SSD tier bytes (segment files)")     \
	X(tier_ssd, bytes_used, GAUGE, "bytes of used segments")              \
	X(tier_ssd, bytes_free, GAUGE, "bytes of free segments and tails")    \
	X(tier_ssd, blocks, GAUGE, "blocks with an SSD copy")                 \
	X(tier_ssd, blocks_ssd_only, GAUGE, "blocks only on SSD")             \
	X(tier_ssd, writes_inflight, GAUGE, "demotion writes not completed")  \
	X(tier_ssd, writes, COUNTER, "blocks written to SSD")                 \
	X(tier_ssd, writes_direct, COUNTER, "SSD writes submitted from the arena slot")\
	X(tier_ssd, writes_staged, COUNTER, "SSD writes submitted from a staging copy")\
	X(tier_ssd, held_waits, COUNTER, "allocations that waited for a slot held by a demotion write")\
	X(tier_ssd, reads_direct, COUNTER, "promotion reads submitted straight into the slot")\
	X(tier_ssd, reads_bounced, COUNTER, "promotion reads submitted through a bounce buffer")\
	X(tier_ssd, bytes_written, COUNTER, "payload bytes written to SSD")   \
	X(tier_ssd, reads, COUNTER, "blocks read from SSD and verified")      \
	X(tier_ssd, bytes_read, COUNTER, "payload bytes read and verified")   \
	X(tier_ssd, demotions, COUNTER, "blocks evicted from RAM kept on SSD")\
	X(tier_ssd, promotions, COUNTER, "blocks read back into RAM by lookups")\
	X(tier_ssd, lookup_hits, COUNTER, "lookup hits served after promotion")\
	X(tier_ssd, admission_rejected, COUNTER, "evicted blocks not admitted")\
	X(tier_ssd, corrupt_blocks, COUNTER, "reads failing verification: dropped")\
	X(tier_ssd, verify_runs, COUNTER, "verify requests finished")         \
	X(tier_ssd, verified_blocks, COUNTER, "blocks read back by verify")   \
	X(tier_ssd, stale_blocks, COUNTER, "blocks of recycled segments dropped")\
	X(tier_ssd, recycled_segments, COUNTER, "segments recycled")          \
	X(tier_ssd, recycle_forced, COUNTER, "segments recycled with pinned blocks in RAM (their copies dropped)")\
	X(tier_ssd, stalls, COUNTER, "episodes with no segment to write (demotion stays on)")\
	X(tier_ssd, stall_drops, COUNTER, "SSD writes dropped in stalls")      \
	X(tier_ssd, stall_ms, COUNTER, "time in stalls, ms (ended episodes)")  \
	X(tier_ssd, io_errors, COUNTER, "I/O errors and ENOSPC (demotion off for a while)")\
	X(tier_ssd, error_retries, COUNTER, "times demotion was tried again after an error")\
	X(tier_ssd, write_lat_avg_us, GAUGE, "average SSD write latency")     \
	X(tier_ssd, write_lat_p99_us, GAUGE, "p99 SSD write latency")         \
	X(tier_ssd, read_lat_avg_us, GAUGE, "average SSD read latency")       \
	X(tier_ssd, read_lat_p99_us, GAUGE, "p99 SSD read latency")           \
	X(tier_ssd, index_entries, GAUGE, "entries committed in the index")   \
	X(tier_ssd, restart_blocks, GAUGE, "blocks loaded from the index at start, once fully loaded")\
	X(tier_ssd, restart_ms, GAUGE, "time to load the whole index at start (in the background), ms")\
	X(tier_ssd, index_loading, GAUGE, "1 while the index loads in the background")\
	X(tier_ssd, index_loaded, GAUGE, "blocks loaded from the index since start")\
	X(tier_ssd, index_faults, COUNTER, "blocks a lookup loaded from the index before the background load came to them")\
	X(tier_remote, enabled, GAUGE, "1 when the remote tier is on")        \
	X(tier_remote, cluster, GAUGE, "1 a Redis Cluster, 0 one plain node") \
	X(tier_remote, authenticated, GAUGE, "1 values signed with --remote-secret-file")\
	X(tier_remote, attached, GAUGE, "1 once the cluster answered, 0 while it does not (lookups local)")\
	X(tier_remote, maps_refused, COUNTER, "slot maps refused: malformed, or too many nodes")\
	X(tier_remote, errors_proto, COUNTER, "replies that did not fit their command: connection closed")\
	X(tier_remote, nodes, GAUGE, "nodes known")                           \
	X(tier_remote, nodes_down, GAUGE, "nodes failing now (misses for their slots)")\
	X(tier_remote, probes, COUNTER, "EXISTS windows (64 keys at most) past lookups' hits")\
	X(tier_remote, probe_keys, COUNTER, "blocks asked about by those lookups")\
	X(tier_remote, hits, COUNTER, "blocks fetched and verified")          \
	X(tier_remote, misses, COUNTER, "blocks asked about and not there")   \
	X(tier_remote, corrupt, COUNTER, "values whose header is not the block's: misses")\
	X(tier_remote, forged, COUNTER, "values failing their MAC: misses")    \
	X(tier_remote, repaired, COUNTER, "values that failed here, replaced by a publish")\
	X(tier_remote, bytes_in, COUNTER, "payload bytes fetched")            \
	X(tier_remote, published, COUNTER, "blocks stored (SET NX, or a repair's SET)")\
	X(tier_remote, existed, COUNTER, "blocks not sent: already there")    \
	X(tier_remote, bytes_out, COUNTER, "payload bytes stored")            \
	X(tier_remote, skipped, COUNTER, "publishes dropped: staging full")   \
	X(tier_remote, pin_capped, COUNTER, "commits sent from a copy: pin cap reached")\
	X(tier_remote, pinned_bytes, GAUGE, "host bytes pinned by publishes now")\
	X(tier_remote, macs, COUNTER, "values sealed or verified off the loop (MAC workers)")\
	X(tier_remote, mac_queued, GAUGE, "values at the MAC workers now")     \
	X(tier_remote, errors_timeout, COUNTER, "requests past --remote-timeout")\
	X(tier_remote, errors_down, COUNTER, "requests to a node down or lost")\
	X(tier_remote, errors_clusterdown, COUNTER, "requests refused: CLUSTERDOWN")\
	X(tier_remote, errors_other, COUNTER, "other failed requests")        \
	X(tier_remote, inflight_bytes, GAUGE, "value bytes on the wire now")  \
	X(tier_remote, lat_p50_us, GAUGE, "median request latency (bucket bound)")\
	X(tier_remote, lat_p99_us, GAUGE, "p99 request latency (bucket bound)")\
	X(tier_gpu, enabled, GAUGE, "1 when the GPU tier is on")              \
	X(tier_gpu, engine, GAUGE, "1 CUDA, 2 the fake device (tests)")       \
	X(tier_gpu, device, GAUGE, "device ordinal of the GPU arena")         \
	X(tier_gpu, bytes_total, GAUGE, "GPU arena bytes")                    \
	X(tier_gpu, bytes_used, GAUGE, "bytes of allocated GPU slots")        \
	X(tier_gpu, slots_used, GAUGE, "allocated GPU slots (blocks+writing)")\
	X(tier_gpu, blocks, GAUGE, "committed blocks in the GPU tier")        \
	X(tier_gpu, reserved, COUNTER, "slots handed out in the GPU tier")    \
	X(tier_gpu, reserve_fallbacks, COUNTER, "GPU reserves served by host")\
	X(tier_gpu, demotions, COUNTER, "blocks moved from GPU to host")      \
	X(tier_gpu, demoted_bytes, COUNTER, "bytes copied GPU -> host")       \
	X(tier_gpu, demote_dropped, COUNTER, "GPU evictions with no host slot")\
	X(tier_gpu, lookup_hits, COUNTER, "lookup hits in the GPU tier")      \
	X(leases, active, GAUGE, "leases held now")                           \
	X(leases, pinned_blocks, GAUGE, "pins held now")                      \
	X(pins, blocks, GAUGE, "blocks pinned by operators")                  \
	X(pins, bytes, GAUGE, "bytes of blocks pinned by operators")          \
	X(events, subscribers, GAUGE, "connections watching events")          \
	X(events, published, COUNTER, "events sent to subscribers")           \
	X(events, dropped, COUNTER, "events dropped: a subscriber's buffer was full") \
	X(namespaces, count, GAUGE, "namespaces known")                       \
	X(namespaces, refused, COUNTER, "attaches refused: --max-namespaces-per-uid")\
	X(tenants, domains, GAUGE, "host arenas made, one per uid (--tenant-arenas uid; 0: off)") \
	X(table, records, GAUGE, "block records in use")                      \
	X(table, ghosts, GAUGE, "records of evicted parents kept for children")\
	X(table, metadata_bytes, GAUGE, "bytes of block table memory")        \
	X(errors, total, COUNTER, "requests answered with an error")          \
	X(errors, proto, COUNTER, "malformed or truncated messages")          \
	X(errors, version, COUNTER, "unsupported protocol versions")          \
	X(errors, opcode, COUNTER, "unknown opcodes")                         \
	X(errors, toobig, COUNTER, "messages over the length limit")          \
	X(errors, toomany, COUNTER, "hash counts over the limit")             \
	X(errors, layout, COUNTER, "invalid or mismatched layouts")           \
	X(errors, notattached, COUNTER, "operations before attach")           \
	X(errors, lease, COUNTER, "unknown, foreign or wrong-kind leases")    \
	X(errors, full, COUNTER, "reserves refused: cache full")              \
	X(errors, limit, COUNTER, "per-client limits reached")

typedef struct kvs_counters {
#define KVS_STATS_X(sec, name, kind, help) int64_t sec##_##name;
	KVS_STATS_FIELDS(KVS_STATS_X)
#undef KVS_STATS_X
} kvs_counters;

/*
 * kvs_stats_print - every counter as "section.name value" lines, in the
 * order of KVS_STATS_FIELDS. Callers add their own lines after it
 * (namespaces). Thread: the loop thread.
 */
#include <stdio.h>
void kvs_stats_print(const kvs_counters *s, FILE *f);

/* kvs_stats_print_prometheus - the same counters in Prometheus text format:
 * kvshare_<section>_<name>, counters with a _total suffix. */
#define KVS_STATS_IS_COUNTER_COUNTER 1
#define KVS_STATS_IS_COUNTER_GAUGE 0
void kvs_stats_print_prometheus(const kvs_counters *s, FILE *f);

/* kvs_hist_print_prometheus - a latency histogram as a Prometheus histogram
 * in seconds; @labels is "key=\"value\"" (no braces). */
#include "kvs_hist.h"
void kvs_hist_print_prometheus(FILE *f, const char *name, const char *labels,
			       const kvs_hist *h);

#endif /* KVS_STATS_H */
