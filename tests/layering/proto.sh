#!/usr/bin/env bash
# proto.sh - proto/ stands on nothing of the project, and the daemon and the
# engines on nothing of the client library (docs/architecture.md,
# "Dependency rules"):
#
#   - a file of proto/ includes, of the project's headers, only proto/'s;
#   - a file of service/, storage/ or kernels/ includes no header of client/
#     (kvshare.h, kvshare_admin.h, kvs_client_int.h): what the daemon shares
#     with the library is in proto/;
#   - a file of one engine (storage/<engine>/) includes no header of another,
#     but for the one edge the GPU engine has: the host's sealed memfd
#     (kvs_memfd.h, header-only, since libkvshare carries gpu.c alone).
#
# A header is the project's when a file of that name is in the tree (the
# include directories name files, not paths); system headers use <>.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
fail=0 n=0

includes() {
	sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"
}

declare -A proto=() client=() project=() engine=()
allowed="gpu:kvs_memfd.h"
for f in proto/*.h; do proto[$(basename "$f")]=1; done
for f in client/*.h; do client[$(basename "$f")]=1; done
for f in storage/*/*.h; do engine[$(basename "$f")]=$(basename "$(dirname "$f")"); done
while read -r f; do
	project[$(basename "$f")]=1
done < <(find client kernels proto service storage tools tests -name '*.h' -o -name '*.cuh')
if ((${#proto[@]} == 0 || ${#client[@]} == 0)); then
	echo "proto.sh: no headers under proto/ or client/" >&2
	exit 1
fi

for f in proto/*.[ch]; do
	n=$((n + 1))
	while read -r h; do
		if [[ -n ${project[$h]:-} && -z ${proto[$h]:-} ]]; then
			echo "proto.sh: $f includes $h: proto/ includes only its own headers" >&2
			fail=1
		fi
	done < <(includes "$f")
done
while read -r f; do
	n=$((n + 1))
	while read -r h; do
		if [[ -n ${client[$h]:-} ]]; then
			echo "proto.sh: $f includes $h: only the library and what is above it include client/" >&2
			fail=1
		fi
		[[ $f == storage/* ]] || continue
		from=$(basename "$(dirname "$f")") to=${engine[$h]:-}
		if [[ -n $to && $to != "$from" && " $allowed " != *" $from:$h "* ]]; then
			echo "proto.sh: $f includes $h: storage/$from/ may not include storage/$to/ (what engines share is in proto/)" >&2
			fail=1
		fi
	done < <(includes "$f")
done < <(find service storage kernels -name '*.[ch]' -o -name '*.cu' | sort)
echo "proto.sh: $n files of proto/, service/, storage/ and kernels/ checked (includes up, engines into engines): $([[ $fail == 0 ]] && echo ok || echo FAILED)"
exit $fail
