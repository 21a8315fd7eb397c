#!/usr/bin/env bash
# test_config_file.sh - kvshared --config: the shipped sample parses, flags win
# over the file, and bad files are refused with the file and line number.
set -euo pipefail
: "${KVSHARED:?}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
no() { fail=$((fail + 1)); echo "FAIL: $1" >&2; }

out=$("$KVSHARED" --config "$here/docs/examples/kvshared.conf" --print-config) && ok || no "sample config"
grep -qx 'host-size = 68719476736' <<<"$out" && ok || no "sample host-size"
grep -qx 'metrics-addr = 127.0.0.1:9464' <<<"$out" && ok || no "sample metrics-addr"
out=$("$KVSHARED" --host-size 1G --config "$here/docs/examples/kvshared.conf" --print-config)
grep -qx 'host-size = 1073741824' <<<"$out" && ok || no "flag wins over file"
# The printed configuration is itself a valid config file.
"$KVSHARED" --config "$here/docs/examples/kvshared.conf" --print-config >"$dir/printed.conf"
cmp -s <("$KVSHARED" --config "$dir/printed.conf" --print-config) "$dir/printed.conf" && ok || no "print-config round trip"

printf '[kvshared]\nhost-size = 1G\ncolour = blue\n' >"$dir/bad.conf"
set +e
err=$("$KVSHARED" --config "$dir/bad.conf" 2>&1); rc=$?
set -e
[ "$rc" = 2 ] && ok || no "unknown key exit status $rc"
grep -q "bad.conf:3: colour 'blue': unknown key" <<<"$err" && ok || no "unknown key message: $err"
printf 'page-size = 3\n' >"$dir/bad2.conf"
err=$("$KVSHARED" --config "$dir/bad2.conf" 2>&1) && no "bad value accepted" || ok
grep -q "bad2.conf:1: page-size '3'" <<<"$err" && ok || no "bad value message: $err"
err=$("$KVSHARED" --config "$dir/missing.conf" 2>&1) && no "missing file accepted" || ok
grep -q "missing.conf" <<<"$err" && ok || no "missing file message: $err"
echo "test_config_file: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
