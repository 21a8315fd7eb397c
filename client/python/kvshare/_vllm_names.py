"""How the vLLM connector names a request's namespace (vllm_connector.py):
the model's identity, the digest of a cache_salt, a LoRA adapter's name.
Pure functions, no vLLM: each process that serves one model, with one
config, names it alike.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Optional


def digest(*parts: Any) -> str:
    """128 bits of SHA-256 over parts, as hex; strings that need not be
    valid UTF-8 (API users send lone surrogates) hash as they are."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode("utf-8", "surrogatepass") if isinstance(p, str) else repr(p).encode()
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()[:32]


def named(name: str, digest: str) -> str:
    """A namespace string: a readable prefix of `name` (what kvsctl shows),
    then the digest, which alone tells namespaces apart. It always fits
    KVS_NAME_MAX and has no NUL (the library's strings end at one)."""
    readable = re.sub(r"[^A-Za-z0-9._/:@+-]", "_", name)[:160]
    return f"{readable}#{digest}"


def salt(salt: Optional[str]) -> Optional[str]:
    """A request's cache_salt as the layout's salt: its digest, so that any
    string an API user sends (too long, NUL inside) is a valid salt of its
    own, and two salts never map to one."""
    return None if salt is None else digest("salt", salt)


def adapter(lora: Any) -> Optional[str]:
    """The adapter of a LoRA request: its name and its path, as vLLM's own
    prefix cache keys it, so that a name re-pointed at other weights does
    not reuse their KV."""
    if lora is None:
        return None
    name = str(getattr(lora, "lora_name", None) or lora)
    return named(name, digest("lora", name, str(getattr(lora, "lora_path", "") or "")))


def stable(x: Any) -> Any:
    """A config value as something that prints the same in every process (a
    callable hf_overrides by its name, not its address)."""
    if callable(x) and not isinstance(x, type):
        return f"{getattr(x, '__module__', '')}.{getattr(x, '__qualname__', repr(x))}"
    if isinstance(x, dict):
        return {str(k): stable(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (list, tuple)):
        return [stable(v) for v in x]
    return x if isinstance(x, (str, int, float, bool, type(None))) else str(x)


# What makes a model's KV for the same tokens: the checkpoint, and what vLLM
# does to its weights and its forward pass. The KV dtype is not here: the
# layout has it.
IDENTITY = ("model", "model_weights", "revision", "code_revision", "hf_config_path",
            "dtype", "quantization", "quantization_config", "hf_overrides", "model_impl",
            "model_class_overrides", "disable_sliding_window")


def model_id(mc: Any, model_id: Optional[str]) -> str:
    """The namespace's model string: model_id as the user gave it (who then
    answers for changing it with every setting of IDENTITY, docs/vllm.md),
    else the served model and a digest of IDENTITY."""
    if model_id is not None:
        model_id = str(model_id)
        if not model_id or "\0" in model_id or len(model_id.encode()) > 255:
            raise ValueError(f"model_id {model_id!r}: 1 to 255 bytes, no NUL")
        return model_id
    factors = {f: stable(getattr(mc, f, None)) for f in IDENTITY}
    return named(str(mc.model), digest("model", json.dumps(factors, sort_keys=True)))


_LATENT = re.compile(r"\|mla\d+$")


def latent(model_id: str, width: Optional[int]) -> str:
    """The namespace's model string of a model whose KV is an MLA latent
    cache of @width elements a token (None: per-head K and V): model_id, then
    "|mla" and the width. Its layout's numbers (1 KV head of width / 2) could
    be a per-head model's, so the suffix says which it is, and a per-head
    model's model_id may not end like one (a default one never does: it
    ends in a digest)."""
    if width is None:
        if _LATENT.search(model_id):
            raise ValueError(f"model_id {model_id!r}: a model without MLA may not end in "
                             "'|mla<width>' (an MLA model's namespace does)")
        return model_id
    out = f"{model_id}|mla{width}"
    if len(out.encode()) > 255:
        raise ValueError(f"model_id {model_id!r}: with MLA's '|mla{width}' over 255 bytes")
    return out
