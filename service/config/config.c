/*
 * config.c - defaults and flags of kvshared (see kvs_config.h).
 *
 * Every setting is declared once, as one entry of config_settings[] below:
 * its name (the flag and the config-file key), its type (how a value is
 * read, checked and printed), its field of kvs_config, its bounds, its
 * default and its --help text. getopt_long's options, the config file,
 * --help and --print-config (config_print.c) are all made from that table;
 * rules between settings are checked in check_rules() alone, once every
 * setting is read. Reading one value is config_value.c's.
 */
#include "config_int.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvs_policy.h"
#include "kvs_types.h"

#define FALLBACK_HOST_BYTES (1ull << 30)
#define DEFAULT_MAX_OUTBUF (64ull << 20) /* not a setting (yet) */

/* The field @f of kvs_config, of C type @t: a mismatch is a compile error
 * (distinct pointer types compared). */
#define FIELD(t, f)                                                            \
	.off = offsetof(kvs_config, f) +                                       \
	       0 * sizeof((t *)0 == &((kvs_config *)0)->f),                    \
	.size = sizeof(((kvs_config *)0)->f)
#define STRFIELD(f)                                                            \
	.off = offsetof(kvs_config, f) +                                       \
	       0 * sizeof((char *)0 == ((kvs_config *)0)->f),                  \
	.size = sizeof(((kvs_config *)0)->f)

static const char *const admit_choices[] = { "all", "hit", NULL };
static const char *const tenant_choices[] = { "off", "uid", NULL };
static const char *const remote_write_choices[] = { "demote", "through", NULL };
static const char *const remote_mac_choices[] = { "poly1305", "hmac", NULL };
static const char *const persist_choices[] = { "off", "on", NULL };

