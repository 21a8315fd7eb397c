#!/usr/bin/env bash
# test_share_dtypes - `kvsbench share --dtype D` through a real daemon for
# every stored dtype, the quantized ones (int8, fp8, int4) included: the
# readers hit every prefix block and verify every byte (no corrupt block),
# and the daemon exits cleanly afterwards.
#
# Env: KVSHARED, KVSCTL, KVSBENCH (paths of the built binaries; unset: skip).
# Exit: 0 pass, 1 fail, 77 skip.
set -u

name=test_share_dtypes
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

need_env KVSHARED KVSCTL KVSBENCH
need_cmd python3

make_tmp kvsdtypes
sock="$tmp/d.sock"
if ! start_ready "$sock" "$tmp/d.log" --host-size 64M; then
	echo "$name: FAIL: kvshared did not become ready" >&2
	tail -n 40 "$tmp/d.log" >&2
	exit 1
fi

for dt in fp16 bf16 fp32 int8 fp8 int4; do
	# 2 workers, 16 prefix blocks of 32 tokens; head_dim 64, 3 KV heads
	# (odd on purpose), 2 layers.
	if ! timeout 120 "$KVSBENCH" --socket "$sock" share --dtype "$dt" --workers 2 \
		--prefix-tokens 512 --suffix-tokens 64 --block-tokens 32 --layers 2 \
		--kv-heads 3 --head-dim 64 --json-only >"$tmp/$dt.json" 2>"$tmp/$dt.err"; then
		bad "kvsbench share --dtype $dt failed: $(tail -n 5 "$tmp/$dt.err")"
		continue
	fi
	if python3 -c "
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r['failed_workers'] == 0 and r['corrupt_blocks'] == 0, r
assert r['hit_blocks'] == 16, r                      # the second worker's prefix
assert r['verified_bytes'] == 16 * r['block_bytes'], r
" "$tmp/$dt.json" 2>"$tmp/py.err"; then ok; else
		bad "$dt: $(cat "$tmp/py.err")"
	fi
done

kill -TERM "$dpid"
wait "$dpid"
rc=$?
pids=()
if [ "$rc" -eq 0 ]; then ok; else bad "kvshared exits $rc on SIGTERM"; fi

echo "$name: $pass checks passed, $fail failed"
[ "$fail" -eq 0 ]
