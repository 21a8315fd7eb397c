"""kvshare's names for the C vocabulary (kvs_types.h, kvshare.h): element
types, tiers, block statuses, connect and query flags, limits; and the value
types a Client takes and gives: Layout, Block, HASH_DTYPE.

Every number comes from _abi, which scripts/python_abi.py generates from
the C headers (client/python/tests/test_abi.py checks it is current and
that every constant of the headers has its name here or in errors.py).
"""

from __future__ import annotations

import dataclasses
from ctypes import byref
from typing import Optional, Union

import numpy as np

from . import _abi
from ._lib import CLayout, lib

#: kvs_dtype by name: "fp16", "bf16", "fp32", "fp8_e4m3", "int8", "int4".
DTYPES = {name[len("KVS_DTYPE_"):].lower(): value
          for name, value in vars(_abi).items() if name.startswith("KVS_DTYPE_")}
_DTYPE_ALIASES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16",
                  "float32": "fp32", "float": "fp32", "fp8": "fp8_e4m3"}

# kvs_tier: where a block's bytes are (Block.tier).
TIER_GPU = _abi.KVS_TIER_GPU
TIER_HOST = _abi.KVS_TIER_HOST
TIER_SSD = _abi.KVS_TIER_SSD
#: Shared with other machines; a lookup's blocks from it arrive in host
#: memory, so no Block of a reply is in it (Client.query(remote=True) asks it).
TIER_REMOTE = _abi.KVS_TIER_REMOTE
#: kvs_tier by value: "gpu", "host", "ssd", "remote".
TIER_NAMES = {value: name[len("KVS_TIER_"):].lower()
              for name, value in vars(_abi).items()
              if name.startswith("KVS_TIER_") and name != "KVS_TIER_NONE"}

# kvs_block_status (Block.status).
HIT = _abi.KVS_BLOCK_HIT
NEW = _abi.KVS_BLOCK_NEW
EXISTS = _abi.KVS_BLOCK_EXISTS
BUSY = _abi.KVS_BLOCK_BUSY
FULL = _abi.KVS_BLOCK_FULL
NOPARENT = _abi.KVS_BLOCK_NOPARENT  # kvs_reserve_after: the parent is not cached
STATUS_NAMES = {HIT: "hit", NEW: "new", EXISTS: "exists", BUSY: "busy", FULL: "full",
                NOPARENT: "noparent"}

MAX_HASHES = _abi.KVS_MAX_HASHES
CONNECT_GPU = _abi.KVS_CONNECT_GPU
CONNECT_NO_FASTPATH = _abi.KVS_CONNECT_NO_FASTPATH
QUERY_REMOTE = _abi.KVS_QUERY_REMOTE  # kvs_query: also ask the remote tier

#: One kvs_hash per element, the C struct's memory layout: arrays of it go to
#: the library as they are. (test_abi.py checks it against kvs_hash.)
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


def dtype_name(name: str) -> str:
    """The name kvshare gives a dtype that vLLM, torch or SGLang may name
    otherwise ("float16" and "half": "fp16", "bfloat16": "bf16", "float32"
    and "float": "fp32", "fp8": "fp8_e4m3"); any other name as it is."""
    return _DTYPE_ALIASES.get(name, name)


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
