/*
 * kvs_stats.h - the daemon's counters: the server's own sections, declared
 * once, and the one renderer of every section.
 *
 * A stats section is a list of int64 values with a descriptor
 * (kvs_stats_section: each value's section, name, kind and help, and its
 * offset in the struct that holds it). The server's own sections (server,
 * clients, ops; engines, blocks, tier_host; leases .. errors) are the
 * X(section, name, kind, help) lines below: a field of kvs_counters each,
 * incremented where they happen. The fast path owns its section (fast.*,
 * kvs_fastidx.h: kvs_fast_section, between ops and engines), and each tier
 * its own (its X-list, its counters struct, its descriptor: tier_ssd.h,
 * tier_remote.h, tier_gpu.h; kvs_tier_ops.stats_section), which
 * kvs_tiers_stats() lists in the order they are rendered, between
 * tier_host and leases. server_stats.c puts the list together.
 *
 * kvs_stats_render() writes a list of sections as the STATS text
 * ("section.name value") or as Prometheus text (kvshare_<section>_<name>,
 * counters with a _total suffix). kind is COUNTER (only grows) or GAUGE
 * (is set: refreshed from the modules that own it before rendering).
 * Adding a counter is one X line in its section's list.
 *
 * Thread: the daemon's loop thread only.
 */
#ifndef KVS_STATS_H
#define KVS_STATS_H

#include <stddef.h> /* offsetof */
#include <stdint.h>

#define KVS_STATS_HEAD(X)                                                     \
	X(server, uptime_seconds, GAUGE, "seconds since the daemon started")  \
	X(server, pid, GAUGE, "daemon process id")                            \
	X(server, rss_anon_bytes, GAUGE, "daemon private resident memory")    \
	X(server, log_dropped, GAUGE, "log lines dropped: stderr not keeping up")\
	X(server, metrics_port, GAUGE, "TCP port of /metrics, 0 when off")    \
	X(server, fd_limit, GAUGE, "file descriptors the daemon may open (RLIMIT_NOFILE)")\
	X(server, loop_turn_max_work, GAUGE, "most work units one connection's requests took in one turn of the loop (docs/reliability.md)")\
	X(server, loop_yields, COUNTER, "turns a connection gave up with complete requests still queued")\
	X(server, metrics_open, GAUGE, "/metrics connections open now")       \
	X(server, metrics_refused, COUNTER, "/metrics connections closed at accept (--metrics-max-connections open)")\
	X(server, metrics_timed_out, COUNTER, "/metrics connections closed by --metrics-timeout")\
	X(server, prefix_queries, COUNTER, "POST /v1/prefix queries answered")\
	X(server, prefix_bad, COUNTER, "POST /v1/prefix bodies refused as bad input (400)")\
	X(start, mode, GAUGE, "how the daemon started: 0 cold, 1 handed over (a --take-over, or systemd's fd store after a clean stop), 2 recovered (the fds of a daemon that did not stop cleanly)")\
	X(start, blocks_kept, GAUGE, "committed blocks of the previous daemon's table served again")\
	X(start, blocks_dropped, GAUGE, "blocks of the previous daemon's table not trusted and dropped (caught mid-write, failed a check)")\
	X(start, adopt_ms, GAUGE, "milliseconds rebuilding the table from the previous daemon's fds")\
	X(persist, pending, GAUGE, "committed host blocks whose checksum the persist worker has not computed yet: a crash now drops them")\
	X(persist, queue_full, COUNTER, "commits the persist worker had no room for: unverified, dropped by a restart after a crash (a clean stop verifies them)")\
	X(start, handover_refused, COUNTER, "take-overs refused: another uid, a hand-over format this daemon does not write, one already under way")\
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
	X(ops, lookup, COUNTER, "lookup requests over the socket (the fast path's: fast.lookups)")\
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
	X(ops, fastattach, COUNTER, "fast path attach requests")             \
	X(ops, handover, COUNTER, "take-over requests (kvshared --take-over)")          \
	X(ops, describe, COUNTER, "side record requests (DESCRIBE)")

