/*
 * server_fds.c - the daemon's file descriptors: the limit raised at start,
 * and --max-clients fitted to what it leaves (server.fd_limit, clients.max).
 */
#define _GNU_SOURCE
#include "server_int.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "kvs_log.h"

/* What one served connection costs in fds, at most: its socket, and its
 * pin area's memfd until FASTATTACH's reply carrying it is sent (conn.c
 * closes it then; a client that never reads keeps it until it is closed). */
#define FDS_PER_CLIENT 2
/* Fds kept out of --max-clients' share, besides those open once the server
 * is set up: what opens later (a remote node's reconnect, LMDB's readers)
 * and refused peers waiting for their answer; per trust domain made later,
 * its arena's memfd and its fast-path index's; and /metrics' own share,
 * --metrics-max-connections, so that scrapes never take a worker's fds. */
#define FDS_SLACK 32
#define FDS_PER_DOMAIN 2

/* Raise the soft RLIMIT_NOFILE to the hard one (each served client costs
 * FDS_PER_CLIENT fds, and 1024 is a common soft default). Returns the
 * limit in effect. */
uint64_t server_nofile_raise(void)
{
	struct rlimit rl;
	rlim_t want;
	FILE *f;
	unsigned long long nr_open = 0;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 1024;
	want = rl.rlim_max;
	/* An infinite hard limit is still bounded by the kernel's nr_open. */
	if (want == RLIM_INFINITY && (f = fopen("/proc/sys/fs/nr_open", "r"))) {
		if (fscanf(f, "%llu", &nr_open) == 1 && nr_open)
			want = (rlim_t)nr_open;
		fclose(f);
	}
	if (want == RLIM_INFINITY)
		want = 1u << 20;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= want)
		return rl.rlim_cur;
	if (rl.rlim_cur == RLIM_INFINITY)
		return want;
	rl.rlim_cur = want;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		kvs_warn("file descriptors: cannot raise the soft limit to %llu: "
			 "%s", (unsigned long long)want, strerror(errno));
		getrlimit(RLIMIT_NOFILE, &rl);
		return rl.rlim_cur;
	}
	kvs_info("file descriptors: soft limit raised to %llu (the hard limit)",
		 (unsigned long long)want);
	return want;
}

/* Fds this process has open now. */
static uint64_t fds_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	uint64_t n = 0;
	struct dirent *e;

	if (!d)
		return 64; /* no /proc: a guess for the tiers' */
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own */
}

/* Lower --max-clients to what the fd limit leaves once the tiers, the
 * listener and the log are open, and settle --max-clients-per-uid. */
int server_fds_budget(kvs_server *s)
{
	kvs_config *cfg = &s->cfg;
	/* Domain 0's arena is open already (its index is made later); tenant
	 * domains are made on their first attach. */
	uint64_t later = FDS_SLACK + (cfg->tenant_arenas
			? (uint64_t)FDS_PER_DOMAIN * cfg->max_tenants : 1) +
			 (s->metrics ? cfg->metrics_max_conns : 0);
	uint64_t open = fds_open(), keep = open + later, room;
	uint32_t want = cfg->max_clients, slots;
	int private_socket;

	room = s->fd_limit > keep ? (s->fd_limit - keep) / FDS_PER_CLIENT : 0;
	if (room < 1)
		room = 1;
	if (cfg->max_clients > room) {
		cfg->max_clients = (uint32_t)room;
		kvs_warn("--max-clients %u lowered to %u: the fd limit is %" PRIu64
			 ", %" PRIu64 " are open and %" PRIu64 " kept for files "
			 "opened later, %u per client", want, cfg->max_clients,
			 s->fd_limit, open, later, FDS_PER_CLIENT);
	}
	/* A private socket admits one uid (and root): a cap per uid would
	 * only lower --max-clients. A shared one keeps half for the others. */
	private_socket = !(cfg->socket_mode & 0077) && !cfg->n_allow_uid &&
			 !cfg->n_allow_gid;
	s->max_per_uid = cfg->max_clients_per_uid;
	if (!s->max_per_uid)
		s->max_per_uid = private_socket || cfg->max_clients < 2
					 ? cfg->max_clients : cfg->max_clients / 2;
	if (s->max_per_uid > cfg->max_clients)
		s->max_per_uid = cfg->max_clients;
	for (slots = 4; slots < 2ull * cfg->max_clients; slots *= 2)
		;
	s->uids = calloc(slots, sizeof(*s->uids));
	if (!s->uids)
		return -ENOMEM;
	s->uids_mask = slots - 1;
	s->stats.clients_max = cfg->max_clients;
	s->stats.clients_max_per_uid = s->max_per_uid;
	s->stats.server_fd_limit = (int64_t)s->fd_limit;
	kvs_info("clients: at most %u, %u per uid (fd limit %" PRIu64 ")",
		 cfg->max_clients, s->max_per_uid, s->fd_limit);
	return 0;
}

