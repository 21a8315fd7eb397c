/* log.c - leveled, line-at-a-time logging to stderr (see kvs_log.h). */
#define _GNU_SOURCE
#include "kvs_log.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static enum kvs_log_level log_level = KVS_LOG_INFO;

/* The writer thread's ring: the loop formats a line and queues it; a full
 * ring drops the line and counts it, so a stalled stderr (a full pipe, a
 * stopped terminal) never stalls the loop. Before kvs_log_start() (tools,
 * tests) lines are written directly. */
#define RING_LINES 512
#define LINE_MAX_BYTES 1024

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* lines queued */
	pthread_cond_t drained; /* the queue emptied */
	pthread_t thread;
	int running, stopping;
	unsigned head, tail; /* lines [tail, head) are queued */
	uint16_t len[RING_LINES];
	char line[RING_LINES][LINE_MAX_BYTES];
	uint64_t dropped;
} ring = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
	    .drained = PTHREAD_COND_INITIALIZER };

static void *writer(void *arg)
{
	char buf[LINE_MAX_BYTES];
	sigset_t all;

	(void)arg;
	/* Signals are the loop's (libevent's handlers): never this thread's. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&ring.mu);
	for (;;) {
		size_t n;

		while (ring.head == ring.tail && !ring.stopping)
			pthread_cond_wait(&ring.cv, &ring.mu);
		if (ring.head == ring.tail)
			break; /* stopping and drained */
		n = ring.len[ring.tail % RING_LINES];
		memcpy(buf, ring.line[ring.tail % RING_LINES], n);
		ring.tail++;
		pthread_mutex_unlock(&ring.mu);
		(void)!write(STDERR_FILENO, buf, n);
		pthread_mutex_lock(&ring.mu);
		if (ring.head == ring.tail)
			pthread_cond_broadcast(&ring.drained);
	}
	pthread_mutex_unlock(&ring.mu);
	return NULL;
}

int kvs_log_start(void)
{
	int rc = pthread_create(&ring.thread, NULL, writer, NULL);

	if (rc != 0)
		return -rc;
	ring.running = 1;
	return 0;
}

void kvs_log_stop(void)
{
	struct timespec deadline;

	if (!ring.running)
		return;
	pthread_mutex_lock(&ring.mu);
	ring.stopping = 1;
	pthread_cond_signal(&ring.cv);
	pthread_mutex_unlock(&ring.mu);
	/* A stderr that takes no more (a reader that went away) must not hold
	 * up the exit: wait a little for the queue to drain, then give up. */
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 2;
	if (pthread_timedjoin_np(ring.thread, NULL, &deadline) != 0)
		pthread_detach(ring.thread);
	ring.running = 0;
}

void kvs_log_flush(int timeout_ms)
{
	struct timespec deadline;

	if (!ring.running)
		return;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (deadline.tv_nsec >= 1000000000) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&ring.mu);
	while (ring.head != ring.tail &&
	       pthread_cond_timedwait(&ring.drained, &ring.mu, &deadline) == 0)
		;
	pthread_mutex_unlock(&ring.mu);
}

uint64_t kvs_log_dropped(void)
{
	uint64_t d;

	pthread_mutex_lock(&ring.mu);
	d = ring.dropped;
	pthread_mutex_unlock(&ring.mu);
	return d;
}

static void emit(const char *line, size_t n)
{
	if (!ring.running) {
		(void)!write(STDERR_FILENO, line, n);
		return;
	}
	pthread_mutex_lock(&ring.mu);
	if (ring.head - ring.tail >= RING_LINES) {
		ring.dropped++;
	} else {
		memcpy(ring.line[ring.head % RING_LINES], line, n);
		ring.len[ring.head % RING_LINES] = (uint16_t)n;
		ring.head++;
		pthread_cond_signal(&ring.cv);
	}
	pthread_mutex_unlock(&ring.mu);
}
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

/* One line: the prefix, the message and, when @held, the count of the
 * lines its site suppressed before it. */
static void vlog(enum kvs_log_level level, uint64_t held, const char *fmt,
		 va_list ap)
{
	char line[LINE_MAX_BYTES];
	struct timeval tv;
	struct tm tm;
	int n, m;

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
		     "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ kvshared[%d] %s: ",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		     tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000), (int)getpid(),
		     level_names[level]);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	if (m < 0)
		m = 0;
	n += m;
	if (held && n < (int)sizeof(line) - 2) {
		m = snprintf(line + n, sizeof(line) - (size_t)n - 1,
			     " (%" PRIu64 " more suppressed)", held);
		n += m < 0 ? 0 : m;
	}
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	emit(line, (size_t)n); /* one write per line: lines never interleave */
}

void kvs_log(enum kvs_log_level level, const char *fmt, ...)
{
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	vlog(level, 0, fmt, ap);
	va_end(ap);
}

static pthread_mutex_t sites_mu = PTHREAD_MUTEX_INITIALIZER;

void kvs_log_site_line(kvs_log_site *site, enum kvs_log_level level,
		       const char *fmt, ...)
{
	struct timespec ts;
	uint64_t now, held = 0;
	int write_it;
	va_list ap;

	if (level > log_level)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
	pthread_mutex_lock(&sites_mu);
	if (!site->last_ms) {
		site->last_ms = now;
		site->tokens = KVS_LOG_SITE_BURST;
	} else if (now - site->last_ms >= KVS_LOG_SITE_MS) {
		uint64_t add = (now - site->last_ms) / KVS_LOG_SITE_MS;

		site->tokens = add >= KVS_LOG_SITE_BURST - site->tokens
				       ? KVS_LOG_SITE_BURST
				       : site->tokens + (uint32_t)add;
		site->last_ms += add * KVS_LOG_SITE_MS;
	}
	write_it = site->tokens > 0;
	if (write_it) {
		site->tokens--;
		held = site->held;
		site->held = 0;
	} else {
		site->held++;
	}
	pthread_mutex_unlock(&sites_mu);
	if (!write_it)
		return;
	va_start(ap, fmt);
	vlog(level, held, fmt, ap);
	va_end(ap);
}
