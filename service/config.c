/* config.c - defaults and flags of kvshared (see kvs_config.h). */
#include "kvs_config.h"

#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvs_policy.h"
#include "kvshare.h"

#define DEFAULT_PAGE_BYTES (64u << 10)
#define FALLBACK_HOST_BYTES (1ull << 30)
#define DEFAULT_SSD_SEGMENT (256ull << 20)
#define DEFAULT_SSD_QD 32 /* the segment store's own default */
#define DEFAULT_GPU_BYTES (1ull << 30)

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
	cfg->max_pinned_blocks = 65536;
	cfg->max_outbuf = 64ull << 20;
	cfg->client_timeout = 60;
	cfg->socket_mode = 0600;
	strcpy(cfg->policy, kvs_policy_name_at(0));
	cfg->ssd_segment_bytes = DEFAULT_SSD_SEGMENT;
	cfg->ssd_queue_depth = DEFAULT_SSD_QD;
	cfg->max_pinned_share = 50;
	cfg->gpu = KVS_GPU_AUTO;
	cfg->gpu_bytes = DEFAULT_GPU_BYTES;
	cfg->watch_buffer = 1u << 20;
	cfg->max_tenants = 8;
	return 0;
}

uint64_t kvs_config_tenant_bytes(const kvs_config *cfg)
{
	uint64_t b = cfg->tenant_bytes;

	if (!b && cfg->max_tenants)
		b = cfg->host_bytes / cfg->max_tenants;
	return b & ~(uint64_t)(cfg->page_bytes - 1);
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

/* "0660": octal permission bits that keep the owner's read and write. */
static int parse_mode(const char *s, uint32_t *out)
{
	uint32_t v = 0;
	size_t n = strlen(s);

	if (n == 0 || n > 4)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7')
			return -EINVAL;
		v = v * 8 + (uint32_t)(s[i] - '0');
	}
	if (v > 0777 || (v & 0600) != 0600)
		return -EINVAL;
	*out = v;
	return 0;
}

/* "0,65534,alice": ids, or user (group) names looked up now, so that the
 * configuration holds numbers only and prints back the same. A later
 * setting replaces the list. Returns NULL or why @val is refused. */
static const char *parse_ids(const char *val, int groups, uint32_t *ids,
			     uint32_t *n_out)
{
	const char *p = val;
	uint32_t n = 0, tmp[KVS_ALLOW_MAX];

	if (!*val)
		return "empty list";
	while (*p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char tok[64];
		uint32_t id;

		if (len == 0 || len >= sizeof(tok))
			return "an empty or too long entry";
		if (n == KVS_ALLOW_MAX)
			return "more than 64 entries";
		memcpy(tok, p, len);
		tok[len] = '\0';
		if (tok[0] >= '0' && tok[0] <= '9') {
			if (parse_u32(tok, 0, &id) < 0 || id == UINT32_MAX)
				return "not a number or name";
		} else if (groups) {
			struct group *g = getgrnam(tok);

			if (!g)
				return "unknown group";
			id = (uint32_t)g->gr_gid;
		} else {
			struct passwd *pw = getpwnam(tok);

			if (!pw)
				return "unknown user";
			id = (uint32_t)pw->pw_uid;
		}
		tmp[n++] = id;
		p += len;
		if (*p == ',' && !*++p)
			return "an empty entry";
	}
	memset(ids, 0, KVS_ALLOW_MAX * sizeof(*ids));
	memcpy(ids, tmp, n * sizeof(*ids));
	*n_out = n;
	return NULL;
}

