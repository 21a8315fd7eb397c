"""Loading libkvshare and declaring its C API for ctypes.

The library is found, in order, through $KVSHARE_LIB (a path), beside this
package (a copy installed with it), then the dynamic loader's path
(libkvshare.so.0: LD_LIBRARY_PATH, the ld.so cache). Its version must be the
one this package was written for (same major, at least our minor).
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

VERSION_MAJOR = 0
VERSION_MINOR = 4  # 2: kvs_kv_store / kvs_kv_load / kvs_version; 3: kvs_set_timeout;
#                    4: kvs_reserve_after, kvs_hash_key, kvs_block_*_regions


class Hash(Structure):
    _fields_ = [("lo", c_uint64), ("hi", c_uint64)]


class CLayout(Structure):
    _fields_ = [
        ("model", c_char_p),
        ("adapter", c_char_p),
        ("salt", c_char_p),
        ("layers", c_uint32),
        ("kv_heads", c_uint32),
        ("head_dim", c_uint32),
        ("block_tokens", c_uint32),
        ("tp_rank", c_uint32),
        ("tp_size", c_uint32),
        ("dtype", c_int),
    ]


class CBlock(Structure):
    _fields_ = [
        ("offset", c_uint64),
        ("gen", c_uint32),
        ("tier", c_uint8),
        ("status", c_uint8),
    ]


class CPagedCache(Structure):
    _fields_ = [
        ("num_pages", c_uint32),
        ("page_tokens", c_uint32),
        ("dtype", c_int),
        ("on_device", c_uint32),
        ("stride_kv", c_int64),
        ("stride_page", c_int64),
        ("stride_token", c_int64),
        ("stride_head", c_int64),
    ]


class CEngineReport(Structure):
    _fields_ = [(name, c_uint64) for name in (
        "hit_tokens", "loaded_blocks", "loaded_bytes", "load_us", "load_errors",
        "published_blocks", "publish_us", "skipped_blocks")]


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
