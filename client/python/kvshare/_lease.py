"""Leases and what keeps their blocks: ReadLease (the pins of a lookup's
hits), WriteLease (the slots of a reserve), the views of their blocks, and
the holds (_Conn, _Hold) that keep a client's mapping and a read lease's
pins alive while a view of them exists.
"""

from __future__ import annotations

import collections
import ctypes
import weakref
from ctypes import byref, c_int32, c_uint8
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from . import errors
from ._lib import CBlock, lib
from ._types import NEW, TIER_HOST, Block
from .errors import LeaseReleased, check
from .paged import PagedCache

if TYPE_CHECKING:
    from .client import Client


class _Conn:
    """The library handle of a Client, and what keeps it: the mapping of the
    arenas must outlive every numpy view of a block, and the pins of a read
    lease must outlive every view of its blocks, or a view would read a slot
    reused for another block (or unmapped memory). So views hold a _Hold,
    holds hold the _Conn, and the handle is closed when the Client is closed
    (or dropped) and the last hold is gone. Releases that a hold's end
    queues are sent from the client's own thread at its next call."""

    def __init__(self, handle: int) -> None:
        self.handle: Optional[int] = handle
        self.closed = False
        self.holds = 0
        self.ended: "collections.deque[int]" = collections.deque()

    def close_if_idle(self) -> None:
        if self.closed and self.holds == 0 and self.handle:
            lib.kvs_close(self.handle)
            self.handle = None

    def __del__(self) -> None:
        self.closed = True
        self.holds = 0
        self.close_if_idle()


class _Hold:
    """One lease's hold on its client, and for a read lease on its pins:
    kept by the lease until it ends and by every view of its blocks."""

    __slots__ = ("conn", "lease", "__weakref__")

    def __init__(self, conn: _Conn, lease: int) -> None:
        self.conn = conn
        self.lease = lease  # a read lease to release when the hold ends; 0: none
        conn.holds += 1

    def __del__(self) -> None:
        conn = self.conn
        if self.lease:
            conn.ended.append(self.lease)
        conn.holds -= 1
        conn.close_if_idle()


def _page_ids(page_ids: Any, rows: int, ppb: int) -> np.ndarray:
    """The leading rows * ppb ids of page_ids: a whole prompt's pages may be
    passed for a lease of fewer blocks (a lookup's hits, a chain without
    the prompt's partial last block); fewer ids raise ValueError."""
    ids = np.ascontiguousarray(page_ids, dtype=np.int32).reshape(-1)
    if ids.size < rows * ppb:
        raise ValueError(f"page_ids: {ids.size} ids for {rows} blocks of {ppb} pages")
    return ids[: rows * ppb]


