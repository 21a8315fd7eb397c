"""vLLM end to end: one engine publishes a prefix through kvshared (its prefill
chunked, so blocks are published over several steps), an engine in a fresh
process loads it, and its greedy output is the output of an engine without
the connector, token for token. A negative control then puts other KV under
the same hashes and the output changes: the loaded KV is what the model used.
Then the daemon goes away (the reader computes everything, raises nothing)
and comes back (the reader reconnects and publishes again). The connector's
lines are in vLLM's log (start, counters, totals at shutdown), and an engine
started on a socket with no daemon warns at start and serves the baseline's
tokens.

Real parts only: the built kvshared and kvsctl, vLLM (CPU) engines in their
own processes, a tiny random-weight Llama built here (no model can be
downloaded). About four minutes on 2 idle cores with three engines; 16 minutes
with the fourth at a load average of 12, most of it engine start-up.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import time

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
# vllm_support first: it sets KVSHARE_LIB, which importing kvshare reads.
from vllm_support import (BT, KVSCTL, MODEL, Engine, counters, daemon_stats,  # noqa: E402
                          namespaces, start_daemon, stop_daemon, wait_until)
import kvshare  # noqa: E402, I001

PREFIX = 8 * BT    # the shared prefix: 8 full blocks


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("vllm-e2e")


def test_vllm_loads_a_prefix_another_vllm_published(work, tiny_model):
    rng = random.Random(5)
    prefix = [rng.randrange(4, 512) for _ in range(PREFIX)]
    a = prefix + [rng.randrange(4, 512) for _ in range(44)]  # 300 tokens: 9 full blocks
    b = prefix + [rng.randrange(4, 512) for _ in range(50)]  # shares 8 blocks with a
    sock = str(work / "kvshared.sock")
    log = open(work / "kvshared.log", "w")
    daemon = start_daemon(sock, log)
    engines: list[Engine] = []
    try:
        conn = ["--socket", sock]
        # The baseline (no connector), the writer and an engine whose socket
        # has no daemon start side by side.
        base = Engine(work, tiny_model, "baseline", [b])
        writer = Engine(work, tiny_model, "writer", [a], *conn,
                        "--stats-file", str(work / "writer"),
                        "--max-batched-tokens", "96",  # 3 blocks a step
                        "--extra", json.dumps({"log_interval": 1e-9}))  # a line a step
        lost = Engine(work, tiny_model, "lost", [b], "--socket", str(work / "none.sock"))
        engines += [base, writer, lost]
        writer.wait()
        wstats = counters(work / "writer.worker")
        assert wstats["published_blocks"] == 9, wstats
        assert wstats["load_errors"] == 0 and wstats["daemon_errors"] == 0
        assert daemon_stats(sock)["blocks.committed"] == 9
        # The connector's lines are in vLLM's log, in vLLM's format: each
        # side's start line, the counter lines, the worker's totals at shutdown.
        wlog = writer.log.read_text(errors="replace")
        wk = r"\(worker, tp rank 0 of 1\)"
        for who in (r"\(scheduler\)", wk):
            assert re.search(rf"INFO .*\] kvshare connector {who} started: socket "
                             rf"{re.escape(sock)}, namespace {re.escape(str(tiny_model))}#",
                             wlog), wlog[-6000:]
        assert re.search(r"INFO .*\] kvshare connector \(scheduler\): lookups=1 hit_tokens=0 ",
                         wlog), wlog[-6000:]
        assert re.search(rf"INFO .*\] kvshare connector {wk}: .* published_blocks=9 ", wlog)
        assert re.search(rf"INFO .*\] kvshare connector {wk} at shutdown: .* published_blocks=9 ",
                         wlog), wlog[-6000:]
        assert not re.search(r"WARNING .*\] kvshare", wlog), wlog[-6000:]

        # The reader: a fresh process, vLLM's own prefix cache off so that
        # each round asks the connector again.
        before = daemon_stats(sock)
        reader = Engine(work, tiny_model, "reader", [b], *conn,
                        "--stats-file", str(work / "reader"), "--rounds", "4",
                        "--go-file", str(work / "go"), "--no-prefix-cache",
                        "--reconnect-interval", "1")
        engines.append(reader)
        want = base.rounds(1)[0]
        got = reader.rounds(1)[0]
        assert got == want, f"reader {got} != baseline {want}"
        # No daemon on its socket: a warning at start from each side, then
        # the engine computes everything (the baseline's tokens).
        assert lost.rounds(1)[0] == want
        llog = lost.log.read_text(errors="replace")
        for who in (r"\(scheduler\)", wk):
            assert re.search(rf"WARNING .*\] kvshare connector {who}: no daemon at start "
                             rf"\(connect to {re.escape(str(work / 'none.sock'))}: ", llog), \
                llog[-6000:]
        # Its publish of the ninth block runs off the step: counted once done.
        wait_until("the reader's publish", lambda: daemon_stats(sock)[
            "engines.published_blocks"] == 10)
        rs, rw = counters(work / "reader.scheduler"), counters(work / "reader.worker")
        assert rs["hit_tokens"] == PREFIX, rs
        assert rw["loaded_blocks"] == PREFIX // BT and rw["load_errors"] == 0, rw
        assert rw["loaded_bytes"] == PREFIX // BT * 4 * 2 * BT * 2 * 64 * 4
        after = daemon_stats(sock)
        # The daemon saw the same blocks: the scheduler's query (8 blocks
        # asked about, nothing pinned: blocks.query_asked) and the worker's
        # lookup, 8 hits, over the socket or the fast path alike: one
        # counter (blocks.lookup_hit) counts both.
        assert after["blocks.lookup_hit"] - before["blocks.lookup_hit"] == PREFIX // BT, \
            (before, after)
        assert after["blocks.query_asked"] - before["blocks.query_asked"] >= PREFIX // BT
        out = subprocess.run([KVSCTL, "--socket", sock, "stats"], capture_output=True,
                             text=True, check=True).stdout
        assert any(line.split() == ["lookup_hit", str(after["blocks.lookup_hit"])]
                   for line in out.splitlines()), out
        # The connectors' own counts, reported to the daemon ("engines").
        assert after["engines.hit_tokens"] == rs["hit_tokens"] == PREFIX
        assert after["engines.loaded_blocks"] == rw["loaded_blocks"]
        assert after["engines.loaded_bytes"] == rw["loaded_bytes"]
        assert after["engines.load_errors"] == 0
        assert after["engines.published_blocks"] == (wstats["published_blocks"]
                                                     + rw["published_blocks"]) == 10
        assert any(line.split() == ["loaded_blocks", str(rw["loaded_blocks"])]
                   for line in out.splitlines()), out

        # Writer and reader (each side of each) named the model alike, with
        # no model_id: the served model and a digest of its identity.
        spaces = namespaces(sock)
        assert [(n["model"].split("#")[0], n["blocks"]) for n in spaces] \
            == [(str(tiny_model), 10)], spaces

        # Negative control: other KV under the same hashes.
        subprocess.run([KVSCTL, "--socket", sock, "flush", "--all"], check=True,
                       capture_output=True)
        layout = kvshare.Layout(model=spaces[0]["model"], layers=MODEL["layers"],
                                kv_heads=MODEL["kv_heads"], head_dim=MODEL["head_dim"],
                                block_tokens=BT, dtype="fp32")
        with kvshare.Client(sock, layout) as c:
            h = c.hash_tokens(prefix)
            with c.reserve(h) as w:
                assert w.new == list(range(PREFIX // BT))
                noise = np.random.default_rng(1)
                for i in w.new:
                    w.view(i)[:] = noise.standard_normal(c.block_bytes // 4).astype(
                        np.float32).view(np.uint8)
        (work / "go.1").touch()
        other = reader.rounds(2)[1]
        assert other != want, "output unchanged with other KV loaded: the KV was not used"
        rw = counters(work / "reader.worker")
        assert rw["loaded_blocks"] == 2 * (PREFIX // BT), rw

        # The daemon goes away: misses, the model computes, nothing raises.
        stop_daemon(daemon)
        (work / "go.2").touch()
        assert reader.rounds(3)[2] == want
        rs = counters(work / "reader.scheduler")
        assert rs["daemon_errors"] >= 1 and rs["hit_tokens"] == 2 * PREFIX, rs
        # It comes back (empty): after the reconnect interval the reader
        # connects again and publishes the prompt's full blocks.
        gone = time.monotonic()
        daemon = start_daemon(sock, log)
        while time.monotonic() - gone < 1.5:  # past the reconnect interval
            time.sleep(0.1)
        (work / "go.3").touch()
        assert reader.rounds(4)[3] == want
        wait_until("the reader's publishes", lambda: daemon_stats(sock)[
            "blocks.committed"] == len(b) // BT)
        reader.wait()
        base.wait()
        lost.wait()
    finally:
        for e in engines:
            e.stop()
        stop_daemon(daemon)
