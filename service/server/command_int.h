/*
 * command_int.h - what command.c (the table, dispatch, the workers'
 * requests) and command_admin.c (who may do what, the operator commands)
 * share: a request's decoded payload and the handlers the table names.
 */
#ifndef KVS_COMMAND_INT_H
#define KVS_COMMAND_INT_H

#include "server_int.h"

#include "kvs_cache_admin.h"
#include "kvs_fast.h"
#include "kvs_kvevents.h"
#include "kvs_wire_admin.h"

/* A request's payload, decoded by its command's decode (one member each). */
typedef union request {
	kvs_wire_hello hello;
	kvs_wire_hashes hashes; /* lookup, reserve */
	uint64_t lease;         /* commit, abort, release */
	kvs_wire_list_req list;
	kvs_wire_inspect_req inspect;
	kvs_wire_evict_req evict;
	struct {
		uint32_t ns;
		kvs_wire_hashes hashes;
	} pin;                  /* pin, unpin */
	kvs_wire_verify_req verify;
	kvs_engine_report report;
	uint32_t fast_flags;    /* fastattach */
	struct {
		uint32_t version, flags;
	} handover;
	kvs_wire_describe describe;
} request;

/* scope_request - keep a worker's @rq (of @opcode) to its domain: 0, or
 * KVS_E_PERM for what lies outside it (an operator's is left as it is). */
int scope_request(const conn *c, uint32_t opcode, request *rq);

/* The operator commands' handlers (command_admin.c), by the table's names:
 * each answers its request itself and returns 0, or returns the error
 * command_dispatch() answers. */
int do_list(conn *c, const kvs_wire_hdr *h, const request *rq);
int do_inspect(conn *c, const kvs_wire_hdr *h, const request *rq);
int do_evict(conn *c, const kvs_wire_hdr *h, const request *rq);
int do_pin(conn *c, const kvs_wire_hdr *h, const request *rq);
int do_unpin(conn *c, const kvs_wire_hdr *h, const request *rq);
int do_watch(conn *c, const kvs_wire_hdr *h, const request *rq);
int do_verify(conn *c, const kvs_wire_hdr *h, const request *rq);

#endif