class _Lease:
    """What read and write leases share: the blocks, views of them, and the
    copies between them and an engine's paged cache."""

    _client: "Client"

    def __init__(self, client: "Client", lease: int, hashes: np.ndarray,
                 blocks: ctypes.Array, count: int) -> None:
        self._client = client
        self.id = lease
        self.hashes = hashes
        self._blocks = blocks
        self._count = count
        self._ended = lease == 0
        # Lease 0 (no hit, nothing reserved) has no block to view: no hold.
        self._hold: Optional[_Hold] = (
            _Hold(client._conn, lease if self._reads else 0) if lease else None)

    _reads = False

    @property
    def blocks(self) -> list[Block]:
        """The blocks of the reply, in chain order."""
        return [Block(b.offset, b.gen, b.tier, b.status) for b in self._blocks[: self._count]]

    @property
    def ended(self) -> bool:
        return self._ended

    def _live(self) -> None:
        # No _flush() here: load() and store() may run on a copy thread
        # (the library's copies never touch the socket; releases do).
        if self._ended and self.id != 0:
            raise LeaseReleased()

    def _view(self, i: int, writable: bool) -> np.ndarray:
        b = self._blocks[i]
        if b.tier != TIER_HOST:
            raise errors.InvalidArgument(-22, f"block {i} is in tier {b.tier}, not host memory")
        ptr = lib.kvs_block_ptr(self._client._handle(), byref(b))
        if not ptr:
            raise errors.InvalidArgument(-22, f"block {i} is not mapped here")
        buf = (c_uint8 * self._client.block_bytes).from_address(ptr)
        buf._hold = self._hold  # type: ignore[attr-defined]
        arr = np.frombuffer(buf, dtype=np.uint8)
        arr.flags.writeable = writable
        return arr

    def _copy(self, store: bool, layer: int, cache: PagedCache, tensor: Any,
              idx: Sequence[int], page_ids: Any) -> None:
        c = self._client
        ppb = c.layout.block_tokens // cache.page_tokens if c.layout else 0
        if ppb == 0 or c.layout.block_tokens % cache.page_tokens:  # type: ignore[union-attr]
            raise ValueError("page_tokens must divide the layout's block_tokens")
        ids = _page_ids(page_ids, len(idx), ppb)
        n = len(idx)
        if n == 0:
            return
        blocks = self._block_array(idx)
        ptr, stream = cache._pointer(tensor)
        f = lib.kvs_kv_store if store else lib.kvs_kv_load
        check(f(c._handle(), byref(cache._c), layer, ptr, blocks,
                ids.ctypes.data_as(ctypes.POINTER(c_int32)), n, stream),
              "kvs_kv_store" if store else "kvs_kv_load")

    def _block_array(self, idx: Sequence[int]) -> Any:
        """The blocks @idx (not empty) as a C array: the lease's own when
        they are consecutive, else a copy (the array lives as long as the
        pointer: ctypes keeps it in the pointer's _objects)."""
        n = len(idx)
        if list(idx) == list(range(idx[0], idx[0] + n)):
            return ctypes.cast(ctypes.byref(self._blocks, idx[0] * ctypes.sizeof(CBlock)),
                               ctypes.POINTER(CBlock))
        arr = (CBlock * n)(*[self._blocks[i] for i in idx])
        return ctypes.cast(arr, ctypes.POINTER(CBlock))

    def _regions(self, write: bool, idx: Sequence[int], ptrs: Any, sizes: Any,
                 per_block: int) -> None:
        n = len(idx)
        p = np.ascontiguousarray(ptrs, dtype=np.uint64).reshape(-1)
        s = np.ascontiguousarray(sizes, dtype=np.uint64).reshape(-1)
        if per_block < 1 or len(p) != n * per_block or len(s) != len(p):
            raise ValueError(f"{n} blocks of {per_block} regions need {n * per_block} "
                             f"addresses and sizes, not {len(p)} and {len(s)}")
        if n == 0:
            return
        f, name = ((lib.kvs_block_write_regions, "kvs_block_write_regions") if write
                   else (lib.kvs_block_read_regions, "kvs_block_read_regions"))
        check(f(self._client._handle(), self._block_array(idx), n, per_block,
                p.ctypes.data, s.ctypes.data), name)


