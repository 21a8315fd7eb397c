/* cache_persist_adopt.c - kvs_persist_adopt: the fds a daemon before this
 * one left are checked (names, header, geometry, seals, sizes) and taken
 * in place of the fresh arenas and metadata; cache_persist_rebuild.c then
 * rebuilds the table from the records. Anything wrong is a cold start. */
#define _GNU_SOURCE
#include "kvs_persist.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cache_int.h"
#include "persist_fmt.h"

int cache_persist_rebuild(kvs_cache *c, kvs_persist_report *r);

typedef struct adopt {
	int meta;                      /* fd, or -1 */
	int arena[PERSIST_MAX_DOMS];   /* fds by domain, or -1 */
	cache_persist *p;              /* the metadata, mapped */
	kvs_arena *ar[PERSIST_MAX_DOMS];
	ino_t ino[PERSIST_MAX_DOMS + 1]; /* the arenas', then the metadata's */
	uint32_t ndoms;
} adopt;

static void cold(kvs_persist_report *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
	va_end(ap);
}

/* Sort @in by name; an unknown name or a second fd of one is closed. */
static void sort_fds(const kvs_named_fd *in, uint32_t n, adopt *a)
{
	a->meta = -1;
	for (uint32_t i = 0; i < PERSIST_MAX_DOMS; i++)
		a->arena[i] = -1;
	for (uint32_t i = 0; i < n; i++) {
		const char *nm = in[i].name, *pre = KVS_PERSIST_ARENA_PREFIX;
		size_t pl = strlen(pre);
		char *end;
		unsigned long d;
		int *slot = NULL;

		if (strcmp(nm, KVS_PERSIST_META_NAME) == 0) {
			slot = &a->meta;
		} else if (strncmp(nm, pre, pl) == 0 && nm[pl] >= '0' &&
			   nm[pl] <= '9') {
			d = strtoul(nm + pl, &end, 10);
			if (!*end && d < PERSIST_MAX_DOMS)
				slot = &a->arena[d];
		}
		if (slot && *slot < 0 && in[i].fd >= 0) {
			*slot = in[i].fd;
			continue;
		}
		kvs_warn("persist: fd %d named '%s' is not one of ours: closed",
			 in[i].fd, nm);
		if (in[i].fd >= 0)
			close(in[i].fd);
	}
}

static void adopt_drop(adopt *a)
{
	if (a->p)
		cache_persist_unmap(a->p); /* closes a->meta */
	else if (a->meta >= 0)
		close(a->meta);
	for (uint32_t i = 0; i < PERSIST_MAX_DOMS; i++) {
		if (a->ar[i])
			kvs_arena_destroy(a->ar[i]); /* closes a->arena[i] */
		else if (a->arena[i] >= 0)
			close(a->arena[i]);
	}
	memset(a->ar, 0, sizeof(a->ar));
	a->p = NULL;
}

/* The header against the geometry this cache would write: 0, or a reason. */
static int check_header(const kvs_cache *c, adopt *a, kvs_persist_report *r)
{
	persist_hdr want, h;
	struct stat st;
	int rc;

	if (fstat(a->meta, &st) < 0 || (uint64_t)st.st_size < PERSIST_HDR_BYTES) {
		cold(r, "the metadata memfd is shorter than a header");
		return -EINVAL;
	}
	/* Sealed as made (kvs_memfd_sealed): nobody can shrink it under us. */
	rc = fcntl(a->meta, F_GET_SEALS);
	if (rc < 0 || (rc & (F_SEAL_SHRINK | F_SEAL_GROW)) !=
		      (F_SEAL_SHRINK | F_SEAL_GROW)) {
		cold(r, "the metadata fd is not a memfd sealed against resizing");
		return -EPERM;
	}
	a->ino[PERSIST_MAX_DOMS] = st.st_ino;
	if ((rc = cache_persist_map(a->meta, (uint64_t)st.st_size, &a->p)) < 0) {
		cold(r, "cannot map the metadata memfd: %s", kvs_strerror(rc));
		return rc;
	}
	memcpy(&h, a->p->hdr, sizeof(h));
	cache_persist_geometry(c, &want);
	if (h.magic != PERSIST_MAGIC || h.version != PERSIST_VERSION) {
		cold(r, "metadata format %#llx version %u, this daemon reads "
		     "%#llx version %u", (unsigned long long)h.magic, h.version,
		     (unsigned long long)PERSIST_MAGIC, PERSIST_VERSION);
		return -EINVAL;
	}
	if (h.sum != XXH3_64bits(&h, offsetof(persist_hdr, sum))) {
		cold(r, "the metadata header fails its checksum");
		return -EINVAL;
	}
	if (memcmp(&h, &want, offsetof(persist_hdr, sum)) != 0 ||
	    (uint64_t)st.st_size != want.total_bytes) {
		cold(r, "the arenas were made for another geometry (host or "
		     "tenant size, page size, tenant arenas: %llu-byte arenas, "
		     "%u domains, %u-byte pages; this daemon's: %llu, %u, %u)",
		     (unsigned long long)h.dom_bytes, h.maxdoms, h.page_bytes,
		     (unsigned long long)want.dom_bytes, want.maxdoms,
		     want.page_bytes);
		return -EINVAL;
	}
	a->ndoms = h.ndoms;
	if (a->ndoms > want.maxdoms || (!c->by_uid && a->ndoms != 1)) {
		cold(r, "the metadata names %u domains", a->ndoms);
		return -EINVAL;
	}
	return 0;
}

