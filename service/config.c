/* config.c - defaults and flags of kvshared (see kvs_config.h). */
#include "kvs_config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvs_policy.h"
#include "kvshare.h"

#define DEFAULT_PAGE_BYTES (64u << 10)
#define FALLBACK_HOST_BYTES (1ull << 30)

static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	}
	fclose(f);
	return (uint64_t)kb << 10;
}

int kvs_config_defaults(kvs_config *cfg)
{
	uint64_t avail = mem_available();
	int rc;

	memset(cfg, 0, sizeof(*cfg));
	rc = kvs_default_socket_path(cfg->socket_path, sizeof(cfg->socket_path));
	if (rc < 0)
		return rc;
	/* A quarter of what is free leaves room for the workers themselves. */
	cfg->host_bytes = avail ? avail / 4 : FALLBACK_HOST_BYTES;
	cfg->host_bytes &= ~(uint64_t)(DEFAULT_PAGE_BYTES - 1);
	if (cfg->host_bytes < DEFAULT_PAGE_BYTES)
		cfg->host_bytes = DEFAULT_PAGE_BYTES;
	cfg->page_bytes = DEFAULT_PAGE_BYTES;
	cfg->log_level = KVS_LOG_INFO;
	cfg->ready_fd = -1;
	cfg->max_clients = 1024;
	cfg->max_leases = 4096;
	cfg->max_outbuf = 64ull << 20;
	strcpy(cfg->policy, kvs_policy_name_at(0));
	return 0;
}

int kvs_parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;
	uint64_t mult = 1;

	errno = 0;
	if (!s || !*s || *s == '-')
		return -EINVAL;
	v = strtod(s, &end);
	if (end == s || errno || !isfinite(v) || v <= 0)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': mult = 1ull << 10; end++; break;
	case 'm': case 'M': mult = 1ull << 20; end++; break;
	case 'g': case 'G': mult = 1ull << 30; end++; break;
	case 't': case 'T': mult = 1ull << 40; end++; break;
	default: break;
	}
	if (mult > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
		end += strlen(end);
	else if (mult == 1 && strcmp(end, "B") == 0)
		end++;
	if (*end)
		return -EINVAL;
	if (v * (double)mult >= 18446744073709551615.0)
		return -ERANGE;
	*out = (uint64_t)(v * (double)mult);
	return *out ? 0 : -EINVAL;
}