/* In --help's order; --print-config follows it too. */
const struct setting config_settings[] = {
	{ .name = "socket", .arg = "PATH", .type = T_STR,
	  STRFIELD(socket_path), .why = "empty or longer than 107 bytes",
	  .help = "control socket (default {})" },
	{ .name = "host-size", .arg = "SIZE", .type = T_SIZE,
	  FIELD(uint64_t, host_bytes), .shift = 20,
	  .why = "not a size (e.g. 512M, 8G)",
	  .help = "host-RAM tier bytes, K/M/G/T suffixes\n"
		  "(default {} MiB: a quarter of available RAM)" },
	{ .name = "page-size", .arg = "SIZE", .type = T_SIZE,
	  FIELD(uint32_t, page_bytes), .min = 4096, .max = 1u << 30,
	  .flags = F_POW2, .def = "64K", .shift = 10,
	  .why = "must be a power of two from 4K to 1G",
	  .help = "slot allocator page, power of two >= 4K (default {} KiB)" },
	{ .name = "host-hugepages", .type = T_BOOL,
	  FIELD(int, host_hugepages), .def = "false",
	  .why = "must be true or false",
	  .help = "host-RAM arenas on 2 MiB huge pages (from vm.nr_hugepages;\n"
		  "sizes rounded down to 2 MiB): a client maps a block with\n"
		  "one page fault per 2 MiB instead of one per 64 KiB" },
	{ .name = "log-level", .arg = "LEVEL", .type = T_LEVEL,
	  FIELD(enum kvs_log_level, log_level), .def = "info",
	  .why = "must be error, warn, info or debug",
	  .help = "error, warn, info or debug (default {})" },
	{ .name = "ready-fd", .arg = "N", .type = T_FD,
	  FIELD(int, ready_fd), .flags = F_NOPRINT,
	  .why = "not a file descriptor",
	  .help = "write \"READY\\n\" to fd N once serving, then close it" },
	{ .name = "take-over", .arg = "SOCKET", .type = T_STR,
	  STRFIELD(take_over), .flags = F_NOPRINT, .unset = "none",
	  .why = "empty or longer than 107 bytes",
	  .help = "take over the pool and the socket of the kvshared\n"
		  "serving SOCKET (same uid): it hands them over and\n"
		  "exits; this one serves SOCKET" },
	{ .name = "max-clients", .arg = "N", .type = T_U32,
	  FIELD(uint32_t, max_clients), .min = 1, .def = "1024",
	  .why = "must be a number >= 1",
	  .help = "connections served at once, lowered at start to\n"
		  "what the fd limit allows (default {})" },
	{ .name = "max-clients-per-uid", .arg = "N", .type = T_U32,
	  FIELD(uint32_t, max_clients_per_uid), .unset = "auto",
	  .why = "must be a number (0: auto)",
	  .help = "connections one peer uid may hold at once; 0 or\n"
		  "unset: auto, all of --max-clients on a private\n"
		  "socket (mode 0600, no --allow-uid/gid), else half" },
	{ .name = "max-namespaces-per-uid", .arg = "N", .type = T_U32,
	  FIELD(uint32_t, max_ns_per_uid), .min = 1, .def = "256",
	  .why = "must be a number >= 1",
	  .help = "namespaces (layouts x salts) one peer uid may\n"
		  "have; past it an idle one is reclaimed, else\n"
		  "one more is refused (default {})" },
	{ .name = "max-block-sizes-per-uid", .arg = "N", .type = T_U32,
	  FIELD(uint32_t, max_sizes_per_uid), .min = 1, .max = 256,
	  .def = "16", .why = "must be a number from 1 to 256",
	  .help = "distinct block sizes one peer uid's namespaces\n"
		  "may have at once (the host tier serves 256);\n"
		  "one more is refused (default {})" },
	{ .name = "max-leases", .arg = "N", .type = T_U32,
	  FIELD(uint32_t, max_leases), .min = 1, .def = "4096",
	  .why = "must be a number >= 1",
	  .help = "leases one connection may hold (default {})" },
	{ .name = "max-pinned-share-per-uid", .arg = "PERCENT", .type = T_U32,
	  FIELD(uint32_t, max_pinned_share_per_uid), .max = 100, .def = "50",
	  .why = "must be a percentage from 0 (no limit) to 100",
	  .help = "share of the host arena that the slabs one\n"
		  "worker uid's leases hold blocks in may take; a\n"
		  "block past it is a miss (default {}; 0: none)" },
	{ .name = "max-pinned-blocks", .arg = "N", .type = T_U32,
	  FIELD(uint32_t, max_pinned_blocks), .min = 1, .def = "65536",
	  .why = "must be a number >= 1",
	  .help = "blocks one connection may pin (read or\n"
		  "write) at once (default {})" },
	{ .name = "client-timeout", .arg = "S", .type = T_U32,
	  FIELD(uint32_t, client_timeout), .max = 86400, .def = "60",
	  .why = "must be seconds from 0 (never) to 86400",
	  .help = "close a connection that holds a partial message,\n"
		  "or leaves over 1 MiB of replies unread, for S\n"
		  "seconds; 0: never (default {})" },
	{ .name = "socket-mode", .arg = "MODE", .type = T_MODE,
	  FIELD(uint32_t, socket_mode), .def = "0600",
	  .why = "must be octal bits from 0600 to 0777 (e.g. 0660)",
	  .help = "octal permission bits of the socket, at least\n"
		  "0600 (default {})" },
	{ .name = "allow-uid", .arg = "LIST", .type = T_UIDS,
	  FIELD(uint32_t, allow_uid[0]), .n_off = offsetof(kvs_config, n_allow_uid),
	  .unset = "none",
	  .help = "serve only these uids (comma-separated numbers or\n"
		  "user names) besides the daemon's own; with\n"
		  "--allow-gid, either list admits (default: any\n"
		  "peer that can open the socket)" },
	{ .name = "allow-gid", .arg = "LIST", .type = T_GIDS,
	  FIELD(uint32_t, allow_gid[0]), .n_off = offsetof(kvs_config, n_allow_gid),
	  .unset = "none",
	  .help = "serve peers whose primary or supplementary group\n"
		  "is listed (numbers or group names)" },
	{ .name = "admin-uid", .arg = "LIST", .type = T_UIDS,
	  FIELD(uint32_t, admin_uid[0]), .n_off = offsetof(kvs_config, n_admin_uid),
	  .unset = "none",
	  .help = "operators besides the daemon's own uid and root\n"
		  "(numbers or user names): always served, they list,\n"
		  "inspect, evict, pin and watch every namespace;\n"
		  "other peers only their own domain's" },
	{ .name = "eviction-policy", .arg = "P", .type = T_POLICY,
	  STRFIELD(policy), .why = "unknown policy",
	  .help = "how blocks leave a full tier: {list} (default {})" },
	{ .name = "metrics-addr", .arg = "ADDR", .type = T_STR,
	  STRFIELD(metrics_addr), .why = "empty or too long", .unset = "off",
	  .help = "serve Prometheus /metrics on HOST:PORT, or PORT on\n"
		  "127.0.0.1 (default off)" },
	{ .name = "metrics-max-connections", .arg = "N", .type = T_U32,
	  FIELD(uint32_t, metrics_max_conns), .min = 1, .max = 4096,
	  .def = "16", .why = "must be a number from 1 to 4096",
	  .help = "/metrics connections open at once; more are\n"
		  "closed at accept, and these fds are kept out of\n"
		  "the clients' (default {})" },
	{ .name = "metrics-timeout", .arg = "S", .type = T_U32,
	  FIELD(uint32_t, metrics_timeout), .min = 1, .max = 3600,
	  .def = "10", .why = "must be seconds from 1 to 3600",
	  .help = "close a /metrics connection S seconds after its\n"
		  "accept, request and reply together (default {})" },
	{ .name = "ssd-dir", .arg = "DIR", .type = T_STR,
	  STRFIELD(ssd_dir), .why = "empty or longer than 255 bytes",
	  .unset = "off",
	  .help = "SSD tier: segment files and index under DIR\n"
		  "(default off; DIR must exist and be writable)" },
	{ .name = "ssd-size", .arg = "SIZE", .type = T_SIZE,
	  FIELD(uint64_t, ssd_bytes), .why = "not a size (e.g. 64G)",
	  .unset = "4 segments",
	  .help = "SSD tier bytes (default 4 segments)" },
	{ .name = "ssd-segment", .arg = "SIZE", .type = T_SIZE,
	  FIELD(uint64_t, ssd_segment_bytes), .min = 64u << 10, .flags = F_4K,
	  .def = "256M", .shift = 20,
	  .why = "must be a multiple of 4K, at least 64K",
	  .help = "SSD segment file bytes, multiple of 4K (default {} MiB)" },
	{ .name = "ssd-admit", .arg = "RULE", .type = T_CHOICE,
	  FIELD(int, ssd_admit_hit), .choices = admit_choices, .def = "all",
	  .why = "must be all or hit",
	  .help = "blocks evicted from RAM that go to SSD: all, or hit\n"
		  "(reused: hit at least once, or judged reused by the\n"
		  "eviction policy) (default {})" },
	{ .name = "ssd-write-through", .type = T_BOOL,
	  FIELD(int, ssd_write_through), .def = "false",
	  .why = "must be true or false",
	  .help = "commit also writes blocks to SSD" },
	{ .name = "ssd-queue-depth", .arg = "N", .type = T_U32,
	  FIELD(uint32_t, ssd_queue_depth), .min = 1, .max = 4096,
	  .def = "32", /* the segment store's own default */
	  .why = "must be a number from 1 to 4096",
	  .help = "SSD reads and writes in the kernel at once, 1..4096\n"
		  "(default {})" },
	{ .name = "ssd-error-retry", .arg = "S", .type = T_U32,
	  FIELD(uint32_t, ssd_error_retry), .max = 3600, .def = "1",
	  .why = "must be seconds from 0 (never) to 3600",
	  .help = "after an SSD I/O error or a full filesystem, try\n"
		  "demotion again in S seconds, doubling after each\n"
		  "failed try up to 300; 0: off until restart\n"
		  "(default {})" },
	{ .name = "remote", .arg = "HOST:PORT,...", .type = T_STR,
	  STRFIELD(remote_seeds), .why = "empty or longer than 1023 bytes",
	  .unset = "off",
	  .help = "remote tier: seed nodes of a Redis Cluster, or one\n"
		  "Redis/Valkey node, shared with other daemons\n"
		  "(default off; docs/remote.md)" },
	{ .name = "remote-auth-file", .arg = "FILE", .type = T_STR,
	  STRFIELD(remote_auth_file), .why = "empty or longer than 255 bytes",
	  .unset = "none",
	  .help = "AUTH for the remote tier: FILE holds \"user password\"\n"
		  "(or the password alone) on its first line" },
	{ .name = "remote-secret-file", .arg = "FILE", .type = T_STR,
	  STRFIELD(remote_secret_file), .why = "empty or longer than 255 bytes",
	  .unset = "none (values not authenticated)",
	  .help = "the remote tier's value MAC key: FILE\n"
		  "holds 16 to 4095 bytes shared by the daemons that\n"
		  "may publish (e.g. openssl rand -hex 32; chmod 600)" },
	{ .name = "remote-mac", .arg = "MAC", .type = T_CHOICE,
	  FIELD(int, remote_mac_hmac), .choices = remote_mac_choices,
	  .def = "poly1305", .why = "must be poly1305 or hmac",
	  .help = "the MAC of the values published: poly1305, or hmac\n"
		  "(the old format, while daemons of a cluster are being\n"
		  "upgraded); both are read (default {})" },
	{ .name = "remote-pin-share", .arg = "PERCENT", .type = T_U32,
	  FIELD(uint32_t, remote_pin_share), .max = 100, .def = "25",
	  .why = "must be a percentage from 0 to 100",
	  .help = "--remote-write through: share of the host tier that\n"
		  "blocks waiting for their SET may hold pinned; past it\n"
		  "a block is sent from a copy (default {})" },
	{ .name = "remote-write", .arg = "WHEN", .type = T_CHOICE,
	  FIELD(int, remote_write_through), .choices = remote_write_choices,
	  .def = "demote", .why = "must be demote or through",
	  .help = "publish a block to the remote tier when the host\n"
		  "tier evicts it (demote) or when it is committed\n"
		  "(through) (default {})" },
	{ .name = "remote-timeout", .arg = "MS", .type = T_U32,
	  FIELD(uint32_t, remote_timeout_ms), .min = 1, .max = 3600000,
	  .def = "1000", .why = "must be milliseconds from 1 to 3600000",
	  .help = "a remote request that takes longer is a miss\n"
		  "(default {})" },
	{ .name = "remote-tls", .type = T_BOOL,
	  FIELD(int, remote_tls), .def = "false",
	  .why = "must be true or false",
	  .help = "TLS to the remote tier's nodes: each one's certificate\n"
		  "is verified before anything is sent (docs/remote.md)" },
	{ .name = "remote-tls-ca", .arg = "FILE", .type = T_STR,
	  STRFIELD(remote_tls_ca), .why = "empty or longer than 255 bytes",
	  .unset = "the system's CA store",
	  .help = "PEM CA certificates that sign the nodes' certificates" },
	{ .name = "remote-tls-cert", .arg = "FILE", .type = T_STR,
	  STRFIELD(remote_tls_cert), .why = "empty or longer than 255 bytes",
	  .unset = "none",
	  .help = "PEM client certificate for mutual TLS (with\n"
		  "--remote-tls-key)" },
	{ .name = "remote-tls-key", .arg = "FILE", .type = T_STR,
	  STRFIELD(remote_tls_key), .why = "empty or longer than 255 bytes",
	  .unset = "none",
	  .help = "PEM private key of --remote-tls-cert" },
	{ .name = "remote-tls-server-name", .arg = "NAME", .type = T_STR,
	  STRFIELD(remote_tls_server_name), .why = "empty or longer than 255 bytes",
	  .unset = "each node's host",
	  .help = "the name every node's certificate must show (and the\n"
		  "SNI sent); default: the host of the seed or node, an\n"
		  "IP address checked against the IP SANs" },
	{ .name = "remote-query-timeout", .arg = "MS", .type = T_U32,
	  FIELD(uint32_t, remote_query_timeout_ms), .min = 1, .max = 3600000,
	  .def = "20", .why = "must be milliseconds from 1 to 3600000",
	  .help = "a scheduler's query (no fetch) waits at most this\n"
		  "long for the cluster, then answers what is known\n"
		  "(default {}; --remote-timeout if smaller)" },
	{ .name = "gpu", .arg = "auto|off|N", .type = T_GPU,
	  FIELD(int, gpu), .def = "auto",
	  .why = "must be auto, off or a device number",
	  .help = "GPU tier on device N, on the first usable device\n"
		  "(auto), or off (default auto; N unusable is an error)" },
	{ .name = "gpu-size", .arg = "SIZE", .type = T_SIZE,
	  FIELD(uint64_t, gpu_bytes), .def = "1G", .shift = 20,
	  .why = "not a size (e.g. 8G)",
	  .help = "GPU tier bytes, rounded up to the device's\n"
		  "allocation granularity (default {} MiB)" },
	{ .name = "max-pinned-share", .arg = "PERCENT", .type = T_U32,
	  FIELD(uint32_t, max_pinned_share), .max = 100, .def = "50",
	  .why = "must be a percentage from 0 to 100",
	  .help = "share of the host tier that kvsctl pin\n"
		  "may hold (default {})" },
	{ .name = "watch-buffer", .arg = "SIZE", .type = T_SIZE,
	  FIELD(uint64_t, watch_buffer), .min = 4096, .flags = F_HALF_OUTBUF,
	  .def = "1M", .shift = 10,
	  .why = "must be a size from 4K to half the reply backlog limit",
	  .help = "unsent event bytes per kvsctl watch before\n"
		  "events are dropped (default {} KiB)" },
	{ .name = "kv-events", .arg = "ENDPOINT", .type = T_STR,
	  STRFIELD(kv_events), .why = "empty or too long", .unset = "off",
	  .help = "publish the pool as vLLM KV events on a ZMQ PUB\n"
		  "socket: tcp://*:PORT or ipc://PATH (default off)" },
	{ .name = "kv-events-replay", .arg = "ENDPOINT", .type = T_STR,
	  STRFIELD(kv_events_replay), .why = "empty or too long",
	  .unset = "off", .help = "their replay ROUTER socket (default off)" },
	{ .name = "kv-events-topic", .arg = "TOPIC", .type = T_STR,
	  STRFIELD(kv_events_topic), .why = "empty or too long",
	  .unset = "none", .help = "their topic frame (default empty)" },
	{ .name = "kv-events-buffer", .arg = "SIZE", .type = T_SIZE,
	  FIELD(uint64_t, kv_events_buffer), .min = 4096, .def = "64M",
	  .shift = 20, .why = "must be a size of at least 4K",
	  .help = "bytes of event batches kept for replay\n"
		  "(default {} MiB)" },
	{ .name = "tenant-arenas", .arg = "off|uid", .type = T_CHOICE,
	  FIELD(int, tenant_arenas), .choices = tenant_choices, .def = "off",
	  .why = "must be off or uid",
	  .help = "uid: one host arena per client uid, so\n"
		  "tenants never map each other's KV (default off:\n"
		  "one arena for all; uid needs no --ssd-dir, no --gpu N)" },
	{ .name = "tenant-size", .arg = "SIZE", .type = T_SIZE,
	  FIELD(uint64_t, tenant_bytes), .why = "not a size (e.g. 2G)",
	  .unset = "host-size / max-tenants",
	  .help = "host bytes of each tenant arena (default\n"
		  "--host-size / --max-tenants)" },
	{ .name = "max-tenants", .arg = "N", .type = T_U32,
	  FIELD(uint32_t, max_tenants), .min = 1, .max = 1024, .def = "8",
	  .why = "must be a number from 1 to 1024",
	  .help = "tenant arenas at most; a further uid is refused\n"
		  "(default {})" },
	{ .name = "persist", .arg = "on|off", .type = T_CHOICE,
	  FIELD(int, persist), .choices = persist_choices, .def = "on",
	  .why = "must be on or off",
	  .help = "on: the host tier outlives the daemon (a metadata\n"
		  "memfd describes every committed block; a restart\n"
		  "or hand-over serves them again); off: none of it,\n"
		  "every start is cold (default {})" },
	{ .name = "config", .arg = "FILE", .type = T_ACTION,
	  .help = "read settings from FILE first (key = value, keys\n"
		  "named as these flags); flags win over the file" },
	{ .name = "print-config", .type = T_ACTION,
	  .help = "print the effective configuration and exit" },
	{ .name = "help", .type = T_ACTION, .help = "this text" },
	{ .name = "version", .type = T_ACTION, .help = "print the version" },
};

