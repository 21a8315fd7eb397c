/*
 * test_log_limit - a warning that repeats at a client's pace cannot fill
 * the log: 2,000 connections that each send a header with a bad magic
 * (each one a "bad message magic" warning, errors.proto counts them all)
 * write a burst of KVS_LOG_SITE_BURST such lines and then one a second at
 * most, and the site's next line says how many were suppressed. After a quiet second
 * one more bad magic is written with the count of the rest: the lines
 * written plus the suppressed counts they report are every warning.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_raw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* service/base/kvs_log.h's: a call site's burst, then a line per window. */
#define KVS_LOG_SITE_BURST 10
#define KVS_LOG_SITE_MS 1000

#define FLOOD 2000
#define NEEDLE "bad message magic"

static void bad_magic(const th_daemon *d)
{
	uint8_t junk[KVS_WIRE_HDR_SIZE];
	int fd = th_raw_connect(d);

	if (fd < 0)
		th_fatal("connect: %s", strerror(-fd));
	memset(junk, 0x5a, sizeof(junk));
	CHECK_RC(th_raw_send(fd, junk, sizeof(junk)), 0);
	CHECK(th_raw_wait_closed(fd, TH_WAIT_MS));
	close(fd);
}

/* Lines of the log with NEEDLE, and the sum of their suppressed counts. */
static void count_lines(const th_daemon *d, long *lines, long *suppressed)
{
	FILE *f = fopen(d->log, "r");
	char line[2048];

	*lines = *suppressed = 0;
	if (!f)
		th_fatal("open %s", d->log);
	while (fgets(line, sizeof(line), f)) {
		const char *p;
		long n;

		if (!strstr(line, NEEDLE))
			continue;
		(*lines)++;
		p = strrchr(line, '(');
		if (p && sscanf(p, "(%ld more suppressed)", &n) == 1)
			*suppressed += n;
	}
	fclose(f);
}

int main(void)
{
	static th_daemon d;
	int64_t t0, t1, t2;
	long lines, suppressed, bound;

	th_init("test_log_limit");
	th_daemon_up(&d, TH_ARGS("--host-size", "8M"));
	t0 = th_now_ms();
	for (int i = 0; i < FLOOD; i++)
		bad_magic(&d);
	t1 = th_now_ms();
	CHECK(th_wait_stat(&d, "errors.proto", FLOOD, TH_WAIT_MS));
	/* A quiet window, then one more: it carries the rest's count. */
	while (th_now_ms() - t1 <= KVS_LOG_SITE_MS)
		th_poll_pause();
	bad_magic(&d);
	t2 = th_now_ms();
	CHECK(th_wait_stat(&d, "errors.proto", FLOOD + 1, TH_WAIT_MS));
	CHECK(th_log_contains(&d, "more suppressed)"));
	/* The daemon writes from a thread: wait for the last line's count. */
	for (int64_t end = th_now_ms() + TH_WAIT_MS; th_now_ms() < end;
	     th_poll_pause()) {
		count_lines(&d, &lines, &suppressed);
		if (lines + suppressed >= FLOOD + 1)
			break;
	}
	/* The burst, then a line per window of KVS_LOG_SITE_MS at most. */
	bound = KVS_LOG_SITE_BURST + (t2 - t0) / KVS_LOG_SITE_MS + 1;
	th_note("%d bad magics in %lld ms: %ld lines, %ld reported suppressed "
		"(bound %ld lines)", FLOOD + 1, (long long)(t2 - t0), lines,
		suppressed, bound);
	CHECK_LE(lines, bound);
	CHECK_LT(lines, FLOOD / 4);
	CHECK_EQ(lines + suppressed, FLOOD + 1);
	return th_finish();
}
