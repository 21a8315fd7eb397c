"""test_counters's check that every surface reads the daemon's counts.

    counters_check.py KVSCTL SOCKET PORT HIT MISS

HIT and MISS blocks were looked up in all, every one in namespace 1:
kvsctl stats (text and --json, derived.hit_ratio), /metrics and
kvsctl top --batch must all say so.
"""

import json
import re
import subprocess
import sys
import urllib.request

ctl, sock, port = sys.argv[1:4]
hit, miss = int(sys.argv[4]), int(sys.argv[5])
ratio = hit / (hit + miss)


def run(*args):
    return subprocess.run([ctl, "--socket", sock, *args], check=True,
                          capture_output=True, text=True).stdout


st = json.loads(run("stats", "--json"))
assert (st["blocks"]["lookup_hit"], st["blocks"]["lookup_miss"]) == (hit, miss), st["blocks"]
assert abs(st["derived"]["hit_ratio"] - ratio) < 1e-6, st["derived"]
assert (st["namespace"]["1.lookup_hit"], st["namespace"]["1.lookup_miss"]) == (hit, miss), \
    st["namespace"]

text = run("stats")
section, seen = None, {}
for line in text.splitlines():
    if line and not line.startswith(" "):
        section = line.split()[0]
    elif line.strip():
        name, value = line.split()[:2]
        seen[(section, name)] = value
assert seen[("blocks", "lookup_hit")] == str(hit), text
assert seen[("blocks", "lookup_miss")] == str(miss), text
assert abs(float(seen[("derived", "hit_ratio")]) - ratio) < 1e-4, text

body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
samples = {}
for line in body.splitlines():
    if line and not line.startswith("#"):
        key, value = line.rsplit(" ", 1)
        samples[key] = float(value)
assert samples["kvshare_blocks_lookup_hit_total"] == hit, body
assert samples["kvshare_blocks_lookup_miss_total"] == miss, body
ns_key = '{ns="1",model="counters-model"}'
assert samples["kvshare_namespace_lookup_hit_total" + ns_key] == hit, body
assert samples["kvshare_namespace_lookup_miss_total" + ns_key] == miss, body

top = run("top", "--batch", "--count", "1")
m = re.search(r"^hit ratio +([0-9.]+)% total.*\(blocks: (\d+) hit, (\d+) missed\)", top, re.M)
assert m, top
assert abs(float(m.group(1)) - 100 * ratio) < 0.05 + 1e-9, top
assert (int(m.group(2)), int(m.group(3))) == (hit, miss), top
rows = [line.split() for line in top.splitlines() if line.startswith("1 ")]
assert len(rows) == 1 and rows[0][1] == "counters-model", top
assert int(rows[0][-2]) == hit, top  # HITS, before CLIENTS
print("counters_check: ok")
