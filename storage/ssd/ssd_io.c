/*
 * ssd_io.c - the segment store's ops (see ssd_int.h): their pool and
 * layout, issuing them to io_uring (or running them synchronously, with the
 * same completion path), retries of short transfers, and completions:
 * kvs_ssd_wait() and kvs_ssd_reap(), with the latency histograms.
 */
#define _GNU_SOURCE
#include "ssd_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

/* ---- latency: log2 buckets split in 8, so the p99 is within 12.5% */

static unsigned lat_bucket(uint64_t us)
{
	unsigned e, b;

	if (us < LAT_SUB)
		return (unsigned)us;
	e = 63 - (unsigned)__builtin_clzll(us);
	b = (e - 2) * LAT_SUB + (unsigned)((us >> (e - 3)) & (LAT_SUB - 1));
	return b < LAT_BUCKETS ? b : LAT_BUCKETS - 1;
}

static uint64_t lat_upper(unsigned b)
{
	if (b < LAT_SUB)
		return b + 1;
	return (uint64_t)(LAT_SUB + b % LAT_SUB + 1) << (b / LAT_SUB - 1);
}

void ssd_hist_get(const struct hist *h, uint64_t *avg, uint64_t *p99)
{
	uint64_t want = (h->n * 99 + 99) / 100, seen = 0;
	unsigned i;

	*avg = h->n ? h->sum_us / h->n : 0;
	*p99 = 0;
	for (i = 0; h->n && i < LAT_BUCKETS && seen < want; i++) {
		seen += h->b[i];
		*p99 = lat_upper(i);
	}
}

/* ---- ops */

struct op *ssd_op_new(kvs_ssd *s, int kind, uint32_t seg, uint64_t cookie)
{
	struct op *o = s->spare;
	uint8_t *pg;

	if (o) {
		s->spare = o->next;
	} else {
		o = malloc(sizeof(*o));
		if (!o)
			return NULL;
		if (posix_memalign((void **)&o->pg, SECT, 2 * SECT)) {
			free(o);
			return NULL;
		}
	}
	pg = o->pg;
	memset(o, 0, sizeof(*o));
	o->pg = pg;
	o->c.op = kind;
	o->c.loc.seg = seg;
	o->c.cookie = cookie;
	return o;
}

void ssd_op_drop(kvs_ssd *s, struct op *o)
{
	free(o->bounce);
	o->next = s->spare;
	s->spare = o;
}

void ssd_op_free(kvs_ssd *s, struct op *o)
{
	free(o->bounce);
	o->bounce = NULL;
	s->segs[o->c.loc.seg].inflight--;
	s->queued--;
	o->next = s->spare;
	s->spare = o;
}

/* io_advance - account a transfer of @res bytes (or -errno). Returns 0 when
 * the op is complete, 1 when it must be issued again, else -errno. A short
 * transfer resumes from its last whole sector, as O_DIRECT requires. */
static int io_advance(kvs_ssd *s, struct op *o, int64_t res)
{
	if (res >= 0 && o->done + (uint64_t)res >= o->total) {
		o->done = o->total;
		return 0;
	}
	if (res < 0 && res != -EAGAIN && res != -EINTR)
		return (int)res;
	if (res > 0)
		o->done += (uint64_t)res & ~(uint64_t)(SECT - 1);
	if (++o->tries >= MAX_TRIES)
		return -EIO;
	s->st.retries++;
	return 1;
}

/* iov_rest - o->cur = o->iov less the o->done bytes already transferred. */
static int iov_rest(struct op *o)
{
	uint64_t skip = o->done;
	int i, n = 0;

	for (i = 0; i < o->niov; i++) {
		if (skip >= o->iov[i].iov_len) {
			skip -= o->iov[i].iov_len;
			continue;
		}
		o->cur[n].iov_base = (uint8_t *)o->iov[i].iov_base + skip;
		o->cur[n++].iov_len = o->iov[i].iov_len - skip;
		skip = 0;
	}
	return n;
}

/* issue - start @o (or its remainder): into the kernel if a slot is free,
 * else queued; in sync mode, run it to the end now and signal the eventfd,
 * so the caller's path is the same as with io_uring. */