class ReadLease(_Lease):
    """The pins on the leading hits of a lookup. Use it as a context manager
    (released on exit) or call release(). Views of its blocks stay valid as
    long as they exist (they keep the pins); anything asked of the lease
    after release raises LeaseReleased."""

    _reads = True

    def __init__(self, client: "Client", lease: int, hashes: np.ndarray,
                 blocks: ctypes.Array, hits: int) -> None:
        super().__init__(client, lease, hashes, blocks, hits)
        self.hits = hits

    def __len__(self) -> int:
        return self.hits

    def __enter__(self) -> "ReadLease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def view(self, i: int) -> np.ndarray:
        """A read-only zero-copy numpy view (uint8, block_bytes) of hit i."""
        self._live()
        if not 0 <= i < self.hits:
            raise IndexError(f"hit {i} of {self.hits}")
        return self._view(i, False)

    def load(self, layer: int, cache: PagedCache, tensor: Any, page_ids: Any,
             first: int = 0, count: Optional[int] = None) -> None:
        """Copy layer `layer` of hits [first, first + count) into the engine's
        pages (count: every hit from first on, by default; none on a miss):
        page_ids starts with the pages of block `first`'s tokens, then those
        of each next block, block_tokens / page_tokens ids a block. Ids past
        the count * block_tokens / page_tokens it needs are ignored, so the
        pages of the whole prompt, with first=0, load its hits. Dequantizes
        INT8/FP8."""
        self._live()
        count = self.hits - first if count is None else count
        if first < 0 or count < 0 or first + count > self.hits:
            raise IndexError(f"hits [{first}, {first + count}) of {self.hits}")
        self._copy(False, layer, cache, tensor, range(first, first + count), page_ids)

    def read_regions(self, ptrs: Any, sizes: Any, per_block: int, first: int = 0,
                     count: Optional[int] = None) -> None:
        """Copy hits [first, first + count) (count: every hit from first on,
        by default) into caller memory in one library call: each block into
        @per_block regions laid end to end in it, addresses @ptrs and byte
        counts @sizes (count * per_block of each, block by block: an
        engine's page buffers). The bytes are copied as stored (no
        dequantization: for namespaces of the engine's own layout, such as
        SGLang's pages). A block's regions total exactly block_bytes, or
        nothing is copied (kvs_block_read_regions checks all before it
        copies any)."""
        self._live()
        count = self.hits - first if count is None else count
        if first < 0 or count < 0 or first + count > self.hits:
            raise IndexError(f"hits [{first}, {first + count}) of {self.hits}")
        self._regions(False, range(first, first + count), ptrs, sizes, per_block)

    def release(self) -> None:
        """Drop the lease's own hold on the pins (idempotent). The daemon
        drops them now, or when the last view of the blocks is gone."""
        if self._ended:
            return
        self._ended = True
        self._hold = None  # its end queues the release, unless views hold it
        self._client._flush(wait=True)


