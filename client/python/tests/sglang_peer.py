"""One SGLang rank's side of test_sglang.py, in a process of its own (SGLang
is imported here, never in the pytest process, whose other tests run vLLM).

It reads one JSON request per line on stdin and answers one JSON line on
stdout. The backend is built as SGLang builds it: a HiCacheStorageConfig,
StorageBackendFactory.create_backend("dynamic", ...) with the extra config
SGLang passes, then register_mem_pool_host() with SGLang's own host-pool
class (MHATokenToKVPoolHost or MLATokenToKVPoolHost) over SGLang's device
pool class built on CPU tensors, the way SGLang's CPU unit tests build them
(storage/aibrix_kvcache/unit_test.py). Pages are filled and checked through
the host pool's own get_page_buffer_meta(): a page's bytes are a pattern of
its key, so two processes agree on them without sending any.

Requests ("op"): backend, keys, set, exists, get, plain, errors, counters,
close (see handle()).
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import sys
import traceback
import warnings
from typing import Optional

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import (  # noqa: E402
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
)
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402
from sglang.srt.mem_cache.utils import get_hash_str  # noqa: E402

PAGE = 4
LAYERS = 2
state: dict = {}


def host_pool(mla: bool, layout: str):
    """SGLang's host pool over SGLang's device pool, both on CPU tensors."""
    if mla:
        kv = MLATokenToKVPool(64, PAGE, torch.bfloat16, 16, 8, LAYERS, "cpu", False,
                              start_layer=0, end_layer=LAYERS - 1)
        return MLATokenToKVPoolHost(
            kv.get_device_pool_infos()[0].buffer_info, 2.0, 0, PAGE, layout,
            pin_memory=False, device="cpu", device_capacity_tokens=kv.size,
            start_layer=kv.start_layer, end_layer=kv.end_layer, target_layer_num=LAYERS)
    kv = MHATokenToKVPool(64, PAGE, torch.float16, 2, 8, LAYERS, "cpu", False,
                          start_layer=0, end_layer=LAYERS - 1)
    return MHATokenToKVPoolHost(
        kv.get_device_pool_infos()[0].buffer_info, 2.0, 0, PAGE, layout,
        pin_memory=False, device="cpu", device_capacity_tokens=kv.size,
        start_layer=kv.start_layer, end_layer=kv.end_layer,
        write_back_staging=kv.hicache_write_back_staging)


def indices(slot: int, n: int) -> torch.Tensor:
    return torch.arange(slot * PAGE, (slot + n) * PAGE, dtype=torch.int64)


def pattern(key: str, nbytes: int) -> bytes:
    return hashlib.shake_128(key.encode()).digest(nbytes)


def regions(slot: int):
    ptrs, sizes = state["hp"].get_page_buffer_meta(indices(slot, 1))
    return list(zip(ptrs, sizes))


def fill(slot: int, key: Optional[str]) -> None:
    """Page @slot's regions, end to end, := the pattern of @key (zeros: None)."""
    total = sum(s for _, s in regions(slot))
    data = pattern(key, total) if key else bytes(total)
    off = 0
    for p, s in regions(slot):
        ctypes.memmove(p, data[off:off + s], s)
        off += s


def page_bytes(slot: int) -> bytes:
    return b"".join(ctypes.string_at(p, s) for p, s in regions(slot))


def extra(prefix):
    return HiCacheStorageExtraInfo(prefix_keys=list(prefix)) if prefix is not None else None


def kind(v) -> str:
    """The type of an answer, as the tests check it."""
    if isinstance(v, list):
        if all(type(x) is bool for x in v):
            return "list[bool]"
        return "list[None]" if all(x is None for x in v) else "list[?]"
    return type(v).__name__


def backend(req: dict) -> dict:
    if "b" in state:
        state["b"].close()
    extra_config = {"backend_name": "kvshare", "module_path": "kvshare.sglang",
                    "class_name": "KvshareHiCacheStorage",
                    "interface_v1": req.get("interface_v1", 1), "socket": req["socket"],
                    "reconnect_interval": 0.2, "timeout_ms": 2000,
                    **req.get("extra", {})}
    cfg = HiCacheStorageConfig(
        tp_rank=req.get("tp_rank", 0), tp_size=req.get("tp_size", 1), pp_rank=0, pp_size=1,
        attn_cp_rank=0, attn_cp_size=1, is_mla_model=req.get("mla", False),
        enable_storage_metrics=False,
        is_page_first_layout=req.get("layout", "layer_first") == "page_first",
        model_name=req.get("model", "test/model"), extra_config=extra_config)
    hp = host_pool(req.get("mla", False), req.get("layout", "layer_first"))
    b = StorageBackendFactory.create_backend("dynamic", cfg, hp)
    if not req.get("unregistered"):
        b.register_mem_pool_host(hp)
    state.update(b=b, hp=hp)
    return {"backend": type(b).__module__ + "." + type(b).__qualname__,
            "host_pool": type(hp).__module__ + "." + type(hp).__qualname__,
            "model": b.layout.model if b.layout else None,
            "layout": dataclasses.asdict(b.layout) if b.layout else None,
            "regions": getattr(b, "regions", 0), "page_bytes": getattr(b, "page_bytes", 0)}