/* The fast path's section (kvs_fastidx.h) is rendered here, then: */
#define KVS_STATS_MID(X)                                                      \
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
	X(blocks, lookup_hit, COUNTER, "blocks found by lookups, every path (socket, fast path, promotion)")\
	X(blocks, lookup_miss, COUNTER, "blocks asked for and not found, every path (the fast path's as its clients report them)")\
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
	X(tier_host, utilization_permille, GAUGE, "slot bytes / slab bytes")

/* The tiers' sections (kvs_tiers_stats) are rendered here, then: */
#define KVS_STATS_TAIL(X)                                                     \
	X(leases, active, GAUGE, "leases held now")                           \
	X(leases, pinned_blocks, GAUGE, "pins held now")                      \
	X(leases, pinned_slab_bytes, GAUGE, "bytes of the host slabs workers' leases hold, per uid (--max-pinned-share-per-uid)")\
	X(leases, refused_slabs, COUNTER, "lookup hits and reserved blocks cut: one slab more for the uid (--max-pinned-share-per-uid)")\
	X(pins, blocks, GAUGE, "blocks pinned by operators")                  \
	X(pins, bytes, GAUGE, "bytes of blocks pinned by operators")          \
	X(events, subscribers, GAUGE, "connections watching events")          \
	X(events, published, COUNTER, "events sent to subscribers")           \
	X(events, dropped, COUNTER, "events dropped: a subscriber's buffer was full") \
	X(kv_events, published, COUNTER, "vLLM KV events published (--kv-events)")\
	X(kv_events, batches, COUNTER, "KVEventBatch messages published (seq numbers given)")\
	X(kv_events, dropped, COUNTER, "batches not sent: a subscriber at the high-water mark (kept for replay)")\
	X(kv_events, buffered_bytes, GAUGE, "bytes of batches kept for replay (--kv-events-buffer)")\
	X(kv_events, replays, COUNTER, "replay requests answered")            \
	X(kv_events, replay_bad, COUNTER, "replay requests refused: not [identity, empty, 8-byte seq]")\
	X(kv_events, side_records, GAUGE, "blocks with an engine's side record (DESCRIBE)")\
	X(kv_events, side_bytes, GAUGE, "bytes of side records kept")         \
	X(kv_events, side_bad, COUNTER, "side records refused: extra keys not one msgpack array or nil")\
	X(namespaces, count, GAUGE, "namespaces known")                       \
	X(namespaces, refused, COUNTER, "attaches refused: --max-namespaces-per-uid")\
	X(namespaces, refused_sizes, COUNTER, "attaches refused: --max-block-sizes-per-uid, or 256 block sizes in the host tier")\
	X(namespaces, reclaimed, COUNTER, "namespaces given up: no client, no block (their uid was at its cap)")\
	X(tenants, domains, GAUGE, "host arenas made, one per uid (--tenant-arenas uid; 0: off)") \
	X(table, records, GAUGE, "block records in use")                      \
	X(table, ghosts, GAUGE, "records of evicted parents kept for children")\
	X(table, metadata_bytes, GAUGE, "bytes of block table memory")        \
	X(policy, probation_blocks, GAUGE, "evictable blocks with no evidence of reuse (leaf-learn, leaf-2q)")\
	X(policy, protected_blocks, GAUGE, "evictable blocks a hit or the ghost history showed reused (leaf-learn, leaf-2q)")\
	X(policy, window_ppm, GAUGE, "probation window, ppm of the cached records: learned by leaf-learn, 10% under leaf-2q (of the policy with most members)")\
	X(policy, bonus_f2_milli, GAUGE, "leaf-learn's key bonus for protected blocks of 2 uses, 1/1000 cache turnover")\
	X(policy, bonus_f3_milli, GAUGE, "... of 3 uses")                    \
	X(policy, bonus_f4_milli, GAUGE, "... of 4 uses")                    \
	X(policy, bonus_f5_milli, GAUGE, "... of 5 uses")                    \
	X(policy, bonus_f6_milli, GAUGE, "... of 6 uses")                    \
	X(policy, bonus_f7_milli, GAUGE, "... of 7 uses or more")            \
	X(policy, ghost_returns, COUNTER, "blocks written again while leaf-learn's ghost history remembered them")\
	X(policy, window_grew, COUNTER, "... of which grew the probation window (back from probation soon enough)")\
	X(policy, window_shrank, COUNTER, "... of which shrank it (back from protected)")\
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
	X(errors, limit, COUNTER, "per-client limits reached")                \
	X(errors, perm, COUNTER, "operator requests refused to a worker's uid")

