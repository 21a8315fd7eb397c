#!/usr/bin/env bash
# test_deps_lock - scripts/deps.sh waits for another apt's locks instead of
# failing, and gives up, saying why, past KVS_APT_LOCK_TIMEOUT.
#
# The locks are the real ones (/var/lib/dpkg/lock-frontend and
# /var/lib/apt/lists/lock), held the way apt-get holds them (fcntl locks, by
# a python3 process) for a few seconds. Nothing is installed: deps.sh runs
# with KVS_DEPS_PACKAGES naming one package dpkg does not know (so it is
# "missing"), and finds a stand-in apt-get first on PATH that only records
# how it was called (and whether the holder had let go by then) and
# installs nothing, so deps.sh ends with "still not installed", exit 1: the
# path it takes after a real apt-get that installs nothing. The stand-in can
# also fail once with apt's "Could not get lock" message, as a real update
# does when another apt takes the lock between deps.sh's wait and its start.
# What this does not show: the real apt-get's DPkg::Lock::Timeout.
#
# Needs root (the locks are root's); skips (77) otherwise, and when another
# apt or dpkg holds a lock right now. Exit: 0 pass, 1 fail, 77 skip.
set -u

name=test_deps_lock
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

deps=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/scripts/deps.sh
[ "$(id -u)" = 0 ] || skip "needs root: the apt and dpkg locks are root's"
need_cmd python3
need_cmd apt-get "apt-get is not installed (not a Debian system)"
[ -r /proc/locks ] || skip "no /proc/locks"
make_tmp kvsdeps
not() { ! "$@"; }

# in the order deps.sh names them
locks=(/var/lib/dpkg/lock-frontend /var/lib/apt/lists/lock)
fake=kvshare-test-no-such-package
dpkg-query -W "$fake" >/dev/null 2>&1 && skip "a package named $fake exists"
unset KVS_SKIP_DEPS KVS_APT_LOCK_TIMEOUT
export KVS_DEPS_PACKAGES=$fake

# The stand-in apt-get: one line per call in $tmp/calls ("ARGS | holder
# released: yes/no"); fails once with a lock message when $tmp/fail-once
# exists.
mkdir "$tmp/bin"
cat >"$tmp/bin/apt-get" <<EOF
#!/usr/bin/env bash
released=no
grep -qx releasing "$tmp/hold.out" 2>/dev/null && released=yes
echo "\$* | holder released: \$released" >>"$tmp/calls"
if [ -e "$tmp/fail-once" ]; then
	rm -f "$tmp/fail-once"
	echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1 (apt-get)" >&2
	exit 100
fi
exit 0
EOF
chmod +x "$tmp/bin/apt-get"
export PATH=$tmp/bin:$PATH

# run_deps NAME [ENV...]: deps.sh with ENV; rc, its stderr in $tmp/NAME.err;
# it must leave nothing in its TMPDIR (it fails here, and its log is only
# kept when apt-get itself fails).
run_deps() {
	local n=$1
	shift
	: >"$tmp/calls"
	mkdir -p "$tmp/tmpdir"
	env TMPDIR="$tmp/tmpdir" "$@" timeout 90 "$deps" >"$tmp/$n.out" 2>"$tmp/$n.err"
	rc=$?
	check "$n: deps.sh leaves no temp file ($(ls "$tmp/tmpdir"))" \
		[ -z "$(ls -A "$tmp/tmpdir")" ]
}

# hold SECONDS: hold every lock in locks for SECONDS in the background (sets
# hpid); $tmp/hold.out gets "held" once they are, "releasing" just before
# they are let go. Skips when one is taken already.
hold() {
	: >"$tmp/hold.out"
	python3 - "$1" "${locks[@]}" >"$tmp/hold.out" 2>&1 <<'EOF' &
import fcntl, os, sys, time
secs, paths = float(sys.argv[1]), sys.argv[2:]
fds = []
for p in paths:
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o640)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print("busy", p, flush=True)
        sys.exit(3)
    fds.append(fd)
