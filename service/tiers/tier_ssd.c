/* tier_ssd.c - the SSD tier under the host tier (see tier_ssd.h,
 * docs/ssd.md): open and close, its table of operations, recycling,
 * completions and stats. */
#define _GNU_SOURCE
#include "tier_ssd_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvs_log.h"
#include "kvs_types.h" /* kvs_strerror */

#define DEFAULT_SEGMENTS 4

kvs_ssd_loc ssd_loc_of(const ssd_tier *t, uint32_t idx, uint64_t bytes)
{
	const loc *l = ssd_loc(t, idx);

	return (kvs_ssd_loc){ .seg = l->seg,
			      .gen = kvs_ssd_segment_gen(t->ssd, l->seg),
			      .off = (uint64_t)loc_off4k(l) << 12,
			      .len = (uint32_t)bytes };
}

kvs_index_key ssd_key_of(const kvs_tier_blk *b)
{
	return (kvs_index_key){ .ns = b->ns, .hash = b->hash };
}

/* The longest wait between tries of a tier that keeps failing. */
#define RETRY_MAX_S 300

/* A full filesystem may get room, an I/O error may be a passing one: a
 * tier off for good until a restart would serve from RAM alone long after
 * the disk is well. So demotion is tried again after a wait that doubles
 * with each try that fails (one failed write each, and one log line). */
void ssd_disable(ssd_tier *t, int err, const char *what)
{
	t->counts.io_errors++;
	if (!t->enabled)
		return; /* the other writes in flight at the fault */
	t->enabled = 0;
	if (!t->retry_first_s) {
		kvs_err("SSD tier: %s failed: %s: demotion turned off, serving "
			"from RAM", what, kvs_strerror(err));
		return;
	}
	t->retry_s = !t->retry_s ? t->retry_first_s
		     : t->retry_s >= RETRY_MAX_S / 2 ? RETRY_MAX_S : 2 * t->retry_s;
	t->retry_at = now_ms() + (uint64_t)t->retry_s * 1000;
	kvs_err("SSD tier: %s failed: %s: demotion turned off, serving from RAM; "
		"trying again in %u s", what, kvs_strerror(err), t->retry_s);
}

int ssd_enabled_now(const ssd_tier *t)
{
	return t->enabled || (t->retry_at && now_ms() >= t->retry_at);
}

int ssd_enabled(ssd_tier *t)
{
	if (t->enabled)
		return 1;
	if (!ssd_enabled_now(t))
		return 0;
	t->enabled = 1;
	t->retry_at = 0;
	t->counts.error_retries++;
	kvs_warn("SSD tier: trying demotion again (off %u s after an error)",
		 t->retry_s);
	return 1;
}

/* The copy of @idx is gone: out of the index when @k, no longer counted.
 * Returns 0 when it had none. */
static int copy_gone(ssd_tier *t, uint32_t idx, const kvs_index_key *k)
{
	if (!(loc_flags(ssd_loc(t, idx)) & LOC_SSD))
		return 0;
	if (k) {
		kvs_index_del(t->ix, k);
		t->ld.drops++; /* a batch read before may hold it */
	}
	loc_clear(&t->loc[idx], LOC_SSD);
	t->blocks--;
	return 1;
}

void ssd_drop(ssd_tier *t, uint32_t idx, int del_index)
{
	kvs_tier_blk b;
	kvs_index_key k;
	int keyed = del_index && kvs_tier_rec(&t->base, idx, &b) == 0;

	if (keyed)
		k = ssd_key_of(&b);
	if (copy_gone(t, idx, keyed ? &k : NULL))
		kvs_tier_lost(&t->base, idx);
}

/* ---- the operations --------------------------------------------------- */

static int ssd_rec_new(kvs_tier_mod *tt, uint32_t idx)
{
	ssd_tier *t = ssd_of(tt);

	/* Sized as the table's records: their slack, no more. */
	if (idx >= t->nloc) {
		uint32_t n = kvs_tier_rec_span(tt);
		loc *nl;

		if (n <= idx)
			n = idx + 1;
		nl = realloc(t->loc, (size_t)n * sizeof(*nl));
		if (!nl)
			return -ENOMEM;
		memset(nl + t->nloc, 0, (size_t)(n - t->nloc) * sizeof(*nl));
		t->loc = nl;
		t->nloc = n;
	}
	t->loc[idx] = (loc){ 0 };
	return 0;
}

static int ssd_has(const kvs_tier_mod *tt, uint32_t idx)
{
	uint32_t f = loc_flags(ssd_loc(ssd_of(tt), idx));

	/* On SSD with no I/O in flight, or on its way there: a demotion write
	 * in flight is served from its staging copy. */
	return !(f & LOC_READING) && (f & (LOC_SSD | LOC_WRITING)) != 0 &&
	       (f & (LOC_SSD | LOC_WRITING)) != (LOC_SSD | LOC_WRITING);
}

