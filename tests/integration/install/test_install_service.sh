#!/usr/bin/env bash
# test_install_service - `cmake --install` installs the systemd unit and the
# sample config, and they work together: the unit starts the installed
# kvshared with the installed config (paths of the prefix installed to);
# the installed kvshared accepts the config and starts with it; the unit's
# runtime directory lets in those the config's socket mode lets in (a 0700
# directory defeated allow-gid); the sample sets no stale default;
# `systemd-analyze verify` accepts the unit where the machine has it; the
# unit keeps the pool across restarts (Type=notify, an fd store, the runtime
# directory preserved).
#
# Env: KVSHARED, KVSCTL, KVSBENCH (ctest sets them; the build folder is
# KVSHARED's). Exit: 0 pass, 1 fail, 77 skip.
set -u

name=test_install_service
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

need_env KVSHARED KVSCTL KVSBENCH
need_cmd cmake

build=$(dirname "$KVSHARED")
[ -f "$build/cmake_install.cmake" ] || skip "$build is not a CMake build folder"
make_tmp kvsunit
prefix=$tmp/prefix
if ! cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log" >&2
	bad "cmake --install $build --prefix $prefix"
	exit 1
fi
unit=$prefix/lib/systemd/system/kvshared.service
conf=$prefix/etc/kvshare/kvshared.conf
check "the unit is installed as $unit" [ -f "$unit" ]
check "the sample config is installed as $conf" [ -f "$conf" ]
[ -f "$unit" ] && [ -f "$conf" ] || exit 1

# unit_key KEY: the value of KEY= in the unit.
unit_key() { sed -n "s/^$1=//p" "$unit"; }
# conf_key KEY: the value of `KEY = ...` in a config file ($2, default $conf).
conf_key() { sed -n "s/^$1 *= *//p" "${2:-$conf}"; }

exec_start=$(unit_key ExecStart)
check "ExecStart is the installed kvshared with the installed config ($exec_start)" \
	[ "$exec_start" = "$prefix/bin/kvshared --config $conf" ]

# the pool outlives a restart: kvshared notifies (READY=1, FDSTORE=1), the
# store has room for its fds, and the socket's directory survives a restart
check "Type=notify ($(unit_key Type))" [ "$(unit_key Type)" = notify ]
fdmax=$(unit_key FileDescriptorStoreMax)
check "FileDescriptorStoreMax holds the pool's fds and the socket ($fdmax)" \
	eval '[ "${fdmax:-0}" -ge 3 ]'
check "RuntimeDirectoryPreserve=restart ($(unit_key RuntimeDirectoryPreserve))" \
	[ "$(unit_key RuntimeDirectoryPreserve)" = restart ]

# the installed kvshared accepts the installed config
KVSHARED=$prefix/bin/kvshared
printed=$("$KVSHARED" --config "$conf" --print-config 2>&1)
rc=$?
check "installed kvshared --config $conf --print-config (rc $rc: $printed)" [ "$rc" -eq 0 ]

# the sample names the defaults of today's kvshared where it names them
defaults=$("$KVSHARED" --print-config 2>&1)
for key in eviction-policy page-size max-pinned-share; do
	want=$(conf_key "$key" <(echo "$defaults"))
	got=$(conf_key "$key" <(echo "$printed"))
	check "the sample's $key ($got) is the default ($want)" [ "$got" = "$want" ]
done

# the socket is in the unit's runtime directory, and the directory lets in
# whom the socket's mode lets in: search bits for the group (other) when the
# mode grants the group (other) read and write
sock=$(conf_key socket <(echo "$printed"))
check "the config's socket $sock is in the unit's /run/$(unit_key RuntimeDirectory)" \
	[ "$(dirname "$sock")" = "/run/$(unit_key RuntimeDirectory)" ]
smode=$(conf_key socket-mode <(echo "$printed"))
dmode=$(unit_key RuntimeDirectoryMode)
for who in group:3 others:0; do
	shift_by=${who#*:}
	if (((8#$smode >> shift_by) & 6)); then
		check "RuntimeDirectoryMode $dmode lets ${who%:*} reach the socket (mode $smode)" \
			eval '(((8#$dmode >> shift_by) & 1))'
	fi
done
allow=$(conf_key allow-gid <(echo "$printed"))
if [ -n "$allow" ]; then
	check "allow-gid $allow with a socket mode that lets the group in ($smode)" \
		eval '(( ((8#$smode >> 3) & 6) == 6 ))'
fi

# a real start of the installed kvshared with the installed config (the
# socket, the tier size and the metrics port moved to this test's own)
if start_ready "$tmp/kvshared.sock" "$tmp/kvshared.log" --config "$conf" \
	--host-size 16M --metrics-addr 127.0.0.1:0 --gpu off; then
	ok
	out=$("$KVSCTL" --socket "$tmp/kvshared.sock" stats 2>&1)
	check "kvsctl stats against it (rc $?: $out)" grep -q '^server' <<<"$out"
else
	bad "the installed kvshared did not start with the installed config: $(cat "$tmp/kvshared.log")"
fi

# a second install keeps a config an operator edited
echo "# edited" >>"$conf"
cmake --install "$build" --prefix "$prefix" >"$tmp/install2.log" 2>&1
check "a second install keeps the edited config" grep -qx '# edited' "$conf"

if command -v systemd-analyze >/dev/null; then
	out=$(systemd-analyze verify "$unit" 2>&1)
	rc=$?
	check "systemd-analyze verify $unit (rc $rc: $out)" [ "$rc" -eq 0 ]
	# unknown keys and bad values are warnings (exit 0): none may name it
	check "systemd-analyze has nothing to say about the unit ($out)" \
		eval '! grep -q kvshared.service <<<"$out"'
else
	echo "$name: systemd-analyze is not installed: the unit's syntax is not verified"
fi

echo "$name: $pass checks passed, $fail failed"
((fail == 0))
