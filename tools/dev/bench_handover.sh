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
#
#   tools/dev/bench_handover.sh --pool [BUILD_DIR] [BLOCKS] [REPS] [BYTES]
#
# A host tier of BLOCKS (default 1000000) blocks of BYTES (a multiple of 64;
# default 64, the smallest a namespace may have: 1 layer, 1 KV head, head
# dim BYTES/64, 16 tokens), filled by kvs-pool-fill (chains of 1024: one
# reserve and one commit a chain), then restarted REPS times (default 3) each way: handover, a
# `kvshared --take-over` by hand; restart, `systemctl restart` through the
# tests' stand-in for systemd (kvs-fdstore: SIGTERM, then a start with the
# fds stored); crash, kill -9 of the daemon under the stand-in, started
# again at once (systemd's Restart=on-failure waits RestartSec, 100 ms by
# default, first). Per restart: ready_ms, from the restart's start (the
# successor's exec, the SIGHUP, the SIGKILL) to READY (the successor's
# "ready on" line for a hand-over, READY=1 received by the stand-in
# otherwise; polled every 5 ms); answer_ms, to the first request answered
# (kvsctl stats: an adopted pool is served 350 ms after READY, once the old
# fast-path index is stale, and connections wait in the backlog till then);
# adopt_ms, the table's rebuild (stats start.adopt_ms); kept and dropped (start.blocks_*) and kept_pct, the
# share of BLOCKS kept; checked and hit, blocks of every 16th chain looked
# up and those found, each read back bit exact (kvs-pool-fill check).
# Blocks past the metadata's records (one per 256 B of host tier) are not
# kept.
# Before a crash the persist worker's checksums must be done
# (persist.pending 0): settle_ms, after the fill. A block read back wrong
# fails the script.
set -euo pipefail

pool_mode=0
if [[ ${1:-} == --pool ]]; then
	pool_mode=1
	shift
fi
build=${1:-build}
blocks=${2:-$((pool_mode ? 1000000 : 2048))}
reps=${3:-3}
bytes=${4:-64}
kvshared=$build/kvshared
kvsbench=$build/kvsbench
kvsctl=$build/kvsctl
[[ -x $kvshared && -x $kvsbench ]] || { echo "bench_handover.sh: build $kvshared first" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kvsbench-handover.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
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

# --pool: see the top
now_ms() { date +%s%3N; }
jstat() { "$kvsctl" --socket "$sock" stats --json | python3 -c \
	"import json,sys; s=json.load(sys.stdin); print($1)"; }
fill=$build/tests/kvs-pool-fill
fdstore=$build/tests/kvs-fdstore
pool() { "$fill" "$@" --socket "$sock" --blocks "$blocks" --head-dim $((bytes / 64)); }

# one restart's line: $1 its kind, $2 its number, $3 its start (ms)
report() {
	local ready=$(( $(now_ms) - $3 )) answer st chk
	"$kvsctl" --socket "$sock" stats >/dev/null
	answer=$(( $(now_ms) - $3 ))
	st=$(jstat '"adopt_ms=%d kept=%d dropped=%d kept_pct=%.1f started=%s" % (s["start"]["adopt_ms"], s["start"]["blocks_kept"], s["start"]["blocks_dropped"], 100.0 * s["start"]["blocks_kept"] / '"$blocks"', s["derived"]["started"].replace(" ", "_"))')
	chk=$(pool check --every 16 || :)
	echo "$1=$2 ready_ms=$ready answer_ms=$answer $st $(sed 's/asked=/checked=/; s/ seconds=.*//' <<<"$chk")"
	[[ $chk == *" wrong=0"* ]] || { echo "bench_handover.sh: $1 $2: $chk" >&2; exit 1; }
}

# $1: a key of the stand-in's state; waits until it is at least $2
state_at() {
	for _ in $(seq 4000); do
		(( $(sed -n "s/^$1=//p" "$work/state" 2>/dev/null || echo 0) >= $2 )) && return 0
		sleep 0.005
	done
	echo "bench_handover.sh: the stand-in's $1 stayed below $2" >&2
	exit 1
}

settle() {
	local t0
	t0=$(now_ms)
	until [[ $(jstat 's["persist"]["pending"]') == 0 ]]; do sleep 0.05; done
	echo "settle_ms=$(( $(now_ms) - t0 ))"
}

pool_bench() {
	local t0 i d ready
	[[ -x $fill && -x $fdstore ]] || { echo "bench_handover.sh: build $fill and $fdstore first" >&2; exit 2; }
	host=$(( blocks * bytes * 5 / 4 / 1048576 + 64 ))M
	echo "blocks=$blocks block_bytes=$bytes host=$host $(nproc) cpus"
	"$kvshared" --socket "$sock" --host-size "$host" --gpu off >"$work/d0.log" 2>&1 &
	pids+=($!)
	wait_ready "$work/d0.log"
	echo "handover fill: $(pool fill)"
	for i in $(seq 1 "$reps"); do
		t0=$(now_ms)
		"$kvshared" --socket "$sock" --take-over "$sock" --host-size "$host" \
			--gpu off >"$work/d$i.log" 2>&1 &
		pids+=($!)
		for _ in $(seq 4000); do
			grep -q "ready on" "$work/d$i.log" && break
			sleep 0.005
		done
		report handover "$i" "$t0"
	done
	kill "${pids[-1]}"
	wait "${pids[-1]}" 2>/dev/null || :
	"$fdstore" --state "$work/state" --restarts 100 -- "$kvshared" --socket "$sock" \
		--host-size "$host" --gpu off >"$work/s.log" 2>&1 &
	pids+=($!)
	d=$!
	state_at ready 1
	echo "fd store fill: $(pool fill)"
	ready=1
	for i in $(seq 1 "$reps"); do
		t0=$(now_ms)
		kill -HUP "$d"
		state_at ready $((++ready))
		report restart "$i" "$t0"
		echo "crash=$i $(settle) (before it)"
		t0=$(now_ms)
		kill -KILL "$(sed -n 's/^pid=//p' "$work/state")"
		state_at ready $((++ready))
		report crash "$i" "$t0"
	done
}

if ((pool_mode)); then
	pool_bench
	exit
fi

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
