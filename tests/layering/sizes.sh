#!/usr/bin/env bash
# sizes.sh - no file of the daemon, the engines or the library is over 700
# lines (issue "one tier interface": a file past that is doing several
# jobs; split it along them).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
max=700
over=$(wc -l $(find service storage client -name "*.[ch]" -not -path "client/python/*" | sort) |
	awk -v max=$max '$2 != "total" && $1 > max { print $2 " (" $1 ")" }')
files=$(ls $(find service storage client -name "*.[ch]" -not -path "client/python/*" | sort) | wc -l)
if [[ -n $over ]]; then
	echo "sizes.sh: over $max lines: $over" >&2
	exit 1
fi
echo "sizes.sh: $files files, none over $max lines"