static void print_ids(FILE *f, const char *key, const uint32_t *ids, uint32_t n)
{
	if (n == 0) {
		fprintf(f, "# %s: none\n", key);
		return;
	}
	fprintf(f, "%s = ", key);
	for (uint32_t i = 0; i < n; i++)
		fprintf(f, "%s%u", i ? "," : "", ids[i]);
	fprintf(f, "\n");
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
		"  --max-pinned-blocks N  blocks one connection may pin (read or\n"
		"                      write) at once (default %u)\n"
		"  --client-timeout S  close a connection that holds a partial message,\n"
		"                      or leaves over 1 MiB of replies unread, for S\n"
		"                      seconds; 0: never (default %u)\n"
		"  --socket-mode MODE  octal permission bits of the socket, at least\n"
		"                      0600 (default %04o)\n"
		"  --allow-uid LIST    serve only these uids (comma-separated numbers or\n"
		"                      user names) besides the daemon's own; with\n"
		"                      --allow-gid, either list admits (default: any\n"
		"                      peer that can open the socket)\n"
		"  --allow-gid LIST    serve peers whose primary or supplementary group\n"
		"                      is listed (numbers or group names)\n"
		"  --eviction-policy P how blocks leave a full tier: %s (default %s)\n"
		"  --metrics-addr ADDR serve Prometheus /metrics on HOST:PORT, or PORT on\n"
		"                      127.0.0.1 (default off)\n"
		"  --ssd-dir DIR       SSD tier: segment files and index under DIR\n"
		"                      (default off; DIR must exist and be writable)\n"
		"  --ssd-size SIZE     SSD tier bytes (default 4 segments)\n"
		"  --ssd-segment SIZE  SSD segment file bytes, multiple of 4K (default %" PRIu64 " MiB)\n"
		"  --ssd-admit RULE    blocks evicted from RAM that go to SSD: all, or hit\n"
		"                      (hit at least once) (default %s)\n"
		"  --ssd-write-through commit also writes blocks to SSD\n"
		"  --ssd-queue-depth N SSD reads and writes in the kernel at once, 1..4096\n"
		"                      (default %u)\n"
		"  --gpu auto|off|N    GPU tier on device N, on the first usable device\n"
		"                      (auto), or off (default auto; N unusable is an error)\n"
		"  --gpu-size SIZE     GPU tier bytes, rounded up to the device's\n"
		"                      allocation granularity (default %" PRIu64 " MiB)\n"
		"  --max-pinned-share PERCENT  share of the host tier that kvsctl pin\n"
		"                      may hold (default %u)\n"
		"  --watch-buffer SIZE unsent event bytes per kvsctl watch before\n"
		"                      events are dropped (default %" PRIu64 " KiB)\n"
		"  --tenant-arenas off|uid  uid: one host arena per client uid, so\n"
		"                      tenants never map each other's KV (default off:\n"
		"                      one arena for all; uid needs no --ssd-dir, no --gpu N)\n"
		"  --tenant-size SIZE  host bytes of each tenant arena (default\n"
		"                      --host-size / --max-tenants)\n"
		"  --max-tenants N     tenant arenas at most; a further uid is refused\n"
		"                      (default %u)\n"
		"  --config FILE       read settings from FILE first (key = value, keys\n"
		"                      named as these flags); flags win over the file\n"
		"  --print-config      print the effective configuration and exit\n"
		"  --help              this text\n"
		"  --version           print the version\n",
		d->socket_path, d->host_bytes >> 20, d->page_bytes >> 10,
		kvs_log_level_name(d->log_level), d->max_clients, d->max_leases,
		d->max_pinned_blocks, d->client_timeout, d->socket_mode,
		policies, d->policy, d->ssd_segment_bytes >> 20,
		d->ssd_admit_hit ? "hit" : "all", d->ssd_queue_depth,
		d->gpu_bytes >> 20,
		d->max_pinned_share,
		d->watch_buffer >> 10, d->max_tenants);
}

static int bad(const char *flag, const char *val, const char *why)
{
	fprintf(stderr, "kvshared: %s '%s': %s (see kvshared --help)\n", flag,
		val ? val : "", why);
	return KVS_E_CONFIG;
}

enum { O_SOCKET = 256, O_HOST, O_PAGE, O_LOG, O_READY, O_CLIENTS, O_LEASES,
       O_POLICY, O_METRICS, O_SSD_DIR, O_SSD_SIZE, O_SSD_SEG, O_SSD_ADMIT,
       O_SSD_WT, O_SSD_QD, O_GPU, O_GPU_SIZE, O_PINSHARE, O_WATCHBUF, O_PINNED,
       O_TIMEOUT, O_MODE, O_UIDS, O_GIDS, O_TENANTS, O_TENANT_SIZE,
       O_MAX_TENANTS, O_CONFIG, O_PRINT, O_HELP, O_VERSION };

