"""MLA through kvshare: a latent paged cache ([pages, page_tokens, width], one
row a token and layer) copied in and out of blocks, and KvshareConnector with
an MLA model (fake vLLM objects, a real kvshared): one namespace for every
tensor-parallel rank, rank 0 the only writer, every rank a reader, and an
identity that never meets a per-head model's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import kvshare

WIDTH = 576  # kv_lora_rank 512 + qk_rope_head_dim 64: DeepSeek's
BS = 16
PAGES = 64


def latent_layout(**over: object) -> kvshare.Layout:
    return kvshare.Layout(**{"model": "m|mla576", "layers": 2, "kv_heads": 1,
                             "head_dim": WIDTH // 2, "block_tokens": BS, "dtype": "fp32",
                             **over})


def test_latent_cache_round_trip(daemon):
    """Blocks stored from a latent cache load back bit for bit into other
    pages, every element of each row (both halves); a block is
    layers * block_tokens * width elements, nothing more."""
    src = np.random.default_rng(1).standard_normal((PAGES, BS, WIDTH)).astype(np.float32)
    dst = np.zeros_like(src)
    cache = kvshare.PagedCache.for_tensor(src, "mla", 1, WIDTH // 2)
    layout = latent_layout()
    assert layout.block_bytes == 2 * BS * WIDTH * 4
    with kvshare.Client(daemon.socket, layout) as c:
        h = c.hash_tokens(list(range(3 * BS)))
        with c.reserve(h) as w:
            for layer in range(2):
                w.store(layer, cache, src, [5, 9, 2])
        lease = c.lookup(h)
        assert lease.hits == 3
        for layer in range(2):
            lease.load(layer, cache, dst, [40, 41, 42])
        lease.release()
    np.testing.assert_array_equal(dst[[40, 41, 42]], src[[5, 9, 2]])
    assert not dst[:40].any() and not dst[43:].any()


def test_latent_cache_shapes_checked():
    a = np.zeros((PAGES, BS, WIDTH), np.float32)
    with pytest.raises(ValueError, match="kv_heads 2"):
        kvshare.PagedCache.for_tensor(a, "mla", 2, WIDTH // 2)
    with pytest.raises(ValueError, match="expected"):
        kvshare.PagedCache.for_tensor(a, "mla", 1, WIDTH // 4)
    with pytest.raises(ValueError, match="latent width"):
        kvshare.PagedCache.for_tensor(a[:, None], "mla", 1, WIDTH // 2)
    with pytest.raises(ValueError, match="contiguous"):  # rows must be rows
        kvshare.PagedCache.for_tensor(np.zeros((PAGES, BS, WIDTH, 2), np.float32)[..., 0],
                                      "mla", 1, WIDTH // 2)


# ---- the connector ------------------------------------------------------------

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh "
                           "installs it)")
import torch  # noqa: E402
from vllm.distributed import parallel_state  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402

from kvshare.vllm_connector import KvshareConnector  # noqa: E402
from test_vllm_connector import (  # noqa: E402
    FakeModelConfig, prompt, request, sched_out, vllm_config)


class MlaModelConfig(FakeModelConfig):
    """An MLA model as vLLM's ModelConfig says it: one KV head, the latent
    width as the head size."""

    use_mla = True

    def get_num_kv_heads(self, pc: object) -> int:
        return 1

    def get_head_size(self) -> int:
        return self.width


def mla_config(socket: str, tp: int = 2, width: int = WIDTH, **extra: object):
    cfg = vllm_config(socket, parallel={"tensor_parallel_size": tp}, extra=extra)
    cfg.model_config = MlaModelConfig(width=width)
    return cfg


def worker(monkeypatch, cfg, rank: int, shape: tuple = (PAGES, BS, WIDTH)
           ) -> tuple[KvshareConnector, dict]:
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: rank)
    w = KvshareConnector(cfg, KVConnectorRole.WORKER)
    kv = {f"model.layers.{i}.self_attn.attn": torch.zeros(shape) for i in range(2)}
    w.register_kv_caches(kv)
    return w, kv


def step(w: KvshareConnector, meta, kv: dict, pages: list[int], computed: int,
         value: float) -> None:
    """One worker step: loads, a forward that writes `value` into the pages
    it computes, publishes (awaited)."""
    w.bind_connector_metadata(meta)
    w.start_load_kv(None)
    for name, t in kv.items():
        w.wait_for_layer_load(name)
        t[pages[computed // BS:]] = value
    w.wait_for_save()
    w.side.publishes.wait_all()
    w.clear_connector_metadata()
    assert not w.get_block_ids_with_load_errors()


def test_mla_one_namespace_one_writer_every_rank_reads(daemon, monkeypatch):
    """TP=2 with MLA: both ranks name one namespace (tp 0 of 1); in a step
    both are given the same saves, only rank 0 publishes; a later request's
    hit is asked of that one namespace and both ranks load rank 0's bytes."""
    cfg = mla_config(daemon.socket)
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: 0)
    sched = KvshareConnector(cfg, KVConnectorRole.SCHEDULER)
    # vLLM's CPU runner hands the latent cache out as [blocks, 1, block_size,
    # width] views (a KV head of 1); a plain [blocks, block_size, width] works too.
    w0, kv0 = worker(monkeypatch, cfg, 0)
    w1, kv1 = worker(monkeypatch, cfg, 1, (PAGES, 1, BS, WIDTH))
    try:
        for w in (sched, w0, w1):
            assert dataclasses.astuple(w.side.layout)[1:8] == (2, 1, WIDTH // 2, BS, "fp32", 0, 1)
            assert w.side.layout.model.endswith("|mla576") and w.side.layout == sched.side.layout
        assert (w0.side.writer, w1.side.writer) == (True, False)
        p = prompt(3)
        req = request("a", p)
        assert sched.get_num_new_matched_tokens(req, 0) == (0, False)
        sched.update_state_after_alloc(req, None, 0)
        meta = sched.build_connector_meta(sched_out([("a", [0, 1, 2, 3, 4], 0)],
                                                    {"a": len(p)}))
        step(w0, meta, kv0, [0, 1, 2, 3, 4], 0, 1.0)
        step(w1, meta, kv1, [0, 1, 2, 3, 4], 0, 9.0)  # a rank that is not the writer
        assert (w0.side.counters.published_blocks, w1.side.counters.published_blocks) == (4, 0)
        with kvshare.Client(daemon.socket) as c:
            assert c.stats()["blocks.committed"] == 4
        sched.request_finished(req, [0, 1, 2, 3, 4])

        req = request("b", p)
        assert sched.get_num_new_matched_tokens(req, 0) == (4 * BS, False)
        sched.update_state_after_alloc(req, None, 4 * BS)
        meta = sched.build_connector_meta(sched_out([("b", [10, 11, 12, 13, 14], 4 * BS)],
                                                    {"b": 1}))
        for w, kv in ((w0, kv0), (w1, kv1)):
            step(w, meta, kv, [10, 11, 12, 13, 14], 4 * BS, 5.0)
            assert w.side.counters.loaded_blocks == 4
            for t in kv.values():  # rank 0's bytes on both ranks
                assert bool((t[10:14] == 1.0).all()) and bool((t[14] == 5.0).all())
    finally:
        for c in (sched, w0, w1):
            c.shutdown()


def test_mla_identity(daemon, monkeypatch):
    """An MLA namespace never meets a per-head one of the same numbers
    (1 KV head of width / 2): its model string ends in |mla<width>, and a
    per-head model may not take a model_id that ends like that. Quantized
    block dtypes and odd widths are refused at start."""
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: 0)
    mla = KvshareConnector(mla_config(daemon.socket, model_id="x"), KVConnectorRole.SCHEDULER)
    assert mla.side.layout.model == "x|mla576"
    mla.shutdown()
    with pytest.raises(ValueError, match=r"\|mla<width>"):
        KvshareConnector(vllm_config(daemon.socket, extra={"model_id": "x|mla576"}),
                         KVConnectorRole.SCHEDULER)
    default = KvshareConnector(mla_config(daemon.socket), KVConnectorRole.SCHEDULER)
    plain = KvshareConnector(vllm_config(daemon.socket), KVConnectorRole.SCHEDULER)
    assert default.side.layout.model == plain.side.layout.model + "|mla576"
    default.shutdown()
    plain.shutdown()
    for dtype in ("int8", "fp8_e4m3", "int4"):  # measured past the goals: refused
        with pytest.raises(ValueError, match=f"{dtype}.*docs/benchmarks.md"):
            KvshareConnector(mla_config(daemon.socket, dtype=dtype), KVConnectorRole.SCHEDULER)
    with pytest.raises(ValueError, match="even width"):
        KvshareConnector(mla_config(daemon.socket, width=575), KVConnectorRole.SCHEDULER)
