/* main.c - kvshared: the kvshare daemon. The only place that exits. */
#include <signal.h>
#include <stdio.h>

#include "kvs_config.h"
#include "kvs_log.h"
#include "kvs_server.h"
#include "kvs_types.h" /* kvs_strerror */

int main(int argc, char **argv)
{
	kvs_config cfg;
	kvs_server *srv = NULL;
	char why[256];
	int rc, mem;

	rc = kvs_config_defaults(&cfg);
	if (rc < 0) {
		fprintf(stderr, "kvshared: default configuration failed: %s\n",
			kvs_strerror(rc));
		return 1;
	}
	rc = kvs_config_parse_args(&cfg, argc, argv);
	if (rc == 1)
		return 0;
	if (rc < 0)
		return 2;
	mem = kvs_config_memory_check(&cfg, NULL, why, sizeof(why));
	if (mem < 0) {
		fprintf(stderr, "kvshared: --host-size: %s\n", why);
		return 2;
	}
	kvs_log_set_level(cfg.log_level);
	if (kvs_log_start() < 0)
		fprintf(stderr, "kvshared: no log thread: logging directly\n");
	if (mem > 0)
		kvs_warn("--host-size: %s", why);
	/* A client that vanishes mid-reply must cost an EPIPE, not the daemon. */
	signal(SIGPIPE, SIG_IGN);
	rc = kvs_server_create(&cfg, &srv);
	if (rc == 0) {
		rc = kvs_server_run(srv);
		kvs_server_destroy(srv);
		if (rc == 0)
			kvs_info("stopped");
	}
	kvs_log_stop(); /* what was logged is written before the last words */
	if (rc < 0) {
		fprintf(stderr, "kvshared: %s: %s\n",
			srv ? "event loop failed" : "cannot start", kvs_strerror(rc));
		return 1;
	}
	return 0;
}
