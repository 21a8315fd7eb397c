#!/usr/bin/env bash
# test_metrics.sh - the Prometheus endpoint of a real kvshared: scraped over
# HTTP, parsed as the text exposition format, checked against kvsctl stats
# after a scripted workload; off by default; a bad address is refused.
set -euo pipefail
name=test_metrics
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
need_env KVSHARED KVSCTL KVSBENCH
need_cmd python3
make_tmp kvsmetrics

# start ARGS...: daemon on $tmp/s.sock; stop: SIGTERM it and reap it.
start() { start_ready "$tmp/s.sock" "$tmp/log" --host-size 64M "$@"; }
stop() { kill "$dpid"; wait "$dpid"; pids=(); }

start
check "metrics off by default" eval \
	'[ "$("$KVSCTL" --socket "$tmp/s.sock" stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)[\"server\"][\"metrics_port\"])")" = 0 ]'
stop

start --metrics-addr 127.0.0.1:0
# Lookups as requests (the fast path would answer them without one, and the
# latency histogram below is the LOOKUP request's).
KVS_NO_FASTPATH=1 "$KVSBENCH" --socket "$tmp/s.sock" share --workers 3 --prefix-tokens 256 \
	--suffix-tokens 64 --layers 2 --kv-heads 2 --head-dim 64 >/dev/null
"$KVSCTL" --socket "$tmp/s.sock" stats --json >"$tmp/stats.json"
port=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["server"]["metrics_port"])' "$tmp/stats.json")
check "metrics port set" eval '[ "$port" -gt 0 ]'
python3 - "$port" "$tmp/stats.json" <<'PY' && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: scrape" >&2; }
import json, re, sys, urllib.request, urllib.error
port, stats = sys.argv[1], json.load(open(sys.argv[2]))
resp = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
assert resp.status == 200
assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
text = resp.read().decode()
samples, types = {}, {}
line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')
for line in text.splitlines():
    if line.startswith("# TYPE "):
        _, _, name, kind = line.split()
        types[name] = kind
        continue
    if line.startswith("#") or not line:
        continue
    m = line_re.match(line)
    assert m, f"unparseable line: {line!r}"
    samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
# Every sample belongs to a declared family.
for key in samples:
    fam = re.sub(r'(_bucket|_sum|_count)$', '', key.split("{")[0])
    assert key.split("{")[0] in types or fam in types, key
# Counters agree with kvsctl stats taken just before (no traffic since,
# except this scrape and the stats call itself).
assert samples["kvshare_blocks_lookup_hit_total"] == stats["blocks"]["lookup_hit"] == 32
assert samples["kvshare_blocks_committed_total"] == stats["blocks"]["committed"]
assert types["kvshare_blocks_committed_total"] == "counter"
assert types["kvshare_tier_host_bytes_total"] == "gauge"
assert samples["kvshare_tier_host_bytes_total"] == 64 << 20
assert samples['kvshare_namespace_blocks{ns="1",model="kvsbench-model"}'] == stats["tier_host"]["blocks"]
# The lookup histogram is cumulative and its +Inf bucket is its count.
buckets = sorted((float(re.search(r'le="([^"]+)"', k).group(1)), v)
                 for k, v in samples.items()
                 if k.startswith('kvshare_request_duration_seconds_bucket{op="lookup"'))
assert [v for _, v in buckets] == sorted(v for _, v in buckets)
assert buckets[-1][1] == samples['kvshare_request_duration_seconds_count{op="lookup"}'] == 3
try:
    urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    raise AssertionError("404 expected")
except urllib.error.HTTPError as e:
    assert e.code == 404
PY
stop

check "bad metrics address refused" eval '! "$KVSHARED" --socket "$tmp/t.sock" --host-size 1M --metrics-addr nonsense:xx 2>/dev/null'
echo "test_metrics: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
