/*
 * kvshare_h.c - compiled by CTest (layering.*_no_kvshare_h) with the include
 * directories of a storage/ or kernels/ target: it must fail, and fail
 * because kvshare.h is not found (the test matches the compiler's message).
 * This is the wrong include the dependency rules forbid.
 */
#include "kvshare.h"

int kvs_layering_wrong(void);
int kvs_layering_wrong(void) { return KVSHARE_VERSION_MAJOR; }