static int ssd_reading(const kvs_tier_mod *tt, uint32_t idx)
{
	return !!(loc_flags(ssd_loc(ssd_of(tt), idx)) & LOC_READING);
}

/* The cache drops a copy that failed its read (unpinned by now). */
static void ssd_drop_op(kvs_tier_mod *tt, const kvs_tier_blk *b)
{
	kvs_index_key k = ssd_key_of(b);

	copy_gone(ssd_of(tt), b->idx, &k);
}

static void ssd_note(kvs_tier_mod *tt, int what, uint64_t n)
{
	kvs_tier_ssd_stats *st = &ssd_of(tt)->counts;

	if (what == KVS_TIER_NOTE_PROMOTED)
		st->promotions += (int64_t)n;
	else if (what == KVS_TIER_NOTE_LOOKUP_HIT)
		st->lookup_hits += (int64_t)n;
}

static void ssd_stats(kvs_tier_mod *tt, kvs_counters *st)
{
	ssd_tier *t = ssd_of(tt);
	kvs_ssd_stats ss;
	kvs_index_stats is;
	uint64_t total;

	kvs_ssd_stats_get(t->ssd, &ss);
	kvs_index_stats_get(t->ix, &is);
	total = (uint64_t)kvs_ssd_segments(t->ssd) * t->seg_bytes;
	t->counts.bytes_total = (int64_t)total;
	t->counts.bytes_free = (int64_t)(total - ss.bytes_used);
	t->counts.enabled = t->enabled;
	t->counts.bytes_used = (int64_t)ss.bytes_used;
	t->counts.blocks = (int64_t)t->blocks;
	t->counts.blocks_ssd_only = (int64_t)kvs_tier_only_here(tt);
	t->counts.writes_inflight = t->writes_inflight;
	t->counts.write_lat_avg_us = (int64_t)ss.write_lat_avg_us;
	t->counts.write_lat_p99_us = (int64_t)ss.write_lat_p99_us;
	t->counts.read_lat_avg_us = (int64_t)ss.read_lat_avg_us;
	t->counts.read_lat_p99_us = (int64_t)ss.read_lat_p99_us;
	t->counts.index_entries = (int64_t)is.entries;
	t->counts.index_loading = t->ld.on;
	t->counts.index_loaded = (int64_t)t->ld.loaded;
	t->counts.index_rereads = (int64_t)t->ld.rewinds;
	st->table_metadata_bytes += (int64_t)t->nloc * (int64_t)sizeof(loc);
}

static void on_cqe(void *arg, const kvs_ssd_cqe *q)
{
	ssd_tier *t = arg;

	if (q->op == KVS_SSD_OP_WRITE)
		ssd_write_done(t, q);
	else if (q->cookie & COOKIE_VERIFY)
		ssd_verify_done(t, q);
	else
		ssd_read_done(t, q);
}

static int ssd_event_fd(const kvs_tier_mod *tt)
{
	return kvs_ssd_event_fd(ssd_of(tt)->ssd);
}

/* Reap completions (finishing demotions, promotions and verifies), then
 * commit the index batch: one transaction per loop turn with changes; and
 * while the index loads, one slice of it. */
static void ssd_poll(kvs_tier_mod *tt)
{
	ssd_tier *t = ssd_of(tt);
	int rc;

	if (kvs_ssd_reap(t->ssd, on_cqe, t) > 0)
		t->stall_poke = 1; /* reads ended, pins went: worth asking again */
	rc = kvs_index_flush(t->ix);
	if (rc < 0)
		kvs_err("SSD tier: index flush failed: %s", kvs_strerror(rc));
	/* After the flush: a slice reads committed state, which then holds
	 * what the table said so far (deletes of dropped copies, puts of new
	 * ones), so it never sees an entry the table has moved past. */
	ssd_load_step(t);
}

/* I/O in flight is waited for and discarded. */
static void ssd_close(kvs_tier_mod *tt)
{
	ssd_tier *t = ssd_of(tt);

	ssd_load_stop(t); /* it reads the index and kicks the store */
	kvs_ssd_close(t->ssd);
	kvs_index_close(t->ix);
	for (uint32_t i = 0; i < kvs_pool_cap(&t->ws); i++)
		free(ssd_wslot(t, i)->buf);
	for (uint32_t i = 0; i < t->npool; i++)
		free(t->pool[i].p);
	for (uint32_t i = 0; i < kvs_pool_cap(&t->vs); i++)
		if (kvs_pool_live_at(&t->vs, i))
			ssd_vjob_free(t, i);
	kvs_pool_fini(&t->vs);
	kvs_pool_fini(&t->ws);
	kvs_pool_fini(&t->rs);
	free(t->loc);
	free(t->ld.pend);
	ssd_ns_free(t);
	free(t);
}

