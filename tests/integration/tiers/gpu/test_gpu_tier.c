/*
 * test_gpu_tier - the daemon's GPU tier, end to end, with real processes.
 *
 * Engines (each one a daemon of its own):
 *  - fake: KVS_GPU_FAKE=1, the CPU twin (a memfd "device");
 *  - stub: --gpu 0 with KVS_CUDA_DRIVER=<tests' stub libcuda>: the CUDA
 *    engine's code (cuMemCreate, export, import, reserve, map, access) on
 *    host memory, in the daemon and in both clients;
 *  - real: KVS_TEST_GPU_REAL=1 (tests/gpu/run.sh on a GPU machine): --gpu 0
 *    with the real driver. Only this one says anything about a GPU.
 * For each: a GPU writer process publishes a chain into the GPU tier; a
 * second GPU process imports the exported arena and reads identical bytes;
 * a host-only client does not see GPU blocks; more chains than the GPU tier
 * holds demote the oldest blocks to the host tier, and the first chain still
 * reads back whole and identical (prefix closure across tiers).
 * Without the twin: --gpu 0 exits 1 with a clear message, --gpu auto logs
 * "GPU tier off: ..." and serves as before (skipped where a driver exists).
 */
#include "harness.h"
#include "harness_child.h"
#include "harness_client.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define BT 256      /* 2 layers x 2 x 256 x 2 heads x 64 x fp16 = 256 KiB */
#define CHAIN 8
#define MAX_CHAINS 64 /* more chains than the GPU tier holds (4 MiB: 2) */

static th_daemon d;
static kvs_layout L;
static int want_kind; /* kvs_gpu_info()'s answer: 1 CUDA, 2 fake */

static kvs_client *connect_gpu(void)
{
	kvs_client *c = NULL;
	int rc = kvs_connect_flags(d.socket, &L, KVS_CONNECT_GPU, &c);

	if (rc)
		th_fatal("kvs_connect_flags: %s", kvs_strerror(rc));
	return c;
}

/* Reserve and write a chain through kvs_block_write (a device copy for GPU
 * blocks), commit. Returns how many NEW blocks were in the GPU tier. */
static int publish(kvs_client *c, const kvs_hash *h, size_t n)
{
	kvs_block b[CHAIN];
	uint64_t bb = kvs_block_bytes(c);
	uint8_t *buf = malloc(bb);
	kvs_lease lease = 0;
	int nnew = kvs_reserve(c, h, n, &lease, b), gpu = 0;

	CHECK(buf != NULL);
	if (!CHECK(nnew >= 0) || !buf) {
		free(buf);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if (b[i].status != KVS_BLOCK_NEW)
			continue;
		gpu += b[i].tier == KVS_TIER_GPU;
		th_pattern_fill(buf, bb, h[i], 5);
		CHECK_RC(kvs_block_write(c, &b[i], buf, bb), 0);
	}
	if (lease)
		CHECK_RC(kvs_commit(c, lease), nnew);
	free(buf);
	return gpu;
}

/* Look a chain up, check every hit's bytes; returns hits, *ngpu of them in
 * the GPU tier. */
static int verify(kvs_client *c, const kvs_hash *h, size_t n, int *ngpu)
{
	kvs_block b[CHAIN];
	uint64_t bb = kvs_block_bytes(c);
	uint8_t *buf = malloc(bb);
	kvs_lease lease = 0;
	int hits = kvs_lookup(c, h, n, &lease, b);
	void *base = NULL;
	uint64_t gbytes = 0;

	*ngpu = 0;
	kvs_gpu_info(c, &base, &gbytes, NULL);
	for (int i = 0; i < hits && buf; i++) {
		char *p = kvs_block_ptr(c, &b[i]);

		*ngpu += b[i].tier == KVS_TIER_GPU;
		CHECK(p != NULL);
		/* A GPU block's pointer is in this process's GPU mapping. */
		if (b[i].tier == KVS_TIER_GPU)
			CHECK(p == (char *)base + b[i].offset &&
			      b[i].offset + bb <= gbytes);
		memset(buf, 0, bb);
		CHECK_RC(kvs_block_read(c, &b[i], buf, bb), 0);
		CHECK_EQ(th_pattern_check(buf, bb, h[i], 5), -1);
	}
	if (lease)
		CHECK_RC(kvs_release(c, lease), 0);
	free(buf);
	return hits;
}

static int writer(void *arg, int fd)
{
	kvs_hash h[CHAIN];
	kvs_client *c = connect_gpu();

	CHECK_EQ(kvs_gpu_info(c, NULL, NULL, NULL), want_kind);
	th_chain(&L, 1, CHAIN, 0, 0, h);
	CHECK_EQ(publish(c, h, CHAIN), CHAIN); /* all in the GPU tier */
	kvs_close(c);
	return 0;
}

static int reader(void *arg, int fd)
{
	kvs_hash h[CHAIN];
	kvs_client *c = connect_gpu();
	int ngpu = 0;

	CHECK_EQ(kvs_gpu_info(c, NULL, NULL, NULL), want_kind);
	th_chain(&L, 1, CHAIN, 0, 0, h);
	CHECK_EQ(verify(c, h, CHAIN, &ngpu), CHAIN);
	CHECK_EQ(ngpu, CHAIN);
	kvs_close(c);
	return 0;
}

