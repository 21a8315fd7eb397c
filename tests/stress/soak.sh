#!/usr/bin/env bash
# soak.sh - many clients against one daemon for a while, then count what is
# left behind.
#
#   tests/stress/soak.sh DURATION_SECONDS
#
# Starts kvshared with a small host tier (16 MiB: about 1000 blocks of
# 16 KiB, for 2048 distinct blocks in play, so eviction runs all along) over
# an SSD tier of 24 MiB in 2 MiB segments (SOAK_SSD_SIZE, SOAK_SSD_SEGMENT:
# evicted blocks are demoted, hits on them promoted, full segments recycled,
# all while clients die; smaller than the working set, so that segments are
# recycled under readers' pins and the store is at times out of segments) and
# SOAK_CLIENTS (64) client slots. Each slot runs tests/soak_client (a random
# mix of lookup, reserve, commit, abort, release, disconnect with leases held
# and reconnect, and a planned exit in the middle of a write), starting a new
# one whenever one ends; a killer sends SIGKILL to a random client every
# SOAK_KILL_MS (300) ms. Every hit's bytes are checked against the pattern of
# its block hash.
#
# Afterwards, with every client gone: leases.active, leases.pinned_blocks and
# tier_host.blocks_writing are 0 and every slot in use holds a committed
# block (tier_host.slots_used = tier_host.blocks); the daemon's open fds are back to their
# count before the clients; its private RSS (server.rss_anon_bytes) after
# the warm-up (the first quarter) grew by at most 20% + 2 MiB; no corrupt
# byte was seen; the SSD tier demoted and promoted blocks, is still on and
# never turned demotion off (the log), has no write in flight, counted no
# corrupt block and no I/O error (stalls, no segment to write for a while,
# are counted and allowed: demotion resumes after them); the daemon
# stops cleanly (SIGTERM, exit 0). Prints the
# figures. Exit 0 pass, 1 fail, 77 skip (not built).
#
# Environment: BUILD_DIR (build), KVSHARED, KVSCTL, SOAK_CLIENT (the built
# binaries by default), SOAK_CLIENTS, SOAK_KILL_MS, SOAK_SSD_SIZE,
# SOAK_SSD_SEGMENT, SOAK_KEEP=1 to keep the temp dir.
set -uo pipefail

duration=${1:-}
if ! [[ $duration =~ ^[0-9]+$ ]] || ((duration < 4)); then
	echo "usage: tests/stress/soak.sh DURATION_SECONDS (at least 4)" >&2
	exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$root/${BUILD_DIR:-build}
KVSHARED=${KVSHARED:-$build/kvshared}
KVSCTL=${KVSCTL:-$build/kvsctl}
SOAK_CLIENT=${SOAK_CLIENT:-$build/tests/soak_client}
clients=${SOAK_CLIENTS:-64}
kill_ms=${SOAK_KILL_MS:-300}
ssd_size=${SOAK_SSD_SIZE:-24M}
ssd_segment=${SOAK_SSD_SEGMENT:-2M}
for b in "$KVSHARED" "$KVSCTL" "$SOAK_CLIENT"; do
	if [ ! -x "$b" ]; then
		echo "soak: SKIP: $b is not built" >&2
		exit 77
	fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvsoak.XXXXXX")
