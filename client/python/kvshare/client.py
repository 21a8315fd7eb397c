"""The kvshare client: connect, hash, look up, reserve, and move KV between an
engine's paged cache and blocks.

A Client is one connection to kvshared attached with one Layout (or none, for
stats only). It is not thread-safe: use one per thread, or lock. Every call
into the library releases the GIL while it runs.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import math
import weakref
from ctypes import byref, c_int32, c_uint8, c_uint32, c_uint64, c_void_p
from typing import Any, Optional, Sequence, Union

import numpy as np

from . import errors
from ._lib import CBlock, CEngineReport, CLayout, CPagedCache, lib, libc
from .errors import LeaseReleased, check

# kvs_dtype
DTYPES = {"fp16": 1, "bf16": 2, "fp32": 3, "fp8_e4m3": 4, "int8": 5, "int4": 6}
_DTYPE_ALIASES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16",
                  "float32": "fp32", "float": "fp32", "fp8": "fp8_e4m3"}

TIER_GPU, TIER_HOST, TIER_SSD = 1, 2, 3
HIT, NEW, EXISTS, BUSY, FULL = 0, 1, 2, 3, 4
STATUS_NAMES = {HIT: "hit", NEW: "new", EXISTS: "exists", BUSY: "busy", FULL: "full"}

MAX_HASHES = 16384
CONNECT_GPU = 0x1
CONNECT_NO_FASTPATH = 0x2
QUERY_REMOTE = 0x1  # kvs_query: also ask the remote tier (KVS_QUERY_REMOTE)

#: One kvs_hash per element, the C struct's memory layout: arrays of it go to
#: the library as they are.
HASH_DTYPE = np.dtype([("lo", "<u8"), ("hi", "<u8")])

Hashes = np.ndarray  # of HASH_DTYPE


def dtype_code(dtype: Union[str, int]) -> int:
    """The kvs_dtype of a name ("fp16", "bf16", "fp32", "int8", "fp8_e4m3", "int4")."""
    if isinstance(dtype, int):
        if dtype not in DTYPES.values():
            raise ValueError(f"unknown kvs_dtype {dtype}")
        return dtype
    name = _DTYPE_ALIASES.get(str(dtype).lower(), str(dtype).lower())
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; one of {sorted(DTYPES)}")
    return DTYPES[name]


@dataclasses.dataclass(frozen=True)
class Layout:
    """The KV layout of a worker (kvs_layout): identical layouts share one
    namespace; any difference, the salt included, isolates."""

    model: str
    layers: int
    kv_heads: int
    head_dim: int
    block_tokens: int
    dtype: Union[str, int] = "fp16"
    tp_rank: int = 0
    tp_size: int = 1
    adapter: Optional[str] = None
    salt: Optional[str] = None

    def _c(self) -> CLayout:
        enc = lambda s: None if s is None else s.encode()  # noqa: E731
        return CLayout(
            enc(self.model), enc(self.adapter), enc(self.salt), self.layers,
            self.kv_heads, self.head_dim, self.block_tokens, self.tp_rank,
            self.tp_size, dtype_code(self.dtype),
        )

    @property
    def block_bytes(self) -> int:
        """Bytes of one block (0 if the layout is invalid)."""
        return int(lib.kvs_layout_block_bytes(byref(self._c())))


@dataclasses.dataclass(frozen=True)
class Block:
    """Where one block's bytes are: tier, byte offset in the tier's arena,
    slot generation, and its status in a lookup or reserve reply."""

    offset: int
    gen: int
    tier: int
    status: int


def default_socket_path() -> str:
    """kvshared's default socket: $XDG_RUNTIME_DIR/kvshare/kvshared.sock,
    else /tmp/kvshare-$UID/kvshared.sock."""
    buf = ctypes.create_string_buffer(4096)
    check(lib.kvs_default_socket_path(buf, len(buf)), "default socket path")
    return buf.value.decode()


def _as_hashes(hashes: Any) -> np.ndarray:
    h = np.ascontiguousarray(hashes)
    if h.dtype != HASH_DTYPE:
        raise TypeError("hashes must come from Client.hash_tokens() (dtype HASH_DTYPE)")
    return h.reshape(-1)


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


class PagedCache:
    """An engine's paged KV cache, one tensor per layer (kvs_paged_cache).

    `kind` says how a layer's tensor is shaped:
      "nhd"  [2, pages, page_tokens, kv_heads, head_dim]   vLLM CUDA flash-attention
      "hnd"  [2, pages, kv_heads, page_tokens, head_dim]
      "cpu"  [pages, kv_heads, page_tokens, 2 * head_dim]  vLLM CPU backend
             (page_tokens K rows, then page_tokens V rows, per head)
      "bhnc" [pages, kv_heads, page_tokens, 2 * head_dim]  vLLM >= 0.32 CUDA
             backends (each token's K, then its V)
      "nhd_kv_inner" [pages, 2, page_tokens, kv_heads, head_dim]
    Build it from one layer's tensor with for_tensor(); every layer's tensor
    must then have that shape, strides and dtype.
    """

    KINDS = ("nhd", "hnd", "cpu", "bhnc", "nhd_kv_inner")

    def __init__(self, kind: str, shape: Sequence[int], strides: Sequence[int],
                 dtype: str, kv_heads: int, head_dim: int, on_device: bool) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown paged cache kind {kind!r}; one of {self.KINDS}")
        self.kind = kind
        self.shape = tuple(int(x) for x in shape)
        self.strides = tuple(int(x) for x in strides)  # elements
        self.dtype = dtype
        self.on_device = on_device
        s = self.strides
        if kind == "cpu":
            n, h, t, d2 = self.shape
            want = (n, kv_heads, t, 2 * head_dim)
            # The backend reads [t][2d] as [2][t][d]: those two dims must be
            # one contiguous run.
            if s[3] != 1 or s[2] != 2 * head_dim:
                raise ValueError("cpu layout: the last two dims must be contiguous")
            kv, page, tok, head = t * head_dim, s[0], head_dim, s[1]
        elif kind == "bhnc":
            n, h, t, d2 = self.shape
            want = (n, kv_heads, t, 2 * head_dim)
            kv, page, tok, head = head_dim, s[0], s[2], s[1]
        elif kind == "nhd":
            _, n, t, h, d = self.shape
            want = (2, n, t, kv_heads, head_dim)
            kv, page, tok, head = s[0], s[1], s[2], s[3]
        elif kind == "hnd":
            _, n, h, t, d = self.shape
            want = (2, n, kv_heads, t, head_dim)
            kv, page, head, tok = s[0], s[1], s[2], s[3]
        else:
            n, _, t, h, d = self.shape
            want = (n, 2, t, kv_heads, head_dim)
            page, kv, tok, head = s[0], s[1], s[2], s[3]
        if self.shape != want:
            raise ValueError(f"{kind} layout: shape {self.shape}, expected {want}")
        if s[-1] != 1:
            raise ValueError("the last dimension must be contiguous")
        self.num_pages, self.page_tokens = n, t
        self._c = CPagedCache(n, t, dtype_code(dtype), 1 if on_device else 0,
                              kv, page, tok, head)

    @classmethod
    def for_tensor(cls, tensor: Any, kind: str, kv_heads: int, head_dim: int) -> "PagedCache":
        """Describe the cache from one layer's tensor (numpy array or torch
        tensor, CPU or CUDA)."""
        shape, strides, dtype, on_device, _ = _tensor_info(tensor)
        return cls(kind, shape, strides, dtype, kv_heads, head_dim, on_device)

    def _pointer(self, tensor: Any) -> tuple[int, Optional[int]]:
        shape, strides, dtype, on_device, ptr = _tensor_info(tensor)
        if shape != self.shape or strides != self.strides or dtype != self.dtype \
                or on_device != self.on_device:
            raise ValueError(
                f"tensor {shape}/{strides}/{dtype} does not match the paged cache "
                f"{self.shape}/{self.strides}/{self.dtype}")
        stream = None
        if on_device:
            import torch

            stream = torch.cuda.current_stream(tensor.device).cuda_stream
        return ptr, stream


_NP_DTYPES = {np.dtype(np.float16): "fp16", np.dtype(np.float32): "fp32"}


def _tensor_info(t: Any) -> tuple[tuple[int, ...], tuple[int, ...], str, bool, int]:
    """shape, strides in elements, dtype name, on a CUDA device, address."""
    if hasattr(t, "data_ptr"):  # torch
        name = str(t.dtype).replace("torch.", "")
        dtype = _DTYPE_ALIASES.get(name, name)
        if dtype not in ("fp16", "bf16", "fp32"):
            raise TypeError(f"tensor dtype {t.dtype}: fp16, bf16 or fp32 only")
        return tuple(t.shape), tuple(t.stride()), dtype, t.device.type == "cuda", t.data_ptr()
    a = t
    if not isinstance(a, np.ndarray):
        raise TypeError("a numpy array or a torch tensor is expected")
    if a.dtype not in _NP_DTYPES:
        raise TypeError(f"array dtype {a.dtype}: float16 or float32 only")
    if any(s % a.itemsize for s in a.strides):
        raise ValueError("array strides must be multiples of the element size")
    return (tuple(a.shape), tuple(s // a.itemsize for s in a.strides), _NP_DTYPES[a.dtype],
            False, a.ctypes.data)


def _page_ids(page_ids: Any, rows: int, ppb: int) -> np.ndarray:
    ids = np.ascontiguousarray(page_ids, dtype=np.int32).reshape(-1)
    if ids.size != rows * ppb:
        raise ValueError(f"page_ids: {ids.size} ids for {rows} blocks of {ppb} pages")
    return ids


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
        if list(idx) == list(range(idx[0], idx[0] + n)):
            blocks = ctypes.cast(ctypes.byref(self._blocks, idx[0] * ctypes.sizeof(CBlock)),
                                 ctypes.POINTER(CBlock))
        else:
            arr = (CBlock * n)(*[self._blocks[i] for i in idx])
            blocks = ctypes.cast(arr, ctypes.POINTER(CBlock))
        ptr, stream = cache._pointer(tensor)
        f = lib.kvs_kv_store if store else lib.kvs_kv_load
        check(f(c._handle(), byref(cache._c), layer, ptr, blocks,
                ids.ctypes.data_as(ctypes.POINTER(c_int32)), n, stream),
              "kvs_kv_store" if store else "kvs_kv_load")


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
        pages: page_ids holds count * (block_tokens / page_tokens) ids, the
        pages of each block's tokens in order. Dequantizes INT8/FP8."""
        self._live()
        count = self.hits - first if count is None else count
        if first < 0 or count < 0 or first + count > self.hits:
            raise IndexError(f"hits [{first}, {first + count}) of {self.hits}")
        self._copy(False, layer, cache, tensor, range(first, first + count), page_ids)

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
        page_ids covers every block of the lease (n * block_tokens /
        page_tokens ids; those of blocks not NEW are ignored). Quantizes for
        INT8/FP8 namespaces. Returns the number of blocks written."""
        self._live()
        c = self._client
        ppb = c.layout.block_tokens // cache.page_tokens  # type: ignore[union-attr]
        ids = _page_ids(page_ids, self._count, ppb).reshape(self._count, ppb)
        new = self.new
        self._copy(True, layer, cache, tensor, new, ids[new])
        return len(new)

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


def _timeout_ms(seconds: Optional[float]) -> int:
    """A deadline in seconds as kvs_set_timeout() takes it: None is 0 (the
    library's default), anything else at least 1 ms (rounded up)."""
    if seconds is None:
        return 0
    s = float(seconds)
    if not 0 < s <= (2**31 - 1) / 1000:  # NaN too
        raise ValueError(f"timeout {seconds!r}: seconds in (0, 2147483.647], or None")
    return min(math.ceil(s * 1000), 2**31 - 1)


class Client:
    """One connection to kvshared.

    Client(socket=None, layout=None, gpu=False, fast_path=True, timeout=None):
    socket None is the default path; layout None makes a control-only
    connection (stats). gpu=True asks for the daemon's GPU tier
    (KVS_CONNECT_GPU). fast_path=False sends every lookup over the socket
    (KVS_CONNECT_NO_FASTPATH; the answers are the same). timeout is the
    deadline of every call, the connect included, in seconds (None: the
    library's, 5 s or $KVSHARE_TIMEOUT_MS): a daemon that does not answer in
    time (stopped, stuck) raises DisconnectedError, as one that died.
    Use it as a context manager or call close().
    """

    def __init__(self, socket: Optional[str] = None, layout: Optional[Layout] = None,
                 *, gpu: bool = False, fast_path: bool = True,
                 timeout: Optional[float] = None) -> None:
        self.layout = layout
        self.socket = socket
        self._gpu = gpu
        self._flags = (CONNECT_GPU if gpu else 0) | (0 if fast_path else CONNECT_NO_FASTPATH)
        self._timeout = _timeout_ms(timeout)
        self._clayout = layout._c() if layout is not None else None
        self._connect(gpu)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Detach. The daemon drops every lease this client still holds; the
        arenas stay mapped until the last view of a block is gone."""
        conn = self.__dict__.get("_conn")
        if conn is not None and not conn.closed:
            conn.closed = True
            conn.ended.clear()
            conn.close_if_idle()

    def _handle(self) -> int:
        conn = self._conn
        if conn.closed or not conn.handle:
            raise errors.DisconnectedError(errors.E_DISCONNECTED, "client closed")
        return conn.handle

    def _flush(self, wait: bool = False) -> None:
        """Release the read leases whose holds ended (see _Conn)."""
        conn = self._conn
        while conn.ended and not conn.closed and conn.handle:
            lease = conn.ended.popleft()
            if wait:
                rc = lib.kvs_release(conn.handle, lease)
                # A daemon that restarted forgot the lease: nothing to drop.
                if rc < 0 and rc not in (errors.E_DISCONNECTED, errors.E_NOLEASE):
                    check(rc, "kvs_release")
            else:
                lib.kvs_release_nowait(conn.handle, lease)

    def _connect(self, gpu: bool) -> None:
        handle = c_void_p()
        rc = lib.kvs_connect_timeout(
            self.socket.encode() if self.socket else None,
            byref(self._clayout) if self._clayout is not None else None,
            self._flags, self._timeout, byref(handle))
        check(rc, f"connect to {self.socket or default_socket_path()}")
        self._conn = _Conn(handle.value)

    def set_timeout(self, seconds: Optional[float]) -> None:
        """The deadline of every later call, and of reconnect(), in seconds
        (None: the library's default). A call that passes it drops the
        connection and raises DisconnectedError."""
        ms = _timeout_ms(seconds)
        check(lib.kvs_set_timeout(self._handle(), ms), "kvs_set_timeout")
        self._timeout = ms

    def reconnect(self) -> None:
        """After DisconnectedError: connect and attach again, as a new
        connection (leases and blocks from before are gone; views of them
        keep the old mapping until they are dropped)."""
        self.close()
        self._connect(self._gpu)

    @property
    def in_use(self) -> bool:
        """A lease of this client has not ended, or a view of its blocks
        still exists: close() now would not end the connection yet."""
        conn = self.__dict__.get("_conn")
        return conn is not None and conn.holds > 0

    @property
    def block_bytes(self) -> int:
        return int(lib.kvs_block_bytes(self._handle()))

    @property
    def namespace_id(self) -> int:
        return int(lib.kvs_namespace_id(self._handle()))

    def hash_tokens(self, tokens: Union[Sequence[int], np.ndarray]) -> np.ndarray:
        """Chained hashes of the full blocks of a token sequence (a trailing
        partial block is not hashed): a numpy array of HASH_DTYPE."""
        t = np.asarray(tokens)
        if t.size and (t.dtype.kind not in "iu" or t.min() < 0 or t.max() > 0xFFFFFFFF):
            raise ValueError("tokens must be integers in [0, 2**32)")
        t = np.ascontiguousarray(t, dtype=np.uint32).reshape(-1)
        bt = self.layout.block_tokens if self.layout else 1
        out = np.zeros(t.size // bt, dtype=HASH_DTYPE)
        n = check(lib.kvs_hash_tokens(self._handle(), t.ctypes.data_as(ctypes.POINTER(c_uint32)),
                                      t.size, out.ctypes.data, out.size), "kvs_hash_tokens")
        return out[:n]

    def lookup(self, hashes: Any) -> ReadLease:
        """Pin the longest cached prefix of a chain (from block 0)."""
        self._flush()
        h = _as_hashes(hashes)
        blocks = (CBlock * max(h.size, 1))()
        lease = c_uint64()
        hits = check(lib.kvs_lookup(self._handle(), h.ctypes.data, h.size, byref(lease), blocks),
                     "kvs_lookup")
        return ReadLease(self, lease.value, h, blocks, hits)

    def query(self, hashes: Any, remote: bool = False) -> int:
        """How many leading blocks of a chain are cached, pinning and moving
        nothing (kvs_query): the daemon's own tiers, and with remote=True
        also how far the chain goes on in the remote tier (EXISTS only,
        bounded by the daemon's --remote-query-timeout). A hint: a later
        lookup may find fewer."""
        self._flush()
        h = _as_hashes(hashes)
        return check(lib.kvs_query(self._handle(), h.ctypes.data, h.size,
                                   QUERY_REMOTE if remote else 0), "kvs_query")

    def reserve(self, hashes: Any) -> WriteLease:
        """Slots for the blocks of a chain (from block 0) the cache lacks.
        A chain with nothing missing gives a lease with no NEW block."""
        self._flush()
        h = _as_hashes(hashes)
        blocks = (CBlock * max(h.size, 1))()
        lease = c_uint64()
        fresh = check(lib.kvs_reserve(self._handle(), h.ctypes.data, h.size, byref(lease), blocks),
                      "kvs_reserve")
        return WriteLease(self, lease.value, h, blocks, h.size, fresh)

    def reserve_after(self, hashes: Any) -> WriteLease:
        """reserve() of a chain that goes on from a block this client did not
        send (kvs_reserve_after): hashes[0] is the parent, already cached,
        linked to and never reserved (its status EXISTS). When it is not
        cached every status is NOPARENT (5) and nothing is reserved."""
        self._flush()
        h = _as_hashes(hashes)
        blocks = (CBlock * max(h.size, 1))()
        lease = c_uint64()
        fresh = check(lib.kvs_reserve_after(self._handle(), h.ctypes.data, h.size,
                                            byref(lease), blocks), "kvs_reserve_after")
        return WriteLease(self, lease.value, h, blocks, h.size, fresh)

    def paged_cache(self, tensor: Any, kind: str) -> PagedCache:
        """PagedCache.for_tensor with this client's kv_heads and head_dim."""
        if self.layout is None:
            raise errors.Error(errors.E_NOTATTACHED, "paged_cache")
        return PagedCache.for_tensor(tensor, kind, self.layout.kv_heads, self.layout.head_dim)

    def report(self, **counts: int) -> None:
        """Add an engine's counts to the daemon's "engines" stats (kvs_report):
        hit_tokens, loaded_blocks, loaded_bytes, load_us, load_errors,
        published_blocks, publish_us, skipped_blocks; each is a delta."""
        self._flush()
        fields = {f for f, _ in CEngineReport._fields_}
        unknown = set(counts) - fields
        if unknown:
            raise TypeError(f"unknown counters {sorted(unknown)}; known: {sorted(fields)}")
        r = CEngineReport(**{k: max(0, int(v)) for k, v in counts.items()})
        check(lib.kvs_report(self._handle(), byref(r)), "kvs_report")

    def stats(self) -> dict[str, int]:
        """The daemon's counters and gauges: {"section.name": value}."""
        self._flush()
        text = c_void_p()
        check(lib.kvs_stats(self._handle(), byref(text)), "kvs_stats")
        try:
            raw = ctypes.string_at(text.value).decode()
        finally:
            libc.free(text)
        out: dict[str, int] = {}
        for line in raw.splitlines():
            name, _, value = line.partition(" ")
            try:
                out[name] = int(value)
            except ValueError:
                continue
        return out
