/*
 * server.c - the control socket, who may connect (--allow-uid/gid,
 * --max-clients), and the server's life cycle (see kvs_server.h).
 * Connections are conn.c's, requests command.c's, stats server_stats.c's.
 */
#define _GNU_SOURCE
#include "server_int.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvs_fast.h"
#include "kvs_kvevents.h"
#include "kvs_log.h"
#include "kvs_tiers_table.h"

/* Refused peers are kept only until their first message is answered; more
 * than this many at once are closed without an answer. */
#define REFUSING_MAX 64
/* accept() that finds no fd left pauses the listener this long, doubling
 * while it lasts: libevent's listener is level-triggered, and the pending
 * connection would wake the loop again at once. */
#define ACCEPT_PAUSE_MIN_MS 100
#define ACCEPT_PAUSE_MAX_MS 1000
/* Refusal and pause lines at most once a second each. */
#define LOG_EVERY_MS 1000
/* Supplementary groups of a peer looked at by --allow-gid. */
#define PEER_GROUPS_MAX 256
#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59 /* Linux 4.13; older kernels answer ENOPROTOOPT */
#endif

/* ---- listening and peer checks ---------------------------------------- */

static int peer_allowed(const kvs_server *s, int fd, const struct ucred *cr)
{
	const kvs_config *cfg = &s->cfg;
	gid_t groups[PEER_GROUPS_MAX];
	socklen_t len = sizeof(groups);

	if (!cfg->n_allow_uid && !cfg->n_allow_gid)
		return 1;
	if (cr->uid == s->uid)
		return 1;
	for (uint32_t i = 0; i < cfg->n_allow_uid; i++)
		if (cfg->allow_uid[i] == (uint32_t)cr->uid)
			return 1;
	for (uint32_t i = 0; i < cfg->n_admin_uid; i++) /* operators */
		if (cfg->admin_uid[i] == (uint32_t)cr->uid)
			return 1;
	for (uint32_t i = 0; i < cfg->n_allow_gid; i++)
		if (cfg->allow_gid[i] == (uint32_t)cr->gid)
			return 1;
	if (!cfg->n_allow_gid ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return 0; /* no supplementary groups known: primary only */
	for (size_t g = 0; g < len / sizeof(gid_t); g++)
		for (uint32_t i = 0; i < cfg->n_allow_gid; i++)
			if (cfg->allow_gid[i] == (uint32_t)groups[g])
				return 1;
	return 0;
}

/* ---- connections per uid ------------------------------------------------ */

static struct uid_conns *uid_slot(kvs_server *s, uint32_t uid)
{
	uint32_t i = (uid * 2654435761u) & s->uids_mask;

	while (s->uids[i].n && s->uids[i].uid != uid)
		i = (i + 1) & s->uids_mask;
	return &s->uids[i];
}

/* The table has twice as many slots as --max-clients allows connections,
 * so there is always an empty slot to end a probe. */
static uint32_t uid_count(kvs_server *s, uint32_t uid)
{
	return uid_slot(s, uid)->n;
}

static void uid_add(kvs_server *s, uint32_t uid)
{
	struct uid_conns *u = uid_slot(s, uid);

	u->uid = uid;
	u->n++;
}

void server_conn_gone(kvs_server *s, uint32_t uid)
{
	struct uid_conns *u = uid_slot(s, uid);
	uint32_t i, j, home;

	if (!u->n || --u->n)
		return;
	/* Backward-shift deletion: pull later entries of the run into the
	 * hole when their home slot is at or before it. */
	i = (uint32_t)(u - s->uids);
	for (j = (i + 1) & s->uids_mask; s->uids[j].n; j = (j + 1) & s->uids_mask) {
		home = (s->uids[j].uid * 2654435761u) & s->uids_mask;
		if (((j - home) & s->uids_mask) >= ((j - i) & s->uids_mask)) {
			s->uids[i] = s->uids[j];
			s->uids[j].n = 0;
			i = j;
		}
	}
}

/* ---- accepting ------------------------------------------------------------ */

static void on_accept(evutil_socket_t lfd, short what, void *arg);

#define ADOPT_QUIET_MS (KVS_FAST_STALE_MS + KVS_FAST_REVOKE_GRACE_MS) /* < 1 s */

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
	kvs_server *s = arg;

	event_add(s->listen_ev, NULL);
}

