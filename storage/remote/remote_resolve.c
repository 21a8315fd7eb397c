/* remote_resolve.c - the remote engine's host names, resolved on a thread
 * of its own so that getaddrinfo() (seconds against a slow DNS) never runs
 * on the caller's loop (see kvs_remote.h, remote_int.h).
 *
 * One thread, started by the first name that needs it; jobs in, results
 * out, each a copy of the host (the node may be forgotten meanwhile: a
 * result finds its node by index and generation, or is dropped). An
 * eventfd in the engine's epoll set says results came. At most one job per
 * node is queued, so the queues are bounded by KVS_REMOTE_NODES_MAX.
 */
#include "remote_int.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

char kvs_rmt_resolver_tag;

struct rjob {
	struct rjob *next;
	int idx;
	uint64_t gen;
	char host[KVS_SLOT_HOST_MAX];
	int rc;
	struct sockaddr_storage addr;
	socklen_t alen;
};

struct kvs_rmt_resolver {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct rjob *todo, *done; /* todo: LIFO is fine, one job per node */
	int efd, stop;
};

static void *resolver_main(void *arg)
{
	struct kvs_rmt_resolver *rs = arg;
	uint64_t one = 1;

	pthread_mutex_lock(&rs->mu);
	for (;;) {
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
		struct rjob *j;

		while (!rs->todo && !rs->stop)
			pthread_cond_wait(&rs->cv, &rs->mu);
		if (rs->stop)
			break;
		j = rs->todo;
		rs->todo = j->next;
		pthread_mutex_unlock(&rs->mu);
		j->rc = -EHOSTUNREACH;
		if (getaddrinfo(j->host, NULL, &hints, &res) == 0) {
			memcpy(&j->addr, res->ai_addr, res->ai_addrlen);
			j->alen = res->ai_addrlen;
			j->rc = 0;
			freeaddrinfo(res);
		}
		pthread_mutex_lock(&rs->mu);
		j->next = rs->done;
		rs->done = j;
		if (write(rs->efd, &one, sizeof(one)) < 0) {
			/* the counter is already non-zero: the loop will look */
		}
	}
	pthread_mutex_unlock(&rs->mu);
	return NULL;
}

static struct kvs_rmt_resolver *resolver_start(kvs_remote *r)
{
	struct kvs_rmt_resolver *rs = calloc(1, sizeof(*rs));
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &kvs_rmt_resolver_tag };

	if (!rs)
		return NULL;
	rs->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (rs->efd < 0)
		goto fail;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, rs->efd, &ev) < 0)
		goto fail_fd;
	pthread_mutex_init(&rs->mu, NULL);
	pthread_cond_init(&rs->cv, NULL);
	if (pthread_create(&rs->th, NULL, resolver_main, rs) != 0) {
		pthread_mutex_destroy(&rs->mu);
		pthread_cond_destroy(&rs->cv);
		epoll_ctl(r->epfd, EPOLL_CTL_DEL, rs->efd, NULL);
		goto fail_fd;
	}
	r->resolver = rs;
	return rs;
fail_fd:
	close(rs->efd);
fail:
	free(rs);
	return NULL;
}

void kvs_rmt_resolve_want(kvs_remote *r, struct node *n, uint64_t now)
{
	struct kvs_rmt_resolver *rs = r->resolver;
	struct rjob *j;

	if (!n->named || n->resolving || (n->resolved < 0 && now < n->resolve_at))
		return;
	if (r->epfd < 0) { /* not open: open() may block */
		n->resolved = kvs_rmt_resolve_sync(n);
		return;
	}
	if (!rs && !(rs = resolver_start(r)))
		return; /* tried again by the next request for the node */
	j = calloc(1, sizeof(*j));
	if (!j)
		return;
	j->idx = n->idx;
	j->gen = n->gen;
	memcpy(j->host, n->host, sizeof(j->host));
	n->resolving = 1;
	pthread_mutex_lock(&rs->mu);
	j->next = rs->todo;
	rs->todo = j;
	pthread_cond_signal(&rs->cv);
	pthread_mutex_unlock(&rs->mu);
}

void kvs_rmt_resolve_drain(kvs_remote *r)
{
	struct kvs_rmt_resolver *rs = r->resolver;
	struct rjob *j, *next;
	uint64_t x, now = now_us();

	if (!rs)
		return;
	if (read(rs->efd, &x, sizeof(x)) < 0) {
		/* EAGAIN: drained by an earlier call */
	}
	pthread_mutex_lock(&rs->mu);
	j = rs->done;
	rs->done = NULL;
	pthread_mutex_unlock(&rs->mu);
	for (; j; j = next) {
		struct node *n = j->idx < r->nnodes ? r->nodes[j->idx] : NULL;

		next = j->next;
		r->st.resolves++;
		if (j->rc < 0)
			r->st.resolve_failures++;
		if (n && n->gen == j->gen) {
			n->resolving = 0;
			if (j->rc == 0) {
				kvs_rmt_addr_set(n, (struct sockaddr *)&j->addr, j->alen);
				n->resolved = 1;
			} else if (n->resolved != 1) {
				/* A name that stopped resolving keeps its last
				 * address; one that never did is tried again. */
				n->resolved = j->rc;
				n->resolve_at = now + RESOLVE_RETRY_US;
				kvs_rmt_node_down(r, n, j->rc, now);
			}
		}
		free(j);
	}
}

void kvs_rmt_resolve_stop(kvs_remote *r)
{
	struct kvs_rmt_resolver *rs = r->resolver;
	struct rjob *j;

	if (!rs)
		return;
	pthread_mutex_lock(&rs->mu);
	rs->stop = 1;
	pthread_cond_signal(&rs->cv);
	pthread_mutex_unlock(&rs->mu);
	pthread_join(rs->th, NULL);
	while ((j = rs->todo) != NULL) {
		rs->todo = j->next;
		free(j);
	}
	while ((j = rs->done) != NULL) {
		rs->done = j->next;
		free(j);
	}
	close(rs->efd);
	pthread_mutex_destroy(&rs->mu);
	pthread_cond_destroy(&rs->cv);
	free(rs);
	r->resolver = NULL;
}
