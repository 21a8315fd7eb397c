#!/usr/bin/env bash
# test_log.sh - a log that cannot be written never stalls the daemon: with
# stderr a pipe that nobody reads, a debug-level daemon keeps serving and
# counts the lines it dropped (server.log_dropped).
set -euo pipefail
name=test_log
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
need_env KVSHARED KVSCTL KVSBENCH
need_cmd python3
make_tmp kvslog
mkfifo "$tmp/err"
# The reader of $tmp/err opens it and then never reads: the pipe fills up.
sleep 600 <"$tmp/err" &
pids+=($!)
start_ready "$tmp/s.sock" "$tmp/err" --host-size 64M --log-level debug
# Each request answered with an error logs a debug line: send 20,000 of them
# (an unknown opcode), far more than the pipe (64 KiB) and the log queue hold.
python3 - "$tmp/s.sock" <<'PY'
import socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
MAGIC, VERSION = 0x3153564B, 1
for i in range(20000):
    s.sendall(struct.pack("<IHHIiQ", MAGIC, VERSION, 99, 0, 0, i + 1))
    got = b""
    while len(got) < 24:
        got += s.recv(24 - len(got))
    status = struct.unpack("<IHHIiQ", got)[4]
    assert status == -2003, status  # KVS_E_OPCODE
PY
dropped=$(timeout 10 "$KVSCTL" --socket "$tmp/s.sock" stats --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["server"]["log_dropped"])')
if [ "$dropped" -gt 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: no line dropped ($dropped)" >&2; fi
# Still serving after all that.
if timeout 10 "$KVSCTL" --socket "$tmp/s.sock" stats >/dev/null; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: not serving" >&2; fi
# And it stops promptly although its writer is stuck on the full pipe.
kill -TERM "$dpid"
if timeout 10 tail --pid="$dpid" -f /dev/null; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: daemon did not stop" >&2; fi
echo "test_log: dropped $dropped lines; $pass passed, $fail failed"
[ "$fail" -eq 0 ]
