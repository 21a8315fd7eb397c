/*
 * config_file.c - the config file's syntax (see kvs_config.h): lines of
 * "key = value", comments, one optional section header. What a key means is
 * config.c's settings table, reached through kvs_config_set().
 */
#include "kvs_config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_types.h" /* KVS_E_CONFIG */

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
			why = kvs_config_set(cfg, key, val);
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

int kvs_config_load_file(kvs_config *cfg, const char *path)
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