#define KVS_STAT_TYPE kvs_tier_ssd_stats
KVS_STATS_SECTION_DEFINE(kvs_tier_ssd_section, "tier_ssd", KVS_TIER_SSD,
			 KVS_TIER_SSD_STATS);
#undef KVS_STAT_TYPE

static const kvs_tier_store_ops ssd_store_ops = {
	.rec_new = ssd_rec_new,
	.has = ssd_has,
	.keeps = ssd_keeps,
	.demote = ssd_demote,
	.committed = ssd_committed,
	.read = ssd_read,
	.reading = ssd_reading,
	.drop = ssd_drop_op,
	.host_held = ssd_host_held,
	.wait_held = ssd_wait_held,
	.ns_created = ssd_ns_created,
	.restore = ssd_restore,
	.find = ssd_find,
	.verify = ssd_verify,
	.verify_cancel = ssd_verify_cancel,
};

static const kvs_tier_ops ssd_ops = {
	.name = "SSD",
	.tier = KVS_TIER_SSD,
	.close = ssd_close,
	.event_fd = ssd_event_fd,
	.poll = ssd_poll,
	.note = ssd_note,
	.stats = ssd_stats,
	.stats_section = &kvs_tier_ssd_section,
	.store = &ssd_store_ops,
};

/* ---- recycling -------------------------------------------------------- */

/* Whether @b's SSD copy must stay: it is being read (a promotion or a
 * verify), or its bytes are only here and a lookup has it pinned (it is
 * about to be promoted). A pinned block in RAM may lose its copy: readers
 * read its slot, never the copy. */
static int copy_needed(const loc *l, const kvs_tier_blk *b)
{
	return (loc_flags(l) & LOC_READING) ||
	       (b->refs > 0 && b->tier == KVS_TIER_SSD);
}

/* The store reuses segment @seg: every block in it loses its SSD copy (it
 * is a cache: live blocks go too). A segment with a copy still needed is
 * kept (-EBUSY): the store tries the next oldest. O(records), once per
 * segment's worth of writes. */
static int on_recycle(void *arg, uint32_t seg, uint64_t gen)
{
	ssd_tier *t = arg;
	kvs_tier_blk b;
	uint64_t n = 0, pinned = 0;

	(void)gen; /* every copy listed in @seg is of its current generation */
	for (uint32_t i = 0; i < t->nloc; i++) {
		const loc *l = &t->loc[i];

		if ((loc_flags(l) & LOC_SSD) && l->seg == seg &&
		    kvs_tier_rec(&t->base, i, &b) == 0 && copy_needed(l, &b))
			return -EBUSY;
	}
	for (uint32_t i = 0; i < t->nloc; i++) {
		const loc *l = &t->loc[i];

		if ((loc_flags(l) & LOC_SSD) && l->seg == seg &&
		    kvs_tier_rec(&t->base, i, &b) == 0) {
			pinned += b.refs > 0;
			ssd_drop(t, i, 0);
			n++;
		}
	}
	kvs_index_del_segment(t->ix, seg);
	t->counts.recycled_segments++;
	/* Such a segment was kept before: with many readers every segment
	 * held a pinned block and none could be recycled (docs/ssd.md). */
	t->counts.recycle_forced += pinned > 0;
	t->counts.stale_blocks += (int64_t)n;
	kvs_debug("SSD tier: segment %u recycled, %" PRIu64 " blocks dropped", seg, n);
	return 0;
}

/* ---- open ------------------------------------------------------------- */

/* Whether the env var @name is set (to anything but "" or "0"). */
static int env_flag(const char *name)
{
	const char *v = getenv(name);

	return v && *v && strcmp(v, "0") != 0;
}

static int check_dir(const char *dir)
{
	struct stat st;
	int rc;

	if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
	    access(dir, W_OK | X_OK) == 0)
		return 0;
	rc = stat(dir, &st) < 0 ? -errno : !S_ISDIR(st.st_mode) ? -ENOTDIR : -errno;
	kvs_err("--ssd-dir %s: %s", dir, kvs_strerror(rc));
	return rc;
}

