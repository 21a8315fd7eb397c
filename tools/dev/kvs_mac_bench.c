/*
 * kvs-mac-bench - CPU time of the remote tier's value MACs and of the
 * candidates for them, per block size (docs/benchmarks.md, "The value MAC").
 * Not installed.
 *
 *   kvs-mac-bench [--size BYTES[,BYTES...]] [--count N] [--reps N]
 *
 * For each size, N MACs of one random payload, best of --reps, as thread
 * CPU time (so another process on the machine slows a rep, never shortens
 * it): the value format's seal and verify in both versions
 * (storage/remote/kvs_remote_value.h: "hmac" = version 2, "poly1305" =
 * version 3, the one-time key's HMAC included), then what was weighed
 * against them through OpenSSL's EVP_MAC: GMAC under AES-128 and AES-256
 * with a fresh IV per value, and unkeyed XXH3-64 (a checksum, no MAC: the
 * floor). Prints one line per MAC: name, size, ms per MiB, GB/s.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <xxhash.h>

#include "kvs_remote_value.h"

typedef struct bench {
	kvs_rval_mac *mac;
	kvs_rval_info info;
	uint8_t *payload;
	size_t size;
	uint8_t hdr[KVS_RVAL_HDR_BYTES];
	EVP_MAC *gmac;
	const char *cipher; /* for the GMAC runs */
	int fail;
} bench;

typedef void (*mac_fn)(bench *b);

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void do_seal(bench *b)
{
	b->fail |= kvs_rval_seal(b->mac, &b->info, b->payload, b->hdr) != 0;
}

static void do_verify(bench *b)
{
	b->fail |= kvs_rval_verify(b->mac, b->hdr, b->payload, b->size, &b->info, NULL) != 0;
}

/* GMAC as a value MAC would use it: a context per value, a random IV. */
static void do_gmac(bench *b)
{
	static const uint8_t key[32] = { 1, 2, 3 };
	uint8_t iv[12], tag[16];
	char cipher[32];
	size_t n = 0;
	EVP_MAC_CTX *c = EVP_MAC_CTX_new(b->gmac);
	OSSL_PARAM p[3];

	snprintf(cipher, sizeof(cipher), "%s", b->cipher);
	p[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, cipher, 0);
	p[1] = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, iv, sizeof(iv));
	p[2] = OSSL_PARAM_construct_end();
	b->fail |= RAND_bytes(iv, sizeof(iv)) != 1;
	b->fail |= !c || !EVP_MAC_init(c, key, strstr(cipher, "256") ? 32 : 16, p) ||
		   !EVP_MAC_update(c, b->hdr, 80) || !EVP_MAC_update(c, b->payload, b->size) ||
		   !EVP_MAC_final(c, tag, &n, sizeof(tag));
	EVP_MAC_CTX_free(c);
}

static void do_xxh3(bench *b)
{
	b->hdr[0] ^= (uint8_t)XXH3_64bits(b->payload, b->size);
}

static void run(bench *b, const char *name, mac_fn fn, int count, int reps)
{
	double best = 1e30, mib = (double)b->size / (1 << 20);

	fn(b); /* warm: tables, the page cache of the payload */
	for (int r = 0; r < reps; r++) {
		double t0 = cpu_now();

		for (int i = 0; i < count; i++)
			fn(b);
		if (cpu_now() - t0 < best)
			best = cpu_now() - t0;
	}
	best /= count;
	printf("%-16s %9zu  %.3f ms/MiB  %5.2f GB/s%s\n", name, b->size, best * 1e3 / mib,
	       (double)b->size / best / 1e9, b->fail ? "  FAILED" : "");
	fflush(stdout);
}

static void one_size(bench *b, size_t size, int count, int reps)
{
	b->size = size;
	b->info = (kvs_rval_info){ .block_bytes = size, .ns_fp = 0x1234567890abcdefull,
				   .hash = { 1, 2 }, .parent = { 3, 4 } };
	b->payload = malloc(size);
	if (!b->payload) {
		b->fail = 1;
		return;
	}
	RAND_bytes(b->payload, (int)size);
	kvs_rval_mac_set_version(b->mac, KVS_RVAL_V_HMAC);
	run(b, "hmac seal", do_seal, count, reps);
	run(b, "hmac verify", do_verify, count, reps);
	kvs_rval_mac_set_version(b->mac, KVS_RVAL_V_POLY1305);
	run(b, "poly1305 seal", do_seal, count, reps);
	run(b, "poly1305 verify", do_verify, count, reps);
	b->cipher = "AES-128-GCM";
	run(b, "gmac-aes128", do_gmac, count, reps);
	b->cipher = "AES-256-GCM";
	run(b, "gmac-aes256", do_gmac, count, reps);
	run(b, "xxh3 (no MAC)", do_xxh3, count, reps);
	free(b->payload);
}

static void usage(void)
{
	fprintf(stderr, "usage: kvs-mac-bench [--size BYTES[,BYTES...]] [--count N] [--reps N]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' }, { "count", required_argument, NULL, 'n' },
		{ "reps", required_argument, NULL, 'r' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 } };
	const char *sizes = "1048576,2097152";
	int count = 100, reps = 5, c;
	bench b = { 0 };
	char *list, *tok, *save = NULL;

	while ((c = getopt_long(argc, argv, "s:n:r:h", opts, NULL)) != -1) {
		if (c == 's')
			sizes = optarg;
		else if (c == 'n')
			count = atoi(optarg);
		else if (c == 'r')
			reps = atoi(optarg);
		else {
			usage();
			return c == 'h' ? 0 : 2;
		}
	}
	if (count < 1 || reps < 1) {
		usage();
		return 2;
	}
	b.gmac = EVP_MAC_fetch(NULL, "GMAC", NULL);
	if (!b.gmac || kvs_rval_mac_create("0123456789abcdef0123456789abcdef", 32, &b.mac) < 0) {
		fprintf(stderr, "kvs-mac-bench: OpenSSL lacks a MAC\n");
		return 1;
	}
	list = strdup(sizes);
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t size = strtoull(tok, NULL, 0);

		if (size == 0 || size > (1ull << 30)) {
			fprintf(stderr, "kvs-mac-bench: bad --size %s\n", tok);
			free(list);
			return 2;
		}
		one_size(&b, size, count, reps);
	}
	free(list);
	kvs_rval_mac_free(b.mac);
	EVP_MAC_free(b.gmac);
	return b.fail ? 1 : 0;
}
