/*
 * ssd_int.h - the segment store's internals, shared by its files only:
 * ssd.c (settings, open and close, segment files, queries, stats),
 * ssd_format.c (the on-disk record header and superblock), ssd_io.c (ops,
 * the ring or the synchronous path, completions, latency), ssd_write.c (the
 * write path: segment rotation and recycling) and ssd_read.c (the read path
 * and the check of what was read). Nothing else includes it.
 *
 * Thread: as kvs_ssd.h: one thread per store.
 */
#ifndef KVS_SSD_INT_H
#define KVS_SSD_INT_H

#include <liburing.h>
#include <stdint.h>
#include <sys/uio.h>
#include <time.h>

#include "kvs_ssd.h"

#define SECT 4096u            /* alignment of every record, buffer and I/O */
#define MAX_TRIES 16          /* short or -EAGAIN reissues before -EIO */
#define LAT_SUB 8             /* histogram sub-buckets per power of two */
#define LAT_BUCKETS (LAT_SUB * 40)

enum { SEG_FREE, SEG_ACTIVE, SEG_SEALED };

struct seg {
	int fd, state;
	uint64_t gen;
	uint64_t fill;     /* end of the records written so far */
	uint32_t inflight; /* ops on this segment: not recycled under I/O */
};

struct op {
	struct op *next;
	kvs_ssd_cqe c;
	int internal;        /* a superblock write: no completion for the caller */
	int released;        /* write: kvs_ssd_wait() told the caller its payload is free */
	int want_csum;       /* read: header csum must equal c.blk.csum too */
	int fd, niov;
	uint64_t fileoff;    /* file offset of the first byte of iov */
	struct iovec iov[3];
	struct iovec cur[3]; /* iov less what is done; kept for the kernel */
	uint64_t total, done;
	unsigned tries;
	void *bounce;        /* whole payload copy, for unaligned buffers */
	void *dst;           /* read: the caller's buffer */
	uint8_t *pg;         /* two aligned sectors: header, partial tail */
	struct timespec t0, t1; /* submitted; done (sync mode only) */
};

struct opq {
	struct op *head, *tail;
};

struct hist {
	uint64_t n, sum_us, b[LAT_BUCKETS];
};

struct kvs_ssd {
	uint64_t seg_bytes, size;
	unsigned qd, flags;
	kvs_ssd_recycle_fn recycle;
	void *recycle_arg;

	int opened, dfd, efd, uring, direct;
	struct io_uring ring;
	struct seg *segs;
	uint32_t *cand; /* scratch: recycle candidates */
	uint32_t nseg, active;
	uint64_t gen_next;
	unsigned kernel;   /* ops in the kernel */
	unsigned queued;   /* ops submitted, not yet delivered */
	struct opq pend;   /* waiting for a slot in the kernel */
	struct opq done;   /* finished without a CQE (sync mode), not reaped */
	struct op *spare;  /* free list */
	struct hist wlat, rlat;
	kvs_ssd_stats st;
};

static inline uint64_t round_up(uint64_t v) { return (v + SECT - 1) & ~(uint64_t)(SECT - 1); }
static inline int aligned(const void *p) { return ((uintptr_t)p & (SECT - 1)) == 0; }

static inline void opq_push(struct opq *q, struct op *o)
{
	o->next = NULL;
	if (q->tail)
		q->tail->next = o;
	else
		q->head = o;
	q->tail = o;
}

static inline struct op *opq_pop(struct opq *q)
{
	struct op *o = q->head;

	if (o && !(q->head = o->next))
		q->tail = NULL;
	return o;
}

static inline struct op *opq_take(struct opq *q) /* the whole list */
{
	struct op *o = q->head;

	q->head = q->tail = NULL;
	return o;
}

/* ---- ssd_format.c ---- */

/* ssd_hdr_ok - the header in @pg is intact and names exactly @b at @l;
 * *csum gets its payload checksum. */
int ssd_hdr_ok(const uint8_t *pg, const kvs_ssd_blk *b, const kvs_ssd_loc *l,
	       uint64_t *csum);
/* ssd_sb_put - encode the superblock of used segment @seg of generation
 * @gen into the sector @pg. */
void ssd_sb_put(uint8_t *pg, uint32_t seg, uint64_t seg_bytes, uint64_t gen);

/* ---- ssd_io.c ---- */

/* ssd_op_new - a clean op of @kind on segment @seg, for the caller's
 * @cookie; NULL when out of memory. */
struct op *ssd_op_new(kvs_ssd *s, int kind, uint32_t seg, uint64_t cookie);
/* ssd_op_drop - give back an op that was never submitted. */
void ssd_op_drop(kvs_ssd *s, struct op *o);
/* ssd_op_free - give back an op that was submitted (its segment's and the
 * store's in-flight counts drop). */
void ssd_op_free(kvs_ssd *s, struct op *o);
/* ssd_op_layout - the iovecs of a record at @l: header sector, then the
 * payload @buf (@copy_in: a write, whose bytes are copied where a bounce or
 * tail sector is used). Errors: -ENOMEM. */
int ssd_op_layout(struct op *o, const kvs_ssd_loc *l, void *buf, int copy_in);
/* ssd_op_submit - count @o in flight and start it. */
void ssd_op_submit(kvs_ssd *s, struct op *o);
/* ssd_hist_get - the average and p99 (microseconds) of @h. */
void ssd_hist_get(const struct hist *h, uint64_t *avg, uint64_t *p99);

/* ---- ssd_read.c ---- */

/* ssd_read_verify - the bytes read by @o are the block asked for (copied
 * into the caller's buffer), or -EBADMSG. */
int ssd_read_verify(struct op *o);

#endif /* KVS_SSD_INT_H */
