/* redis_tls.c - the TLS files of the test clusters (see redis_cluster.h,
 * rc_make_certs): a CA, a node certificate, a client certificate and an
 * unrelated CA, made by the openssl CLI. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "redis_cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "kvs_clock.h"

/* The node certificate names 127.0.0.1 (an IP SAN: the engine checks a
 * numeric host against those) and localhost (a DNS name, for a server name
 * setting); the client certificate names nothing (a test uses it as a
 * server certificate that names no address). */
static const char MAKE_CERTS[] =
	"set -e; cd \"$1\"\n"
	"command -v openssl >/dev/null || exit 127\n"
	"k='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'\n"
	"openssl req -x509 $k -keyout ca.key -out ca.crt -days 2 -subj /CN=kvs-test-ca\n"
	"openssl req -x509 $k -keyout other-ca.key -out other-ca.crt -days 2 "
	"-subj /CN=kvs-other-ca\n"
	"openssl req -new $k -keyout node.key -out node.csr -subj /CN=kvs-test-node\n"
	"echo 'subjectAltName=IP:127.0.0.1,DNS:localhost' > san.ext\n"
	"openssl x509 -req -in node.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
	"-out node.crt -days 2 -extfile san.ext\n"
	"openssl req -new $k -keyout client.key -out client.csr -subj /CN=kvs-test-client\n"
	"openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
	"-out client.crt -days 2\n";

int rc_make_certs(const char *dir, double timeout_s, char *why, size_t cap)
{
	char log[PATH_MAX + 16];
	double end = now_s() + timeout_s;
	struct timespec pause = { 0, 2000000 };
	int status;
	pid_t pid;

	snprintf(log, sizeof(log), "%s/openssl.log", dir);
	if (mkdir(dir, 0700) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		execl("/bin/sh", "sh", "-c", MAKE_CERTS, "sh", dir, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (now_s() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			snprintf(why, cap, "openssl: no certificates after %.0f s", timeout_s);
			return -ETIMEDOUT;
		}
		nanosleep(&pause, NULL);
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
		snprintf(why, cap, "openssl CLI not found (Debian: apt-get install "
			 "openssl): the TLS tests make their certificates with it");
		return -ENOENT;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		snprintf(why, cap, "openssl failed to make the certificates (see %.400s)",
			 log);
		return -EIO;
	}
	return 0;
}