/* accept() found no fd (or no memory) for the connection waiting: stop
 * listening for a while instead of being woken for it again at once. One
 * line per episode, and at most one a second. */
static void accept_pause(kvs_server *s, int err)
{
	struct timeval tv;
	uint64_t held;

	s->stats.clients_accept_paused++;
	s->accept_pauses++;
	if (!s->accept_backoff_ms) {
		s->accept_backoff_ms = ACCEPT_PAUSE_MIN_MS;
		if (kvs_ratelimit_ok(&s->rl_accept, now_ms(), LOG_EVERY_MS, &held))
			kvs_warn("accept: %s: not accepting for %u ms, up to %u "
				 "while it lasts (fd limit %" PRIu64 ", %u clients, "
				 "%u refused waiting; %" PRIu64 " such lines held)",
				 strerror(err), s->accept_backoff_ms,
				 ACCEPT_PAUSE_MAX_MS, s->fd_limit, s->nconns,
				 s->nrefusing, held);
	} else if (s->accept_backoff_ms < ACCEPT_PAUSE_MAX_MS) {
		s->accept_backoff_ms *= 2;
		if (s->accept_backoff_ms > ACCEPT_PAUSE_MAX_MS)
			s->accept_backoff_ms = ACCEPT_PAUSE_MAX_MS;
	}
	tv.tv_sec = s->accept_backoff_ms / 1000;
	tv.tv_usec = (suseconds_t)(s->accept_backoff_ms % 1000) * 1000;
	event_del(s->listen_ev);
	evtimer_add(s->accept_ev, &tv);
}

/* An accept() that did not run out: the episode, if any, is over. */
static void accept_resumed(kvs_server *s)
{
	if (!s->accept_backoff_ms)
		return;
	kvs_info("accepting again after %" PRIu64 " pause%s", s->accept_pauses,
		 s->accept_pauses == 1 ? "" : "s");
	s->accept_backoff_ms = 0;
	s->accept_pauses = 0;
}

/* Whether a peer of @uid is refused a connection (0: served), counted. */
static int refusal(kvs_server *s, int fd, const struct ucred *cr)
{
	const char *why;
	uint64_t held;
	int refuse;

	if (!peer_allowed(s, fd, cr)) {
		refuse = KVS_E_PERM;
		s->stats.clients_refused_perm++;
		why = "not in --allow-uid/--allow-gid";
	} else if (s->nconns >= s->cfg.max_clients) {
		refuse = KVS_E_LIMIT;
		s->stats.clients_refused++;
		why = "--max-clients connected";
	} else if (uid_count(s, (uint32_t)cr->uid) >= s->max_per_uid) {
		refuse = KVS_E_LIMIT;
		s->stats.clients_refused_uid++;
		why = "--max-clients-per-uid connected from its uid";
	} else {
		return 0;
	}
	if (kvs_ratelimit_ok(&s->rl_refuse, now_ms(), LOG_EVERY_MS, &held))
		kvs_warn("refusing a client (pid %d uid %u gid %u): %s (%u "
			 "clients, %u of its uid; %" PRIu64 " refusals not "
			 "logged since the last line)", (int)cr->pid,
			 (unsigned)cr->uid, (unsigned)cr->gid, why, s->nconns,
			 uid_count(s, (uint32_t)cr->uid), held);
	return refuse;
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	kvs_server *s = arg;
	struct ucred cr = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	socklen_t crlen = sizeof(cr);
	int refuse = 0;
	conn *c;
	int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
		    errno == ENOMEM)
			accept_pause(s, errno);
		else if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
			accept_resumed(s);
		else
			kvs_warn("accept: %s", strerror(errno));
		return;
	}
	accept_resumed(s);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0)
		kvs_warn("SO_PEERCRED: %s", strerror(errno)); /* uid -1: no list has it */
	refuse = refusal(s, fd, &cr);
	if (refuse && s->nrefusing >= REFUSING_MAX) {
		/* A flood of refused peers gets no answer, rather than memory. */
		close(fd);
		return;
	}
	c = conn_open(s, fd, refuse, (uint32_t)cr.uid);
	if (!c) {
		kvs_warn("refusing a client: out of memory");
		close(fd);
		return;
	}
	if (!refuse)
		uid_add(s, (uint32_t)cr.uid);
	kvs_debug("client %" PRIu64 ": connected (pid %d uid %u gid %u)", c->id,
		  (int)cr.pid, (unsigned)cr.uid, (unsigned)cr.gid);
}

