/*
 * fuzz_config - libFuzzer target for the daemon's configuration parsers
 * (service/config/config.c).
 *
 * The input is used three ways:
 *  - up to its first NUL byte, as a size for kvs_parse_size();
 *  - whole, as a config file's text for kvs_config_parse_text();
 *  - split at NUL bytes, as the arguments after "kvshared" for
 *    kvs_config_parse_args() (at most 32 of them).
 * A configuration that parses is printed with kvs_config_print() and read
 * back with kvs_config_parse_text(): it must give the same settings (the
 * printout is documented as a valid config file for the same daemon).
 *
 * Arguments that would name a config file (--config and its abbreviations)
 * are not passed on: the target reads no files. kvs_config_parse_text() is
 * what such a file's contents go through, and it gets every input anyway.
 *
 * Run with -close_fd_mask=3 (tests/fuzz/run.sh does): the parsers print an
 * error line for every bad input, and --help prints the usage text.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_config.h"
#include "kvs_types.h"

#define MAX_ARGS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kvs_config base;
static int have_base;

static void differs(const char *from, const char *field)
{
	fprintf(stderr, "fuzz_config: %s: %s reads back differently from "
		"kvs_config_print()\n", from, field);
	abort();
}

/* kvs_config_print(@cfg) read back over the defaults gives @cfg again. */
static void check_print(const kvs_config *cfg, const char *from)
{
	kvs_config again = base;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	f = open_memstream(&text, &len);
	if (!f)
		abort();
	kvs_config_print(f, cfg);
	if (fclose(f) != 0)
		abort();
	if (kvs_config_parse_text(&again, text, len, "printed") != 0)
		differs(from, "the whole printout");
	free(text);
	if (strcmp(again.socket_path, cfg->socket_path) != 0)
		differs(from, "socket");
	if (again.host_bytes != cfg->host_bytes)
		differs(from, "host-size");
	if (again.page_bytes != cfg->page_bytes)
		differs(from, "page-size");
	if (again.log_level != cfg->log_level)
		differs(from, "log-level");
	if (again.max_clients != cfg->max_clients)
		differs(from, "max-clients");
	if (again.max_leases != cfg->max_leases)
		differs(from, "max-leases");
	if (strcmp(again.policy, cfg->policy) != 0)
		differs(from, "eviction-policy");
	if (strcmp(again.metrics_addr, cfg->metrics_addr) != 0)
		differs(from, "metrics-addr");
	if (again.max_pinned_blocks != cfg->max_pinned_blocks)
		differs(from, "max-pinned-blocks");
	if (again.client_timeout != cfg->client_timeout)
		differs(from, "client-timeout");
	if (again.socket_mode != cfg->socket_mode)
		differs(from, "socket-mode");
	if (again.n_allow_uid != cfg->n_allow_uid ||
	    memcmp(again.allow_uid, cfg->allow_uid,
		   cfg->n_allow_uid * sizeof(uint32_t)) != 0)
		differs(from, "allow-uid");
	if (again.n_allow_gid != cfg->n_allow_gid ||
	    memcmp(again.allow_gid, cfg->allow_gid,
		   cfg->n_allow_gid * sizeof(uint32_t)) != 0)
		differs(from, "allow-gid");
	if (again.n_admin_uid != cfg->n_admin_uid ||
	    memcmp(again.admin_uid, cfg->admin_uid,
		   cfg->n_admin_uid * sizeof(uint32_t)) != 0)
		differs(from, "admin-uid");
}

/* getopt keeps state between calls that optind = 1 does not clear (the
 * position inside a cluster of short options, the bounds of permuted
 * non-options), and kvs_config_parse_args() sets optind = 1: fine for a
 * daemon that parses once, not for a loop. optind = 0 makes glibc start
 * over, as a fresh process would. */
static void reset_getopt(void)
{
	static const struct option none[] = { { NULL, 0, NULL, 0 } };
	char arg0[] = "kvshared";
	char *argv[] = { arg0, NULL };

	optind = 0;
	opterr = 0;
	while (getopt_long(1, argv, "", none, NULL) != -1)
		;
}

static void check_args(const uint8_t *data, size_t size)
{
	char *copy = malloc(size + 1), *argv[MAX_ARGS + 2];
	char arg0[] = "kvshared";
	kvs_config cfg = base;
	size_t at = 0;
	int argc = 1;

	if (!copy)
		abort();
	memcpy(copy, data, size);
	copy[size] = '\0';
	argv[0] = arg0;
	while (at < size && argc <= MAX_ARGS) {
		argv[argc++] = copy + at;
		at += strlen(copy + at) + 1;
	}
	argv[argc] = NULL;
	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], "--c", 3) == 0)
			goto out; /* --config FILE: no file reads here */
	reset_getopt();
	if (kvs_config_parse_args(&cfg, argc, argv) == 0)
		check_print(&cfg, "kvs_config_parse_args");
out:
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	kvs_config cfg;
	uint64_t v;

	if (!s)
		abort();
	if (!have_base) {
		if (kvs_config_defaults(&base) != 0)
			abort();
		have_base = 1;
	}
	memcpy(s, data, size);
	s[size] = '\0';
	if (kvs_parse_size(s, &v) == 0 && v == 0)
		abort(); /* zero is documented as -EINVAL */
	free(s);

	cfg = base;
	if (kvs_config_parse_text(&cfg, (const char *)data, size, "fuzz") == 0)
		check_print(&cfg, "kvs_config_parse_text");

	check_args(data, size);
	return 0;
}
