/*
 * test_block_sizes - the host tier serves 256 block sizes at once (a slot
 * class each); one uid cannot take them from the others, and a size no
 * namespace has any more comes back.
 *
 *  budget:  --max-block-sizes-per-uid 4: 4 clients with 4 block sizes; a
 *           5th size is KVS_E_LIMIT (namespaces.refused_sizes, errors.limit;
 *           never KVS_E_LAYOUT), a new salt of a size it has attaches; once
 *           one client leaves, the 5th size attaches (the idle namespace is
 *           reclaimed, its class freed). Then 300 more sizes one after the
 *           other (attach, one block, leave): every one attaches and is
 *           served (past 256 the slot classes of the sizes gone are reused).
 *  uids:    as root: this uid attaches 256 sizes and keeps them; from the
 *           17th on (the default budget, 16) each is KVS_E_LIMIT, so another
 *           uid (nobody, a child) still attaches a new size and is served.
 *           Skipped when not root.
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NOBODY 65534
#define MANY 256

/* A layout of its own block size: @tokens tokens a block (1 KiB each). */
static kvs_layout sized(uint32_t tokens)
{
	return th_layout("block-sizes", tokens);
}

static void budget(void)
{
	static th_daemon d;
	kvs_client *c[5] = { 0 }, *x = NULL;
	kvs_layout l;
	int served = 0;

	th_daemon_up(&d, TH_ARGS("--host-size", "64M",
				 "--max-block-sizes-per-uid", "4"));
	for (int i = 0; i < 4; i++) {
		l = sized(1 + (uint32_t)i);
		c[i] = th_connect(&d, &l);
	}
	l = sized(5);
	CHECK_RC(kvs_connect(d.socket, &l, &x), KVS_E_LIMIT);
	CHECK_EQ(th_stat_get(&d, "namespaces.refused_sizes"), 1);
	CHECK_EQ(th_stat_get(&d, "errors.limit"), 1);
	CHECK_EQ(th_stat_get(&d, "errors.layout"), 0);
	CHECK(th_log_contains(&d, "--max-block-sizes-per-uid"));
	l = sized(4);
	l.salt = "another";
	CHECK_RC(kvs_connect(d.socket, &l, &c[4]), 0);
	kvs_close(c[0]);
	CHECK(th_wait_stat(&d, "clients.connected", 5, TH_WAIT_MS));
	l = sized(5);
	CHECK_RC(kvs_connect(d.socket, &l, &x), 0);
	CHECK_EQ(th_stat_get(&d, "namespaces.reclaimed"), 1);
	kvs_close(x);
	for (int i = 1; i < 5; i++)
		kvs_close(c[i]);
	for (uint32_t t = 10; t < 10 + 300; t++) {
		l = sized(t);
		x = NULL;
		if (kvs_connect(d.socket, &l, &x) == 0)
			served += th_round_trip(x, &l, t, 1);
		kvs_close(x);
	}
	th_note("budget: 300 sizes one after the other: %d served, %lld "
		"refused, %lld namespaces reclaimed", served,
		(long long)th_stat_get(&d, "namespaces.refused_sizes"),
		(long long)th_stat_get(&d, "namespaces.reclaimed"));
	CHECK_EQ(served, 300);
	CHECK_EQ(th_stat_get(&d, "namespaces.refused_sizes"), 1);
	CHECK_EQ(th_stat_get(&d, "errors.layout"), 0);
}

/* Child: nobody attaches the layout @arg; sends the connect's result, then
 * 0 when a round trip worked. */
static int as_nobody(void *arg, int sync_fd)
{
	const kvs_layout *l = arg;
	kvs_client *c = NULL;
	kvs_hash h[2];
	size_t bad = 1;
	int rc;

	if (th_become(NOBODY) < 0)
		return 3;
	rc = kvs_connect(getenv("TH_BLOCK_SIZES_SOCKET"), l, &c);
	th_send_u64(sync_fd, (uint64_t)(int64_t)rc);
	if (rc < 0)
		return 0;
	th_chain(l, 7, 2, 0, 0, h);
	rc = th_publish(c, h, 2, NULL);
	if (rc == 2)
		rc = th_verify(c, h, 2, &bad);
	th_send_u64(sync_fd, (uint64_t)(int64_t)(rc == 2 && bad == 0 ? 0 : -1));
	kvs_close(c);
	return 0;
}

static void uids(void)
{
	static th_daemon d;
	static kvs_client *c[MANY];
	kvs_layout l = sized(MANY + 1);
	uint64_t rc = 1, ok = 1;
	int attached = 0;
	th_child ch;

	th_daemon_up(&d, TH_ARGS("--host-size", "64M", "--socket-mode", "0666"));
	th_open_dir_to(&d, NOBODY, NOBODY);
	for (uint32_t t = 1; t <= MANY; t++) {
		kvs_layout m = sized(t);

		attached += kvs_connect(d.socket, &m, &c[t - 1]) == 0;
	}
	th_note("uids: this uid attached %d of %d block sizes", attached, MANY);
	CHECK_EQ(attached, 16);
	CHECK_EQ(th_stat_get(&d, "namespaces.refused_sizes"), MANY - 16);
	setenv("TH_BLOCK_SIZES_SOCKET", d.socket, 1);
	th_spawn(&ch, as_nobody, &l);
	CHECK_RC(th_recv_u64(ch.fd, &rc, TH_WAIT_MS), 0);
	th_note("uids: then nobody's new block size: %s",
		kvs_strerror((int)(int64_t)rc));
	CHECK_RC((int)(int64_t)rc, 0);
	if ((int64_t)rc == 0 && CHECK_RC(th_recv_u64(ch.fd, &ok, TH_WAIT_MS), 0))
		CHECK_EQ(ok, 0);
	CHECK_EQ(th_child_wait(&ch, TH_WAIT_MS), 0);
	for (int i = 0; i < MANY; i++)
		kvs_close(c[i]);
}

int main(void)
{
	th_init("test_block_sizes");
	budget();
	if (geteuid() == 0)
		uids();
	else
		th_skip_part("not root: another uid's block size beside this one's");
	return th_finish();
}
