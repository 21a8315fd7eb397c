"""KvshareConnector against what API users control, with a real kvshared and
fake vLLM objects: a VllmConfig, Requests and SchedulerOutputs as small as the
connector reads them, and CPU paged caches as vLLM's CPU backend shapes them.
One fake engine is the connector's two sides (scheduler and worker) driven
the way vLLM's scheduler and model runner call them, one step per request.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import types

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
import torch  # noqa: E402
from vllm.config import KVTransferConfig  # noqa: E402
from vllm.distributed import parallel_state  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.lora.request import LoRARequest  # noqa: E402

import kvshare  # noqa: E402
from kvshare import _vllm_common  # noqa: E402
from kvshare.vllm_connector import KvshareConnector  # noqa: E402

BS = 16                      # vLLM block_size = kvshare block_tokens
LAYERS, KV_HEADS, HEAD_DIM = 2, 2, 16
PAGES = 512


class FakeModelConfig:
    """vllm.config.ModelConfig as the connector reads it."""

    def __init__(self, **over: object) -> None:
        self.model = "/models/tiny-llama"
        self.model_weights = ""
        self.revision = None
        self.code_revision = None
        self.hf_config_path = None
        self.dtype = torch.float32
        self.quantization = None
        self.quantization_config = None
        self.hf_overrides: dict = {}
        self.model_impl = "auto"
        self.model_class_overrides: dict = {}
        self.disable_sliding_window = False
        self.__dict__.update(over)

    def get_num_layers(self, pc: object) -> int:
        return LAYERS

    def get_num_kv_heads(self, pc: object) -> int:
        return KV_HEADS

    def get_head_size(self) -> int:
        return HEAD_DIM


def vllm_config(socket: str, parallel: dict | None = None, extra: dict | None = None,
                **model: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        model_config=FakeModelConfig(**model),
        parallel_config=types.SimpleNamespace(**{
            "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
            "prefill_context_parallel_size": 1, "decode_context_parallel_size": 1,
            **(parallel or {})}),
        cache_config=types.SimpleNamespace(block_size=BS, cache_dtype="auto"),
        kv_transfer_config=KVTransferConfig(
            kv_connector="KvshareConnector", kv_role="kv_both",
            kv_connector_module_path="kvshare.vllm_connector",
            kv_connector_extra_config={"socket": socket, "log_interval": 0, **(extra or {})}))


def request(req_id: str, tokens: list[int], *, salt: str | None = None,
            lora: LoRARequest | None = None,
            embeds: torch.Tensor | None = None) -> types.SimpleNamespace:
    """vllm.v1.request.Request as the connector reads it."""
    return types.SimpleNamespace(request_id=req_id, prompt_token_ids=tokens, cache_salt=salt,
                                 lora_request=lora, mm_features=[], prompt_embeds=embeds)


def prompt(seed: int, blocks: int = 4) -> list[int]:
    """blocks full blocks and one more token (the one the model computes)."""
    return [int(x) for x in np.random.default_rng(seed).integers(1, 30000, blocks * BS + 1)]


def sched_out(new: list[tuple[str, list[int], int]] = (),
              tokens: dict[str, int] | None = None) -> types.SimpleNamespace:
    """A SchedulerOutput of new requests only: (req_id, vLLM blocks, computed
    tokens) each, tokens scheduled per request (default: none)."""
    return types.SimpleNamespace(
        scheduled_new_reqs=[types.SimpleNamespace(req_id=r, block_ids=(pages,),
                                                  num_computed_tokens=n)
                            for r, pages, n in new],
        scheduled_cached_reqs=types.SimpleNamespace(req_ids=[], new_block_ids=[],
                                                    resumed_req_ids=set(),
                                                    num_computed_tokens=[]),
        num_scheduled_tokens=dict(tokens or {}))


class Engine:
    """The connector's scheduler and worker sides, and a paged KV cache whose
    pages a fake forward fills with a value per request."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, socket: str, **config: object) -> None:
        monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: 0)
        cfg = vllm_config(socket, **config)
        self.sched = KvshareConnector(cfg, KVConnectorRole.SCHEDULER)
        self.worker = KvshareConnector(cfg, KVConnectorRole.WORKER)
        self.kv = {f"model.layers.{i}.self_attn.attn":
                   torch.zeros(PAGES, KV_HEADS, BS, 2 * HEAD_DIM) for i in range(LAYERS)}
        self.worker.register_kv_caches(self.kv)
        self.next_page = 0
        self.n = 0
        self.gates: list[threading.Event] = []  # copies a test holds back

    def run(self, req: types.SimpleNamespace, value: float = 1.0) -> tuple[int, float]:
        """Schedule req (prefill in one step), load, compute the rest with
        `value` in every element, publish. Returns the tokens the connector
        reported as hits, and the value the first page holds after the step
        (what was loaded, or `value` when it was computed)."""
        self.n += 1
        hit, asynch = self.sched.get_num_new_matched_tokens(req, 0)
        assert asynch is False
        self.sched.update_state_after_alloc(req, None, hit)
        npages = -(-len(req.prompt_token_ids) // BS)
        pages = list(range(self.next_page, self.next_page + npages))
        self.next_page = (self.next_page + npages) % (PAGES - 64)
        so = sched_out([(req.request_id, pages, hit)],
                       {req.request_id: len(req.prompt_token_ids) - hit})
        meta = self.sched.build_connector_meta(so)
        self.worker.handle_preemptions(meta)
        for t in self.kv.values():
            t[pages] = -1.0  # what was there before: neither loaded nor computed
        self.worker.bind_connector_metadata(meta)
        self.worker.start_load_kv(None)
        for name, t in self.kv.items():
            self.worker.wait_for_layer_load(name)
            t[pages[hit // BS:]] = value  # the forward computes what was not loaded
        self.worker.wait_for_save()
        self.worker.clear_connector_metadata()
        assert not self.worker.get_block_ids_with_load_errors()
        self.finish(req, pages)
        return hit, float(self.kv["model.layers.0.self_attn.attn"][pages[0]].flatten()[0])

    def finish(self, req: types.SimpleNamespace, pages: list[int]) -> None:
        """request_finished, then (when it holds the blocks for a publish)
        empty steps until get_finished reports the request, as vLLM does
        (kv_connector_no_forward: the step's loads and saves, no forward)."""
        held, _ = self.sched.request_finished(req, pages)
        deadline = time.monotonic() + 10
        while held:
            self.worker.bind_connector_metadata(self.sched.build_connector_meta(sched_out()))
            self.worker.start_load_kv(None)
            self.worker.wait_for_save()
            sending, _ = self.worker.get_finished({req.request_id})
            self.worker.clear_connector_metadata()
            held = req.request_id not in (sending or ())
            assert time.monotonic() < deadline, "get_finished never reported the publish"
            time.sleep(0.001)

    def close(self) -> None:
        for g in self.gates:  # a test that failed holding a copy back
            g.set()
        self.sched.shutdown()
        self.worker.shutdown()


def stats(socket: str) -> dict[str, int]:
    with kvshare.Client(socket) as c:
        return c.stats()


@pytest.fixture
def engines(monkeypatch, daemon):
    made: list[Engine] = []

    def make(**config: object) -> Engine:
        made.append(Engine(monkeypatch, daemon.socket, **config))
        return made[-1]

    yield make
    for e in made:
        e.close()


def test_fake_engine_shares_a_prefix(engines):
    """The fake engine works: a second request of the same prompt loads the
    first one's KV (what every other test's miss is measured against)."""
    e = engines()
    p = prompt(1)
    assert e.run(request("a", p), 1.0) == (0, 1.0)
    assert e.run(request("b", p), 2.0) == (4 * BS, 1.0)  # loaded, not computed
    other = engines()  # another engine of the same model and config
    assert other.run(request("c", p), 3.0) == (4 * BS, 1.0)


def test_pipeline_parallel_refused(daemon, monkeypatch):
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: 0)
    for what in ("pipeline_parallel_size", "prefill_context_parallel_size",
                 "decode_context_parallel_size"):
        for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
            with pytest.raises(ValueError, match=what):
                KvshareConnector(vllm_config(daemon.socket, parallel={what: 2}), role)


def test_lora_keyed_by_name_and_path(engines):
    e = engines()
    p = prompt(3)
    a1 = LoRARequest("sql", 1, "/adapters/sql-v1")
    assert e.run(request("a", p, lora=a1), 1.0) == (0, 1.0)
    assert e.run(request("b", p, lora=LoRARequest("sql", 1, "/adapters/sql-v1")), 2.0) \
        == (4 * BS, 1.0)
    # The name re-pointed at other weights: a miss, as in vLLM's own cache.
    assert e.run(request("c", p, lora=LoRARequest("sql", 1, "/adapters/sql-v2")), 3.0) \
        == (0, 3.0)
    assert e.run(request("d", p), 4.0) == (0, 4.0)  # and the base model is apart


@pytest.mark.parametrize("change", [{"revision": "r2"}, {"quantization": "fp8"},
                                    {"dtype": torch.bfloat16},
                                    {"hf_overrides": {"rope_theta": 1e6}},
                                    {"model_weights": "/other/weights"}])
def test_model_identity(engines, change):
    p = prompt(4)
    first = engines(revision="r1")
    assert first.run(request("a", p), 1.0) == (0, 1.0)
    other = engines(**{"revision": "r1", **change})
    assert other.run(request("b", p), 2.0) == (0, 2.0)


def test_model_id_as_given(engines, daemon):
    """model_id is the namespace's model string as it is: engines that load
    one checkpoint from two paths share, and a plain client finds the blocks."""
    p = prompt(5)
    a = engines(model="/a/tiny", extra={"model_id": "tiny-llama"})
    assert a.run(request("a", p), 1.0) == (0, 1.0)
    b = engines(model="/b/tiny", extra={"model_id": "tiny-llama"})
    assert b.run(request("b", p), 2.0) == (4 * BS, 1.0)
    assert a.worker.side.layout.model == "tiny-llama"
    with kvshare.Client(daemon.socket, a.worker.side.layout) as c:
        with c.lookup(c.hash_tokens(p)) as r:
            assert r.hits == 4
    with pytest.raises(ValueError, match="model_id"):
        engines(extra={"model_id": "x" * 256})


def test_salts(engines):
    """A salt isolates; any string is a salt of its own (longer than a
    layout string may be, NUL inside, a lone surrogate)."""
    e = engines()
    p = prompt(6)
    salts = ["t1", "x" * 1000, "a\x00b", "a\x00c", "\ud800"]
    for i, s in enumerate(salts):
        assert e.run(request(f"w{i}", p, salt=s), float(i)) == (0, float(i))
    for i, s in enumerate(salts):
        assert e.run(request(f"r{i}", p, salt=s), 9.0) == (4 * BS, float(i))
    assert e.sched.side.counters.no_client == 0


def test_thousand_salts_keep_clients_bounded(monkeypatch, start_daemon):
    """1,000 distinct cache_salts: at most max_clients daemon connections
    per side at any time, and every call keeps returning. The daemon lets
    this uid make every namespace, so that each salt does connect."""
    d = start_daemon(["--host-size", "64M", "--max-namespaces-per-uid", "2000"])
    cap = 8
    e = Engine(monkeypatch, d.socket, extra={"max_clients": cap})
    try:
        p = prompt(7, blocks=1)
        base = stats(d.socket)["clients.connected"]
        for i in range(1000):
            assert e.run(request(f"s{i}", p, salt=f"salt-{i}"), 1.0) == (0, 1.0)
            for conn in (e.sched, e.worker):
                assert len(conn.side.clients.clients) <= cap
            if i % 100 == 99:
                assert stats(d.socket)["clients.connected"] <= base + 2 * cap
        # The most recent salts still hit, through the clients that were kept.
        assert e.run(request("again", p, salt="salt-999"), 2.0) == (BS, 1.0)
        s = stats(d.socket)
        assert s["clients.connected"] <= base + 2 * cap and s["leases.active"] == 0
        assert s["namespaces.count"] >= 1000 and e.sched.side.counters.no_client == 0
    finally:
        e.close()


def test_salts_past_the_daemons_namespace_cap_reclaim_the_oldest(engines, daemon):
    """Past the daemon's cap on namespaces per uid (256 by default) each new
    salt takes the oldest idle namespace (its block goes): every request of
    300 salts is served, the engine's calls keep returning, the latest salts
    hit and the first ones, reclaimed, miss."""
    e = engines(extra={"max_clients": 4})
    p = prompt(10, blocks=1)
    for i in range(300):
        assert e.run(request(f"s{i}", p, salt=f"salt-{i}"), 1.0) == (0, 1.0)
    assert e.sched.side.counters.no_client == 0 and e.sched.side.counters.daemon_errors == 0
    assert e.run(request("new", p, salt="salt-299"), 2.0) == (BS, 1.0)
    assert e.run(request("old", p, salt="salt-0"), 2.0) == (0, 2.0)


def test_no_idle_client_is_a_miss(daemon):
    """Past max_clients the least recently used idle client is closed; when
    every client holds a lease, a new namespace is a miss at once."""
    counters = _vllm_common.Counters()
    layout = kvshare.Layout(model="m", layers=1, kv_heads=1, head_dim=8, block_tokens=4)
    cl = _vllm_common._Clients(daemon.socket, layout, 5.0, counters, 2, max_salts=2)
    a, b = cl.get("a", None), cl.get("b", None)
    for c in (a, b):
        c.reserve(c.hash_tokens([1, 2, 3, 4])).commit()
    leases = [c.lookup(c.hash_tokens([1, 2, 3, 4])) for c in (a, b)]
    assert [r.hits for r in leases] == [1, 1]
    assert cl.get("c", None) is None and counters.no_client == 1
    assert cl.get("a", None) is a  # a client already open is always had
    leases[1].release()
    c = cl.get("c", None)
    assert c is not None and list(cl.clients) == [("a", None), ("c", None)]
    with pytest.raises(kvshare.DisconnectedError):
        b.stats()  # b, idle, was the one closed
    leases[0].release()
    cl.close()


def test_least_recently_used_client_goes(daemon):
    """Past max_clients the client used least recently is closed, not the
    one opened first: a request for a keeps a."""
    counters = _vllm_common.Counters()
    layout = kvshare.Layout(model="m", layers=1, kv_heads=1, head_dim=8, block_tokens=4)
    cl = _vllm_common._Clients(daemon.socket, layout, 5.0, counters, 2, max_salts=2)
    a, b = cl.get("a", None), cl.get("b", None)
    assert cl.get("a", None) is a
    c = cl.get("c", None)
    assert c is not None and list(cl.clients) == [("a", None), ("c", None)]
    with pytest.raises(kvshare.DisconnectedError):
        b.stats()  # b, used less recently than a, was the one closed
    assert a.stats()["leases.active"] == 0  # a still serves
    cl.close()


def test_namespace_refused_is_a_miss_not_an_outage(start_daemon):
    """The daemon refusing one connection (its --max-clients, a per-uid cap)
    is a miss for that request; the next namespace connects as soon as there
    is room, not after the reconnect interval of a daemon that is away."""
    d = start_daemon(["--host-size", "16M", "--max-clients", "2"])
    hogs = [kvshare.Client(d.socket), kvshare.Client(d.socket)]
    counters = _vllm_common.Counters()
    layout = kvshare.Layout(model="m", layers=1, kv_heads=1, head_dim=8, block_tokens=4)
    cl = _vllm_common._Clients(d.socket, layout, 60.0, counters, 4)
    assert cl.get("a", None) is None
    hogs.pop().close()
    deadline = time.monotonic() + 10
    c = None
    while c is None and time.monotonic() < deadline:
        c = cl.get("b", None)  # the daemon sees the hog go in its own time
    assert c is not None and c.stats()["clients.connected"] == 2
    assert counters.no_client >= 1 and counters.daemon_errors == 0
    cl.close()
    hogs[0].close()


def test_long_prompt_is_windowed_not_an_outage(monkeypatch, start_daemon):
    """A prompt of 16,385 blocks (262,161 tokens: more hashes than the daemon
    takes in one call) is looked up, published and loaded a window of
    MAX_HASHES blocks at a time: it costs no request errors, the namespace's
    other requests keep hitting, and the same prompt again hits in full."""
    blocks = kvshare.MAX_HASHES + 1
    # Small blocks (1 KiB) so that 16,385 of them fit the daemon and the
    # engine's paged cache (two long prompts' pages, and short ones).
    g = globals()
    monkeypatch.setitem(g, "KV_HEADS", 1)
    monkeypatch.setitem(g, "HEAD_DIM", 4)
    monkeypatch.setitem(g, "PAGES", 2 * (blocks + 1) + 256)
    d = start_daemon(["--host-size", "64M"])
    e = Engine(monkeypatch, d.socket)
    try:
        short = prompt(20)
        assert e.run(request("a", short), 1.0) == (0, 1.0)
        assert e.run(request("b", short), 2.0) == (4 * BS, 1.0)
        long = prompt(21, blocks=blocks)
        assert len(long) == 262161
        assert e.run(request("long-1", long), 3.0) == (0, 3.0)
        assert e.run(request("c", short), 4.0) == (4 * BS, 1.0)  # still shared
        assert e.worker.side.counters.published_blocks == 4 + blocks
        assert e.run(request("long-2", long), 5.0) == (blocks * BS, 3.0)
        assert e.worker.side.counters.loaded_blocks == 2 * 4 + blocks
        for conn in (e.sched, e.worker):
            assert conn.side.counters.request_errors == 0 and conn.side.counters.daemon_errors == 0
        assert stats(d.socket)["leases.active"] == 0
    finally:
        e.close()


def test_request_errors_keep_the_client(daemon):
    """An error that belongs to one request (a limit, too many hashes, no
    room, bad input) is a miss for it: the client stays and the next
    request is served at once. Only a lost connection closes the client
    and makes every request miss for the reconnect interval."""
    counters = _vllm_common.Counters()
    layout = kvshare.Layout(model="m", layers=1, kv_heads=1, head_dim=8, block_tokens=4)
    cl = _vllm_common._Clients(daemon.socket, layout, 60.0, counters, 4)
    a = cl.get(None, None)
    for err in (kvshare.LimitError(kvshare.errors.E_TOOMANY), kvshare.LimitError(
            kvshare.errors.E_LIMIT), kvshare.FullError(kvshare.errors.E_FULL),
            kvshare.errors.InvalidArgument(-22), kvshare.errors.LeaseError(
                kvshare.errors.E_NOLEASE)):
        cl.failed((None, None), err)
        assert cl.get(None, None) is a and not cl.away()
    assert counters.request_errors == 5 and counters.daemon_errors == 0
    assert a.query(a.hash_tokens([1, 2, 3, 4])) == 0  # it still serves
    cl.failed((None, None), kvshare.DisconnectedError(kvshare.errors.E_DISCONNECTED))
    assert cl.away() and cl.get(None, None) is None and cl.get("s", None) is None
    assert counters.daemon_errors == 1
    cl.close()


def test_salts_cannot_take_the_unsalted_clients(monkeypatch, start_daemon):
    """max_salts bounds the salted namespaces with a client: 60 random salts
    through a connector with max_clients 4 and max_salts 2 keep at most 2
    salted clients a side, never close the unsalted namespace's client (its
    requests hit through the same connection), and the latest salts hit."""
    d = start_daemon(["--host-size", "64M"])
    e = Engine(monkeypatch, d.socket, extra={"max_clients": 4, "max_salts": 2})
    try:
        p = prompt(30, blocks=1)
        base = stats(d.socket)["clients.connected"]
        assert e.run(request("u0", p), 1.0) == (0, 1.0)
        shared = [conn.side.clients.clients[(None, None)] for conn in (e.sched, e.worker)]
        for i in range(60):
            assert e.run(request(f"s{i}", p, salt=f"salt-{i}"), 2.0) == (0, 2.0)
            for conn in (e.sched, e.worker):
                assert sum(k[0] is not None for k in conn.side.clients.clients) <= 2
        assert [conn.side.clients.clients.get((None, None))
                for conn in (e.sched, e.worker)] == shared
        assert e.run(request("u1", p), 3.0) == (BS, 1.0)
        assert e.run(request("again", p, salt="salt-59"), 4.0) == (BS, 2.0)
        assert stats(d.socket)["clients.connected"] <= base + 2 * 4
        assert e.sched.side.counters.no_client == 0
    finally:
        e.close()


def test_salt_past_the_budget_with_every_salt_busy_is_a_miss(daemon):
    """A new salt when every salted client holds a lease is a miss, while an
    unsalted namespace still gets its client (its share is not the salts')."""
    counters = _vllm_common.Counters()
    layout = kvshare.Layout(model="m", layers=1, kv_heads=1, head_dim=8, block_tokens=4)
    cl = _vllm_common._Clients(daemon.socket, layout, 5.0, counters, 4, max_salts=2)
    leases = []
    for salt in ("a", "b"):
        c = cl.get(salt, None)
        c.reserve(c.hash_tokens([1, 2, 3, 4])).commit()
        leases.append(c.lookup(c.hash_tokens([1, 2, 3, 4])))
    assert cl.get("c", None) is None and counters.no_client == 1
    assert cl.get(None, None) is not None and cl.get(None, "lora") is not None
    leases[0].release()
    assert cl.get("c", None) is not None
    assert sorted(k for k in cl.clients if k[0]) == [("b", None), ("c", None)]
    leases[1].release()
    cl.close()


def test_exception_in_a_publish_ends_its_lease(engines, daemon, monkeypatch):
    e = engines()
    p = prompt(8)

    def broken(*args: object, **kwargs: object) -> int:
        raise TypeError("a shape the copy did not expect")

    monkeypatch.setattr(kvshare.WriteLease, "store", broken)
    assert e.run(request("a", p), 1.0) == (0, 1.0)  # wait_for_save did not raise
    monkeypatch.undo()
    s = stats(daemon.socket)
    assert s["leases.active"] == 0 and s["blocks.committed"] == 0
    with kvshare.Client(daemon.socket, e.worker.side.layout) as c:
        with c.reserve(c.hash_tokens(p)) as w:
            assert w.statuses == [kvshare.NEW] * 4  # not BUSY: nobody is writing them
            w.abort()


def test_daemon_lost_in_a_publish_is_a_miss(engines, daemon, monkeypatch):
    """A publish that loses the daemon (a deadline, a disconnect) counts a
    daemon error, raises nothing into vLLM's step, and leaves no lease."""
    e = engines()
    p = prompt(10)

    def lost(*args: object, **kwargs: object) -> int:
        raise kvshare.DisconnectedError(kvshare.errors.E_DISCONNECTED, "store")

    monkeypatch.setattr(kvshare.WriteLease, "store", lost)
    assert e.run(request("a", p), 1.0) == (0, 1.0)  # wait_for_save did not raise
    monkeypatch.undo()
    assert e.worker.side.counters.daemon_errors == 1
    deadline = time.monotonic() + 10  # the daemon sees the client go in its own time
    while stats(daemon.socket)["leases.active"] and time.monotonic() < deadline:
        time.sleep(0.01)
    s = stats(daemon.socket)
    assert s["leases.active"] == 0 and s["blocks.committed"] == 0


def test_exception_in_a_load_is_a_recompute(engines, daemon, monkeypatch):
    """Anything a load's lookup throws is a miss reported as load errors, and
    no read lease is left."""
    e = engines()
    p = prompt(9)
    assert e.run(request("a", p), 1.0) == (0, 1.0)
    real = kvshare.Client.hash_tokens

    def broken(self: kvshare.Client, tokens: object) -> np.ndarray:
        if self in e.worker.side.clients.clients.values():
            raise TypeError("not the scheduler's")
        return real(self, tokens)

    monkeypatch.setattr(kvshare.Client, "hash_tokens", broken)
    hit, _ = e.sched.get_num_new_matched_tokens(request("b", p), 0)
    assert hit == 4 * BS
    e.sched.update_state_after_alloc(request("b", p), None, hit)
    so = sched_out([("b", [300, 301, 302, 303, 304], hit)], {"b": 1})
    e.worker.bind_connector_metadata(e.sched.build_connector_meta(so))
    e.worker.start_load_kv(None)  # does not raise
    e.worker.wait_for_save()
    assert e.worker.get_block_ids_with_load_errors() == {300, 301, 302, 303}
    assert stats(daemon.socket)["leases.active"] == 0


# ---- publish_async and load_async --------------------------------------------

def forward(e: Engine, meta: object, fill: dict[int, torch.Tensor]) -> None:
    """One step of the worker as vLLM's model runner calls it, the forward
    writing fill[page] (every layer's [kv_heads, block, 2 * head_dim]) into
    its pages."""
    e.worker.handle_preemptions(meta)
    e.worker.bind_connector_metadata(meta)
    e.worker.start_load_kv(None)
    for name, t in e.kv.items():
        e.worker.wait_for_layer_load(name)
        for page, v in fill.items():
            t[page] = v
    e.worker.wait_for_save()
    e.worker.get_finished(set())
    e.worker.clear_connector_metadata()


def prefill(e: Engine, req: types.SimpleNamespace, pages: list[int],
            fill: dict[int, torch.Tensor]) -> None:
    """@req's first step, a miss: the lookup finds nothing, its prompt is
    scheduled whole into @pages, and the forward writes fill[page]."""
    assert e.sched.get_num_new_matched_tokens(req, 0) == (0, False)
    e.sched.update_state_after_alloc(req, None, 0)
    so = sched_out([(req.request_id, pages, 0)], {req.request_id: len(req.prompt_token_ids)})
    forward(e, e.sched.build_connector_meta(so), fill)


def pool_kv(e: Engine, socket: str, tokens: list[int], blocks: int) -> torch.Tensor:
    """Every layer of the pool's first `blocks` blocks of `tokens`, loaded
    into fresh pages: [layers, blocks, kv_heads, BS, 2 * head_dim]."""
    out = torch.zeros(LAYERS, blocks, KV_HEADS, BS, 2 * HEAD_DIM)
    with kvshare.Client(socket, e.worker.side.layout) as c, \
            c.lookup(c.hash_tokens(tokens[: blocks * BS])) as lease:
        assert lease.hits == blocks
        for layer in range(LAYERS):
            t = torch.zeros(PAGES, KV_HEADS, BS, 2 * HEAD_DIM)
            lease.load(layer, e.worker.side.cache, t, list(range(blocks)))
            out[layer] = t[:blocks]
    return out


def gate_publishes(e: Engine) -> threading.Event:
    """Hold the publish thread until the event is set: the publishes queued
    after this are still to copy (as a slow copy would be)."""
    gate = threading.Event()
    e.gates.append(gate)
    e.worker.side.publishes.submit("gate", [], gate.wait)
    return gate


def test_reused_block_not_published_with_another_requests_kv(engines, daemon):
    """Request a's blocks are freed by a preemption (vLLM has no hook for it)
    while its publish copy is still queued, and vLLM gives them to b, whose
    forward writes its own KV into them. The pool must hold a's KV under a's
    hashes, byte for byte: the step waited for a's copy first."""
    e = engines()
    p = prompt(40)
    pages = list(range(100, 105))
    gen = torch.Generator().manual_seed(40)
    kv_a = {pg: torch.randn(KV_HEADS, BS, 2 * HEAD_DIM, generator=gen) for pg in pages}
    gate = gate_publishes(e)
    a = request("a", p)
    prefill(e, a, pages, kv_a)
    assert e.worker.side.publishes.busy() == {"gate", "a"}  # a's copy has not run
    # a is preempted; b gets its blocks in the next step
    b = request("b", prompt(41))
    e.sched.get_num_new_matched_tokens(b, 0)
    e.sched.update_state_after_alloc(b, None, 0)
    meta = e.sched.build_connector_meta(sched_out([("b", pages, 0)], {"b": len(p)}))
    assert set(pages) <= meta.writes
    threading.Timer(0.2, gate.set).start()  # the copy ends in its own time
    kv_b = {pg: torch.full((KV_HEADS, BS, 2 * HEAD_DIM), 7.0) for pg in pages}
    forward(e, meta, kv_b)
    gate.set()
    e.worker.side.publishes.wait_all()
    want = torch.stack([kv_a[pg] for pg in pages[:4]])
    got = pool_kv(e, daemon.socket, p, 4)
    for layer in range(LAYERS):
        assert torch.equal(got[layer], want), f"layer {layer}: not a's KV"
    assert e.worker.side.counters.publish_waits == 1


def test_finished_request_held_until_its_publish_is_done(engines, daemon):
    """request_finished asks vLLM to keep the blocks (delay_free_blocks) while
    a publish of the request may still copy them; get_finished reports it in
    finished_sending only once the copy committed. A request that published
    nothing is not held."""
    e = engines()
    p = prompt(42)
    pages = list(range(200, 205))
    gate = gate_publishes(e)
    a = request("a", p)
    prefill(e, a, pages, {pg: torch.full((KV_HEADS, BS, 2 * HEAD_DIM), 3.0) for pg in pages})
    assert e.sched.request_finished(a, pages) == (True, None)
    meta = e.sched.build_connector_meta(sched_out())
    assert meta.sending == {"a"}
    e.worker.bind_connector_metadata(meta)
    assert e.worker.get_finished({"a"}) == (None, None)  # still queued: held
    e.worker.clear_connector_metadata()
    assert stats(daemon.socket)["blocks.committed"] == 0
    gate.set()
    e.worker.side.publishes.wait_all()
    e.worker.bind_connector_metadata(e.sched.build_connector_meta(sched_out()))
    assert e.worker.get_finished(set()) == ({"a"}, None)
    e.worker.clear_connector_metadata()
    assert stats(daemon.socket)["blocks.committed"] == 4
    # a prompt shorter than a block publishes nothing: not held
    short = request("s", p[: BS - 1])
    e.sched.get_num_new_matched_tokens(short, 0)
    assert e.sched.request_finished(short, [300]) == (False, None)


def decode_out(req_id: str, new_pages: list[int], computed: int, scheduled: int):
    """A SchedulerOutput of one running request: @scheduled tokens after
    @computed, with @new_pages appended to its blocks."""
    return types.SimpleNamespace(
        scheduled_new_reqs=[],
        scheduled_cached_reqs=types.SimpleNamespace(req_ids=[req_id],
                                                    new_block_ids=[(new_pages,)],
                                                    resumed_req_ids=set(),
                                                    num_computed_tokens=[computed]),
        num_scheduled_tokens={req_id: scheduled})


@pytest.mark.parametrize("publish_async", [True, False])
def test_output_blocks_published_as_they_fill(engines, daemon, publish_async):
    """publish_output: the blocks a request's output fills are published in
    the step that computes them, after the prompt's (as vLLM's own prefix
    cache keeps them), and another engine's next turn, whose prompt holds
    the answer, loads all six blocks with the output's KV. Off (the
    default): only the prompt's."""
    out = [7] * (2 * BS)                  # the answer: two more blocks and a token
    for on, seed in ((True, 44), (False, 45)):
        e = engines(extra={"publish_async": publish_async, "publish_output": on})
        p = prompt(seed)                  # 4 full blocks and a token
        pages = list(range(100, 105))
        a = request("a", p)
        prefill(e, a, pages, {pg: torch.full((KV_HEADS, BS, 2 * HEAD_DIM), 3.0) for pg in pages})
        a.all_token_ids = p + out         # vLLM appends each token it samples
        # The decode steps, as one: the answer's KV but its last token's.
        forward(e, e.sched.build_connector_meta(decode_out("a", [105, 106], len(p),
                                                           len(out) - 1)),
                {pg: torch.full((KV_HEADS, BS, 2 * HEAD_DIM), 5.0) for pg in (104, 105)})
        e.finish(a, pages + [105, 106])
        e.worker.side.publishes.wait_all()
        assert e.sched.side.counters.output_saves == (1 if on else 0)
    # 6 blocks of the first engine's request, 4 of the second's
    assert stats(daemon.socket)["blocks.committed"] == 6 + 4

    b = engines()
    nxt = prompt(44) + out[:-1] + [9] * 3  # the next turn: the answer and more
    assert b.run(request("b", nxt), 6.0) == (6 * BS, 3.0)
    layer = b.kv["model.layers.0.self_attn.attn"]
    assert torch.all(layer[5] == 5.0)     # the answer's second block: the decode's KV


def test_publish_async_off_publishes_in_the_step(engines, daemon):
    e = engines(extra={"publish_async": False})
    p = prompt(43)
    pages = list(range(100, 105))
    a = request("a", p)
    prefill(e, a, pages, {pg: torch.full((KV_HEADS, BS, 2 * HEAD_DIM), 3.0) for pg in pages})
    assert stats(daemon.socket)["blocks.committed"] == 4  # before any get_finished
    assert e.sched.request_finished(a, pages) == (False, None)


class Blocks:
    """KVCacheBlocks as update_state_after_alloc reads it."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def get_block_ids(self) -> tuple[list[int], ...]:
        return (self.ids,)


def test_async_load_reported_through_get_finished(engines, daemon):
    """load_async: the lookup says load_kv_async=True; the load is planned at
    allocation (vLLM schedules the request no further), copied on a thread
    while steps go on, and the request is reported in finished_recving once
    every layer is in its pages; when it is scheduled, nothing loads again."""
    writer = engines()
    p = prompt(44)
    assert writer.run(request("w", p), 5.0) == (0, 5.0)
    e = engines(extra={"load_async": True})
    r = request("r", p)
    assert e.sched.get_num_new_matched_tokens(r, 0) == (4 * BS, True)
    pages = list(range(400, 405))
    e.sched.update_state_after_alloc(r, Blocks(pages), 4 * BS)
    for t in e.kv.values():
        t[pages] = -1.0
    meta = e.sched.build_connector_meta(sched_out())  # r is not scheduled
    assert [ld.req_id for ld in meta.async_loads] == ["r"] and not meta.loads
    gate = threading.Event()
    e.gates.append(gate)
    e.worker.side.aloads.submit("gate", [], gate.wait)  # the copy is still to run
    e.worker.handle_preemptions(meta)
    e.worker.bind_connector_metadata(meta)
    e.worker.start_load_kv(None)  # returns with the copy queued
    e.worker.wait_for_save()
    assert e.worker.get_finished(set()) == (None, None)
    e.worker.clear_connector_metadata()
    assert float(e.kv["model.layers.1.self_attn.attn"][pages[0]].flatten()[0]) == -1.0
    gate.set()
    e.worker.side.aloads.wait_all()
    out = types.SimpleNamespace(finished_recving=None)
    deadline = time.monotonic() + 10
    while not out.finished_recving:
        e.worker.bind_connector_metadata(e.sched.build_connector_meta(sched_out()))
        out.finished_recving = e.worker.get_finished(set())[1]
        e.worker.clear_connector_metadata()
        assert time.monotonic() < deadline
    assert out.finished_recving == {"r"}
    assert not e.worker.get_block_ids_with_load_errors()
    e.sched.update_connector_output(out)
    for t in e.kv.values():
        assert torch.all(t[pages[:4]] == 5.0) and torch.all(t[pages[4]] == -1.0)
    meta = e.sched.build_connector_meta(sched_out([("r", pages, 4 * BS)], {"r": 1}))
    assert not meta.loads and not meta.async_loads
    # held for its publish? its blocks were loaded, not computed: the
    # reserve finds them there, and vLLM holds them until it is reported
    e.finish(r, pages)


def test_async_load_with_the_daemon_gone_is_reported_with_errors(engines, daemon):
    """An async load that can pin nothing: the request is reported in
    finished_recving in the same pass, its blocks as load errors (vLLM
    recomputes them)."""
    writer = engines()
    p = prompt(45)
    writer.run(request("w", p), 5.0)
    e = engines(extra={"load_async": True})
    r = request("r", p)
    assert e.sched.get_num_new_matched_tokens(r, 0) == (4 * BS, True)
    pages = list(range(400, 405))
    e.sched.update_state_after_alloc(r, Blocks(pages), 4 * BS)
    daemon.stop()
    e.worker.bind_connector_metadata(e.sched.build_connector_meta(sched_out()))
    e.worker.start_load_kv(None)
    assert e.worker.get_finished(set()) == (None, {"r"})
    assert e.worker.get_block_ids_with_load_errors() == set(pages[:4])
    e.worker.clear_connector_metadata()


def test_scheduler_queries_and_a_load_that_finds_less_reports_it(engines, daemon):
    """The scheduler's question is a query: nothing pinned, no lookup hit;
    blocks gone between it and the worker's load (flushed here) are load
    errors, recomputed, never garbage."""
    import os
    import subprocess

    build = os.environ.get("BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                     "build"))
    e = engines()
    p = prompt(12)
    assert e.run(request("a", p), 1.0) == (0, 1.0)
    before = stats(daemon.socket)
    hit, _ = e.sched.get_num_new_matched_tokens(request("b", p), 0)
    assert hit == 4 * BS
    after = stats(daemon.socket)
    assert after["blocks.query_asked"] - before["blocks.query_asked"] == 4
    assert after["blocks.lookup_hit"] == before["blocks.lookup_hit"]
    assert after["leases.active"] == 0
    r = subprocess.run([os.path.join(build, "kvsctl"), "--socket", daemon.socket, "flush",
                        "--all"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    e.sched.update_state_after_alloc(request("b", p), None, hit)
    so = sched_out([("b", [300, 301, 302, 303, 304], hit)], {"b": 1})
    e.worker.bind_connector_metadata(e.sched.build_connector_meta(so))
    e.worker.start_load_kv(None)
    e.worker.wait_for_save()
    assert e.worker.get_block_ids_with_load_errors() == {300, 301, 302, 303}
    e.worker.side.publishes.wait_all()  # b's publish (off the step) holds a lease until it ends
    assert stats(daemon.socket)["leases.active"] == 0


def test_tensor_parallel_hit_needs_every_rank(daemon, monkeypatch):
    """With TP=2 each rank's KV heads are in its own namespace (tp_rank 0
    and 1): the scheduler reports a block only when both ranks have it,
    since a rank that misses would recompute under KV vLLM counts as
    loaded. Each rank's worker side names its namespace by its own rank."""
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: 1)
    cfg = vllm_config(daemon.socket, parallel={"tensor_parallel_size": 2})
    worker1 = KvshareConnector(cfg, KVConnectorRole.WORKER)
    assert (worker1.side.layout.tp_rank, worker1.side.layout.tp_size) == (1, 2)
    worker1.shutdown()
    sched = KvshareConnector(cfg, KVConnectorRole.SCHEDULER)
    p = prompt(9)

    def publish(rank: int, blocks: int) -> None:
        layout = dataclasses.replace(sched.side.layout, tp_rank=rank)
        with kvshare.Client(daemon.socket, layout) as c:
            with c.reserve(c.hash_tokens(p[: blocks * BS])) as w:
                for i in w.new:
                    w.view(i)[:] = rank + 1

    try:
        publish(0, 4)
        assert sched.get_num_new_matched_tokens(request("a", p), 0) == (0, False)
        publish(1, 2)  # rank 1 has the first two blocks only
        assert sched.get_num_new_matched_tokens(request("b", p), 0) == (2 * BS, False)
        publish(1, 4)
        assert sched.get_num_new_matched_tokens(request("c", p), 0) == (4 * BS, False)
        # vLLM computed 3 blocks itself: the fourth is what is left to load.
        assert sched.get_num_new_matched_tokens(request("d", p), 3 * BS) == (BS, False)
        assert sched.side.counters.lookups == 4 and sched.side.counters.no_client == 0
    finally:
        sched.shutdown()


