#!/usr/bin/env bash
# test_kvsctl_timeout - kvsctl against a daemon that is stopped (SIGSTOP):
# each command fails within its deadline (--timeout MS, or
# $KVSHARE_TIMEOUT_MS) with "daemon connection lost", exit 1, instead of
# hanging; `verify` too when a deadline is set; a bad --timeout is a usage
# error (exit 2); after SIGCONT the same commands work.
#
# Env: KVSHARED, KVSCTL (paths of the built binaries; unset: skip).
# Exit: 0 pass, 1 fail, 77 skip. The daemon is SIGCONTed and killed on every
# way out (lib.sh's cleanup); a command still running after 30 s is killed
# (a hang, which fails the test).
set -u

name=test_kvsctl_timeout
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

need_env KVSHARED KVSCTL
make_tmp kvstmo
sock=$tmp/kvshared.sock
start_ready "$sock" "$tmp/kvshared.log" --host-size 16M || {
	cat "$tmp/kvshared.log" >&2
	bad "kvshared did not start"
	exit 1
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# stopped_fails WANT_MS WHAT ARGS...: kvsctl ARGS exits 1 saying the daemon
# connection was lost, after at least WANT_MS and before the 5 s default.
stopped_fails() {
	local want=$1 what=$2 t0 took st
	shift 2
	t0=$(now_ms)
	timeout 30 "$KVSCTL" --socket "$sock" "$@" >"$tmp/out" 2>"$tmp/err"
	st=$?
	took=$(($(now_ms) - t0))
	echo "$name: $what: exit $st after $took ms: $(head -n1 "$tmp/err")"
	check "$what: exit 1 (got $st)" [ "$st" = 1 ]
	check "$what: says the connection was lost" grep -q "daemon connection lost" "$tmp/err"
	check "$what: waited its deadline ($took >= $want ms)" [ "$took" -ge "$want" ]
	check "$what: not the 5 s default ($took < 5000 ms)" [ "$took" -lt 5000 ]
}

"$KVSCTL" --socket "$sock" --timeout 0 stats 2>"$tmp/err"
check "--timeout 0: usage error (exit 2)" [ $? = 2 ]
check "--timeout 0: says why" grep -q "bad --timeout" "$tmp/err"

kill -STOP "$dpid"
stopped_fails 300 "stats --timeout 300" --timeout 300 stats
stopped_fails 300 "ls --timeout 300" --timeout 300 ls
stopped_fails 300 "verify --timeout 300" --timeout 300 verify
KVSHARE_TIMEOUT_MS=400 stopped_fails 400 "stats, KVSHARE_TIMEOUT_MS=400" stats
kill -CONT "$dpid"

timeout 30 "$KVSCTL" --socket "$sock" --timeout 300 stats >/dev/null
check "after SIGCONT: stats works" [ $? = 0 ]
timeout 30 "$KVSCTL" --socket "$sock" --timeout 300 verify >/dev/null
check "after SIGCONT: verify works" [ $? = 0 ]

kill -TERM "$dpid"
wait "$dpid"
check "kvshared exits 0 on SIGTERM" [ $? = 0 ]
echo "$name: $pass passed, $fail failed"
((fail == 0))
