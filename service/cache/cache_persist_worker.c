/* cache_persist_worker.c - the persist worker: one thread that computes
 * the XXH3-64 of each committed host block's bytes off the loop and marks
 * its record verified (persist_fmt.h), so that a commit costs the loop a
 * record write, not a pass over the block.
 *
 * The loop queues (record, state word, bytes) at commit; the worker hashes
 * the bytes only while the record's state word is still that word, before
 * and after (the loop stores a new generation whenever the slot goes or is
 * given again), then stores the sum and turns the word into verified with
 * a compare-and-swap: a slot forgotten, evicted or reused meanwhile is
 * never marked verified. The sum is written by the worker alone (and by
 * the loop in cache_persist_settle, once the worker is idle). A full queue
 * leaves the record committed, unverified (persist.queue_full).
 *
 * Thread: kvs_pw_* are called by the loop thread; pw_main is the worker.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <xxhash.h>

#include "cache_int.h"
#include "persist_fmt.h"

#define PW_QUEUE 4096u /* jobs; at 2 MiB blocks 8 GiB of bytes behind */

typedef struct pw_job {
	persist_rec *e;
	const uint8_t *bytes;
	uint64_t len;
	uint32_t word; /* the committed state word the sum is for */
} pw_job;

struct persist_worker {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t work, idle;
	pw_job q[PW_QUEUE];
	uint32_t head, n; /* under mu */
	int busy, stop;   /* under mu */
	void (*hook)(void *); /* tests: called between the hash and the recheck */
	void *hook_arg;
};

static _Atomic uint32_t *state_of(persist_rec *e)
{
	return (_Atomic uint32_t *)&e->state;
}

int cache_persist_verify(persist_rec *e, uint32_t word, const uint8_t *bytes,
			 uint64_t len, void (*hook)(void *), void *arg)
{
	uint32_t want = word;
	uint64_t sum;

	if (atomic_load_explicit(state_of(e), memory_order_acquire) != word)
		return 0;
	sum = XXH3_64bits(bytes, (size_t)len);
	if (hook)
		hook(arg);
	/* The bytes read before the word is read again (a seqlock's reader):
	 * the loop stores a new word before the slot can be written again. */
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(state_of(e), memory_order_relaxed) != word)
		return 0;
	atomic_store_explicit((_Atomic uint64_t *)&e->sum, sum,
			      memory_order_relaxed);
	return atomic_compare_exchange_strong_explicit(
		state_of(e), &want, (word & ~3u) | PST_VERIFIED,
		memory_order_release, memory_order_relaxed);
}

static void *pw_main(void *arg)
{
	persist_worker *w = arg;
	void (*hook)(void *);
	void *harg;
	pw_job j;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->n && !w->stop)
			pthread_cond_wait(&w->work, &w->mu);
		if (w->stop)
			break;
		j = w->q[w->head];
		w->head = (w->head + 1) % PW_QUEUE;
		w->n--;
		w->busy = 1;
		hook = w->hook;
		harg = w->hook_arg;
		pthread_mutex_unlock(&w->mu);
		cache_persist_verify(j.e, j.word, j.bytes, j.len, hook, harg);
		pthread_mutex_lock(&w->mu);
		w->busy = 0;
		if (!w->n)
			pthread_cond_broadcast(&w->idle);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int cache_pw_start(persist_worker **out)
{
	persist_worker *w = calloc(1, sizeof(*w));
	sigset_t all, old;
	int rc;

	if (!w)
		return -ENOMEM;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->idle, NULL);
	/* Signals stay the loop's. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&w->th, NULL, pw_main, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		pthread_cond_destroy(&w->idle);
		pthread_cond_destroy(&w->work);
		pthread_mutex_destroy(&w->mu);
		free(w);
		return -rc;
	}
	*out = w;
	return 0;
}

void cache_pw_stop(persist_worker *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->th, NULL);
	pthread_cond_destroy(&w->idle);
	pthread_cond_destroy(&w->work);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

int cache_pw_queue(persist_worker *w, persist_rec *e, uint32_t word,
		   const uint8_t *bytes, uint64_t len)
{
	int ok;

	pthread_mutex_lock(&w->mu);
	ok = w->n < PW_QUEUE;
	if (ok) {
		w->q[(w->head + w->n) % PW_QUEUE] =
			(pw_job){ .e = e, .bytes = bytes, .len = len, .word = word };
		if (w->n++ == 0)
			pthread_cond_signal(&w->work);
	}
	pthread_mutex_unlock(&w->mu);
	return ok ? 0 : -ENOSPC;
}

uint32_t cache_pw_pending(persist_worker *w)
{
	uint32_t n;

	pthread_mutex_lock(&w->mu);
	n = w->n + (uint32_t)w->busy;
	pthread_mutex_unlock(&w->mu);
	return n;
}

void cache_pw_drain(persist_worker *w)
{
	pthread_mutex_lock(&w->mu);
	while (w->n || w->busy)
		pthread_cond_wait(&w->idle, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

void cache_pw_set_hook(persist_worker *w, void (*hook)(void *), void *arg)
{
	pthread_mutex_lock(&w->mu);
	w->hook = hook;
	w->hook_arg = arg;
	pthread_mutex_unlock(&w->mu);
}
