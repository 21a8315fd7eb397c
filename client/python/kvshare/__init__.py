"""kvshare: share LLM KV-cache blocks between inference workers on one machine.

A Python client of kvshared over libkvshare (ctypes, no compiler needed), and
a vLLM KV connector (kvshare.vllm_connector.KvshareConnector).

    import kvshare
    layout = kvshare.Layout(model="m", layers=32, kv_heads=8, head_dim=128,
                            block_tokens=16, dtype="fp16")
    with kvshare.Client(layout=layout) as c:
        hashes = c.hash_tokens(tokens)
        with c.lookup(hashes) as hit:       # pins the leading hits
            ...hit.view(i) or hit.load(layer, cache, tensor, page_ids)...
        with c.reserve(hashes) as w:        # commits on exit, aborts on error
            ...w.store(layer, cache, tensor, page_ids)...
"""

from .client import (
    BUSY,
    DTYPES,
    EXISTS,
    FULL,
    HASH_DTYPE,
    HIT,
    MAX_HASHES,
    NEW,
    NOPARENT,
    TIER_GPU,
    TIER_HOST,
    TIER_NAMES,
    TIER_REMOTE,
    TIER_SSD,
    Block,
    Client,
    Layout,
    PagedCache,
    ReadLease,
    WriteLease,
    default_socket_path,
    dtype_code,
    dtype_name,
)
from .errors import (
    DisconnectedError,
    Error,
    FullError,
    InvalidArgument,
    LayoutError,
    LeaseError,
    LeaseReleased,
    LimitError,
    NoDaemonError,
    NoDevice,
    OutOfRange,
    PermissionDenied,
    ProtocolError,
    strerror,
)
from ._describe import BlockDesc
from ._lib import lib as _lib

__version__ = "0.4.0"


def library_version() -> tuple[int, int]:
    """(major, minor) of the libkvshare this package loaded."""
    v = _lib.kvs_version()
    return v >> 16, v & 0xFFFF


def hash_tokens(client: Client, tokens) -> "HASH_DTYPE":  # type: ignore[valid-type]
    """Client.hash_tokens as a function."""
    return client.hash_tokens(tokens)


__all__ = [
    "BUSY", "DTYPES", "EXISTS", "FULL", "HASH_DTYPE", "HIT", "MAX_HASHES", "NEW", "NOPARENT",
    "TIER_GPU", "TIER_HOST", "TIER_NAMES", "TIER_REMOTE", "TIER_SSD", "Block", "BlockDesc",
    "Client",
    "Layout", "PagedCache",
    "ReadLease", "WriteLease", "default_socket_path", "dtype_code", "dtype_name",
    "hash_tokens",
    "library_version", "strerror", "Error", "DisconnectedError", "FullError",
    "InvalidArgument", "LayoutError", "LeaseError", "LeaseReleased", "LimitError",
    "NoDaemonError", "NoDevice", "OutOfRange", "PermissionDenied", "ProtocolError",
]
