/* socket_path.c - the daemon's default socket path, shared by the daemon
 * (where it listens) and the client library (where it connects). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kvs_types.h"

int kvs_default_socket_path(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	if (!buf)
		return -EINVAL;
	if (xdg && xdg[0])
		n = snprintf(buf, len, "%s/kvshare/kvshared.sock", xdg);
	else
		n = snprintf(buf, len, "/tmp/kvshare-%u/kvshared.sock",
			     (unsigned)getuid());
	if (n < 0)
		return -EINVAL;
	if ((size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}
