#!/usr/bin/env bash
# test_top - `kvsctl top` in a pseudo-terminal (tmux), against a real daemon
# with an SSD tier: the screen shows its labels, the tier bars and, once
# kvsbench share has made traffic, a nonzero hit ratio and the namespace;
# the terminal is in non-canonical mode while it runs; q, Ctrl-C and SIGTERM
# each end it with exit 0, the stty settings as they were and the alternate
# screen left.
#
# Env: KVSHARED, KVSCTL, KVSBENCH (set by ctest). Exit: 0 pass, 1 fail,
# 77 skip (no tmux). Waits poll a condition against a deadline.
set -u

name=test_top
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

need_env KVSHARED KVSCTL KVSBENCH
need_cmd tmux "tmux is not installed (scripts/deps.sh installs it)"
need_cmd pgrep "pgrep is not installed (procps)"

make_tmp kvstop
sock=$tmp/kvshared.sock
TMUX_CMD=(tmux -S "$tmp/tmux.sock" -f /dev/null)
export TERM=${TERM:-xterm}
[ "$TERM" = dumb ] && export TERM=xterm
on_cleanup() { "${TMUX_CMD[@]}" kill-server >/dev/null 2>&1; }

mkdir "$tmp/ssd"
"$KVSHARED" --socket "$sock" --host-size 16M --ssd-dir "$tmp/ssd" \
	--ssd-size 1M --ssd-segment 256K 2>"$tmp/daemon.log" &
dpid=$!
pids+=("$dpid")
if ! wait_for 15 "$KVSCTL" --socket "$sock" stats >/dev/null 2>&1; then
	tail -n 20 "$tmp/daemon.log" >&2
	bad "the daemon did not come up"
	exit 1
fi

# The pane runs this: the terminal settings before and after, top's status.
cat >"$tmp/run.sh" <<EOF
stty -g >"$tmp/\$1.before"
"$KVSCTL" --socket "$sock" top --interval 0.2
echo \$? >"$tmp/\$1.rc.tmp"
stty -g >"$tmp/\$1.after"
mv "$tmp/\$1.rc.tmp" "$tmp/\$1.rc"
EOF

screen() { "${TMUX_CMD[@]}" capture-pane -p -t "$1"; }
shows() { screen "$1" | grep -q -- "$2"; }
# The total hit ratio on the screen is above zero.
hits_shown() {
	screen "$1" | awk '/^hit ratio/ { v = $3; sub("%", "", v); if (v + 0 > 0) f = 1 }
		END { exit !f }'
}
top_pid() { pgrep -P "$("${TMUX_CMD[@]}" display -p -t "$1" '#{pane_pid}')" kvsctl; }

# start CASE: a tmux session CASE running top; waits for its first frame.
start() {
	# remain-on-exit: the pane and its screen outlive top, to be checked.
	"${TMUX_CMD[@]}" new-session -d -s "$1" -x 120 -y 40 "bash $tmp/run.sh $1" \; \
		set-window-option -t "$1" remain-on-exit on >/dev/null ||
		{ bad "$1: tmux new-session failed"; return 1; }
	wait_for 10 shows "$1" "^hit ratio" || { bad "$1: no frame"; screen "$1" >&2; return 1; }
}

# finish CASE: top has exited 0, the terminal is as before, the screen too.
finish() {
	if ! wait_for 10 test -e "$tmp/$1.rc"; then
		bad "$1: top did not exit"
		screen "$1" >&2
		return
	fi
	[ "$(cat "$tmp/$1.rc")" = 0 ] && ok || bad "$1: exit status $(cat "$tmp/$1.rc")"
	cmp -s "$tmp/$1.before" "$tmp/$1.after" && ok ||
		bad "$1: stty settings changed: $(cat "$tmp/$1.before") -> $(cat "$tmp/$1.after")"
}

# ---- q, with traffic ---------------------------------------------------------
if start q; then
	tty=$("${TMUX_CMD[@]}" display -p -t q '#{pane_tty}')
	# While top runs the terminal is not in canonical mode with echo.
	stty -a -F "$tty" | grep -q -- '-icanon' && ok || bad "q: the terminal is not in raw mode"
	for label in "^kvsctl top - " "^ops/s" "^hit ratio" "^clients " "^host  \[" \
		"^ssd   \[" "^NS   MODEL" "events dropped"; do
		shows q "$label" && ok || bad "q: '$label' not on the screen"
	done
	"$KVSBENCH" --socket "$sock" share --workers 2 --prefix-tokens 512 \
		--suffix-tokens 64 --layers 2 --kv-heads 1 --head-dim 64 --json-only \
		>"$tmp/bench.json" 2>&1 && ok || { bad "kvsbench share failed"; cat "$tmp/bench.json" >&2; }
	wait_for 10 hits_shown q && ok || { bad "q: no nonzero hit ratio"; screen q >&2; }
	wait_for 10 shows q "kvsbench-model" && ok || bad "q: the namespace is not listed"
	screen q >"$tmp/q.screen"
	"${TMUX_CMD[@]}" send-keys -t q q
	finish q
	# The alternate screen was left: top's frame is gone from the pane.
	screen q >"$tmp/q.after" 2>&1
	grep -q '^hit ratio' "$tmp/q.screen" && ! grep -q -e 'q: quit' -e '^hit ratio' "$tmp/q.after" &&
		ok || { bad "q: the frame is still on the screen (alternate screen not left)"; cat "$tmp/q.after" >&2; }
fi

# ---- Ctrl-C --------------------------------------------------------------------
if start ctrlc; then
	"${TMUX_CMD[@]}" send-keys -t ctrlc C-c
	finish ctrlc
fi

# ---- SIGTERM -------------------------------------------------------------------
if start term; then
	pid=$(top_pid term)
	if [ -n "$pid" ]; then
		kill -TERM "$pid"
		finish term
	else
		bad "term: no kvsctl process under the pane"
	fi
fi

# ---- batch mode and usage ------------------------------------------------------
out=$("$KVSCTL" --socket "$sock" top --count 2 --interval 0.1 </dev/null)
[ $? = 0 ] && ok || bad "batch: exit status"
[ "$(grep -c '^hit ratio' <<<"$out")" = 2 ] && ok || bad "batch: not two frames: $out"
grep -q $'\033' <<<"$out" && bad "batch: escape sequences in non-tty output" || ok
"$KVSCTL" top --interval 0 >/dev/null 2>&1
[ $? = 2 ] && ok || bad "--interval 0 is not a usage error"
"$KVSCTL" top --help 2>&1 | grep -q '^usage: kvsctl' && ok || bad "top --help"

kill -TERM "$dpid"
wait "$dpid" 2>/dev/null
echo "$name: $pass passed, $fail failed"
((fail == 0))
