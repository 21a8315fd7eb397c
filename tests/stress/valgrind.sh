#!/usr/bin/env bash
# valgrind.sh - memcheck of kvshared through one integration scenario.
#
#   tests/stress/valgrind.sh            (BUILD_DIR=build by default)
#
# Starts the built kvshared under valgrind memcheck (--leak-check=full,
# --error-exitcode=99) on a socket in a fresh mktemp directory, waits for its
# READY line on --ready-fd, runs `kvsbench share` (3 workers publish and hit
# one prefix) and `kvsctl stats` against it, then stops it with SIGTERM. Passes
# when both tools succeed, the daemon exits 0, and memcheck reports no error
# (definite or indirect leaks count as errors). The valgrind log is printed
# on failure and kept when KEEP=1.
#
# Exit 0 pass, 1 fail, 77 skip (valgrind not installed).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD_DIR=${BUILD_DIR:-build}
KVSHARED=$BUILD_DIR/kvshared
KVSBENCH=$BUILD_DIR/kvsbench
KVSCTL=$BUILD_DIR/kvsctl
READY_TIMEOUT=${READY_TIMEOUT:-120} # seconds: valgrind starts slowly
STEP_TIMEOUT=${STEP_TIMEOUT:-300}

if ! command -v valgrind >/dev/null 2>&1; then
	echo "valgrind.sh: SKIP: valgrind is not installed (Debian: apt-get install valgrind)"
	exit 77
fi
for b in "$KVSHARED" "$KVSBENCH" "$KVSCTL"; do
	if [[ ! -x $b ]]; then
		echo "valgrind.sh: FAIL: $b is not built (scripts/build.sh)" >&2
		exit 1
	fi
done

dir=$(mktemp -d -t kvs-valgrind.XXXXXX)
sock=$dir/kvshared.sock
vglog=$dir/valgrind.log
dlog=$dir/kvshared.log
pid=
cleanup() {
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [[ ${KEEP:-0} == 1 ]]; then
		echo "valgrind.sh: keeping $dir"
	else
		rm -rf "$dir"
	fi
}
trap cleanup EXIT

fail() {
	echo "valgrind.sh: FAIL: $*" >&2
	for f in "$dlog" "$vglog"; do
		[[ -s $f ]] || continue
		echo "---- $f (tail) ----" >&2
		tail -n 80 "$f" >&2
	done
	exit 1
}

# The ready pipe: a FIFO held open read-write here, so that opening it for
# the daemon never blocks; the daemon writes "READY" to it once it serves.
mkfifo "$dir/ready"
exec {ready}<>"$dir/ready"
start=$SECONDS
valgrind --error-exitcode=99 --leak-check=full \
	--errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
	--track-origins=yes --log-file="$vglog" \
	"$KVSHARED" --socket "$sock" --host-size 64M --ready-fd 3 \
	3>"$dir/ready" </dev/null >"$dlog" 2>&1 &
pid=$!
got=
while ((SECONDS - start < READY_TIMEOUT)); do
	# A read that times out keeps what it got so far: bash reads a pipe
	# byte by byte, so "READY" can straddle two reads.
	line=
	if read -r -t 1 -u "$ready" line; then
		got+=$line
		break
	fi
	got+=$line
	kill -0 "$pid" 2>/dev/null || break
done
exec {ready}<&-
[[ $got == READY ]] || fail "kvshared under valgrind gave no READY within ${READY_TIMEOUT}s"
echo "valgrind.sh: kvshared ready under valgrind after $((SECONDS - start))s"

# run_tool NAME CMD...: run a client with a time limit; fail with its output.
run_tool() {
	local name=$1 st
	shift
	set +e
	timeout "$STEP_TIMEOUT" "$@" >"$dir/$name.out" 2>&1
	st=$?
	set -e
	if ((st != 0)); then
		cat "$dir/$name.out" >&2
		fail "$name failed: status $st"
	fi
}
run_tool kvsbench "$KVSBENCH" --socket "$sock" share --workers 3 \
	--prefix-tokens 256 --suffix-tokens 64 --layers 2 --kv-heads 2 --head-dim 64 \
	--block-tokens 16
tail -n 3 "$dir/kvsbench.out" | sed 's/^/valgrind.sh: kvsbench: /'
run_tool kvsctl "$KVSCTL" --socket "$sock" stats
echo "valgrind.sh: kvsctl stats: $(wc -l <"$dir/kvsctl.out") lines"

kill -TERM "$pid"
set +e
wait "$pid"
status=$?
set -e
pid=
grep -E 'ERROR SUMMARY|definitely lost|indirectly lost|possibly lost|still reachable' \
	"$vglog" | sed 's/^==[0-9]*== */valgrind.sh: /' || true
((status == 99)) && fail "memcheck found errors (exit status 99)"
((status == 0)) || fail "kvshared exited with status $status on SIGTERM (expected 0)"
grep -q 'ERROR SUMMARY: 0 errors' "$vglog" || fail "memcheck reports errors"
[[ -e $sock ]] && fail "kvshared left its socket $sock behind"
echo "valgrind.sh: ok: no memcheck errors, clean exit ($((SECONDS - start))s)"