/* ---- socket and life cycle -------------------------------------------- */

/* Bind the control socket, replacing a stale one but never a live daemon's
 * nor a file that is not a socket. */
static int bind_socket(const char *path, uint32_t mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	char dir[sizeof(sa.sun_path)];
	char *slash;
	int fd, rc;

	/* sa is zeroed: the path stays NUL-terminated (config caps it). */
	memcpy(sa.sun_path, path, strnlen(path, sizeof(sa.sun_path) - 1));
	strcpy(dir, sa.sun_path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		/* A directory made here lets through (x) whoever the socket's
		 * mode lets in; an existing one is left as it is. */
		uint32_t dmode = 0700 | (mode & 0060 ? 0010 : 0) | (mode & 0006 ? 0001 : 0);

		*slash = '\0';
		if (mkdir(dir, dmode) == 0) {
			(void)!chmod(dir, dmode); /* past the umask */
		} else if (errno != EEXIST) {
			rc = -errno;
			kvs_err("cannot create socket directory %s: %s", dir,
				strerror(errno));
			return rc;
		} else if (stat(dir, &st) == 0 &&
			   (((mode & 0060) && !(st.st_mode & 0010)) ||
			    ((mode & 0006) && !(st.st_mode & 0001)))) {
			kvs_warn("--socket-mode %04o lets others in, but the "
				 "directory %s (mode %04o) does not", mode, dir,
				 (unsigned)(st.st_mode & 07777));
		}
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			kvs_err("%s exists and is not a socket: not replacing it", path);
			return KVS_E_CONFIG;
		}
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		close(fd);
		if (rc == 0) {
			kvs_err("another kvshared is already serving %s", path);
			return KVS_E_DAEMON_RUNNING;
		}
		kvs_info("replacing stale socket %s", path);
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chmod(path, (mode_t)mode) < 0 || listen(fd, 128) < 0) {
		rc = -errno;
		kvs_err("cannot listen on %s: %s", path, strerror(errno));
		close(fd);
		return rc;
	}
	return fd;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	kvs_server *s = arg;

	kvs_info("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
	event_base_loopbreak(s->base);
}

/* A tier's completions are ready (its event fd is readable). */
static void on_tier(evutil_socket_t fd, short what, void *arg)
{
	kvs_tier_mod *t = arg;

	(void)fd;
	(void)what;
	kvs_cache_tier_poll(t);
}

/* The tiers the configuration turns on, each one's completions polled from
 * the loop. */
static int tiers_open(kvs_server *s, const kvs_config *cfg)
{
	uint32_t n = 0;
	int rc = kvs_tiers_open(cfg, s->cache);

	for (uint8_t i = 0; rc == 0 && i < KVS_SERVER_TIERS; i++) {
		kvs_tier_mod *t = kvs_cache_tier(s->cache, i);

		if (!t || !t->ops->event_fd || t->ops->event_fd(t) < 0)
			continue;
		s->tier_ev[n] = event_new(s->base, t->ops->event_fd(t),
					  EV_READ | EV_PERSIST, on_tier, t);
		if (!s->tier_ev[n])
			return -ENOMEM;
		event_add(s->tier_ev[n++], NULL);
	}
	return rc;
}

