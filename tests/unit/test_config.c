/*
 * test_config - the daemon's configuration: size parsing, every flag, the
 * errors a bad flag gives, and the embedded defaults.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvs_check.h"
#include "kvs_config.h"
#include "kvs_types.h"

static int parse(kvs_config *cfg, const char *a1, const char *a2)
{
	char *argv[] = { "kvshared", (char *)a1, (char *)a2, NULL };

	kvs_config_defaults(cfg);
	return kvs_config_parse_args(cfg, a2 ? 3 : 2, argv);
}

/* --host-size against /proc/meminfo: past RAM + swap refused, past what is
 * available a warning, and a meminfo without MemTotal says nothing. */
static void memory_checks(void)
{
	static const char mi[] = "MemTotal:        8388608 kB\n"
				 "MemFree:         1048576 kB\n"
				 "MemAvailable:    4194304 kB\n"
				 "SwapTotal:       2097152 kB\n";
	kvs_config cfg;
	char why[256] = "";

	CHECK(kvs_config_defaults(&cfg) == 0);
	cfg.host_bytes = 4ull << 30; /* exactly what is available */
	CHECK_EQ(kvs_config_memory_check(&cfg, mi, why, sizeof(why)), 0);
	cfg.host_bytes += 4096;
	CHECK_EQ(kvs_config_memory_check(&cfg, mi, why, sizeof(why)), 1);
	CHECK(strstr(why, "available now (4.0 GiB of 8.0 GiB RAM, 2.0 GiB swap)") != NULL);
	cfg.host_bytes = 10ull << 30; /* RAM + swap: still a warning */
	CHECK_EQ(kvs_config_memory_check(&cfg, mi, why, sizeof(why)), 1);
	cfg.host_bytes += 4096;
	CHECK_EQ(kvs_config_memory_check(&cfg, mi, why, sizeof(why)), KVS_E_CONFIG);
	CHECK(strstr(why, "more than this machine's memory (RAM 8.0 GiB + swap 2.0 GiB)") != NULL);
	CHECK_EQ(kvs_config_memory_check(&cfg, "MemFree: 1 kB\n", why, sizeof(why)), 0);
	/* Huge pages: their pool is reserved at start, not counted available. */
	cfg.host_bytes = 6ull << 30;
	cfg.host_hugepages = 1;
	CHECK_EQ(kvs_config_memory_check(&cfg, mi, why, sizeof(why)), 0);
	cfg.host_bytes = 11ull << 30;
	CHECK_EQ(kvs_config_memory_check(&cfg, mi, why, sizeof(why)), KVS_E_CONFIG);
	/* The machine's own: a quarter of what is free fits. */
	CHECK(kvs_config_defaults(&cfg) == 0);
	CHECK_EQ(kvs_config_memory_check(&cfg, NULL, why, sizeof(why)), 0);
}

/* kvs_parse_size: suffixes, fractions, and the values it refuses. */
static void cfg_sizes(void)
{
	uint64_t v;

	CHECK(kvs_parse_size("123", &v) == 0 && v == 123);
	CHECK(kvs_parse_size("64K", &v) == 0 && v == 65536);
	CHECK(kvs_parse_size("1.5G", &v) == 0 && v == 3ull << 29);
	CHECK(kvs_parse_size("2GiB", &v) == 0 && v == 2ull << 30);
	CHECK(kvs_parse_size("512MB", &v) == 0 && v == 512ull << 20);
	CHECK(kvs_parse_size("1t", &v) == 0 && v == 1ull << 40);
	CHECK_EQ(kvs_parse_size("", &v), -EINVAL);
	CHECK_EQ(kvs_parse_size("-1G", &v), -EINVAL);
	CHECK_EQ(kvs_parse_size("0", &v), -EINVAL);
	CHECK_EQ(kvs_parse_size("12X", &v), -EINVAL);
	CHECK_EQ(kvs_parse_size("G", &v), -EINVAL);
	CHECK_EQ(kvs_parse_size("99999999999T", &v), -ERANGE);
}