#define N_SETTINGS (sizeof(config_settings) / sizeof(config_settings[0]))
const size_t config_n_settings = N_SETTINGS;
/* getopt_long's value of config_settings[i] is OPT_BASE + i, past every
 * char. */
#define OPT_BASE 256

static const struct setting *setting_named(const char *name)
{
	for (size_t i = 0; i < N_SETTINGS; i++)
		if (strcmp(config_settings[i].name, name) == 0)
			return &config_settings[i];
	return NULL;
}

static void put_uint(kvs_config *cfg, const struct setting *s, uint64_t v)
{
	void *p = config_field(cfg, s);

	if (s->size == sizeof(uint32_t))
		*(uint32_t *)p = (uint32_t)v;
	else
		*(uint64_t *)p = v;
}

static int size_ok(const kvs_config *cfg, const struct setting *s, uint64_t v)
{
	uint64_t max = s->max ? s->max
			      : s->size == sizeof(uint32_t) ? UINT32_MAX : UINT64_MAX;

	if (v < s->min || v > max)
		return 0;
	if ((s->flags & F_POW2) && (v & (v - 1)))
		return 0;
	if ((s->flags & F_4K) && (v & 4095))
		return 0;
	if ((s->flags & F_HALF_OUTBUF) && v > cfg->max_outbuf / 2)
		return 0;
	return 1;
}

