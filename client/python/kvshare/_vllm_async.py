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
from typing import Any, Callable, Iterable


class Copies:
    """Copies on one thread, in submission order, with the request and the
    vLLM blocks of each. Not thread-safe: the worker's main thread calls it;
    the copies themselves only run `fn`."""

    def __init__(self, name: str) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(1, name)
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
