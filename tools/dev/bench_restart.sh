#!/usr/bin/env bash
# bench_restart.sh - warm-restart time of kvshared's SSD tier for N indexed
# blocks (default 1M), measured through the daemon. A figure, not a test.
#
#   tools/dev/bench_restart.sh [BUILD_DIR] [BLOCKS] [REPS] [DIR]
#
# kvs-ssd-fill builds DIR/kvsbench-restart.XXXXXX with BLOCKS real 4 KiB
# records (8 GiB of segments for 1M) and their LMDB index, then kvshared
# --ssd-dir is started REPS times on it. Each start gets two times, both
# from the fork: ready_ms, to the READY line on --ready-fd (the daemon
# serves from then on: the index loads in the background, docs/ssd.md
# "Warm restart"), and loaded_ms, to the log line
# "SSD tier: index fully loaded: N blocks in T ms" (its timestamp; T, the
# load's own time from its start, is printed too, and stall_us, the longest
# slice: the most a request waited behind the load; cpu_us and majflt, the
# most CPU time and page faults from disk the loop took in one slice: on a
# loaded machine stall_us counts preemption too). The first start runs
# after the index and segment files were dropped from the page cache
# (POSIX_FADV_DONTNEED through dd; cold), the others find them cached
# (warm). Every start must load all BLOCKS blocks, or the script fails.
#
# SLICES="1024 65536" in the environment runs every rep once per value of
# KVS_SSD_LOAD_SLICE (entries per slice of the background load, at most
# 65536), in turn. KVS_SSD_LOAD_THREAD=0 in the environment has the loop
# read the index itself, without the reader thread (to compare).
set -euo pipefail

build=${1:-build}
blocks=${2:-1000000}
reps=${3:-3}
base=${4:-${TMPDIR:-/var/tmp}}
fill=$build/kvs-ssd-fill
kvshared=$build/kvshared
[[ -x $fill && -x $kvshared ]] || { echo "bench_restart.sh: build $fill and $kvshared first" >&2; exit 2; }

work=$(mktemp -d "$base/kvsbench-restart.XXXXXX")
pid=
cleanup() {
	[[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/ssd"

echo "bench_restart.sh: filling $work/ssd with $blocks blocks..." >&2
read -r -a flags < <("$fill" --dir "$work/ssd" --blocks "$blocks")
du -sh "$work/ssd/index" "$work/ssd" >&2

# Drop a file's pages from the page cache (dd's iflag=nocache on the whole
# file is POSIX_FADV_DONTNEED); the pages are clean, so this is cheap.
drop_cache() {
	local f
	for f in "$work"/ssd/index/data.mdb "$work"/ssd/seg-*.kvs; do
		dd if="$f" iflag=nocache count=0 status=none
	done
}

now_ns() { date +%s%N; }

read -r -a slices <<<"${SLICES:-4096}"
printf '%-5s %-6s %9s %10s %10s %8s %9s %7s %7s\n' rep cache slice ready_ms loaded_ms load_ms stall_us cpu_us majflt
for ((r = 1; r <= reps; r++)); do
for slice in "${slices[@]}"; do
	cache=warm
	if ((r == 1)) && [[ $slice == "${slices[0]}" ]]; then
		sync
		drop_cache
		cache=cold
	fi
	rm -f "$work/ready" "$work/kvshared.log"
	mkfifo "$work/ready"
	t0=$(now_ns)
	KVS_SSD_LOAD_SLICE=$slice \
	"$kvshared" --socket "$work/kvshared.sock" --ready-fd 3 --host-size 64M \
		--ssd-dir "$work/ssd" "${flags[@]}" --log-level info \
		3>"$work/ready" >"$work/kvshared.log" 2>&1 &
	pid=$!
	if ! read -r -t 600 line <"$work/ready" || [[ $line != READY ]]; then
		echo "bench_restart.sh: no READY; log:" >&2
		cat "$work/kvshared.log" >&2
		exit 1
	fi
	t1=$(now_ns)
	# The load goes on after READY: wait for its line (a figure, not a
	# test: polled), then read its timestamp.
	for ((i = 0; i < 6000; i++)); do
		grep -q 'SSD tier: index fully loaded' "$work/kvshared.log" && break
		sleep 0.1
	done
	logline=$(grep 'SSD tier: index fully loaded: [0-9]* blocks in [0-9]* ms' "$work/kvshared.log") || {
		echo "bench_restart.sh: the index did not finish loading; log:" >&2
		cat "$work/kvshared.log" >&2
		exit 1
	}
	t2=$(date -d "$(cut -d' ' -f1 <<<"$logline")" +%s%N)
	loaded=$(sed -E 's/.*fully loaded: ([0-9]+) blocks.*/\1/' <<<"$logline")
	ms=$(sed -E 's/.* blocks in ([0-9]+) ms.*/\1/' <<<"$logline")
	stall=$(sed -E 's/.*longest slice ([0-9]+) us.*/\1/' <<<"$logline")
	cpu=$(sed -nE 's/.*at most ([0-9]+) us of CPU.*/\1/p' <<<"$logline")
	majflt=$(sed -nE 's/.* and ([0-9]+) page faults from disk.*/\1/p' <<<"$logline")
	printf '%-5s %-6s %9s %10.1f %10.1f %8s %9s %7s %7s\n' "$r" "$cache" "$slice" \
		"$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) / 1e6 }')" \
		"$(awk -v a="$t0" -v b="$t2" 'BEGIN { print (b - a) / 1e6 }')" "$ms" "$stall" \
		"${cpu:--}" "${majflt:--}"
	kill -TERM "$pid"
	wait "$pid" || { echo "bench_restart.sh: kvshared exited $?" >&2; exit 1; }
	pid=
	if [[ $loaded != "$blocks" ]]; then
		echo "bench_restart.sh: loaded $loaded of $blocks blocks" >&2
		exit 1
	fi
done
done
