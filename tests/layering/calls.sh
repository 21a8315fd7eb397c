#!/usr/bin/env bash
# calls.sh - no files of one folder call each other in a circle, and no
# call runs up service/'s folders (docs/development.md, "The layers"):
# read off the objects of the daemon's library, each file's calls to
# functions another file of its folder defines make an edge, and tsort
# finds any circle; a call to a function of a folder above the caller's in
# folders.sh's order fails too. Circles are checked in:
# service/cache/ (the record-state core, cache_rec.c, at the bottom;
# leases, eviction, namespaces, promotion, tiers and the operator's files
# above it) and service/fast/ (index, pins, connections).
#
#   calls.sh <nm> <libkvs_service.a>
#
# Prints each folder's files in an order that holds (callers first).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
nm=$1 lib=$2
fail=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

if ! syms=$("$nm" -A "$lib" 2>&1); then
	echo "calls.sh: $nm $lib: $syms" >&2
	exit 1
fi
for dir in service/cache service/fast; do
	mapfile -t files < <(cd "$dir" && ls -- *.c | sed 's/\.c$//')
	if ((${#files[@]} < 2)); then
		echo "calls.sh: $dir: fewer than two C files" >&2
		fail=1
		continue
	fi
	members=$(printf '%s.c.o\n' "${files[@]}")
	# "member def sym" for each definition, "member use sym" for each
	# undefined symbol, of the folder's members only.
	edges=$(awk -v members="$members" '
		BEGIN { n = split(members, m, "\n"); for (i = 1; i <= n; i++) ours[m[i]] = 1 }
		{
			split($1, p, ":"); mem = p[2]
			if (!(mem in ours)) next
			sub(/\.c\.o$/, "", mem)
			if ($2 == "U") use[mem, $3] = 1
			else if ($2 ~ /^[TDBR]$/) def[$3] = mem
		}
		END {
			for (k in use) {
				split(k, q, SUBSEP)
				if ((q[2] in def) && def[q[2]] != q[1]) e[q[1] " " def[q[2]]] = 1
			}
			for (x in e) print x
		}' <<<"$syms" | sort)
	if [[ -z $edges ]]; then
		echo "calls.sh: $dir: no calls between its files found in $lib" >&2
		fail=1
		continue
	fi
	# Every file is a node ("f f"), whether it calls the others or not.
	pairs=$(echo "$edges"; for f in "${files[@]}"; do echo "$f $f"; done)
	if ! order=$(tsort 2>"$tmp" <<<"$pairs") || [[ -s $tmp ]]; then
		echo "calls.sh: $dir: files call each other in a circle:" >&2
		awk '/input contains a loop/ { if (l) print "  " l; l = ""; next }
		     { sub(/^tsort: /, ""); l = l ? l " -> " $0 : $0 }
		     END { if (l) print "  " l }' "$tmp" >&2
		fail=1
		continue
	fi
	echo "calls.sh: $dir: $(wc -l <<<"$edges") caller-callee pairs of its ${#files[@]} files, no circle;" \
		"callers first:" $order
done
# Across service/'s folders, no call runs up their order (folders.sh's,
# which checks the includes): no file calls a function of a folder above
# its own.
eval "$(grep '^order=' tests/layering/folders.sh)"
members=$(for d in "${order[@]}"; do (cd "service/$d" && ls -- *.c | sed "s|\$| $d|"); done)
up=$(awk -v members="$members" -v order="${order[*]}" '
	BEGIN {
		n = split(members, m, "\n")
		for (i = 1; i <= n; i++) { split(m[i], f, " "); dir[f[1] ".o"] = f[2] }
		k = split(order, o, " ")
		for (i = 1; i <= k; i++) rank[o[i]] = i
	}
	{
		split($1, p, ":"); mem = p[2]
		if (!(mem in dir)) next
		if ($2 == "U") use[mem, $3] = 1
		else if ($2 ~ /^[TDBR]$/) def[$3] = mem
	}
	END {
		for (x in use) {
			split(x, q, SUBSEP)
			if (!(q[2] in def)) continue
			a = dir[q[1]]; b = dir[def[q[2]]]
			if (rank[b] < rank[a])
				printf "  %s (service/%s/) calls %s of %s (service/%s/)\n", q[1], a, q[2], def[q[2]], b
			calls++
		}
		printf "%d\n", calls
	}' <<<"$syms")
ncalls=$(tail -n1 <<<"$up")
if ((ncalls == 0)); then
	echo "calls.sh: no calls between service/'s files found in $lib" >&2
	fail=1
elif [[ -n $(sed '$d' <<<"$up") ]]; then
	echo "calls.sh: calls up service/'s folders (order: ${order[*]}):" >&2
	sed '$d' <<<"$up" | sed 's/\.c\.o / /g' >&2
	fail=1
else
	echo "calls.sh: service/: $ncalls calls to another file's functions, none up the folders' order (${order[*]})"
fi
echo "calls.sh: $([[ $fail == 0 ]] && echo ok || echo FAILED)"
exit $fail
