"""The vLLM connector's side records (`"describe": true` in its extra
config): each block it publishes is described to the daemon with vLLM's own
block hash, parent hash, token ids, block size, LoRA name and extra keys,
computed by vLLM's own functions, so that the daemon's vLLM KV events
(kvshared --kv-events, docs/routers.md) name the block exactly as the
engine's own events would.

Scheduler side: side_records() of a request's full prompt blocks, carried
to the worker in the publish's metadata. Worker side: describe() between the
reserve and the commit of a window.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

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
