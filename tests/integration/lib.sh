# lib.sh - the common part of the shell integration tests, sourced by
# tests/integration/*/test_*.sh after they set `name`:
#
#   name=test_x
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   need_env KVSHARED KVSCTL KVSBENCH
#   need_cmd python3
#   make_tmp kvsx
#   ...
#
# Counters: ok, bad WHAT, check WHAT CMD..., skip WHY (exit 77). Processes
# the test starts go in pids: cleanup (on EXIT) SIGCONTs and SIGKILLs them,
# then removes $tmp (kept, and said, when TH_KEEP is set); a test with more
# to undo defines on_cleanup. Waits poll a condition against a deadline.
# Works under `set -u` and `set -euo pipefail` alike. Not a test itself
# (ctest runs test_*.sh only).

pass=0
fail=0
tmp=
pids=()

ok() { pass=$((pass + 1)); }
bad() {
	fail=$((fail + 1))
	echo "$name: FAIL: $*" >&2
}
# check WHAT CMD...: passes when CMD succeeds.
check() {
	local what=$1
	shift
	if "$@"; then ok; else bad "$what"; fi
}
skip() {
	echo "$name: SKIP: $*"
	exit 77
}

# need_env VAR...: skip unless each VAR names an executable (ctest sets them).
need_env() {
	local var
	for var in "$@"; do
		[ -n "${!var:-}" ] || skip "$var is not set (run through ctest)"
		[ -x "${!var}" ] || skip "$var=${!var} is not executable"
	done
}

# need_cmd CMD [WHY]: skip unless CMD is on PATH.
need_cmd() {
	command -v "$1" >/dev/null || skip "${2:-$1 is not installed}"
}

cleanup() {
	local p
	declare -F on_cleanup >/dev/null && on_cleanup
	for p in "${pids[@]}"; do
		kill -CONT "$p" 2>/dev/null || :
		kill -KILL "$p" 2>/dev/null || :
	done
	{ wait; } 2>/dev/null
	[ -n "$tmp" ] || return 0
	if [ -n "${TH_KEEP:-}" ]; then
		echo "$name: keeping $tmp" >&2
	else
		rm -rf "$tmp"
	fi
}

# make_tmp PREFIX: a new directory in $TMPDIR as tmp; cleanup on EXIT.
make_tmp() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1-XXXXXX") || exit 1
	trap cleanup EXIT
}

# wait_for SECONDS CMD...: poll CMD until it succeeds or the deadline passes.
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	while ((SECONDS < deadline)); do
		"$@" && return 0
		sleep 0.05
	done
	"$@"
}

# running PID: the process exists and is not a zombie.
running() {
	local state
	state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
	[ "$state" != Z ]
}

# wait_ready SOCKET PID: poll `kvsctl stats` until it succeeds (15 s at most),
# failing early if the daemon exits.
wait_ready() {
	local sock=$1 pid=$2 deadline=$((SECONDS + 15))
	while ((SECONDS < deadline)); do
		"$KVSCTL" --socket "$sock" stats >/dev/null 2>&1 && return 0
		running "$pid" || return 1
		sleep 0.02
	done
	return 1
}

# start_ready SOCKET LOG ARGS...: start kvshared on SOCKET with ARGS, its
# stderr appended to LOG, and wait (15 s at most) for the READY line of its
# --ready-fd, through a fifo in $tmp. Sets dpid (also added to pids).
start_ready() {
	local sock=$1 log=$2
	shift 2
	rm -f "$tmp/ready"
	mkfifo "$tmp/ready" || return 1
	"$KVSHARED" --socket "$sock" --ready-fd 3 "$@" 3>"$tmp/ready" 2>>"$log" &
	dpid=$!
	pids+=("$dpid")
	timeout 15 head -n1 "$tmp/ready" | grep -q READY
}
