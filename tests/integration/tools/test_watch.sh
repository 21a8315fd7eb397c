#!/usr/bin/env bash
# test_watch - `kvsctl watch --json` as a process, end to end:
#  order:  kvsbench share commits, then `kvsctl flush --all`: the watcher
#          prints one "stored" line per committed block (each of them a block
#          `kvsctl inspect` finds), then one "flushed" line for each of the
#          same hashes, seq numbered 1, 2, ... without a gap, dropped 0.
#  slow:   a watcher (--json; then one without) stopped with SIGSTOP while traffic makes more events
#          than --watch-buffer holds: the daemon keeps serving (every
#          kvsbench run and `kvsctl stats` completes), counts events.dropped;
#          after SIGCONT the watcher is told ("dropped" > 0), its seq gaps add
#          up to exactly what the daemon dropped, and it sees every event the
#          daemon published. Without --json the watcher says
#          "-- N event(s) dropped before seq S" right before each gap, and
#          the N add up to what the daemon dropped.
#
# Env: KVSHARED, KVSCTL, KVSBENCH (set by ctest). Exit: 0 pass, 1 fail,
# 77 skip. Waits poll a condition against a deadline.
set -u

name=test_watch
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

need_env KVSHARED KVSCTL KVSBENCH
need_cmd python3
need_cmd timeout "timeout (coreutils) is not installed"

make_tmp kvswatch

# stat SECTION.NAME: one counter of `kvsctl stats` (a section line, then
# indented "name value" lines).
stat() {
	"$KVSCTL" --socket "$sock" stats |
		awk -v k="$1" '/^[^ ]/ { s = $1 } /^  / && s "." $1 == k { print $2 }'
}
lines() { [ "$(wc -l <"$1")" -ge "$2" ]; }

# daemon NAME ARGS...: start one; sets sock and dpid.
daemon() {
	local n=$1
	shift
	sock=$tmp/$n.sock
	"$KVSHARED" --socket "$sock" "$@" 2>"$tmp/$n.log" &
	dpid=$!
	pids+=("$dpid")
	wait_for 15 "$KVSCTL" --socket "$sock" stats >/dev/null 2>&1 ||
		{ tail -n 20 "$tmp/$n.log" >&2; bad "$n: the daemon did not come up"; exit 1; }
}

# watcher NAME [plain]: `kvsctl watch --json` (plain: without --json) in the
# background, subscribed when this returns; sets wpid.
watcher() {
	local n=$1 fmt=(--json)
	[ "${2:-}" = plain ] && fmt=()
	"$KVSCTL" --socket "$sock" watch "${fmt[@]}" >"$tmp/$n.out" 2>"$tmp/$n.err" &
	wpid=$!
	pids+=("$wpid")
	wait_for 10 grep -q '^kvsctl: watching' "$tmp/$n.err" ||
		{ bad "$n: the watcher did not subscribe"; cat "$tmp/$n.err" >&2; exit 1; }
}

# bench SALT [ARGS]: one kvsbench share run with small blocks (1 KiB).
bench() {
	local salt=$1
	shift
	timeout 60 "$KVSBENCH" --socket "$sock" share --workers 2 --layers 1 \
		--kv-heads 1 --head-dim 16 --salt "$salt" --json-only "$@" \
		>"$tmp/bench.out" 2>&1
}

