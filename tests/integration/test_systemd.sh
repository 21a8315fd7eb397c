#!/usr/bin/env bash
# test_systemd - kvshared under a real systemd keeps its pool across
# `systemctl restart`: a transient unit (systemd-run) with Type=notify and an
# fd store, blocks published by kvsbench, a restart, and the new kvshared
# says it started "handed over" with every block kept. Runs only where PID 1
# is systemd and this user may start system units (root); skipped otherwise,
# with the reason (tests/integration/test_fdstore.c covers the same protocol
# under a stand-in for systemd).
#
# Env: KVSHARED, KVSCTL, KVSBENCH (ctest sets them). Exit: 0 pass, 1 fail, 77 skip.
set -u

name=test_systemd
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_env KVSHARED KVSCTL KVSBENCH
pid1=$(cat /proc/1/comm 2>/dev/null)
[ "$pid1" = systemd ] || skip "PID 1 is '$pid1', not systemd"
[ "$(id -u)" = 0 ] || skip "not root: cannot start a system unit"
need_cmd systemd-run
need_cmd systemctl
make_tmp kvssd
unit=kvs-test-$$
on_cleanup() { systemctl stop "$unit" >/dev/null 2>&1 || :; }
sock=$tmp/kvshared.sock
if ! systemd-run --unit="$unit" -p Type=notify -p FileDescriptorStoreMax=64 \
	"$KVSHARED" --socket "$sock" --host-size 32M --gpu off >"$tmp/run.log" 2>&1; then
	bad "systemd-run: $(cat "$tmp/run.log")"
	exit 1
fi
check "the unit is active" systemctl is-active --quiet "$unit"
jstat() { "$KVSCTL" --socket "$sock" stats --json | python3 -c \
	"import json,sys; print(json.load(sys.stdin)$1)"; }
"$KVSBENCH" --socket "$sock" share --workers 1 --layers 2 --kv-heads 2 \
	--head-dim 64 --prefix-tokens 1024 --suffix-tokens 16 --json-only >/dev/null
before=$(jstat '["tier_host"]["blocks"]')
check "blocks published ($before)" [ "${before:-0}" -gt 0 ]
systemctl restart "$unit"
check "the unit is active after the restart" systemctl is-active --quiet "$unit"
check "it started handed over ($(jstat '["derived"]["started"]'))" \
	[ "$(jstat '["derived"]["started"]')" = "handed over" ]
check "every block kept ($(jstat '["start"]["blocks_kept"]') of $before)" \
	[ "$(jstat '["start"]["blocks_kept"]')" = "$before" ]
echo "$name: $pass checks passed, $fail failed"
((fail == 0))
