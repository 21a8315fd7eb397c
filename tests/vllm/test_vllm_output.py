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

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
# vllm_support first: it sets KVSHARE_LIB, which importing kvshare reads.
from vllm_support import BT, next_turn, start_daemon, stop_daemon  # noqa: E402

PROMPT = 8 * BT + 6   # 8 full blocks and 6 tokens
ANSWER = 40           # the writer's tokens: its KV fills block 8 (tokens 256-287)


def test_next_turn_hits_the_answer_another_vllm_published(tmp_path, tiny_model):
    rng = random.Random(17)
    p = [rng.randrange(4, 512) for _ in range(PROMPT)]
    sock = str(tmp_path / "kvshared.sock")
    daemon = start_daemon(sock, open(tmp_path / "kvshared.log", "w"))
    conn = ["--socket", sock, "--extra", json.dumps({"publish_output": True})]
    try:
        r = next_turn(tmp_path, tiny_model, sock, p, conn, ANSWER, rng)
    finally:
        stop_daemon(daemon)
    assert len(r.answer) == ANSWER
    ww, ws = r.writer_worker, r.writer_scheduler
    assert ww["published_blocks"] == 9 and ww["daemon_errors"] == 0, ww
    assert ws["output_saves"] >= 1, ws
    # The next turn, 302 tokens: through the answer's block.
    rs, rw = r.reader_scheduler, r.reader_worker
    assert rs["hit_tokens"] == 9 * BT, rs
    assert rw["loaded_blocks"] == 9 and rw["load_errors"] == 0, rw
    # The same prompt from an empty pool: all of it computed there.
    assert r.reader_scheduler_after["hit_tokens"] == 9 * BT  # no more
    assert r.got == r.want, f"loaded {r.got} != computed {r.want}"