static int check_arenas(const kvs_cache *c, adopt *a, kvs_persist_report *r)
{
	uint64_t bytes = kvs_arena_size(c->dom_bytes);
	struct stat st;
	int rc;

	for (uint32_t i = 0; i < a->ndoms; i++) {
		if (a->arena[i] < 0) {
			cold(r, "no fd named %s%u", KVS_PERSIST_ARENA_PREFIX, i);
			return -ENOENT;
		}
		if ((rc = kvs_arena_adopt(a->arena[i], bytes, &a->ar[i])) < 0) {
			cold(r, "arena %u cannot be adopted: %s", i,
			     kvs_strerror(rc));
			return rc;
		}
		if (fstat(a->arena[i], &st) < 0)
			return -errno;
		a->ino[i] = st.st_ino;
		/* Two domains over one memfd would share tenants' KV. */
		for (uint32_t j = 0; j < i; j++) {
			if (a->ino[j] == st.st_ino) {
				cold(r, "arena %u is the same file as another fd", i);
				return -EINVAL;
			}
		}
		if (a->ino[PERSIST_MAX_DOMS] == st.st_ino) {
			cold(r, "arena %u is the metadata's file", i);
			return -EINVAL;
		}
	}
	for (uint32_t i = a->ndoms; i < PERSIST_MAX_DOMS; i++) {
		if (a->arena[i] >= 0) {
			cold(r, "an fd for arena %u, which the metadata does "
			     "not name", i);
			return -EINVAL;
		}
	}
	return 0;
}

/* The checked fds in place of the fresh ones: from now on the cache's. */
static int take(kvs_cache *c, adopt *a)
{
	uint32_t d;
	int rc = 0;

	cache_pw_drain(c->pw); /* nothing of the old metadata is queued */
	cache_persist_unmap(c->persist);
	c->persist = a->p;
	a->p = NULL;
	a->meta = -1;
	if (!c->by_uid) {
		kvs_arena_destroy(c->doms[0].arena);
		c->doms[0].arena = c->arena = a->ar[0];
		a->ar[0] = NULL;
		a->arena[0] = -1;
		return 0;
	}
	for (uint32_t i = 0; i < a->ndoms; i++) {
		uint32_t uid = c->persist->hdr->dom_uid[i];

		if (rc == 0)
			rc = cache_dom_adopt(c, uid, a->ar[i], &d);
		else
			kvs_arena_destroy(a->ar[i]);
		a->ar[i] = NULL;
		a->arena[i] = -1;
	}
	return rc;
}

static int busy(const kvs_cache *c)
{
	for (uint32_t i = 0; i < c->nns; i++)
		if (!c->nss[i].gone)
			return 1;
	return kvs_table_count(c->table) > 0 || c->ndoms > (c->by_uid ? 0u : 1u);
}

static void report(const kvs_persist_report *r)
{
	static const char *const mode[] = { "cold start", "handed over",
					    "recovered after a crash" };

	if (r->mode == KVS_START_COLD) {
		if (r->reason[0])
			kvs_warn("persist: cold start: %s", r->reason);
		return;
	}
	kvs_info("persist: %s: %llu blocks kept, %llu dropped (%llu caught "
		 "writing or torn, %llu not yet verified, %llu failed their "
		 "checksum), %u namespaces, %u arenas, in %.1f ms", mode[r->mode],
		 (unsigned long long)r->blocks_kept,
		 (unsigned long long)r->blocks_dropped,
		 (unsigned long long)r->torn, (unsigned long long)r->unverified,
		 (unsigned long long)r->bad_sum,
		 r->namespaces, r->domains, (double)r->elapsed_ns / 1e6);
}

int kvs_persist_adopt(kvs_cache *c, kvs_named_fd *in, uint32_t n,
		      kvs_persist_report *r)
{
	struct timespec t0, t1;
	adopt a;
	int rc;

	memset(r, 0, sizeof(*r));
	memset(&a, 0, sizeof(a));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sort_fds(in, n, &a);
	if (busy(c)) {
		adopt_drop(&a);
		return -EBUSY;
	}
	if (n == 0)
		return 0;
	if (!c->persist)
		cold(r, "host tier persistence is off");
	else if (a.meta < 0)
		cold(r, "no fd named %s", KVS_PERSIST_META_NAME);
	if (r->reason[0] || check_header(c, &a, r) < 0 ||
	    check_arenas(c, &a, r) < 0) {
		adopt_drop(&a);
		report(r);
		return 0;
	}
	r->mode = a.p->hdr->state == PHS_CLEAN ? KVS_START_HANDED_OVER :
		  KVS_START_RECOVERED;
	r->domains = a.ndoms;
	if ((rc = take(c, &a)) == 0)
		rc = cache_persist_rebuild(c, r);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	r->elapsed_ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000ull +
			(uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec;
	report(r);
	return rc;
}