/* Apply one setting; returns NULL or why @val is refused. @val NULL: a
 * flag given without its value (T_BOOL only). */
static const char *set_value(kvs_config *cfg, const struct setting *s,
			     const char *val)
{
	size_t n = val ? strlen(val) : 0;
	void *p = config_field(cfg, s);
	uint64_t size;
	uint32_t u;
	int v;

	/* What --print-config writes must read back the same: no control
	 * characters, no blanks at either end (a file trims them). */
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)val[i] < 0x20 || val[i] == 0x7f)
			return "contains a control character";
	if (n && (val[0] == ' ' || val[n - 1] == ' '))
		return "starts or ends with a blank";

	switch (s->type) {
	case T_STR:
		if (!n || n >= s->size)
			return s->why;
		strcpy(p, val);
		return NULL;
	case T_POLICY:
		if (!kvs_policy_known(val) || n >= s->size)
			return s->why;
		strcpy(p, val);
		return NULL;
	case T_SIZE:
		if (kvs_parse_size(val, &size) < 0 || !size_ok(cfg, s, size))
			return s->why;
		put_uint(cfg, s, size);
		return NULL;
	case T_U32:
		if (config_parse_u32(val, (uint32_t)s->min, &u) < 0 ||
		    !size_ok(cfg, s, u))
			return s->why;
		put_uint(cfg, s, u);
		return NULL;
	case T_FD:
		if (config_parse_u32(val, 0, &u) < 0 || u > INT32_MAX)
			return s->why;
		*(int *)p = (int)u;
		return NULL;
	case T_MODE:
		return config_parse_mode(val, p) < 0 ? s->why : NULL;
	case T_LEVEL:
		return kvs_log_level_parse(val, p) < 0 ? s->why : NULL;
	case T_CHOICE:
		for (v = 0; s->choices[v]; v++)
			if (strcmp(val, s->choices[v]) == 0) {
				*(int *)p = v;
				return NULL;
			}
		return s->why;
	case T_BOOL:
		if (config_parse_bool(val, &v) < 0)
			return s->why;
		*(int *)p = v;
		return NULL;
	case T_GPU:
		if (strcmp(val, "auto") == 0)
			*(int *)p = KVS_GPU_AUTO;
		else if (strcmp(val, "off") == 0)
			*(int *)p = KVS_GPU_OFF;
		else if (config_parse_u32(val, 0, &u) < 0 || u > 1023)
			return s->why;
		else
			*(int *)p = (int)u;
		return NULL;
	case T_UIDS:
	case T_GIDS:
		return config_parse_ids(val, s->type == T_GIDS, p,
				 (uint32_t *)((char *)cfg + s->n_off));
	case T_ACTION:
		break;
	}
	return "not a setting";
}

