"""The kvshare client: connect, hash, look up, reserve, and move KV between an
engine's paged cache and blocks.

A Client is one connection to kvshared attached with one Layout (or none, for
stats only). It is not thread-safe: use one per thread, or lock. Every call
into the library releases the GIL while it runs.

The package's modules: client (Client), _types (the C vocabulary's names,
Layout, Block), paged (PagedCache), _lease (ReadLease, WriteLease and the
holds that keep their blocks), _lib (loading libkvshare, its ctypes
declarations), _abi (the C ABI's numbers, generated), errors. Every name
this module held before that split is still importable from it.
"""

from __future__ import annotations

import ctypes
import math
from ctypes import byref, c_uint32, c_uint64, c_void_p
from typing import Any, Optional, Sequence, Union

import numpy as np

from . import errors
from ._lease import ReadLease, WriteLease, _Conn
from ._lib import CBlock, CEngineReport, lib, libc
from .errors import check
from .paged import PagedCache

# What this module held before its classes moved to _types, paged and
# _lease: every name stays importable from kvshare.client.
from ._types import (  # noqa: F401
    _DTYPE_ALIASES,
    BUSY,
    CONNECT_GPU,
    CONNECT_NO_FASTPATH,
    DTYPES,
    EXISTS,
    FULL,
    HASH_DTYPE,
    HIT,
    MAX_HASHES,
    NEW,
    NOPARENT,
    QUERY_REMOTE,
    STATUS_NAMES,
    TIER_GPU,
    TIER_HOST,
    TIER_NAMES,
    TIER_REMOTE,
    TIER_SSD,
    Block,
    Hashes,
    Layout,
    dtype_code,
    dtype_name,
)


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

    def describe(self, records: Sequence[Any]) -> int:
        """Side records of this namespace's blocks (kvshare.BlockDesc each,
        kvs_describe): how the daemon's vLLM KV events name them. Send them
        between the reserve and the commit; returns how many were kept (0
        when the daemon's events are off)."""
        from ._describe import describe

        self._flush()
        return describe(self._handle(), records)

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
