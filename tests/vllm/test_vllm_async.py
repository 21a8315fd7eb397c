"""vLLM end to end with load_async: a reader engine's hit requests wait in
WAITING_FOR_REMOTE_KVS while the copy runs on the connector's thread, are
reported through get_finished, and then make the tokens an engine without
the connector makes; a request that hits nothing runs beside them. The
writer publishes off the step (publish_async, the default).

Real parts only: the built kvshared, vLLM (CPU) engines in their own
processes, the tiny random-weight Llama. About three minutes on 2 cores,
most of it engine start-up.
"""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
# vllm_support first: it sets KVSHARE_LIB, which importing kvshare reads.
from vllm_support import (BT, Engine, counters, daemon_stats, start_daemon,  # noqa: E402
                          stop_daemon, wait_until)

PREFIX = 8 * BT
HITS = 3


def test_async_load_makes_the_tokens_of_an_engine_without_kvshare(tmp_path, tiny_model):
    rng = random.Random(11)
    prefix = [rng.randrange(4, 512) for _ in range(PREFIX)]
    hits = [prefix + [rng.randrange(4, 512) for _ in range(20 + i)] for i in range(HITS)]
    miss = [rng.randrange(4, 512) for _ in range(PREFIX + 20)]
    sock = str(tmp_path / "kvshared.sock")
    daemon = start_daemon(sock, open(tmp_path / "kvshared.log", "w"))
    engines: list[Engine] = []
    try:
        conn = ["--socket", sock]
        base = Engine(tmp_path, tiny_model, "baseline", hits + [miss])
        writer = Engine(tmp_path, tiny_model, "writer", [prefix + [7]], *conn,
                        "--stats-file", str(tmp_path / "writer"))
        engines += [base, writer]
        writer.wait()
        wait_until("the writer's publish", lambda: daemon_stats(sock)["blocks.committed"]
                   == PREFIX // BT)

        reader = Engine(tmp_path, tiny_model, "reader", hits + [miss], *conn,
                        "--stats-file", str(tmp_path / "reader"), "--no-prefix-cache",
                        "--extra", json.dumps({"load_async": True}))
        engines.append(reader)
        want, got = base.rounds(1)[0], reader.rounds(1)[0]
        assert got == want, f"reader {got} != baseline {want}"
        reader.wait()
        rs, rw = counters(tmp_path / "reader.scheduler"), counters(tmp_path / "reader.worker")
        # Every hit went through WAITING_FOR_REMOTE_KVS (planned by the
        # scheduler, started and reported by the worker), none in the step.
        assert rs["async_loads"] == HITS and rs["hit_tokens"] == HITS * PREFIX, rs
        assert rw["async_loads"] == HITS, rw
        assert rw["loaded_blocks"] == HITS * PREFIX // BT and rw["load_errors"] == 0, rw
        print(f"steps that ended with an async load copying: {rw['async_load_steps']}")
        base.wait()
    finally:
        for e in engines:
            e.stop()
        stop_daemon(daemon)
