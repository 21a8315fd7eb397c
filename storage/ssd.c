/* ssd.c - the SSD segment store (see kvs_ssd.h). */
#define _GNU_SOURCE
#include "kvs_ssd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvs_le.h"

#define SECT 4096u            /* alignment of every record, buffer and I/O */
#define REC_MAGIC 0x4253564bu /* "KVSB" */
#define SB_MAGIC 0x5353564bu  /* "KVSS" */
#define FORMAT 1
#define MAX_TRIES 16          /* short or -EAGAIN reissues before -EIO */
#define NONE UINT32_MAX
#define LAT_SUB 8             /* histogram sub-buckets per power of two */
#define LAT_BUCKETS (LAT_SUB * 40)
/* The on-disk headers, little-endian (kvs_le.h) at fixed offsets; each
 * checksum is XXH3-64 of the bytes before it.
 *
 * A record's header, at the start of its 4 KiB header sector:
 *   0 magic u32, 4 format u16, 6 hdr_bytes u16, 8 ns u32, 12 len u32,
 *   16 hash lo u64, 24 hash hi u64, 32 csum u64 (XXH3-64 of the payload),
 *   40 gen u64 (segment generation when written), 48 off u64 (record offset:
 *   a read of the wrong place is caught), 56 seg u32, 60 pad u32 (0),
 *   64 hdr_csum u64. */
enum { RH_MAGIC = 0, RH_FORMAT = 4, RH_HDR_BYTES = 6, RH_NS = 8, RH_LEN = 12,
       RH_HASH = 16, RH_CSUM = 32, RH_GEN = 40, RH_OFF = 48, RH_SEG = 56,
       RH_PAD = 60, RH_HDR_CSUM = 64 };
/* A segment's superblock, at offset 0 of its file:
 *   0 magic u32, 4 format u16, 6 hdr_bytes u16, 8 seg u32,
 *   12 state u32 (SB_FREE or SB_USED), 16 seg_bytes u64, 24 gen u64,
 *   32 csum u64. */
enum { SB_MAGIC_AT = 0, SB_FORMAT = 4, SB_HDR_BYTES = 6, SB_SEG = 8,
       SB_STATE = 12, SB_SEG_BYTES = 16, SB_GEN = 24, SB_CSUM = 32 };
enum { SB_FREE = 0, SB_USED = 1 };
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

static uint64_t round_up(uint64_t v) { return (v + SECT - 1) & ~(uint64_t)(SECT - 1); }
static int aligned(const void *p) { return ((uintptr_t)p & (SECT - 1)) == 0; }

static void opq_push(struct opq *q, struct op *o)
{
	o->next = NULL;
	if (q->tail)
		q->tail->next = o;
	else
		q->head = o;
	q->tail = o;
}

static struct op *opq_pop(struct opq *q)
{
	struct op *o = q->head;

	if (o && !(q->head = o->next))
		q->tail = NULL;
	return o;
}

static struct op *opq_take(struct opq *q) /* the whole list */
{
	struct op *o = q->head;

	q->head = q->tail = NULL;
	return o;
}

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

static void hist_get(const struct hist *h, uint64_t *avg, uint64_t *p99)
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

/* ---- on-disk encoding */

_Static_assert(RH_HDR_CSUM + 8 == KVS_SSD_HDR_BYTES, "record header size");
_Static_assert(SB_CSUM + 8 == KVS_SSD_SB_BYTES, "superblock size");

void kvs_ssd_header_encode(uint8_t *pg, const kvs_ssd_blk *b, const kvs_ssd_loc *l)
{
	memset(pg, 0, SECT);
	put32(pg + RH_MAGIC, REC_MAGIC);
	put16(pg + RH_FORMAT, FORMAT);
	put16(pg + RH_HDR_BYTES, KVS_SSD_HDR_BYTES);
	put32(pg + RH_NS, b->ns);
	put32(pg + RH_LEN, l->len);
	puth(pg + RH_HASH, b->hash);
	put64(pg + RH_CSUM, b->csum);
	put64(pg + RH_GEN, l->gen);
	put64(pg + RH_OFF, l->off);
	put32(pg + RH_SEG, l->seg);
	put64(pg + RH_HDR_CSUM, XXH3_64bits(pg, RH_HDR_CSUM));
}