# ---- order -------------------------------------------------------------------
daemon order --host-size 16M
watcher order
bench s0 --prefix-tokens 512 --suffix-tokens 64 && ok || { bad "kvsbench failed"; cat "$tmp/bench.out" >&2; }
committed=$(stat blocks.committed)
[ "${committed:-0}" -gt 0 ] && ok || bad "nothing committed"
wait_for 10 lines "$tmp/order.out" "$committed" && ok || bad "not $committed stored lines"
# Every stored hash is a cached, committed block now.
inspected=0
for h in $(python3 -c 'import json,sys
for l in open(sys.argv[1]): print(json.loads(l)["hash"])' "$tmp/order.out"); do
	"$KVSCTL" --socket "$sock" inspect --json "$h" |
		grep -q '"namespace":1,.*"state":"ready"' && inspected=$((inspected + 1))
done
[ "$inspected" = "$committed" ] && ok || bad "inspect found $inspected of $committed stored blocks"
"$KVSCTL" --socket "$sock" flush --all --json >"$tmp/flush.json" && ok || bad "flush --all failed"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["freed"]==int(sys.argv[2]), d' \
	"$tmp/flush.json" "$committed" && ok || bad "flush freed: $(cat "$tmp/flush.json")"
wait_for 10 lines "$tmp/order.out" $((2 * committed)) && ok || bad "not $((2 * committed)) lines"
python3 - "$tmp/order.out" "$committed" <<'EOF' && ok || bad "the event stream is wrong"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
n = int(sys.argv[2])
assert len(ev) == 2 * n, (len(ev), n)
assert [e["seq"] for e in ev] == list(range(1, 2 * n + 1)), "seq has a gap or is out of order"
assert all(e["event"] == "stored" for e in ev[:n]), [e["event"] for e in ev[:n]]
assert all(e["event"] == "flushed" for e in ev[n:]), [e["event"] for e in ev[n:]]
stored = [e["hash"] for e in ev[:n]]
flushed = [e["hash"] for e in ev[n:]]
assert len(set(stored)) == n, "a block stored twice"
assert set(stored) == set(flushed), "flushed blocks are not the stored ones"
assert all(e["namespace"] == 1 and e["dropped"] == 0 for e in ev)
assert all(len(e["hash"]) == 32 and int(e["hash"], 16) >= 0 for e in ev)
EOF
kill -TERM "$wpid"
wait "$wpid"
[ $? = 0 ] && ok || bad "watch did not exit 0 on SIGTERM"
[ "$(stat events.dropped)" = 0 ] && ok || bad "events dropped with a fast watcher"
kill -TERM "$dpid"
wait "$dpid"

# ---- slow watcher ------------------------------------------------------------
# stall NAME: stop the watcher, make traffic until the daemon drops events
# for it, let it go, and publish one more event (which tells it); sets
# served, published and dropped.
stall() {
	local i
	kill -STOP "$wpid"
	# 1024-block commits (32 KiB of events each) until the daemon drops
	# some: first the socket buffer fills, then the 64 KiB it keeps per
	# watcher.
	served=0
	for i in $(seq 1 60); do
		bench "$1$i" --prefix-tokens 16384 --suffix-tokens 256 || { bad "kvsbench run $i failed while the watcher was stopped"; break; }
		timeout 10 "$KVSCTL" --socket "$sock" stats >/dev/null || { bad "stats did not answer while the watcher was stopped"; break; }
		served=$((served + 1))
		[ "$(stat events.dropped)" -gt 0 ] && break
	done
	dropped=$(stat events.dropped)
	[ "${dropped:-0}" -gt 0 ] && ok || bad "$1: no events dropped after $served runs"
	grep -q 'R\|S' <(awk '{print $3}' "/proc/$wpid/stat") && bad "$1: the watcher was not stopped" || ok
	kill -CONT "$wpid"
	# One more event after the drop tells the watcher.
	bench "$1-after" --prefix-tokens 16 --suffix-tokens 0 && ok || bad "$1: kvsbench after SIGCONT failed"
	published=$(stat events.published)
	dropped=$(stat events.dropped)
}

daemon slow --host-size 64M --watch-buffer 64K
watcher slow
stall slow
wait_for 20 lines "$tmp/slow.out" "$published" && ok ||
	bad "the watcher has $(wc -l <"$tmp/slow.out") of $published published events"
python3 - "$tmp/slow.out" "$published" "$dropped" <<'EOF' && ok || bad "slow watcher's stream is wrong"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
published, dropped = int(sys.argv[2]), int(sys.argv[3])
seqs = [e["seq"] for e in ev]
assert len(ev) == published, (len(ev), published)
assert all(b > a for a, b in zip(seqs, seqs[1:])), "seq not increasing"
gaps = sum(b - a - 1 for a, b in zip([0] + seqs, seqs))
assert gaps == dropped, ("seq gaps", gaps, "dropped", dropped)
assert seqs[-1] == published + dropped
assert ev[-1]["dropped"] == dropped, (ev[-1]["dropped"], dropped)
# The count changes right where the gaps are, never before.
told = 0
for a, e in zip([0] + seqs, ev):
    told += e["seq"] - a - 1
    assert e["dropped"] == told, (e, told)
EOF
kill -TERM "$wpid"
wait "$wpid"
[ $? = 0 ] && ok || bad "the slow watcher did not exit 0"
kill -TERM "$dpid"
wait "$dpid"

# ---- slow watcher, lines for people (no --json) ----------------------------
# It is told too: a "-- N event(s) dropped before seq S: ..." line right
# before the first event after each gap; the N add up to what the daemon
# dropped, and every published event still has its line.
daemon slowh --host-size 64M --watch-buffer 64K
watcher slowh plain
stall slowh
wait_for 20 lines "$tmp/slowh.out" $((published + 1)) && ok ||
	bad "the plain watcher has $(wc -l <"$tmp/slowh.out") lines for $published events"
python3 - "$tmp/slowh.out" "$published" "$dropped" <<'EOF' && ok || bad "plain slow watcher's stream is wrong"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
published, dropped = int(sys.argv[2]), int(sys.argv[3])
note = re.compile(r"^-- (\d+) event\(s\) dropped before seq (\d+): "
                  r"this watcher fell behind \((\d+) in all\)$")
told, last, events, notes = 0, 0, 0, 0
pending = None
for l in lines:
    m = note.match(l)
    if m:
        assert pending is None, ("two notes in a row", l)
        pending = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        continue
    seq = int(l.split()[0])
    gap = seq - last - 1
    if gap:
        assert pending is not None, ("a gap with no note before seq", seq)
        n, at, total = pending
        assert n == gap and at == seq, (pending, gap, seq)
        told += n
        assert total == told, (total, told)
        notes += 1
    else:
        assert pending is None, ("a note without a gap", pending, seq)
    pending = None
    last = seq
    events += 1
assert events == published, (events, published)
assert told == dropped and notes > 0, (told, dropped, notes)
EOF
kill -TERM "$wpid"
wait "$wpid"
[ $? = 0 ] && ok || bad "the plain slow watcher did not exit 0"
kill -TERM "$dpid"
wait "$dpid"
echo "$name: $pass passed, $fail failed (slow watcher: $served runs, $dropped of $((published + dropped)) events dropped)"
((fail == 0))
