"""Side records of published blocks (kvs_describe): the engine's own block
hash, parent hash, token ids, block size, LoRA name and extra keys, which
the daemon's vLLM KV events (kvshared --kv-events, docs/routers.md) name each
block by."""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from . import _abi, errors
from ._lib import CBlockDesc, lib

HASH_MAX = _abi.KVS_DESC_HASH_MAX
TOKENS_MAX = _abi.KVS_DESC_TOKENS_MAX
LORA_MAX = _abi.KVS_DESC_LORA_MAX
EXTRA_MAX = _abi.KVS_DESC_EXTRA_MAX

EngineHash = Union[bytes, int]


@dataclass
class BlockDesc:
    """One block's side record. `hash` is kvshare's (an element of
    Client.hash_tokens()); `engine_hash` and `parent_hash` the engine's
    (bytes, as vLLM's sha256 hashes, or an int below 2**64); `extra_keys`
    the block's entry of vLLM's BlockStored.extra_keys (a tuple, or None)."""

    hash: Any
    engine_hash: EngineHash
    parent_hash: Optional[EngineHash]
    token_ids: Sequence[int]
    block_size: int
    lora_name: Optional[str] = None
    extra_keys: Optional[Sequence[Any]] = field(default=None)


def _pack(obj: Any, out: bytearray) -> None:
    """msgpack of the values extra keys hold (as msgspec encodes them)."""
    if obj is None:
        out += b"\xc0"
    elif obj is True or obj is False:
        out += b"\xc3" if obj else b"\xc2"
    elif isinstance(obj, int):
        if 0 <= obj < 2**64:
            out += b"\xcf" + obj.to_bytes(8, "big")
        elif -(2**63) <= obj < 0:
            out += b"\xd3" + obj.to_bytes(8, "big", signed=True)
        else:
            raise ValueError(f"extra key {obj} does not fit 64 bits")
    elif isinstance(obj, float):
        out += b"\xcb" + struct.pack(">d", obj)
    elif isinstance(obj, str):
        b = obj.encode()
        out += b"\xdb" + len(b).to_bytes(4, "big") + b
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        b = bytes(obj)
        out += b"\xc6" + len(b).to_bytes(4, "big") + b
    elif isinstance(obj, (list, tuple)):
        out += b"\xdd" + len(obj).to_bytes(4, "big")
        for x in obj:
            _pack(x, out)
    else:
        raise TypeError(f"extra key of type {type(obj).__name__}: not str, int, "
                        "float, bool, bytes, None or a tuple of them")


def _hash_field(h: Optional[EngineHash], what: str) -> tuple[int, bytes]:
    if h is None:
        return _abi.KVS_DESC_HASH_NONE, b""
    if isinstance(h, int):
        if not 0 <= h < 2**64:
            raise ValueError(f"{what} {h} is not an unsigned 64-bit integer")
        return _abi.KVS_DESC_HASH_INT, h.to_bytes(8, "big")
    b = bytes(h)
    if not 0 < len(b) <= HASH_MAX:
        raise ValueError(f"{what} of {len(b)} bytes (1..{HASH_MAX})")
    return _abi.KVS_DESC_HASH_BYTES, b


def describe(handle: int, records: Sequence[BlockDesc]) -> int:
    """kvs_describe() of @records; returns how many the daemon kept."""
    if not hasattr(lib, "kvs_describe"):
        raise errors.Error(-95, "kvs_describe: libkvshare is older than side records")
    descs = (CBlockDesc * len(records))()
    keep: list[Any] = []  # the buffers the C structs point into
    for d, r in zip(descs, records):
        hk, hb = _hash_field(r.engine_hash, "engine_hash")
        pk, pb = _hash_field(r.parent_hash, "parent_hash")
        toks = (ctypes.c_uint32 * len(r.token_ids))(*[int(t) for t in r.token_ids])
        lora = (r.lora_name or "").encode()
        extra = bytearray()
        if r.extra_keys is not None:
            _pack(tuple(r.extra_keys), extra)
        if len(toks) > TOKENS_MAX or len(lora) > LORA_MAX or len(extra) > EXTRA_MAX:
            raise ValueError(f"side record over its bounds: {len(toks)} tokens "
                             f"(max {TOKENS_MAX}), LoRA name {len(lora)} bytes (max "
                             f"{LORA_MAX}), extra keys {len(extra)} bytes (max {EXTRA_MAX})")
        eb = ctypes.create_string_buffer(bytes(extra), len(extra) or 1)
        hbuf = ctypes.create_string_buffer(hb, len(hb))
        pbuf = ctypes.create_string_buffer(pb, len(pb) or 1)
        keep += [toks, eb, hbuf, pbuf, lora]
        d.hash_lo, d.hash_hi = int(r.hash["lo"]), int(r.hash["hi"])
        d.hash_kind, d.hash_len, d.parent_kind, d.parent_len = hk, len(hb), pk, len(pb)
        d.engine_hash = ctypes.cast(hbuf, ctypes.c_void_p)
        d.parent_hash = ctypes.cast(pbuf, ctypes.c_void_p) if pb else None
        d.block_size, d.ntokens = int(r.block_size), len(toks)
        d.tokens = ctypes.cast(toks, ctypes.c_void_p)
        d.lora_len, d.lora = len(lora), lora
        d.extra_len = len(extra)
        d.extra = ctypes.cast(eb, ctypes.c_void_p) if extra else None
    kept = ctypes.c_uint64()
    errors.check(lib.kvs_describe(handle, descs, len(records), ctypes.byref(kept)),
                 "kvs_describe")
    return kept.value
