"""vLLM end to end with an MLA model (a tiny random DeepSeek-V2 on vLLM's CPU
MLA backend): engine A publishes a prompt's latent KV through kvshared, engine
B in a fresh process loads it, and B's greedy tokens are A's and those of an
engine without the connector. Then other latent rows under the same hashes
change B's output: the loaded KV is what the model used.

Real parts only: the built kvshared and kvsctl, vLLM (CPU) engines in their
own processes, the model built here (make_mla_model.py). vLLM's CPU MLA
backend turns its own prefix cache and chunked prefill off and takes
block_size 16 only.
"""

from __future__ import annotations

import random
import subprocess

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
# vllm_support first: it sets KVSHARE_LIB, which importing kvshare reads.
from vllm_support import (KVSCTL, MLA_LAYERS, Engine, counters, daemon_stats,  # noqa: E402
                          namespaces, start_daemon, stop_daemon, wait_until)
import kvshare  # noqa: E402, I001

BS = 16            # the CPU MLA backend's only block size
LAYERS = MLA_LAYERS  # the model's (conftest.py mla_model)
WIDTH = 576        # kv_lora_rank 512 + qk_rope_head_dim 64, the backend's only width
FULL = 4           # full blocks of the prompt
TOKENS = 6         # generated


def test_vllm_mla_loads_what_another_vllm_published(tmp_path, mla_model):
    work = tmp_path
    rng = random.Random(7)
    p = [rng.randrange(4, 512) for _ in range(FULL * BS + 6)]
    sock = str(work / "kvshared.sock")
    daemon = start_daemon(sock, open(work / "kvshared.log", "w"))
    # CPU_MLA on every machine: where the CPU has AMX, vLLM prefers its
    # AMX_MLA backend, which takes bf16, fp16 or int8 weights only (this
    # model is fp32: "expect weight to be bfloat16, float16, ...").
    common = ["--block-size", str(BS), "--max-tokens", str(TOKENS), "--max-model-len", "512",
              "--attention-backend", "CPU_MLA"]
    conn = ["--socket", sock, *common]
    engines: list[Engine] = []
    try:
        base = Engine(work, mla_model, "baseline", [p], *common)
        a = Engine(work, mla_model, "a", [p], *conn, "--stats-file", str(work / "a"))
        engines += [base, a]
        a.wait()
        want = base.rounds(1)[0]
        assert a.rounds(1)[0] == want
        aw = counters(work / "a.worker")
        assert aw["published_blocks"] == FULL and aw["daemon_errors"] == 0, aw
        alog = a.log.read_text(errors="replace")
        assert f"MLA latent cache of {WIDTH} elements a token" in alog, alog[-6000:]

        before = daemon_stats(sock)
        b = Engine(work, mla_model, "b", [p], *conn, "--stats-file", str(work / "b"),
                   "--rounds", "2", "--go-file", str(work / "go"))
        engines.append(b)
        got = b.rounds(1)[0]
        assert got == want, f"B {got} != A and the baseline {want}"
        bs, bw = counters(work / "b.scheduler"), counters(work / "b.worker")
        assert bs["hit_tokens"] == FULL * BS, bs
        block_bytes = LAYERS * BS * WIDTH * 4  # fp32 rows, no K/V pair
        assert bw["loaded_blocks"] == FULL and bw["load_errors"] == 0, bw
        assert bw["loaded_bytes"] == FULL * block_bytes, bw
        after = daemon_stats(sock)
        assert after["blocks.lookup_hit"] - before["blocks.lookup_hit"] == FULL, (before, after)
        assert after["engines.hit_tokens"] == FULL * BS

        # One namespace, the MLA one: its model string says the latent width.
        spaces = namespaces(sock)
        assert [(n["model"].split("#")[0], n["model"].endswith(f"|mla{WIDTH}"), n["blocks"])
                for n in spaces] == [(str(mla_model), True, FULL)], spaces

        # Other latent rows under the same hashes: B's output changes.
        subprocess.run([KVSCTL, "--socket", sock, "flush", "--all"], check=True,
                       capture_output=True)
        layout = kvshare.Layout(model=spaces[0]["model"], layers=LAYERS, kv_heads=1,
                                head_dim=WIDTH // 2, block_tokens=BS, dtype="fp32")
        assert layout.block_bytes == block_bytes
        with kvshare.Client(sock, layout) as c:
            with c.reserve(c.hash_tokens(p[: FULL * BS])) as w:
                assert w.new == list(range(FULL))
                noise = np.random.default_rng(1)
                for i in w.new:
                    w.view(i)[:] = noise.standard_normal(block_bytes // 4).astype(
                        np.float32).view(np.uint8)
        (work / "go.1").touch()
        assert b.rounds(2)[1] != want, "output unchanged with other KV loaded: KV not used"
        wait_until("B's second load", lambda: counters(work / "b.worker").get(
            "loaded_blocks") == 2 * FULL)
        b.wait()
        base.wait()
    finally:
        for e in engines:
            e.stop()
        stop_daemon(daemon)
