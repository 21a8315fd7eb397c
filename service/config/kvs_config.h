/*
 * kvs_config.h - the daemon's configuration: embedded defaults, then flags.
 *
 * Each setting is declared once, in config.c's settings table (name, type,
 * field, bounds, default, help): the flags, the config file's keys, --help
 * and --print-config are made from it. config_file.c reads the file syntax.
 *
 * Lifecycle: kvs_config_defaults() -> kvs_config_parse_args(). Defaults need
 * no file and no flag: a socket under $XDG_RUNTIME_DIR (or /tmp/kvshare-UID),
 * a host tier of a quarter of the RAM available at start.
 *
 * Thread: main() only.
 */
#ifndef KVS_CONFIG_H
#define KVS_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvs_log.h"
#include "kvs_size.h" /* kvs_parse_size(), the tools' too */

#define KVS_SOCKET_PATH_MAX 108 /* sizeof(sun_path) */
#define KVS_ALLOW_MAX 64        /* entries of --allow-uid, --allow-gid,
				 * --admin-uid */
#define KVS_GPU_AUTO (-1) /* --gpu auto: the tier on when a device is usable */
#define KVS_GPU_OFF (-2)

typedef struct kvs_config {
	char socket_path[KVS_SOCKET_PATH_MAX];
	uint64_t host_bytes;    /* host arena size */
	uint32_t page_bytes;    /* slot allocator page */
	int host_hugepages;     /* 1: host arenas on 2 MiB huge pages */
	enum kvs_log_level log_level;
	int ready_fd;           /* -1: none */
	char take_over[KVS_SOCKET_PATH_MAX]; /* a running daemon's socket
					       * whose pool and path this one
					       * takes over; "" none */
	uint32_t max_clients;   /* clamped at start to what the fd limit allows */
	uint32_t max_clients_per_uid; /* 0: auto (see --help) */
	uint32_t max_ns_per_uid; /* namespaces one uid may create */
	uint32_t max_sizes_per_uid; /* block sizes one uid's namespaces may have */
	uint32_t max_pinned_share_per_uid; /* % of an arena a uid's pinned slabs take */
	uint32_t max_leases;    /* per client */
	uint32_t max_pinned_blocks; /* per client: pins of all its leases */
	uint64_t max_outbuf;    /* per-client reply backlog before disconnect */
	uint32_t client_timeout; /* seconds a partial message or an unread
				  * backlog may last; 0: no limit */
	uint32_t socket_mode;   /* permission bits of the socket (0600) */
	/* Peers served besides the daemon's own uid; both empty: any peer
	 * that can open the socket. */
	uint32_t n_allow_uid, n_allow_gid;
	uint32_t allow_uid[KVS_ALLOW_MAX];
	uint32_t allow_gid[KVS_ALLOW_MAX];
	/* Operators besides the daemon's own uid and root: they see and
	 * touch every namespace (LIST, INSPECT, EVICT, PIN, WATCH, VERIFY);
	 * every other peer only its own domain's. */
	uint32_t n_admin_uid;
	uint32_t admin_uid[KVS_ALLOW_MAX];
	char policy[32];        /* eviction policy name */
	char metrics_addr[128]; /* "HOST:PORT" of /metrics, "" when off */
	uint32_t metrics_max_conns; /* /metrics connections open at once */
	uint32_t metrics_timeout; /* seconds a /metrics connection may live */
	char ssd_dir[256];      /* SSD tier directory, "" when off */
	uint64_t ssd_bytes;     /* SSD tier size (0: 4 segments) */
	uint64_t ssd_segment_bytes;
	int ssd_admit_hit;      /* 1: demote only blocks hit at least once */
	int ssd_write_through;  /* 1: commit also writes to SSD */
	uint32_t ssd_queue_depth; /* SSD I/Os in the kernel at once */
	uint32_t ssd_error_retry; /* seconds off after an SSD error; 0: for good */
	char remote_seeds[1024]; /* remote tier seeds "HOST:PORT,...", "" off */
	char remote_auth_file[256]; /* AUTH user and password, "" none */
	char remote_secret_file[256]; /* the values' MAC key, "" none */
	int remote_mac_hmac;     /* 1: publish the HMAC format; 0: Poly1305 */
	uint32_t remote_pin_share; /* % of host tier publishes may pin */
	int remote_write_through; /* 1: publish at commit; 0: at eviction */
	uint32_t remote_timeout_ms;
	int remote_tls;          /* TLS to the cluster */
	char remote_tls_ca[256]; /* CA file, "" the system's store */
	char remote_tls_cert[256]; /* client certificate (mutual TLS), "" none */
	char remote_tls_key[256];  /* its key, "" none */
	char remote_tls_server_name[256]; /* name checked, "" each node's host */
	uint32_t remote_query_timeout_ms; /* bound of a query's cluster part */
	int gpu;                /* device ordinal, KVS_GPU_AUTO or KVS_GPU_OFF */
	uint64_t gpu_bytes;     /* GPU tier size */
	uint32_t max_pinned_share; /* percent of the host tier operators may pin */
	uint64_t watch_buffer;  /* unsent event bytes per watcher before drops */
	char kv_events[256];    /* vLLM KV events' PUB endpoint, "" when off */
	char kv_events_replay[256]; /* their replay ROUTER endpoint, "" none */
	char kv_events_topic[256];  /* the topic frame, "" by default */
	uint64_t kv_events_buffer;  /* bytes of batches kept for replay */
	int tenant_arenas;      /* 1: one host arena per peer uid (trust domain) */
	uint32_t max_tenants;   /* domains at most (--tenant-arenas uid) */
	uint64_t tenant_bytes;  /* host bytes per domain; 0: host_bytes / max_tenants */
	int persist;            /* 1: the host tier outlives the daemon */
} kvs_config;