/* Every setting, by its flag name; a config file uses the same names. */
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
	{ "ssd-dir", required_argument, NULL, O_SSD_DIR },
	{ "ssd-size", required_argument, NULL, O_SSD_SIZE },
	{ "ssd-segment", required_argument, NULL, O_SSD_SEG },
	{ "ssd-admit", required_argument, NULL, O_SSD_ADMIT },
	{ "ssd-write-through", optional_argument, NULL, O_SSD_WT },
	{ "ssd-queue-depth", required_argument, NULL, O_SSD_QD },
	{ "gpu", required_argument, NULL, O_GPU },
	{ "gpu-size", required_argument, NULL, O_GPU_SIZE },
	{ "max-pinned-share", required_argument, NULL, O_PINSHARE },
	{ "watch-buffer", required_argument, NULL, O_WATCHBUF },
	{ "max-pinned-blocks", required_argument, NULL, O_PINNED },
	{ "client-timeout", required_argument, NULL, O_TIMEOUT },
	{ "socket-mode", required_argument, NULL, O_MODE },
	{ "allow-uid", required_argument, NULL, O_UIDS },
	{ "allow-gid", required_argument, NULL, O_GIDS },
	{ "tenant-arenas", required_argument, NULL, O_TENANTS },
	{ "tenant-size", required_argument, NULL, O_TENANT_SIZE },
	{ "max-tenants", required_argument, NULL, O_MAX_TENANTS },
	{ "config", required_argument, NULL, O_CONFIG },
	{ "print-config", no_argument, NULL, O_PRINT },
	{ "help", no_argument, NULL, O_HELP },
	{ "version", no_argument, NULL, O_VERSION },
	{ NULL, 0, NULL, 0 },
};