def test_sleep_mode_unregisters_and_restores(engines):
    """vLLM >= 0.33 calls unregister_kv_caches before sleep mode frees the
    KV cache and restore_kv_caches after wake-up (both idempotent): asleep,
    the worker copies nothing; awake again, it loads as before."""
    e = engines()
    p = prompt(21)
    assert e.run(request("a", p), 1.0) == (0, 1.0)
    e.worker.unregister_kv_caches()
    e.worker.unregister_kv_caches()
    assert e.worker.side.cache is None
    e.worker.restore_kv_caches()
    e.worker.restore_kv_caches()
    assert e.worker.side.cache is not None
    assert e.run(request("b", p), 2.0) == (4 * BS, 1.0)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "vllm.kvshare":
            self.lines.append((record.levelname, record.getMessage()))


@pytest.fixture
def vllm_log():
    """The connector's records that reach vLLM's own logger, `vllm` (where
    vLLM's handler writes its log), as (level, message) pairs; the logger at
    INFO, as an engine's start leaves it (vllm.logger.configure_logging)."""
    h = _Lines()
    log = logging.getLogger("vllm")
    level = log.level
    log.setLevel(logging.INFO)
    log.addHandler(h)
    yield h.lines
    log.removeHandler(h)
    log.setLevel(level)


