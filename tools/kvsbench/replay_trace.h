/*
 * replay_trace.h - a KV-cache workload trace in the Mooncake FAST'25 format
 * (JSONL: one object per request with input_length and hash_ids), as
 * kvsbench replay and its offline models read it.
 */
#ifndef KVS_REPLAY_TRACE_H
#define KVS_REPLAY_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct replay_req {
	uint64_t first;  /* index of its first id in replay_trace.ids */
	uint32_t n;      /* ids */
	uint64_t input;  /* input_length */
} replay_req;

typedef struct replay_trace {
	replay_req *reqs;
	size_t nreqs, capreqs;
	uint64_t *ids;
	size_t nids, capids;
	uint32_t max_n;
} replay_trace;

/*
 * replay_trace_load - parse the trace at @path into *t: a JSON object per
 * line of numbers, strings and arrays (all this format has); anything else
 * is an error naming the line, on stderr.
 * Errors: -errno (open, read), -EINVAL (not a trace record, more than
 *         KVS_MAX_HASHES ids in a request, no records), -ENOMEM.
 * Ownership: *t until replay_trace_free(); nothing to free on an error.
 * Thread: any.
 */
int replay_trace_load(const char *path, replay_trace *t);
void replay_trace_free(replay_trace *t);

#endif /* KVS_REPLAY_TRACE_H */
