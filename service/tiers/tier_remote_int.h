/*
 * tier_remote_int.h - the remote tier's own state, shared by its files:
 * tier_remote.c (jobs, lookups, the tier's operations, open),
 * tier_remote_publish.c (publishing, staging, the pin cap, repair of values
 * that failed verification), tier_remote_open.c (the AUTH file; open, or
 * attach in the background; the engine's log lines) and
 * tier_remote_work.c (the MAC workers). Included by those only.
 * Thread: the daemon's loop thread only (start-up: the main thread before
 * the loop), but for the MAC workers, which touch only struct
 * remote_work's queue (under its mutex) and the fields of a job submitted
 * to them (see rjob).
 */
#ifndef KVS_TIER_REMOTE_INT_H
#define KVS_TIER_REMOTE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "kvs_pool.h"
#include "kvs_remote.h"
#include "kvs_remote_value.h"
#include "kvs_stats.h"
#include "kvs_tier_ops.h"
#include "tier_remote.h"

/* Blocks being published are copied first (their slot may be evicted and
 * reused before the SET completes); past this many bytes of copies in
 * flight a block is not published (counted as skipped). */
#define MAX_STAGED_BYTES (256ull << 20)
#define PROBE_MAX 64 /* a window: the cache asks KVS_PROBE_WINDOW at a time */
/* Staging copies are kept for reuse, up to this many bytes: a fresh 1-2 MiB
 * malloc is a new mapping whose page faults cost as much as the copy
 * (kvsbench remote: the commit of 32 MiB took 30 ms, 13 ms with reuse). */
#define SPARE_MAX 64
#define SPARE_BYTES (128ull << 20) /* half of MAX_STAGED_BYTES */
/* Blocks whose value failed verification here, remembered (direct-mapped
 * by hash, a collision forgets one) so that this daemon's next publish of
 * one overwrites it: it is the daemon that missed, so the one that
 * recomputes the block and publishes it next. */
#define SUSPECT_SLOTS 4096

enum job_kind { JOB_FREE = 0, JOB_PROBE, JOB_FETCH, JOB_CHECK, JOB_PUBLISH, JOB_REPAIR };

typedef struct rjob {
	uint8_t kind;
	uint64_t cookie;      /* the cache's (probe, fetch) */
	uint32_t n;           /* probe: keys asked */
	int res[PROBE_MAX];   /* probe: per key */
	uint8_t keys[PROBE_MAX][KVS_RVAL_KEY_BYTES];
	uint8_t hdr[KVS_RVAL_HDR_BYTES];
	kvs_rval_info want;   /* fetch: what must arrive; publish: what goes */
	void *dst;            /* fetch: the payload's slot */
	void *buf;            /* publish: the payload's copy, or NULL */
	const void *src;      /* publish: the payload sent (the copy, or the
			       * slot of a record pinned until the SET ends) */
	uint32_t idx;         /* fetch, pinned publish: the record */
	int pinned;
	uint64_t bytes;
	uint32_t self;        /* its index in jobs */
	/* At the MAC workers (tier_remote_work.c) from remote_work_submit
	 * until remote_work_poll completes it: meanwhile they read hdr, want,
	 * dst (verify) or src (seal) and write hdr (seal), wres and got; the
	 * loop touches none of them, and the job, its pin, its staging copy
	 * and (fetch) its host slot stay held, as for a request on the wire. */
	struct rjob *wnext;   /* the workers' queue, then their done list */
	int wres;             /* seal's or verify's result */
	kvs_rval_info got;    /* verify: the header that came */
} rjob;

/* The MAC workers: a queue in, a done list out and an eventfd that says
 * the list is not empty (watched, with the engine's fd, through epfd).
 * Two: on the 2-core VM of these sessions kvsbench remote published at
 * 0.65-0.73 GB/s (1 MiB blocks) with two, 0.53-0.54 with one, promotion
 * the same; one HMAC-SHA-256 stream is 1.7 GB/s, so two also keep up
 * with a 25 Gb/s link on a larger machine. */
#define REMOTE_WORKERS 2
#define REMOTE_WORKERS_MAX 8
typedef struct remote_work {
	pthread_mutex_t mu;
	pthread_cond_t cv;    /* a job queued, or stop */
	struct rjob *head, *tail;           /* to do, in order */
	struct rjob *done_head, *done_tail; /* done, for the loop */
	int stop, inited, begun;
	int efd, epfd;
	unsigned nthreads;
	pthread_t th[REMOTE_WORKERS_MAX];
	const kvs_rval_mac *mac;
	uint64_t queued;      /* submitted, not yet completed (the loop's) */
} remote_work;

