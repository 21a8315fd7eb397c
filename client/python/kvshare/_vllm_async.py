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

Here: the copy threads and their bookkeeping by request and block (Copies,
Pending); the worker side (_vllm_worker.WorkerSide) runs its copies on them.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
from typing import Any, Callable, Iterable

import kvshare

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