/* Every field is checked that a writer of this format always sets: a header
 * that passes says where and what it is, so the read path only compares. */
int kvs_ssd_header_decode(const uint8_t *buf, size_t n, kvs_ssd_blk *b,
			  kvs_ssd_loc *l)
{
	uint32_t len;
	uint64_t off;

	if (n < KVS_SSD_HDR_BYTES)
		return -EBADMSG;
	len = get32(buf + RH_LEN);
	off = get64(buf + RH_OFF);
	if (get32(buf + RH_MAGIC) != REC_MAGIC || get16(buf + RH_FORMAT) != FORMAT ||
	    get16(buf + RH_HDR_BYTES) != KVS_SSD_HDR_BYTES ||
	    get64(buf + RH_HDR_CSUM) != XXH3_64bits(buf, RH_HDR_CSUM) ||
	    get32(buf + RH_PAD) != 0 || len == 0 || off < SECT || off % SECT)
		return -EBADMSG;
	*b = (kvs_ssd_blk){ .ns = get32(buf + RH_NS), .len = len,
			    .hash = geth(buf + RH_HASH), .csum = get64(buf + RH_CSUM) };
	*l = (kvs_ssd_loc){ .seg = get32(buf + RH_SEG), .len = len,
			    .gen = get64(buf + RH_GEN), .off = off };
	return 0;
}

/* hdr_ok - the header in @pg is intact and names exactly @b at @l. */
static int hdr_ok(const uint8_t *pg, const kvs_ssd_blk *b, const kvs_ssd_loc *l,
		  uint64_t *csum)
{
	kvs_ssd_blk hb;
	kvs_ssd_loc hl;

	if (kvs_ssd_header_decode(pg, SECT, &hb, &hl) < 0)
		return 0;
	*csum = hb.csum;
	return hb.ns == b->ns && hl.len == l->len && hb.hash.lo == b->hash.lo &&
	       hb.hash.hi == b->hash.hi && hl.gen == l->gen && hl.off == l->off &&
	       hl.seg == l->seg;
}

void kvs_ssd_sb_encode(uint8_t *pg, const kvs_ssd_sb *in)
{
	memset(pg, 0, SECT);
	put32(pg + SB_MAGIC_AT, SB_MAGIC);
	put16(pg + SB_FORMAT, FORMAT);
	put16(pg + SB_HDR_BYTES, KVS_SSD_SB_BYTES);
	put32(pg + SB_SEG, in->seg);
	put32(pg + SB_STATE, in->used ? SB_USED : SB_FREE);
	put64(pg + SB_SEG_BYTES, in->seg_bytes);
	put64(pg + SB_GEN, in->gen);
	put64(pg + SB_CSUM, XXH3_64bits(pg, SB_CSUM));
}

int kvs_ssd_sb_decode(const uint8_t *buf, size_t n, kvs_ssd_sb *out)
{
	uint32_t state;
	uint64_t seg_bytes;

	if (n < KVS_SSD_SB_BYTES)
		return -EBADMSG;
	state = get32(buf + SB_STATE);
	seg_bytes = get64(buf + SB_SEG_BYTES);
	if (get32(buf + SB_MAGIC_AT) != SB_MAGIC || get16(buf + SB_FORMAT) != FORMAT ||
	    get16(buf + SB_HDR_BYTES) != KVS_SSD_SB_BYTES ||
	    get64(buf + SB_CSUM) != XXH3_64bits(buf, SB_CSUM) || state > SB_USED ||
	    seg_bytes % SECT || seg_bytes < (64u << 10))
		return -EBADMSG;
	*out = (kvs_ssd_sb){ .seg = get32(buf + SB_SEG), .used = state == SB_USED,
			     .seg_bytes = seg_bytes, .gen = get64(buf + SB_GEN) };
	return 0;
}

static void sb_put(uint8_t *pg, uint32_t seg, uint64_t seg_bytes, uint64_t gen)
{
	kvs_ssd_sb sb = { .seg = seg, .used = 1, .seg_bytes = seg_bytes, .gen = gen };

	kvs_ssd_sb_encode(pg, &sb);
}

/* ---- settings */

int kvs_ssd_create(kvs_ssd **out)
{
	kvs_ssd *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->seg_bytes = 256ULL << 20;
	s->qd = 32;
	s->dfd = s->efd = -1;
	s->active = NONE;
	*out = s;
	return 0;
}

