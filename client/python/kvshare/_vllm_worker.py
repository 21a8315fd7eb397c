"""The worker side of the vLLM connector (kvshare.vllm_connector): what
vLLM's model runner asks of it, in each worker's process. It loads the hit
blocks the scheduler side planned into the engine's paged KV cache (layer by
layer beside the forward, or before it), publishes the prompt blocks that
became full, off the step (publish_async) or in it, and tells vLLM which
requests' copies are done and which blocks could not be loaded.
"""

from __future__ import annotations

import concurrent.futures
import re
import time
from typing import Any, Optional

import torch

import kvshare
from kvshare import _vllm_events
from kvshare import _vllm_keys as keys
from kvshare._vllm_async import LOGGER_NAME, Copies, Pending, copy_pool, windows
from kvshare._vllm_common import KvshareMetadata, Side, _Load, _Save
from vllm.logger import init_logger

logger = init_logger(LOGGER_NAME)

_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def _state_pages(t: "torch.Tensor", g: Any) -> "torch.Tensor":
    """A state-space layer's cache (vLLM's raw [blocks, 1, 1, state bytes]
    int8 view, a padded page a block) as its state group's layout stores
    it: [blocks, block_size, 2 * head_dim] fp16 over the same memory, each
    block's first 4 * block_size * head_dim bytes (the state, then the
    page's padding: _vllm_groups.Group.state_head_dim)."""
    n, width = t.shape[0], 4 * g.block_size * g.state_head_dim()
    if t.dtype != torch.int8 or t.dim() != 4 or tuple(t.shape[1:]) != (1, 1, g.state_bytes) \
            or t.stride(3) != 1:
        raise ValueError(f"kvshare: a state layer's cache {tuple(t.shape)} {t.dtype}: "
                         f"expected [blocks, 1, 1, {g.state_bytes}] int8")
    if t.stride(0) < width or t.stride(0) % 2 or t.storage_offset() % 2:
        raise ValueError(f"kvshare: a state layer's pages {t.stride(0)} bytes apart; "
                         f"a block of its layout takes {width}")
    pages = t.as_strided((n, width), (t.stride(0), 1), t.storage_offset())
    return pages.view(torch.float16).view(n, g.block_size, width // (2 * g.block_size))


class WorkerSide(Side):
    """The connector in a vLLM worker: the copies between the pool and the
    engine's KV cache (_vllm_async has the threads they run on and why a
    step waits for some of them)."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any, tc: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config, tc)
        self.layers: dict[str, tuple[int, torch.Tensor]] = {}
        self.cache: Optional[kvshare.PagedCache] = None
        self.slept_cache: Optional[kvshare.PagedCache] = None  # asleep (vLLM >= 0.33)
        self.pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self.layer_done: dict[int, concurrent.futures.Future] = {}
        self.leases: list[kvshare.ReadLease] = []
        self.load_started = self.load_done = 0.0
        self.load_errors: set[int] = set()
        self.publishes = Copies("kvshare-publish")
        self.aloads = Copies("kvshare-aload")
        self.to_send = Pending()  # finished requests vLLM holds for their publishes
        self.to_recv = Pending()  # requests in WAITING_FOR_REMOTE_KVS

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        if self.hma_off:  # nothing is shared: nothing to copy
            return
        names = list(kv_caches)
        try:
            order = sorted(names, key=lambda n: int(_LAYER_INDEX.findall("." + n + ".")[0]))
        except (IndexError, ValueError):
            order = names
        from vllm.platforms import current_platform

        # vLLM 0.32 hands out [blocks, kv_heads, block_size, C] views: the CPU
        # backend reads each head's [block_size, C] as K rows then V rows, the
        # CUDA backends split C into K and V.
        kind = "cpu" if current_platform.is_cpu() else "bhnc"
        if self.latent is not None:  # MLA: [blocks, 1, block_size, latent width]
            kind = "mla"
        if self.overlap is None:
            self.overlap = not current_platform.is_cpu()
        # One copy thread in order when overlapping (layer l first); several
        # at once otherwise. The CUDA path registers the host arena on its
        # first use: one thread there.
        threads = 1 if self.overlap or not current_platform.is_cpu() else self.load_threads
        self.pool = copy_pool(threads, "kvshare-load")
        state_of = {n: g for g in self.groups or () if g.kind == "state" for n in g.layers}
        for i, name in enumerate(order):
            t = kv_caches[name]
            if kind == "mla":  # [blocks, block_size, latent width], the same memory
                t = t.squeeze()
            elif name in state_of:  # [blocks, block_size, 2 * head_dim] fp16, the same memory
                t = _state_pages(t, state_of[name])
            self.layers[name] = (i, t)
        if self.groups:
            self._register_groups(kv_caches, kind)
            self.cache = self.groups[0].cache
        else:
            self.cache = kvshare.PagedCache.for_tensor(self.layers[order[0]][1], kind,
                                                       self.layout.kv_heads,
                                                       self.layout.head_dim)
            if len(order) != self.layout.layers:
                logger.warning("kvshare: %d KV cache tensors for %d layers", len(order),
                               self.layout.layers)
        logger.info("kvshare connector %s: %d layers, %s layout, block %s bytes, overlap %s",
                    self.who, len(order), kind, self.layout.block_bytes, self.overlap)

    def unregister_kv_caches(self) -> None:
        """vLLM >= 0.33, before sleep mode frees the KV cache: nothing may
        copy into or out of it until restore_kv_caches. vLLM has drained
        the transfers; a copy thread's last layers are awaited all the same.
        Idempotent."""
        for f in self.layer_done.values():
            f.result()
        self.publishes.wait_all()  # publish_async and load_async copies
        self.aloads.wait_all()
        if self.cache is not None:
            self.slept_cache, self.cache = self.cache, None

    def restore_kv_caches(self) -> None:
        """vLLM >= 0.33, after wake-up: the KV cache is mapped again under
        the tensors register_kv_caches was given (sleep mode's allocator
        keeps their addresses), and each copy takes its address from them.
        Idempotent."""
        if self.slept_cache is not None:
            self.cache, self.slept_cache = self.slept_cache, None

    def start_load_kv(self, meta: KvshareMetadata) -> None:
        assert isinstance(meta, KvshareMetadata)
        self.layer_done = {}
        self.handle_preemptions(meta)  # a vLLM that does not call it
        for ld in meta.async_loads:
            self._start_async_load(ld)
        if not meta.loads or self.cache is None:
            return
        jobs = []  # (lease, page ids of blocks [start, hits), start, group tag)
        for ld in meta.loads:
            self._lost(ld, self._pin(ld, jobs))
        self.leases.extend(job[0] for job in jobs)
        if not jobs:
            return
        assert self.pool is not None
        self.load_started = time.perf_counter()
        for idx, tensor in sorted(self.layers.values(), key=lambda x: x[0]):
            self.layer_done[idx] = self.pool.submit(self._load_layer, idx, tensor, jobs)
        if not self.overlap:  # every layer now, before the forward
            for f in self.layer_done.values():
                f.result()

    def wait_for_layer_load(self, layer_name: str) -> None:
        entry = self.layers.get(layer_name)
        f = self.layer_done.get(entry[0]) if entry else None
        if f is not None:
            f.result()  # _load_layer never raises

    def wait_for_save(self, meta: Optional[KvshareMetadata]) -> None:
        """@meta: the step's, None when the step had none."""
        for f in self.layer_done.values():
            f.result()
        if self.layer_done:  # the step's loads, first submitted to last done
            self.counters.load_seconds += self.load_done - self.load_started
        self.layer_done = {}
        self._release(self.leases)
        self.leases = []
        if meta is None:
            return
        assert isinstance(meta, KvshareMetadata)
        ready = None
        if self.publish_async and meta.saves and self.cache is not None \
                and self.cache.on_device:
            # The forward's writes are queued on this thread's stream; the
            # copy thread's stream is another: it waits for them on the host.
            ready = torch.cuda.Event()
            ready.record()
        for sv in meta.saves if self.writer else ():
            # A boundary state's block is vLLM's only until the step ends
            # (vLLM may hand it to another request next): copied now.
            if self.publish_async and not self._is_state(sv.group):
                # Off the step: the request's full blocks do not change while
                # it runs, vLLM holds them once it finishes (sending), and a
                # step that reuses one waits first (handle_preemptions).
                self.publishes.submit(sv.req_id, sv.block_ids, self._publish_logged, sv,
                                      ready)
            else:
                self._publish_logged(sv)
        with self.daemon:
            self._maybe_log()

    def get_block_ids_with_load_errors(self) -> set[int]:
        with self.lock:
            out, self.load_errors = self.load_errors, set()
        return out

    def shutdown(self) -> None:
        self.publishes.shutdown()
        self.aloads.shutdown()
        self.log_totals()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        self.close_clients()

    # ---- the copies -------------------------------------------------------

    def handle_preemptions(self, kv_connector_metadata: Any) -> None:
        """Before the step writes anything (vLLM calls this ahead of the
        forward): wait for the copies that still use a block it writes."""
        meta = kv_connector_metadata
        if getattr(meta, "writes", None):
            waited = self.publishes.wait_blocks(meta.writes)
            with self.lock:
                self.counters.publish_waits += waited

    def _lost(self, ld: "_Load", hits: int) -> None:
        """The blocks of a load past its hits: recomputed (HMA: the whole
        request, reported in failed_recving)."""
        lost = ld.block_ids[max(hits, ld.start):]
        if lost:
            with self.lock:
                if ld.group is None:
                    self.load_errors.update(lost)
                else:
                    self.failed_recv.add(ld.req_id)
                self.counters.load_errors += len(lost)

    def _pin(self, ld: "_Load", jobs: list) -> int:
        """Look a load's blocks up again and queue the copy of those beyond
        what vLLM computed; returns the hits (0 on any failure: the blocks
        are recomputed). A chain longer than one call is pinned a window of
        MAX_HASHES blocks at a time, a lease each, going on while each one
        is all there. The leases are kept for wait_for_save to release, or
        released here on every other path."""
        key = (ld.salt, ld.adapter)
        clients = self._ns_of(ld.group)[0]
        # The namespace holds chain blocks [ld.first, end) (HMA: a window);
        # vLLM computed those before ld.start.
        base, tag = ld.first, None if ld.group is None else (ld.group, ld.req_id)
        ids = ld.block_ids[base:]
        with self.daemon:
            c = clients.get(*key)
            if c is None:
                return 0
            hits = 0
            try:
                hashes = keys.chain(c, ld.tokens, ld.extras)[base:]
                for start, end in windows(len(hashes)):
                    lease = c.lookup(hashes[start:end])
                    first = max(ld.start - base - start, 0)  # vLLM computed the rest
                    if lease.hits > first:
                        jobs.append((lease, ids[start + first: start + lease.hits], first, tag))
                    else:
                        lease.release()
                    hits = start + lease.hits
                    if hits < end:
                        break
            except kvshare.Error as e:
                clients.failed(key, e)
            except Exception as e:  # never on the serving path
                logger.warning("kvshare: lookup for a load failed: %s", e)
            return base + hits

    def _start_async_load(self, ld: "_Load") -> None:
        """A load of a request in WAITING_FOR_REMOTE_KVS: pinned now, copied
        on the async load thread, reported by get_finished once copied (or
        at once when nothing could be pinned; the blocks as load errors)."""
        jobs: list = []
        self.to_recv.add([ld.req_id])
        with self.lock:  # HMA: one load per group, counted once
            self.counters.async_loads += ld.group is None or ld.group == self.groups[0].index
        hits = self._pin(ld, jobs) if self.cache is not None else 0
        self._lost(ld, hits)
        if jobs:
            self.aloads.submit(ld.req_id, ld.block_ids[ld.start:], self._load_async, jobs)

    def _load_async(self, jobs: list) -> None:
        t0 = time.perf_counter()
        for idx, tensor in sorted(self.layers.values(), key=lambda x: x[0]):
            self._load_layer(idx, tensor, jobs, timed=False)
        with self.lock:
            self.counters.load_seconds += time.perf_counter() - t0
        self._release([job[0] for job in jobs])

    def _release(self, leases: list) -> None:
        with self.daemon:
            for lease in leases:
                try:
                    lease.release()
                except kvshare.Error:
                    pass

    def _load_layer(self, idx: int, tensor: "torch.Tensor", jobs: list,
                    timed: bool = True) -> None:
        """One layer of every job, on a copy thread (timed: a step's loads,
        whose span wait_for_save counts)."""
        loaded = 0
        for lease, page_ids, start, tag in jobs:
            ns = self._layer_in(idx, None if tag is None else tag[0])
            if ns is None:  # HMA: a layer of another group
                continue
            li, cache, layout = ns
            try:
                lease.load(li, cache, tensor, page_ids, first=start, count=len(page_ids))
            except Exception as e:  # the blocks are recomputed
                logger.warning("kvshare: load of layer %d failed: %s", idx, e)
                with self.lock:
                    if tag is None:
                        self.load_errors.update(page_ids)
                    else:
                        self.failed_recv.add(tag[1])
            if li == 0:  # a namespace's first layer: its blocks, counted once
                loaded += len(page_ids) * layout.block_bytes
                with self.lock:
                    self.counters.loaded_blocks += len(page_ids)
        with self.lock:
            if timed:
                self.load_done = time.perf_counter()
            self.counters.loaded_bytes += loaded

    def _publish_logged(self, sv: "_Save", ready: Any = None) -> None:
        try:
            if ready is not None:
                ready.synchronize()
            self._publish(sv)
        except Exception as e:
            logger.warning("kvshare: publish failed: %s", e)
        if self.publish_async:  # the counts, without waiting for another step
            with self.daemon:
                self._maybe_log()

    def _publish(self, sv: "_Save") -> None:
        """Reserve, store every layer, commit: on the publish thread
        (publish_async) or the step's, a window of MAX_HASHES blocks at a
        time (each after the one before: reserve_after its last block).
        Daemon calls under self.daemon, the copies outside it."""
        if self.cache is None:
            return
        key = (sv.salt, sv.adapter)
        t0 = time.perf_counter()
        ns = self._ns_of(sv.group)  # HMA: the group's namespace, its layers
        if ns[1] is None:
            return
        with self.daemon:
            c = ns[0].get(*key)
            if c is None:
                return
            hashes = keys.chain(c, sv.tokens, sv.extras)[sv.first:]  # HMA: a window
        ids = sv.block_ids[sv.first:]
        for start, end in windows(len(hashes), after=True):
            if not self._publish_window(c, key, hashes[start:end], ids[start:end],
                                        start > 0, ns, sv, sv.first + start):
                break
        with self.lock:
            self.counters.publish_seconds += time.perf_counter() - t0

    def _publish_window(self, c: kvshare.Client, key: tuple, hashes: Any,
                        block_ids: list[int], after: bool, ns: tuple, sv: Any = None,
                        start: int = 0) -> bool:
        """One window of a publish (after: hashes[0] is its parent) into
        namespace @ns (_ns_of), from chain block @start of @sv; whether the
        next may go on (every block of this one is cached now)."""
        clients, cache, layers = ns
        with self.daemon:
            try:
                w = c.reserve_after(hashes) if after else c.reserve(hashes)
            except kvshare.FullError:
                with self.lock:
                    self.counters.skipped_blocks += len(block_ids) - after
                return False
            except kvshare.Error as e:
                clients.failed(key, e)
                return False
        # The lease ends on every path: a WRITING lease left behind is BUSY
        # for every engine until this one exits.
        try:
            try:
                if getattr(sv, "side", None):  # "describe": before the commit
                    with self.daemon:
                        _vllm_events.describe(c, w, hashes, sv.tokens, sv.side, start,
                                              self.layout.block_tokens, sv.lora)
                if w.new:
                    for idx, tensor in layers:
                        w.store(idx, cache, tensor, block_ids)
                with self.daemon:
                    published = w.commit()
            finally:
                if not w.ended:
                    with self.daemon:
                        w.abort()
        except kvshare.Error as e:
            if w.ended and not isinstance(e, (kvshare.DisconnectedError, kvshare.ProtocolError)):
                raise  # an argument the library refused, not the daemon: logged
            with self.daemon:
                clients.failed(key, e)  # closing the client ends the lease
            return False
        st = w.statuses
        with self.lock:
            self.counters.published_blocks += published
            self.counters.skipped_blocks += sum(s in (kvshare.BUSY, kvshare.FULL, kvshare.NOPARENT)
                                                for s in st)
        return all(s in (kvshare.NEW, kvshare.EXISTS) for s in st)

    def get_finished(self, finished_req_ids: set[str], meta: Optional[KvshareMetadata]
                     ) -> tuple[Optional[set[str]], Optional[set[str]]]:
        """(finished requests whose publishes are all done, among those the
        scheduler held for them; requests whose async load is copied).
        @meta: the step's, None when the step had none."""
        if meta is not None:
            self.to_send.add(getattr(meta, "sending", ()))
        recving = self.to_recv.take_done(self.aloads)
        if self.to_recv.ids:  # this step ends with a load still copying
            with self.lock:
                self.counters.async_load_steps += 1
        return self.to_send.take_done(self.publishes) or None, recving or None

    # ---- HMA: every KV-cache group (_vllm_groups) --------------------------

    def _register_groups(self, kv_caches: dict[str, "torch.Tensor"], kind: str) -> None:
        """Each group's layers (their index in its namespace) and paged cache."""
        self.layer_ns: dict[int, tuple[int, int]] = {}  # layer index -> (group, index in it)
        for g in self.groups:
            names_in = [n for n in g.layers if n in kv_caches]
            if len(names_in) != len(g.layers):
                raise ValueError(f"kvshare: group {g.index}: {len(g.layers) - len(names_in)} "
                                 "of its layers have no KV cache tensor")
            for li, name in enumerate(names_in):
                self.layer_ns[self.layers[name][0]] = (g.index, li)
            g.cache = kvshare.PagedCache.for_tensor(self.layers[names_in[0]][1],
                                                    "mla" if g.kind == "state" else kind,
                                                    g.layout.kv_heads, g.layout.head_dim)

    def _is_state(self, group: Optional[int]) -> bool:
        return group is not None and self._group(group).kind == "state"

    def _ns_of(self, group: Optional[int]) -> tuple[Any, Any, list]:
        """(clients, cache, [(index in the namespace, tensor)]) of a namespace:
        the connector's own (group None) or a group's."""
        if group is None:
            return self.clients, self.cache, list(self.layers.values())
        g = self._group(group)
        by_index = {i: t for i, t in self.layers.values()}
        layers = sorted((li, by_index[i]) for i, (gi, li) in self.layer_ns.items() if gi == group)
        return g.clients, g.cache if self.cache is not None else None, layers

    def _layer_in(self, idx: int, group: Optional[int]) -> Optional[tuple[int, Any, Any]]:
        """(index in the namespace, cache, layout) of layer @idx for a job of
        @group; None when the layer is not the group's."""
        if group is None:
            return idx, self.cache, self.layout
        gi, li = self.layer_ns.get(idx, (None, 0))
        if gi != group:
            return None
        g = self._group(group)
        return li, g.cache, g.layout

    def transfer_results(self, r: Any) -> Any:
        """vLLM's transfer results @r (from get_finished) with HMA's failed
        loads: the requests vLLM recomputes whole."""
        if self.groups:
            with self.lock:
                failed = self.failed_recv & r.finished_recving
                self.failed_recv -= failed
            r.failed_recving = set(failed)
        return r