def handle(req: dict):
    b = state.get("b")
    op = req["op"]
    if op == "backend":
        return backend(req)
    if op == "keys":  # SGLang's own chained page keys of a token list
        return get_hash_str(req["tokens"], req.get("prior"), page_size=PAGE)
    if op == "set":  # fill the pages at slot.. with the keys' patterns, store them
        for i, k in enumerate(req["keys"]):
            fill(req["slot"] + i, k)
        return b.batch_set_v1(req["keys"], indices(req["slot"], len(req["keys"])),
                              extra(req.get("prefix")))
    if op == "exists":
        return b.batch_exists(req["keys"], extra(req.get("prefix")))
    if op == "get":  # zero the pages at slot.., load; and how many loaded are right
        keys = req["keys"]
        for i in range(len(keys)):
            fill(req["slot"] + i, None)
        got = b.batch_get_v1(keys, indices(req["slot"], len(keys)), extra(req.get("prefix")))
        right = [ok and page_bytes(req["slot"] + i) == pattern(k, len(page_bytes(req["slot"] + i)))
                 for i, (k, ok) in enumerate(zip(keys, got))]
        return {"got": got, "right": right, "kind": kind(got)}
    if op == "plain":  # the plain interface: flat pages SGLang makes and reads
        hp = state["hp"]
        keys = req["keys"]
        if req["do"] == "set":
            for i, k in enumerate(keys):
                fill(req["slot"] + i, k)
            vals = [hp.get_data_page(indices(req["slot"] + i, 1)[0], flat=True).contiguous()
                    for i in range(len(keys))]
            return b.batch_set(keys, vals)
        dst = [hp.get_dummy_flat_data_page() for _ in keys]
        got = b.batch_get(keys, dst)
        for i, t in enumerate(got):
            if t is not None:
                hp.set_from_flat_data_page(indices(req["slot"] + i, 1)[0], t)
        right = [t is not None and page_bytes(req["slot"] + i) ==
                 pattern(k, len(page_bytes(req["slot"] + i))) for i, (k, t) in
                 enumerate(zip(keys, got))]
        return {"got": [t is not None for t in got], "right": right,
                "exists": [b.exists(k) for k in keys]}
    if op == "errors":
        return errors_battery(req)
    if op == "counters":
        return dataclasses.asdict(b.counters)
    if op == "close":
        b.close()
        return True
    raise ValueError(f"unknown op {op}")


def errors_battery(req: dict) -> dict:
    """Every way a call can fail that the backend itself can see, each
    answered with the type SGLang's threads expect and nothing raised."""
    b = state["b"]
    keys = req["keys"]
    n = len(keys)
    out = {}

    def run(name, f):
        try:
            v = f()
            out[name] = [kind(v), v if isinstance(v, (list, int, bool)) or v is None else repr(v)]
        except Exception as e:  # the failure the test is for
            out[name] = ["raised", repr(e)]

    idx = indices(0, n)
    run("get_short_indices", lambda: b.batch_get_v1(keys, idx[:-1]))
    run("set_short_indices", lambda: b.batch_set_v1(keys, idx[:-1]))
    run("get_not_keys", lambda: b.batch_get_v1([None] * n, idx))
    run("set_not_keys", lambda: b.batch_set_v1([3.5] * n, idx))
    run("exists_not_keys", lambda: b.batch_exists([object()] * n))
    run("get_bad_indices", lambda: b.batch_get_v1(keys, "not indices"))
    run("set_bad_prefix", lambda: b.batch_set_v1(keys, idx, HiCacheStorageExtraInfo(
        prefix_keys=[12345])))
    run("plain_get_none", lambda: b.batch_get(keys, None))
    run("plain_get_bad_target", lambda: b.batch_get(keys, ["x"] * n))
    run("plain_set_bad_value", lambda: b.batch_set(keys, [torch.zeros(3, 3).t()] * n))
    run("plain_set_none", lambda: b.batch_set(keys, None))
    run("get_one_none", lambda: b.get(keys[0], None))
    run("v2_exists", lambda: b.batch_exists_v2(keys, None).kv_hit_pages)
    run("clear", lambda: b.clear())
    # A host pool that fails: its buffers are gone.
    real = state["hp"].get_page_buffer_meta
    state["hp"].get_page_buffer_meta = lambda i: (_ for _ in ()).throw(RuntimeError("gone"))
    try:
        run("get_meta_fails", lambda: b.batch_get_v1(keys, idx))
        run("set_meta_fails", lambda: b.batch_set_v1(["meta" + k for k in keys], idx))
    finally:
        state["hp"].get_page_buffer_meta = real
    # Buffers that cannot hold the pages, with the pages stored (so a get
    # would copy): fewer than the keys, 16 bytes each; and values of 16
    # bytes, which would publish pages nobody wrote.
    hp = state["hp"]
    for i, k in enumerate(keys):
        fill(i, k)
    vals = [hp.get_data_page(indices(i, 1)[0], flat=True).contiguous() for i in range(n)]
    tiny = [torch.zeros(16, dtype=torch.uint8) for _ in range(n)]
    b.batch_set(keys, vals)
    before = b.counters.daemon_errors
    run("plain_set_small_values", lambda: b.batch_set(["small" + k for k in keys], tiny))
    run("plain_get_few_targets", lambda: b.batch_get(keys, [hp.get_dummy_flat_data_page()]))
    run("plain_get_small_targets", lambda: b.batch_get(keys, tiny))
    # Refused by the backend's own checks, before the library is asked to
    # copy (which would refuse the small ones, and read past a short list).
    out["bad_buffers_daemon_errors"] = b.counters.daemon_errors - before
    out["plain_get_whole_targets"] = [t is not None for t in b.batch_get(
        keys, [hp.get_dummy_flat_data_page() for _ in keys])]
    out["small_values_stored"] = b.batch_exists(["small" + k for k in keys])
    return out


def main() -> None:
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            res = {"ok": handle(req)}
        except Exception:
            res = {"error": traceback.format_exc()}
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
