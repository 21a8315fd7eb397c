#!/usr/bin/env bash
# folders.sh - the daemon's folders depend one way (docs/architecture.md,
# "Where the code lives"): each folder of service/ includes headers of the
# folders below it in this order only, never of one above:
#
#   server -> tiers -> config -> fast -> cache -> base
#
# (the loop's edge; the tiers; the settings, which name the policies; the
# fast path, which the cache calls only through its hooks; the cache with
# its policy and tier interfaces; the log and the counters). An
# include is placed by the file of that name under service/ (names are
# unique there: each folder is an include directory of kvs_service).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
order=(server tiers config fast cache base)
fail=0 n=0

declare -A rank=() folder=()
for i in "${!order[@]}"; do
	rank[${order[$i]}]=$i
done
while read -r f; do
	folder[$(basename "$f")]=$(basename "$(dirname "$f")")
done < <(find service -mindepth 2 -name '*.h')
if ((${#folder[@]} == 0)); then
	echo "folders.sh: no headers under service/*/" >&2
	exit 1
fi

while read -r f; do
	n=$((n + 1))
	from=$(basename "$(dirname "$f")")
	if [[ -z ${rank[$from]:-} ]]; then
		echo "folders.sh: $f: service/$from/ is not in the order (${order[*]})" >&2
		fail=1
		continue
	fi
	while read -r h; do
		to=${folder[$h]:-}
		[[ -z $to || $to == "$from" ]] && continue
		if [[ -z ${rank[$to]:-} ]] || ((rank[$to] < rank[$from])); then
			echo "folders.sh: $f includes $h: service/$from/ may not include service/$to/ (order: ${order[*]})" >&2
			fail=1
		fi
	done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(find service -mindepth 2 -name '*.[ch]' | sort)
echo "folders.sh: $n files of service/ checked ($(IFS=/; echo "${order[*]}")): $([[ $fail == 0 ]] && echo ok || echo FAILED)"
exit $fail