static void issue(kvs_ssd *s, struct op *o)
{
	int wr = o->c.op == KVS_SSD_OP_WRITE, n, rc;
	struct io_uring_sqe *sqe;
	ssize_t r;

	if (!s->uring) {
		do {
			n = iov_rest(o);
			r = wr ? pwritev(o->fd, o->cur, n, (off_t)(o->fileoff + o->done))
			       : preadv(o->fd, o->cur, n, (off_t)(o->fileoff + o->done));
			rc = io_advance(s, o, r < 0 ? -errno : r);
		} while (rc == 1);
		o->c.res = rc;
		clock_gettime(CLOCK_MONOTONIC, &o->t1);
		opq_push(&s->done, o);
		eventfd_write(s->efd, 1); /* EAGAIN: saturated, so readable */
		return;
	}
	if (s->kernel >= s->qd || !(sqe = io_uring_get_sqe(&s->ring))) {
		opq_push(&s->pend, o);
		return;
	}
	n = iov_rest(o);
	if (wr)
		io_uring_prep_writev(sqe, o->fd, o->cur, (unsigned)n, o->fileoff + o->done);
	else
		io_uring_prep_readv(sqe, o->fd, o->cur, (unsigned)n, o->fileoff + o->done);
	io_uring_sqe_set_data(sqe, o);
	if (++s->kernel > s->st.inflight_max)
		s->st.inflight_max = s->kernel;
	/* On failure the SQE stays in the ring; reap submits it again. */
	if (io_uring_submit(&s->ring) < 0)
		eventfd_write(s->efd, 1);
}

void ssd_op_submit(kvs_ssd *s, struct op *o)
{
	s->queued++;
	s->segs[o->c.loc.seg].inflight++;
	clock_gettime(CLOCK_MONOTONIC, &o->t0);
	issue(s, o);
}


/* op_layout - header sector, then the payload: whole sectors straight from
 * or into @buf, a partial last sector through o->pg's second page; an
 * unaligned @buf through a full bounce copy. */
int ssd_op_layout(struct op *o, const kvs_ssd_loc *l, void *buf, int copy_in)
{
	uint64_t whole = l->len & ~(uint64_t)(SECT - 1), part = l->len - whole;
	uint8_t *tail = o->pg + SECT;

	o->iov[0] = (struct iovec){ o->pg, SECT };
	o->niov = 1;
	o->fd = -1;
	o->fileoff = l->off;
	o->total = kvs_ssd_record_bytes(l->len);
	if (!aligned(buf)) {
		if (posix_memalign(&o->bounce, SECT, round_up(l->len)))
			return -ENOMEM;
		if (copy_in) {
			memcpy(o->bounce, buf, l->len);
			memset((uint8_t *)o->bounce + l->len, 0, round_up(l->len) - l->len);
		}
		o->iov[o->niov++] = (struct iovec){ o->bounce, round_up(l->len) };
		return 0;
	}
	if (whole)
		o->iov[o->niov++] = (struct iovec){ buf, whole };
	if (part) {
		memset(tail, 0, SECT);
		if (copy_in)
			memcpy(tail, (uint8_t *)buf + whole, part);
		o->iov[o->niov++] = (struct iovec){ tail, SECT };
	}
	return 0;
}


/* finish - account a finished op and hand it to the caller. */
static int finish(kvs_ssd *s, struct op *o, kvs_ssd_reap_fn cb, void *arg)
{
	struct timespec t1 = o->t1;
	int rd = o->c.op == KVS_SSD_OP_READ;
	struct hist *h = rd ? &s->rlat : &s->wlat;
	int internal = o->internal;
	kvs_ssd_cqe c;

	if (!t1.tv_sec) /* io_uring: the CQE was just seen */
		clock_gettime(CLOCK_MONOTONIC, &t1);
	o->c.lat_us = (uint64_t)((t1.tv_sec - o->t0.tv_sec) * 1000000 +
				 (t1.tv_nsec - o->t0.tv_nsec) / 1000);
	if (rd && o->c.res == 0)
		o->c.res = ssd_read_verify(o);
	if (o->c.res == -EBADMSG)
		s->st.corrupt_reads++;
	else if (o->c.res == -ENOSPC)
		s->st.enospc++;
	else if (o->c.res < 0)
		s->st.eio++;
	if (o->c.res == 0 && !internal) {
		h->n++;
		h->sum_us += o->c.lat_us;
		h->b[lat_bucket(o->c.lat_us)]++;
		*(rd ? &s->st.blocks_read : &s->st.blocks_written) += 1;
		*(rd ? &s->st.bytes_read : &s->st.bytes_written) += o->c.loc.len;
	}
	/* Freed before the callback, which may submit and reuse the op. */
	c = o->c;
	ssd_op_free(s, o);
	if (internal)
		return 0;
	if (cb)
		cb(arg, &c);
	return 1;
}