static int parse_u32(const char *s, uint32_t min, uint32_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	if (!s || !*s || *s == '-')
		return -EINVAL;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

void kvs_config_usage(FILE *f, const kvs_config *d)
{
	char policies[128] = "";

	for (unsigned i = 0; kvs_policy_name_at(i); i++) {
		if (i)
			strncat(policies, ", ", sizeof(policies) - strlen(policies) - 1);
		strncat(policies, kvs_policy_name_at(i),
			sizeof(policies) - strlen(policies) - 1);
	}
	fprintf(f,
		"usage: kvshared [options]\n"
		"Shared KV-cache daemon for LLM workers on one machine.\n\n"
		"  --socket PATH       control socket (default %s)\n"
		"  --host-size SIZE    host-RAM tier bytes, K/M/G/T suffixes\n"
		"                      (default %" PRIu64 " MiB: a quarter of available RAM)\n"
		"  --page-size SIZE    slot allocator page, power of two >= 4K (default %u KiB)\n"
		"  --log-level LEVEL   error, warn, info or debug (default %s)\n"
		"  --ready-fd N        write \"READY\\n\" to fd N once serving, then close it\n"
		"  --max-clients N     connections served at once (default %u)\n"
		"  --max-leases N      leases one connection may hold (default %u)\n"
		"  --eviction-policy P how blocks leave a full tier: %s (default %s)\n"
		"  --metrics-addr ADDR serve Prometheus /metrics on HOST:PORT, or PORT on\n"
		"                      127.0.0.1 (default off)\n"
		"  --help              this text\n"
		"  --version           print the version\n",
		d->socket_path, d->host_bytes >> 20, d->page_bytes >> 10,
		kvs_log_level_name(d->log_level), d->max_clients, d->max_leases,
		policies, d->policy);
}

static int bad(const char *flag, const char *val, const char *why)
{
	fprintf(stderr, "kvshared: %s '%s': %s (see kvshared --help)\n", flag,
		val ? val : "", why);
	return KVS_E_CONFIG;
}

int kvs_config_parse_args(kvs_config *cfg, int argc, char **argv)
{
	enum { O_SOCKET = 256, O_HOST, O_PAGE, O_LOG, O_READY, O_CLIENTS,
	       O_LEASES, O_POLICY, O_METRICS, O_HELP, O_VERSION };
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "host-size", required_argument, NULL, O_HOST },
		{ "page-size", required_argument, NULL, O_PAGE },
		{ "log-level", required_argument, NULL, O_LOG },
		{ "ready-fd", required_argument, NULL, O_READY },
		{ "max-clients", required_argument, NULL, O_CLIENTS },
		{ "max-leases", required_argument, NULL, O_LEASES },
		{ "eviction-policy", required_argument, NULL, O_POLICY },
		{ "metrics-addr", required_argument, NULL, O_METRICS },
		{ "help", no_argument, NULL, O_HELP },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	kvs_config defaults = *cfg;
	uint64_t size;
	uint32_t u;
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case O_SOCKET:
			if (strlen(optarg) >= sizeof(cfg->socket_path) || !*optarg)
				return bad("--socket", optarg, "empty or longer than 107 bytes");
			strcpy(cfg->socket_path, optarg);
			break;
		case O_HOST:
			if (kvs_parse_size(optarg, &size) < 0)
				return bad("--host-size", optarg, "not a size (e.g. 512M, 8G)");
			cfg->host_bytes = size;
			break;
		case O_PAGE:
			if (kvs_parse_size(optarg, &size) < 0 || size < 4096 ||
			    size > (1u << 30) || (size & (size - 1)))
				return bad("--page-size", optarg,
					   "must be a power of two from 4K to 1G");
			cfg->page_bytes = (uint32_t)size;
			break;
		case O_LOG:
			if (kvs_log_level_parse(optarg, &cfg->log_level) < 0)
				return bad("--log-level", optarg,
					   "must be error, warn, info or debug");
			break;
		case O_READY:
			if (parse_u32(optarg, 0, &u) < 0 || u > INT32_MAX)
				return bad("--ready-fd", optarg, "not a file descriptor");
			cfg->ready_fd = (int)u;
			break;
		case O_CLIENTS:
			if (parse_u32(optarg, 1, &cfg->max_clients) < 0)
				return bad("--max-clients", optarg, "must be a number >= 1");
			break;
		case O_LEASES:
			if (parse_u32(optarg, 1, &cfg->max_leases) < 0)
				return bad("--max-leases", optarg, "must be a number >= 1");
			break;
		case O_POLICY:
			if (!kvs_policy_known(optarg) || strlen(optarg) >= sizeof(cfg->policy))
				return bad("--eviction-policy", optarg,
					   "unknown policy (see --help)");
			strcpy(cfg->policy, optarg);
			break;
		case O_METRICS:
			if (!*optarg || strlen(optarg) >= sizeof(cfg->metrics_addr))
				return bad("--metrics-addr", optarg, "empty or too long");
			strcpy(cfg->metrics_addr, optarg);
			break;
		case O_HELP:
			kvs_config_usage(stdout, &defaults);
			return 1;
		case O_VERSION:
			printf("kvshared %d.%d\n", KVSHARE_VERSION_MAJOR,
			       KVSHARE_VERSION_MINOR);
			return 1;
		default:
			return bad("option", argv[optind - 1],
				   optopt ? "needs a value" : "unknown option");
		}
	}
	if (optind < argc)
		return bad("argument", argv[optind], "unexpected");
	if (cfg->host_bytes < cfg->page_bytes)
		return bad("--host-size", "", "smaller than one page");
	return 0;
}
