"""vLLM end to end with a sliding-window model and vLLM's hybrid memory
allocator (HMA) on: a tiny random Gemma 3 (make_swa_model.py: layer 0 sliding
window, layer 1 full attention, two KV-cache groups). Engine A publishes a
prompt longer than the window through kvshared, one namespace per group (the
full group every full block, the sliding group the window before the
prompt's last hit boundary); engine B in a fresh process loads both, and its
greedy tokens are A's and those of an engine without the connector. Then
other KV under the sliding group's hashes changes B's output: the window it
loaded is what the model used.

Real parts only: the built kvshared and kvsctl, vLLM (CPU) engines in their
own processes, the model built here.
"""

from __future__ import annotations

import json
import random
import re
import subprocess

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
# vllm_support first: it sets KVSHARE_LIB, which importing kvshare reads.
from vllm_support import (KVSCTL, Engine, build_model, counters, namespaces,  # noqa: E402
                          next_turn, start_daemon, stop_daemon, wait_until)
import kvshare  # noqa: E402, I001

BS = 32            # the CPU backend's; vLLM gives both groups this block size
WINDOW = 48        # a hit needs the ceil(47 / 32) = 2 blocks before its end
NEED = 2
FULL = 8           # full blocks of the prompt, all before its last token
TOKENS = 6         # generated
HEADS, HEAD_DIM = 1, 64


@pytest.fixture(scope="module")
def swa_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("vllm-swa-model") / "model"
    build_model(path, "make_swa_model.py", f"--window={WINDOW}", f"--kv-heads={HEADS}",
                f"--head-dim={HEAD_DIM}")
    return path


def test_vllm_hma_sliding_window_loads_what_another_vllm_published(tmp_path, swa_model):
    work = tmp_path
    rng = random.Random(7)
    p = [rng.randrange(4, 512) for _ in range(FULL * BS + 6)]
    sock = str(work / "kvshared.sock")
    daemon = start_daemon(sock, open(work / "kvshared.log", "w"))
    common = ["--block-size", str(BS), "--max-tokens", str(TOKENS), "--max-model-len", "512"]
    conn = ["--socket", sock, *common]
    engines: list[Engine] = []
    try:
        base = Engine(work, swa_model, "baseline", [p], *common)
        a = Engine(work, swa_model, "a", [p], *conn, "--stats-file", str(work / "a"))
        engines += [base, a]
        a.wait()
        want = base.rounds(1)[0]
        assert a.rounds(1)[0] == want
        aw = counters(work / "a.worker")
        assert aw["published_blocks"] == FULL + NEED and aw["daemon_errors"] == 0, aw
        alog = a.log.read_text(errors="replace")
        assert "does not support HMA" not in alog and "Turning off hybrid" not in alog
        for kind in (f"sliding window {WINDOW}", "full"):  # both sides, in vLLM's group order
            assert len(re.findall(rf"KV-cache group \d \({kind}, 1 layers, blocks of {BS} "
                                  r"tokens\)", alog)) >= 2, alog[-6000:]

        # One namespace per group: the sliding one holds its window only.
        spaces = {n["model"].split("|", 1)[1].split(".")[0]: n for n in namespaces(sock)}
        assert {k: n["blocks"] for k, n in spaces.items()} == {f"swa{WINDOW}": NEED, "full": FULL}
        assert all(n["model"].startswith(str(swa_model) + "#") for n in spaces.values())

        b = Engine(work, swa_model, "b", [p], *conn, "--stats-file", str(work / "b"),
                   "--rounds", "2", "--go-file", str(work / "go"),
                   "--no-prefix-cache")  # its second round loads again
        engines.append(b)
        got = b.rounds(1)[0]
        assert got == want, f"B {got} != A and the baseline {want}"
        bs, bw = counters(work / "b.scheduler"), counters(work / "b.worker")
        assert bs["hit_tokens"] == FULL * BS and bs["async_loads"] == 1, bs
        block_bytes = BS * 2 * HEADS * HEAD_DIM * 4  # one layer a group, K and V, fp32
        assert bw["loaded_blocks"] == FULL + NEED and bw["load_errors"] == 0, bw
        assert bw["loaded_bytes"] == (FULL + NEED) * block_bytes, bw

        # Other KV under the sliding group's window: B's output changes.
        swa = spaces[f"swa{WINDOW}"]
        subprocess.run([KVSCTL, "--socket", sock, "flush", "--namespace", str(swa["id"])],
                       check=True, capture_output=True)
        layout = kvshare.Layout(model=swa["model"], layers=1, kv_heads=HEADS, head_dim=HEAD_DIM,
                                block_tokens=BS, dtype="fp32")
        assert layout.block_bytes == block_bytes
        with kvshare.Client(sock, layout) as c:
            with c.reserve(c.hash_tokens(p[: FULL * BS])[FULL - NEED:]) as w:
                assert w.new == list(range(NEED))
                noise = np.random.default_rng(1)
                for i in w.new:
                    w.view(i)[:] = noise.standard_normal(block_bytes // 4).astype(
                        np.float32).view(np.uint8)
        (work / "go.1").touch()
        assert b.rounds(2)[1] != want, "output unchanged with other KV loaded: KV not used"
        wait_until("B's second load", lambda: counters(work / "b.worker").get(
            "loaded_blocks") == 2 * (FULL + NEED))
        b.wait()
        base.wait()
    finally:
        for e in engines:
            e.stop()
        stop_daemon(daemon)


ANSWER = 40  # the writer's tokens: with its prompt's, 301 computed: 9 full blocks


def test_vllm_hma_next_turn_hits_the_answer_another_vllm_published(tmp_path, swa_model):
    """publish_output with HMA on and dense retention (vLLM then keeps every
    block of both groups, the answer's too): the writer publishes its
    prompt's and its answer's 9 full blocks in each group; a fresh reader's
    next turn (the prompt, the answer, more text) hits through the answer
    in both groups, loads the full group's 9 blocks and the sliding
    group's window, and makes the tokens it makes itself from an empty
    pool (its second round; vLLM's own prefix cache off)."""
    rng = random.Random(19)
    p = [rng.randrange(4, 512) for _ in range(FULL * BS + 6)]
    sock = str(tmp_path / "kvshared.sock")
    daemon = start_daemon(sock, open(tmp_path / "kvshared.log", "w"))
    conn = ["--socket", sock, "--block-size", str(BS), "--max-model-len", "512",
            "--retention-interval", "none", "--extra", json.dumps({"publish_output": True})]
    try:
        r = next_turn(tmp_path, swa_model, sock, p, conn, ANSWER, rng,
                      ("--max-tokens", str(TOKENS)))
    finally:
        stop_daemon(daemon)
    ww, ws = r.writer_worker, r.writer_scheduler
    assert ww["published_blocks"] == 2 * (FULL + 1) and ww["daemon_errors"] == 0, ww
    assert ws["output_saves"] >= 1, ws
    spaces = {n["model"].split("|", 1)[1].split(".")[0]: n["blocks"] for n in r.spaces}
    assert spaces == {f"swa{WINDOW}": FULL + 1, "full": FULL + 1}
    # The next turn, 302 tokens: through the answer's block in both groups.
    rs, rw = r.reader_scheduler, r.reader_worker
    assert rs["hit_tokens"] == (FULL + 1) * BS, rs
    assert rw["loaded_blocks"] == FULL + 1 + NEED and rw["load_errors"] == 0, rw
    assert r.reader_scheduler_after["hit_tokens"] == (FULL + 1) * BS
    assert r.got == r.want, f"loaded {r.got} != computed {r.want}"