/* What kvs_config_defaults sets. */
static void cfg_defaults(kvs_config *cfg)
{
	CHECK(kvs_config_defaults(cfg) == 0);
	CHECK(strstr(cfg->socket_path, "kvshared.sock") != NULL);
	CHECK(cfg->host_bytes >= 64 * 1024);
	CHECK_EQ(cfg->page_bytes, 65536);
	CHECK_EQ(cfg->ready_fd, -1);
	/* The settings table's defaults (config.c), each read as a value. */
	CHECK_EQ(cfg->log_level, KVS_LOG_INFO);
	CHECK_EQ(cfg->max_clients, 1024);
	CHECK_EQ(cfg->max_leases, 4096);
	CHECK_EQ(cfg->ssd_segment_bytes, 256ull << 20);
	CHECK_EQ(cfg->ssd_queue_depth, 32);
	CHECK_EQ(cfg->ssd_error_retry, 1);
	CHECK_EQ(cfg->ssd_admit_hit, 0);
	CHECK_EQ(cfg->ssd_write_through, 0);
	CHECK_EQ(cfg->gpu, KVS_GPU_AUTO);
	CHECK_EQ(cfg->gpu_bytes, 1ull << 30);
	CHECK_EQ(cfg->max_pinned_share, 50);
	CHECK_EQ(cfg->watch_buffer, 1u << 20);
	CHECK_EQ(cfg->tenant_arenas, 0);
	CHECK_EQ(cfg->max_tenants, 8);
	CHECK_EQ(cfg->persist, 1);
	CHECK(cfg->ssd_dir[0] == '\0' && cfg->metrics_addr[0] == '\0');
	CHECK_EQ(cfg->metrics_max_conns, 16);
	CHECK_EQ(cfg->metrics_timeout, 10);
}

/* kvs_config_set: by key; actions are not settings; a refusal keeps the old
 * value. */
static void cfg_set_by_key(kvs_config *cfg)
{
	CHECK(kvs_config_set(cfg, "max-tenants", "3") == NULL);
	CHECK_EQ(cfg->max_tenants, 3);
	CHECK(kvs_config_set(cfg, "max-tenants", "0") != NULL);
	CHECK_EQ(cfg->max_tenants, 3);
	CHECK(kvs_config_set(cfg, "ssd-write-through", NULL) == NULL);
	CHECK_EQ(cfg->ssd_write_through, 1);
	CHECK(strcmp(kvs_config_set(cfg, "help", NULL), "unknown key") == 0);
	CHECK(strcmp(kvs_config_set(cfg, "colour", "blue"), "unknown key") == 0);
	kvs_config_defaults(cfg);
}

