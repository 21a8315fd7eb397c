#!/usr/bin/env bash
# test_cli - kvshared's command line, its signals and socket handling, and the
# tools (kvsctl, kvsbench) against a real daemon, from a shell.
#
# Env: KVSHARED, KVSCTL, KVSBENCH (paths of the built binaries; unset: skip).
# Exit: 0 pass, 1 fail, 77 skip. Waits poll a condition against a deadline
# (readiness: `kvsctl stats` succeeds); nothing waits with a bare sleep.
set -u

name=test_cli
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

need_env KVSHARED KVSCTL KVSBENCH
need_cmd python3

make_tmp kvscli

# start_daemon SOCKET LOG [ARGS...]: start kvshared in the background; sets dpid.
start_daemon() {
	local sock=$1 log=$2
	shift 2
	"$KVSHARED" --socket "$sock" "$@" 2>"$log" &
	dpid=$!
	pids+=("$dpid")
}

# stop_daemon PID [SIGNAL]: signal it, wait up to 10 s for the exit; sets
# status to the exit status (128+N for signal N), or "timeout". Not in $(...):
# only this shell can reap its child.
stop_daemon() {
	local pid=$1 sig=${2:-TERM} deadline=$((SECONDS + 10))
	# bash reports a child killed by a signal ("Killed") on stderr: not ours.
	exec 3>&2 2>/dev/null
	kill "-$sig" "$pid"
	while running "$pid" && ((SECONDS < deadline)); do
		sleep 0.02
	done
	if running "$pid"; then
		kill -KILL "$pid"
		wait "$pid"
		status=timeout
	else
		wait "$pid"
		status=$?
	fi
	exec 2>&3 3>&-
	forget "$pid"
}

# forget PID: reaped; cleanup must never signal its (reusable) number again.
forget() {
	local p keep=()
	for p in "${pids[@]}"; do
		[ "$p" = "$1" ] || keep+=("$p")
	done
	pids=("${keep[@]}")
}

dump() {
	echo "---- $1 ----" >&2
	tail -n 40 "$1" >&2
	echo "---- end ----" >&2
}

# ---- --help, --version, usage errors ---------------------------------------

out=$("$KVSHARED" --help 2>&1)
check "kvshared --help exits 0" test $? -eq 0
for flag in --socket --host-size --page-size --log-level --ready-fd \
	--max-clients --max-leases --max-pinned-blocks --client-timeout \
	--metrics-max-connections --metrics-timeout \
	--socket-mode --allow-uid --allow-gid --admin-uid --help --version; do
	check "kvshared --help lists $flag" grep -q -e "$flag" <<<"$out"
done

out=$("$KVSHARED" --version 2>&1)
check "kvshared --version exits 0" test $? -eq 0
check "kvshared --version prints a version" grep -Eq '[0-9]+\.[0-9]+' <<<"$out"

usage_error() {
	local sock="$tmp/never.sock" rc
	timeout 10 "$KVSHARED" --socket "$sock" "$@" >"$tmp/usage.out" 2>"$tmp/usage.err"
	rc=$?
	if [ "$rc" -eq 2 ]; then ok; else bad "kvshared $* exits $rc, expected 2"; fi
	check "kvshared $* explains itself on stderr" test -s "$tmp/usage.err"
	check "kvshared $* creates no socket" test ! -e "$sock"
}
usage_error --bogus
usage_error --host-size 12Q
usage_error --host-size abc
usage_error --host-size 0
usage_error --host-size -5M
usage_error --host-size
# More than RAM + swap (1000 TiB: no machine this runs on has that much): refused.
usage_error --host-size 1000T
check "kvshared --host-size 1000T says it is more than the machine's memory" \
	grep -q "^kvshared: --host-size: 1024000.0 GiB is more than this machine's memory (RAM" "$tmp/usage.err"
usage_error --page-size 1000
usage_error --log-level loud
usage_error --max-clients 0
usage_error --max-leases -1
usage_error --max-pinned-blocks 0
usage_error --client-timeout soon
usage_error --socket-mode 0400
usage_error --socket-mode 0600x
usage_error --allow-uid 1,,2
usage_error --allow-gid no-such-group-kvshare
usage_error unexpected-argument

