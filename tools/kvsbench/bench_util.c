/*
 * bench_util.c - kvsbench's shared helpers (contract in bench_util.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

#include "bench_util.h"

uint64_t kvsb_splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void kvsb_tokens(uint32_t *t, size_t n, uint64_t seed, uint32_t vocab)
{
	for (size_t i = 0; i < n; i++)
		t[i] = (uint32_t)(kvsb_splitmix64(&seed) % vocab);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double kvsb_median(const double *v, unsigned n)
{
	double s[KVSB_MEDIAN_MAX];

	if (n == 0)
		return 0;
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

int kvsb_parse_uint(const char *opt, const char *s, unsigned min,
		    unsigned max, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max) {
		fprintf(stderr, "kvsbench: --%s: '%s' is not a number in %u..%u\n",
			opt, s, min, max);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

int kvsb_parse_seconds(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0.01 && v <= 3600)) {
		fprintf(stderr, "kvsbench: --seconds: '%s' is not a number in "
			"0.01..3600\n", s);
		return -1;
	}
	*out = v;
	return 0;
}

int kvsb_reap(int pid, double timeout_s)
{
	double deadline = now_s() + timeout_s;
	struct timespec pause = { 0, 1000000 };
	int status;

	for (;;) {
		pid_t p = waitpid((pid_t)pid, &status, WNOHANG);

		if (p == pid)
			return status;
		if (p < 0 && errno != EINTR)
			return -errno;
		if (now_s() > deadline)
			return -ETIMEDOUT;
		nanosleep(&pause, NULL);
		if (pause.tv_nsec < 20000000)
			pause.tv_nsec *= 2;
	}
}

void kvsb_log_tail(const char *who, const char *path)
{
	char buf[2048];
	FILE *f = fopen(path, "r");
	size_t n;
	long size;

	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0,
	      SEEK_SET);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	fprintf(stderr, "kvsbench: %s log (%s):\n%s\n", who, path, buf);
}
