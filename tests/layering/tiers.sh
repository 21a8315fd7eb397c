#!/usr/bin/env bash
# tiers.sh - the tier interface holds (docs/architecture.md, "Tiers"):
# the cache's files include no tier's header, and no tier includes the
# cache's internals; tiers see kvs_tier_ops.h only.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
fail=0

bad=$(grep -ln '#include "tier_' service/cache/*.[ch])
if [[ -n $bad ]]; then
	echo "tiers.sh: the cache includes a tier's header: $bad" >&2
	fail=1
fi
bad=$(grep -ln '#include "cache_int.h"\|#include "cache_key.h"' service/tiers/tier_*.[ch])
if [[ -n $bad ]]; then
	echo "tiers.sh: a tier includes the cache's internals: $bad" >&2
	fail=1
fi
tiers=$(ls service/tiers/tier_*.c | wc -l)
echo "tiers.sh: $tiers tier files checked, cache files checked: $([[ $fail == 0 ]] && echo ok || echo FAILED)"
exit $fail