typedef struct remote_tier {
	kvs_tier_mod base;    /* first: the cache's handle */
	kvs_remote *eng;
	int write_through;
	uint64_t *ns_fp;      /* by namespace id - 1 */
	uint32_t nns;
	kvs_pool jobs;        /* of rjob: they never move (the engine and the
			       * MAC workers hold pointers into a job) */
	uint64_t staged;
	uint64_t pinned_bytes; /* of host slots pinned by publishes */
	uint32_t pin_share;   /* pin_cap(): percent of the host tier */
	void *spare[SPARE_MAX]; /* staging buffers free for reuse */
	uint64_t spare_len[SPARE_MAX], spare_bytes;
	uint32_t nspare;
	/* By record index: the block came from the cluster (fetched and
	 * verified), so its eviction publishes nothing: a daemon in demote
	 * mode would otherwise copy, checksum and EXISTS every block it ever
	 * fetched (kvsbench remote: promotion 0.63 GB/s, 1.47 without). */
	uint8_t *fetched;
	uint32_t nfetched;    /* bytes of the bitmap */
	kvs_rval_mac *mac;    /* signs and verifies values */
	struct suspect { uint64_t fp; kvs_hash hash; } suspect[SUSPECT_SLOTS];
	int corrupt_logged;   /* one line per episode of corrupt values */
	int attaching;        /* started before the cluster answered */
	uint64_t forged_logged; /* the key id of the last forged value logged */
	remote_work work;
	kvs_tier_remote_stats counts; /* tier_remote.* (base.counters) */
} remote_tier;

/* tier_remote.c */
int remote_job_new(remote_tier *t, uint8_t kind, uint32_t *out);
static inline rjob *remote_job(const remote_tier *t, uint32_t j)
{
	return kvs_pool_at(&t->jobs, j);
}
void remote_job_free(remote_tier *t, uint32_t j);
/* A failed request, counted by kind. */
void remote_count_error(remote_tier *t, int res);
/* The fingerprint of namespace @ns, 0 when it has none (not shared). */
uint64_t remote_fingerprint(const remote_tier *t, uint32_t ns);

/* tier_remote_publish.c */
/* Give a staging buffer of @bytes back (kept for reuse, or freed). */
void remote_stage_put(remote_tier *t, void *buf, uint64_t bytes);
/* Publish @b from its slot, pinned (@pin: at commit), or from a copy. */
void remote_publish(remote_tier *t, const kvs_tier_blk *b, int pin);
/* The completions of a publish's EXISTS, and of its SET NX or SET. */
void remote_check_done(remote_tier *t, uint32_t j, const kvs_remote_cqe *q);
void remote_publish_done(remote_tier *t, uint32_t j, const kvs_remote_cqe *q);
/* The value fetched by job @f failed verification (@res -EBADMSG or
 * -EKEYREJECTED, header @got): counted, logged, marked for repair. */
void remote_rejected(remote_tier *t, const rjob *f, int res, const kvs_rval_info *got);

/* tier_remote_open.c */
/* kvs_tier_remote_auth - the AUTH file @path ("user password" or
 * "password" on its first line) into @eng's settings; warns when others
 * may read it. Errors: -errno of the file, -EINVAL (format), as
 * kvs_remote_set_auth. Logs why, never the password. */
int kvs_tier_remote_auth(kvs_remote *eng, const char *path);
/*
 * kvs_tier_remote_start - one bounded try to reach the seeds @seeds
 * (kvs_remote_open); when none answers, attach in the background instead
 * (kvs_remote_attach; *@attaching 1, logged). Errors, each logged and
 * stopping the start: -EACCES (AUTH refused, a client certificate
 * wanted), -EKEYREJECTED (a certificate that does not verify), -EPROTO
 * (not Redis, or a TLS port in plain text); -EINVAL, -ENOMEM, -errno
 * (epoll).
 */
int kvs_tier_remote_start(kvs_remote *eng, const char *seeds, int *attaching);
/* kvs_tier_remote_event - the engine's event callback: one log line each;
 * @arg is the engine. */
void kvs_tier_remote_event(void *arg, int ev, const char *host, unsigned port,
			   int err);

/* tier_remote.c: the GET of fetch job @j verified (its wres, got). */
void remote_fetch_verified(remote_tier *t, uint32_t j);
/* tier_remote_publish.c: publish job @j sealed (its wres): EXISTS or SET. */
void remote_sealed(remote_tier *t, uint32_t j);

/* tier_remote_work.c */
/* Start @nthreads MAC workers, and the fd the loop watches (epfd: the
 * engine's fd and the workers' eventfd). Errors: -errno. */
int remote_work_start(remote_tier *t, unsigned nthreads);
/* Join the workers (jobs queued are not done: their owner frees them);
 * close the fds. Safe when not started. */
void remote_work_stop(remote_tier *t);
/* Hand job @j to the workers (seal for a publish, verify for a fetch). */
void remote_work_submit(remote_tier *t, uint32_t j);
/* Complete the jobs the workers finished; returns how many. */
int remote_work_poll(remote_tier *t);

#endif /* KVS_TIER_REMOTE_INT_H */