sock=$tmp/kvshared.sock
dpid=
slots=()
cleanup() {
	local p
	for p in "${slots[@]}"; do
		kill "$p" 2>/dev/null
	done
	[ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null
	[ "${SOAK_KEEP:-0}" = 1 ] && echo "soak: kept $tmp" >&2 || rm -rf "$tmp"
}
trap cleanup EXIT

fail=0
bad() {
	echo "soak: FAIL: $*" >&2
	fail=1
}

# One stat, by its "section.name".
stat() {
	"$KVSCTL" --socket "$sock" stats --json 2>/dev/null | python3 -c '
import json, sys
sec, key = sys.argv[1].split(".", 1)
print(json.load(sys.stdin)[sec][key])' "$1"
}

fds() {
	ls "/proc/$dpid/fd" 2>/dev/null | wc -l
}

# ---- the daemon -------------------------------------------------------------

mkdir "$tmp/ssd"
"$KVSHARED" --socket "$sock" --host-size 16M --log-level warn --ready-fd 3 \
	--ssd-dir "$tmp/ssd" --ssd-segment "$ssd_segment" --ssd-size "$ssd_size" \
	3>"$tmp/ready" 2>"$tmp/kvshared.log" &
dpid=$!
deadline=$((SECONDS + 15))
until grep -q READY "$tmp/ready" 2>/dev/null; do
	if ((SECONDS > deadline)) || ! kill -0 "$dpid" 2>/dev/null; then
		echo "soak: FAIL: the daemon did not start" >&2
		cat "$tmp/kvshared.log" >&2
		exit 1
	fi
	sleep 0.05
done
fd_base=$(fds)

# ---- the clients ------------------------------------------------------------

start=$SECONDS
end=$((start + duration))
slot() {
	local i=$1 n=0 left status
	while :; do
		left=$((end - SECONDS))
		((left > 0)) || break
		n=$((n + 1))
		"$SOAK_CLIENT" "$sock" "$left" "$((i * 100000 + n))" \
			>>"$tmp/client.$i.out" 2>>"$tmp/client.$i.err"
		status=$?
		# 0 clean, 3 a planned crash, 137 killed: all fine.
		case $status in
		0 | 3 | 137) ;;
		*) echo "exit $status" >>"$tmp/client.$i.bad" ;;
		esac
	done
	echo "$n" >"$tmp/client.$i.runs"
}
for ((i = 0; i < clients; i++)); do
	slot "$i" 2>/dev/null & # no "Killed" job notices
	slots+=($!)
done

# Warm-up: the first quarter. RSS is sampled every second after it.
warm=$((start + duration / 4))
rss_first=
rss_last=
rss_max=0
kills=0
while ((SECONDS < end)); do
	sleep "$(printf '0.%03d' "$kill_ms")"
	# SIGKILL one random running client (by its pid, a child of a slot).
	p=$(pgrep -P "${slots[RANDOM % clients]}" soak_client | head -n 1)
	if [ -n "$p" ] && kill -9 "$p" 2>/dev/null; then
		kills=$((kills + 1))
	fi
	if ((SECONDS >= warm)) && [ "${last_sample:-0}" != "$SECONDS" ]; then
		last_sample=$SECONDS
		r=$(stat server.rss_anon_bytes)
		[ -z "$rss_first" ] && rss_first=$r
		rss_last=$r
		((r > rss_max)) && rss_max=$r
	fi
done
for p in "${slots[@]}"; do
	wait "$p"
done
slots=()

# ---- what is left -----------------------------------------------------------

deadline=$((SECONDS + 10))
until [ "$(stat clients.connected)" = 1 ] || ((SECONDS > deadline)); do
	sleep 0.05
done
get() { stat "$1"; }
connected=$(get clients.connected)
leases=$(get leases.active)
pinned=$(get leases.pinned_blocks)
writing=$(get tier_host.blocks_writing)
slots_used=$(get tier_host.slots_used)
blocks=$(get tier_host.blocks)
deadline=$((SECONDS + 10))
until [ "$(stat tier_ssd.writes_inflight)" = 0 ] || ((SECONDS > deadline)); do
	sleep 0.05
done
ssd_inflight=$(get tier_ssd.writes_inflight)
ssd_enabled=$(get tier_ssd.enabled)
ssd_demotions=$(get tier_ssd.demotions)
ssd_promotions=$(get tier_ssd.promotions)
ssd_reads=$(get tier_ssd.reads)
ssd_corrupt=$(get tier_ssd.corrupt_blocks)
ssd_errors=$(get tier_ssd.io_errors)
ssd_recycled=$(get tier_ssd.recycled_segments)
ssd_forced=$(get tier_ssd.recycle_forced)
ssd_stalls=$(get tier_ssd.stalls)
ssd_stall_drops=$(get tier_ssd.stall_drops)
ssd_stall_ms=$(get tier_ssd.stall_ms)
# The daemon closes a stats client's fd when it sees it go: poll.
# One fd the clients leave behind on purpose: each trust domain's fast-path
# index (a memfd made at the domain's first fast attach, kept for good).
fd_base=$((fd_base + $(get fast.indexes)))
deadline=$((SECONDS + 5))
until (($(fds) <= fd_base)) || ((SECONDS > deadline)); do
	sleep 0.05
