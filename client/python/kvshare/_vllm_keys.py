"""What the vLLM connector keys a block by beyond its token ids: the extra
keys vLLM's own prefix cache gives it (vllm/v1/core/kv_cache_utils.py,
generate_block_hash_extra_keys), and the chain of block hashes they make.

A block's extra keys are
  - ("mm", identifier, offset - block start) for each multimodal item whose
    placeholder range [offset, offset + length) overlaps the block (the
    identifier is the item's content hash, or the request's
    multi_modal_uuids entry, with its LoRA's prefix when it has one), and
  - ("prompt_embeds", sha256 of the block's rows of the prompt embeddings)
    when the request has prompt embeddings (their positions' token ids are
    zeros: the embeddings alone name the content).
vLLM's LoRA and cache_salt keys are left out: kvshare's namespace (the
layout's adapter and salt) already tells those apart.

The chain: blocks before the first one with extra keys hash as kvshare
always hashes tokens (kvs_hash_tokens), so a text-only request keys its
blocks exactly as before and a multimodal prompt shares its text prefix
with text-only ones, as in vLLM (the KV of a token depends on the tokens
before it only). From the first block with extra keys on, every block is
kvs_hash_key(previous hash, its tokens and its extra keys): a domain of its
own, chained, so a block after an image names the image too.
Pure functions of the request and the client: no vLLM import.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Optional, Sequence

import numpy as np

from ._lib import Hash, lib
from ._types import HASH_DTYPE

# The first bytes of each keyed block's input to kvs_hash_key: a new
# encoding of the extra keys takes a new tag (new hashes, old blocks unread).
_TAG = b"kvshare-vllm-extra-v1"

Extras = Optional[tuple[bytes, ...]]  # per block: its extra keys' bytes (b"": none)


def _mm_keys(features: Sequence[Any], start: int, end: int) -> list[tuple[str, int]]:
    """(identifier, offset in the block) of each multimodal item that
    overlaps tokens [start, end), in order (vLLM: _gen_mm_extra_hash_keys)."""
    out = []
    for f in features:
        pos = f.mm_position
        if pos.offset < end and start < pos.offset + pos.length:
            ident = getattr(f, "identifier", None)
            if ident is None:
                raise ValueError("a multimodal item with no identifier")
            out.append((str(ident), int(pos.offset) - start))
    return out


def _embeds_digest(embeds: Any, start: int, end: int) -> bytes:
    """SHA-256 of rows [start, end) of the prompt embeddings, over their
    bytes as vLLM hashes them (vllm.v1.utils.tensor_data)."""
    rows = embeds[start:end]
    data = rows.flatten().cpu().contiguous().view(-1)
    import torch

    return hashlib.sha256(data.view(torch.uint8).numpy().data).digest()


def _encode(mm: list[tuple[str, int]], embeds: Optional[bytes]) -> bytes:
    """One block's extra keys as bytes, each field length-prefixed."""
    parts = []
    for ident, off in mm:
        b = ident.encode("utf-8", "surrogatepass")
        parts.append(b"m" + struct.pack("<Iq", len(b), off) + b)
    if embeds is not None:
        parts.append(b"e" + struct.pack("<I", len(embeds)) + embeds)
    return b"".join(parts)


def block_extras(request: Any, block_size: int, ntokens: int) -> Extras:
    """Each full block's extra keys among the first @ntokens tokens of
    @request (a vLLM Request), or None when no block has any (the request
    keys as text)."""
    features = list(getattr(request, "mm_features", None) or ())
    features.sort(key=lambda f: f.mm_position.offset)
    embeds = getattr(request, "prompt_embeds", None)
    if not features and embeds is None:
        return None
    out = []
    for b in range(ntokens // block_size):
        s, e = b * block_size, (b + 1) * block_size
        digest = _embeds_digest(embeds, s, e) if embeds is not None else None
        out.append(_encode(_mm_keys(features, s, e), digest))
    return tuple(out) if any(out) else None


def prompt_tokens(request: Any) -> list[int]:
    """The token ids a request's prompt is hashed with: its prompt_token_ids,
    or with prompt embeddings vLLM's own ids for them (zeros where an
    embedding stands, as its prefix cache hashes them)."""
    if getattr(request, "prompt_embeds", None) is not None:
        return list(request.all_token_ids[: request.num_prompt_tokens])
    return list(request.prompt_token_ids or [])


def chain(client: Any, tokens: Sequence[int], extras: Extras) -> np.ndarray:
    """The block hashes of the full blocks of @tokens in @client's namespace
    (HASH_DTYPE): client.hash_tokens where no block has extra keys."""
    hashes = client.hash_tokens(tokens)
    if extras is None:
        return hashes
    first = next((i for i, x in enumerate(extras[: len(hashes)]) if x), None)
    if first is None:
        return hashes
    bs = client.layout.block_tokens
    toks = np.ascontiguousarray(tokens[: len(hashes) * bs], dtype="<u4")
    if first:
        prev = Hash(lo=int(hashes[first - 1]["lo"]), hi=int(hashes[first - 1]["hi"]))
    else:
        prev = lib.kvs_hash_layout_seed(client.layout._c())
    out = np.array(hashes, dtype=HASH_DTYPE)
    for i in range(first, len(hashes)):
        x = extras[i] if i < len(extras) else b""
        key = _TAG + toks[i * bs: (i + 1) * bs].tobytes() + struct.pack("<I", len(x)) + x
        prev = lib.kvs_hash_key(prev, key, len(key))
        out[i] = (prev.lo, prev.hi)
    return out