/* The fast path's heartbeat: clients trust the index while it is fresh. */
static void fast_tick(evutil_socket_t fd, short what, void *arg)
{
	kvs_server *s = arg;

	kvs_fast_tick(s->fast);
}

/* The fast path, after the tiers: a miss in its index is the answer only
 * when no store tier could have the block (SSD, remote). The index is
 * sized for blocks of 8 KiB and up at half load (smaller blocks that find
 * no room take the socket path); its pages are touched only where entries
 * are. Its heartbeat ticks on the loop. */
static int fast_open(kvs_server *s, const kvs_config *cfg)
{
	uint64_t entries = cfg->host_bytes / 4096;
	int rc = kvs_fast_create(s->cache, &s->stats,
				 (uint32_t)(entries > (1u << 20) ? (1u << 20) : entries),
				 cfg->max_pinned_blocks ? cfg->max_pinned_blocks
							: KVS_FAST_MAX_PINS,
				 !kvs_cache_has_stores(s->cache), &s->fast);

	if (rc < 0)
		return rc;
	kvs_cache_set_fast(s->cache, &kvs_fast_hooks, s->fast);
	s->fast_ev = event_new(s->base, -1, EV_PERSIST, fast_tick, s);
	if (!s->fast_ev ||
	    event_add(s->fast_ev, &(struct timeval){
			  0, KVS_FAST_HEARTBEAT_MS * 1000 }) < 0)
		return -ENOMEM;
	return 0;
}

/* The pool as vLLM KV events, when --kv-events is set. */
static int kvev_open(kvs_server *s, const kvs_config *cfg)
{
	kvs_kvev_config kc = { .endpoint = cfg->kv_events,
			       .replay = cfg->kv_events_replay,
			       .topic = cfg->kv_events_topic,
			       .buffer_bytes = cfg->kv_events_buffer,
			       .hwm = 100000 /* vLLM's publisher's */ };

	if (!cfg->kv_events[0])
		return 0;
	return kvs_kvev_create(&kc, s->base, s->cache, &s->stats, &s->kvev);
}

/* /metrics and POST /v1/prefix on --metrics-addr, when it is set. */
static int metrics_open(kvs_server *s, const kvs_config *cfg)
{
	kvs_metrics_limits ml = { .max_conns = cfg->metrics_max_conns,
				  .timeout_s = cfg->metrics_timeout };
	int rc;

	if (!cfg->metrics_addr[0])
		return 0;
	rc = kvs_metrics_start(s->base, cfg->metrics_addr, &ml,
			       server_render_prometheus, s, &s->metrics);
	if (rc < 0) {
		kvs_err("cannot serve metrics on %s: %s", cfg->metrics_addr,
			kvs_strerror(rc));
		return rc;
	}
	server_prefix_serve(s);
	return 0;
}

/* The listener (the one passed at start, or bound now) and the signals. */
static int listen_open(kvs_server *s)
{
	int rc;

	if (s->listen_fd < 0) {
		rc = bind_socket(s->cfg.socket_path, s->cfg.socket_mode);
		if (rc < 0)
			return rc;
		s->listen_fd = rc;
	}
	s->listen_ev = event_new(s->base, s->listen_fd, EV_READ | EV_PERSIST,
				 on_accept, s);
	s->accept_ev = evtimer_new(s->base, on_accept_resume, s);
	s->sigint_ev = evsignal_new(s->base, SIGINT, on_signal, s);
	s->sigterm_ev = evsignal_new(s->base, SIGTERM, on_signal, s);
	if (!s->listen_ev || !s->accept_ev || !s->sigint_ev || !s->sigterm_ev)
		return -ENOMEM;
	if (s->start.mode == KVS_START_COLD) {
		event_add(s->listen_ev, NULL);
	} else {
		/* The old daemon's clients may read its fast index and pin
		 * unseen by us until its heartbeat is stale (and a copy under
		 * way ends): serving no one, nothing is evicted or reused. */
		struct timeval tv = { 0, ADOPT_QUIET_MS * 1000 };
		kvs_info("adopted pool: accepting in %u ms (the old fast "
			 "index goes stale)", ADOPT_QUIET_MS);
		evtimer_add(s->accept_ev, &tv);
	}
	event_add(s->sigint_ev, NULL);
	event_add(s->sigterm_ev, NULL);
	return 0;
}

