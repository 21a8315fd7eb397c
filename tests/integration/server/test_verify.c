/*
 * test_verify - kvs_verify() and `kvsctl verify` against a daemon
 * with an SSD tier (64 KiB blocks, a 2 MiB host tier, 1 MiB segments, 8 MiB
 * of SSD), and one without.
 *  clean:    after publishing past the host tier, every block on SSD is
 *            checked and good; a worker connection is refused (-EPERM), an
 *            unknown namespace is -ENOENT.
 *  corrupt:  one payload byte of one record flipped in its segment file:
 *            `kvsctl verify --json` lists exactly that block (its hash,
 *            namespace, -EBADMSG), the rest ok, and exits 3; the block is
 *            dropped (tier_ssd.corrupt_blocks 1, one block fewer on SSD),
 *            so a second verify finds 0 failed; a lookup never returns it.
 *  gone:     a client that sends VERIFY and disconnects at once leaves the
 *            daemon serving, and the next verify answers.
 *  no tier:  a daemon without an SSD tier answers zeros with ssd_tier 0;
 *            kvsctl says so and exits 0.
 *  cli:      verify --help exits 0, a bad option 2.
 */
#include "harness.h"
#include "harness_client.h"
#include "harness_raw.h"
#include "harness_ssd.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvs_wire_admin.h"
#include "kvshare_admin.h"

#define CHAINS 16
#define LEN 4

