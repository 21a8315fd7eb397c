/*
 * config_memory.c - what the machine's memory allows the host tier
 * (kvs_config_memory_check, kvs_config.h) and the default size it takes
 * (config_mem_available): both read /proc/meminfo.
 */
#include "config_int.h"

#include <stdio.h>
#include <string.h>

#include "kvs_types.h"

/* /proc/meminfo into @buf (empty if it cannot be read). */
static const char *read_meminfo(char *buf, size_t cap)
{
	FILE *f = fopen("/proc/meminfo", "r");
	size_t n = f ? fread(buf, 1, cap - 1, f) : 0;

	if (f)
		fclose(f);
	buf[n] = '\0';
	return buf;
}

/* Field @key ("MemTotal:") of /proc/meminfo's @text, in bytes; 0 if absent. */
static uint64_t meminfo_bytes(const char *text, const char *key)
{
	const char *p = strstr(text, key);
	unsigned long long kb;

	/* At the start of a line: "SwapTotal:" is not "Total:". */
	while (p && p != text && p[-1] != '\n')
		p = strstr(p + 1, key);
	if (!p || sscanf(p + strlen(key), " %llu kB", &kb) != 1)
		return 0;
	return (uint64_t)kb << 10;
}

int kvs_config_memory_check(const kvs_config *cfg, const char *meminfo,
			    char *why, size_t cap)
{
	char buf[8192];
	uint64_t total, swap, avail, host = cfg->host_bytes;
	const double gib = 1024.0 * 1024 * 1024;

	if (!meminfo)
		meminfo = read_meminfo(buf, sizeof(buf));
	total = meminfo_bytes(meminfo, "MemTotal:");
	swap = meminfo_bytes(meminfo, "SwapTotal:");
	avail = meminfo_bytes(meminfo, "MemAvailable:");
	if (total == 0)
		return 0; /* not known: nothing to say */
	if (host > total + swap) {
		snprintf(why, cap, "%.1f GiB is more than this machine's memory "
			 "(RAM %.1f GiB + swap %.1f GiB): the tier could never be "
			 "filled; give at most that, and leave room for the workers",
			 host / gib, total / gib, swap / gib);
		return KVS_E_CONFIG;
	}
	/* Huge pages come from their own pool, not counted available, and
	 * are all reserved when the arena is mapped: a short pool is refused
	 * at start (server.c says so), never an OOM later. */
	if (cfg->host_hugepages)
		return 0;
	if (avail && host > avail) {
		snprintf(why, cap, "%.1f GiB is more than the memory "
			 "available now (%.1f GiB of %.1f GiB RAM, %.1f GiB swap): "
			 "it fills as blocks are written, and past what is free the "
			 "kernel swaps or ends a process (OOM)", host / gib,
			 avail / gib, total / gib, swap / gib);
		return 1;
	}
	return 0;
}


uint64_t config_mem_available(void)
{
	char buf[8192];

	return meminfo_bytes(read_meminfo(buf, sizeof(buf)), "MemAvailable:");
}