/*
 * kvs_config_defaults - fill @cfg with the embedded defaults.
 * Errors: -ENAMETOOLONG (socket path), -errno reading /proc/meminfo is not an
 * error (a fixed 1 GiB host tier is used then).
 */
int kvs_config_defaults(kvs_config *cfg);

/*
 * kvs_config_parse_args - apply command-line flags over @cfg.
 * --config FILE is read first, wherever it stands, so flags win over it.
 * Returns 0, 1 when --help, --version or --print-config printed (exit 0), or
 * KVS_E_CONFIG after printing "kvshared: <why>" to stderr (exit 2).
 */
int kvs_config_parse_args(kvs_config *cfg, int argc, char **argv);

/*
 * kvs_config_memory_check - --host-size against the machine's memory, as the
 * text of /proc/meminfo @meminfo says (NULL: read it). Returns 0 (it fits, or
 * the memory is not known); 1: more than MemAvailable, a warning, in @why;
 * KVS_E_CONFIG: more than MemTotal + SwapTotal, refused, why in @why (@cap
 * bytes). The arena is filled lazily, so neither is seen until blocks are
 * written: the daemon says so at start (docs/operations.md, "Sizing").
 */
int kvs_config_memory_check(const kvs_config *cfg, const char *meminfo,
			    char *why, size_t cap);

/*
 * kvs_config_parse_text - apply a config file's text (@name for messages):
 * "key = value" lines with the flags' names as keys, '#' or ';' comments,
 * an optional "[kvshared]" section header. Pure: no I/O but error messages.
 * Errors: KVS_E_CONFIG after printing "kvshared: NAME:LINE: why" (an unknown
 * key, a bad value, a line that is not key = value), -ENOMEM.
 */
int kvs_config_parse_text(kvs_config *cfg, const char *text, size_t len,
			  const char *name);

/*
 * kvs_config_set - apply one setting, named by its flag without "--" (the
 * config file's key), to @cfg. @val NULL: a flag given without a value (only
 * a boolean takes that). Returns NULL, or why the key or @val is refused
 * ("unknown key" for a name that is not a setting, --help among them);
 * @cfg is unchanged then. Rules between settings are not checked here but
 * by kvs_config_parse_args(), once all are read.
 */
const char *kvs_config_set(kvs_config *cfg, const char *key, const char *val);

/*
 * kvs_config_load_file - read the config file @path (at most 1 MiB) and
 * apply it with kvs_config_parse_text().
 * Errors: KVS_E_CONFIG after printing "kvshared: --config 'PATH': why", or
 * what kvs_config_parse_text() returns.
 */
int kvs_config_load_file(kvs_config *cfg, const char *path);

/* kvs_config_host_bytes - the host arena's bytes: --host-size rounded
 * down to the slot page, and to 2 MiB with --host-hugepages. */
uint64_t kvs_config_host_bytes(const kvs_config *cfg);

/* kvs_config_tenant_bytes - the host bytes of each tenant arena:
 * --tenant-size, or --host-size divided evenly by --max-tenants (rounded down
 * to the page), so that the tenants together never exceed --host-size. */
uint64_t kvs_config_tenant_bytes(const kvs_config *cfg);

/* kvs_config_print - the effective configuration, as a valid config file. */
void kvs_config_print(FILE *f, const kvs_config *cfg);

/* kvs_config_usage - the --help text, every flag with its default. */
void kvs_config_usage(FILE *f, const kvs_config *defaults);

#endif /* KVS_CONFIG_H */