static th_daemon d, plain;
static kvs_layout L;
static char ssd_dir[160];
static kvs_hash H[CHAINS][LEN];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	if (st == -1 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* Flip one payload byte of the first record of the first segment file that
 * has one; *h and *ns: the block it holds, as its header names it. */
static int corrupt_one(kvs_hash *h, uint32_t *ns)
{
	DIR *dir = opendir(ssd_dir);
	struct dirent *e;
	int done = 0;

	if (!dir)
		return -1;
	while (!done && (e = readdir(dir))) {
		char path[512];
		uint8_t sec[4096];
		int fd;

		if (strncmp(e->d_name, "seg-", 4) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", ssd_dir, e->d_name);
		fd = open(path, O_RDWR);
		if (fd < 0)
			continue;
		/* The first record sits right after the superblock. */
		if (pread(fd, sec, sizeof(sec), 4096) == sizeof(sec)) {
			uint32_t magic;
			uint8_t b;

			memcpy(&magic, sec, 4);
			if (magic == 0x4253564bu) {
				memcpy(ns, sec + 8, 4);
				memcpy(&h->lo, sec + 16, 8);
				memcpy(&h->hi, sec + 24, 8);
				if (pread(fd, &b, 1, 8192 + 100) == 1) {
					b ^= 0x5a;
					done = pwrite(fd, &b, 1, 8192 + 100) == 1 &&
					       fsync(fd) == 0;
				}
			}
		}
		close(fd);
	}
	closedir(dir);
	return done ? 0 : -1;
}

static int published(kvs_hash h)
{
	for (int i = 0; i < CHAINS; i++)
		for (int j = 0; j < LEN; j++)
			if (H[i][j].lo == h.lo && H[i][j].hi == h.hi)
				return i;
	return -1;
}

static void clean(kvs_client *ctl, kvs_client *w, int64_t *on_ssd)
{
	kvs_verify_result r;
	kvs_verify_failure *f;

	*on_ssd = th_stat_get(&d, "tier_ssd.blocks");
	CHECK_GT(*on_ssd, 0);
	CHECK_RC(kvs_verify(ctl, 0, 10, &r, &f), 0);
	CHECK_EQ(r.ssd_tier, 1);
	CHECK_EQ(r.checked, (uint64_t)*on_ssd);
	CHECK_EQ(r.ok, (uint64_t)*on_ssd);
	CHECK_EQ(r.failed, 0);
	CHECK_EQ(r.skipped, 0);
	CHECK_EQ(r.listed, 0);
	CHECK(f == NULL);
	/* namespace 1 is the only one: the same blocks */
	CHECK_RC(kvs_verify(ctl, 1, 10, &r, &f), 0);
	CHECK_EQ(r.checked, (uint64_t)*on_ssd);
	CHECK_RC(kvs_verify(ctl, 99, 10, &r, &f), -ENOENT);
	CHECK_RC(kvs_verify(w, 0, 10, &r, &f), -EPERM);
	CHECK_RC(kvs_verify(ctl, 0, KVS_VERIFY_FAILED_MAX + 1, &r, &f), -EINVAL);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.verified_blocks"), 2 * *on_ssd);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 0);
}

static void corrupt(kvs_client *ctl, kvs_client *w, int64_t on_ssd)
{
	const char *kvsctl = getenv("KVSCTL");
	kvs_verify_result r;
	kvs_verify_failure *f;
	kvs_block_info bi;
	kvs_hash bad;
	uint32_t ns = 0;
	char hex[33], out[512];
	int chain, rc;

	if (!CHECK_RC(corrupt_one(&bad, &ns), 0))
		return;
	kvs_hash_format(bad, hex);
	chain = published(bad);
	CHECK_GE(chain, 0);
	CHECK_EQ(ns, 1);
	snprintf(out, sizeof(out), "%s/verify.json", d.dir);
	if (kvsctl) {
		rc = sh("%s --socket %s verify --json > %s", kvsctl, d.socket, out);
		CHECK_EQ(rc, 3);
		CHECK_RC(sh("python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
				    "n=%" PRId64 "; "
				    "assert d[\"ssd_tier\"] is True, d; "
				    "assert d[\"checked\"]==n and d[\"ok\"]==n-1, d; "
				    "assert d[\"failed\"]==1 and d[\"skipped\"]==0, d; "
				    "f=d[\"failures\"]; assert len(f)==1, d; "
				    "assert f[0][\"hash\"]==\"%s\" and f[0][\"namespace\"]==1, d; "
				    "assert f[0][\"errno\"]==-74, d' %s",
				    on_ssd, hex, out), 0);
	} else {
		th_skip_part("KVSCTL not set: kvsctl verify --json on a corrupt "
			     "block (checked through the API instead)");
		CHECK_RC(kvs_verify(ctl, 0, 10, &r, &f), 0);
		CHECK_EQ(r.failed, 1);
		CHECK_EQ(r.listed, 1);
		CHECK(f && f[0].hash.lo == bad.lo && f[0].hash.hi == bad.hi &&
		      f[0].ns == 1 && f[0].error == -EBADMSG);
		free(f);
	}
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 1);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.blocks"), on_ssd - 1);

	/* Dropped: a second verify finds the rest good. */
	CHECK_RC(kvs_verify(ctl, 0, 10, &r, &f), 0);
	CHECK_EQ(r.checked, (uint64_t)on_ssd - 1);
	CHECK_EQ(r.ok, (uint64_t)on_ssd - 1);
	CHECK_EQ(r.failed, 0);
	CHECK(f == NULL);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.corrupt_blocks"), 1);
	/* Gone from the cache (or kept only as its children's parent). */
	rc = kvs_inspect(ctl, 0, bad, &bi);
	CHECK(rc == -ENOENT || (rc == 0 && bi.state == KVS_STATE_GHOST));
	/* A lookup of its chain stops before it and returns no bad bytes. */
	if (chain >= 0) {
		size_t nbad = 0;
		int hits = th_verify(w, H[chain], LEN, &nbad);

		CHECK_GE(hits, 0);
		CHECK_LT(hits, LEN);
		CHECK_EQ(nbad, 0);
	}
}

/* VERIFY sent on a raw connection that closes before the answer. */
static void gone(kvs_client *ctl)
{
	kvs_verify_result r;
	kvs_verify_failure *f;
	uint8_t req[KVS_WIRE_VERIFY_REQ_SIZE];
	kvs_wire_verify_req vr = { .ns = 0, .max_failed = 5 };
	int64_t before = th_stat_get(&d, "clients.connected");

	for (int i = 0; i < 3; i++) {
		int fd = th_raw_connect(&d);

		if (!CHECK_GE(fd, 0))
			return;
		kvs_wire_verify_req_encode(&vr, req, sizeof(req));
		CHECK_RC(th_raw_request(fd, KVS_OP_VERIFY, 1, req, sizeof(req)), 0);
		close(fd);
	}
	CHECK_RC(kvs_verify(ctl, 0, 10, &r, &f), 0);
	CHECK_EQ(r.failed, 0);
	CHECK_GT(r.ok, 0);
	CHECK(th_wait_stat(&d, "clients.connected", before, TH_WAIT_MS));
}

static void no_tier(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K", NULL };
	const char *kvsctl = getenv("KVSCTL");
	kvs_verify_result r = { .ssd_tier = 7, .checked = 7 };
	kvs_verify_failure *f;
	kvs_client *ctl;
	char out[256];

	th_daemon_up(&plain, args);
	ctl = th_connect(&plain, NULL);
	CHECK_RC(kvs_verify(ctl, 0, 10, &r, &f), 0);
	CHECK_EQ(r.ssd_tier, 0);
	CHECK_EQ(r.checked, 0);
	CHECK_EQ(r.ok, 0);
	CHECK_EQ(r.failed, 0);
	CHECK_EQ(r.skipped, 0);
	CHECK(f == NULL);
	kvs_close(ctl);
	if (!kvsctl) {
		th_skip_part("KVSCTL not set: kvsctl verify without an SSD tier, "
			     "its usage errors and --help");
		return;
	}
	snprintf(out, sizeof(out), "%s/verify.txt", plain.dir);
	CHECK_RC(sh("%s --socket %s verify > %s", kvsctl, plain.socket, out), 0);
	CHECK_RC(sh("grep -q 'no SSD tier' %s", out), 0);
	CHECK_RC(sh("%s --socket %s verify --json | grep -q '\"ssd_tier\":false'",
		    kvsctl, plain.socket), 0);
	CHECK_RC(sh("%s verify --help 2>&1 | grep -q 'usage: kvsctl.*verify'", kvsctl), 0);
	CHECK_RC(sh("%s verify --help >/dev/null 2>&1", kvsctl), 0);
	CHECK_RC(sh("%s --socket %s verify --max-failed 99999 >/dev/null 2>&1",
		    kvsctl, plain.socket), 2);
	CHECK_RC(sh("%s --socket %s verify extra >/dev/null 2>&1", kvsctl,
		    plain.socket), 2);
	CHECK_RC(sh("%s --socket %s/nothing.sock verify 2>&1 | "
		    "grep -q '^kvsctl: connect failed'", kvsctl, plain.dir), 0);
}

int main(void)
{
	static const char *args[] = { "--host-size", "2M", "--page-size", "64K",
				      "--ssd-dir", ssd_dir, "--ssd-segment", "1M",
				      "--ssd-size", "8M", NULL };
	kvs_client *w, *ctl;
	int64_t on_ssd = 0;

	th_init("test_verify");
	if (system("command -v python3 >/dev/null") != 0)
		th_fatal("python3 is required (scripts/deps.sh installs it) to "
			 "parse kvsctl --json");
	th_daemon_up_ssd(&d, args, ssd_dir, sizeof(ssd_dir));
	L = th_layout("verify-model", 64);
	w = th_connect(&d, &L);
	ctl = th_connect(&d, NULL);

	for (int i = 0; i < CHAINS; i++) {
		th_chain(&L, 1000 + (uint64_t)i, LEN, 0, 0, H[i]);
		CHECK_RC(th_publish(w, H[i], LEN, NULL), LEN);
	}
	CHECK(th_wait_stat(&d, "tier_ssd.writes_inflight", 0, TH_WAIT_MS));
	CHECK_GT(th_stat_get(&d, "tier_ssd.demotions"), 0);

	clean(ctl, w, &on_ssd);
	corrupt(ctl, w, on_ssd);
	gone(ctl);
	CHECK_EQ(th_stat_get(&d, "tier_ssd.enabled"), 1);
	kvs_close(ctl);
	kvs_close(w);
	no_tier();
	return th_finish();
}
