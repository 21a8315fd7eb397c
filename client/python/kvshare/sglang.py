"""kvshare as an SGLang HiCache storage backend: every SGLang instance on a
machine shares one pool (and kvshare's SSD and remote tiers behind it).

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
        --hicache-storage-backend dynamic \\
        --hicache-storage-backend-extra-config '{"backend_name": "kvshare",
            "module_path": "kvshare.sglang", "class_name": "KvshareHiCacheStorage",
            "interface_v1": 1, "hicache_storage_pass_prefix_keys": true}'

SGLang names each page of --page-size tokens by a chained SHA-256 (hex) of
the page's tokens and the previous page's key. A key becomes a kvshare block
hash with kvs_hash_key() under this rank's namespace: the model, the ranks
(for MLA every rank reads rank 0's: one namespace, tp 0 of 1), the page
size, SGLang's dtype and host layout, the page's regions and the interface
(v1's regions and the plain interface's flat pages are laid out differently),
so two instances share exactly the pages that are byte for byte the same.
A batch's prefix_keys give its parent: the batch is published after it
(kvs_reserve_after), so kvshare's chains are SGLang's and leaf-first
eviction, the SSD tier and the remote tier work as for every client. A batch
whose parent is no longer cached is not stored (its pages answer False):
kvshare never holds a child without its parent. Without prefix_keys
(hicache_storage_pass_prefix_keys off, SGLang's default) each batch is
published as a chain of its own.

Copies: one per region (a page's K and V buffers, or one per layer and K/V)
between kvshare's slots and the host pool's page buffers, a whole batch in
one library call (kvs_block_read_regions / write_regions), which ctypes makes
with the GIL released. BUSY (another instance is writing the page) and FULL
(no room) are misses, never waits. Nothing raises into SGLang's threads:
every error is a miss (False, 0, None), counted and logged once per kind.
When the daemon goes away every call misses at once and a connection is
tried again after reconnect_interval seconds. Counters go to the daemon's
"engines" stats (kvs_report) every report_interval seconds, as the vLLM
connector's do.

extra_config keys besides SGLang's: socket (kvshared's socket; default
$KVSHARE_SOCKET, else the library's default), timeout_ms (each call's
deadline, 1000), reconnect_interval (s, 5), report_interval (s, 5),
query_remote (batch_exists also asks the remote tier, true), salt (a tenant
salt: isolates the namespace). docs/sglang.md has the rest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
import time
from typing import Any, List, Optional

import numpy as np
import torch
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
    PoolTransferResult,
)

from . import errors
from ._lib import lib
from ._types import NOPARENT
from .client import BUSY, EXISTS, FULL, HASH_DTYPE, NEW, Client, Layout

logger = logging.getLogger(__name__)

# SGLang's element types that kvshare names; any other is stored as bytes
# (fp16 elements) with its name in the namespace.
_KVS_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_ELEM = {"fp16": 2, "bf16": 2, "fp32": 4}


@dataclasses.dataclass
class Counters:
    """What the backend did (the `counters` attribute; the first eight go
    to the daemon's engines stats)."""

    hit_tokens: int = 0        # batch_exists: tokens reported stored
    loaded_blocks: int = 0     # pages copied into the host pool
    loaded_bytes: int = 0
    load_us: int = 0
    load_errors: int = 0       # pages a get asked for and did not load
    published_blocks: int = 0  # pages stored and committed
    publish_us: int = 0
    skipped_blocks: int = 0    # not stored: BUSY, FULL or NOPARENT at reserve
    existing_blocks: int = 0   # set of a page already stored (by anyone)
    noparent_blocks: int = 0   # not stored: the batch's parent is not cached
    daemon_errors: int = 0     # calls that found the daemon away or failing
    errors: int = 0            # anything else that made a call miss

    REPORTED = ("hit_tokens", "loaded_blocks", "loaded_bytes", "load_us", "load_errors",
                "published_blocks", "publish_us", "skipped_blocks")


def _flag(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


def _meta(pool: Any, indices: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The host pool's page buffers for @indices (token slots, whole pages):
    addresses and byte counts, page by page, as get_page_buffer_meta()."""
    ptrs, sizes = pool.get_page_buffer_meta(indices)
    return np.asarray(ptrs, dtype=np.uint64), np.asarray(sizes, dtype=np.uint64)


def namespace_layout(config: HiCacheStorageConfig, pool: Any, regions: int,
                     page_bytes: int, v1: bool, salt: Optional[str] = None) -> Layout:
    """The kvshare layout (and so the namespace) of a rank's pages.

    Everything that makes two ranks' pages differ is in it: the model, the
    tensor-parallel rank and size (MLA: every rank holds the same pages, so
    all use tp 0 of 1), pipeline and context-parallel ranks, SGLang's dtype
    and host layout, the page size, the regions of a page and the
    interface. A block is a page's regions end to end (page_bytes): layers
    and block_tokens are SGLang's, kv_heads 1 and head_dim what makes
    kvshare's block size equal the page's."""
    mla = bool(config.is_mla_model)
    dtype = pool.dtype
    kvs_dtype = _KVS_DTYPES.get(dtype, "fp16")
    elem = _ELEM[kvs_dtype]
    page = int(pool.page_size)
    layers = int(getattr(pool, "layer_num", 1)) or 1
    if page_bytes % (2 * elem * page * layers) == 0:
        head_dim = page_bytes // (2 * elem * page * layers)
    elif page_bytes % (2 * elem) == 0:
        layers, page, head_dim = 1, 1, page_bytes // (2 * elem)
    else:
        raise ValueError(f"kvshare: a page of {page_bytes} bytes is not a whole number "
                         f"of {2 * elem}-byte pairs")
    parts = [
        "sglang", config.model_name or "", "mla" if mla else "mha",
        str(pool.layout), str(dtype).replace("torch.", ""), f"page{pool.page_size}",
        f"regions{regions}", "v1" if v1 else "flat",
    ]
    if config.pp_size > 1:
        parts.append(f"pp{config.pp_rank}of{config.pp_size}")
    if config.attn_cp_size > 1:
        parts.append(f"cp{config.attn_cp_rank}of{config.attn_cp_size}")
    model = "|".join(parts)
    if len(model.encode()) > 255:  # KVS_NAME_MAX: the model's name is hashed
        digest = hashlib.sha256((config.model_name or "").encode()).hexdigest()[:32]
        model = "|".join(parts[:1] + [digest] + parts[2:])
    return Layout(model=model, layers=layers, kv_heads=1, head_dim=head_dim,
                  block_tokens=page, dtype=kvs_dtype,
                  tp_rank=0 if mla else int(config.tp_rank),
                  tp_size=1 if mla else int(config.tp_size), salt=salt)


class KvshareHiCacheStorage(HiCacheStorage):
    """SGLang's HiCache L3 in kvshared (see the module's doc). Built by
    SGLang's StorageBackendFactory as cls(storage_config, kwargs); usable
    once register_mem_pool_host() has given it the host pool."""

    def __init__(self, storage_config: HiCacheStorageConfig,
                 kwargs: Optional[dict] = None) -> None:
        extra = dict(storage_config.extra_config or {})
        if storage_config.dcp_size > 1:
            raise NotImplementedError("kvshare: HiCache with decode context parallel "
                                      "(dcp_size > 1) is not supported")
        self.config = storage_config
        self.socket = extra.get("socket") or os.environ.get("KVSHARE_SOCKET") or None
        ms = float(extra.get("timeout_ms", 1000))
        self.timeout = ms / 1000 if ms > 0 else None
        self.interval = float(extra.get("reconnect_interval", 5))
        self.report_interval = float(extra.get("report_interval", 5))
        self.query_remote = _flag(extra.get("query_remote", True))
        self.v1 = _flag(extra.get("interface_v1", 0))
        self.salt = extra.get("salt")
        self.is_mla = bool(storage_config.is_mla_model)
        self.writer = bool(getattr(storage_config, "is_storage_writer",
                                   not self.is_mla or storage_config.tp_rank == 0))
        self.mem_pool_host: Any = None
        self.layout: Optional[Layout] = None
        self.counters = Counters()
        self._reported = Counters()
        self._last_report = time.monotonic()
        self._lock = threading.Lock()  # counters, the client list, the away state
        self._local = threading.local()  # one Client per SGLang thread
        self._clients: list[Client] = []
        self._away_until = 0.0
        self._logged: set[str] = set()
        self._closed = False

    # ---- set-up ---------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """The host pool whose pages this backend stores: its page size,
        dtype, layout and page buffers (get_page_buffer_meta) make the
        namespace. Raises on a pool it cannot store (at attach, not in
        SGLang's threads)."""
        super().register_mem_pool_host(mem_pool_host)
        self.page_size = int(mem_pool_host.page_size)
        probe = torch.arange(self.page_size, dtype=torch.int64)
        ptrs, sizes = _meta(mem_pool_host, probe)
        if len(ptrs) == 0 or len(ptrs) != len(sizes):
            raise ValueError("kvshare: the host pool describes no page buffers")
        self.regions = len(ptrs)
        self.page_bytes = int(sizes.sum())
        self.layout = namespace_layout(self.config, mem_pool_host, self.regions,
                                       self.page_bytes, self.v1, self.salt)
        if self.layout.block_bytes != self.page_bytes:
            raise ValueError(f"kvshare: layout {self.layout} is not {self.page_bytes} bytes")
        self._seed = lib.kvs_hash_layout_seed(self.layout._c())
        logger.info("kvshare: HiCache pages of %d bytes (%d regions) in namespace %r, "
                    "tp %d/%d", self.page_bytes, self.regions, self.layout.model,
                    self.layout.tp_rank, self.layout.tp_size)

    # ---- clients, failures, counters -----------------------------------

    def _client(self) -> Optional[Client]:
        """This thread's client, or None (no pool yet, the daemon away)."""
        if self.layout is None or self._closed:
            return None
        if time.monotonic() < self._away_until:
            return None
        c = getattr(self._local, "client", None)
        if c is not None:
            return c
        try:
            c = Client(self.socket, self.layout, timeout=self.timeout)
        except errors.Error as e:
            self._failed(e)
            return None
        self._local.client = c
        with self._lock:
            self._clients.append(c)
        return c

    def _drop(self) -> None:
        c = getattr(self._local, "client", None)
        self._local.client = None
        if c is not None:
            with self._lock:
                if c in self._clients:
                    self._clients.remove(c)
            c.close()

    def _failed(self, e: Exception) -> None:
        """A call failed. The daemon gone, stuck or refusing this client:
        every call misses for an interval, then a new connection is tried.
        Anything else: this call misses."""
        away = isinstance(e, (errors.DisconnectedError, errors.NoDaemonError,
                              errors.ProtocolError, errors.PermissionDenied))
        with self._lock:
            if away or isinstance(e, errors.Error):
                self.counters.daemon_errors += 1
            else:
                self.counters.errors += 1
            now = time.monotonic()
            if away:
                if now >= self._away_until:
                    logger.warning("kvshare: %s; every page misses until the daemon answers "
                                   "(retry in %.0f s)", e, self.interval)
                self._away_until = now + self.interval
        if away:
            self._drop()
        else:
            self._once(type(e).__name__, "kvshare: %s: %s (this call misses; logged once)",
                       type(e).__name__, e)

    def _once(self, kind: str, fmt: str, *args: Any) -> None:
        with self._lock:
            first = kind not in self._logged
            self._logged.add(kind)
        if first:
            logger.warning(fmt, *args)

    def _count(self, **delta: int) -> None:
        with self._lock:
            for k, v in delta.items():
                setattr(self.counters, k, getattr(self.counters, k) + v)
        if time.monotonic() - self._last_report >= self.report_interval:
            self._report()

    def _report(self) -> None:
        """The counts since the last report, to the daemon's engines stats."""
        with self._lock:
            now = dataclasses.replace(self.counters)
            delta = {k: getattr(now, k) - getattr(self._reported, k) for k in Counters.REPORTED}
            self._last_report = time.monotonic()
        if not any(delta.values()):
            return
        c = self._client()
        if c is None:
            return
        try:
            c.report(**delta)
        except errors.Error as e:
            self._failed(e)
            return
        with self._lock:
            for k in Counters.REPORTED:
                setattr(self._reported, k, getattr(now, k))

    def _hashes(self, keys: List[str]) -> np.ndarray:
        out = np.empty(len(keys), dtype=HASH_DTYPE)
        for i, k in enumerate(keys):
            if not isinstance(k, (str, bytes)):
                raise TypeError(f"a page key is a str, not {type(k).__name__}")
            b = k.encode() if isinstance(k, str) else k
            h = lib.kvs_hash_key(self._seed, b, len(b))
            out[i] = (h.lo, h.hi)
        return out

    def _pages(self, host_indices: Any, n: int) -> torch.Tensor:
        idx = torch.as_tensor(host_indices).reshape(-1).to(torch.int64)
        if idx.numel() != n * self.page_size:
            raise ValueError(f"{idx.numel()} host indices for {n} pages of {self.page_size}")
        return idx

    def _regions(self, idx: torch.Tensor, pages: int) -> tuple[np.ndarray, np.ndarray]:
        """The page buffers of @pages pages at @idx, checked against the
        namespace: each page page_bytes in regions regions."""
        ptrs, sizes = _meta(self.mem_pool_host, idx)
        if len(ptrs) != pages * self.regions or len(sizes) != len(ptrs) or (
                pages and (sizes.reshape(pages, self.regions).sum(axis=1)
                           != self.page_bytes).any()):
            raise ValueError("the host pool's page buffers changed shape")
        return ptrs, sizes

    # ---- the zero-copy interface (interface_v1) --------------------------

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """How many leading pages of @keys are stored (a hint: kvs_query)."""
        try:
            if not keys:
                return 0
            c = self._client()
            if c is None:
                return 0
            n = c.query(self._hashes(keys), remote=self.query_remote)
            self._count(hit_tokens=n * self.page_size)
            return n
        except Exception as e:  # never into SGLang's prefetch thread
            self._failed(e)
            return 0

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Copy the leading stored pages of @keys into the host pool's pages
        at @host_indices; True for each page loaded."""
        n = len(keys)
        out = [False] * n
        try:
            c = self._client() if n else None
            if c is None:
                self._count(load_errors=n)
                return out
            idx = self._pages(host_indices, n)
            k = self._load(c, keys, lambda k: self._regions(idx[: k * self.page_size], k),
                           self.regions)
            out[:k] = [True] * k
            return out
        except Exception as e:
            self._failed(e)
            self._count(load_errors=n)
            return [False] * n

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Store the pages at @host_indices under @keys, after the batch's
        parent (the last of extra_info.prefix_keys); True for each page
        stored now or before."""
        n = len(keys)
        try:
            if n == 0:
                return []
            if self.is_mla and not self.writer:
                return [True] * n  # MLA: the writer rank stores the same bytes
            c = self._client()
            if c is None:
                self._count(skipped_blocks=n)
                return [False] * n
            idx = self._pages(host_indices, n)
            hashes = self._hashes(keys)
            prefix = extra_info.prefix_keys if extra_info is not None else None
            return self._store(c, hashes, prefix[-1] if prefix else None,
                               lambda new: self._regions(
                                   idx.reshape(n, self.page_size)[new].reshape(-1), len(new)),
                               self.regions)
        except Exception as e:
            self._failed(e)
            return [False] * n

    def _load(self, c: Client, keys: List[str], regions: Any, per_block: int) -> int:
        """Look @keys up, copy the k leading hits into regions(k) (@per_block
        a block) and return k."""
        n = len(keys)
        t0 = time.perf_counter()
        with c.lookup(self._hashes(keys)) as hit:
            k = len(hit)
            if k:
                hit.read_regions(*regions(k), per_block)
        self._count(loaded_blocks=k, loaded_bytes=k * self.page_bytes,
                    load_us=round((time.perf_counter() - t0) * 1e6), load_errors=n - k)
        return k

    def _store(self, c: Client, hashes: np.ndarray, parent: Optional[str],
               regions: Any, per_block: int) -> List[bool]:
        """Reserve @hashes (after @parent's block when there is one), copy
        the NEW pages from regions(their indexes) and commit."""
        n = len(hashes)
        t0 = time.perf_counter()
        try:
            if parent is not None:
                w = c.reserve_after(np.concatenate([self._hashes([parent]), hashes]))
                first = 1
            else:
                w = c.reserve(hashes)
                first = 0
        except errors.FullError:  # nothing could get a slot
            self._count(skipped_blocks=n)
            return [False] * n
        st = w.statuses[first:]
        if st and st[0] == NOPARENT:
            self._count(noparent_blocks=n, skipped_blocks=n)
            return [False] * n
        new = [i for i, s in enumerate(st) if s == NEW]
        try:
            if new:
                w.write_regions([first + i for i in new], *regions(new), per_block)
            w.commit()
        except BaseException:
            if not w.ended:
                w.abort()
            raise
        self._count(published_blocks=len(new), publish_us=round((time.perf_counter() - t0) * 1e6),
                    existing_blocks=st.count(EXISTS),
                    skipped_blocks=st.count(BUSY) + st.count(FULL))
        return [s in (NEW, EXISTS) for s in st]

    # ---- the plain interface: one flat page tensor per key --------------

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Optional[torch.Tensor]:
        got = self.batch_get([key], [target_location] if target_location is not None else None)
        return got[0] if got else None

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> List[Optional[torch.Tensor]]:
        """Copy the leading stored pages into @target_locations (SGLang's
        flat data pages); None for each page not loaded."""
        n = len(keys)
        out: List[Optional[torch.Tensor]] = [None] * n
        try:
            c = self._client() if n and target_locations is not None else None
            if c is None:
                self._count(load_errors=n)
                return out
            dst = self._pages_of(target_locations, n)
            k = self._load(c, keys, lambda k: self._tensors(dst[:k]), 1)
            out[:k] = list(target_locations[:k])
            return out
        except Exception as e:
            self._failed(e)
            self._count(load_errors=n)
            return [None] * n

    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        return self.batch_set([key], [value] if value is not None else None)

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        """Store flat data pages; True when every page is stored."""
        n = len(keys)
        try:
            if n == 0:
                return True
            if self.is_mla and not self.writer:
                return True
            c = self._client() if values is not None else None
            if c is None:
                self._count(skipped_blocks=n)
                return False
            src = self._pages_of(values, n)
            return all(self._store(c, self._hashes(keys), None,
                                   lambda new: self._tensors([src[i] for i in new]), 1))
        except Exception as e:
            self._failed(e)
            return False

    @staticmethod
    def _tensors(ts: List[torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
        """Whole tensors as regions (one a block): addresses and byte counts."""
        return (np.array([t.data_ptr() for t in ts], dtype=np.uint64),
                np.array([t.numel() * t.element_size() for t in ts], dtype=np.uint64))

    def _pages_of(self, ts: Any, n: int) -> List[torch.Tensor]:
        """@ts as n flat pages of page_bytes each, checked before any copy:
        fewer buffers than keys would have the library read addresses past
        the list's end, and a smaller one would be a page reported loaded
        (or published) with only its first bytes."""
        if len(ts) != n:
            raise ValueError(f"{len(ts)} page buffers for {n} keys")
        out = [self._flat(t) for t in ts]
        for t in out:
            if t.numel() * t.element_size() != self.page_bytes:
                raise ValueError(f"a page buffer of {t.numel() * t.element_size()} bytes, "
                                 f"not {self.page_bytes}")
        return out

    @staticmethod
    def _flat(t: Any) -> torch.Tensor:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError("pages must be contiguous CPU tensors")
        return t

    # ---- SGLang's pools interface (v2): only for sidecar pools ----------

    def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[list] = None,
                        extra_info: Optional[HiCacheStorageExtraInfo] = None
                        ) -> PoolTransferResult:
        """KV pages only: a model with sidecar pools (Mamba, SWA, DSA
        indexer) misses, as those are not stored here."""
        if pool_transfers:
            self._once("v2", "kvshare: sidecar pools (%s) are not stored; those requests miss",
                       ", ".join(str(t.name) for t in pool_transfers))
            return PoolTransferResult.empty()
        n = self.batch_exists(keys, extra_info)
        return PoolTransferResult(n, {}, list(range(1, n + 1)))

    def batch_get_v2(self, transfers: list,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> dict:
        self._once("v2", "kvshare: sidecar pools are not stored; those requests miss")
        return {t.name: [False] * len(t.keys or []) for t in transfers}

    def batch_set_v2(self, transfers: list,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> dict:
        self._once("v2", "kvshare: sidecar pools are not stored; those requests miss")
        return {t.name: [False] * len(t.keys or []) for t in transfers}

    # ---- the rest ---------------------------------------------------------

    def clear(self) -> bool:
        """Not a worker's to do: kvshared's blocks are shared by every
        instance. An operator clears them (kvsctl evict --namespace)."""
        self._once("clear", "kvshare: clear() is an operator's command (kvsctl evict); "
                   "nothing was cleared")
        return False

    def get_stats(self) -> None:
        self._report()
        return None

    def close(self) -> None:
        """Report the last counts and close every thread's connection."""
        if self._closed:
            return
        try:
            self._report()
        except Exception:
            pass
        self._closed = True
        with self._lock:
            clients, self._clients = self._clients, []
        for c in clients:
            c.close()