const char *kvs_config_set(kvs_config *cfg, const char *key, const char *val)
{
	const struct setting *s = setting_named(key);

	if (!s || s->type == T_ACTION)
		return "unknown key";
	return set_value(cfg, s, val);
}

int kvs_config_defaults(kvs_config *cfg)
{
	uint64_t avail = config_mem_available();
	int rc;

	memset(cfg, 0, sizeof(*cfg));
	cfg->max_outbuf = DEFAULT_MAX_OUTBUF;
	for (size_t i = 0; i < N_SETTINGS; i++)
		if (config_settings[i].def &&
		    set_value(cfg, &config_settings[i], config_settings[i].def))
			return -EINVAL; /* a bad table: test_config says which */
	/* Defaults that are not constants. */
	rc = kvs_default_socket_path(cfg->socket_path, sizeof(cfg->socket_path));
	if (rc < 0)
		return rc;
	/* A quarter of what is free leaves room for the workers themselves. */
	cfg->host_bytes = avail ? avail / 4 : FALLBACK_HOST_BYTES;
	cfg->host_bytes &= ~(uint64_t)(cfg->page_bytes - 1);
	if (cfg->host_bytes < cfg->page_bytes)
		cfg->host_bytes = cfg->page_bytes;
	strcpy(cfg->policy, kvs_policy_name_at(0));
	cfg->ready_fd = -1;
	return 0;
}

