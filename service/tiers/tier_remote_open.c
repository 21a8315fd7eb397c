/* tier_remote_open.c - the remote tier's start-up (the AUTH file; open, or
 * attach in the background when the cluster does not answer) and its log
 * lines (see tier_remote_int.h, docs/remote.md). */
#define _GNU_SOURCE
#include "tier_remote_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "kvs_log.h"
#include "kvs_types.h" /* kvs_strerror */

/* The AUTH file: "user password" or "password" on its first line. Warns
 * when others may read it. */
static int read_auth(const char *path, char *user, char *pass, size_t cap)
{
	char line[512], *sp;
	struct stat st;
	FILE *f = fopen(path, "r");
	int rc = 0;

	if (!f) {
		rc = -errno;
		kvs_err("--remote-auth-file %s: %s", path, kvs_strerror(rc));
		return rc;
	}
	if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
		kvs_warn("--remote-auth-file %s: readable by others (chmod 600)", path);
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	fclose(f);
	line[strcspn(line, "\r\n")] = '\0';
	sp = strchr(line, ' ');
	user[0] = '\0';
	if (sp) {
		*sp++ = '\0';
		snprintf(user, cap, "%s", line);
	} else {
		sp = line;
	}
	if (!*sp || strlen(sp) >= cap || strlen(line) >= cap) {
		kvs_err("--remote-auth-file %s: want \"user password\" or "
			"\"password\" on the first line", path);
		rc = -EINVAL;
	} else {
		snprintf(pass, cap, "%s", sp);
	}
	explicit_bzero(line, sizeof(line));
	return rc;
}


int kvs_tier_remote_auth(kvs_remote *eng, const char *path)
{
	char user[256] = "", pass[256] = "";
	int rc = read_auth(path, user, pass, sizeof(user));

	if (rc == 0)
		rc = kvs_remote_set_auth(eng, user[0] ? user : NULL, pass);
	explicit_bzero(pass, sizeof(pass));
	return rc;
}

/*
 * One try to reach the seeds (bounded: the connect timeout per seed, and
 * refused at once when nothing listens). A cluster that does not answer
 * is not a reason to stop: the daemon serves its local tiers and the
 * engine attaches in the background, without blocking the loop, when the
 * cluster answers. A seed that answers in a way no wait will change is a
 * setting to fix, and start fails saying why: AUTH refused or a client
 * certificate wanted (-EACCES), a certificate that does not verify
 * (-EKEYREJECTED), a reply that is not Redis's or a TLS port spoken to in
 * plain text (-EPROTO).
 */
int kvs_tier_remote_start(kvs_remote *eng, const char *seeds, int *attaching)
{
	int rc = kvs_remote_open(eng);

	*attaching = 0;
	if (rc == -EACCES) { /* the last error says which, TLS or AUTH */
		kvs_err("remote tier: %s refused AUTH or its user lacks a "
			"permission (check --remote-auth-file and the ACL): %s",
			seeds, kvs_remote_last_error(eng));
		return rc;
	}
	if (rc == -EKEYREJECTED || rc == -EPROTO) {
		kvs_err("remote tier: cannot use %s: %s (%s)", seeds,
			kvs_strerror(rc), kvs_remote_last_error(eng));
		return rc;
	}
	if (rc == 0 || rc == -EINVAL || rc == -ENOMEM)
		return rc;
	kvs_warn("remote tier: cannot reach %s: %s%s%s%s; serving the local tiers, "
		 "attaching in the background (tier_remote.attached 0 until then)",
		 seeds, kvs_strerror(rc), kvs_remote_last_error(eng)[0] ? " (" : "",
		 kvs_remote_last_error(eng), kvs_remote_last_error(eng)[0] ? ")" : "");
	rc = kvs_remote_attach(eng);
	if (rc == 0)
		*attaching = 1;
	return rc;
}

/* One line per event; @host is printable (the engine escaped what a slot
 * map may name); node down/up and protocol errors come once per episode. */
void kvs_tier_remote_event(void *arg, int ev, const char *host, unsigned port,
			   int err)
{
	kvs_remote *eng = arg;

	if (ev == KVS_REMOTE_EV_NODE_DOWN) /* a TLS failure says why */
		kvs_warn("remote tier: node %s:%u down: %s%s%s (misses for its slots)",
			 host, port, kvs_strerror(err), err == -EKEYREJECTED ? ": " : "",
			 err == -EKEYREJECTED ? kvs_remote_last_error(eng) : "");
	else if (ev == KVS_REMOTE_EV_NODE_UP)
		kvs_info("remote tier: node %s:%u answers again", host, port);
	else if (ev == KVS_REMOTE_EV_PROTO)
		kvs_warn("remote tier: node %s:%u sent a reply that does not fit its "
			 "command: connection closed (counted in errors_proto; not "
			 "logged again for 10 s)", host, port);
	else if (ev == KVS_REMOTE_EV_MAP_REFUSED)
		kvs_warn("remote tier: slot map from %s:%u refused (%s); the last "
			 "one stays", host, port,
			 err == -ENOSPC ? "more nodes than the engine keeps"
					: "malformed");
	else if (ev == KVS_REMOTE_EV_AUTH)
		kvs_err("remote tier: node %s:%u refused AUTH or its user lacks a "
			"permission (check --remote-auth-file and the ACL)", host,
			port);
	else if (ev == KVS_REMOTE_EV_ATTACHED)
		kvs_info("remote tier: attached: %s:%u answered (%s)", host, port,
			 kvs_remote_is_cluster(eng) ? "Redis Cluster" : "one node");
	else
		kvs_info("remote tier: slot map changed (told by %s:%u)", host, port);
}
