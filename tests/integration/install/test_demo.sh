#!/usr/bin/env bash
# test_demo.sh - scripts/demo.sh on the built binaries: one screen that says
# what was shared and reused, from the daemon's counters (which must match
# the workers' own table: the demo fails otherwise), the full stats only
# with --stats, and a clean stop.
set -euo pipefail
name=test_demo
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
need_env KVSHARED KVSCTL KVSBENCH
need_cmd python3
make_tmp kvsdemo
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
bin=$(dirname "$KVSHARED")
[ "$(dirname "$KVSCTL")" = "$bin" ] && [ "$(dirname "$KVSBENCH")" = "$bin" ] ||
	skip "kvshared, kvsctl and kvsbench are not in one build directory"

demo() { KVS_DEMO_BUILD=0 BUILD_DIR=$bin TMPDIR=$tmp "$root/scripts/demo.sh" "$@"; }

check "demo runs" eval 'demo >"$tmp/out" 2>&1'
out=$(cat "$tmp/out")
lines=$(wc -l <"$tmp/out")
check "one screen ($lines lines)" [ "$lines" -le 24 ]
# 4 workers, 288 blocks each, 256 of them a shared prefix: the first
# misses all 288, the others hit the prefix and miss their 32.
check "reused" grep -q '^reused: *768 blocks, 384.0 MiB' <<<"$out"
check "hit ratio" grep -q '^hit ratio: *0.67 (768 of 1152 blocks looked up)' <<<"$out"
check "published" grep -q '^published: *384 blocks' <<<"$out"
check "matches the workers" grep -q 'the same hits and misses as the workers' <<<"$out"
check "no full stats" eval '! grep -q "^  uptime_seconds" <<<"$out"'
check "stopped" grep -q 'kvshared stopped cleanly' <<<"$out"

check "demo --stats runs" eval 'demo --stats >"$tmp/out" 2>&1'
check "full stats with --stats" grep -q '^  uptime_seconds' "$tmp/out"
check "unknown flag refused" eval '! demo --nonsense >/dev/null 2>&1'
echo "test_demo: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