/* Apply one setting; returns NULL or why @val is refused. */
static const char *set_option(kvs_config *cfg, int id, const char *val)
{
	size_t n = val ? strlen(val) : 0; /* NULL: a flag without its value */
	uint64_t size;
	uint32_t u;

	/* What --print-config writes must read back the same: no control
	 * characters, no blanks at either end (a file trims them). */
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)val[i] < 0x20 || val[i] == 0x7f)
			return "contains a control character";
	if (n && (val[0] == ' ' || val[n - 1] == ' '))
		return "starts or ends with a blank";

	switch (id) {
	case O_SOCKET:
		if (strlen(val) >= sizeof(cfg->socket_path) || !*val)
			return "empty or longer than 107 bytes";
		strcpy(cfg->socket_path, val);
		return NULL;
	case O_HOST:
		if (kvs_parse_size(val, &size) < 0)
			return "not a size (e.g. 512M, 8G)";
		cfg->host_bytes = size;
		return NULL;
	case O_PAGE:
		if (kvs_parse_size(val, &size) < 0 || size < 4096 ||
		    size > (1u << 30) || (size & (size - 1)))
			return "must be a power of two from 4K to 1G";
		cfg->page_bytes = (uint32_t)size;
		return NULL;
	case O_LOG:
		if (kvs_log_level_parse(val, &cfg->log_level) < 0)
			return "must be error, warn, info or debug";
		return NULL;
	case O_READY:
		if (parse_u32(val, 0, &u) < 0 || u > INT32_MAX)
			return "not a file descriptor";
		cfg->ready_fd = (int)u;
		return NULL;
	case O_CLIENTS:
		return parse_u32(val, 1, &cfg->max_clients) < 0 ? "must be a number >= 1"
								: NULL;
	case O_LEASES:
		return parse_u32(val, 1, &cfg->max_leases) < 0 ? "must be a number >= 1"
							       : NULL;
	case O_POLICY:
		if (!kvs_policy_known(val) || strlen(val) >= sizeof(cfg->policy))
			return "unknown policy";
		strcpy(cfg->policy, val);
		return NULL;
	case O_METRICS:
		if (!*val || strlen(val) >= sizeof(cfg->metrics_addr))
			return "empty or too long";
		strcpy(cfg->metrics_addr, val);
		return NULL;
	case O_SSD_DIR:
		if (!*val || strlen(val) >= sizeof(cfg->ssd_dir))
			return "empty or longer than 255 bytes";
		strcpy(cfg->ssd_dir, val);
		return NULL;
	case O_SSD_SIZE:
		if (kvs_parse_size(val, &size) < 0)
			return "not a size (e.g. 64G)";
		cfg->ssd_bytes = size;
		return NULL;
	case O_SSD_SEG:
		if (kvs_parse_size(val, &size) < 0 || size < (64u << 10) ||
		    (size & 4095))
			return "must be a multiple of 4K, at least 64K";
		cfg->ssd_segment_bytes = size;
		return NULL;
	case O_SSD_ADMIT:
		if (strcmp(val, "all") == 0)
			cfg->ssd_admit_hit = 0;
		else if (strcmp(val, "hit") == 0)
			cfg->ssd_admit_hit = 1;
		else
			return "must be all or hit";
		return NULL;
	case O_SSD_WT:
		/* A flag on the command line; "true"/"false" in a file. */
		if (!val || strcmp(val, "true") == 0 || strcmp(val, "1") == 0 ||
		    strcmp(val, "yes") == 0)
			cfg->ssd_write_through = 1;
		else if (strcmp(val, "false") == 0 || strcmp(val, "0") == 0 ||
			 strcmp(val, "no") == 0)
			cfg->ssd_write_through = 0;
		else
			return "must be true or false";
		return NULL;
	case O_SSD_QD:
		if (parse_u32(val, 1, &u) < 0 || u > 4096)
			return "must be a number from 1 to 4096";
		cfg->ssd_queue_depth = u;
		return NULL;
	case O_GPU:
		if (strcmp(val, "auto") == 0)
			cfg->gpu = KVS_GPU_AUTO;
		else if (strcmp(val, "off") == 0)
			cfg->gpu = KVS_GPU_OFF;
		else if (parse_u32(val, 0, &u) < 0 || u > 1023)
			return "must be auto, off or a device number";
		else
			cfg->gpu = (int)u;
		return NULL;
	case O_GPU_SIZE:
		if (kvs_parse_size(val, &size) < 0)
			return "not a size (e.g. 8G)";
		cfg->gpu_bytes = size;
		return NULL;
	case O_PINSHARE:
		if (parse_u32(val, 0, &u) < 0 || u > 100)
			return "must be a percentage from 0 to 100";
		cfg->max_pinned_share = u;
		return NULL;
	case O_WATCHBUF:
		if (kvs_parse_size(val, &size) < 0 || size < 4096 ||
		    size > cfg->max_outbuf / 2)
			return "must be a size from 4K to half the reply backlog limit";
		cfg->watch_buffer = size;
		return NULL;
	case O_PINNED:
		return parse_u32(val, 1, &cfg->max_pinned_blocks) < 0
			       ? "must be a number >= 1" : NULL;
	case O_TIMEOUT:
		if (parse_u32(val, 0, &u) < 0 || u > 86400)
			return "must be seconds from 0 (never) to 86400";
		cfg->client_timeout = u;
		return NULL;
	case O_MODE:
		return parse_mode(val, &cfg->socket_mode) < 0
			       ? "must be octal bits from 0600 to 0777 (e.g. 0660)"
			       : NULL;
	case O_UIDS:
		return parse_ids(val, 0, cfg->allow_uid, &cfg->n_allow_uid);
	case O_GIDS:
		return parse_ids(val, 1, cfg->allow_gid, &cfg->n_allow_gid);
	case O_TENANTS:
		if (strcmp(val, "off") == 0)
			cfg->tenant_arenas = 0;
		else if (strcmp(val, "uid") == 0)
			cfg->tenant_arenas = 1;
		else
			return "must be off or uid";
		return NULL;
	case O_TENANT_SIZE:
		if (kvs_parse_size(val, &size) < 0)
			return "not a size (e.g. 2G)";
		cfg->tenant_bytes = size;
		return NULL;
	case O_MAX_TENANTS:
		if (parse_u32(val, 1, &u) < 0 || u > 1024)
			return "must be a number from 1 to 1024";
		cfg->max_tenants = u;
		return NULL;
	}
	return "not a setting";
}

static char *trim(char *p, char *end)
{
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
		end--;
	*end = '\0';
	return p;
}

