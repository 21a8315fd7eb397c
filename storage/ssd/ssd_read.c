/*
 * ssd_read.c - the segment store's read path (see kvs_ssd.h): a read of a
 * record into the caller's buffer, and the check, at completion, that the
 * bytes read are the block asked for.
 */
#define _GNU_SOURCE
#include "ssd_int.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>

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
	o = ssd_op_new(s, KVS_SSD_OP_READ, loc->seg, cookie);
	if (!o)
		return -ENOMEM;
	o->c.loc = *loc;
	o->c.blk = *expect;
	o->want_csum = !!(flags & KVS_SSD_CSUM);
	o->dst = dst;
	if (ssd_op_layout(o, loc, dst, 0) < 0) {
		ssd_op_drop(s, o);
		return -ENOMEM;
	}
	o->fd = s->segs[loc->seg].fd;
	ssd_op_submit(s, o);
	return 0;
}

/* ssd_read_verify - the bytes read are the block asked for, or -EBADMSG. The
 * payload checksum is computed over the caller's buffer, after any copy, so
 * what is verified is exactly what the caller will use. */
int ssd_read_verify(struct op *o)
{
	uint32_t len = o->c.loc.len;
	uint64_t whole = len & ~(uint64_t)(SECT - 1), csum;

	if (!ssd_hdr_ok(o->pg, &o->c.blk, &o->c.loc, &csum))
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
