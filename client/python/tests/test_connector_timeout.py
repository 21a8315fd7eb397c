"""KvshareConnector's scheduler side against a stopped kvshared: a
lookup returns 0 matched tokens within the connector's deadline,
never raises, and consecutive scheduler steps within the reconnect interval
cost one deadline in all, whatever number of clients (salts) are open; with
the fast path on, the first steps may still hit from the shared index (the
blocks are intact) before that.

vLLM's objects are stand-ins (the connector reads a few fields of them); the
daemon and the library are real. The real engine's end-to-end test is
tests/vllm/test_vllm_e2e.py.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")

import kvshare  # noqa: E402
from kvshare.vllm_connector import KvshareConnector  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402

BS = 16          # vLLM block_size = kvshare block_tokens
TIMEOUT_MS = 300
STEPS = 12       # scheduler steps while the daemon is stopped
GUARD = 10.0     # seconds: past this the steps hang


class TransferConfig:
    def __init__(self, extra: dict) -> None:
        self.kv_connector_extra_config = extra

    def get_from_extra_config(self, key: str, default):
        return self.kv_connector_extra_config.get(key, default)


class ModelConfig:
    model = "connector-timeout"
    dtype = "float16"
    revision = None
    quantization = None

    def get_num_layers(self, pc) -> int:
        return 2

    def get_num_kv_heads(self, pc) -> int:
        return 2

    def get_head_size(self) -> int:
        return 32


def vllm_config(extra: dict) -> SimpleNamespace:
    return SimpleNamespace(
        kv_transfer_config=TransferConfig(extra),
        cache_config=SimpleNamespace(block_size=BS, cache_dtype="auto"),
        model_config=ModelConfig(),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1),
    )


def request(rid: str, prompt: list[int], salt=None) -> SimpleNamespace:
    return SimpleNamespace(request_id=rid, prompt_token_ids=prompt, cache_salt=salt,
                           lora_request=None, mm_features=None, prompt_embeds=None)


def empty_step() -> SimpleNamespace:
    """A SchedulerOutput with nothing scheduled."""
    cached = SimpleNamespace(req_ids=[], new_block_ids=[], resumed_req_ids=set(),
                             num_computed_tokens=[])
    return SimpleNamespace(scheduled_new_reqs=[], scheduled_cached_reqs=cached,
                           num_scheduled_tokens={})


@pytest.mark.parametrize("fast_path", [False, True])
def test_stopped_daemon_costs_one_deadline_per_interval(daemon, monkeypatch, fast_path):
    if not fast_path:
        monkeypatch.setenv("KVS_NO_FASTPATH", "1")  # every lookup by socket
    conn = KvshareConnector(vllm_config({"socket": daemon.socket, "timeout_ms": TIMEOUT_MS,
                                         "reconnect_interval": 60, "log_interval": 0}),
                            KVConnectorRole.SCHEDULER)
    prompt = [int(x) for x in np.random.default_rng(1).integers(0, 50000, 5 * BS + 1)]
    # Publish 5 blocks under the connector's layout, unsalted.
    with kvshare.Client(daemon.socket, conn.side.layout) as c:
        with c.reserve(c.hash_tokens(prompt)) as w:
            for i in w.new:
                w.view(i)[:] = i
    assert conn.get_num_new_matched_tokens(request("warm", prompt), 0) == (5 * BS, False)
    # A second client (another salt) is open too: it must not be asked either.
    assert conn.get_num_new_matched_tokens(request("warm2", prompt, "s2"), 0) == (0, False)
    assert len(conn.side.clients.clients) == 2
    errors0 = conn.side.counters.daemon_errors

    results: list = []

    def steps() -> None:
        for i in range(STEPS):
            salt = None if i % 2 == 0 else "s2"
            results.append(conn.get_num_new_matched_tokens(request(f"r{i}", prompt, salt), 0))
            conn.build_connector_meta(empty_step())  # reports to the daemon, as each step

    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        th = threading.Thread(target=steps)
        th.start()
        th.join(GUARD)
        hung = th.is_alive()
        took = time.monotonic() - t0
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    th.join()
    assert not hung, f"{STEPS} scheduler steps did not end within {GUARD} s of a stopped daemon"
    if fast_path:
        # Hits from the shared index (the blocks are intact) until its
        # heartbeat is stale or the daemon counts as down; misses after.
        assert all(r in ((0, False), (5 * BS, False)) for r in results), results
        first_miss = results.index((0, False))
        assert results[first_miss:] == [(0, False)] * (STEPS - first_miss), results
    else:
        assert results == [(0, False)] * STEPS
    # One call went past its deadline; every later one, on any client,
    # asked nothing until the reconnect interval is over.
    assert conn.side.counters.daemon_errors - errors0 == 1
    assert took >= TIMEOUT_MS / 1000
    # The connector's deadline was the one applied, not the library's 5 s.
    assert took < 5.0
    print(f"{STEPS} steps with a stopped daemon: {took:.3f} s, deadline {TIMEOUT_MS} ms")

    # The interval over (as if 60 s had passed), the daemon answers again.
    conn.side.clients.down_until = conn.side.clients.away_until = 0.0
    assert conn.get_num_new_matched_tokens(request("back", prompt), 0) == (5 * BS, False)
    conn.shutdown()


def test_timeout_ms_must_be_positive(daemon):
    with pytest.raises(ValueError):
        KvshareConnector(vllm_config({"socket": daemon.socket, "timeout_ms": 0}),
                         KVConnectorRole.SCHEDULER)
