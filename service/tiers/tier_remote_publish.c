/* tier_remote_publish.c - the remote tier's publishing: staging copies,
 * the pin cap of write-through, the keyed MAC of each value, and the repair
 * of values that failed verification here (see tier_remote_int.h,
 * docs/remote.md). */
#define _GNU_SOURCE
#include "tier_remote_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_log.h"

/* A staging buffer of @bytes: a spare one of that size, else a new one. */
static void *stage_get(remote_tier *t, uint64_t bytes)
{
	for (uint32_t i = 0; i < t->nspare; i++)
		if (t->spare_len[i] == bytes) {
			void *buf = t->spare[i];

			t->spare_bytes -= bytes;
			t->nspare--;
			t->spare[i] = t->spare[t->nspare];
			t->spare_len[i] = t->spare_len[t->nspare];
			return buf;
		}
	return malloc(bytes);
}

void remote_stage_put(remote_tier *t, void *buf, uint64_t bytes)
{
	if (t->nspare < SPARE_MAX && t->spare_bytes + bytes <= SPARE_BYTES) {
		t->spare[t->nspare] = buf;
		t->spare_len[t->nspare++] = bytes;
		t->spare_bytes += bytes;
	} else {
		free(buf);
	}
}

static struct suspect *suspect_slot(remote_tier *t, kvs_hash h)
{
	return &t->suspect[(h.lo ^ h.hi) % SUSPECT_SLOTS];
}

/* Whether block @h of @fp failed verification here (and is not repaired). */
static int suspect_has(remote_tier *t, uint64_t fp, kvs_hash h)
{
	struct suspect *s = suspect_slot(t, h);

	return s->fp == fp && s->hash.lo == h.lo && s->hash.hi == h.hi;
}

/* A value the GET of @f brought failed verification (@res): a miss,
 * counted, logged once per episode, and remembered for repair. */
void remote_rejected(remote_tier *t, const rjob *f, int res, const kvs_rval_info *got)
{
	struct suspect *s = suspect_slot(t, f->want.hash);

	s->fp = f->want.ns_fp;
	s->hash = f->want.hash;
	if (res != -EKEYREJECTED) {
		t->counts.corrupt++;
		if (!t->corrupt_logged)
			kvs_warn("remote tier: a value failed its header check: not "
				 "served (tier_remote.corrupt counts them)");
		t->corrupt_logged = 1;
		return;
	}
	t->counts.forged++;
	/* one line per signer: a daemon with another secret shows as one key
	 * id, over and over; bytes changed after signing show as ours */
	if (t->forged_logged != got->key_id + 1)
		kvs_warn("remote tier: a value failed its MAC (signed by key id "
			 "%016" PRIx64 ", ours %016" PRIx64 "%s): not served, to be "
			 "replaced (tier_remote.forged counts them)", got->key_id,
			 kvs_rval_mac_id(t->mac),
			 got->key_id == kvs_rval_mac_id(t->mac) ? ": changed since" :
			 got->key_id ? ": another --remote-secret-file" : ": no secret");
	t->forged_logged = got->key_id + 1;
}

/* Bytes of host slots the publish path may hold pinned at once: past it a
 * block is published from a copy (a node that does not answer would
 * otherwise pin every committed block until its timeout, and fill the host
 * tier with blocks nothing can evict: every writer FULL). */
static uint64_t pin_cap(const remote_tier *t)
{
	return kvs_tier_host_bytes(&t->base) / 100 * t->pin_share;
}

/* Publish @b: EXISTS, then SET NX of a signed header and the payload (the
 * MAC computed by the MAC workers in between); a block whose value failed
 * verification here is signed at once and goes out as a SET that
 * replaces it. At commit (@pin) the payload goes straight from the
 * block's slot, the record pinned until the SET ends (a committed block's
 * bytes do not change, and a pinned one is not evicted), while the pins
 * stay under pin_cap(); at eviction (or past the cap) the slot may be
 * reused, so the payload goes from a staging copy. */
