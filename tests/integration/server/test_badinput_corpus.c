/*
 * test_badinput_corpus - replay every file of tests/badinput/ (written by
 * tests/badinput/make_badinput.c) against a live daemon on a raw socket:
 * each NAME.msg is sent as it is, and NAME.expect says what must follow
 * (the replies' opcodes and statuses, then whether the connection stays
 * usable, is closed, or waits for the rest of a truncated message), and
 * which error counter grows by how much. After every file a good client
 * publishes and reads back a chain, on a long-lived and on a new connection.
 *
 * Also: messages sent with file descriptors attached (SCM_RIGHTS), 3 and
 * then 12 of them (more than the daemon's control buffer holds): the daemon
 * closes every one (its /proc/PID/fd count is the same before and after),
 * counts errors.proto, answers the message, and keeps serving.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_raw.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef KVS_BADINPUT_DIR
#error "KVS_BADINPUT_DIR: the corpus directory (set by tests/CMakeLists.txt)"
#endif

#define MAX_REPLIES 8

static th_daemon d;
static kvs_layout L;
static kvs_client *good;
static uint64_t next_seed = 7000;

typedef struct expect {
	int attach;
	int nreplies;
	int op[MAX_REPLIES], status[MAX_REPLIES];
	char then[8];
	char kind[32];
	int count;
} expect;

static int parse_expect(const char *path, expect *e)
{
	FILE *f = fopen(path, "r");
	char line[256], w[32];

	if (!f)
		return -errno;
	memset(e, 0, sizeof(*e));
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "attach %31s", w) == 1)
			e->attach = strcmp(w, "layout") == 0;
		else if (e->nreplies < MAX_REPLIES &&
			 sscanf(line, "reply %d %d", &e->op[e->nreplies],
				&e->status[e->nreplies]) == 2)
			e->nreplies++;
		else if (sscanf(line, "then %7s", e->then) == 1)
			;
		else if (sscanf(line, "count %31s %d", e->kind, &e->count) == 2)
			;
		else {
			fclose(f);
			return -EINVAL;
		}
	}
	fclose(f);
	return e->then[0] ? 0 : -EINVAL;
}

static int read_file(const char *path, uint8_t **out, size_t *n)
{
	FILE *f = fopen(path, "rb");
	long size;

	if (!f)
		return -errno;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	rewind(f);
	*out = malloc(size > 0 ? (size_t)size : 1);
	*n = (size_t)size;
	if (!*out || fread(*out, 1, *n, f) != *n) {
		fclose(f);
		free(*out);
		return -EIO;
	}
	fclose(f);
	return 0;
}

static void still_serving(const char *after)
{
	kvs_client *fresh = th_connect(&d, &L);
	kvs_client *cs[2] = { good, fresh };

	for (int i = 0; i < 2; i++) {
		kvs_hash h[3];
		size_t bad = 1;
		bool ok;

		th_chain(&L, next_seed++, 3, 0, 0, h);
		ok = CHECK_RC(th_publish(cs[i], h, 3, NULL), 3) &&
		     CHECK_RC(th_verify(cs[i], h, 3, &bad), 3) && CHECK_EQ(bad, 0);
		if (!ok)
			th_note("a good client failed after: %s", after);
	}
	kvs_close(fresh);
}

/* Nothing arrives on @fd within @ms (the daemon is waiting for more). */
static bool quiet(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 0;
}