int kvs_ssd_set_segment_bytes(kvs_ssd *s, uint64_t bytes)
{
	if (s->opened)
		return -EBUSY;
	if (bytes % SECT || bytes < (64u << 10))
		return -EINVAL;
	s->seg_bytes = bytes;
	return 0;
}

int kvs_ssd_set_size(kvs_ssd *s, uint64_t bytes)
{
	if (s->opened)
		return -EBUSY;
	s->size = bytes;
	return 0;
}

int kvs_ssd_set_queue_depth(kvs_ssd *s, unsigned depth)
{
	if (s->opened)
		return -EBUSY;
	if (depth < 1 || depth > 4096)
		return -EINVAL;
	s->qd = depth;
	return 0;
}

int kvs_ssd_set_flags(kvs_ssd *s, unsigned flags)
{
	if (s->opened)
		return -EBUSY;
	s->flags = flags;
	return 0;
}

void kvs_ssd_set_recycle(kvs_ssd *s, kvs_ssd_recycle_fn fn, void *arg)
{
	s->recycle = fn;
	s->recycle_arg = arg;
}

/* ---- open and close */

/* seg_load - the segment's state from its superblock, if it is ours. */
static int seg_load(kvs_ssd *s, uint32_t i, uint8_t *pg)
{
	struct seg *g = &s->segs[i];
	kvs_ssd_sb sb;
	struct stat st;

	if (fstat(g->fd, &st) < 0 || (uint64_t)st.st_size != s->seg_bytes ||
	    pread(g->fd, pg, SECT, 0) != SECT ||
	    kvs_ssd_sb_decode(pg, SECT, &sb) < 0 ||
	    sb.seg != i || sb.seg_bytes != s->seg_bytes)
		return 0;
	g->gen = sb.gen;
	if (sb.used) {
		g->state = SEG_SEALED;
		g->fill = s->seg_bytes; /* where it stopped is unknown: sealed */
	}
	return 1;
}

/* seg_open - open (creating) one segment file and read its superblock;
 * a new file, or one of another size or not ours, starts free. */
static int seg_open(kvs_ssd *s, uint32_t i, uint8_t *pg, uint8_t *created)
{
	struct seg *g = &s->segs[i];
	int fl = O_RDWR | O_CLOEXEC | (s->direct ? O_DIRECT : 0), rc;
	char name[32];

	snprintf(name, sizeof(name), "seg-%05u.kvs", i);
	g->fd = openat(s->dfd, name, fl);
	if (g->fd < 0 && errno == ENOENT) {
		*created = 1; /* before the call: some kernels create, then refuse O_DIRECT */
		g->fd = openat(s->dfd, name, fl | O_CREAT | O_EXCL, 0600);
	}
	if (g->fd < 0 && errno == EINVAL && s->direct) {
		s->direct = 0; /* the filesystem refuses O_DIRECT: all go buffered */
		return seg_open(s, i, pg, created);
	}
	if (g->fd < 0)
		return -errno;
	if (seg_load(s, i, pg))
		return 0;
	if (ftruncate(g->fd, 0) < 0)
		return -errno;
	if (!(s->flags & KVS_SSD_NO_PREALLOC)) {
		rc = fallocate(g->fd, 0, 0, (off_t)s->seg_bytes);
		if (rc == 0 || errno != EOPNOTSUPP)
			return rc < 0 ? -errno : 0;
	}
	return ftruncate(g->fd, (off_t)s->seg_bytes) < 0 ? -errno : 0;
}

/* unlink_extra - segment files past the segment count (the size shrank). */
static void unlink_extra(kvs_ssd *s)
{
	int fd = dup(s->dfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	unsigned idx;
	char c;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d)))
		if (sscanf(e->d_name, "seg-%u.kv%c", &idx, &c) == 2 && c == 's' && idx >= s->nseg)
			unlinkat(s->dfd, e->d_name, 0);
	closedir(d);
}

