/*
 * server_start.c - how a daemon comes by the pool of the one before it:
 * the fds it starts with (another daemon's, by --take-over; systemd's fd
 * store, by $LISTEN_FDS), the listening socket among them, the table
 * rebuilt from the rest (kvs_persist.h), and what systemd is told once
 * serving and when stopping (kvs_sdnotify.h).
 */
#define _GNU_SOURCE
#include "server_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const char *const mode_names[] = {
	[KVS_START_COLD] = "cold",
	[KVS_START_HANDED_OVER] = "handed over",
	[KVS_START_RECOVERED] = "recovered",
};

/* Whether @fd is a listening unix stream socket bound to @path. */
static int listener_of(int fd, const char *path)
{
	struct sockaddr_un sa;
	struct stat st;
	socklen_t len = sizeof(sa);
	int on = 0, type = 0;
	socklen_t olen = sizeof(on), tlen = sizeof(type);

	memset(&sa, 0, sizeof(sa));
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &olen) < 0 || !on ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0 ||
	    type != SOCK_STREAM ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0 ||
	    sa.sun_family != AF_UNIX)
		return 0;
	/* Its path must still lead to a socket (a removed runtime directory
	 * leaves the socket reachable by no one). */
	return strncmp(sa.sun_path, path, sizeof(sa.sun_path)) == 0 &&
	       lstat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* Take the listening socket out of @fds (@n): one for our path is kept in
 * *listen_fd, one for another path (the configuration changed) closed.
 * Returns how many are left. */
static uint32_t take_listener(kvs_server *s, kvs_named_fd *fds, uint32_t n,
			      int *listen_fd)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (strcmp(fds[i].name, "listen") != 0) {
			fds[k++] = fds[i];
		} else if (*listen_fd < 0 && listener_of(fds[i].fd, s->cfg.socket_path)) {
			*listen_fd = fds[i].fd;
			fcntl(fds[i].fd, F_SETFL, fcntl(fds[i].fd, F_GETFL) | O_NONBLOCK);
		} else {
			kvs_warn("a listening socket passed at start is not "
				 "one on %s: closed", s->cfg.socket_path);
			close(fds[i].fd);
		}
	}
	return k;
}

static int takeover_fds(kvs_server *s, kvs_named_fd *fds, uint32_t max,
			struct takeover_link *tl)
{
	const char *path = s->cfg.take_over;
	char why[192];
	int n = server_takeover(path, fds, max, tl, why, sizeof(why));

	if (n == KVS_E_VERSION) {
		kvs_warn("--take-over %s: %s: starting cold", path, why);
		snprintf(s->start.reason, sizeof(s->start.reason),
			 "--take-over %s: %s", path, why);
		return 0;
	}
	if (n < 0) {
		kvs_err("--take-over %s: %s", path, why);
		return n;
	}
	kvs_info("--take-over %s: %d fds received", path, n);
	/* The successor serves the path it took over. */
	snprintf(s->cfg.socket_path, sizeof(s->cfg.socket_path), "%s", path);
	return n;
}

/* Of several fds of one name in @fds (@n: the fd store holds every one
 * stored), keep the last (the newest) and close the others. Returns how
 * many are left. */
static uint32_t newest_of_each(kvs_named_fd *fds, uint32_t n)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = i + 1;

		while (j < n && strcmp(fds[j].name, fds[i].name) != 0)
			j++;
		if (j < n) {
			kvs_warn("fds passed at start: %s more than once: the "
				 "last one kept", fds[i].name);
			close(fds[i].fd);
		} else {
			fds[k++] = fds[i];
		}
	}
	return k;
}

/* Remember the names of @fds (@n) the fd store passed, once each. */
static void remember_passed(kvs_server *s, const kvs_named_fd *fds, uint32_t n)
{
	for (uint32_t i = 0; i < n && s->npassed < KVS_SD_FDS_MAX; i++) {
		uint32_t k = 0;

		while (k < s->npassed && strcmp(s->passed[k], fds[i].name))
			k++;
		if (k == s->npassed)
			snprintf(s->passed[s->npassed++], sizeof(s->passed[0]),
				 "%s", fds[i].name);
	}
}

int server_startup_fds(kvs_server *s, kvs_named_fd *fds, uint32_t max,
		       int *listen_fd)
{
	struct takeover_link tl = { .fd = -1 };
	char why[256];
	int n;

	*listen_fd = -1;
	if (s->cfg.take_over[0]) {
		n = takeover_fds(s, fds, max, &tl);
	} else {
		n = kvs_sd_listen_fds(fds, max, why, sizeof(why));
		if (n < 0)
			kvs_err("fds passed at start: %s", why);
		else if (n > 0)
			kvs_info("%d fds passed at start ($LISTEN_FDS)", n);
		if (n > 0) {
			remember_passed(s, fds, (uint32_t)n);
			n = (int)newest_of_each(fds, (uint32_t)n);
		}
	}
	if (n <= 0) {
		if (tl.fd >= 0)
			close(tl.fd); /* an answer of no fds: nothing to take */
		return n;
	}
	n = (int)take_listener(s, fds, (uint32_t)n, listen_fd);
	if (tl.fd >= 0 && server_takeover_ack(&tl, why, sizeof(why)) < 0) {
		/* It may serve the pool yet: not ours to touch. */
		kvs_warn("--take-over %s: %s: starting cold", s->cfg.take_over, why);
		snprintf(s->start.reason, sizeof(s->start.reason),
			 "--take-over %s: %.120s", s->cfg.take_over, why);
		for (int i = 0; i < n; i++)
			close(fds[i].fd);
		n = 0;
	}
	return n;
}