done
fd_end=$(fds)
runs=$(cat "$tmp"/client.*.runs 2>/dev/null | awk '{s += $1} END {print s + 0}')
read -r ops hits bytes corrupt < <(cat "$tmp"/client.*.out 2>/dev/null | awk '
	/^soak_client:/ { o += $3; h += $5; b += $7; c += $9 }
	END { printf "%.0f %.0f %.0f %.0f\n", o, h, b, c }')
unexpected=$(cat "$tmp"/client.*.bad 2>/dev/null | wc -l)

echo "soak: $duration s, $clients client slots, $runs client processes, $kills killed with SIGKILL"
echo "soak: $ops operations, $hits blocks hit, $bytes bytes verified, $corrupt corrupt"
echo "soak: daemon: $(get ops.lookup) lookups, $(get ops.reserve) reserves, $(get blocks.committed) blocks committed, $(get blocks.aborted) aborted, $(get blocks.evicted) evicted, $(get clients.accepted) connections"
echo "soak: left: clients.connected $connected (the stats client), leases.active $leases, leases.pinned_blocks $pinned, tier_host.blocks_writing $writing"
echo "soak: slots: $slots_used in use, $blocks committed blocks"
echo "soak: daemon fds: $fd_base before the clients (with $(get fast.indexes) fast-path index), $fd_end after"
echo "soak: ssd: $ssd_demotions demotions, $ssd_promotions promotions, $ssd_reads reads, $ssd_recycled segments recycled ($ssd_forced with pinned blocks), $ssd_corrupt corrupt, $ssd_errors I/O errors, $ssd_inflight writes in flight, enabled $ssd_enabled"
echo "soak: ssd stalls (no segment to write): $ssd_stalls episodes, $ssd_stall_drops writes dropped, $ssd_stall_ms ms"
echo "soak: daemon rss_anon_bytes after warm-up: first $rss_first, last $rss_last, max $rss_max"

[ "$connected" = 1 ] || bad "clients still connected: $connected"
[ "$leases" = 0 ] || bad "leases left: $leases"
[ "$pinned" = 0 ] || bad "pins left: $pinned"
[ "$writing" = 0 ] || bad "reserved blocks left: $writing"
[ "$slots_used" = "$blocks" ] || bad "slots leaked: $slots_used in use for $blocks blocks"
((fd_end == fd_base)) || bad "daemon fds: $fd_base before, $fd_end after"
((corrupt == 0)) || bad "$corrupt corrupt bytes"
((hits > 0)) || bad "no hits at all"
[ "$ssd_enabled" = 1 ] || bad "the SSD tier turned itself off"
! grep -q 'demotion turned off' "$tmp/kvshared.log" ||
	bad "demotion was turned off during the run: $(grep -m1 'demotion turned off' "$tmp/kvshared.log")"
[ "$ssd_inflight" = 0 ] || bad "SSD writes still in flight: $ssd_inflight"
((ssd_corrupt == 0 && ssd_errors == 0)) ||
	bad "SSD tier: $ssd_corrupt corrupt blocks, $ssd_errors I/O errors"
((ssd_demotions > 0 && ssd_promotions > 0)) ||
	bad "the SSD tier was not exercised: $ssd_demotions demotions, $ssd_promotions promotions"
((unexpected == 0)) || {
	bad "$unexpected client runs ended with an unexpected status"
	cat "$tmp"/client.*.err | sort | uniq -c | head >&2
}
if [ -n "$rss_first" ]; then
	((rss_last <= rss_first + rss_first / 5 + 2 * 1048576)) ||
		bad "daemon RSS grew after warm-up: $rss_first -> $rss_last"
fi

kill -TERM "$dpid"
wait "$dpid"
status=$?
dpid=
((status == 0)) || bad "the daemon exited $status on SIGTERM"
if ((fail)); then
	tail -n 20 "$tmp/kvshared.log" >&2
	exit 1
fi
echo "soak: PASS"