# ---- a daemon, and the tools against it -----------------------------------

sock="$tmp/a.sock"
log="$tmp/a.log"
start_daemon "$sock" "$log" --host-size 16M
a=$dpid
if ! wait_ready "$sock" "$a"; then
	bad "kvshared did not become ready on $sock"
	dump "$log"
	echo "$name: $pass checks passed, $fail failed"
	exit 1
fi
ok
check "kvshared logs a line to stderr when listening" test -s "$log"
check "the socket exists" test -S "$sock"

out=$("$KVSCTL" --socket "$sock" stats 2>&1)
check "kvsctl stats exits 0" test $? -eq 0
check "kvsctl stats shows the daemon's pid" grep -Eqw -e "$a" <<<"$out"

json=$("$KVSCTL" --socket "$sock" stats --json 2>"$tmp/json.err")
check "kvsctl stats --json exits 0" test $? -eq 0
check "kvsctl stats --json is JSON" python3 -c 'import json,sys; json.load(sys.stdin)' <<<"$json"
check "kvsctl stats --json has server pid $a and tier_host bytes_total 16M" \
	python3 -c '
import json, sys
d = json.load(sys.stdin)
def get(sec, key):
    if sec in d and isinstance(d[sec], dict):
        return d[sec].get(key)
    return d.get(sec + "." + key)
sys.exit(0 if get("server", "pid") == int(sys.argv[1]) and
         get("tier_host", "bytes_total") == 16 << 20 else 1)
' "$a" <<<"$json"

# A second daemon on a live socket refuses, and the first one goes on.
timeout 15 "$KVSHARED" --socket "$sock" --host-size 16M 2>"$tmp/second.err" >/dev/null
rc=$?
if [ "$rc" -eq 1 ]; then ok; else bad "a second daemon on a live socket exits $rc, expected 1"; fi
check "the second daemon says 'already'" grep -q already "$tmp/second.err"
check "the first daemon still serves" "$KVSCTL" --socket "$sock" stats >/dev/null
check "the first daemon's socket is still there" test -S "$sock"

# kvsbench: worker 1 publishes the prefix, workers 2-4 hit all of it.
bench=$(timeout 120 "$KVSBENCH" --socket "$sock" share --workers 4 --prefix-tokens 256 \
	--suffix-tokens 64 --layers 2 --kv-heads 2 --head-dim 64 --block-tokens 16 \
	2>"$tmp/bench.err")
rc=$?
check "kvsbench share exits 0 (got $rc)" test "$rc" -eq 0
last=$(tail -n 1 <<<"$bench")
if python3 -c '
import json, sys
r = json.loads(sys.argv[1])
sys.exit(0 if r["corrupt_blocks"] == 0 and r["hit_blocks"] >= 3 * 16 else 1)
' "$last" 2>"$tmp/bench.py.err"; then
	ok
else
	bad "kvsbench share: want corrupt_blocks 0 and hit_blocks >= 48 in the last line: $last"
	cat "$tmp/bench.err" "$tmp/bench.py.err" >&2
fi

# derived.hit_ratio counts the fast path's hits (replayed by the daemon) and
# misses with the socket's: workers 2-4 hit 48 of the 80 blocks asked for.
json=$("$KVSCTL" --socket "$sock" stats --json 2>"$tmp/json2.err")
check "kvsctl stats' derived.hit_ratio counts fast-path hits too" python3 -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(0 if 0.4 <= d["derived"]["hit_ratio"] <= 0.8 else 1)
' <<<"$json"

# The global --socket in either place: after the command too, in both tools.
# The default socket (under an empty XDG_RUNTIME_DIR) has no daemon, so a
# command succeeds only if it used the --socket given after its name.
nodaemon=$tmp/xdg-empty
mkdir -p "$nodaemon"
after() { XDG_RUNTIME_DIR=$nodaemon timeout 60 "$@"; }
check "kvsctl stats without --socket fails here (no default daemon)" \
	bash -c '! XDG_RUNTIME_DIR=$1 "$2" stats >/dev/null 2>&1' _ "$nodaemon" "$KVSCTL"
