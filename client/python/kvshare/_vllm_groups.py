"""The vLLM connector with vLLM's hybrid memory allocator (HMA): a model whose
layers are of several kinds (full attention, sliding-window attention) has
one KV-cache group per kind, each with its own block table, and the
connector keeps one kvshare namespace per group.

What each group shares is what vLLM's own prefix cache keeps of it:
  full attention      every full block of the prompt, from block 0;
  sliding window      the blocks a hit at the prompt's last hit boundary
                      ((prompt - 1) // block_size blocks) attends to: the
                      cdiv(window - 1, block_size) blocks before it (vLLM's
                      SlidingWindowManager retains only that window by
                      default, prefix_cache_retention_interval 0; with None,
                      every block: then the connector shares every block too;
                      with a positive interval, that window and also the
                      need blocks before every interval boundary, each
                      block i with i % (interval // block_size) >=
                      interval // block_size - need; every block when
                      need >= interval // block_size);
  state space         (Mamba, GDN: vLLM's MambaSpec in its "align" mode) the
                      state at a block boundary, where vLLM's own prefix
                      cache keeps one: the exact blocks the scheduler hands
                      connectors (boundary_state_offloads), each stored as
                      the one chain block that ends at its boundary. A hit
                      needs the state at its end only: a one-block window,
                      scanned right to left as MambaManager does.
With publish_output a request's answer is published as vLLM keeps it while
the request decodes: a full group's every block, a sliding group's dense or
periodic windows over the whole request (its last window stays the
prompt's), a state group's handed-over states at the answer's boundaries;
with retention interval 0 and a sliding or state group vLLM keeps nothing a
hit past the prompt could use, and nothing of the answer is published
(keeps_output). A sliding group's blocks its window has left are freed by
vLLM and never copied (live_first).
The hit reported to the scheduler is vLLM's own rule (HybridKVCacheCoordinator
over SingleTypeKVCacheManager.find_longest_cache_hit): the longest block-
aligned length L that every group serves, a full group when the pool holds
its blocks [0, L), a sliding group when it holds the window [L - need, L) (or
[0, L) when L < need), found by the same fixed point (each group cuts L to
the longest it serves up to L, until no group cuts it).

Failures: vLLM cannot map a failed block id back to a request when there are
several groups (block ids are per group), so the connector loads
asynchronously (WAITING_FOR_REMOTE_KVS) and reports a request whose load
lost any block in failed_recving: vLLM recomputes all of it.

Pure functions: the connector's sides apply them (_vllm_scheduler: hits,
loads and publishes per group; _vllm_worker: each group's layers and cache).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import kvshare
from kvshare import _vllm_names as names


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass
class Group:
    """One KV-cache group of vLLM's kv_cache_config, as the connector shares it."""

    index: int                   # its index in kv_cache_config.kv_cache_groups
    kind: str                    # "full", "sliding" or "state"
    window: Optional[int]        # sliding: the window in tokens
    block_size: int
    layers: tuple[str, ...]      # its layer names, as vLLM lists them
    kv_heads: int = 0
    head_dim: int = 0
    latent: Optional[int] = None  # MLA: the latent width a token
    state_bytes: int = 0         # state: the bytes of a layer's state (its page's content)
    state_what: tuple = ()       # state: its shapes, dtypes and kind (the identity)
    # set by the connector
    layout: Optional[kvshare.Layout] = None
    clients: Any = None          # its _Clients
    cache: Optional[kvshare.PagedCache] = None  # worker: its paged cache

    @property
    def need(self) -> int:
        """Blocks a hit must find before its end (sliding: the window's, as
        SlidingWindowManager._contiguous_blocks_for_hit; state: the one
        ending at it; full: all)."""
        if self.kind == "state":
            return 1
        return _cdiv(self.window - 1, self.block_size) if self.kind == "sliding" else 0

    def first(self, end: int) -> int:
        """The first block a hit (or a publish) ending at block @end needs."""
        return 0 if self.kind == "full" else max(0, end - self.need)

    def suffix(self) -> str:
        """What the group adds to the model string: its kind (with a window
        or a state's bytes) and a digest of its layers (a state group's with
        its shapes and dtypes): two groups of one model never share."""
        if self.kind == "state":
            kind = f"state{self.state_bytes}"
        else:
            kind = f"swa{self.window}" if self.kind == "sliding" else "full"
        return (f"|{kind}.{len(self.layers)}L."
                f"{names.digest('layers', *self.layers, *self.state_what)[:12]}")

    def state_head_dim(self) -> int:
        """A state group's head_dim: its layout stores each layer's state as
        one fp16 "head" a token of the block (kv_heads 1, PagedCache kind
        "mla"), so a block holds the state's bytes rounded up to 4 *
        block_size (copied bit for bit: no dtype conversion between equal
        dtypes)."""
        return _cdiv(self.state_bytes, 4 * self.block_size)

    def best(self, end: int, present: Callable[["Group", int, int], int]) -> int:
        """The longest hit of at most @end blocks this group serves;
        present(group, start, stop) is how many of blocks [start, stop) the
        pool holds, leading ones. A sliding group scans right to left as
        vLLM does: a window that misses at block m moves to end at m."""
        if self.kind == "full":
            return present(self, 0, end) if end > 0 else 0
        while end > 0:  # sliding and state: right to left
            start = self.first(end)
            have = present(self, start, end)
            if have == end - start:
                return end
            end = start + have
        return 0


