#!/usr/bin/env bash
# funcs.sh - no function of the daemon, the engines, the library, the tests
# or the tools is over 80 lines (a function past that does several things;
# give each step its name). Every C file under service/, storage/, proto/, client/,
# tests/ and tools/, their subfolders included.
#
# Kernel style makes a function's body easy to find: its opening brace
# alone at the start of a line, its closing brace at the start of a line.
# The lines between them are counted; the function is named by the last
# line before the brace that starts at column 0 with a name and holds "(".
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
max=80
mapfile -t files < <(find service storage proto client tests tools -path client/python -prune -o \
	-name '*.[ch]' -print | sort)
if ((${#files[@]} == 0)); then
	echo "funcs.sh: no C files found under service/, storage/, proto/, client/, tests/, tools/" >&2
	exit 1
fi
report=$(awk -v max=$max '
	FNR == 1 { start = 0; sig = "" }
	/^\{/ { start = FNR; name = sig; next }
	/^\}/ && start {
		n = FNR - start - 1
		funcs++
		fn = name
		if (match(fn, /[A-Za-z_][A-Za-z_0-9]*[ \t]*\(/))
			fn = substr(fn, RSTART, RLENGTH - 1)
		sub(/[ \t]+$/, "", fn)
		if (n > longest) { longest = n; where = FILENAME ":" fn }
		if (n > max) { printf "%s:%d: %d lines: %s\n", FILENAME, start, n, name; bad++ }
		start = 0
		next
	}
	/^[A-Za-z_].*\(/ { sig = $0 }
	END { printf "summary %d %d %d %s\n", funcs, bad, longest, where }' "${files[@]}")
summary=$(tail -n1 <<<"$report")
read -r _ funcs bad longest where <<<"$summary"
if ((funcs == 0)); then
	echo "funcs.sh: no function bodies found (is the code still kernel style?)" >&2
	exit 1
fi
if ((bad > 0)); then
	echo "funcs.sh: functions over $max lines:" >&2
	sed '$d' <<<"$report" >&2
	exit 1
fi
echo "funcs.sh: $funcs functions in ${#files[@]} files, none over $max lines (longest $longest, $where)"
