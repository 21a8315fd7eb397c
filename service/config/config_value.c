/*
 * config_value.c - reading one value of a setting (see config_int.h):
 * bounded numbers, permission bits, booleans, and lists of user or group
 * ids (sizes with units: kvs_parse_size(), proto/kvs_size.h). Pure
 * functions of the text but for the name look-ups.
 */
#include "config_int.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

int config_parse_u32(const char *s, uint32_t min, uint32_t *out)
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
int config_parse_mode(const char *s, uint32_t *out)
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
const char *config_parse_ids(const char *val, int groups, uint32_t *ids,
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
			if (config_parse_u32(tok, 0, &id) < 0 || id == UINT32_MAX)
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

int config_parse_bool(const char *val, int *out)
{
	/* A flag on the command line; "true"/"false" in a file. */
	if (!val || strcmp(val, "true") == 0 || strcmp(val, "1") == 0 ||
	    strcmp(val, "yes") == 0)
		*out = 1;
	else if (strcmp(val, "false") == 0 || strcmp(val, "0") == 0 ||
		 strcmp(val, "no") == 0)
		*out = 0;
	else
		return -EINVAL;
	return 0;
}