def test_the_connector_logs_in_vllms_log(engines, daemon, vllm_log):
    """A start line per side (socket, namespace, dtype, role, tp rank), the
    counter lines of log_interval, and the totals at shutdown."""
    e = engines(extra={"log_interval": 1e-9})  # a counter line at every step
    p = prompt(22)
    e.run(request("a", p), 1.0)
    assert e.run(request("b", p), 2.0) == (4 * BS, 1.0)
    e.sched.shutdown()
    e.worker.shutdown()
    msgs = [m for lvl, m in vllm_log if lvl == "INFO" and m.startswith("kvshare connector")]
    for who in ("(scheduler)", "(worker, tp rank 0 of 1)"):
        start = [m for m in msgs if m.startswith(f"kvshare connector {who} started:")]
        assert len(start) == 1, msgs
        assert f"socket {daemon.socket}," in start[0]
        assert f"namespace {e.worker.side.layout.model}," in start[0] and "fp32 blocks" in start[0]
    assert any(m.startswith("kvshare connector (scheduler): lookups=2 hit_tokens=64 ")
               for m in msgs), msgs
    assert any(m.startswith("kvshare connector (worker, tp rank 0 of 1): ") and
               " loaded_blocks=4 " in m for m in msgs), msgs
    total = [m for m in msgs if m.startswith("kvshare connector (worker, tp rank 0 of 1) "
                                             "at shutdown: ")]
    assert len(total) == 1 and " loaded_blocks=4 " in total[0] \
        and " published_blocks=4 " in total[0], total
    assert not [m for lvl, m in vllm_log if lvl == "WARNING"], vllm_log


