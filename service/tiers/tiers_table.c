/* tiers_table.c - the daemon's table of tiers (see kvs_tiers_table.h). */
#include "kvs_tiers_table.h"

#include <inttypes.h>

#include "kvs_log.h"
#include "kvs_remote.h" /* struct kvs_remote_tls */
#include "kvs_remote_value.h" /* KVS_RVAL_V_* */
#include "kvs_types.h" /* kvs_strerror */
#include "tier_gpu.h"
#include "tier_remote.h"
#include "tier_ssd.h"

/* The SSD tier under --ssd-dir. */
static int open_ssd(const kvs_config *cfg, kvs_tier_mod **out)
{
	kvs_tier_ssd_config sc = {
		.dir = cfg->ssd_dir, .bytes = cfg->ssd_bytes,
		.segment_bytes = cfg->ssd_segment_bytes,
		.admit_hit = cfg->ssd_admit_hit,
		.write_through = cfg->ssd_write_through,
		.queue_depth = cfg->ssd_queue_depth,
		.error_retry_s = cfg->ssd_error_retry };

	if (!cfg->ssd_dir[0])
		return 0;
	return kvs_tier_ssd_open(&sc, out);
}

/* --gpu auto: the GPU tier only if it can be had. */
static int gpu_optional(const kvs_config *cfg)
{
	return cfg->gpu == KVS_GPU_AUTO;
}

/* The remote tier under --remote. */
static int open_remote(const kvs_config *cfg, kvs_tier_mod **out)
{
	struct kvs_remote_tls tls = {
		.ca_file = cfg->remote_tls_ca[0] ? cfg->remote_tls_ca : NULL,
		.cert_file = cfg->remote_tls_cert[0] ? cfg->remote_tls_cert : NULL,
		.key_file = cfg->remote_tls_key[0] ? cfg->remote_tls_key : NULL,
		.server_name = cfg->remote_tls_server_name[0]
				       ? cfg->remote_tls_server_name : NULL };
	kvs_tier_remote_config rc = {
		.seeds = cfg->remote_seeds, .auth_file = cfg->remote_auth_file,
		.secret_file = cfg->remote_secret_file,
		.mac_version = cfg->remote_mac_hmac ? KVS_RVAL_V_HMAC : KVS_RVAL_V_POLY1305,
		.write_through = cfg->remote_write_through,
		.timeout_ms = cfg->remote_timeout_ms,
		.pin_share = cfg->remote_pin_share,
		.tls = cfg->remote_tls ? &tls : NULL };

	if (!cfg->remote_seeds[0])
		return 0;
	return kvs_tier_remote_open(&rc, out);
}

/* The GPU tier per --gpu: a device that cannot be used is an error when
 * named, the tier off under auto. */
static int open_gpu(const kvs_config *cfg, kvs_tier_mod **out)
{
	kvs_tier_gpu_config gc = { .device = cfg->gpu, .bytes = cfg->gpu_bytes,
				   .page_bytes = cfg->page_bytes };
	uint32_t kind, device;
	uint64_t bytes;
	char why[256];
	int rc, fd;

	/* --tenant-arenas uid with --ssd-dir or --gpu N is refused by the
	 * configuration; the GPU tier's auto is off here (shared GPU and SSD
	 * tiers across domains are not built). */
	if (cfg->gpu == KVS_GPU_AUTO && cfg->tenant_arenas) {
		kvs_info("GPU tier off: not supported yet with --tenant-arenas uid");
		return 0;
	}
	if (cfg->gpu == KVS_GPU_OFF)
		return 0;
	rc = kvs_tier_gpu_open(&gc, out, why, sizeof(why));
	if (rc < 0 && cfg->gpu >= 0) {
		kvs_err("GPU tier: device %d cannot be used: %s", cfg->gpu, why);
		return rc;
	}
	if (rc < 0) {
		kvs_info("GPU tier off: %s", why);
		*out = NULL;
		return 0;
	}
	(*out)->ops->slot->map(*out, &fd, &bytes, &kind, &device);
	kvs_info("GPU tier on: %s device %u, %" PRIu64 " MiB%s",
		 kind == 2 ? "fake" : "CUDA", device, bytes >> 20,
		 kind == 2 ? " (KVS_GPU_FAKE=1: host memory, tests only)" : "");
	return 0;
}

/* The tiers, in the order they are opened. Store tiers are tried in this
 * order at host eviction: the remote tier first (it publishes a copy and
 * keeps nothing, so the SSD tier may keep the block too), and it learns
 * the namespaces the SSD tier restores. A store tier restores its blocks
 * when added, before any slot tier exists. */
static const struct {
	const char *name;
	/* 0 with *out NULL when the configuration leaves the tier off. */
	int (*open)(const kvs_config *cfg, kvs_tier_mod **out);
	/* Whether the tier is on only if it can be (--gpu auto): one that
	 * cannot be added is then left off, not an error. */
	int (*optional)(const kvs_config *cfg);
} tiers[] = {
	{ "remote", open_remote, NULL },
	{ "ssd", open_ssd, NULL },
	{ "gpu", open_gpu, gpu_optional },
};

int kvs_tiers_open(const kvs_config *cfg, kvs_cache *c)
{
	for (size_t i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
		kvs_tier_mod *t = NULL;
		int rc = tiers[i].open(cfg, &t);

		if (rc == 0 && t && (rc = kvs_cache_tier_add(c, t)) < 0)
			t->ops->close(t);
		if (rc < 0 && tiers[i].optional && tiers[i].optional(cfg)) {
			kvs_info("%s tier off: %s", tiers[i].name, kvs_strerror(rc));
			continue;
		}
		if (rc < 0) {
			kvs_err("%s tier: %s", tiers[i].name, kvs_strerror(rc));
			return rc;
		}
	}
	return 0;
}

/* The order of the stats text, which predates the open order above. */
static const kvs_stats_section *const sections[KVS_TIERS_SECTIONS] = {
	&kvs_tier_ssd_section,
	&kvs_tier_remote_section,
	&kvs_tier_gpu_section,
};

uint32_t kvs_tiers_stats(const kvs_cache *c,
			 kvs_stats_part out[KVS_TIERS_SECTIONS])
{
	for (uint32_t i = 0; i < KVS_TIERS_SECTIONS; i++) {
		const kvs_tier_mod *t = kvs_cache_tier(c, sections[i]->tier);

		out[i].sec = sections[i];
		out[i].vals = t ? t->counters : kvs_stats_zeros;
	}
	return KVS_TIERS_SECTIONS;
}
