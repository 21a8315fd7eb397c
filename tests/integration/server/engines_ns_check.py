"""test_engines_ns's check of kvsctl stats --json and /metrics.

    engines_ns_check.py KVSCTL SOCKET PORT MODEL_FILE A B A_HIT A_BYTES B_HIT B_BYTES

Namespaces A and B reported hit_tokens/loaded_bytes A_HIT/A_BYTES and
B_HIT/B_BYTES; B's model is MODEL_FILE's bytes (quote, backslash, newline
inside). The Prometheus text is parsed by the exposition format's grammar,
label values unescaped, not by a regex that would let a broken escape
through.
"""

import json
import re
import subprocess
import sys
import urllib.request

ctl, sock, port, model_file = sys.argv[1:5]
a, b, a_hit, a_bytes, b_hit, b_bytes = map(int, sys.argv[5:11])
hostile = open(model_file, encoding="utf-8").read()

st = json.loads(subprocess.run([ctl, "--socket", sock, "stats", "--json"], check=True,
                               capture_output=True, text=True).stdout)
rows = {r["ns"]: r for r in st["engines_by_namespace"]}
assert set(rows) == {a, b}, rows
assert rows[b]["model"] == hostile, rows[b]
assert rows[a]["model"] == "engines-ns-a", rows[a]
assert rows[a]["hit_tokens"] == a_hit and rows[a]["loaded_bytes"] == a_bytes, rows[a]
assert rows[b]["hit_tokens"] == b_hit and rows[b]["loaded_bytes"] == b_bytes, rows[b]
assert st["engines"]["namespaces"] == 2, st["engines"]
text_out = subprocess.run([ctl, "--socket", sock, "stats"], check=True, capture_output=True,
                          text=True).stdout
assert "\nengines by namespace\n" in text_out, text_out
assert f"  namespace {a}: model engines-ns-a\n" in text_out, text_out

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def parse_sample(line):
    """name, {label: value}, value of one sample line, or AssertionError."""
    m = NAME.match(line)
    assert m, line
    name, i, labels = m.group(0), m.end(), {}
    if i < len(line) and line[i] == "{":
        i += 1
        while line[i] != "}":
            m = LABEL.match(line, i)
            assert m and line[m.end():m.end() + 2] == '="', line
            key, i, val = m.group(0), m.end() + 2, []
            while line[i] != '"':
                if line[i] == "\\":
                    esc = line[i + 1]
                    assert esc in '\\"n', f"bad escape in {line!r}"
                    val.append("\n" if esc == "n" else esc)
                    i += 2
                else:
                    val.append(line[i])
                    i += 1
            labels[key] = "".join(val)
            i += 1
            if line[i] == ",":
                i += 1
        i += 1
    assert line[i] == " ", line
    return name, labels, float(line[i + 1:])


body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
samples, types = [], {}
for line in body.decode("utf-8").split("\n"):
    if line.startswith("# TYPE "):
        _, _, name, kind = line.split(" ")
        assert name not in types, f"family {name} declared twice"
        types[name] = kind
    elif line and not line.startswith("#"):
        samples.append(parse_sample(line))
fam = "kvshare_namespace_engines_hit_tokens_total"
assert types[fam] == "counter"
series = {lab["ns"]: (lab["model"], v) for n, lab, v in samples if n == fam}
assert series == {str(a): ("engines-ns-a", a_hit), str(b): (hostile, b_hit)}, series
by = {n: v for n, lab, v in samples if not lab}
unattached = by["kvshare_engines_hit_tokens_total"] - a_hit - b_hit
assert unattached >= 0, by
nsb = [lab["model"] for n, lab, v in samples if n == "kvshare_namespace_blocks"]
assert hostile in nsb, nsb
# The namespace named with bytes that are not UTF-8: each one a '?' (the
# body decoded as UTF-8 above, strictly).
assert "raw?x??y???z\u00e9" in nsb, nsb
print("engines_ns_check: ok")
