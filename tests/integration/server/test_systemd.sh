#!/usr/bin/env bash
# test_systemd - the installed unit (docs/examples/kvshared.service.in) under
# a real systemd keeps the pool across `systemctl restart` and across a
# crash: `cmake --install` to a temporary prefix, the unit started, blocks
# published (kvs-pool-fill), `systemctl restart kvshared`: the new kvshared
# started "handed over", every block kept and read back bit exact; SIGKILL
# to the unit's main pid: Restart=on-failure starts the next one with the
# fds the store kept, "recovered", every block bit exact; `systemctl stop`
# drops the store (the runtime directory and its socket go), so the next
# start is cold; a restart with `persist = off` starts cold and removes the
# pool's fds from the store (NFileDescriptorStore: the socket alone).
#
# The systemd is a private one: /lib/systemd/systemd as PID 1 of new PID,
# mount and cgroup namespaces (unshare), with a cgroup2 hierarchy of its own
# (a child of this machine's), its own /run, and a unit path of the
# installed unit and four empty targets alone (nothing of the machine's own
# units runs: no tmpfiles, no journald). It shares the file systems and the
# network with the machine; clients run in its mount namespace (nsenter),
# where /run/kvshare/kvshared.sock is. Needs root, systemd, unshare, nsenter
# and a cgroup2 mount; skipped otherwise, with the reason
# (tests/integration/server/test_fdstore.c covers the protocol under a stand-in).
#
# Env: KVSHARED, KVSCTL, KVS_POOL_FILL (ctest sets them; the build folder is
# KVSHARED's). Exit: 0 pass, 1 fail, 77 skip.
set -u

name=test_systemd
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

need_env KVSHARED KVSCTL KVS_POOL_FILL
[ "$(id -u)" = 0 ] || skip "not root: cannot run a service manager"
need_cmd cmake
need_cmd unshare
need_cmd nsenter
need_cmd systemctl "systemctl is not installed (the systemd package)"
need_cmd python3
sd=
for f in /lib/systemd/systemd /usr/lib/systemd/systemd; do
	[ -x "$f" ] && sd=$f && break
done
[ -n "$sd" ] || skip "no systemd binary (/lib/systemd/systemd: the systemd package)"
cg2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$cg2" ] || skip "no cgroup2 hierarchy mounted (systemd needs one)"
build=$(dirname "$KVSHARED")
[ -f "$build/cmake_install.cmake" ] || skip "$build is not a CMake build folder"

make_tmp kvssd
cg=$cg2/kvs-test-systemd-$$
upid=
on_cleanup() {
	# unshare --kill-child: its systemd, and with it every process of the
	# PID namespace, is killed with it
	[ -n "$upid" ] && kill -KILL "$upid" 2>/dev/null
	[ -n "$upid" ] && { wait "$upid"; } 2>/dev/null
	[ -d "$cg" ] || return 0
	# its processes take a moment to exit: the cgroup is empty then
	local i
	for i in $(seq 100); do
		grep -q "populated 0" "$cg/cgroup.events" 2>/dev/null && break
		sleep 0.05
	done
	find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
	[ ! -d "$cg" ] || echo "$name: could not remove the cgroup $cg" >&2
}

prefix=$tmp/prefix
if ! cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log" >&2
	bad "cmake --install $build --prefix $prefix"
	exit 1
fi
unitdir=$prefix/lib/systemd/system
conf=$prefix/etc/kvshare/kvshared.conf
[ -f "$unitdir/kvshared.service" ] || { bad "no $unitdir/kvshared.service"; exit 1; }
# The sample config, sized for a test: the host tier small, no GPU, no
# metrics port (the network is the machine's).
sed -i -e 's/^host-size *=.*/host-size = 64M/' -e '/^metrics-addr/d' "$conf"
echo "gpu = off" >>"$conf"

units=$tmp/units
mkdir -p "$units/kvshared.service.d"
printf '[Unit]\nDescription=%s\n' "kvshare test boot" >"$units/kvs-boot.target"
for t in sysinit basic shutdown; do
	printf '[Unit]\nDescription=%s\n' "$t" >"$units/$t.target"
done
# No journald here: the daemon's log goes to a file.
printf '[Service]\nStandardOutput=append:%s\nStandardError=append:%s\n' \
	"$tmp/kvshared.log" "$tmp/kvshared.log" >"$units/kvshared.service.d/log.conf"