def hit_blocks(groups: list[Group], max_blocks: int,
               present: Callable[[Group, int, int], int]) -> int:
    """The hit every group serves, in blocks (HybridKVCacheCoordinator's fixed
    point: each group cuts the length to what it serves, until none cuts)."""
    # Full groups first: they cut the length with one query, where a
    # window or a state scans block by block (the fixed point is the same
    # in any order: each group's best is the longest it serves up to L).
    order = sorted(groups, key=lambda g: g.kind != "full")
    end = max_blocks
    while end > 0:
        before = end
        for g in order:
            end = g.best(end, present)
            if end == 0:
                return 0
        if end == before:
            return end
    return 0


def publish_range(g: Group, prompt_len: int, dense: bool) -> tuple[int, int]:
    """The blocks [first, last) of a prompt the group publishes: a full
    group its full blocks; a sliding group the window before the last hit
    boundary, or (dense retention) every full block."""
    bs = g.block_size
    if g.kind == "full" or dense:
        return 0, prompt_len // bs
    end = max(0, prompt_len - 1) // bs
    return g.first(end), end


def publish_ranges(g: Group, prompt_len: int, interval: Optional[int],
                   seq_len: Optional[int] = None) -> list[tuple[int, int]]:
    """The block ranges [first, last) of a request the group publishes, for
    vLLM's prefix_cache_retention_interval (None: dense, 0: the last window
    only, > 0: also a window before every interval boundary), as
    SlidingWindowManager.reachable_block_mask keeps them: publish_range's,
    and for a positive interval of @seg blocks a sliding group's need
    blocks before each boundary k * seg (all blocks when need >= seg); a
    state group none (it publishes the states vLLM hands over: state_block).
    @seq_len: the tokens whose blocks are published (the prompt's and, with
    publish_output, its output's so far; default the prompt's). vLLM keeps
    a full group's every block of them and a sliding group's dense or
    periodic windows over them, while the last window stays the prompt's
    (vLLM's replay boundary is the prompt's end)."""
    if g.kind == "state":
        return []
    blocks = (prompt_len if seq_len is None else seq_len) // g.block_size
    if g.kind == "full" or interval is None:
        return [(0, blocks)]
    first, last = publish_range(g, prompt_len, False)
    if not interval:
        return [(first, last)]
    seg = interval // g.block_size
    if g.need >= seg:
        return [(0, blocks)]
    keep = set(range(first, last)) | {i for i in range(blocks) if i % seg >= seg - g.need}
    out: list[tuple[int, int]] = []
    for i in sorted(keep):
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def keeps_output(groups: list[Group], interval: Optional[int]) -> bool:
    """Whether vLLM's own prefix cache keeps what a hit past a prompt's end
    needs in every group: a full group keeps its every block, a sliding or
    state group only with dense (None) or periodic (> 0) retention; with 0
    it keeps the window and state at the prompt's replay boundary alone, so
    no hit reaches into the output and its full blocks would serve none."""
    return interval != 0 or all(g.kind == "full" for g in groups)


def live_first(g: Group, computed: int) -> int:
    """The first of a group's blocks vLLM still holds for a request with
    @computed tokens computed before the step (a sliding group frees the
    blocks its window has left: SlidingWindowManager.get_num_skipped_tokens;
    they may hold another request's KV by now)."""
    if g.kind != "sliding":
        return 0
    return max(0, computed - g.window + 1) // g.block_size