/* What the daemon serves on: the KV event stream, the socket, /metrics;
 * then the fds they leave for clients. */
static int endpoints_open(kvs_server *s, const kvs_config *cfg)
{
	int rc = kvev_open(s, cfg);

	if (rc == 0)
		rc = listen_open(s);
	if (rc == 0)
		rc = metrics_open(s, cfg);
	if (rc == 0)
		rc = server_fds_budget(s);
	return rc;
}

/* Huge pages (--host-hugepages): the pool's pages taken only once any
 * adoption is done, for the arena that serves (an adopted one has them:
 * a take-over never needs the pool twice). */
static int host_tier_reserve(kvs_server *s, const kvs_config *cfg)
{
	int rc = kvs_cache_reserve_pages(s->cache);

	if (rc < 0)
		kvs_err("cannot reserve the host tier's %" PRIu64 " bytes of "
			"huge pages: %s%s", kvs_config_host_bytes(cfg),
			kvs_strerror(rc),
			rc == -ENOMEM ? " (--host-hugepages: fewer free 2 MiB huge "
					"pages than it needs; see HugePages_Free and "
					"HugePages_Rsvd in /proc/meminfo, and "
					"vm.nr_hugepages)"
				      : "");
	return rc;
}

int kvs_server_create(const kvs_config *cfg, kvs_server **out)
{
	kvs_cache_config cc = { .host_bytes = kvs_config_host_bytes(cfg),
				.page_bytes = cfg->page_bytes,
				.hugepages = cfg->host_hugepages,
				.policy = cfg->policy,
				.max_leases = cfg->max_leases,
				.max_pinned = cfg->max_pinned_blocks,
				.max_tenants = cfg->tenant_arenas ? cfg->max_tenants : 0,
				.tenant_bytes = kvs_config_tenant_bytes(cfg),
				.max_ns_per_uid = cfg->max_ns_per_uid,
				.max_sizes_per_uid = cfg->max_sizes_per_uid,
				.max_pinned_share_per_uid = cfg->max_pinned_share_per_uid,
				/* the pool outlives the daemon: --take-over,
				 * systemd's fd store (kvs_persist.h) */
				.persist = cfg->persist };
	kvs_admin_config ac = { .max_pinned_share = cfg->max_pinned_share,
				.watch_buffer = cfg->watch_buffer };
	kvs_server *s = calloc(1, sizeof(*s));
	kvs_named_fd fds[KVS_SD_FDS_MAX];
	int rc, nfds, lfd = -1;

	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->listen_fd = -1;
	/* The previous daemon's pool and socket, if it left them: from
	 * --take-over, only once it has exited. */
	nfds = server_startup_fds(s, fds, KVS_SD_FDS_MAX, &lfd);
	if (nfds < 0) {
		free(s);
		return nfds;
	}
	s->listen_fd = lfd;
	s->uid = geteuid();
	s->fd_limit = server_nofile_raise();
	clock_gettime(CLOCK_MONOTONIC, &s->started);
	s->hashes = malloc(KVS_MAX_HASHES * sizeof(kvs_hash));
	s->blocks = malloc(KVS_MAX_HASHES * sizeof(kvs_block));
	s->reply = malloc(KVS_WIRE_MAX_PAYLOAD);
	s->base = event_base_new();
	if (!s->hashes || !s->blocks || !s->reply || !s->base) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = kvs_cache_create(&cc, &s->stats, &s->cache);
	if (rc < 0) {
		kvs_err("cannot create the host tier of %" PRIu64 " bytes: %s",
			kvs_config_host_bytes(cfg), kvs_strerror(rc));
		goto fail;
	}
	rc = server_adopt(s, fds, (uint32_t)nfds);
	nfds = 0; /* the cache's now, or closed */
	if (rc < 0)
		goto fail;
	rc = host_tier_reserve(s, cfg);
	if (rc < 0)
		goto fail;
	rc = tiers_open(s, cfg);
	if (rc < 0)
		goto fail;
	rc = fast_open(s, cfg);
	if (rc < 0)
		goto fail;
	rc = kvs_admin_create(&ac, s->cache, &s->stats, &s->admin);
	if (rc < 0)
		goto fail;
	rc = endpoints_open(s, cfg);
	if (rc < 0)
		goto fail;
	*out = s;
	return 0;
fail:
	for (int i = 0; i < nfds; i++)
		close(fds[i].fd);
	if (rc == KVS_E_DAEMON_RUNNING && s->start.reason[0])
		kvs_err("%s", s->start.reason); /* why it did not take over */
	kvs_server_destroy(s);
	return rc;
}

