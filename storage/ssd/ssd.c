/*
 * ssd.c - the SSD segment store (see kvs_ssd.h): its settings, open and
 * close, the segment files, queries and stats. Writing is ssd_write.c's,
 * reading ssd_read.c's, the ops and their completions ssd_io.c's, the
 * on-disk encoding ssd_format.c's.
 */
#define _GNU_SOURCE
#include "ssd_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- settings */

int kvs_ssd_create(kvs_ssd **out)
{
	kvs_ssd *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->seg_bytes = 256ULL << 20;
	s->qd = 32;
	s->dfd = s->efd = -1;
	s->active = KVS_NONE;
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
	if (!dir || nseg < 2 || nseg >= KVS_NONE)
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
		ssd_op_free(s, io_uring_cqe_get_data(cqe));
		io_uring_cqe_seen(&s->ring, cqe);
		s->kernel--;
	}
	while ((o = opq_pop(&s->pend)) || (o = opq_pop(&s->done)))
		ssd_op_free(s, o);
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
	ssd_hist_get(&s->wlat, &out->write_lat_avg_us, &out->write_lat_p99_us);
	ssd_hist_get(&s->rlat, &out->read_lat_avg_us, &out->read_lat_p99_us);
}