def state_block(g: Group, prompt_len: int, block_id: int, boundary: int,
                seq_len: int = 0) -> Optional[int]:
    """The chain block a state group publishes for a boundary state vLLM
    hands over (its block @block_id holds the state after @boundary
    tokens), or None: a boundary inside a block, one no hit can end at (a
    hit of the prompt leaves its last token to compute; with
    publish_output, a next turn's hit may end at any block of the
    @seq_len tokens published when they are more than the prompt's),
    vLLM's null block."""
    bs = g.block_size
    last = ((prompt_len - 1) // bs if seq_len <= prompt_len else seq_len // bs) * bs
    if block_id == 0 or boundary <= 0 or boundary % bs or boundary > last:
        return None
    return boundary // bs - 1


_UNSUPPORTED = ("KvshareConnector with vLLM's hybrid KV cache manager: %s; the connector "
                "shares nothing for this model (with --disable-hybrid-kv-cache-manager, "
                "for a model that runs without it, every layer's whole KV is shared)")


def groups_of(kv_cache_config: Any) -> list[Group]:
    """The groups to share of a kv_cache_config; ValueError for a group whose
    prefix caching the connector does not follow (state-space groups other
    than in vLLM's "align" mode or with speculative decoding's extra state
    blocks; chunked local attention, EAGLE drafts, groups of different block
    sizes). Groups vLLM itself does not prefix-cache or transfer (scratch
    buffers) are left out."""
    from vllm.v1.kv_cache_interface import (FullAttentionSpec, MambaSpec, MLAAttentionSpec,
                                            SlidingWindowSpec)

    out = []
    for i, g in enumerate(kv_cache_config.kv_cache_groups):
        spec = g.kv_cache_spec
        if not getattr(spec, "prefix_cacheable", True) or not getattr(g, "enable_kv_transfer",
                                                                       True):
            continue
        what = f"group {i} ({type(spec).__name__}, {len(g.layer_names)} layers)"
        if getattr(g, "is_eagle_group", False):
            raise ValueError(_UNSUPPORTED % f"{what} is an EAGLE draft group")
        if type(spec) not in (FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec,
                              MambaSpec):
            raise ValueError(_UNSUPPORTED % f"{what}: its kind is not shared")
        if out and spec.block_size != out[0].block_size:
            raise ValueError(_UNSUPPORTED % f"{what} has block_size {spec.block_size}, "
                             f"group {out[0].index} {out[0].block_size}")
        if isinstance(spec, MambaSpec):
            out.append(_state_group(i, g, spec, what))
            continue
        if spec.head_size_v != spec.head_size and not isinstance(spec, MLAAttentionSpec):
            raise ValueError(_UNSUPPORTED % f"{what}: V heads of another size than K")
        sliding = isinstance(spec, SlidingWindowSpec)
        if sliding and getattr(spec, "extra_retained_tokens", 0):
            raise ValueError(_UNSUPPORTED % f"{what} retains tokens past its window")
        out.append(Group(i, "sliding" if sliding else "full",
                         spec.sliding_window if sliding else None, spec.block_size,
                         tuple(g.layer_names), spec.num_kv_heads, spec.head_size,
                         spec.head_size if isinstance(spec, MLAAttentionSpec) else None))
    if not out:
        raise ValueError(_UNSUPPORTED % "no group to share")
    return out


def _state_group(i: int, g: Any, spec: Any, what: str) -> Group:
    """A state-space group (vLLM's MambaSpec): shared in vLLM's "align" mode
    only (the one in which vLLM keeps states at block boundaries: prefix
    caching on), without speculative decoding's extra state blocks."""
    mode = getattr(spec, "mamba_cache_mode", "none")
    if mode != "align":
        raise ValueError(_UNSUPPORTED % f"{what}: its states are cached in mode {mode!r}, "
                         "not 'align' (vLLM keeps no state at block boundaries: prefix "
                         "caching is off)")
    if getattr(spec, "num_speculative_blocks", 0):
        raise ValueError(_UNSUPPORTED % f"{what} has {spec.num_speculative_blocks} "
                         "speculative state blocks")
    gr = Group(i, "state", None, spec.block_size, tuple(g.layer_names),
               state_bytes=int(spec.state_content_size_bytes),
               state_what=(*(tuple(x) for x in spec.shapes), *(str(d) for d in spec.dtypes),
                           str(getattr(spec, "mamba_type", "")),
                           f"replicated={getattr(spec, 'tp_replicated', False)}"))
    if 4 * spec.block_size * gr.state_head_dim() > spec.page_size_bytes:
        raise ValueError(_UNSUPPORTED % f"{what}: a state of {gr.state_bytes} bytes in pages "
                         f"of {spec.page_size_bytes}, less than a block of {spec.block_size} "
                         "fp16 rows holds")
    return gr


def hma_groups(vllm_config: Any, kv_cache_config: Any
               ) -> tuple[Optional[list[Group]], Optional[str]]:
    """(the groups, None) when the connector runs with HMA on and the model
    has more than one group or a sliding-window one; (None, None) otherwise
    (one full-attention group: the connector's namespace as without HMA);
    (None, why) when a group is one the connector does not follow: it then
    shares nothing (every request misses, nothing is published) and the
    engine serves as without it. The groups' block size is the one to hash
    and hit by: vLLM may raise it past --block-size to give every group one
    page size, and tells the scheduler (cache_config) but not the workers."""
    sc = getattr(vllm_config, "scheduler_config", None)
    if kv_cache_config is None or sc is None \
            or getattr(sc, "disable_hybrid_kv_cache_manager", True) is not False:
        return None, None
    try:
        groups = groups_of(kv_cache_config)
    except ValueError as e:
        return None, str(e)
    if len(kv_cache_config.kv_cache_groups) == 1 and groups[0].kind == "full":
        return None, None
    return groups, None