#define HUGE_PAGE (2u << 20) /* --host-hugepages: the arena's pages */

/* What an arena's size is a multiple of: the slot page, and with
 * --host-hugepages the huge page too (both powers of two). */
static uint64_t arena_unit(const kvs_config *cfg)
{
	return cfg->host_hugepages && cfg->page_bytes < HUGE_PAGE ? HUGE_PAGE
								  : cfg->page_bytes;
}

uint64_t kvs_config_host_bytes(const kvs_config *cfg)
{
	return cfg->host_bytes & ~(arena_unit(cfg) - 1);
}

uint64_t kvs_config_tenant_bytes(const kvs_config *cfg)
{
	uint64_t b = cfg->tenant_bytes;

	if (!b && cfg->max_tenants)
		b = cfg->host_bytes / cfg->max_tenants;
	return b & ~(arena_unit(cfg) - 1);
}

static int bad(const char *flag, const char *val, const char *why)
{
	fprintf(stderr, "kvshared: %s '%s': %s (see kvshared --help)\n", flag,
		val ? val : "", why);
	return KVS_E_CONFIG;
}

/* Rules between settings: the one place they are checked, once every
 * setting is read (so that the order of flags and lines does not matter). */
static int check_rules(const kvs_config *cfg)
{
	if (cfg->host_bytes < cfg->page_bytes)
		return bad("--host-size", "", "smaller than one page");
	if (kvs_config_host_bytes(cfg) == 0)
		return bad("--host-size", "", "smaller than one 2 MiB huge page "
			   "(--host-hugepages)");
	/* Per-uid arenas with tiers shared by every domain would let one
	 * tenant's blocks reach another's arena: not built, so refused. (The
	 * server turns --gpu auto off under them, for the same reason.) */
	if (cfg->tenant_arenas && cfg->ssd_dir[0])
		return bad("--tenant-arenas", "uid", "not supported yet with "
			   "--ssd-dir (the SSD tier is not per tenant)");
	if (cfg->tenant_arenas && cfg->gpu >= 0)
		return bad("--tenant-arenas", "uid", "not supported yet with "
			   "--gpu N (the GPU tier is not per tenant; use --gpu off)");
	/* Anyone who can write to the cluster can write any key: it is one
	 * trust domain, like one arena, so it cannot serve per-uid ones. */
	if (cfg->tenant_arenas && cfg->remote_seeds[0])
		return bad("--tenant-arenas", "uid", "not supported with --remote "
			   "(the cluster is one trust domain; keys are not scoped "
			   "per tenant)");
	if (cfg->tenant_arenas && cfg->kv_events[0])
		return bad("--tenant-arenas", "uid", "not supported with "
			   "--kv-events (the stream tells every tenant's blocks)");
	if (cfg->kv_events_replay[0] && !cfg->kv_events[0])
		return bad("--kv-events-replay", cfg->kv_events_replay,
			   "needs --kv-events");
	if (cfg->kv_events_topic[0] && !cfg->kv_events[0])
		return bad("--kv-events-topic", cfg->kv_events_topic,
			   "needs --kv-events");
	if (cfg->remote_auth_file[0] && !cfg->remote_seeds[0])
		return bad("--remote-auth-file", cfg->remote_auth_file,
			   "needs --remote");
	if (cfg->remote_secret_file[0] && !cfg->remote_seeds[0])
		return bad("--remote-secret-file", cfg->remote_secret_file,
			   "needs --remote");
	if (cfg->remote_tls && !cfg->remote_seeds[0])
		return bad("--remote-tls", "true", "needs --remote");
	if (!cfg->remote_tls && cfg->remote_tls_ca[0])
		return bad("--remote-tls-ca", cfg->remote_tls_ca, "needs --remote-tls");
	if (!cfg->remote_tls && (cfg->remote_tls_cert[0] || cfg->remote_tls_key[0]))
		return bad("--remote-tls-cert", cfg->remote_tls_cert, "needs --remote-tls");
	if (!cfg->remote_tls && cfg->remote_tls_server_name[0])
		return bad("--remote-tls-server-name", cfg->remote_tls_server_name,
			   "needs --remote-tls");
	if (!cfg->remote_tls_cert[0] != !cfg->remote_tls_key[0])
		return bad(cfg->remote_tls_cert[0] ? "--remote-tls-cert" : "--remote-tls-key",
			   cfg->remote_tls_cert[0] ? cfg->remote_tls_cert : cfg->remote_tls_key,
			   "needs --remote-tls-key and --remote-tls-cert both");
	if (cfg->tenant_arenas && kvs_config_tenant_bytes(cfg) < cfg->page_bytes)
		return bad("--tenant-size", "", "a tenant arena is smaller than "
			   "one page (--host-size / --max-tenants, or --tenant-size, "
			   "2 MiB with --host-hugepages)");
	return 0;
}

