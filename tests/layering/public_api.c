/*
 * public_api.c - compiled by CTest (layering.kvsctl_public_api) with the
 * include directories of a tool: the public headers are there.
 */
#include "kvshare.h"
#include "kvshare_admin.h"

int kvs_layering_public(void);
int kvs_layering_public(void) { return KVSHARE_VERSION_MAJOR + KVS_E_PROTO; }