/* The basic flags, as "--flag value" and as "--flag=value". */
static void cfg_flags(kvs_config *cfg)
{
	CHECK_EQ(parse(cfg, "--persist", "off"), 0);
	CHECK_EQ(cfg->persist, 0);
	CHECK_EQ(parse(cfg, "--persist=on", NULL), 0);
	CHECK_EQ(cfg->persist, 1);
	CHECK_EQ(parse(cfg, "--persist", "maybe"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--host-size", "256M"), 0);
	CHECK_EQ(cfg->host_bytes, 256ull << 20);
	CHECK_EQ(parse(cfg, "--host-size=1G", NULL), 0);
	CHECK_EQ(cfg->host_bytes, 1ull << 30);
	CHECK_EQ(parse(cfg, "--socket", "/tmp/x.sock"), 0);
	CHECK(strcmp(cfg->socket_path, "/tmp/x.sock") == 0);
	CHECK_EQ(parse(cfg, "--page-size", "4K"), 0);
	CHECK_EQ(cfg->page_bytes, 4096);
	CHECK_EQ(parse(cfg, "--log-level", "debug"), 0);
	CHECK_EQ(cfg->log_level, KVS_LOG_DEBUG);
	CHECK_EQ(parse(cfg, "--ready-fd", "7"), 0);
	CHECK_EQ(cfg->ready_fd, 7);
	CHECK_EQ(parse(cfg, "--max-clients", "3"), 0);
	CHECK_EQ(cfg->max_clients, 3);
	CHECK_EQ(parse(cfg, "--max-leases", "9"), 0);
	CHECK_EQ(cfg->max_leases, 9);
}

/* The limits and who may connect: their defaults, then each set. */
static void cfg_access_flags(kvs_config *cfg)
{
	CHECK_EQ(cfg->max_pinned_blocks, 65536); /* defaults */
	CHECK_EQ(cfg->client_timeout, 60);
	CHECK_EQ(cfg->socket_mode, 0600);
	CHECK_EQ(cfg->n_allow_uid, 0);
	CHECK_EQ(cfg->n_allow_gid, 0);
	CHECK_EQ(parse(cfg, "--max-pinned-blocks", "100"), 0);
	CHECK_EQ(cfg->max_pinned_blocks, 100);
	CHECK_EQ(parse(cfg, "--client-timeout", "0"), 0);
	CHECK_EQ(cfg->client_timeout, 0);
	CHECK_EQ(parse(cfg, "--socket-mode", "0660"), 0);
	CHECK_EQ(cfg->socket_mode, 0660);
	CHECK_EQ(parse(cfg, "--socket-mode", "666"), 0);
	CHECK_EQ(cfg->socket_mode, 0666);
	CHECK_EQ(parse(cfg, "--allow-uid", "0,65534,root"), 0);
	CHECK_EQ(cfg->n_allow_uid, 3);
	CHECK_EQ(cfg->allow_uid[1], 65534);
	CHECK_EQ(cfg->allow_uid[2], 0); /* root by name */
	{
		/* A later setting replaces the list. */
		char *argv[] = { "kvshared", "--allow-uid", "1,2", "--allow-uid",
				 "7", NULL };

		kvs_config_defaults(cfg);
		CHECK_EQ(kvs_config_parse_args(cfg, 5, argv), 0);
		CHECK_EQ(cfg->n_allow_uid, 1);
		CHECK_EQ(cfg->allow_uid[0], 7);
		CHECK_EQ(cfg->allow_uid[1], 0);
	}
	CHECK_EQ(parse(cfg, "--allow-gid", "0,12"), 0);
	CHECK_EQ(cfg->n_allow_gid, 2);
	CHECK_EQ(parse(cfg, "--admin-uid", "1001,root"), 0);
	CHECK_EQ(cfg->n_admin_uid, 2);
	CHECK_EQ(cfg->admin_uid[0], 1001);
	CHECK_EQ(cfg->admin_uid[1], 0);
}

static void cfg_policy_flag(kvs_config *cfg)
{
	CHECK(strcmp(cfg->policy, "leaf-learn") == 0); /* the default */
	CHECK_EQ(parse(cfg, "--eviction-policy", "lru"), 0);
	CHECK(strcmp(cfg->policy, "lru") == 0);
}

/* Values each flag refuses (their messages on stderr are expected). */
static void cfg_bad_values(kvs_config *cfg)
{
	fprintf(stderr, "test_config: the next lines are expected errors:\n");
	CHECK_EQ(parse(cfg, "--eviction-policy", "random"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--host-size", "lots"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--page-size", "3000"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--page-size", "96K"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--log-level", "loud"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--max-clients", "0"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--ready-fd", "x"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--max-pinned-blocks", "0"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--client-timeout", "-1"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--client-timeout", "86401"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--metrics-max-connections", "0"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--metrics-max-connections", "4097"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--metrics-timeout", "0"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--kv-events", "ipc:///run/kv"), 0);
	CHECK(strcmp(cfg->kv_events, "ipc:///run/kv") == 0);
	CHECK_EQ(cfg->kv_events_buffer, 64ull << 20);
	CHECK_EQ(parse(cfg, "--kv-events-replay", "tcp://*:5558"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--kv-events-topic", "kv@"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--kv-events-buffer", "1K"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--metrics-timeout", "3601"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--socket-mode", "0644x"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--socket-mode", "0400"), KVS_E_CONFIG); /* owner rw */
	CHECK_EQ(parse(cfg, "--socket-mode", "01777"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--socket-mode", "0990"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--allow-uid", "1,,2"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--allow-uid", "1,"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--allow-uid", "4294967295"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--allow-uid", "no-such-user-kvs"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--allow-gid", "no-such-group-kvs"), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--admin-uid", "no-such-user-kvs"), KVS_E_CONFIG);
	CHECK_EQ(cfg->n_allow_uid, 0); /* a refused list sets nothing */
	CHECK_EQ(parse(cfg, "--bogus", NULL), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--socket", NULL), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "extra", NULL), KVS_E_CONFIG);
	CHECK_EQ(parse(cfg, "--host-size", "1K"), KVS_E_CONFIG); /* < a page */
}

/* --remote-tls: its files need it, a certificate its key, it --remote. */
static void cfg_remote_tls(kvs_config *cfg)
{
	char *ok[] = { "kvshared", "--remote", "h:1", "--remote-tls",
		       "--remote-tls-cert", "c.pem", "--remote-tls-key", "k.pem",
		       "--remote-tls-server-name", "redis.internal", NULL };
	char *nokey[] = { "kvshared", "--remote", "h:1", "--remote-tls",
			  "--remote-tls-cert", "c.pem", NULL };
	char *notls[] = { "kvshared", "--remote", "h:1", "--remote-tls-ca",
			  "ca.pem", NULL };
	char *noremote[] = { "kvshared", "--remote-tls", NULL };

	kvs_config_defaults(cfg);
	CHECK_EQ(kvs_config_parse_args(cfg, 10, ok), 0);
	CHECK_EQ(cfg->remote_tls, 1);
	CHECK(!strcmp(cfg->remote_tls_cert, "c.pem"));
	CHECK(!strcmp(cfg->remote_tls_server_name, "redis.internal"));
	kvs_config_defaults(cfg);
	CHECK_EQ(kvs_config_parse_args(cfg, 6, nokey), KVS_E_CONFIG);
	kvs_config_defaults(cfg);
	CHECK_EQ(kvs_config_parse_args(cfg, 5, notls), KVS_E_CONFIG);
	kvs_config_defaults(cfg);
	CHECK_EQ(kvs_config_parse_args(cfg, 2, noremote), KVS_E_CONFIG);
}

/* Config files: the flags' names as keys; errors name the line. */
static void cfg_file(kvs_config *cfg)
{
	const char *good = "# comment\n; comment\n[kvshared]\n"
			   "host-size = 128M\r\n  eviction-policy=lru  \n\n"
			   "max-clients = 7\nsocket-mode = 0660\n"
			   "allow-uid = 0,65534\nallow-gid = 5\n"
			   "admin-uid = 1001\n"
			   "client-timeout = 3\nmax-pinned-blocks = 9\n";
	char *printed = NULL;
	size_t plen = 0;
	kvs_config again;
	FILE *f;

	kvs_config_defaults(cfg);
	CHECK_EQ(kvs_config_parse_text(cfg, good, strlen(good), "t"), 0);
	CHECK_EQ(cfg->host_bytes, 128ull << 20);
	CHECK(strcmp(cfg->policy, "lru") == 0);
	CHECK_EQ(cfg->max_clients, 7);
	CHECK_EQ(cfg->socket_mode, 0660);
	CHECK_EQ(cfg->n_allow_uid, 2);
	CHECK_EQ(cfg->allow_gid[0], 5);
	CHECK_EQ(cfg->n_admin_uid, 1);
	CHECK_EQ(cfg->admin_uid[0], 1001);
	CHECK_EQ(cfg->client_timeout, 3);
	CHECK_EQ(cfg->max_pinned_blocks, 9);
	/* --print-config's output is a config file giving the same. */
	f = open_memstream(&printed, &plen);
	kvs_config_print(f, cfg);
	fclose(f);
	kvs_config_defaults(&again);
	CHECK_EQ(kvs_config_parse_text(&again, printed, plen, "printed"), 0);
	CHECK(memcmp(&again, cfg, sizeof(*cfg)) == 0);
	free(printed);
	CHECK_EQ(kvs_config_parse_text(cfg, "bogus = 1\n", 10, "t"), KVS_E_CONFIG);
	CHECK_EQ(kvs_config_parse_text(cfg, "host-size = x\n", 14, "t"), KVS_E_CONFIG);
	CHECK_EQ(kvs_config_parse_text(cfg, "[other]\n", 8, "t"), KVS_E_CONFIG);
	CHECK_EQ(kvs_config_parse_text(cfg, "host-size\n", 10, "t"), KVS_E_CONFIG);
	CHECK_EQ(kvs_config_parse_text(cfg, "help = 1\n", 9, "t"), KVS_E_CONFIG);
	CHECK_EQ(kvs_config_parse_text(cfg, "a\0b", 3, "t"), KVS_E_CONFIG);
	CHECK_EQ(kvs_config_parse_text(cfg, "", 0, "t"), 0);
}

/* --host-hugepages: the arenas' sizes rounded down to 2 MiB, under one
 * huge page refused. */
static void cfg_hugepages(kvs_config *cfg)
{
	char *argv[] = { "kvshared", "--host-size", "67M", "--host-hugepages",
			 "--max-tenants", "4", NULL };

	kvs_config_defaults(cfg);
	CHECK_EQ(kvs_config_parse_args(cfg, 4, argv), 0);
	CHECK_EQ(cfg->host_hugepages, 1);
	CHECK_EQ(kvs_config_host_bytes(cfg), 66ull << 20);
	kvs_config_defaults(cfg);
	CHECK_EQ(kvs_config_parse_args(cfg, 6, argv), 0);
	CHECK_EQ(kvs_config_tenant_bytes(cfg), 16ull << 20); /* 16.75M each */
	kvs_config_defaults(cfg);
	CHECK_EQ(kvs_config_parse_args(cfg, 3, argv), 0);  /* without it */
	CHECK_EQ(kvs_config_host_bytes(cfg), 67ull << 20);
	argv[2] = "1M";
	kvs_config_defaults(cfg);
	CHECK_EQ(kvs_config_parse_args(cfg, 4, argv), KVS_E_CONFIG);
}

/* Flags win over the file, wherever --config stands. */
static void cfg_flags_over_file(kvs_config *cfg)
{
	char path[] = "/tmp/test_config.XXXXXX";
	int fd = mkstemp(path);
	char *argv[] = { "kvshared", "--host-size", "256M", "--config", path, NULL };

	CHECK(fd >= 0);
	const char *text = "host-size = 1G\nmax-leases = 5\n";

	CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	kvs_config_defaults(cfg);
	CHECK_EQ(kvs_config_parse_args(cfg, 5, argv), 0);
	CHECK_EQ(cfg->host_bytes, 256ull << 20);
	CHECK_EQ(cfg->max_leases, 5);
	unlink(path);
}

int main(void)
{
	kvs_config cfg;

	cfg_sizes();
	cfg_defaults(&cfg);
	memory_checks();
	cfg_set_by_key(&cfg);
	cfg_flags(&cfg);
	cfg_access_flags(&cfg);
	cfg_policy_flag(&cfg);
	cfg_bad_values(&cfg);
	cfg_remote_tls(&cfg);
	cfg_file(&cfg);
	cfg_flags_over_file(&cfg);
	cfg_hugepages(&cfg);
	return check_summary("test_config");
}
