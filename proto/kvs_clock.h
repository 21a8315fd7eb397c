/*
 * kvs_clock.h - the one monotonic clock of the daemon, the engines, the
 * library and the tools: CLOCK_MONOTONIC in nanoseconds, microseconds,
 * milliseconds (whole, rounded down) or seconds (a double, for a tool's
 * rates). Internal: not installed, not part of the API. Header-only and
 * needing only <time.h>, so it stands in the vocabulary beside kvs_le.h:
 * storage/, kernels/ and the tools see it as well as service/ and client/.
 *
 * Thread: any (clock_gettime is a vDSO call: no system call).
 */
#ifndef KVS_CLOCK_H
#define KVS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t now_us(void) { return now_ns() / 1000u; }
static inline uint64_t now_ms(void) { return now_ns() / 1000000u; }
static inline double now_s(void) { return (double)now_ns() * 1e-9; }

#endif /* KVS_CLOCK_H */
