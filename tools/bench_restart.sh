#!/usr/bin/env bash
# bench_restart.sh - warm-restart time of kvshared's SSD tier for N indexed
# blocks (default 1M), measured through the daemon. A figure, not a test.
#
#   tools/bench_restart.sh [BUILD_DIR] [BLOCKS] [REPS] [DIR]
#
# kvs-ssd-fill builds DIR/kvsbench-restart.XXXXXX with BLOCKS real 4 KiB
# records (8 GiB of segments for 1M) and their LMDB index, then kvshared
# --ssd-dir is started REPS times on it; each start is timed from the fork
# to the READY line on --ready-fd, and its log line
# "SSD tier: loaded N indexed blocks in T ms" is printed. The first start
# runs after the index and segment files were dropped from the page cache
# (POSIX_FADV_DONTNEED through dd; cold), the others find them cached (warm).
# Every start must load all BLOCKS blocks, or the script fails.
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

printf '%-5s %-6s %12s %10s  %s\n' rep cache ready_ms loaded_ms "log line"
for ((r = 1; r <= reps; r++)); do
	cache=warm
	if ((r == 1)); then
		sync
		drop_cache
		cache=cold
	fi
	rm -f "$work/ready" "$work/kvshared.log"
	mkfifo "$work/ready"
	t0=$(now_ns)
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
	logline=$(grep -o 'SSD tier: loaded [0-9]* indexed blocks in [0-9]* ms.*' "$work/kvshared.log")
	loaded=$(sed -E 's/SSD tier: loaded ([0-9]+) .*/\1/' <<<"$logline")
	ms=$(sed -E 's/.* in ([0-9]+) ms.*/\1/' <<<"$logline")
	printf '%-5s %-6s %12.1f %10s  %s\n' "$r" "$cache" \
		"$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) / 1e6 }')" "$ms" "$logline"
	kill -TERM "$pid"
	wait "$pid" || { echo "bench_restart.sh: kvshared exited $?" >&2; exit 1; }
	pid=
	if [[ $loaded != "$blocks" ]]; then
		echo "bench_restart.sh: loaded $loaded of $blocks blocks" >&2
		exit 1
	fi
done