/* The segment store under cfg->dir, with the settings it is given. */
static int open_store(ssd_tier *t, const kvs_tier_ssd_config *cfg, uint64_t bytes)
{
	int rc = kvs_ssd_create(&t->ssd);

	if (rc == 0)
		rc = kvs_ssd_set_segment_bytes(t->ssd, cfg->segment_bytes);
	if (rc == 0)
		rc = kvs_ssd_set_size(t->ssd, bytes);
	if (rc == 0 && cfg->queue_depth)
		rc = kvs_ssd_set_queue_depth(t->ssd, cfg->queue_depth);
	/* Test and sandbox knobs (docs/ssd.md): synchronous I/O; sparse
	 * segment files, so that a full filesystem shows up as ENOSPC on
	 * writes rather than at start. */
	if (rc == 0 && (env_flag("KVS_SSD_NO_URING") || env_flag("KVS_SSD_NO_PREALLOC")))
		rc = kvs_ssd_set_flags(t->ssd,
				       (env_flag("KVS_SSD_NO_URING") ? KVS_SSD_NO_URING : 0) |
				       (env_flag("KVS_SSD_NO_PREALLOC") ? KVS_SSD_NO_PREALLOC : 0));
	if (rc < 0)
		return rc;
	kvs_ssd_set_recycle(t->ssd, on_recycle, t);
	rc = kvs_ssd_open(t->ssd, cfg->dir);
	if (rc < 0) {
		kvs_err("SSD tier: cannot open segments in %s (%" PRIu64
			" bytes, segments of %" PRIu64 "): %s", cfg->dir, bytes,
			cfg->segment_bytes, kvs_strerror(rc));
		return rc;
	}
	if (!kvs_ssd_direct(t->ssd))
		kvs_warn("SSD tier: O_DIRECT refused by the filesystem of %s: "
			 "buffered I/O", cfg->dir);
	if (!kvs_ssd_uring(t->ssd))
		kvs_warn("SSD tier: io_uring unavailable: synchronous I/O");
	if (env_flag("KVS_SSD_NO_PREALLOC"))
		kvs_warn("SSD tier: KVS_SSD_NO_PREALLOC: sparse segment files, "
			 "a full filesystem fails demotion writes");
	return 0;
}

int kvs_tier_ssd_open(const kvs_tier_ssd_config *cfg, kvs_tier_mod **out)
{
	uint64_t bytes = cfg->bytes ? cfg->bytes
				    : cfg->segment_bytes * DEFAULT_SEGMENTS;
	char ixdir[300];
	ssd_tier *t;
	int rc = check_dir(cfg->dir);

	if (rc < 0)
		return rc;
	if (strlen(cfg->dir) >= sizeof(t->dir))
		return -ENAMETOOLONG;
	if ((cfg->segment_bytes >> 12) > LOC_MAX_OFF4K) {
		kvs_err("SSD tier: segments of %" PRIu64 " bytes: at most 2 TiB",
			cfg->segment_bytes);
		return -EINVAL;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->base.ops = &ssd_ops;
	t->base.counters = &t->counts;
	strcpy(t->dir, cfg->dir);
	t->seg_bytes = cfg->segment_bytes;
	t->admit_hit = cfg->admit_hit;
	t->write_through = cfg->write_through;
	t->enabled = 1;
	t->retry_first_s = cfg->error_retry_s;
	/* Slots by the 64, verify jobs by the 4 (the first arrays' sizes
	 * before the pool). */
	rc = kvs_pool_init(&t->ws, sizeof(wslot), 6, KVS_POOL_MAX);
	if (rc == 0)
		rc = kvs_pool_init(&t->rs, sizeof(rslot), 6, KVS_POOL_MAX);
	if (rc == 0)
		rc = kvs_pool_init(&t->vs, sizeof(vjob), 2, 1u << 30);
	if (rc == 0)
		rc = open_store(t, cfg, bytes);
	snprintf(ixdir, sizeof(ixdir), "%s/index", cfg->dir);
	if (rc == 0 && (rc = kvs_index_create(&t->ix)) == 0)
		rc = kvs_index_set_mapsize(t->ix, kvs_index_mapsize_for(bytes, 64u << 10));
	if (rc == 0 && (rc = kvs_index_open(t->ix, ixdir)) < 0)
		kvs_err("SSD tier: cannot open the index %s: %s", ixdir,
			kvs_strerror(rc));
	if (rc < 0) {
		ssd_close(&t->base);
		return rc;
	}
	kvs_info("SSD tier: %s, %u segments of %" PRIu64 " MiB, queue depth "
		 "%u, admit %s%s", cfg->dir, kvs_ssd_segments(t->ssd),
		 cfg->segment_bytes >> 20, cfg->queue_depth ? cfg->queue_depth : 32,
		 t->admit_hit ? "hit" : "all",
		 t->write_through ? ", write-through" : "");
	*out = &t->base;
	return 0;
}
