/*
 * harness_ssd.h - the integration-test harness: daemons with an SSD tier, and
 * the checks the SSD tests share. See harness.h.
 *
 * Thread: single-threaded tests only.
 */
#ifndef TH_HARNESS_SSD_H
#define TH_HARNESS_SSD_H

#include "harness_client.h"

/* ---- the SSD tier ----------------------------------------------------------- */

/* th_verify_chains - th_verify() of @chains chains of @len hashes each,
 * stored one after the other at @h: total hits, and *bad the blocks whose
 * bytes differ. -1 (and a failed check) when a lookup fails. */
int th_verify_chains(kvs_client *c, const kvs_hash *h, size_t chains,
		     size_t len, size_t *bad);

/* th_daemon_up_ssd - th_daemon_up() for a daemon with an SSD tier: @args
 * name @ssd_dir (a buffer of @cap bytes), which is set to DIR/ssd inside the
 * daemon's temp dir and created before the daemon starts. */
void th_daemon_up_ssd(th_daemon *d, const char *const *args, char *ssd_dir,
		      size_t cap);

/* th_ssd_off_checks - after a fault turned a daemon's SSD demotion off
 * (tier_ssd.enabled 0): the @n published chains of 4 blocks at @h still read
 * back right (no wrong byte, some promoted from SSD, nothing corrupt), and
 * @fresh new chains (seeds @seed + i, stored at h[n..n+fresh)) publish and
 * hit from RAM with no further SSD write. @what names the case in the log. */
void th_ssd_off_checks(th_daemon *d, kvs_client *c, const kvs_layout *l,
		       kvs_hash (*h)[4], int n, int fresh, uint64_t seed,
		       const char *what);

#endif /* TH_HARNESS_SSD_H */
