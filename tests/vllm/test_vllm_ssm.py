"""vLLM end to end with a hybrid state-space model and vLLM's hybrid memory
allocator (HMA) on: a tiny random Qwen3-Next (make_ssm_model.py: layer 0
gated delta-net linear attention, layer 1 full attention; a state-space
KV-cache group in vLLM's "align" mode and a full-attention group). Engine A
publishes a prompt through kvshared: every full block of the full group,
and the state vLLM keeps at the prompt's last block boundary; engine B in a
fresh process hits at that boundary and loads both, and its greedy tokens
are A's and those of an engine without the connector. Then another state
under the state group's hash changes the output of a fresh engine C: the
state it loaded is the one the model ran from.

Real parts only: the built kvshared and kvsctl, vLLM (CPU) engines in their
own processes, the model built here. vLLM's CPU GDN layers run bf16 only.
"""

from __future__ import annotations

import random
import re
import subprocess

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
# vllm_support first: it sets KVSHARE_LIB, which importing kvshare reads.
from vllm_support import (KVSCTL, Engine, build_model, counters, namespaces,  # noqa: E402
                          start_daemon, stop_daemon)
import kvshare  # noqa: E402, I001

BS = 64            # vLLM raises the block size to 64 so that an attention
                   # page holds a state (and pads the state's page to it)
FULL = 6           # full blocks of the prompt, all before its last token
TOKENS = 6         # generated
HEADS, HEAD_DIM = 2, 128   # KV heads of the attention layer


@pytest.fixture(scope="module")
def ssm_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("vllm-ssm-model") / "model"
    build_model(path, "make_ssm_model.py", f"--kv-heads={HEADS}", f"--head-dim={HEAD_DIM}")
    return path


def test_vllm_state_space_model_loads_the_state_another_vllm_published(tmp_path, ssm_model):
    work = tmp_path
    rng = random.Random(7)
    p = [rng.randrange(4, 512) for _ in range(FULL * BS + 6)]
    sock = str(work / "kvshared.sock")
    daemon = start_daemon(sock, open(work / "kvshared.log", "w"))
    common = ["--block-size", str(BS), "--max-tokens", str(TOKENS), "--max-model-len", "512",
              "--model-dtype", "bfloat16"]
    conn = ["--socket", sock, *common]
    engines: list[Engine] = []
    try:
        base = Engine(work, ssm_model, "baseline", [p], *common)
        a = Engine(work, ssm_model, "a", [p], *conn, "--stats-file", str(work / "a"))
        engines += [base, a]
        a.wait()
        want = base.rounds(1)[0]
        assert a.rounds(1)[0] == want
        alog = a.log.read_text(errors="replace")
        assert "shares nothing" not in alog and "does not support HMA" not in alog, alog[-6000:]
        for kind in ("state of", "full"):  # both sides
            assert len(re.findall(rf"KV-cache group \d \({kind}[^,]*, 1 layers, blocks of {BS} "
                                  r"tokens\)", alog)) >= 2, alog[-6000:]
        aw = counters(work / "a.worker")
        assert aw["published_blocks"] == FULL + 1 and aw["daemon_errors"] == 0, aw

        # One namespace per group: the state group's holds the state at the
        # prompt's last block boundary, the one a hit can end at.
        spaces = {n["model"].split("|", 1)[1].split(".")[0]: n for n in namespaces(sock)}
        state = next(k for k in spaces if k.startswith("state"))
        assert {k: n["blocks"] for k, n in spaces.items()} == {state: 1, "full": FULL}
        assert all(n["model"].startswith(str(ssm_model) + "#") for n in spaces.values())

        b = Engine(work, ssm_model, "b", [p], *conn, "--stats-file", str(work / "b"))
        engines.append(b)
        got = b.rounds(1)[0]
        assert got == want, f"B {got} != A and the baseline {want}"
        b.wait()
        bs, bw = counters(work / "b.scheduler"), counters(work / "b.worker")
        assert bs["hit_tokens"] == FULL * BS and bs["async_loads"] == 1, bs
        assert bw["loaded_blocks"] == FULL + 1 and bw["load_errors"] == 0, bw

        # Another state under the state group's hash: a fresh engine's
        # output changes.
        ns = spaces[state]
        subprocess.run([KVSCTL, "--socket", sock, "flush", "--namespace", str(ns["id"])],
                       check=True, capture_output=True)
        layout = kvshare.Layout(model=ns["model"], layers=1, kv_heads=1,
                                head_dim=ns["head_dim"], block_tokens=BS, dtype="fp16")
        with kvshare.Client(sock, layout) as c:
            with c.reserve(c.hash_tokens(p[: FULL * BS])[FULL - 1:]) as w:
                assert w.new == [0]
                v = w.view(0)
                v[:] = np.random.default_rng(1).standard_normal(v.size // 4).astype(
                    np.float32).view(np.uint8)
        cc = Engine(work, ssm_model, "c", [p], *conn, "--stats-file", str(work / "c"))
        engines.append(cc)
        assert cc.rounds(1)[0] != want, "output unchanged with another state: state not used"
        cc.wait()
        assert counters(work / "c.worker")["loaded_blocks"] == FULL + 1
        base.wait()
    finally:
        for e in engines:
            e.stop()
        stop_daemon(daemon)
