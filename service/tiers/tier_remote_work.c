/* tier_remote_work.c - the remote tier's MAC workers: the HMAC of a value
 * (seal at publish, verify at fetch) costs about 0.58 ms per MiB of CPU,
 * which on the loop thread stalled every client and every other request
 * behind it (kvsbench remote: publish fell to 0.13-0.45x redis-benchmark).
 * The loop submits a job and completes it; a few threads compute the MAC
 * in between (see tier_remote_int.h for who owns what meanwhile). */
#define _GNU_SOURCE
#include "tier_remote_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* One job's MAC: the only part of a job the workers touch. */
static void work_one(const kvs_rval_mac *mac, rjob *p)
{
	if (p->kind == JOB_FETCH)
		p->wres = kvs_rval_verify(mac, p->hdr, p->dst, p->bytes, &p->want, &p->got);
	else
		p->wres = kvs_rval_seal(mac, &p->want, p->src, p->hdr);
}

static void *worker(void *arg)
{
	remote_work *w = arg;
	uint64_t one = 1;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		rjob *p;
		int wake;

		while (!w->head && !w->stop)
			pthread_cond_wait(&w->cv, &w->mu);
		if (w->stop)
			break;
		p = w->head;
		w->head = p->wnext;
		if (!w->head)
			w->tail = NULL;
		pthread_mutex_unlock(&w->mu);
		work_one(w->mac, p);
		pthread_mutex_lock(&w->mu);
		p->wnext = NULL;
		/* the loop drains the eventfd before it takes the list, so a
		 * write is needed only when the list was empty */
		wake = !w->done_head;
		if (w->done_tail)
			w->done_tail->wnext = p;
		else
			w->done_head = p;
		w->done_tail = p;
		if (wake && write(w->efd, &one, sizeof(one)) < 0) {
			/* EAGAIN only: the counter is full, so already readable */
		}
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int remote_work_start(remote_tier *t, unsigned nthreads)
{
	remote_work *w = &t->work;
	struct epoll_event ev = { .events = EPOLLIN };
	int rc;

	w->begun = 1;
	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (w->efd < 0 || w->epfd < 0)
		return -errno;
	/* one fd for the loop: the engine's and ours */
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->efd, &ev) < 0 ||
	    epoll_ctl(w->epfd, EPOLL_CTL_ADD, kvs_remote_fd(t->eng), &ev) < 0)
		return -errno;
	w->mac = t->mac;
	if ((rc = pthread_mutex_init(&w->mu, NULL)) != 0)
		return -rc;
	if ((rc = pthread_cond_init(&w->cv, NULL)) != 0) {
		pthread_mutex_destroy(&w->mu);
		return -rc;
	}
	w->inited = 1;
	for (; w->nthreads < nthreads && w->nthreads < REMOTE_WORKERS_MAX; w->nthreads++)
		if ((rc = pthread_create(&w->th[w->nthreads], NULL, worker, w)) != 0)
			return -rc;
	return 0;
}

void remote_work_stop(remote_tier *t)
{
	remote_work *w = &t->work;

	if (!w->begun)
		return;
	if (w->inited) {
		pthread_mutex_lock(&w->mu);
		w->stop = 1; /* jobs still queued are dropped: the tier frees them */
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
		for (unsigned i = 0; i < w->nthreads; i++)
			pthread_join(w->th[i], NULL);
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		w->inited = 0;
	}
	if (w->efd >= 0)
		close(w->efd);
	if (w->epfd >= 0)
		close(w->epfd);
	w->efd = w->epfd = -1;
	w->begun = 0;
}

void remote_work_submit(remote_tier *t, uint32_t j)
{
	remote_work *w = &t->work;
	rjob *p = remote_job(t, j);

	p->wnext = NULL;
	w->queued++;
	pthread_mutex_lock(&w->mu);
	if (w->tail)
		w->tail->wnext = p;
	else
		w->head = p;
	w->tail = p;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

int remote_work_poll(remote_tier *t)
{
	remote_work *w = &t->work;
	uint64_t v;
	rjob *p, *next;
	int n = 0;

	if (read(w->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return 0;
	pthread_mutex_lock(&w->mu);
	p = w->done_head;
	w->done_head = w->done_tail = NULL;
	pthread_mutex_unlock(&w->mu);
	for (; p; p = next, n++) {
		next = p->wnext; /* p may be freed and reused by its completion */
		w->queued--;
		t->counts.macs++;
		if (p->kind == JOB_FETCH)
			remote_fetch_verified(t, p->self);
		else
			remote_sealed(t, p->self);
	}
	return n;
}