int server_adopt(kvs_server *s, kvs_named_fd *fds, uint32_t n)
{
	kvs_persist_report r = { .mode = KVS_START_COLD };
	int rc = 0;

	if (n)
		rc = kvs_persist_adopt(s->cache, fds, n, &r);
	if (rc < 0) {
		kvs_err("rebuilding the table from %u fds: %s", n, kvs_strerror(rc));
		return rc;
	}
	if (!s->cfg.persist) /* the cache closed what was passed */
		snprintf(r.reason, sizeof(r.reason), "--persist off: the host "
			 "tier is not kept across restarts");
	else if (!r.reason[0] && s->start.reason[0]) /* why --take-over got none */
		snprintf(r.reason, sizeof(r.reason), "%s", s->start.reason);
	s->start = r;
	s->stats.start_mode = r.mode;
	s->stats.start_blocks_kept = (int64_t)r.blocks_kept;
	s->stats.start_blocks_dropped = (int64_t)r.blocks_dropped;
	s->stats.start_adopt_ms = (int64_t)(r.elapsed_ns / 1000000u);
	kvs_info("started %s: %" PRIu64 " blocks kept, %" PRIu64 " dropped%s%s",
		 mode_names[r.mode], r.blocks_kept, r.blocks_dropped,
		 r.reason[0] ? ": " : "", r.reason);
	return 0;
}

/* The names passed at start that @fds (@n, just stored) do not hold: a
 * cold start's pool, --persist off's none, tenant arenas not made again.
 * Removed from the store, so that it keeps no memfd (RAM) nobody uses. */
static void remove_unused(kvs_server *s, const kvs_named_fd *fds, int n)
{
	char gone[256] = "";
	size_t len = 0;

	for (uint32_t k = 0; k < s->npassed; k++) {
		int i = 0, rc;

		while (i < n && strcmp(fds[i].name, s->passed[k]))
			i++;
		if (i < n)
			continue;
		rc = kvs_sd_notify_remove(s->passed[k]);
		if (rc < 0) {
			kvs_warn("fd store: FDSTOREREMOVE=1 of %s: %s",
				 s->passed[k], strerror(-rc));
			continue;
		}
		if (len < sizeof(gone))
			len += (size_t)snprintf(gone + len, sizeof(gone) - len,
						"%s%s", len ? ", " : "",
						s->passed[k]);
	}
	if (gone[0])
		kvs_info("fd store: %s removed: not used by this start (%s)",
			 gone, mode_names[s->start.mode]);
	s->npassed = 0;
}

/* The fds systemd keeps for the next start: the pool's and the listener. */
static void store_fds(kvs_server *s)
{
	kvs_named_fd fds[KVS_SD_FDS_MAX];
	int n = kvs_persist_fds(s->cache, fds, KVS_SD_FDS_MAX - 1), rc;

	if (n < 0) {
		kvs_warn("fd store: the pool's fds: %s", kvs_strerror(n));
		n = 0;
	}
	fds[n].fd = s->listen_fd;
	snprintf(fds[n++].name, sizeof(fds[0].name), "listen");
	rc = kvs_sd_notify_fds(fds, (uint32_t)n);
	if (rc < 0)
		kvs_warn("fd store: FDSTORE=1 to $NOTIFY_SOCKET: %s", strerror(-rc));
	else if (rc > 0 && !s->fd_store)
		kvs_info("fd store: %d fds kept by the service manager", rc);
	s->fd_store |= rc > 0;
	if (rc > 0) {
		s->fds_stored = n - 1; /* the listener is last */
		remove_unused(s, fds, n);
	}
}

void server_fdstore_more(kvs_server *s)
{
	kvs_named_fd fds[KVS_SD_FDS_MAX];
	int n, rc;

	if (!s->fd_store)
		return;
	/* The new ones come last: kvs-meta, then the arenas in order. */
	n = kvs_persist_fds(s->cache, fds, KVS_SD_FDS_MAX - 1);
	if (n <= s->fds_stored)
		return;
	rc = kvs_sd_notify_fds(fds + s->fds_stored, (uint32_t)(n - s->fds_stored));
	if (rc < 0) {
		kvs_warn("fd store: FDSTORE=1 to $NOTIFY_SOCKET: %s", strerror(-rc));
		return;
	}
	kvs_info("fd store: %s and %d more kept by the service manager",
		 fds[s->fds_stored].name, n - s->fds_stored - 1);
	s->fds_stored = n;
}

void server_ready(kvs_server *s)
{
	char st[256];

	if (!getenv("NOTIFY_SOCKET"))
		return;
	store_fds(s);
	snprintf(st, sizeof(st), "READY=1\nMAINPID=%d\nSTATUS=serving %s "
		 "(started %s, %" PRIu64 " blocks kept)", (int)getpid(),
		 s->cfg.socket_path, mode_names[s->start.mode],
		 s->start.blocks_kept);
	if (kvs_sd_notify(st, NULL, 0) < 0)
		kvs_warn("READY=1 to $NOTIFY_SOCKET failed");
}

void server_stopping(kvs_server *s)
{
	int rc;

	if (!getenv("NOTIFY_SOCKET") || s->handed_over)
		return;
	kvs_sd_notify("STOPPING=1\nSTATUS=stopping: closing clients", NULL, 0);
	/* Reserves not committed are dropped with their connections; what
	 * is committed stays, marked as left cleanly. */
	while (s->conns)
		conn_close(s->conns, NULL);
	rc = kvs_persist_leave(s->cache);
	if (rc < 0)
		kvs_warn("marking the pool as left cleanly: %s", kvs_strerror(rc));
	store_fds(s); /* arenas made since READY */
}