/* getopt_long's options, made from config_settings[]. */
static const struct option *long_options(void)
{
	static struct option opts[N_SETTINGS + 1];

	if (opts[0].name)
		return opts;
	for (size_t i = 0; i < N_SETTINGS; i++) {
		const struct setting *s = &config_settings[i];

		opts[i].name = s->name;
		opts[i].has_arg = s->arg ? required_argument
			: s->type == T_BOOL ? optional_argument : no_argument;
		opts[i].val = OPT_BASE + (int)i;
	}
	return opts;
}

int kvs_config_parse_args(kvs_config *cfg, int argc, char **argv)
{
	const struct option *opts = long_options();
	kvs_config defaults = *cfg;
	int c, print = 0, rc;

	/* The file first, wherever --config stands, so that flags win.
	 * optind = 0 resets glibc's getopt fully (1 keeps cluster state). */
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c >= OPT_BASE && strcmp(config_settings[c - OPT_BASE].name, "config") == 0 &&
		    (rc = kvs_config_load_file(cfg, optarg)) < 0)
			return rc;
	}
	optind = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		const struct setting *s;
		const char *why;

		if (c == '?' || c == ':') {
			/* optopt is set for a long option missing its value (its
			 * val) and for an unknown short one (the letter). */
			if (optopt >= OPT_BASE)
				return bad("option", argv[optind - 1], "needs a value");
			if (optopt) {
				char flag[3] = { '-', (char)optopt, 0 };

				return bad("option", flag, "unknown option");
			}
			return bad("option", argv[optind - 1], "unknown option");
		}
		s = &config_settings[c - OPT_BASE];
		if (s->type != T_ACTION) {
			why = set_value(cfg, s, optarg);
			if (why) {
				char flag[64];

				snprintf(flag, sizeof(flag), "--%s", s->name);
				return bad(flag, optarg, why);
			}
		} else if (strcmp(s->name, "print-config") == 0) {
			print = 1;
		} else if (strcmp(s->name, "help") == 0) {
			kvs_config_usage(stdout, &defaults);
			return 1;
		} else if (strcmp(s->name, "version") == 0) {
			printf("kvshared %d.%d\n", KVSHARE_VERSION_MAJOR,
			       KVSHARE_VERSION_MINOR);
			return 1;
		}
	}
	if (optind < argc)
		return bad("argument", argv[optind], "unexpected");
	rc = check_rules(cfg);
	if (rc < 0)
		return rc;
	if (print) {
		kvs_config_print(stdout, cfg);
		return 1;
	}
	return 0;
}
