#!/usr/bin/env bash
# cache_wire.sh - the cache speaks its own types (docs/architecture.md,
# "Dependency rules"): no file of the cache (service/cache/cache*.c, cache*.h,
# kvs_cache*.h) includes a wire header, directly or through another header;
# command.c and admin.c translate at the edge.
#
#   cache_wire.sh <cc> -I<dir>...   (the kvs_service target's include dirs)
#
# Each file's full include list comes from the compiler (-MM), so a wire
# header reached through any other header counts too.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
cc=$1
shift
fail=0 n=0

for f in service/cache/cache*.c service/cache/cache*.h service/cache/kvs_cache*.h; do
	n=$((n + 1))
	if ! deps=$("$cc" -std=gnu11 -MM "$@" -x c "$f" 2>&1); then
		echo "cache_wire.sh: $f does not preprocess: $deps" >&2
		fail=1
		continue
	fi
	wire=$(tr ' \\' '\n\n' <<<"$deps" | grep -E '(^|/)kvs_wire[a-z_]*\.h$' | sort -u)
	if [[ -n $wire ]]; then
		echo "cache_wire.sh: $f includes a wire header:" $wire >&2
		fail=1
	fi
done
echo "cache_wire.sh: $n cache files checked: $([[ $fail == 0 ]] && echo ok || echo FAILED)"
exit $fail
