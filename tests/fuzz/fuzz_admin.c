/*
 * fuzz_admin - libFuzzer target for the operator messages' codec
 * (proto/wire_admin.c): LIST request, header and namespace entries,
 * INSPECT request and reply, EVICT request and reply, PIN/UNPIN request,
 * EVENT messages and VERIFY request and reply.
 *
 * As fuzz_wire: the input is read as a message (24-byte header, payload) and
 * every decoder runs on the payload after the header, on the header's own
 * `len` bytes of it, and on the whole input, each in a buffer of its own size
 * so AddressSanitizer sees a read past the end. Whatever decodes must stay in
 * the documented ranges and encode back to the same bytes; an encoder given
 * one byte less room must refuse (-ENOBUFS), never overrun. A mismatch aborts.
 *
 * Build and run: tests/fuzz/run.sh. Without clang, tests/fuzz/replay.c turns
 * this file into a program that replays the seed corpus.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_wire.h"
#include "kvs_wire_admin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, const char *why)
{
	fprintf(stderr, "fuzz_admin: %s: %s\n", what, why);
	abort();
}

/* The encoder answered @rc for what decoded from the @n bytes at @in, and
 * wrote @out: the same length and bytes. */
static void same(const char *what, int rc, const uint8_t *in, size_t n,
		 const uint8_t *out)
{
	size_t i = 0;

	if (rc < 0 || (size_t)rc != n) {
		fprintf(stderr, "fuzz_admin: %s: decoded %zu bytes, the encoder "
			"answers %d\n", what, n, rc);
		abort();
	}
	while (i < n && in[i] == out[i])
		i++;
	if (i < n) {
		fprintf(stderr, "fuzz_admin: %s: re-encoding gives other bytes "
			"(first difference at byte %zu of %zu)\n", what, i, n);
		abort();
	}
}

static void short_refused(const char *what, int rc)
{
	if (rc != -ENOBUFS)
		die(what, "an encoder given one byte too few did not say -ENOBUFS");
}

static void check_list_req(const uint8_t *p, size_t n)
{
	kvs_wire_list_req r;
	uint8_t out[16];

	if (kvs_wire_list_req_decode(p, n, &r) != 0)
		return;
	if (r.top > KVS_WIRE_LIST_TOP_MAX)
		die("list request", "top over the limit accepted");
	same("list request", kvs_wire_list_req_encode(&r, out, sizeof(out)), p, n, out);
	short_refused("list request", kvs_wire_list_req_encode(&r, out, n - 1));
}

/* A LIST reply: the header, then as many namespace entries as decode. */
static void check_list_reply(const uint8_t *p, size_t n)
{
	static uint8_t out[KVS_WIRE_NS_FIXED + 2 * KVS_NAME_MAX +
			   KVS_WIRE_LIST_TOP_MAX * KVS_WIRE_PREFIX_SIZE];
	uint32_t count;
	uint64_t next;
	size_t off = 8;

	if (kvs_wire_list_page_decode(p, n, &count, &next) == 0) {
		/* A page's header: 16 bytes, then the same entries. */
		same("list page", kvs_wire_list_page_encode(count, next, out, 16),
		     p, 16, out);
		short_refused("list page", kvs_wire_list_page_encode(count, next, out, 15));
		off = 16;
	} else if (kvs_wire_list_hdr_decode(p, n, &count) != 0) {
		return;
	} else {
		same("list header", kvs_wire_list_hdr_encode(count, out, 8), p, 8, out);
	}
	for (uint32_t i = 0; i < count && off < n; i++) {
		kvs_wire_prefix top[KVS_WIRE_LIST_TOP_MAX];
		kvs_wire_ns e;
		size_t used;

		if (kvs_wire_ns_decode(p + off, n - off, &e, &used) != 0)
			return;
		if (used > n - off || used < KVS_WIRE_NS_FIXED ||
		    e.ntop > KVS_WIRE_LIST_TOP_MAX || e.model_len > KVS_NAME_MAX ||
		    e.adapter_len > KVS_NAME_MAX)
			die("namespace", "decoded past its limits");
		if (e.model != (const char *)p + off + KVS_WIRE_NS_FIXED ||
		    e.top + (size_t)e.ntop * KVS_WIRE_PREFIX_SIZE != p + off + used)
			die("namespace", "fields do not lie inside the entry");
		for (uint32_t j = 0; j < e.ntop; j++)
			top[j] = kvs_wire_prefix_at(e.top, j);
		same("namespace", kvs_wire_ns_encode(&e, top, out, sizeof(out)),
		     p + off, used, out);
		short_refused("namespace", kvs_wire_ns_encode(&e, top, out, used - 1));
		off += used;
	}
}