void remote_publish(remote_tier *t, const kvs_tier_blk *b, int pin)
{
	const void *key;
	size_t klen = KVS_RVAL_KEY_BYTES;
	kvs_rval_info info = { .block_bytes = b->bytes, .ns_fp = remote_fingerprint(t, b->ns),
			       .hash = b->hash, .parent = b->parent };
	const void *slot = kvs_tier_host_ptr(&t->base, b->host_off);
	int capped = 0;
	uint32_t j;
	rjob *p;

	if (info.ns_fp == 0)
		return;
	if (pin && t->pinned_bytes + b->bytes > pin_cap(t)) {
		pin = 0;
		capped = 1;
	}
	if ((!pin && t->staged + b->bytes > MAX_STAGED_BYTES) ||
	    remote_job_new(t, JOB_CHECK, &j) < 0) {
		t->counts.skipped++;
		return;
	}
	p = remote_job(t, j);
	p->bytes = b->bytes;
	p->pinned = pin;
	p->idx = b->idx;
	p->want = info;
	if (pin) {
		kvs_tier_pin(&t->base, b->idx, 1);
		t->pinned_bytes += b->bytes;
		p->src = slot;
	} else {
		p->buf = stage_get(t, b->bytes);
		if (!p->buf) {
			remote_job_free(t, j);
			t->counts.skipped++;
			return;
		}
		t->staged += b->bytes;
		memcpy(p->buf, slot, b->bytes);
		p->src = p->buf;
		t->counts.pin_capped += capped;
	}
	kvs_rval_key(p->keys[0], info.ns_fp, b->hash);
	if (suspect_has(t, info.ns_fp, b->hash)) {
		p->kind = JOB_REPAIR;
		remote_work_submit(t, j); /* sealed off the loop: remote_sealed */
		return;
	}
	key = p->keys[0];
	if (kvs_remote_exists(t->eng, &key, &klen, 1, p->res, j) < 0)
		remote_job_free(t, j);
}

/* Publish job @j is signed (by the MAC workers): its SET NX, or a
 * repair's SET. */
void remote_sealed(remote_tier *t, uint32_t j)
{
	rjob *p = remote_job(t, j);
	struct iovec iov[2] = { { p->hdr, KVS_RVAL_HDR_BYTES },
				{ (void *)p->src, p->bytes } };
	int rc;

	if (p->wres < 0) {
		remote_job_free(t, j);
		t->counts.skipped++;
		return;
	}
	if (p->kind == JOB_REPAIR)
		rc = kvs_remote_set(t->eng, p->keys[0], KVS_RVAL_KEY_BYTES, iov, 2, j);
	else
		rc = kvs_remote_set_nx(t->eng, p->keys[0], KVS_RVAL_KEY_BYTES, iov, 2, j);
	if (rc < 0)
		remote_job_free(t, j);
}

/* The EXISTS before a publish: sign and send it only if it is missing
 * (a block already there costs no MAC). */
void remote_check_done(remote_tier *t, uint32_t j, const kvs_remote_cqe *q)
{
	rjob *p = remote_job(t, j);

	if (q->res < 0) {
		remote_count_error(t, q->res);
		remote_job_free(t, j);
		return;
	}
	if (p->res[0] == 1) {
		t->counts.existed++;
		remote_job_free(t, j);
		return;
	}
	p->kind = JOB_PUBLISH;
	remote_work_submit(t, j); /* sealed off the loop: remote_sealed */
}

/* The SET NX of a publish, or the SET of a repair. */
void remote_publish_done(remote_tier *t, uint32_t j, const kvs_remote_cqe *q)
{
	rjob *p = remote_job(t, j);

	if (q->res == 0) {
		t->counts.published++;
		t->counts.bytes_out += p->bytes;
		if (p->kind == JOB_REPAIR) {
			t->counts.repaired++;
			if (suspect_has(t, p->want.ns_fp, p->want.hash))
				*suspect_slot(t, p->want.hash) = (struct suspect){ 0 };
		}
	} else if (q->res == -EEXIST) {
		t->counts.existed++;
	} else {
		remote_count_error(t, q->res);
	}
	remote_job_free(t, j);
}
