/*
 * wire_h.c - compiled by CTest (layering.kvsctl_no_wire_h) with the include
 * directories of a tool: it must fail because kvs_wire.h, an internal header
 * of client/, is not found (the test matches the compiler's message).
 */
#include "kvs_wire.h"

int kvs_layering_wire(void);
int kvs_layering_wire(void) { return 0; }