#define KVS_STATS_FIELDS(X) KVS_STATS_HEAD(X) KVS_STATS_MID(X) KVS_STATS_TAIL(X)

typedef struct kvs_counters {
#define KVS_STATS_X(sec, name, kind, help) int64_t sec##_##name;
	KVS_STATS_FIELDS(KVS_STATS_X)
#undef KVS_STATS_X
} kvs_counters;

enum kvs_stat_kind { KVS_STAT_GAUGE = 0, KVS_STAT_COUNTER = 1 };

/* One value of a section: an int64_t at @off in the section's struct;
 * @sec is its section's name, or NULL for the section's own name. */
typedef struct kvs_stat {
	const char *sec, *name, *help;
	uint32_t kind; /* enum kvs_stat_kind */
	uint32_t off;
} kvs_stat;

/* A section's descriptor; @tier is the kvs_tier value of the tier that
 * owns it (0: the server's). */
typedef struct kvs_stats_section {
	const char *name;
	uint8_t tier;
	uint32_t n;
	const kvs_stat *stats;
} kvs_stats_section;

/* A section with its values, as rendered. */
typedef struct kvs_stats_part {
	const kvs_stats_section *sec;
	const void *vals;
} kvs_stats_part;

/* For a section's X(name, kind, help) list: its struct's field, and the
 * section's definition (where KVS_STAT_TYPE names that struct):
 *	#define KVS_STAT_TYPE my_stats
 *	KVS_STATS_SECTION_DEFINE(my_section, "mine", KVS_TIER_X, MY_STATS);
 *	#undef KVS_STAT_TYPE
 * Its entries' sec is NULL: they are rendered under the section's name. */
#define KVS_STAT_FIELD(name, kind, help) int64_t name;
#define KVS_STAT_DESC(name, kind, help)                                       \
	{ NULL, #name, help, KVS_STAT_##kind,                                  \
	  (uint32_t)offsetof(KVS_STAT_TYPE, name) },
#define KVS_STATS_SECTION_DEFINE(var, secname, tierval, LIST)                 \
	static const kvs_stat var##_stats[] = { LIST(KVS_STAT_DESC) };        \
	const kvs_stats_section var = {                                        \
		secname, tierval,                                              \
		sizeof(var##_stats) / sizeof(var##_stats[0]), var##_stats      \
	}

/* The server's sections, on a kvs_counters: server .. ops, engines ..
 * tier_host, leases .. errors (the fast path's and the tiers' between). */
extern const kvs_stats_section kvs_stats_head, kvs_stats_mid, kvs_stats_tail;

/* Values of a section whose owner is off: zeros, for sections of at most
 * KVS_STATS_ZERO_MAX values (checked by test_stats). */
#define KVS_STATS_ZERO_MAX 64
extern const int64_t kvs_stats_zeros[KVS_STATS_ZERO_MAX];

/*
 * kvs_stats_render - the @n sections of @parts, in order, as the STATS
 * text (@prometheus 0: "section.name value" lines) or as Prometheus text
 * (1: HELP, TYPE and the sample per value). Callers add their own lines
 * after it (latencies, namespaces). Thread: the loop thread.
 */
#include <stdio.h>
void kvs_stats_render(const kvs_stats_part *parts, uint32_t n, int prometheus,
		      FILE *f);

/* kvs_hist_print_prometheus - a latency histogram as a Prometheus histogram
 * in seconds; @labels is "key=\"value\"" (no braces). */
#include "kvs_hist.h"
void kvs_hist_print_prometheus(FILE *f, const char *name, const char *labels,
			       const kvs_hist *h);

#endif /* KVS_STATS_H */
