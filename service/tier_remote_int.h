/*
 * tier_remote_int.h - the remote tier's start-up and log lines
 * (tier_remote_open.c), apart from its lookups and publishes
 * (tier_remote.c). Not for other modules.
 * Thread: the daemon's loop thread (start-up: the main thread before it).
 */
#ifndef KVS_TIER_REMOTE_INT_H
#define KVS_TIER_REMOTE_INT_H

#include "kvs_remote.h"

/* kvs_tier_remote_auth - the AUTH file @path ("user password" or
 * "password" on its first line) into @eng's settings; warns when others
 * may read it. Errors: -errno of the file, -EINVAL (format), as
 * kvs_remote_set_auth. Logs why, never the password. */
int kvs_tier_remote_auth(kvs_remote *eng, const char *path);

/*
 * kvs_tier_remote_start - one bounded try to reach the seeds @seeds
 * (kvs_remote_open); when none answers, attach in the background instead
 * (kvs_remote_attach; *@attaching 1, logged). Errors: -EACCES (AUTH
 * refused: logged, the start fails), -EINVAL, -ENOMEM, -errno (epoll).
 */
int kvs_tier_remote_start(kvs_remote *eng, const char *seeds, int *attaching);

/* kvs_tier_remote_event - the engine's event callback: one log line each;
 * @arg is the engine. */
void kvs_tier_remote_event(void *arg, int ev, const char *host, unsigned port,
			   int err);

#endif /* KVS_TIER_REMOTE_INT_H */