/* release - tell the caller that finished write @o no longer reads its
 * payload (its completion still comes through kvs_ssd_reap). */
static int release(struct op *o, kvs_ssd_release_fn fn, void *arg)
{
	if (o->c.op != KVS_SSD_OP_WRITE || o->internal || o->released)
		return 0;
	o->released = 1;
	if (fn)
		fn(arg, &o->c);
	return 1;
}

int kvs_ssd_wait(kvs_ssd *s, kvs_ssd_release_fn fn, void *arg)
{
	struct io_uring_cqe *cqe;
	struct op *o, *next;
	int n = 0, rc;

	if (!s->opened)
		return -EBADF;
	for (o = s->done.head; o; o = o->next)
		n += release(o, fn, arg);
	while (n == 0 && s->uring && s->kernel > 0) {
		if (io_uring_sq_ready(&s->ring))
			io_uring_submit(&s->ring);
		rc = io_uring_wait_cqe(&s->ring, &cqe);
		if (rc == -EINTR)
			continue;
		if (rc < 0)
			return rc;
		o = io_uring_cqe_get_data(cqe);
		rc = io_advance(s, o, cqe->res);
		io_uring_cqe_seen(&s->ring, cqe);
		s->kernel--;
		if (rc == 1)
			issue(s, o);
		while (s->kernel < s->qd && (next = opq_pop(&s->pend)))
			issue(s, next);
		if (rc == 1)
			continue;
		/* Finished: delivered by the next reap, as a sync completion. */
		o->c.res = rc;
		clock_gettime(CLOCK_MONOTONIC, &o->t1);
		opq_push(&s->done, o);
		eventfd_write(s->efd, 1);
		n += release(o, fn, arg);
	}
	return n;
}

int kvs_ssd_reap(kvs_ssd *s, kvs_ssd_reap_fn cb, void *arg)
{
	struct io_uring_cqe *cqe;
	struct op *o, *next;
	eventfd_t v;
	int n = 0, rc;

	if (!s->opened)
		return -EBADF;
	/* Reset the eventfd before draining: a completion posted after this
	 * read makes it readable again, so none is left behind. (EAGAIN:
	 * nothing signalled; draining anyway costs nothing.) */
	eventfd_read(s->efd, &v);
	while (s->uring && io_uring_peek_cqe(&s->ring, &cqe) == 0) {
		o = io_uring_cqe_get_data(cqe);
		rc = io_advance(s, o, cqe->res);
		io_uring_cqe_seen(&s->ring, cqe);
		s->kernel--;
		if (rc == 1)
			issue(s, o); /* a retry goes before the queued ops */
		while (s->kernel < s->qd && (next = opq_pop(&s->pend)))
			issue(s, next);
		if (rc == 1)
			continue;
		o->c.res = rc;
		n += finish(s, o, cb, arg);
	}
	/* An io_uring_enter that failed (EAGAIN, ENOMEM) left its SQEs in the
	 * ring: submit them again rather than fail them, or an op could
	 * complete twice. */
	if (s->uring && io_uring_sq_ready(&s->ring) && io_uring_submit(&s->ring) < 0)
		eventfd_write(s->efd, 1);
	/* Sync completions present now; those the callbacks add come next time
	 * (they signalled the eventfd). */
	for (o = opq_take(&s->done); o; o = next) {
		next = o->next;
		n += finish(s, o, cb, arg);
	}
	return n;
}

void kvs_ssd_kick(kvs_ssd *s)
{
	if (s->efd >= 0)
		eventfd_write(s->efd, 1); /* EAGAIN: saturated, so readable */
}
