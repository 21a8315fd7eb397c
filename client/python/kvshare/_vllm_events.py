"""The vLLM connector's side records (`"describe": true` in its extra
config): each block it publishes is described to the daemon with vLLM's own
block hash, parent hash, token ids, block size, LoRA name and extra keys,
computed by vLLM's own functions, so that the daemon's vLLM KV events
(kvshared --kv-events, docs/routers.md) name the block exactly as the
engine's own events would.

Scheduler side: side_records() of a request's full prompt blocks, carried
to the worker in the publish's metadata. Worker side: describe() between the
reserve and the commit of a window.

And the other way (`"pool_events"` in the extra config): PoolEvents follows
the daemon's stream on the scheduler side and hands the pool's blocks of
this engine's model to vLLM through the connector's take_events(), into the
engine's own KV events (docs/routers.md, "In each engine's own stream").
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Optional

import kvshare

if TYPE_CHECKING:
    from vllm.v1.request import Request

logger = logging.getLogger("vllm.kvshare")

#: One block's record as the metadata carries it: (engine hash, extra keys).
Side = tuple[Any, Optional[tuple]]


def side_records(request: "Request", blocks: int, block_size: int) -> Optional[list[Side]]:
    """vLLM's external hash and event extra keys of the request's blocks
    [0, blocks), or None when vLLM has not hashed that many (prefix caching
    off: no block hashes)."""
    from vllm.v1.core.kv_cache_utils import (
        generate_block_hash_extra_keys,
        maybe_convert_block_hash,
        to_event_extra_keys,
    )

    hashes = getattr(request, "block_hashes", None)
    if not hashes or len(hashes) < blocks:
        return None
    out: list[Side] = []
    for i in range(blocks):
        keys, _ = generate_block_hash_extra_keys(request, i * block_size,
                                                 (i + 1) * block_size, 0)
        ev = to_event_extra_keys([keys])
        out.append((maybe_convert_block_hash(hashes[i]), ev[0] if ev else None))
    return out


def lora_name(request: "Request") -> Optional[str]:
    lr = getattr(request, "lora_request", None)
    return lr.name if lr is not None else None


def describe(c: kvshare.Client, w: Any, hashes: Any, tokens: list[int], side: list[Side],
             start: int, block_size: int, lora: Optional[str]) -> None:
    """Describe the NEW blocks of write lease @w (a window of the chain
    from block @start; @hashes the window's kvshare hashes). A failure is
    logged and costs only the description: the publish goes on."""
    recs = []
    for i in w.new:
        b = start + i
        recs.append(kvshare.BlockDesc(
            hash=hashes[i], engine_hash=side[b][0],
            parent_hash=side[b - 1][0] if b > 0 else None,
            token_ids=tokens[b * block_size:(b + 1) * block_size], block_size=block_size,
            lora_name=lora, extra_keys=side[b][1]))
    if not recs:
        return
    try:
        c.describe(recs)
    except (kvshare.Error, ValueError, TypeError) as e:
        logger.warning("kvshare: side records not sent: %s", e)


def ns_name(layout: kvshare.Layout) -> bytes:
    """kvshare_ns as the daemon's events carry it: the layout's seed without
    its adapter and salt (those are in each event's lora_name, extra_keys)."""
    from kvshare._lib import lib

    base = dataclasses.replace(layout, adapter=None, salt=None)
    h = lib.kvs_hash_layout_seed(base._c())
    return int(h.hi).to_bytes(8, "big") + int(h.lo).to_bytes(8, "big")


_END_SEQ = b"\xff" * 8


class PoolEvents:
    """The daemon's KV events (kvshared --kv-events) of one namespace, as
    vLLM's own event classes, for the scheduler-side connector's
    take_events().

    A SUB socket on the daemon's PUB endpoint; the events whose kvshare_ns is
    @ns and that name a block by its engine's hash (a side record: token ids)
    are kept, and a removal only of a block this stream reported. At start,
    with a @replay endpoint, the newest @catchup batches (from @next_seq(),
    the daemon's kv_events.batches) are replayed and handed over as the net
    state they leave; a gap in seq later is replayed the same way, at most
    @catchup batches of it. Reported blocks are remembered up to @max_blocks
    (the oldest forgotten past it)."""

    def __init__(self, endpoint: str, replay: Optional[str], ns: bytes, catchup: int,
                 next_seq: Callable[[], Optional[int]], max_blocks: int = 1 << 20,
                 timeout_s: float = 1.0, budget: int = 256) -> None:
        import msgspec
        import zmq
        from vllm.distributed import kv_events as ke

        self.zmq, self.ke = zmq, ke
        self.ns, self.catchup, self.max_blocks = ns, max(0, catchup), max_blocks
        self.timeout_ms, self.budget = int(timeout_s * 1000), budget
        self.dec = msgspec.msgpack.Decoder()
        self.convert = msgspec.convert
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.RCVHWM, 100_000)  # while the engine idles
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(endpoint)
        self.rep: Optional[Any] = None
        if replay:
            self.rep = self.ctx.socket(zmq.DEALER)
            self.rep.setsockopt(zmq.LINGER, 0)
            self.rep.connect(replay)
        # (hash, medium, locality) -> None: what this stream reported
        self.live: OrderedDict[tuple, None] = OrderedDict()
        self.next: Optional[int] = None  # the seq expected next
        self.out: list = []
        self.lost = 0  # batches neither received nor replayed
        self.event_type = ke.BlockStored | ke.BlockRemoved
        n = next_seq() if self.rep is not None else None
        if n is not None:
            self.next = max(0, n - self.catchup)
            self._fill(n, net=True)

    # ---- one batch's events -------------------------------------------

    def _apply(self, payload: bytes) -> None:
        try:
            events = self.dec.decode(payload)[1]
        except Exception as e:  # a stream this class cannot read: skipped
            logger.warning("kvshare: pool event batch not decoded: %s", e)
            return
        for ev in events:
            if not isinstance(ev, dict) or ev.pop("kvshare_ns", None) != self.ns:
                continue
            kind = ev.get("type")
            hashes = ev.get("block_hashes") or [None]
            key = (hashes[0], ev.get("medium"), ev.get("locality"))
            if kind == "BlockStored":
                if not ev.get("token_ids") or key in self.live:
                    continue  # no side record (kvshare's own hash), or known
                self.live[key] = None
                if len(self.live) > self.max_blocks:
                    self.live.popitem(last=False)
                self.out.append(self.convert(ev, self.event_type))
            elif kind == "BlockRemoved" and key in self.live:
                del self.live[key]
                self.out.append(self.convert(ev, self.event_type))

    def _seq(self, seq: int, payload: bytes) -> None:
        if self.next is not None and seq < self.next:
            return  # had it (replayed)
        if self.next is not None and seq > self.next:
            self._fill(seq, net=False)
        self._apply(payload)
        self.next = seq + 1

    # ---- replay ---------------------------------------------------------

    def _fill(self, end: int, net: bool) -> None:
        """Batches [self.next, @end) from the replay socket, in pages (the
        daemon answers a bounded number at a time). @net: only the state they
        leave is handed over (a block stored then removed is not)."""
        start = self.next or 0
        missed = max(0, end - start - self.catchup)
        start += missed
        mark = len(self.out)
        while self.rep is not None and start < end:
            got = self._page(start, end)
            for seq, payload in got or ():
                self._apply(payload)
                start = seq + 1
            if not got:
                break
        missed += end - start
        if missed:
            self.lost += missed
            logger.warning("kvshare: %d pool event batches missed", missed)
        self.next = end
        if net:
            keep: dict[tuple, Any] = {}
            for e in self.out[mark:]:
                k = (e.block_hashes[0], e.medium, e.locality)
                if isinstance(e, self.ke.BlockStored):
                    keep[k] = e
                else:
                    keep.pop(k, None)
            self.out[mark:] = [e for k, e in keep.items() if k in self.live]

    def _page(self, start: int, end: int) -> Optional[list[tuple[int, bytes]]]:
        assert self.rep is not None
        self.rep.send_multipart([b"", start.to_bytes(8, "big")])
        got: list[tuple[int, bytes]] = []
        while True:
            if not self.rep.poll(self.timeout_ms):
                logger.warning("kvshare: no answer from the pool events' replay socket")
                return None
            frames = self.rep.recv_multipart()
            if len(frames) != 4:
                continue
            if frames[2] == _END_SEQ:
                return got
            seq = int.from_bytes(frames[2], "big")
            if start <= seq < end:
                got.append((seq, frames[3]))

    # ---- the connector's side -------------------------------------------

    def take(self) -> list:
        """The events since the last call (at most @budget batches read)."""
        zmq = self.zmq
        for _ in range(self.budget):
            try:
                frames = self.sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) == 3 and len(frames[1]) == 8:
                self._seq(int.from_bytes(frames[1], "big"), frames[2])
        out, self.out = self.out, []
        return out

    def close(self) -> None:
        self.ctx.destroy(linger=0)


def pool_events(tc: Any, layout: kvshare.Layout, clients: Any, lock: Any) -> Optional[PoolEvents]:
    """The scheduler side's PoolEvents when the extra config names the
    daemon's stream (`pool_events`, `pool_events_replay`,
    `pool_events_catchup`), else None. @clients, @lock: the connector's
    daemon connections (the daemon's kv_events.batches: where catching up
    ends)."""
    endpoint = tc.get_from_extra_config("pool_events", None)
    if not endpoint:
        return None

    def next_seq() -> Optional[int]:
        with lock:
            c = clients.get(None, None)
            try:
                st = c.stats() if c is not None else {}
            except kvshare.Error:
                st = {}
        v = st.get("kv_events.batches")
        return int(v) if v is not None else None

    return PoolEvents(endpoint, tc.get_from_extra_config("pool_events_replay", None),
                      ns_name(layout), int(tc.get_from_extra_config("pool_events_catchup", 4096)),
                      next_seq)
