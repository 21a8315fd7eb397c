#!/usr/bin/env bash
# demo.sh - start kvshared and show workers sharing a prompt prefix through it.
#
#   scripts/demo.sh [--stats] [--keep]
#
# Builds (installing missing Debian packages), starts a private daemon on a
# socket in a fresh temporary directory, runs four real worker processes
# (kvsbench share) that share a 4096-token prefix, sums up from the daemon's
# own counters what was shared and reused, and stops the daemon.
#   --stats  print every counter of the daemon (kvsctl stats) too
#   --keep   leave the daemon running in the foreground afterwards (its log
#            follows on the terminal); Ctrl-C stops it.
# KVS_DEMO_BUILD=0 skips the build and uses what is in $BUILD_DIR (the tests).
set -euo pipefail

usage() {
	sed -n '3,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
}

keep=0
show_stats=0
for arg in "$@"; do
	case $arg in
	--keep) keep=1 ;;
	--stats) show_stats=1 ;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		echo "demo.sh: unknown argument: $arg" >&2
		usage
		exit 2
		;;
	esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${BUILD_DIR:-build}
READY_TIMEOUT=${KVS_READY_TIMEOUT:-30}
STOP_TIMEOUT=10

if [[ ${KVS_DEMO_BUILD:-1} != 0 ]]; then
	echo "demo.sh: building (scripts/build.sh) ..."
	scripts/build.sh >/dev/null
fi

tmp=$(mktemp -d -t kvshare-demo.XXXXXX)
sock=$tmp/kvshared.sock
log=$tmp/kvshared.log
daemon_pid=
tail_pid=

# stop_daemon - SIGTERM, then wait up to STOP_TIMEOUT seconds for it to exit
# (SIGKILL after that). Returns the daemon's exit status.
stop_daemon() {
	local pid=$daemon_pid status=0

	[[ -n $pid ]] || return 0
	daemon_pid=
	kill -TERM "$pid" 2>/dev/null || true
	if ! timeout "$STOP_TIMEOUT" tail --pid="$pid" -s 0.1 -f /dev/null; then
		echo "demo.sh: kvshared did not exit ${STOP_TIMEOUT}s after SIGTERM; killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" || status=$?
	return "$status"
}

cleanup() {
	stop_daemon || true
	# tail follows the log until the daemon is gone, so it shows its last
	# lines and then ends by itself (within its 0.2 s poll).
	[[ -z $tail_pid ]] || wait "$tail_pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# show_log_and_die - the daemon's log explains most failures.
show_log_and_die() {
	echo "demo.sh: $*" >&2
	if [[ -s $log ]]; then
		echo "--- kvshared log ---" >&2
		tail -n 40 "$log" >&2
	fi
	exit 1
}

# Start the daemon; it writes "READY" to fd 3 (a fifo) once it serves the
# socket. Both ends of a fifo block on open until the other opens, and the
# daemon's end is opened by its shell before exec, so neither open can hang;
# if the daemon dies first, the read sees end-of-file at once.
mkfifo "$tmp/ready"
"$BUILD_DIR/kvshared" --socket "$sock" --host-size 1G --ready-fd 3 \
	3>"$tmp/ready" </dev/null 2>"$log" &
daemon_pid=$!
exec {ready_fd}<"$tmp/ready"
line=
read -r -t "$READY_TIMEOUT" -u "$ready_fd" line || true
exec {ready_fd}<&-
[[ $line == READY* ]] ||
	show_log_and_die "kvshared did not report READY within ${READY_TIMEOUT}s (got: '${line}')"
echo "kvshared (pid $daemon_pid) is serving $sock"

echo
echo "== 4 workers share a 4096-token prefix (kvsbench share) =="
# The table shows each worker's view; its last line (JSON, for scripts) is
# kept for the check below.
bench=$("$BUILD_DIR/kvsbench" --socket "$sock" share --workers 4 \
	--prefix-tokens 4096 --suffix-tokens 512 --layers 8 --kv-heads 8 \
	--head-dim 128 --block-tokens 16) ||
	show_log_and_die "kvsbench share failed"
printf '%s\n' "$bench" | grep -v '^{'

if ((show_stats)); then
	echo
	echo "== kvsctl stats =="
	"$BUILD_DIR/kvsctl" --socket "$sock" stats ||
		show_log_and_die "kvsctl stats failed"
fi

# The summary reads the daemon's counters as JSON, the format meant for
# scripts, and checks them against what the workers counted themselves.
stats_json=$("$BUILD_DIR/kvsctl" --socket "$sock" stats --json) ||
	show_log_and_die "kvsctl stats --json failed"
echo
echo "== what was shared and reused, as the daemon counted it =="
python3 - "$stats_json" "$(printf '%s\n' "$bench" | grep '^{' | tail -n 1)" <<'PY' ||
import json, sys
s, w = json.loads(sys.argv[1]), json.loads(sys.argv[2])
b, ns = s["blocks"], s["namespace"]
bb = ns["1.block_bytes"]  # kvsbench made one namespace
hit, miss = b["lookup_hit"], b["lookup_miss"]
fast, sock = s["fast"]["lookups"], s["ops"]["lookup"]
print(f"published:  {b['committed']} blocks, each written once ({b['committed'] * bb / 2**20:.1f} "
      f"MiB); {b['reserve_exists']} were cached already, not written again")
print(f"reused:     {hit} blocks, {hit * bb / 2**20:.1f} MiB of KV loaded from the cache "
      "instead of recomputed")
print(f"hit ratio:  {s['derived']['hit_ratio']:.2f} ({hit} of {hit + miss} blocks looked up)")
print(f"lookups:    {fast} answered on the fast path (shared memory, no request), "
      f"{sock} over the socket")
print(f"counters:   blocks.lookup_hit {hit}, blocks.lookup_miss {miss}, "
      f"blocks.committed {b['committed']}, blocks.reserve_exists {b['reserve_exists']}")
if (hit, miss) != (w["hit_blocks"], w["miss_blocks"]):
    sys.exit(f"demo.sh: the daemon counted {hit} hits and {miss} misses, "
             f"the workers {w['hit_blocks']} and {w['miss_blocks']}")
print("            (the same hits and misses as the workers' table above)")
PY
	show_log_and_die "the daemon's counters disagree with the workers'"
((show_stats)) || echo "every counter: scripts/demo.sh --stats, or kvsctl stats"

if ((keep)); then
	echo
	echo "kvshared keeps running (pid $daemon_pid); Ctrl-C stops it."
	echo "  socket: $sock"
	echo "  try:    $BUILD_DIR/kvsctl --socket $sock stats"
	echo "--- kvshared log (following) ---"
	# tail in the background and wait on the daemon: wait, unlike a
	# foreground command, returns at once when a trapped signal arrives.
	tail -n +1 -f -s 0.2 --pid="$daemon_pid" "$log" &
	tail_pid=$!
	status=0
	wait "$daemon_pid" || status=$?
	daemon_pid=
	wait "$tail_pid" || true
	tail_pid=
	echo "demo.sh: kvshared exited with status $status"
	exit "$status"
fi

status=0
stop_daemon || status=$?
if ((status != 0)); then
	show_log_and_die "kvshared exited with status $status after SIGTERM"
fi
echo "kvshared stopped cleanly (SIGTERM)"
