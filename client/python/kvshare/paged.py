"""An engine's paged KV cache as the library sees it (kvs_paged_cache):
PagedCache, described from one layer's tensor (numpy array or torch
tensor, CPU or CUDA), and what a tensor is (shape, strides, dtype, device,
address).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ._lib import CPagedCache
from ._types import _DTYPE_ALIASES, dtype_code


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
      "mla"  [pages, page_tokens, 2 * head_dim]  an MLA latent cache (vLLM's
             MLA backends): one row per token, no heads (kv_heads 1); the
             row's first half is stored as K, its second half as V
    Build it from one layer's tensor with for_tensor(); every layer's tensor
    must then have that shape, strides and dtype.
    """

    KINDS = ("nhd", "hnd", "cpu", "bhnc", "nhd_kv_inner", "mla")

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
        elif kind == "mla":
            if kv_heads != 1:
                raise ValueError(f"mla layout: kv_heads {kv_heads}, a latent cache has 1")
            if len(self.shape) != 3:
                raise ValueError(f"mla layout: shape {self.shape}, expected "
                                 "[pages, page_tokens, latent width]")
            n, t, _ = self.shape
            want = (n, t, 2 * head_dim)
            kv, page, tok, head = head_dim, s[0], s[1], s[1]
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