static void check_inspect(const uint8_t *p, size_t n)
{
	kvs_wire_inspect_req r;
	kvs_wire_block_info bi;
	uint8_t out[KVS_WIRE_BLOCK_INFO_SIZE];

	if (kvs_wire_inspect_req_decode(p, n, &r) == 0) {
		same("inspect request", kvs_wire_inspect_req_encode(&r, out, sizeof(out)),
		     p, n, out);
		short_refused("inspect request", kvs_wire_inspect_req_encode(&r, out, n - 1));
	}
	if (kvs_wire_block_info_decode(p, n, &bi) == 0) {
		/* docs/protocol.md: state 1 writing, 2 ready, 3 ghost; a tier. */
		if (bi.state < 1 || bi.state > 3)
			die("block info", "a state out of 1..3 accepted");
		if (bi.tier > KVS_TIER_SSD)
			die("block info", "an unknown tier accepted");
		same("block info", kvs_wire_block_info_encode(&bi, out, sizeof(out)),
		     p, n, out);
		short_refused("block info", kvs_wire_block_info_encode(&bi, out, n - 1));
	}
}

static void check_evict(const uint8_t *p, size_t n)
{
	kvs_wire_evict_req r;
	kvs_wire_evict_reply rep;
	uint8_t out[KVS_WIRE_EVICT_REQ_SIZE];

	if (kvs_wire_evict_req_decode(p, n, &r) == 0) {
		if (r.scope < KVS_EVICT_NAMESPACE || r.scope > KVS_EVICT_ALL ||
		    (r.scope == KVS_EVICT_NAMESPACE && r.ns == 0))
			die("evict request", "a scope the daemon cannot serve accepted");
		same("evict request", kvs_wire_evict_req_encode(&r, out, sizeof(out)),
		     p, n, out);
		short_refused("evict request", kvs_wire_evict_req_encode(&r, out, n - 1));
	}
	if (kvs_wire_evict_reply_decode(p, n, &rep) == 0) {
		same("evict reply", kvs_wire_evict_reply_encode(&rep, out, sizeof(out)),
		     p, n, out);
		short_refused("evict reply", kvs_wire_evict_reply_encode(&rep, out, n - 1));
	}
}

static void check_pin(const uint8_t *p, size_t n)
{
	kvs_wire_hashes w;
	kvs_hash *hs;
	uint8_t *out;
	uint32_t ns;

	if (kvs_wire_pin_req_decode(p, n, &ns, &w) != 0)
		return;
	if (w.count > KVS_MAX_HASHES || w.hashes != p + 12 ||
	    n != 12 + (size_t)w.count * KVS_WIRE_HASH_SIZE)
		die("pin request", "the hash list does not fill the payload");
	hs = malloc((w.count ? w.count : 1) * sizeof(*hs));
	out = malloc(n);
	if (!hs || !out)
		abort();
	for (uint32_t i = 0; i < w.count; i++)
		hs[i] = kvs_wire_hash_at(w.hashes, i);
	same("pin request", kvs_wire_pin_req_encode(ns, hs, w.count, out, n), p, n, out);
	short_refused("pin request", kvs_wire_pin_req_encode(ns, hs, w.count, out, n - 1));
	free(hs);
	free(out);
}