int kvs_server_run(kvs_server *s)
{
	kvs_info("ready on %s: host tier %" PRIu64 " MiB, page %u KiB, "
		 "eviction %s", s->cfg.socket_path,
		 kvs_cache_arena_bytes(s->cache) >> 20, s->cfg.page_bytes >> 10,
		 s->cfg.policy);
	if (s->cfg.tenant_arenas)
		kvs_info("tenant arenas: one per uid, %" PRIu64 " MiB each, "
			 "at most %u", kvs_config_tenant_bytes(&s->cfg) >> 20,
			 s->cfg.max_tenants);
	server_ready(s);
	kvs_log_flush(1000);
	if (s->cfg.ready_fd >= 0) {
		(void)!write(s->cfg.ready_fd, "READY\n", 6);
		close(s->cfg.ready_fd);
	}
	if (event_base_dispatch(s->base) < 0)
		return -EIO;
	server_stopping(s);
	return 0;
}

void kvs_server_destroy(kvs_server *s)
{
	int link;

	if (!s)
		return;
	while (s->conns)
		conn_close(s->conns, NULL);
	if (s->listen_ev)
		event_free(s->listen_ev);
	if (s->accept_ev)
		event_free(s->accept_ev);
	if (s->sigint_ev)
		event_free(s->sigint_ev);
	if (s->sigterm_ev)
		event_free(s->sigterm_ev);
	for (uint32_t i = 0; i < KVS_SERVER_TIERS; i++)
		if (s->tier_ev[i])
			event_free(s->tier_ev[i]);
	if (s->fast_ev)
		event_free(s->fast_ev);
	link = server_handover_free(s);
	kvs_metrics_stop(s->metrics);
	if (s->listen_fd >= 0) {
		close(s->listen_fd);
		/* A successor, or the service manager's store, holds the
		 * socket: its path stays for them. */
		if (!s->handed_over && !s->fd_store)
			unlink(s->cfg.socket_path);
	}
	kvs_admin_destroy(s->admin);
	kvs_kvev_destroy(s->kvev);
	kvs_cache_destroy(s->cache);
	kvs_fast_destroy(s->fast);
	if (s->base)
		event_base_free(s->base);
	free(s->hashes);
	free(s->blocks);
	free(s->reply);
	free(s->uids);
	free(s->ns_engines);
	free(s);
	/* Last: the link's close tells a successor that this daemon let go
	 * of everything (the metrics port, the tiers' files). */
	if (link >= 0)
		close(link);
}
