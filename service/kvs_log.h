/*
 * kvs_log.h - one line per event to stderr, with a level.
 *
 * The level is process-wide (set once by main()); every other piece of daemon
 * state is passed explicitly. Lines look like
 *   2026-11-30T02:53:47.123Z kvshared[123] info: ready on /run/...
 * Nothing is logged per request at the default level (info).
 *
 * Thread: the daemon's loop thread (stderr writes are line-atomic anyway).
 */
#ifndef KVS_LOG_H
#define KVS_LOG_H

enum kvs_log_level {
	KVS_LOG_ERROR = 0,
	KVS_LOG_WARN = 1,
	KVS_LOG_INFO = 2,
	KVS_LOG_DEBUG = 3,
};

void kvs_log_set_level(enum kvs_log_level level);
enum kvs_log_level kvs_log_get_level(void);

/* kvs_log_level_parse - "error", "warn", "info", "debug" -> level; -EINVAL. */
int kvs_log_level_parse(const char *s, enum kvs_log_level *out);
const char *kvs_log_level_name(enum kvs_log_level level);

void kvs_log(enum kvs_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define kvs_err(...) kvs_log(KVS_LOG_ERROR, __VA_ARGS__)
#define kvs_warn(...) kvs_log(KVS_LOG_WARN, __VA_ARGS__)
#define kvs_info(...) kvs_log(KVS_LOG_INFO, __VA_ARGS__)
#define kvs_debug(...)                                       \
	do {                                                 \
		if (kvs_log_get_level() >= KVS_LOG_DEBUG)    \
			kvs_log(KVS_LOG_DEBUG, __VA_ARGS__); \
	} while (0)

#endif /* KVS_LOG_H */
