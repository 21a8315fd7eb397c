"""vLLM end to end with publish_output: a writer engine publishes, besides
its prompt's full blocks, the block its answer filled (as vLLM's own prefix
cache keeps it); a reader engine in a fresh process whose prompt is the next
turn (the prompt, the answer, more text) hits through the answer's block,
loads it, and makes the tokens it makes itself from an empty pool (its
second round; vLLM's own prefix cache off).

Real parts only: the built kvshared, vLLM (CPU) engines in their own
processes, the tiny random-weight Llama.
"""

from __future__ import annotations

import json
import random
import subprocess

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
# vllm_support first: it sets KVSHARE_LIB, which importing kvshare reads.
from vllm_support import (BT, KVSCTL, Engine, counters, start_daemon,  # noqa: E402
                          stop_daemon)

PROMPT = 8 * BT + 6   # 8 full blocks and 6 tokens
ANSWER = 40           # the writer's tokens: its KV fills block 8 (tokens 256-287)


def test_next_turn_hits_the_answer_another_vllm_published(tmp_path, tiny_model):
    rng = random.Random(17)
    p = [rng.randrange(4, 512) for _ in range(PROMPT)]
    sock = str(tmp_path / "kvshared.sock")
    daemon = start_daemon(sock, open(tmp_path / "kvshared.log", "w"))
    conn = ["--socket", sock, "--extra", json.dumps({"publish_output": True})]
    engines: list[Engine] = []
    try:
        writer = Engine(tmp_path, tiny_model, "writer", [p], *conn, "--max-tokens", str(ANSWER),
                        "--stats-file", str(tmp_path / "writer"))
        engines.append(writer)
        answer = writer.rounds(1)[0][0]
        writer.wait()
        assert len(answer) == ANSWER
        ww, ws = counters(tmp_path / "writer.worker"), counters(tmp_path / "writer.scheduler")
        assert ww["published_blocks"] == 9 and ww["daemon_errors"] == 0, ww
        assert ws["output_saves"] >= 1, ws

        nxt = p + answer[:30] + [rng.randrange(4, 512) for _ in range(10)]  # 302 tokens
        reader = Engine(tmp_path, tiny_model, "reader", [nxt], *conn, "--no-prefix-cache",
                        "--stats-file", str(tmp_path / "reader"), "--rounds", "2",
                        "--go-file", str(tmp_path / "go"))
        engines.append(reader)
        got = reader.rounds(1)[0]
        rs, rw = counters(tmp_path / "reader.scheduler"), counters(tmp_path / "reader.worker")
        assert rs["hit_tokens"] == 9 * BT, rs      # through the answer's block
        assert rw["loaded_blocks"] == 9 and rw["load_errors"] == 0, rw
        # The same prompt from an empty pool: all of it computed here.
        subprocess.run([KVSCTL, "--socket", sock, "flush", "--all"], check=True,
                       capture_output=True)
        (tmp_path / "go.1").touch()
        want = reader.rounds(2)[1]
        reader.wait()
        assert counters(tmp_path / "reader.scheduler")["hit_tokens"] == 9 * BT  # no more
        assert got == want, f"loaded {got} != computed {want}"
    finally:
        for e in engines:
            e.stop()
        stop_daemon(daemon)