class _WriteView(np.ndarray):
    """A view of a NEW block of a write lease, and every array numpy derives
    from it that aliases the block (slices, dtype views): usable while the
    lease is open. A write lease does not pin its slots once it has ended
    (after abort the slot is free, after commit the block may be evicted), so
    the slot may hold another block by then: from the lease's end on, every
    use of these arrays raises LeaseReleased, and the lease turns each one
    read-only (a committed block is immutable). What numpy cannot see is
    not caught: memory taken out of the array before the end (memoryview,
    np.asarray, torch.from_numpy) is the caller's not to use after it."""

    _lease: Optional["WriteLease"] = None

    def __array_finalize__(self, obj: Any) -> None:
        lease = getattr(obj, "_lease", None)
        # A new array of its own (the result of v + 1) is not the block's.
        if lease is not None and np.may_share_memory(self, obj):
            self._lease = lease
            lease._arrays.append(weakref.ref(self))

    def _live(self) -> None:
        if self._lease is not None and self._lease._ended:
            raise LeaseReleased("a view of a write lease used after its commit or abort")

    def __getitem__(self, key: Any) -> Any:
        self._live()
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._live()
        super().__setitem__(key, value)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        for a in inputs + tuple(kwargs.get("out", ())):
            if isinstance(a, _WriteView):
                a._live()
        args = [a.view(np.ndarray) if isinstance(a, _WriteView) else a for a in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(a.view(np.ndarray) if isinstance(a, _WriteView) else a
                                  for a in kwargs["out"])
        return getattr(ufunc, method)(*args, **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        self._live()
        return super().__array_function__(func, types, args, kwargs)

    def fill(self, value: Any) -> None:
        self._live()
        super().fill(value)

    def tobytes(self, *a: Any, **k: Any) -> bytes:
        self._live()
        return super().tobytes(*a, **k)

    def tolist(self) -> Any:
        self._live()
        return super().tolist()

    def copy(self, *a: Any, **k: Any) -> np.ndarray:
        self._live()
        return super().copy(*a, **k).view(np.ndarray)

    def astype(self, *a: Any, **k: Any) -> np.ndarray:
        self._live()
        return np.asarray(super().astype(*a, **k))


class WriteLease(_Lease):
    """Slots for the missing blocks of a chain (reserve). Write the blocks of
    status NEW (`new` lists their indexes), then commit() to publish them all
    at once, or abort(). As a context manager it commits on a normal exit and
    aborts when the block raises. Views are writable until the lease ends;
    from then on every use of them raises LeaseReleased (see _WriteView):
    unlike a read lease's, they do not keep the slot."""

    def __init__(self, client: "Client", lease: int, hashes: np.ndarray,
                 blocks: ctypes.Array, n: int, fresh: int) -> None:
        super().__init__(client, lease, hashes, blocks, n)
        self.fresh = fresh
        self._arrays: "list[weakref.ref[np.ndarray]]" = []

    def __enter__(self) -> "WriteLease":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._ended:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    @property
    def statuses(self) -> list[int]:
        return [b.status for b in self._blocks[: self._count]]

    @property
    def new(self) -> list[int]:
        """Indexes of the blocks that are this lease's to write."""
        return [i for i in range(self._count) if self._blocks[i].status == NEW]

    def view(self, i: int) -> np.ndarray:
        """A writable zero-copy numpy view (uint8, block_bytes) of NEW block i."""
        self._live()
        if not 0 <= i < self._count or self._blocks[i].status != NEW:
            raise IndexError(f"block {i} is not NEW in this lease")
        arr = self._view(i, True).view(_WriteView)
        arr._lease = self
        self._arrays.append(weakref.ref(arr))
        return arr

    def store(self, layer: int, cache: PagedCache, tensor: Any, page_ids: Any) -> int:
        """Copy layer `layer` of every NEW block out of the engine's pages.
        page_ids covers every block of the lease, not only the NEW ones (n *
        block_tokens / page_tokens ids, the pages of block 0's tokens first;
        those of blocks not NEW are ignored, and so are ids past the n
        blocks', e.g. the page of the prompt's partial last block).
        Quantizes for INT8/FP8 namespaces. Returns the number of blocks
        written."""
        self._live()
        c = self._client
        ppb = c.layout.block_tokens // cache.page_tokens  # type: ignore[union-attr]
        ids = _page_ids(page_ids, self._count, ppb).reshape(self._count, ppb)
        new = self.new
        self._copy(True, layer, cache, tensor, new, ids[new])
        return len(new)

    def write_regions(self, idx: Sequence[int], ptrs: Any, sizes: Any, per_block: int) -> None:
        """Copy caller memory into the NEW blocks @idx in one library call,
        each block from @per_block regions (addresses @ptrs, byte counts
        @sizes: len(idx) * per_block of each, block by block), as
        read_regions reads them back."""
        self._live()
        for i in idx:
            if not 0 <= i < self._count or self._blocks[i].status != NEW:
                raise IndexError(f"block {i} is not NEW in this lease")
        self._regions(True, list(idx), ptrs, sizes, per_block)

    def _end(self) -> None:
        self._ended = True
        self._hold = None
        for ref in self._arrays:
            a = ref()
            if a is not None:
                a.flags.writeable = False
        self._arrays = []

    def commit(self) -> int:
        """Publish every NEW block atomically; returns how many."""
        self._live()
        self._client._flush()
        self._end()
        return check(lib.kvs_commit(self._client._handle(), self.id), "kvs_commit")

    def abort(self) -> int:
        """Free the uncommitted slots; returns how many."""
        self._live()
        self._client._flush()
        self._end()
        return check(lib.kvs_abort(self._client._handle(), self.id), "kvs_abort")