static void scenario(const char *name, const char *const *args)
{
	kvs_hash h[CHAIN];
	kvs_client *c, *host;
	int ngpu = 0, hits, chains;
	int64_t gbytes;

	th_note("engine %s", name);
	th_daemon_up(&d, args);
	CHECK_EQ(th_stat_get(&d, "tier_gpu.enabled"), 1);
	CHECK_EQ(th_stat_get(&d, "tier_gpu.engine"), want_kind);
	/* 3M rounded up to the granularity: 4M where it is 2M (NVIDIA GPUs
	 * today, the twin, the stub). */
	gbytes = th_stat_get(&d, "tier_gpu.bytes_total");
	CHECK_GE(gbytes, 3 << 20);
	CHECK_EQ(gbytes % (2 << 20), 0);

	/* Two processes share a block through the exported arena. */
	CHECK_RC(th_run_child(writer, NULL, 30000), 0);
	CHECK_RC(th_run_child(reader, NULL, 30000), 0);
	CHECK_EQ(th_stat_get(&d, "tier_gpu.blocks"), CHAIN);
	CHECK_EQ(th_stat_get(&d, "tier_gpu.lookup_hits"), CHAIN);

	/* A host-only client gets no GPU arena and no GPU hits. */
	host = th_connect(&d, &L);
	CHECK_EQ(kvs_gpu_info(host, NULL, NULL, NULL), 0);
	th_chain(&L, 1, CHAIN, 0, 0, h);
	CHECK_EQ(verify(host, h, CHAIN, &ngpu), 0);

	/* Fill the GPU tier past its size: the oldest blocks go to host. */
	c = connect_gpu();
	chains = (int)(gbytes / (CHAIN * (int64_t)kvs_block_bytes(c))) * 2 + 2;
	if (chains > MAX_CHAINS)
		chains = MAX_CHAINS;
	for (int i = 2; i <= chains; i++) {
		th_chain(&L, (uint64_t)i, CHAIN, 0, 0, h);
		CHECK_GE(publish(c, h, CHAIN), 1);
	}
	CHECK_GT(th_stat_get(&d, "tier_gpu.demotions"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_gpu.demote_dropped"), 0);
	CHECK_EQ(th_stat_get(&d, "tier_gpu.demoted_bytes"),
		 th_stat_get(&d, "tier_gpu.demotions") * (int64_t)kvs_block_bytes(c));
	/* Every chain whole and identical, across the two tiers; the
	 * oldest one demoted (entirely: its leaves went first, then it was
	 * a leaf in the GPU tier itself). */
	for (int i = 1; i <= chains; i++) {
		th_chain(&L, (uint64_t)i, CHAIN, 0, 0, h);
		hits = verify(c, h, CHAIN, &ngpu);
		CHECK_EQ(hits, CHAIN);
		if (i == 1)
			CHECK_EQ(ngpu, 0);
	}
	/* ... so now the host-only client sees it too. */
	th_chain(&L, 1, CHAIN, 0, 0, h);
	CHECK_EQ(verify(host, h, CHAIN, &ngpu), CHAIN);
	kvs_close(c);
	kvs_close(host);
	CHECK_RC(th_daemon_stop(&d, SIGTERM), 0);
	th_daemon_destroy(&d);
}


static int dlopen_libcuda_absent(void)
{
	void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (dl)
		dlclose(dl);
	return dl == NULL;
}

/* No device, no twin: --gpu 0 is an error, auto is a log line. */
static void no_device(void)
{
	kvs_hash h[CHAIN];
	kvs_client *c;
	int ngpu;

	unsetenv("KVS_GPU_FAKE");
	unsetenv("KVS_CUDA_DRIVER");
	CHECK_RC(th_daemon_init(&d, TH_ARGS("--gpu", "0", "--host-size", "16M")), 0);
	CHECK_RC(th_daemon_start(&d), -ECHILD);
	CHECK_EQ(d.last_status, 1);
	CHECK(th_log_contains(&d, "GPU tier: device 0 cannot be used: libcuda.so.1 not found"));
	th_daemon_destroy(&d);

	th_daemon_up(&d, TH_ARGS("--host-size", "16M"));
	CHECK(th_log_contains(&d, "GPU tier off: libcuda.so.1 not found"));
	CHECK_EQ(th_stat_get(&d, "tier_gpu.enabled"), 0);
	/* A client asking for the GPU gets the host tier, as before. */
	c = connect_gpu();
	CHECK_EQ(kvs_gpu_info(c, NULL, NULL, NULL), 0);
	th_chain(&L, 9, CHAIN, 0, 0, h);
	CHECK_EQ(publish(c, h, CHAIN), 0);
	CHECK_EQ(verify(c, h, CHAIN, &ngpu), CHAIN);
	CHECK_EQ(ngpu, 0);
	kvs_close(c);
	CHECK_RC(th_daemon_stop(&d, SIGTERM), 0);
	th_daemon_destroy(&d);
}

int main(void)
{
	const char *stub = getenv("KVS_STUB_LIBCUDA");
	static const char *const args[] = { "--gpu", "0", "--gpu-size", "3M",
					    "--host-size", "64M", NULL };

	th_init("test_gpu_tier");
	L = th_layout("gpu-tier-model", BT);
	if (th_env_flag("KVS_TEST_GPU_REAL")) {
		want_kind = 1;
		scenario("real CUDA driver", args);
		return th_finish();
	}
	setenv("KVS_GPU_FAKE", "1", 1);
	want_kind = 2;
	scenario("fake device (KVS_GPU_FAKE=1)", args);
	unsetenv("KVS_GPU_FAKE");
	if (stub && *stub) {
		setenv("KVS_CUDA_DRIVER", stub, 1);
		want_kind = 1;
		scenario("CUDA engine on the stub driver", args);
		unsetenv("KVS_CUDA_DRIVER");
	} else {
		th_skip_part("KVS_STUB_LIBCUDA unset (ctest sets it): the CUDA "
			     "engine on the stub driver");
	}
	if (dlopen_libcuda_absent())
		no_device();
	else
		th_skip_part("libcuda.so.1 present: the daemon's behaviour "
			     "without a driver (GPU tier off, serving as before)");
	return th_finish();
}
