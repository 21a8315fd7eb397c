"""Loading libkvshare and declaring its C API for ctypes.

The library is found, in order, through $KVSHARE_LIB (a path), beside this
package (a copy installed with it), then the dynamic loader's path
(libkvshare.so.0: LD_LIBRARY_PATH, the ld.so cache). Its version must be the
one this package was written for (same major, at least our minor).

The structs' layouts and the version come from _abi, generated from the C
headers by scripts/python_abi.py; the function signatures are declared here
by hand (ctypes cannot read a prototype), and called through with those
structs only.
"""

from __future__ import annotations

import ctypes
import glob
import os
from ctypes import (
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)

from . import _abi

# The version of client/kvshare.h this package was generated from: the
# library must have its major and at least its minor.
VERSION_MAJOR = _abi.KVSHARE_VERSION_MAJOR
VERSION_MINOR = _abi.KVSHARE_VERSION_MINOR

_CTYPES = {"u8": c_uint8, "u32": c_uint32, "u64": c_uint64, "i32": c_int32,
           "i64": c_int64, "str": c_char_p, "ptr": c_void_p}


def _fields(struct: str) -> list:
    """The ctypes _fields_ of a C struct, from _abi (the compiler's layout)."""
    return [(name, _CTYPES[typ]) for name, _, _, typ in _abi.STRUCTS[struct][1]]


def _check_layout(cls: type, struct: str) -> None:
    """ctypes must place every field where the C compiler does: a platform
    whose ctypes pads differently gets an ImportError, not corrupt calls."""
    size, fields = _abi.STRUCTS[struct]
    got = (ctypes.sizeof(cls), [(n, getattr(cls, n).offset, getattr(cls, n).size)
                                for n, _, _, _ in fields])
    want = (size, [(n, off, sz) for n, off, sz, _ in fields])
    if got != want:
        raise ImportError(f"kvshare: ctypes lays out {struct} as {got}, the C "
                          f"compiler as {want}")


class Hash(Structure):
    _fields_ = _fields("kvs_hash")


class CLayout(Structure):
    _fields_ = _fields("kvs_layout")


class CBlock(Structure):
    _fields_ = _fields("kvs_block")


class CPagedCache(Structure):
    _fields_ = _fields("kvs_paged_cache")


class CEngineReport(Structure):
    _fields_ = _fields("kvs_engine_report")


class CBlockDesc(Structure):
    _fields_ = _fields("kvs_block_desc")


for _cls, _struct in ((Hash, "kvs_hash"), (CLayout, "kvs_layout"), (CBlock, "kvs_block"),
                      (CPagedCache, "kvs_paged_cache"), (CEngineReport, "kvs_engine_report"),
                      (CBlockDesc, "kvs_block_desc")):
    _check_layout(_cls, _struct)


def _candidates() -> list[str]:
    env = os.environ.get("KVSHARE_LIB")
    if env:
        return [env]  # an explicit choice is not second-guessed
    here = os.path.dirname(os.path.abspath(__file__))
    beside = sorted(glob.glob(os.path.join(here, "libkvshare.so*")))
    return beside + ["libkvshare.so.0"]


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            # CDLL releases the GIL around every call.
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError(
        "kvshare: cannot load libkvshare ("
        + "; ".join(errors)
        + "). Build it (scripts/build.sh) and set KVSHARE_LIB to build/libkvshare.so, "
        "or install it where the loader finds it."
    )


def _declare(lib: ctypes.CDLL) -> None:
    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    client = c_void_p
    fn("kvs_version", c_uint32)
    fn("kvs_strerror", c_char_p, c_int)
    fn("kvs_default_socket_path", c_int, c_char_p, c_size_t)
    fn("kvs_layout_block_bytes", c_uint64, POINTER(CLayout))
    fn("kvs_connect_timeout", c_int, c_char_p, POINTER(CLayout), c_uint32, c_int,
       POINTER(c_void_p))
    fn("kvs_set_timeout", c_int, client, c_int)
    fn("kvs_reconnect", c_int, client)
    fn("kvs_close", None, client)
    fn("kvs_block_bytes", c_uint64, client)
    fn("kvs_namespace_id", c_uint32, client)
    fn("kvs_hash_tokens", c_int, client, POINTER(c_uint32), c_size_t, c_void_p, c_size_t)
    fn("kvs_lookup", c_int, client, c_void_p, c_size_t, POINTER(c_uint64), POINTER(CBlock))
    fn("kvs_query", c_int, client, c_void_p, c_size_t, c_uint32)
    fn("kvs_reserve", c_int, client, c_void_p, c_size_t, POINTER(c_uint64), POINTER(CBlock))
    fn("kvs_commit", c_int, client, c_uint64)
    fn("kvs_abort", c_int, client, c_uint64)
    fn("kvs_release", c_int, client, c_uint64)
    fn("kvs_release_nowait", c_int, client, c_uint64)
    fn("kvs_block_ptr", c_void_p, client, POINTER(CBlock))
    fn("kvs_stats", c_int, client, POINTER(c_void_p))
    fn("kvs_report", c_int, client, POINTER(CEngineReport))
    fn(
        "kvs_kv_store", c_int, client, POINTER(CPagedCache), c_uint32, c_void_p,
        POINTER(CBlock), POINTER(c_int32), c_size_t, c_void_p,
    )
    fn(
        "kvs_kv_load", c_int, client, POINTER(CPagedCache), c_uint32, c_void_p,
        POINTER(CBlock), POINTER(c_int32), c_size_t, c_void_p,
    )
    # 0.4, for backends that take an engine's own keys (kvshare.sglang): a
    # chain after a cached parent, hashes of opaque keys, batched region copies.
    fn("kvs_reserve_after", c_int, client, c_void_p, c_size_t, POINTER(c_uint64),
       POINTER(CBlock))
    fn("kvs_hash_layout_seed", Hash, POINTER(CLayout))
    fn("kvs_hash_key", Hash, Hash, c_char_p, c_size_t)
    fn("kvs_block_read_regions", c_int, client, POINTER(CBlock), c_size_t, c_size_t,
       c_void_p, c_void_p)
    fn("kvs_block_write_regions", c_int, client, POINTER(CBlock), c_size_t, c_size_t,
       c_void_p, c_void_p)
    # Side records for the daemon's vLLM KV events; a library without them
    # still serves everything else (kvshare._describe says so when asked).
    if hasattr(lib, "kvs_describe"):
        fn("kvs_describe", c_int, client, POINTER(CBlockDesc), c_size_t, POINTER(c_uint64))


def _check_version(lib: ctypes.CDLL) -> int:
    if not hasattr(lib, "kvs_version"):
        raise ImportError(
            f"kvshare: {lib._name} is older than {VERSION_MAJOR}.{VERSION_MINOR} "
            "(no kvs_version): rebuild or point KVSHARE_LIB at a newer build"
        )
    v = lib.kvs_version()
    major, minor = v >> 16, v & 0xFFFF
    if major != VERSION_MAJOR or minor < VERSION_MINOR:
        raise ImportError(
            f"kvshare: {lib._name} is version {major}.{minor}; this package needs "
            f"{VERSION_MAJOR}.{VERSION_MINOR} or a later {VERSION_MAJOR}.x"
        )
    return v


lib = _load()
_check_version(lib)
_declare(lib)
libc = ctypes.CDLL(None)
libc.free.argtypes = [c_void_p]
libc.free.restype = None