static void release_files(kvs_ssd *s, const uint8_t *created)
{
	char name[32];
	uint32_t i;

	for (i = 0; s->segs && i < s->nseg; i++) {
		if (s->segs[i].fd >= 0)
			close(s->segs[i].fd);
		snprintf(name, sizeof(name), "seg-%05u.kvs", i);
		if (created && created[i])
			unlinkat(s->dfd, name, 0);
	}
	free(s->segs);
	free(s->cand);
	s->segs = NULL;
	s->cand = NULL;
	if (s->efd >= 0)
		close(s->efd);
	if (s->dfd >= 0)
		close(s->dfd); /* drops the flock */
	s->efd = s->dfd = -1;
	s->nseg = 0;
}

int kvs_ssd_open(kvs_ssd *s, const char *dir)
{
	uint8_t *pg = NULL, *created = NULL;
	uint64_t maxgen = 0, nseg = s->size / s->seg_bytes;
	struct timespec now;
	uint32_t i;
	int rc = 0;

	if (s->opened)
		return -EBUSY;
	if (!dir || nseg < 2 || nseg >= NONE)
		return -EINVAL;
	s->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dfd < 0)
		return -errno;
	/* Two stores on one directory would overwrite each other's blocks. */
	if (flock(s->dfd, LOCK_EX | LOCK_NB) < 0)
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
	else if (faccessat(s->dfd, ".", W_OK, AT_EACCESS) < 0)
		rc = -errno;
	if (rc)
		goto out;
	s->nseg = (uint32_t)nseg;
	s->segs = calloc(nseg, sizeof(*s->segs));
	s->cand = calloc(nseg, sizeof(*s->cand));
	created = calloc(nseg, 1);
	if (!s->segs || !s->cand || !created || posix_memalign((void **)&pg, SECT, SECT)) {
		rc = -ENOMEM;
		goto out;
	}
	s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->efd < 0) {
		rc = -errno;
		goto out;
	}
	for (i = 0; i < s->nseg; i++)
		s->segs[i].fd = -1;
	s->direct = !(s->flags & KVS_SSD_NO_DIRECT);
	for (i = 0; i < s->nseg && rc == 0; i++) {
		rc = seg_open(s, i, pg, &created[i]);
		if (s->segs[i].gen > maxgen)
			maxgen = s->segs[i].gen;
	}
	if (rc)
		goto out;
	unlink_extra(s);
	/* Generations never repeat, even if a superblock write was lost: the
	 * next one is past every generation on disk and past the clock (us). */
	clock_gettime(CLOCK_REALTIME, &now);
	s->gen_next = (uint64_t)now.tv_sec * 1000000 + (uint64_t)now.tv_nsec / 1000;
	if (s->gen_next <= maxgen)
		s->gen_next = maxgen + 1;
	s->uring = !(s->flags & KVS_SSD_NO_URING) &&
		   io_uring_queue_init(s->qd, &s->ring, 0) == 0;
	if (s->uring && io_uring_register_eventfd(&s->ring, s->efd) < 0) {
		io_uring_queue_exit(&s->ring);
		s->uring = 0;
	}
	s->opened = 1;
out:
	if (rc)
		release_files(s, created);
	free(pg);
	free(created);
	return rc;
}

static void op_free(kvs_ssd *s, struct op *o)
{
	free(o->bounce);
	o->bounce = NULL;
	s->segs[o->c.loc.seg].inflight--;
	s->queued--;
	o->next = s->spare;
	s->spare = o;
}

void kvs_ssd_close(kvs_ssd *s)
{
	struct io_uring_cqe *cqe;
	struct op *o, *next;

	if (!s)
		return;
	/* The kernel may still DMA into buffers: wait for it before freeing
	 * (submitting first what a failed io_uring_enter left in the ring). */
	if (s->uring && s->kernel)
		io_uring_submit(&s->ring);
	while (s->uring && s->kernel && io_uring_wait_cqe(&s->ring, &cqe) == 0) {
		op_free(s, io_uring_cqe_get_data(cqe));
		io_uring_cqe_seen(&s->ring, cqe);
		s->kernel--;
	}
	while ((o = opq_pop(&s->pend)) || (o = opq_pop(&s->done)))
		op_free(s, o);
	for (o = s->spare; o; o = next) {
		next = o->next;
		free(o->pg);
		free(o);
	}
	if (s->uring)
		io_uring_queue_exit(&s->ring);
	release_files(s, NULL);
	free(s);
}

/* ---- queries */