static int replay_one(const char *name)
{
	char path[512];
	uint8_t *msg = NULL, scratch[256];
	size_t n = 0;
	expect e;
	th_stats before;
	kvs_wire_hdr h;
	char stat[64];
	int fd, rc, ok = 1;

	snprintf(path, sizeof(path), "%s/%s.expect", KVS_BADINPUT_DIR, name);
	if (!CHECK_RC(parse_expect(path, &e), 0))
		return 0;
	snprintf(path, sizeof(path), "%s/%s.msg", KVS_BADINPUT_DIR, name);
	if (!CHECK_RC(read_file(path, &msg, &n), 0))
		return 0;
	th_stats_take(&d, &before);
	fd = th_raw_connect(&d);
	if (fd < 0)
		th_fatal("raw connect: %s", kvs_strerror(fd));
	if (e.attach)
		ok &= CHECK_RC(th_raw_hello(fd, &L, 1), 0);
	ok &= CHECK_RC(th_raw_send(fd, msg, n), 0);
	for (int i = 0; i < e.nreplies; i++) {
		rc = th_raw_recv(fd, &h, scratch, sizeof(scratch), TH_WAIT_MS);
		if (!CHECK_GE(rc, 0)) {
			ok = 0;
			break;
		}
		ok &= CHECK_EQ(h.opcode, e.op[i]);
		ok &= CHECK_RC(h.status, e.status[i]);
		if (e.status[i])
			ok &= CHECK_EQ(rc, 0);
	}
	if (strcmp(e.then, "open") == 0) {
		ok &= CHECK_RC(th_raw_request(fd, KVS_OP_STATS, 999, NULL, 0), 0);
		rc = th_raw_recv(fd, &h, scratch, sizeof(scratch), TH_WAIT_MS);
		ok &= CHECK_GE(rc, 0) && CHECK_EQ(h.req_id, 999) && CHECK_RC(h.status, 0);
	} else if (strcmp(e.then, "close") == 0) {
		ok &= CHECK(th_raw_wait_closed(fd, TH_WAIT_MS));
	} else {
		ok &= CHECK(quiet(fd, 100));
		shutdown(fd, SHUT_WR);
		ok &= CHECK(th_raw_wait_closed(fd, TH_WAIT_MS));
	}
	close(fd);
	if (e.kind[0]) {
		snprintf(stat, sizeof(stat), "errors.%s", e.kind);
		ok &= CHECK(th_wait_stat(&d, stat, th_stats_val(&before, stat) + e.count,
					 1000));
	}
	ok &= CHECK(th_wait_stat(&d, "errors.total",
				 th_stats_val(&before, "errors.total") + e.count, 1000));
	th_stats_free(&before);
	free(msg);
	if (!ok)
		th_note("corpus file '%s': not the expected outcome", name);
	still_serving(name);
	return 1;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int daemon_fds(void)
{
	char path[64];
	DIR *dir;
	struct dirent *de;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)d.pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((de = readdir(dir)))
		if (de->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

/* A lookup sent with @nfds descriptors (of /dev/null) attached. */
static void fds_attached(int nfds)
{
	union { char buf[CMSG_SPACE(16 * sizeof(int))]; struct cmsghdr a; } u;
	uint8_t msg[KVS_WIRE_HDR_SIZE + 8 + KVS_WIRE_HASH_SIZE], scratch[256];
	kvs_wire_hdr h = { .magic = KVS_WIRE_MAGIC, .version = KVS_WIRE_VERSION,
			   .opcode = KVS_OP_LOOKUP, .len = 8 + KVS_WIRE_HASH_SIZE,
			   .req_id = 55 };
	struct iovec iov = { msg, sizeof(msg) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = CMSG_SPACE(nfds * sizeof(int)) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int fds[16], fd, before, after, rc;
	int64_t proto = th_stat_get(&d, "errors.proto");
	kvs_hash hash;
	char name[64];

	snprintf(name, sizeof(name), "a lookup with %d fds attached", nfds);
	th_chain(&L, next_seed++, 1, 0, 0, &hash);
	kvs_wire_hdr_encode(&h, msg);
	kvs_wire_hashes_encode(&hash, 1, 0, msg + KVS_WIRE_HDR_SIZE, sizeof(msg) - KVS_WIRE_HDR_SIZE);
	for (int i = 0; i < nfds; i++)
		if ((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
			th_fatal("open /dev/null");
	memset(u.buf, 0, sizeof(u.buf));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));

	fd = th_raw_connect(&d);
	if (fd < 0)
		th_fatal("raw connect: %s", kvs_strerror(fd));
	CHECK_RC(th_raw_hello(fd, &L, 1), 0);
	before = daemon_fds();
	CHECK_EQ(sendmsg(fd, &mh, MSG_NOSIGNAL), (long long)sizeof(msg));
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	rc = th_raw_recv(fd, &h, scratch, sizeof(scratch), TH_WAIT_MS);
	CHECK_GE(rc, 0);
	CHECK_EQ(h.req_id, 55);
	CHECK_RC(h.status, 0);
	after = daemon_fds();
	th_note("%s: daemon fds %d before, %d after", name, before, after);
	CHECK_GT(before, 0);
	CHECK_EQ(after, before);
	CHECK_EQ(th_stat_get(&d, "errors.proto"), proto + 1);
	/* The connection goes on. */
	CHECK_RC(th_raw_request(fd, KVS_OP_STATS, 56, NULL, 0), 0);
	rc = th_raw_recv(fd, &h, scratch, sizeof(scratch), TH_WAIT_MS);
	CHECK(rc >= 0 && h.req_id == 56 && h.status == 0);
	close(fd);
	still_serving(name);
}

int main(void)
{
	DIR *dir;
	struct dirent *de;
	char **names = NULL;
	size_t n = 0, cap = 0, replayed = 0;

	th_init("test_badinput_corpus");
	th_daemon_up(&d, TH_ARGS("--host-size", "8M", "--client-timeout", "30"));
	L = th_layout("badinput", 16);
	good = th_connect(&d, &L);

	dir = opendir(KVS_BADINPUT_DIR);
	if (!dir)
		th_fatal("%s: %s", KVS_BADINPUT_DIR, strerror(errno));
	while ((de = readdir(dir))) {
		size_t len = strlen(de->d_name);

		if (len < 8 || strcmp(de->d_name + len - 7, ".expect") != 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			names = realloc(names, cap * sizeof(*names));
		}
		names[n++] = strndup(de->d_name, len - 7);
	}
	closedir(dir);
	qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		replayed += (size_t)replay_one(names[i]);
		free(names[i]);
	}
	free(names);
	th_note("%zu corpus files replayed", replayed);
	CHECK_GE(replayed, 40);

	fds_attached(3);
	fds_attached(12);
	kvs_close(good);
	return th_finish();
}