for form in "--socket $sock" "--socket=$sock" "-s $sock" "-s$sock"; do
	# shellcheck disable=SC2086 # the form is split on purpose
	out=$(after "$KVSCTL" stats $form 2>&1)
	check "kvsctl stats $form (after the command) reaches the daemon: $out" \
		grep -Eqw -e "$a" <<<"$out"
done
out=$(after "$KVSCTL" stats --json --socket "$sock" 2>&1)
check "kvsctl stats --json --socket S is JSON from the daemon" \
	python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if d["server"]["pid"] == int(sys.argv[1]) else 1)' "$a" <<<"$out"
out=$(after "$KVSCTL" --socket "$tmp/none.sock" stats --socket "$sock" 2>&1)
check "the last --socket wins, as with getopt: $out" grep -Eqw -e "$a" <<<"$out"
after "$KVSCTL" stats --socket >/dev/null 2>"$tmp/noarg.err"
rc=$?
check "kvsctl stats --socket without a path is a usage error (rc $rc)" test "$rc" -eq 2
check "... and says so" grep -q "requires an argument" "$tmp/noarg.err"
bench=$(after "$KVSBENCH" share --socket "$sock" --workers 2 --prefix-tokens 256 \
	--suffix-tokens 16 --layers 2 --kv-heads 2 --head-dim 64 --json-only 2>&1)
rc=$?
check "kvsbench share --socket S (after the command) exits 0 (rc $rc): $bench" test "$rc" -eq 0
check "kvsbench share --socket S hit the shared prefix" \
	python3 -c 'import json,sys; r=json.loads(sys.argv[1].splitlines()[-1]); sys.exit(0 if r["hit_blocks"] >= 16 and r["corrupt_blocks"] == 0 else 1)' "$bench"
for tool in "$KVSCTL" "$KVSBENCH"; do
	help=$("$tool" --help 2>&1)
	check "${tool##*/} --help says once that --socket may follow COMMAND" \
		test "$(grep -c 'may also follow COMMAND' <<<"$help")" -eq 1
done

# SIGTERM: exit 0, socket removed.
stop_daemon "$a" TERM
check "SIGTERM: kvshared exits 0 (got $status)" test "$status" = 0
check "SIGTERM: the socket is removed" test ! -e "$sock"
[ "$fail" -eq 0 ] || dump "$log"

# kvsctl without a daemon fails, and says so.
"$KVSCTL" --socket "$sock" stats >/dev/null 2>"$tmp/ctl.err"
rc=$?
check "kvsctl stats without a daemon fails" test "$rc" -ne 0
check "kvsctl names itself in its error" grep -q 'kvsctl' "$tmp/ctl.err"

# ---- stale sockets ---------------------------------------------------------

# Left behind by a killed daemon.
sock="$tmp/b.sock"
start_daemon "$sock" "$tmp/b1.log" --host-size 8M
check "daemon b1 ready" wait_ready "$sock" "$dpid"
stop_daemon "$dpid" KILL
check "SIGKILL: killed (got $status)" test "$status" = 137
check "SIGKILL leaves the socket file" test -S "$sock"
start_daemon "$sock" "$tmp/b2.log" --host-size 8M
if wait_ready "$sock" "$dpid"; then ok; else
	bad "a daemon did not replace the stale socket of a killed one"
	dump "$tmp/b2.log"
fi
stop_daemon "$dpid" TERM
check "daemon b2 exits 0 on SIGTERM (got $status)" test "$status" = 0

# Made by something else that is gone.
sock="$tmp/c.sock"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$sock"
check "python left a socket file" test -S "$sock"
start_daemon "$sock" "$tmp/c.log" --host-size 8M
if wait_ready "$sock" "$dpid"; then ok; else
	bad "a daemon did not replace a stale socket file"
	dump "$tmp/c.log"
fi
stop_daemon "$dpid" TERM
check "daemon c exits 0 on SIGTERM (got $status)" test "$status" = 0
check "daemon c removed its socket" test ! -e "$sock"

echo "$name: $pass checks passed, $fail failed"
[ "$fail" -eq 0 ]
