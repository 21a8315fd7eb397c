"""The vLLM connector's copies that run off the step: publishes (the engine's
pages into reserved blocks, then commit) and asynchronous loads (hit blocks
into a waiting request's pages), each on a thread of its own, known by the
request they serve and the vLLM blocks they touch.

Why by block: a copy reads or writes vLLM blocks that vLLM may hand to
another request before the copy ends. A finished request's blocks are held
through vLLM's delay_free_blocks until get_finished reports the copies done;
a preempted request's are freed at once, with no hook. So before a step
writes any block (its forward, its loads), the worker waits for every copy
that still touches one of them (handle_preemptions): a publish then never
reads another request's KV, and a load never lands in a block someone else
computes into.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

import kvshare
from kvshare import _vllm_keys as keys
from kvshare import _vllm_events

if TYPE_CHECKING:
    import torch

    from kvshare.vllm_connector import _Load, _Save

# The connector's log: a child of vLLM's `vllm` logger, so its lines go where
# vLLM's go, in vLLM's format (vllm.logger configures that logger; a logger
# outside its tree reaches no handler). A plain logging name: this module
# imports no vLLM.
LOGGER_NAME = "vllm.kvshare"
logger = logging.getLogger(LOGGER_NAME)


def engine_cpus() -> set[int]:
    """Every CPU some thread of this process may run on (the union of their
    affinities): where the engine itself runs."""
    cpus: set[int] = set()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return set(os.sched_getaffinity(0))
    for tid in tids:
        try:
            cpus |= os.sched_getaffinity(int(tid))
        except (OSError, ValueError):  # a thread that ended meanwhile
            pass
    return cpus or set(os.sched_getaffinity(0))


def _widen_affinity() -> None:
    """A copy thread's start: run on every CPU the engine's threads use, not
    only on its creator's. vLLM's CPU worker pins each of its OpenMP threads,
    the main thread included, to one core (VLLM_CPU_OMP_THREADS_BIND), and a
    new thread inherits its creator's affinity: every copy thread was on the
    main thread's one core, beside it, while the others were free. Left as
    inherited where the affinity cannot be set."""
    cpus = engine_cpus()
    try:
        if cpus != os.sched_getaffinity(0):
            os.sched_setaffinity(0, cpus)
    except OSError:
        pass


def copy_pool(threads: int, name: str) -> concurrent.futures.ThreadPoolExecutor:
    """@threads copy threads (named @name) on every CPU the engine uses."""
    return concurrent.futures.ThreadPoolExecutor(threads, name, initializer=_widen_affinity)


def windows(n: int, after: bool = False) -> list[tuple[int, int]]:
    """The [start, end) blocks of the calls a chain of n blocks takes: the
    daemon takes at most MAX_HASHES hashes a call (more is KVS_E_TOOMANY),
    and a hash names its whole prefix, so a longer chain is asked a window
    at a time. after: each window past the first starts at its parent (the
    last block of the one before: kvs_reserve_after), so it holds one block
    fewer that is new."""
    out, start, cap = [], 0, kvshare.MAX_HASHES
    while start < n:
        end = min(n, start + cap)
        out.append((start, end))
        if end >= n:
            break
        start = end - 1 if after else end
    return out


class Copies:
    """Copies on one thread, in submission order, with the request and the
    vLLM blocks of each. Not thread-safe: the worker's main thread calls it;
    the copies themselves only run `fn`."""

    def __init__(self, name: str) -> None:
        self.pool = copy_pool(1, name)
        self.running: list[tuple[concurrent.futures.Future, str, frozenset[int]]] = []

    def submit(self, req_id: str, blocks: Iterable[int], fn: Callable[..., Any],
               *args: Any) -> None:
        """Queue fn(*args) for req_id, touching `blocks`. fn must not raise."""
        self._prune()
        self.running.append((self.pool.submit(fn, *args), req_id, frozenset(blocks)))

    def _prune(self) -> None:
        self.running = [r for r in self.running if not r[0].done()]

    def wait_blocks(self, blocks: set[int]) -> int:
        """Wait for every copy that touches one of `blocks`; returns how many
        had to be waited for (were still running)."""
        waited = 0
        for f, _, touched in self.running:
            if not f.done() and not touched.isdisjoint(blocks):
                f.result()
                waited += 1
        self._prune()
        return waited

    def busy(self) -> set[str]:
        """The requests with a copy queued or running."""
        self._prune()
        return {req_id for _, req_id, _ in self.running}

    def wait_all(self) -> None:
        for f, _, _ in self.running:
            f.result()
        self.running = []

    def shutdown(self) -> None:
        self.wait_all()
        self.pool.shutdown(wait=True)


class Pending:
    """Request ids vLLM waits to hear about through get_finished, reported
    once no copy of theirs is queued or running. The main thread's."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def add(self, ids: Iterable[str]) -> None:
        self.ids.update(ids)

    def take_done(self, copies: Copies) -> set[str]:
        done = self.ids - copies.busy()
        self.ids -= done
        return done


class WorkerCopies:
    """The worker side's copies, a part of KvshareConnector (which holds the
    state they use: clients, layers, cache, the locks, publishes, aloads,
    to_send, to_recv, counters): pinning and loading hits, publishing saves,
    and what get_finished tells vLLM about both."""

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

    def get_finished(self, finished_req_ids: set[str]
                     ) -> tuple[Optional[set[str]], Optional[set[str]]]:
        """(finished requests whose publishes are all done, among those the
        scheduler held for them; requests whose async load is copied)."""
        if self.has_connector_metadata():
            meta = self._get_connector_metadata()
            self.to_send.add(getattr(meta, "sending", ()))
        recving = self.to_recv.take_done(self.aloads)
        if self.to_recv.ids:  # this step ends with a load still copying
            with self.lock:
                self.counters.async_load_steps += 1
        return self.to_send.take_done(self.publishes) or None, recving or None
