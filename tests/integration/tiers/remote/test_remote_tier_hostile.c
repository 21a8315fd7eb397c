/*
 * test_remote_tier_hostile - kvshared against a hostile cluster node (the
 * scripted peer of tests/remote/scripted_node.h, in a child process) whose
 * CLUSTER SLOTS names a host "evil\x1b[2J\nhost": the daemon starts,
 * serves its local tiers, resolves that name off its loop (it fails), and
 * logs the node down with the host escaped (\x1b, \x0a): no control byte
 * from the cluster reaches the log. Needs no Redis.
 */
#include "remote_tier_util.h"

#include <signal.h>
#include <sys/wait.h>

#include "../remote/scripted_node.h"

#define BLOCK_TOKENS 16 /* 16 KiB blocks */
#define LEN 16

static th_daemon A;

/* Whether the daemon's log holds byte @b anywhere. */
static bool log_has_byte(const th_daemon *d, int b)
{
	FILE *f = fopen(d->log, "r");
	int ch;
	bool found = false;

	if (!f)
		return false;
	while (!found && (ch = fgetc(f)) != EOF)
		found = ch == b;
	fclose(f);
	return found;
}

int main(void)
{
	char seeds[64], line[128];
	kvs_client *ca;
	kvs_layout L;
	kvs_hash H[LEN];
	size_t bad;
	int lfd, port;
	pid_t child;

	th_init("test_remote_tier_hostile");
	lfd = sn_listen_any(&port);
	if (lfd < 0)
		th_fatal("listen failed");
	child = fork();
	if (child == 0) {
		sn_serve(lfd, port, SN_MAP_CTL);
		_exit(0);
	}
	close(lfd);
	snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", port);
	th_daemon_up(&A, TH_ARGS("--host-size", "16M", "--page-size", "16K",
				 "--remote", seeds, "--remote-write", "through",
				 "--remote-timeout", "300"));
	CHECK_EQ(th_stat_get(&A, "tier_remote.cluster"), 1);
	CHECK_EQ(th_stat_get(&A, "tier_remote.nodes"), 2);
	L = th_layout("remote-model", BLOCK_TOKENS);
	ca = th_connect(&A, &L);
	/* 16 blocks: some in slots 8192.. (the bad host's), published there */
	th_chain(&L, 41, LEN, 0, 0, H);
	CHECK_RC(th_publish(ca, H, LEN, NULL), LEN);
	CHECK(rt_wait_publish_ends(&A, LEN, TH_WAIT_MS));
	CHECK_EQ(th_verify(ca, H, LEN, &bad), LEN);
	CHECK_EQ(bad, 0);
	snprintf(line, sizeof(line), "node %s:7000 down", SN_CTL_HOST_PRINTED);
	CHECK(th_log_contains(&A, line));
	CHECK(!log_has_byte(&A, 0x1b));
	kvs_close(ca);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return th_finish();
}
