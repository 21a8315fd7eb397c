#!/usr/bin/env bash
# test_plan.sh - kvsctl plan against published KV sizes, and against a real
# daemon's host tier.
set -euo pipefail
name=test_plan
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
need_env KVSHARED KVSCTL
need_cmd python3
make_tmp kvsplan
field() { python3 -c "import json,sys; print(json.load(sys.stdin)[sys.argv[1]])" "$1"; }
expect() { # expect NAME WANT GOT
	if [ "$2" = "$3" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1: want $2, got $3" >&2; fi
}
plan() { "$KVSCTL" --socket "$tmp/s.sock" plan --json "$@"; }

# Published figures: Llama-3-70B fp16 = 320 KiB/token (80 layers x 8 KV heads
# x 128 x 2 x 2 B); Llama-3-8B = 128 KiB; Llama-2-7B (MHA, 32 heads) = 512 KiB;
# DeepSeek-V3 MLA (61 layers x (512 + 64) x 2 B) = 70,272 B, the "~70 KB".
expect llama-3-70b 327680 "$(plan --preset llama-3-70b | field bytes_per_token)"
expect llama-3-8b 131072 "$(plan --preset llama-3-8b | field bytes_per_token)"
expect llama-2-7b 524288 "$(plan --preset llama-2-7b | field bytes_per_token)"
expect deepseek-v3 70272 "$(plan --preset deepseek-v3 | field bytes_per_token)"
expect custom-equals-preset 327680 "$(plan --layers 80 --kv-heads 8 --head-dim 128 | field bytes_per_token)"
expect mqa 8192 "$(plan --layers 32 --kv-heads 71 --head-dim 64 --attention mqa | field bytes_per_token)"
# fp8 (scheme 2, proto/kvs_kv_format.h), per 256-token block, rounded up:
# codes; K's fp32 scale+zero per layer, head and channel; V's per layer,
# token and head; 4 fp16 K channels per layer and head (u16 index + codes).
blk8=$((80 * 2 * 256 * 8 * 128 + 80 * 8 * 128 * 8 + 80 * 256 * 8 * 8 + 80 * 8 * 4 * 2 + 80 * 8 * 4 * 256 * 2))
expect fp8 $(((blk8 + 255) / 256)) "$(plan --preset llama-3-70b --dtype fp8 | field bytes_per_token)"
# int4: two codes a byte; K groups of 32 tokens, V groups of 32 channels.
blk4=$((80 * 2 * 256 * 8 * 64 + 80 * 8 * 8 * 128 * 8 + 80 * 256 * 8 * 4 * 8 + 80 * 8 * 4 * 2 + 80 * 8 * 4 * 256 * 2))
expect int4 $(((blk4 + 255) / 256)) "$(plan --preset llama-3-70b --dtype int4 | field bytes_per_token)"
expect tokens $((327680 * 4096)) "$(plan --preset llama-3-70b --tokens 4096 | field bytes_for_tokens)"
expect no-daemon-no-tier False "$(plan --preset llama-3-8b | python3 -c 'import json,sys; print("host_tokens" in json.load(sys.stdin))')"
set +e
"$KVSCTL" plan --layers x >/dev/null 2>&1; expect bad-value-exit 2 $?
"$KVSCTL" plan >/dev/null 2>&1; expect no-shape-exit 2 $?
"$KVSCTL" plan --preset gpt-9 >/dev/null 2>&1; expect unknown-preset-exit 2 $?
set -e

start_ready "$tmp/s.sock" "$tmp/log" --host-size 1G
expect host-tokens $(( (1 << 30) / 131072 )) "$(plan --preset llama-3-8b | field host_tokens)"
echo "test_plan: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