def test_no_daemon_at_start_is_a_warning_then_misses(tmp_path, monkeypatch, vllm_log):
    """A socket no daemon listens on: a warning in vLLM's log when the
    connector starts (naming the path), then every request is a miss and
    nothing raises."""
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: 0)
    sock = str(tmp_path / "no-daemon.sock")
    cfg = vllm_config(sock)
    for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
        conn = KvshareConnector(cfg, role)
        warn = [m for lvl, m in vllm_log if lvl == "WARNING"]
        assert len(warn) == 1 and "no daemon at start" in warn[0] and sock in warn[0], vllm_log
        if role == KVConnectorRole.SCHEDULER:
            assert conn.get_num_new_matched_tokens(request("a", prompt(23)), 0) == (0, False)
        conn.shutdown()
        vllm_log.clear()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin one")
def test_copy_threads_run_on_every_cpu_of_the_engine(daemon, monkeypatch):
    """vLLM's CPU worker pins its main thread to one core; the copy threads it
    starts (loads, asynchronous loads, publishes) run on every core the
    engine's threads use, not on the main thread's one beside it."""
    every = os.sched_getaffinity(0)
    one = {min(every)}
    seen: dict[str, set[int]] = {}

    def pinned_main() -> None:  # the worker's main thread, as vLLM pins it
        os.sched_setaffinity(0, one)
        e = Engine(monkeypatch, daemon.socket)
        assert os.sched_getaffinity(0) == one
        seen["load"] = e.worker.side.pool.submit(os.sched_getaffinity, 0).result()
        for name in ("publishes", "aloads"):
            copies = getattr(e.worker.side, name)
            seen[name] = copies.pool.submit(os.sched_getaffinity, 0).result()

    t = threading.Thread(target=pinned_main)
    t.start()
    t.join()
    assert seen == {"load": every, "publishes": every, "aloads": every}
