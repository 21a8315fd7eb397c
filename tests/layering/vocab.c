/*
 * vocab.c - compiled by CTest (layering.*_vocab) with the include directories
 * of a storage/ or kernels/ target: the shared vocabulary is all they see,
 * and it stands alone (kvs_types.h needs only <stdint.h>).
 */
#include "kvs_types.h"
#include "kvs_le.h"

int kvs_layering_vocab(void);
int kvs_layering_vocab(void)
{
	uint8_t b[16];
	kvs_hash h = { .lo = 1, .hi = 2 };
	kvs_dtype d = KVS_DTYPE_FP16;
	kvs_tier t = KVS_TIER_SSD;

	puth(b, h);
	return (int)geth(b).lo + (int)d + (int)t + KVS_E_LAYOUT;
}