static void check_events(const uint8_t *p, size_t n)
{
	kvs_wire_events w;
	uint8_t *out;

	if (kvs_wire_events_decode(p, n, &w) != 0)
		return;
	if (w.count > KVS_WIRE_EVENTS_MAX || w.events != p + 16 ||
	    n != 16 + (size_t)w.count * KVS_WIRE_EVENT_SIZE)
		die("events", "the events do not fill the payload");
	out = malloc(n);
	if (!out)
		abort();
	if (kvs_wire_events_hdr_encode(w.count, w.dropped, out, 16) != 16)
		die("events", "the header does not encode");
	short_refused("events header", kvs_wire_events_hdr_encode(w.count, w.dropped,
								  out, 15));
	for (uint32_t i = 0; i < w.count; i++) {
		kvs_wire_event e = kvs_wire_event_at(w.events, i);
		uint8_t *q = out + 16 + (size_t)i * KVS_WIRE_EVENT_SIZE;

		if (e.kind < KVS_EVENT_STORED || e.kind > KVS_EVENT_FLUSHED)
			die("events", "an unknown kind accepted");
		if (kvs_wire_event_encode(&e, q, KVS_WIRE_EVENT_SIZE) != KVS_WIRE_EVENT_SIZE)
			die("events", "an event does not encode");
		short_refused("event", kvs_wire_event_encode(&e, q, KVS_WIRE_EVENT_SIZE - 1));
	}
	same("events", (int)n, p, n, out);
	free(out);
}

static void check_verify(const uint8_t *p, size_t n)
{
	kvs_wire_verify_req r;
	kvs_wire_verify_reply rep;
	kvs_wire_verify_fail *fs;
	uint8_t out[KVS_WIRE_VERIFY_REQ_SIZE], *o;

	if (kvs_wire_verify_req_decode(p, n, &r) == 0) {
		if (r.max_failed > KVS_WIRE_VERIFY_FAILED_MAX)
			die("verify request", "max_failed over the limit accepted");
		same("verify request", kvs_wire_verify_req_encode(&r, out, sizeof(out)),
		     p, n, out);
		short_refused("verify request", kvs_wire_verify_req_encode(&r, out, n - 1));
	}
	if (kvs_wire_verify_reply_decode(p, n, &rep) != 0)
		return;
	if (rep.count > KVS_WIRE_VERIFY_FAILED_MAX || rep.count > rep.failed ||
	    rep.checked != rep.ok + rep.failed || rep.fails != p + 40 ||
	    n != 40 + (size_t)rep.count * KVS_WIRE_VERIFY_FAIL_SIZE)
		die("verify reply", "counts that do not add up accepted");
	fs = malloc((rep.count ? rep.count : 1) * sizeof(*fs));
	o = malloc(n);
	if (!fs || !o)
		abort();
	for (uint32_t i = 0; i < rep.count; i++)
		fs[i] = kvs_wire_verify_fail_at(rep.fails, i);
	same("verify reply", kvs_wire_verify_reply_encode(&rep, fs, o, n), p, n, o);
	short_refused("verify reply", kvs_wire_verify_reply_encode(&rep, fs, o, n - 1));
	free(fs);
	free(o);
}

static void check_payload(const uint8_t *src, size_t n)
{
	uint8_t *p = malloc(n ? n : 1);

	if (!p)
		abort();
	if (n)
		memcpy(p, src, n);
	check_list_req(p, n);
	check_list_reply(p, n);
	check_inspect(p, n);
	check_evict(p, n);
	check_pin(p, n);
	check_events(p, n);
	check_verify(p, n);
	free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kvs_wire_hdr h;
	int rc = kvs_wire_hdr_decode(data, size, KVS_WIRE_MAX_PAYLOAD, &h);

	check_payload(data, size);
	if (size >= KVS_WIRE_HDR_SIZE) {
		size_t rest = size - KVS_WIRE_HDR_SIZE;

		check_payload(data + KVS_WIRE_HDR_SIZE, rest);
		if (rc == 0 && h.len < rest)
			check_payload(data + KVS_WIRE_HDR_SIZE, h.len);
	}
	return 0;
}
