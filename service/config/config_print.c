/*
 * config_print.c - the settings table as text (see config_int.h): --help's
 * option list with each default, and --print-config's file, which reads
 * back as the same configuration.
 */
#include "config_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kvs_policy.h"

/* Whether a setting with an unset text holds nothing (0 or ""). */
static int is_unset(const kvs_config *cfg, const struct setting *s)
{
	switch (s->type) {
	case T_STR:
		return !*(const char *)config_cfield(cfg, s);
	case T_SIZE:
	case T_U32:
		return config_uint_get(cfg, s) == 0;
	case T_UIDS:
	case T_GIDS:
		return *(const uint32_t *)((const char *)cfg + s->n_off) == 0;
	default:
		return 0;
	}
}

/* The value of @s in @cfg as text that reads back the same (integers
 * >> @shift for --help's defaults). */
static void format_value(const kvs_config *cfg, const struct setting *s,
			 unsigned shift, char *buf, size_t cap)
{
	const void *p = config_cfield(cfg, s);
	int v;

	switch (s->type) {
	case T_STR:
	case T_POLICY:
		snprintf(buf, cap, "%s", (const char *)p);
		return;
	case T_SIZE:
	case T_U32:
		snprintf(buf, cap, "%" PRIu64, config_uint_get(cfg, s) >> shift);
		return;
	case T_FD:
		snprintf(buf, cap, "%d", *(const int *)p);
		return;
	case T_MODE:
		snprintf(buf, cap, "%04o", *(const uint32_t *)p);
		return;
	case T_LEVEL:
		snprintf(buf, cap, "%s",
			 kvs_log_level_name(*(const enum kvs_log_level *)p));
		return;
	case T_CHOICE:
		snprintf(buf, cap, "%s", s->choices[*(const int *)p]);
		return;
	case T_BOOL:
		snprintf(buf, cap, "%s", *(const int *)p ? "true" : "false");
		return;
	case T_GPU:
		v = *(const int *)p;
		if (v == KVS_GPU_AUTO)
			snprintf(buf, cap, "auto");
		else if (v == KVS_GPU_OFF)
			snprintf(buf, cap, "off");
		else
			snprintf(buf, cap, "%d", v);
		return;
	case T_UIDS:
	case T_GIDS: {
		const uint32_t *ids = p;
		uint32_t n = *(const uint32_t *)((const char *)cfg + s->n_off);
		size_t at = 0;

		buf[0] = '\0';
		for (uint32_t i = 0; i < n && at < cap; i++)
			at += (size_t)snprintf(buf + at, cap - at, "%s%u",
					       i ? "," : "", ids[i]);
		return;
	}
	case T_ACTION:
		break;
	}
	buf[0] = '\0';
}

/* Room for KVS_ALLOW_MAX ids of 10 digits and their commas. */
#define VALUE_MAX (KVS_ALLOW_MAX * 11 + 1)

/* One option of --help: the flag in a column of 20, its text beside it,
 * continuation lines under the text. */
static void usage_line(FILE *f, const struct setting *s, const kvs_config *d)
{
	char flag[64], val[VALUE_MAX], list[128] = "";
	int len = snprintf(flag, sizeof(flag), "--%s%s%s", s->name,
			   s->arg ? " " : "", s->arg ? s->arg : "");

	if (s->type == T_POLICY) {
		for (unsigned i = 0; kvs_policy_name_at(i); i++) {
			if (i)
				strncat(list, ", ", sizeof(list) - strlen(list) - 1);
			strncat(list, kvs_policy_name_at(i),
				sizeof(list) - strlen(list) - 1);
		}
	}
	format_value(d, s, s->shift, val, sizeof(val));
	fprintf(f, "  %-19s%s", flag, len > 19 ? "  " : " ");
	for (const char *h = s->help; *h; h++) {
		if (*h == '\n') {
			fprintf(f, "\n%22s", "");
		} else if (strncmp(h, "{}", 2) == 0) {
			fputs(val, f);
			h++;
		} else if (strncmp(h, "{list}", 6) == 0) {
			fputs(list, f);
			h += 5;
		} else {
			fputc(*h, f);
		}
	}
	fputc('\n', f);
}

void kvs_config_usage(FILE *f, const kvs_config *d)
{
	fprintf(f, "usage: kvshared [options]\n"
		   "Shared KV-cache daemon for LLM workers on one machine.\n\n");
	for (size_t i = 0; i < config_n_settings; i++)
		usage_line(f, &config_settings[i], d);
}

void kvs_config_print(FILE *f, const kvs_config *cfg)
{
	char val[VALUE_MAX];

	fprintf(f, "# kvshared effective configuration (a valid --config file)\n"
		   "[kvshared]\n");
	for (size_t i = 0; i < config_n_settings; i++) {
		const struct setting *s = &config_settings[i];

		if (s->type == T_ACTION || (s->flags & F_NOPRINT))
			continue;
		if (s->unset && is_unset(cfg, s)) {
			fprintf(f, "# %s: %s\n", s->name, s->unset);
			continue;
		}
		format_value(cfg, s, 0, val, sizeof(val));
		fprintf(f, "%s = %s\n", s->name, val);
	}
}
