/*
 * kvs_log.h - one line per event to stderr, with a level.
 *
 * The level is process-wide (set once by main()); every other piece of daemon
 * state is passed explicitly. Lines look like
 *   2026-11-30T02:53:47.123Z kvshared[123] info: ready on /run/...
 * Nothing is logged per request at the default level (info).
 *
 * Thread: any (see kvs_log_start).
 */
#ifndef KVS_LOG_H
#define KVS_LOG_H

#include <stdint.h>

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

/*
 * kvs_log_start - hand writing to a thread with a bounded queue: from then on
 * kvs_log() never blocks its caller; a line that finds the queue full is
 * dropped and counted (kvs_log_dropped). kvs_log_stop() writes what is queued
 * and ends the thread. Without kvs_log_start(), lines are written directly.
 * Errors: -errno from pthread_create.
 * Thread: start/stop from main(); kvs_log() from any thread.
 */
int kvs_log_start(void);
void kvs_log_stop(void);
uint64_t kvs_log_dropped(void);
/* kvs_log_flush - wait up to @timeout_ms for the queued lines to be written
 * (the daemon does before it says READY, so the log is complete then). */
void kvs_log_flush(int timeout_ms);

void kvs_log(enum kvs_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * A line whose cause repeats at a client's pace (a refusal, a full fd table)
 * is written at most once per interval: kvs_ratelimit_ok() says whether to
 * write it now, and *held how many were held back since the last one, to be
 * said in it. One kvs_ratelimit per kind of line, zeroed to start.
 * Thread: the owner's (the daemon's loop).
 */
typedef struct kvs_ratelimit {
	uint64_t next_ms; /* monotonic ms before which lines are held */
	uint64_t held;
} kvs_ratelimit;

static inline int kvs_ratelimit_ok(kvs_ratelimit *r, uint64_t now_ms,
				   uint32_t interval_ms, uint64_t *held)
{
	if (r->next_ms && now_ms < r->next_ms) {
		r->held++;
		return 0;
	}
	*held = r->held;
	r->held = 0;
	r->next_ms = now_ms + interval_ms;
	return 1;
}

/*
 * Every error and warning is limited where it is written: one call site of
 * kvs_err() or kvs_warn() writes a burst of KVS_LOG_SITE_BURST lines, then
 * at most one per KVS_LOG_SITE_MS (a bucket of that many lines, refilled
 * one a second); the lines past that are counted, and the site's next line
 * written ends with "(N more suppressed)". A cause that repeats at a
 * client's pace (a bad magic on every connection) or a disk's (a failing
 * flush) cannot fill the log, and nothing it said is lost without a count.
 * Thread: any (the sites' counts are under a lock).
 */
#define KVS_LOG_SITE_BURST 10
#define KVS_LOG_SITE_MS 1000

typedef struct kvs_log_site {
	uint64_t last_ms; /* monotonic ms of the last refill; 0: never used */
	uint32_t tokens;  /* lines it may write now */
	uint64_t held;    /* suppressed since the last line written */
} kvs_log_site;

void kvs_log_site_line(kvs_log_site *site, enum kvs_log_level level,
		       const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define KVS_LOG_LIMITED(level, ...)                                     \
	do {                                                            \
		static kvs_log_site kvs_log_site_;                      \
		kvs_log_site_line(&kvs_log_site_, level, __VA_ARGS__);  \
	} while (0)

#define kvs_err(...) KVS_LOG_LIMITED(KVS_LOG_ERROR, __VA_ARGS__)
#define kvs_warn(...) KVS_LOG_LIMITED(KVS_LOG_WARN, __VA_ARGS__)
#define kvs_info(...) kvs_log(KVS_LOG_INFO, __VA_ARGS__)
#define kvs_debug(...)                                       \
	do {                                                 \
		if (kvs_log_get_level() >= KVS_LOG_DEBUG)    \
			kvs_log(KVS_LOG_DEBUG, __VA_ARGS__); \
	} while (0)

#endif /* KVS_LOG_H */