int kvs_config_parse_text(kvs_config *cfg, const char *text, size_t len,
			  const char *name)
{
	char *copy = malloc(len + 1), *line, *next;
	int lineno = 0, rc = 0;

	if (!copy)
		return -ENOMEM;
	if (memchr(text, '\0', len)) {
		fprintf(stderr, "kvshared: %s: not a text file (NUL byte)\n", name);
		free(copy);
		return KVS_E_CONFIG;
	}
	memcpy(copy, text, len);
	copy[len] = '\0';
	for (line = copy; line && rc == 0; line = next) {
		char *nl = strchr(line, '\n'), *eq, *key, *val;
		const char *why = NULL;
		int id = 0;

		next = nl ? nl + 1 : NULL;
		line = trim(line, nl ? nl : line + strlen(line));
		lineno++;
		if (!*line || *line == '#' || *line == ';')
			continue;
		if (*line == '[') {
			if (strcmp(line, "[kvshared]") != 0)
				why = "unknown section (only [kvshared])";
		} else if (!(eq = strchr(line, '='))) {
			why = "expected key = value";
		} else {
			key = trim(line, eq);
			val = trim(eq + 1, eq + 1 + strlen(eq + 1));
			for (const struct option *o = opts; o->name; o++)
				if (strcmp(o->name, key) == 0 && o->val < O_CONFIG)
					id = o->val;
			why = id ? set_option(cfg, id, val) : "unknown key";
			if (why) {
				fprintf(stderr, "kvshared: %s:%d: %s '%s': %s\n", name,
					lineno, key, val, why);
				rc = KVS_E_CONFIG;
				break;
			}
			continue;
		}
		if (why) {
			fprintf(stderr, "kvshared: %s:%d: %s\n", name, lineno, why);
			rc = KVS_E_CONFIG;
		}
	}
	free(copy);
	return rc;
}

static int load_file(kvs_config *cfg, const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = NULL;
	size_t len = 0, cap = 0, n;
	int rc;

	if (!f) {
		fprintf(stderr, "kvshared: --config '%s': %s\n", path, strerror(errno));
		return KVS_E_CONFIG;
	}
	do {
		if (len + 4096 > cap) {
			char *t = realloc(text, cap = cap * 2 + 4096);

			if (!t) {
				free(text);
				fclose(f);
				return -ENOMEM;
			}
			text = t;
		}
		n = fread(text + len, 1, cap - len, f);
		len += n;
	} while (n > 0 && len < (1u << 20));
	fclose(f);
	if (len >= (1u << 20)) {
		free(text);
		fprintf(stderr, "kvshared: --config '%s': larger than 1 MiB\n", path);
		return KVS_E_CONFIG;
	}
	rc = kvs_config_parse_text(cfg, text ? text : "", len, path);
	free(text);
	return rc;
}

