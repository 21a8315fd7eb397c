#!/usr/bin/env bash
# test_kvsbench_quality_mla - `kvsbench quality --mla` on a small latent
# cache (256 tokens, 4 heads, latent 64+16): fp32 rows come back exact
# (the store-and-load path of the connector's `mla` layout is a plain copy
# for them), fp16 within its rounding, every quantized dtype worse than
# fp16 (it did quantize); bad options are usage errors (exit 2).
#
# Exit: 0 pass, 1 fail, 77 skip (not run through ctest, no python3).
set -u

name=test_kvsbench_quality_mla
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
need_env KVSBENCH
need_cmd python3
make_tmp kvsqmla

"$KVSBENCH" quality --mla --kv-len 256 --q-len 4 --heads 4 --rank 64 --rope 16 \
	--nope 32 --vdim 32 --outlier-channels 2 --rope-outliers 1 --block-tokens 64 \
	--json >"$tmp/out.json"
check "quality --mla exits 0" [ $? = 0 ]
check "the rows are right" python3 - "$tmp/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = {x["dtype"]: x for x in d["rows"]}
assert d["mode"] == "mla" and d["rank"] == 64 and d["rope"] == 16, d
assert set(r) == {"fp32", "fp16", "bf16", "int8", "fp8", "int4"}, r
assert r["fp32"]["out_rel_err"] == 0 and r["fp32"]["c_kv_rel_err"] == 0, r["fp32"]
assert 0 < r["fp16"]["out_rel_err"] < 1e-2, r["fp16"]
for q in ("int8", "fp8", "int4"):
    assert r[q]["out_rel_err"] > r["fp16"]["out_rel_err"], (q, r[q])
    assert r[q]["bytes_per_elem"] < 2, (q, r[q])
PY
"$KVSBENCH" quality --mla --rope 7 >/dev/null 2>&1
check "an odd --rope: usage error (exit 2)" [ $? = 2 ]
"$KVSBENCH" quality --mla --outlier-channels 600 >/dev/null 2>&1
check "more outlier channels than the rank: usage error (exit 2)" [ $? = 2 ]
"$KVSBENCH" quality --mla --help 2>&1 | grep -q -- "--rope-outliers"
check "--mla --help shows its options" [ $? = 0 ]
echo "$name: $pass passed, $fail failed"
((fail == 0))
