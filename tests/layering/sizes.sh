#!/usr/bin/env bash
# sizes.sh - no file of the daemon, the engines, the library, the tests or
# the tools is over 700 lines (a file past that is doing several jobs;
# split it along them). Every C file under service/, storage/, proto/, client/,
# tests/ and tools/, their subfolders included (client/python/ is the
# Python package), and every Python file under tests/ and tools/.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
max=700
mapfile -t files < <({
	find service storage proto client tests tools -path client/python -prune -o \
		-name '*.[ch]' -print
	find tests tools -name '*.py' -print
} | sort)
if ((${#files[@]} == 0)); then
	echo "sizes.sh: no C files found under service/, storage/, proto/, client/, tests/, tools/" >&2
	exit 1
fi
over=$(wc -l "${files[@]}" |
	awk -v max=$max '$2 != "total" && $1 > max { print $2 " (" $1 ")" }')
if [[ -n $over ]]; then
	echo "sizes.sh: over $max lines: $over" >&2
	exit 1
fi
echo "sizes.sh: ${#files[@]} files, none over $max lines"
