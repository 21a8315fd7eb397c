/* log.c - leveled, line-at-a-time logging to stderr (see kvs_log.h). */
#include "kvs_log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static enum kvs_log_level log_level = KVS_LOG_INFO;
static const char *const level_names[] = { "error", "warn", "info", "debug" };

void kvs_log_set_level(enum kvs_log_level level) { log_level = level; }
enum kvs_log_level kvs_log_get_level(void) { return log_level; }

const char *kvs_log_level_name(enum kvs_log_level level)
{
	return (unsigned)level <= KVS_LOG_DEBUG ? level_names[level] : "?";
}

int kvs_log_level_parse(const char *s, enum kvs_log_level *out)
{
	for (int i = 0; i <= KVS_LOG_DEBUG; i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum kvs_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

void kvs_log(enum kvs_log_level level, const char *fmt, ...)
{
	char line[1024];
	struct timeval tv;
	struct tm tm;
	va_list ap;
	int n, m;

	if (level > log_level)
		return;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
		     "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ kvshared[%d] %s: ",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		     tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000), (int)getpid(),
		     level_names[level]);
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	n += m;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* One write per line so that lines never interleave; a full pipe drops
	 * the line rather than blocking the loop (stderr is nonblocking only if
	 * the operator made it so; this is best effort). */
	(void)!write(STDERR_FILENO, line, (size_t)n);
}