mkdir "$cg" || skip "cannot make a cgroup under $cg2"
cat >"$tmp/boot.sh" <<EOF
mount -t cgroup2 none /sys/fs/cgroup || exit 1
mount -t tmpfs tmpfs /run || exit 1
exec env -i container=kvs-test PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	SYSTEMD_UNIT_PATH="$units:$unitdir" "$sd" --system --unit=kvs-boot.target
EOF
(
	echo "$BASHPID" >"$cg/cgroup.procs" || exit 1
	exec unshare --pid --fork --kill-child --mount --cgroup --mount-proc \
		bash "$tmp/boot.sh"
) >"$tmp/systemd.log" 2>&1 &
upid=$!
sdpid=
sd_pid() { sdpid=$(ps -o pid= --ppid "$upid" | tr -d ' '); [ -n "$sdpid" ]; }
wait_for 10 sd_pid || { bad "no systemd under unshare: $(cat "$tmp/systemd.log")"; exit 1; }
# in its mount namespace (/run, the socket) and PID namespace (MainPID)
inns() { nsenter -t "$sdpid" -m -p -- "$@"; }
sc() { inns systemctl "$@"; }
booted() { [ "$(sc is-system-running 2>/dev/null)" = running ]; }
if ! wait_for 20 booted; then
	bad "the private systemd did not come up: $(sc is-system-running 2>&1) $(cat "$tmp/systemd.log")"
	exit 1
fi
ok

sock=/run/kvshare/kvshared.sock
jstat() { inns "$KVSCTL" --socket "$sock" stats --json | python3 -c \
	"import json,sys; print(json.load(sys.stdin)$1)"; }
started() { jstat '["derived"]["started"]'; }
pool() { inns "$KVS_POOL_FILL" "$1" --socket "$sock" --blocks 4096 --chain 256; }
# pool_check WHAT fill|check: as check, with kvs-pool-fill's line in the message
pool_check() {
	local out rc
	out=$(pool "$2" 2>&1)
	rc=$?
	check "$1 ($out)" [ "$rc" = 0 ]
}
unit_active() { sc is-active --quiet kvshared; }
status_dump() { sc status kvshared --no-pager >&2; tail -20 "$tmp/kvshared.log" >&2; }

if ! sc start kvshared; then
	bad "systemctl start kvshared"
	status_dump
	exit 1
fi
check "the unit is active" unit_active
check "the first start is cold ($(started))" [ "$(started)" = cold ]
pool_check "4096 blocks published" fill

sc restart kvshared
check "the unit is active after systemctl restart" unit_active
check "it started handed over ($(started))" [ "$(started)" = "handed over" ]
check "every block kept ($(jstat '["start"]["blocks_kept"]') of 4096)" \
	[ "$(jstat '["start"]["blocks_kept"]')" = 4096 ]
pool_check "every block bit exact after the restart" check

# the persist worker's checksums done: a crash keeps every block
settled() { [ "$(jstat '["persist"]["pending"]')" = 0 ]; }
check "persist.pending 0" wait_for 10 settled
main=$(sc show -p MainPID --value kvshared)
inns kill -KILL "$main"
restarted() {
	local m
	m=$(sc show -p MainPID --value kvshared)
	[ "$m" != 0 ] && [ "$m" != "$main" ] && unit_active &&
		inns "$KVSCTL" --socket "$sock" stats >/dev/null 2>&1
}
check "Restart=on-failure started it again after kill -9 of pid $main" wait_for 20 restarted
check "NRestarts=1 ($(sc show -p NRestarts --value kvshared))" \
	[ "$(sc show -p NRestarts --value kvshared)" = 1 ]
check "it started recovered ($(started))" [ "$(started)" = recovered ]
check "every block kept after the crash ($(jstat '["start"]["blocks_kept"]') of 4096)" \
	[ "$(jstat '["start"]["blocks_kept"]')" = 4096 ]
pool_check "every block bit exact after the crash" check

sc stop kvshared
check "the unit is inactive after systemctl stop" eval '! unit_active'
check "the stop removed the runtime directory and its socket" inns test ! -e "$sock"
sc start kvshared
check "stop then start is a cold start ($(started))" [ "$(started)" = cold ]
nstore() { sc show -p NFileDescriptorStore --value kvshared; }
check "the store holds kvs-meta, kvs-arena-0, listen ($(nstore))" [ "$(nstore)" = 3 ]
# a restart with --persist off: cold, and the pool's fds removed from the
# store (FDSTOREREMOVE=1), which keeps the listening socket alone
echo "persist = off" >>"$conf"
sc restart kvshared
check "a restart with persist = off is cold ($(started))" [ "$(started)" = cold ]
check "the store holds the socket alone ($(nstore))" [ "$(nstore)" = 1 ]
sc stop kvshared
((fail == 0)) || status_dump
echo "$name: $pass checks passed, $fail failed"
((fail == 0))