void kvs_config_print(FILE *f, const kvs_config *cfg)
{
	fprintf(f, "# kvshared effective configuration (a valid --config file)\n"
		   "[kvshared]\n"
		   "socket = %s\n"
		   "host-size = %" PRIu64 "\n"
		   "page-size = %u\n"
		   "log-level = %s\n"
		   "max-clients = %u\n"
		   "max-leases = %u\n"
		   "max-pinned-blocks = %u\n"
		   "client-timeout = %u\n"
		   "socket-mode = %04o\n"
		   "eviction-policy = %s\n"
		   "max-pinned-share = %u\n"
		   "watch-buffer = %" PRIu64 "\n",
		cfg->socket_path, cfg->host_bytes, cfg->page_bytes,
		kvs_log_level_name(cfg->log_level), cfg->max_clients,
		cfg->max_leases, cfg->max_pinned_blocks, cfg->client_timeout,
		cfg->socket_mode, cfg->policy, cfg->max_pinned_share,
		cfg->watch_buffer);
	print_ids(f, "allow-uid", cfg->allow_uid, cfg->n_allow_uid);
	print_ids(f, "allow-gid", cfg->allow_gid, cfg->n_allow_gid);
	if (cfg->metrics_addr[0])
		fprintf(f, "metrics-addr = %s\n", cfg->metrics_addr);
	else
		fprintf(f, "# metrics-addr: off\n");
	if (cfg->ssd_dir[0])
		fprintf(f, "ssd-dir = %s\n", cfg->ssd_dir);
	else
		fprintf(f, "# ssd-dir: off\n");
	if (cfg->ssd_bytes)
		fprintf(f, "ssd-size = %" PRIu64 "\n", cfg->ssd_bytes);
	else
		fprintf(f, "# ssd-size: 4 segments\n");
	fprintf(f, "ssd-segment = %" PRIu64 "\n"
		   "ssd-admit = %s\n"
		   "ssd-write-through = %s\n"
		   "ssd-queue-depth = %u\n",
		cfg->ssd_segment_bytes, cfg->ssd_admit_hit ? "hit" : "all",
		cfg->ssd_write_through ? "true" : "false", cfg->ssd_queue_depth);
	if (cfg->gpu == KVS_GPU_AUTO)
		fprintf(f, "gpu = auto\n");
	else if (cfg->gpu == KVS_GPU_OFF)
		fprintf(f, "gpu = off\n");
	else
		fprintf(f, "gpu = %d\n", cfg->gpu);
	fprintf(f, "gpu-size = %" PRIu64 "\n", cfg->gpu_bytes);
	fprintf(f, "tenant-arenas = %s\n", cfg->tenant_arenas ? "uid" : "off");
	if (cfg->tenant_bytes)
		fprintf(f, "tenant-size = %" PRIu64 "\n", cfg->tenant_bytes);
	else
		fprintf(f, "# tenant-size: host-size / max-tenants\n");
	fprintf(f, "max-tenants = %u\n", cfg->max_tenants);
}

int kvs_config_parse_args(kvs_config *cfg, int argc, char **argv)
{
	kvs_config defaults = *cfg;
	int c, print = 0, rc;

	/* The file first, wherever --config stands, so that flags win.
	 * optind = 0 resets glibc's getopt fully (1 keeps cluster state). */
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == O_CONFIG && (rc = load_file(cfg, optarg)) < 0)
			return rc;
	}
	optind = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		const char *why;

		switch (c) {
		case O_CONFIG:
			break;
		case O_PRINT:
			print = 1;
			break;
		case O_HELP:
			kvs_config_usage(stdout, &defaults);
			return 1;
		case O_VERSION:
			printf("kvshared %d.%d\n", KVSHARE_VERSION_MAJOR,
			       KVSHARE_VERSION_MINOR);
			return 1;
		case '?':
		case ':':
			/* optopt is set for a long option missing its value (its
			 * val) and for an unknown short one (the letter). */
			if (optopt >= O_SOCKET)
				return bad("option", argv[optind - 1], "needs a value");
			if (optopt) {
				char flag[3] = { '-', (char)optopt, 0 };

				return bad("option", flag, "unknown option");
			}
			return bad("option", argv[optind - 1], "unknown option");
		default:
			why = set_option(cfg, c, optarg);
			if (why) {
				char flag[64] = "--";

				for (const struct option *o = opts; o->name; o++)
					if (o->val == c)
						snprintf(flag, sizeof(flag), "--%s", o->name);
				return bad(flag, optarg, why);
			}
		}
	}
	if (optind < argc)
		return bad("argument", argv[optind], "unexpected");
	if (cfg->host_bytes < cfg->page_bytes)
		return bad("--host-size", "", "smaller than one page");
	/* Per-uid arenas with tiers shared by every domain would let one
	 * tenant's blocks reach another's arena: not built, so refused. */
	if (cfg->tenant_arenas && cfg->ssd_dir[0])
		return bad("--tenant-arenas", "uid", "not supported yet with "
			   "--ssd-dir (the SSD tier is not per tenant)");
	if (cfg->tenant_arenas && cfg->gpu >= 0)
		return bad("--tenant-arenas", "uid", "not supported yet with "
			   "--gpu N (the GPU tier is not per tenant; use --gpu off)");
	if (cfg->tenant_arenas && kvs_config_tenant_bytes(cfg) < cfg->page_bytes)
		return bad("--tenant-size", "", "a tenant arena is smaller than "
			   "one page (--host-size / --max-tenants, or --tenant-size)");
	if (print) {
		kvs_config_print(stdout, cfg);
		return 1;
	}
	return 0;
}