int kvs_ssd_event_fd(const kvs_ssd *s) { return s->efd; }
int kvs_ssd_direct(const kvs_ssd *s) { return s->opened && s->direct; }
int kvs_ssd_uring(const kvs_ssd *s) { return s->opened && s->uring; }
uint32_t kvs_ssd_segments(const kvs_ssd *s) { return s->nseg; }
unsigned kvs_ssd_inflight(const kvs_ssd *s) { return s->queued; }
uint64_t kvs_ssd_record_bytes(uint64_t len) { return SECT + round_up(len); }
uint64_t kvs_ssd_checksum(const void *buf, size_t len) { return XXH3_64bits(buf, len); }

uint64_t kvs_ssd_segment_gen(const kvs_ssd *s, uint32_t seg)
{
	if (seg >= s->nseg || s->segs[seg].state == SEG_FREE)
		return 0;
	return s->segs[seg].gen;
}

int kvs_ssd_check(const kvs_ssd *s, const kvs_ssd_loc *l)
{
	const struct seg *g;

	if (l->seg >= s->nseg)
		return -EINVAL;
	g = &s->segs[l->seg];
	if (g->state == SEG_FREE || g->gen != l->gen)
		return -ESTALE;
	if (l->len == 0 || l->off % SECT || l->off < SECT ||
	    l->off + kvs_ssd_record_bytes(l->len) > g->fill)
		return -EINVAL;
	return 0;
}

void kvs_ssd_stats_get(const kvs_ssd *s, kvs_ssd_stats *out)
{
	uint32_t i;

	*out = s->st;
	out->segments_total = s->nseg;
	for (i = 0; i < s->nseg; i++) {
		out->segments_free += s->segs[i].state == SEG_FREE;
		out->segments_used += s->segs[i].state != SEG_FREE;
		out->bytes_used += s->segs[i].state != SEG_FREE ? s->segs[i].fill : 0;
	}
	out->inflight = s->queued;
	hist_get(&s->wlat, &out->write_lat_avg_us, &out->write_lat_p99_us);
	hist_get(&s->rlat, &out->read_lat_avg_us, &out->read_lat_p99_us);
}

/* ---- operations */

/* op_new - a clean op of @kind on segment @seg, for the caller's @cookie. */
static struct op *op_new(kvs_ssd *s, int kind, uint32_t seg, uint64_t cookie)
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

