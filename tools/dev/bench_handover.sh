#!/usr/bin/env bash
# bench_handover.sh - how long a kvshared --take-over leaves the socket
# without a daemon serving it, for a host tier holding BLOCKS blocks of
# 256 KiB (layers 4, kv heads 8, head dim 128, fp16, 16 tokens). A figure,
# not a test.
#
#   tools/dev/bench_handover.sh [BUILD_DIR] [BLOCKS] [REPS]
#
# A daemon with a host tier of BLOCKS * 256 KiB * 4/3 is filled by kvsbench
# share (one worker, a prefix of BLOCKS blocks), then handed over REPS times,
# each successor taking over from the one before. Per hand-over, from the
# daemons' own log timestamps (ms): drain_ms, from the old daemon's
# "take-over asked" to "fds sent"; adopt_ms, the successor's table rebuild
# ("persist: ... in T ms"); gap_ms, from "take-over asked" to the
# successor's "ready on" (no connection is accepted in between: they wait in
# the socket's backlog); kept, the blocks the successor serves. Every
# hand-over must keep all BLOCKS blocks, or the script fails.
set -euo pipefail

build=${1:-build}
blocks=${2:-2048}
reps=${3:-3}
kvshared=$build/kvshared
kvsbench=$build/kvsbench
kvsctl=$build/kvsctl
[[ -x $kvshared && -x $kvsbench ]] || { echo "bench_handover.sh: build $kvshared first" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvsbench-handover.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
sock=$work/kvshared.sock
host=$(( (blocks * 256 * 4 / 3 + 1023) / 1024 + 16 ))M

# ms since the epoch of the first log line of $1 matching $2
stamp() {
	local line
	line=$(grep -m1 -- "$2" "$1") || { echo "bench_handover.sh: no '$2' in $1" >&2; exit 1; }
	python3 -c 'import sys,datetime
t=datetime.datetime.strptime(sys.argv[1][:23], "%Y-%m-%dT%H:%M:%S.%f")
print(int(t.replace(tzinfo=datetime.timezone.utc).timestamp()*1000))' "$line"
}

wait_ready() {
	for _ in $(seq 600); do
		grep -q "ready on" "$1" && return 0
		sleep 0.05
	done
	echo "bench_handover.sh: no ready line in $1" >&2
	exit 1
}

"$kvshared" --socket "$sock" --host-size "$host" --gpu off >"$work/d0.log" 2>&1 &
pids+=($!)
wait_ready "$work/d0.log"
"$kvsbench" --socket "$sock" share --workers 1 --layers 4 --kv-heads 8 \
	--head-dim 128 --prefix-tokens $((blocks * 16)) --suffix-tokens 16 \
	--json-only >/dev/null
echo "blocks=$blocks host=$host $(nproc) cpus"
for i in $(seq 1 "$reps"); do
	old=$work/d$((i - 1)).log new=$work/d$i.log
	"$kvshared" --socket "$sock" --take-over "$sock" --host-size "$host" \
		--gpu off >"$new" 2>&1 &
	pids+=($!)
	wait_ready "$new"
	asked=$(stamp "$old" "take-over asked")
	sent=$(stamp "$old" "fds sent")
	ready=$(stamp "$new" "ready on")
	adopt=$(grep -m1 -o 'persist: .* in [0-9.]* ms' "$new" | grep -o '[0-9.]* ms$' || echo "? ms")
	kept=$("$kvsctl" --socket "$sock" stats --json | python3 -c \
		'import json,sys; print(json.load(sys.stdin)["start"]["blocks_kept"])')
	echo "handover=$i drain_ms=$((sent - asked)) adopt_ms=${adopt% ms} gap_ms=$((ready - asked)) kept=$kept"
	[[ $kept -ge $blocks ]] || { echo "bench_handover.sh: $kept blocks kept of $blocks" >&2; exit 1; }
done
