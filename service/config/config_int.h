/*
 * config_int.h - the settings table's types, shared by the configuration's
 * files only: config.c (the table itself, defaults, applying a value, rules
 * between settings, the command line), config_value.c (reading one value:
 * sizes, numbers, modes, id lists) and config_print.c (--help and
 * --print-config). Nothing else includes it.
 *
 * Thread: main() only.
 */
#ifndef KVS_CONFIG_INT_H
#define KVS_CONFIG_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_config.h"

enum type {
	T_STR,    /* char array: not empty, shorter than the field */
	T_POLICY, /* char array: the name of an eviction policy */
	T_SIZE,   /* uint32_t or uint64_t: kvs_parse_size(), within bounds */
	T_U32,    /* uint32_t: decimal, within bounds */
	T_FD,     /* int: a file descriptor number (-1: none) */
	T_MODE,   /* uint32_t: octal permission bits keeping 0600 */
	T_LEVEL,  /* enum kvs_log_level, by its name */
	T_CHOICE, /* int: the index of the value in choices[] */
	T_BOOL,   /* int: a bare flag, or true/false (1/0, yes/no) */
	T_GPU,    /* int: auto, off or a device number */
	T_UIDS,   /* uint32_t[KVS_ALLOW_MAX] and its count: users */
	T_GIDS,   /* the same: groups */
	T_ACTION, /* a flag that is not a setting: --config, --help... */
};

/* Flags of a setting. */
#define F_POW2 0x1u        /* T_SIZE: a power of two */
#define F_4K 0x2u          /* T_SIZE: a multiple of 4K */
#define F_HALF_OUTBUF 0x4u /* T_SIZE: at most half the reply backlog limit */
#define F_NOPRINT 0x8u     /* not in --print-config (an fd of the parent) */

struct setting {
	const char *name;   /* the flag, without "--", and the config key */
	const char *arg;    /* --help's name of the value; NULL: none */
	enum type type;
	size_t off, size;   /* the field of kvs_config */
	size_t n_off;       /* T_UIDS, T_GIDS: the field that counts them */
	uint64_t min, max;  /* T_SIZE, T_U32: bounds; max 0: the type's */
	unsigned flags;
	const char *const *choices; /* T_CHOICE, NULL-terminated */
	const char *def;    /* the default, read as a value would be; NULL:
			     * zero, or computed by kvs_config_defaults() */
	const char *why;    /* why a value is refused (T_UIDS: parse_ids says) */
	const char *unset;  /* --print-config: "# name: unset" for 0 or "" */
	unsigned shift;     /* --help shows the default >> shift (20: MiB) */
	const char *help;   /* --help text: "{}" the default, "{list}" the
			     * choices; a '\n' starts an indented line */
};

/* The table, in --help's order (--print-config follows it too); declared
 * once, in config.c. */
extern const struct setting config_settings[];
extern const size_t config_n_settings;

/* MemAvailable of /proc/meminfo in bytes, 0 if unknown (config_memory.c). */
uint64_t config_mem_available(void);

/* The field of kvs_config that @s sets. */
static inline void *config_field(kvs_config *cfg, const struct setting *s)
{
	return (char *)cfg + s->off;
}

static inline const void *config_cfield(const kvs_config *cfg,
					const struct setting *s)
{
	return (const char *)cfg + s->off;
}

/* T_SIZE and T_U32 fields are uint32_t or uint64_t: the table says which. */
static inline uint64_t config_uint_get(const kvs_config *cfg,
				       const struct setting *s)
{
	const void *p = config_cfield(cfg, s);

	return s->size == sizeof(uint32_t) ? *(const uint32_t *)p
					   : *(const uint64_t *)p;
}

/* ---- config_value.c ---- */

/* config_parse_u32 - decimal @s, at least @min, into *out. 0 or -EINVAL. */
int config_parse_u32(const char *s, uint32_t min, uint32_t *out);
/* config_parse_mode - "0660": octal permission bits that keep the owner's
 * read and write. 0 or -EINVAL. */
int config_parse_mode(const char *s, uint32_t *out);
/* config_parse_bool - true/false, 1/0, yes/no; NULL (a bare flag) is true.
 * 0 or -EINVAL. */
int config_parse_bool(const char *val, int *out);
/* config_parse_ids - "0,65534,alice": numbers, or user (@groups: group)
 * names looked up now, into @ids (KVS_ALLOW_MAX entries) and *n_out.
 * Returns NULL or why @val is refused (nothing changed then). */
const char *config_parse_ids(const char *val, int groups, uint32_t *ids,
			     uint32_t *n_out);

#endif /* KVS_CONFIG_INT_H */