/* op_drop - give back an op that was never submitted. */
static void op_drop(kvs_ssd *s, struct op *o)
{
	free(o->bounce);
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

static void submit_new(kvs_ssd *s, struct op *o)
{
	s->queued++;
	s->segs[o->c.loc.seg].inflight++;
	clock_gettime(CLOCK_MONOTONIC, &o->t0);
	issue(s, o);
}

static int cmp_gen(const void *a, const void *b, void *arg)
{
	const struct seg *g = arg;
	uint64_t x = g[*(const uint32_t *)a].gen, y = g[*(const uint32_t *)b].gen;

	return x < y ? -1 : x > y;
}

/* seg_next - seal the segment being filled and start another: a free one,
 * else the oldest used one (FIFO) without I/O that the caller lets go. */
static int seg_next(kvs_ssd *s)
{
	uint32_t i, n = 0, pick = NONE;
	struct seg *g;
	struct op *o;

	if (s->active != NONE)
		s->segs[s->active].state = SEG_SEALED;
	s->active = NONE;
	for (i = 0; i < s->nseg && pick == NONE; i++)
		if (s->segs[i].state == SEG_FREE)
			pick = i;
	if (pick == NONE) {
		for (i = 0; i < s->nseg; i++)
			if (s->segs[i].state == SEG_SEALED && !s->segs[i].inflight)
				s->cand[n++] = i;
		qsort_r(s->cand, n, sizeof(*s->cand), cmp_gen, s->segs);
		for (i = 0; i < n && pick == NONE; i++) {
			g = &s->segs[s->cand[i]];
			if (!s->recycle || s->recycle(s->recycle_arg, s->cand[i], g->gen) == 0)
				pick = s->cand[i];
			else
				s->st.recycle_vetoed++;
		}
		if (pick == NONE)
			return -ENOSPC;
		s->st.recycled++;
	}
	g = &s->segs[pick];
	g->state = SEG_ACTIVE;
	g->gen = s->gen_next++;
	g->fill = SECT;
	s->active = pick;
	/* The superblock tells a restart the segment's new generation. Not
	 * waited for: record headers carry the generation too, so a lost
	 * superblock write only makes a restart drop this segment's entries. */
	o = op_new(s, KVS_SSD_OP_WRITE, pick, 0);
	if (!o)
		return 0;
	o->internal = 1;
	o->fd = g->fd;
	sb_put(o->pg, pick, s->seg_bytes, g->gen);
	o->iov[0] = (struct iovec){ o->pg, SECT };
	o->niov = 1;
	o->total = SECT;
	submit_new(s, o);
	return 0;
}

/* op_layout - header sector, then the payload: whole sectors straight from
 * or into @buf, a partial last sector through o->pg's second page; an
 * unaligned @buf through a full bounce copy. */
static int op_layout(struct op *o, const kvs_ssd_loc *l, void *buf, int copy_in)
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

int kvs_ssd_write(kvs_ssd *s, const kvs_ssd_blk *b, const void *payload,
		  unsigned flags, uint64_t cookie, kvs_ssd_loc *loc)
{
	uint64_t rec = kvs_ssd_record_bytes(b->len);
	struct seg *g;
	struct op *o;
	int rc = 0;

	if (!s->opened)
		return -EBADF;
	if (b->len == 0 || !payload || rec > s->seg_bytes - SECT)
		return -EINVAL;
	if (s->active == NONE || s->segs[s->active].fill + rec > s->seg_bytes)
		rc = seg_next(s);
	if (rc < 0) {
		s->st.enospc++;
		return rc;
	}
	g = &s->segs[s->active];
	o = op_new(s, KVS_SSD_OP_WRITE, s->active, cookie);
	if (!o)
		return -ENOMEM;
	o->c.loc = (kvs_ssd_loc){ .seg = s->active, .len = b->len, .gen = g->gen, .off = g->fill };
	o->c.blk = *b;
	if (!(flags & KVS_SSD_CSUM))
		o->c.blk.csum = XXH3_64bits(payload, b->len);
	if (op_layout(o, &o->c.loc, (void *)payload, 1) < 0) {
		op_drop(s, o);
		return -ENOMEM;
	}
	kvs_ssd_header_encode(o->pg, &o->c.blk, &o->c.loc);
	o->fd = g->fd;
	g->fill += rec;
	*loc = o->c.loc;
	submit_new(s, o);
	return 0;
}

int kvs_ssd_read(kvs_ssd *s, const kvs_ssd_loc *loc, const kvs_ssd_blk *expect,
		 unsigned flags, void *dst, uint64_t cookie)
{
	struct op *o;
	int rc;

	if (!s->opened)
		return -EBADF;
	rc = kvs_ssd_check(s, loc);
	if (rc == -ESTALE)
		s->st.stale_reads++;
	if (rc < 0)
		return rc;
	if (!dst || expect->len != loc->len)
		return -EINVAL;
	o = op_new(s, KVS_SSD_OP_READ, loc->seg, cookie);
	if (!o)
		return -ENOMEM;
	o->c.loc = *loc;
	o->c.blk = *expect;
	o->want_csum = !!(flags & KVS_SSD_CSUM);
	o->dst = dst;
	if (op_layout(o, loc, dst, 0) < 0) {
		op_drop(s, o);
		return -ENOMEM;
	}
	o->fd = s->segs[loc->seg].fd;
	submit_new(s, o);
	return 0;
}

/* read_verify - the bytes read are the block asked for, or -EBADMSG. The
 * payload checksum is computed over the caller's buffer, after any copy, so
 * what is verified is exactly what the caller will use. */
static int read_verify(struct op *o)
{
	uint32_t len = o->c.loc.len;
	uint64_t whole = len & ~(uint64_t)(SECT - 1), csum;

	if (!hdr_ok(o->pg, &o->c.blk, &o->c.loc, &csum))
		return -EBADMSG;
	if (o->bounce)
		memcpy(o->dst, o->bounce, len);
	else if (len > whole)
		memcpy((uint8_t *)o->dst + whole, o->pg + SECT, len - whole);
	if (XXH3_64bits(o->dst, len) != csum || (o->want_csum && csum != o->c.blk.csum))
		return -EBADMSG;
	o->c.blk.csum = csum;
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
		o->c.res = read_verify(o);
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
	op_free(s, o);
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
