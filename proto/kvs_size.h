/*
 * kvs_size.h - the one reading of a size with a unit ("256M", "1.5G",
 * "2GiB"), for the daemon's settings and the tools' options. Internal:
 * not installed, not part of the API. Header-only and needing only the C
 * library, so it stands in the vocabulary beside kvs_le.h (build/vocab/):
 * the tools see it as well as service/. Each caller keeps its own bounds.
 *
 * Thread: any (strtod in the C locale's number syntax).
 */
#ifndef KVS_SIZE_H
#define KVS_SIZE_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * kvs_parse_size - "123", "64K", "1.5G", "2GiB" -> bytes (binary units:
 * K, M, G, T in either case, optionally followed by "B" or "iB"; a bare
 * number may end in "B").
 * Errors: -EINVAL (syntax, zero), -ERANGE (overflow).
 */
static inline int kvs_parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;
	uint64_t mult = 1;

	errno = 0;
	if (!s || !*s || *s == '-')
		return -EINVAL;
	v = strtod(s, &end);
	if (end == s || errno || !isfinite(v) || v <= 0)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': mult = 1ull << 10; end++; break;
	case 'm': case 'M': mult = 1ull << 20; end++; break;
	case 'g': case 'G': mult = 1ull << 30; end++; break;
	case 't': case 'T': mult = 1ull << 40; end++; break;
	default: break;
	}
	if (mult > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
		end += strlen(end);
	else if (mult == 1 && strcmp(end, "B") == 0)
		end++;
	if (*end)
		return -EINVAL;
	if (v * (double)mult >= 18446744073709551615.0)
		return -ERANGE;
	*out = (uint64_t)(v * (double)mult);
	return *out ? 0 : -EINVAL;
}

/*
 * kvs_parse_sizes - a comma-separated list of kvs_parse_size() sizes
 * ("64K,1M,2M") into @out, at most @max of them. Returns how many (at
 * least 1); -EINVAL for an empty list or item, a bad size or more than
 * @max; -ERANGE for an overflow.
 */
static inline int kvs_parse_sizes(const char *s, uint64_t *out, unsigned max)
{
	char item[64];
	unsigned n = 0;

	if (!s || !*s)
		return -EINVAL;
	for (;;) {
		size_t len = strcspn(s, ",");
		int rc;

		if (len == 0 || len >= sizeof(item) || n == max)
			return -EINVAL;
		memcpy(item, s, len);
		item[len] = '\0';
		rc = kvs_parse_size(item, &out[n++]);
		if (rc < 0)
			return rc;
		if (!s[len])
			return (int)n;
		s += len + 1;
	}
}

#endif /* KVS_SIZE_H */
