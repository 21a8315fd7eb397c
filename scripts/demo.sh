#!/usr/bin/env bash
# demo.sh - start kvshared and show workers sharing a prompt prefix through it.
#
#   scripts/demo.sh [--keep]
#
# Builds (installing missing Debian packages), starts a private daemon on a
# socket in a fresh temporary directory, runs four real worker processes
# (kvsbench share) that share a 4096-token prefix, prints the daemon's stats
# and a summary, and stops the daemon.
#   --keep   leave the daemon running in the foreground afterwards (its log
#            follows on the terminal); Ctrl-C stops it.
set -euo pipefail

usage() {
	sed -n '3,11s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
}

keep=0
for arg in "$@"; do
	case $arg in
	--keep) keep=1 ;;
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

echo "demo.sh: building (scripts/build.sh) ..."
scripts/build.sh >/dev/null

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
"$BUILD_DIR/kvsbench" --socket "$sock" share --workers 4 \
	--prefix-tokens 4096 --suffix-tokens 512 --layers 8 --kv-heads 8 \
	--head-dim 128 --block-tokens 16 ||
	show_log_and_die "kvsbench share failed"

echo
echo "== kvsctl stats =="
stats=$("$BUILD_DIR/kvsctl" --socket "$sock" stats) ||
	show_log_and_die "kvsctl stats failed"
printf '%s\n' "$stats"

# The summary reads the same counters as JSON, the format meant for scripts.
stats_json=$("$BUILD_DIR/kvsctl" --socket "$sock" stats --json) ||
	show_log_and_die "kvsctl stats --json failed"
echo
echo "== summary =="
python3 -c '
import json, sys
s = json.loads(sys.argv[1])
b = s["blocks"]
block_bytes = s.get("namespace", {}).get("1.block_bytes", 0)  # kvsbench made one
hits, misses, ratio = b["lookup_hit"], b["lookup_miss"], s["derived"]["hit_ratio"]
reused = hits * block_bytes
print(f"hits:         {hits} of {hits + misses} blocks looked up (hit ratio {ratio:.2f})")
print(f"bytes reused: {reused} ({reused / 2**20:.1f} MiB of KV loaded from the cache")
print(f"              instead of recomputed; {block_bytes} bytes per block)")
print("published:    %d blocks, each written once" % b["committed"])
' "$stats_json"

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