print("held", flush=True)
time.sleep(secs)  # the hold itself, as long as another apt's run
print("releasing", flush=True)
for fd in fds:
    fcntl.lockf(fd, fcntl.LOCK_UN)
EOF
	hpid=$!
	pids+=("$hpid")
	wait_for 10 grep -qx 'held\|busy.*' "$tmp/hold.out"
	grep -qx held "$tmp/hold.out" || skip "another apt or dpkg holds a lock now: $(cat "$tmp/hold.out")"
}

update_re='-q -y -o DPkg::Lock::Timeout=[0-9]+ update'
install_re="-q -y -o DPkg::Lock::Timeout=[0-9]+ install --no-install-recommends $fake"

# ---- free: straight to apt-get ----------------------------------------------
hold 0
wait "$hpid"
run_deps free
# update_then_install: the stand-in was called twice: update, then install.
update_then_install() {
	[ "$(wc -l <"$tmp/calls")" -eq 2 ] &&
		sed -n 1p "$tmp/calls" | grep -Eq "^$update_re " &&
		sed -n 2p "$tmp/calls" | grep -Eq "^$install_re "
}
check "locks free: deps.sh runs apt-get update, then install $fake ($(cat "$tmp/calls"))" \
	update_then_install
check "locks free: no wait" not grep -q waiting "$tmp/free.err"
check "locks free: exit 1, $fake still not installed (rc $rc)" [ "$rc" -eq 1 ]
check "... and says so" grep -q "still not installed after apt-get install: $fake" "$tmp/free.err"

# ---- held for 3 s: deps.sh waits, then goes on ------------------------------
hold 3
run_deps wait KVS_APT_LOCK_TIMEOUT=60
check "locks held 3 s: deps.sh says it waits, and for which locks ($(cat "$tmp/wait.err"))" \
	grep -q "waiting for another apt-get or dpkg to finish (it holds ${locks[*]}; up to 60s)" "$tmp/wait.err"
check "... and that they are free" grep -q "the apt locks are free" "$tmp/wait.err"
check "... then runs apt-get update and install ($(cat "$tmp/calls"))" update_then_install
check "... only after the holder let go" \
	[ "$(grep -c '| holder released: yes$' "$tmp/calls")" -eq 2 ]
check "... and ends as without the wait (rc $rc)" \
	grep -q "still not installed after apt-get install: $fake" "$tmp/wait.err"
wait "$hpid"

# ---- a lock taken between the wait and apt-get update: waits again ----------
touch "$tmp/fail-once"
run_deps race KVS_APT_LOCK_TIMEOUT=60
check "update failing on a lock is run again ($(cat "$tmp/calls"))" \
	[ "$(grep -Ec "^$update_re " "$tmp/calls")" -eq 2 ]
check "... saying so" grep -q "apt-get update found a lock taken; waiting again" "$tmp/race.err"
check "... then install runs" grep -Eq "^$install_re " "$tmp/calls"

# ---- held past KVS_APT_LOCK_TIMEOUT: a clear failure ------------------------
hold 30
start=$SECONDS
run_deps late KVS_APT_LOCK_TIMEOUT=2
took=$((SECONDS - start))
check "lock held past the timeout: exit 1 (rc $rc)" [ "$rc" -eq 1 ]
check "... within a few seconds of KVS_APT_LOCK_TIMEOUT=2 (took ${took}s)" [ "$took" -le 10 ]
check "... saying which locks, for how long, and how to wait longer ($(cat "$tmp/late.err"))" \
	grep -q "still holds ${locks[*]} after 2s; gave up (KVS_APT_LOCK_TIMEOUT=N waits longer)" "$tmp/late.err"
check "... without running apt-get ($(cat "$tmp/calls"))" [ ! -s "$tmp/calls" ]
kill "$hpid" 2>/dev/null
wait "$hpid" 2>/dev/null

echo "$name: $pass checks passed, $fail failed"
((fail == 0))
