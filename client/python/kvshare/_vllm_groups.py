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
                      need >= interval // block_size).
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

Pure functions and a mixin of KvshareConnector; the connector's state is its.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Optional

import kvshare
from kvshare import _vllm_names as names

if TYPE_CHECKING:
    import torch


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass
class Group:
    """One KV-cache group of vLLM's kv_cache_config, as the connector shares it."""

    index: int                   # its index in kv_cache_config.kv_cache_groups
    kind: str                    # "full" or "sliding"
    window: Optional[int]        # sliding: the window in tokens
    block_size: int
    layers: tuple[str, ...]      # its layer names, as vLLM lists them
    kv_heads: int = 0
    head_dim: int = 0
    latent: Optional[int] = None  # MLA: the latent width a token
    # set by the connector
    layout: Optional[kvshare.Layout] = None
    clients: Any = None          # its _Clients
    cache: Optional[kvshare.PagedCache] = None  # worker: its paged cache

    @property
    def need(self) -> int:
        """Blocks a hit must find before its end (sliding: the window's, as
        SlidingWindowManager._contiguous_blocks_for_hit; full: all)."""
        return _cdiv(self.window - 1, self.block_size) if self.kind == "sliding" else 0

    def first(self, end: int) -> int:
        """The first block a hit (or a publish) ending at block @end needs."""
        return max(0, end - self.need) if self.kind == "sliding" else 0

    def suffix(self) -> str:
        """What the group adds to the model string: its kind, its window and
        a digest of its layers (two groups of one model never share)."""
        kind = f"swa{self.window}" if self.kind == "sliding" else "full"
        return f"|{kind}.{len(self.layers)}L.{names.digest('layers', *self.layers)[:12]}"

    def best(self, end: int, present: Callable[["Group", int, int], int]) -> int:
        """The longest hit of at most @end blocks this group serves;
        present(group, start, stop) is how many of blocks [start, stop) the
        pool holds, leading ones. A sliding group scans right to left as
        vLLM does: a window that misses at block m moves to end at m."""
        if self.kind == "full":
            return present(self, 0, end) if end > 0 else 0
        while end > 0:
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
    end = max_blocks
    while end > 0:
        before = end
        for g in groups:
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


def publish_ranges(g: Group, prompt_len: int, interval: Optional[int]
                   ) -> list[tuple[int, int]]:
    """The block ranges [first, last) of a prompt the group publishes, for
    vLLM's prefix_cache_retention_interval (None: dense, 0: the last window
    only, > 0: also a window before every interval boundary), as
    SlidingWindowManager.reachable_block_mask keeps them: publish_range's,
    and for a positive interval of @seg blocks a sliding group's need
    blocks before each boundary k * seg (all blocks when need >= seg)."""
    first, last = publish_range(g, prompt_len, interval is None)
    if g.kind == "full" or not interval:
        return [(first, last)]
    seg, full = interval // g.block_size, prompt_len // g.block_size
    if g.need >= seg:
        return [(0, full)]
    keep = set(range(first, last)) | {i for i in range(full) if i % seg >= seg - g.need}
    out: list[tuple[int, int]] = []
    for i in sorted(keep):
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


_UNSUPPORTED = ("KvshareConnector with vLLM's hybrid KV cache manager: %s; the connector "
                "shares nothing for this model (with --disable-hybrid-kv-cache-manager, "
                "for a model that runs without it, every layer's whole KV is shared)")


def groups_of(kv_cache_config: Any) -> list[Group]:
    """The groups to share of a kv_cache_config; ValueError for a group whose
    prefix caching the connector does not follow (state-space: Mamba, GDN,
    linear attention; chunked local attention, EAGLE drafts, groups of
    different block sizes). Groups vLLM itself does not prefix-cache or
    transfer (scratch buffers) are left out."""
    from vllm.v1.kv_cache_interface import (FullAttentionSpec, MLAAttentionSpec,
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
        if type(spec) not in (FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec):
            raise ValueError(_UNSUPPORTED % f"{what}: its kind is not shared")
        if out and spec.block_size != out[0].block_size:
            raise ValueError(_UNSUPPORTED % f"{what} has block_size {spec.block_size}, "
                             f"group {out[0].index} {out[0].block_size}")
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


class GroupsMixin:
    """KvshareConnector's side of HMA (self.groups set: a list of Group)."""

    groups: Optional[list[Group]] = None

    def _setup_groups(self, model: str, dtype: str, dense: bool,
                      interval: Optional[int] = 0) -> None:
        """A layout and clients for each group (model: the model string
        before any suffix; MLA groups end in |mla<width>)."""
        from kvshare.vllm_connector import _Clients

        base = self.clients
        self.dense = dense
        self.interval = interval  # sliding groups' prefix_cache_retention_interval
        self.block_size = self.groups[0].block_size  # every group's (groups_of)
        self.failed_recv: set[str] = set()
        for g in self.groups:
            if g.latent is not None:
                kv_heads, head_dim, rank, size = self._latent_layout(g.latent, dtype)
            else:
                kv_heads, head_dim, rank, size = (g.kv_heads, g.head_dim, self.layout.tp_rank,
                                                  self.layout.tp_size)
            m = names.latent(model + g.suffix(), g.latent)
            if len(m.encode()) > 255:
                raise ValueError(f"model_id {model!r}: with the group's {g.suffix()!r} "
                                 "over 255 bytes")
            g.layout = dataclasses.replace(self.layout, model=m, layers=len(g.layers),
                                           kv_heads=kv_heads, head_dim=head_dim,
                                           block_tokens=g.block_size, tp_rank=rank,
                                           tp_size=size)
            g.clients = _Clients(base.socket, g.layout, base.interval, self.counters,
                                 base.max_clients, base.timeout, base.max_salts)
        # Only asynchronous loads can fail per request (see the module).
        self.load_async = True
        # The connector's own clients are the first group's: its connection
        # at start, its counter reports to the daemon.
        self.clients = self.groups[0].clients

    def _group(self, idx: Optional[int]) -> Optional[Group]:
        return None if idx is None else next(g for g in self.groups if g.index == idx)

    # ---- scheduler ---------------------------------------------------------

    def _groups_hits(self, st: Any, tokens: list[int]) -> Optional[int]:
        """The hit in blocks of @tokens (full blocks) that every group's
        namespace serves, on every tensor-parallel rank; None: a client
        could not be had or a query failed."""
        from kvshare.vllm_connector import _query

        hashes: dict[tuple[int, int], Any] = {}

        class _Miss(Exception):
            pass

        def present(g: Group, start: int, stop: int) -> int:
            have = stop - start
            for rank in range(self.ns_ranks if g.latent is None else 1):
                c = g.clients.get(st.salt, st.adapter, rank)
                if c is None:
                    raise _Miss()
                try:
                    if (g.index, rank) not in hashes:
                        hashes[g.index, rank] = c.hash_tokens(tokens)
                    have = min(have, _query(c, hashes[g.index, rank][start:start + have]))
                except kvshare.Error as e:
                    g.clients.failed(g.clients.key(st.salt, st.adapter, rank), e)
                    raise _Miss()
                if have == 0:
                    break
            return have

        try:
            return hit_blocks(self.groups, len(tokens) // self.block_size, present)
        except _Miss:
            return None

    def _groups_loads(self, req_id: str, st: Any, block_ids: tuple) -> list:
        """The loads of a hit [st.load_start, st.load_end) blocks, one per group,
        into vLLM's blocks of each (a sliding group: its window only)."""
        from kvshare.vllm_connector import _Load

        end, bs = st.load_end, self.block_size
        return [_Load(req_id, st.prompt[: end * bs], st.salt, st.adapter,
                      list(block_ids[g.index][:end]), st.load_start, extras=st.extras,
                      first=g.first(end),
                      group=g.index) for g in self.groups]

    def _groups_saves(self, req_id: str, st: Any, end: int) -> list:
        """The publishes of a prompt's blocks up to @end (what each group keeps)."""
        from kvshare.vllm_connector import _Save

        out = []
        for g in self.groups:
            for first, last in publish_ranges(g, len(st.prompt),
                                              None if self.dense else self.interval):
                last = min(last, end)
                ids = st.group_blocks[g.index][:last] if g.index < len(st.group_blocks) else []
                if last > first and len(ids) == last and 0 not in ids[first:]:  # 0: null
                    out.append(_Save(req_id, st.prompt[: last * self.block_size], st.salt,
                                     st.adapter, ids, extras=st.extras, first=first,
                                     group=g.index))
        return out

    def request_finished_all_groups(self, request: Any, block_ids: tuple[list[int], ...]
                                    ) -> tuple[bool, Optional[dict[str, Any]]]:
        return self.request_finished(request, list(block_ids[0]) if block_ids else [])

    # ---- worker ------------------------------------------------------------

    def _register_groups(self, kv_caches: dict[str, "torch.Tensor"], kind: str) -> None:
        """Each group's layers (their index in its namespace) and paged cache."""
        self.layer_ns: dict[int, tuple[int, int]] = {}  # layer index -> (group, index in it)
        for g in self.groups:
            names_in = [n for n in g.layers if n in kv_caches]
            if len(names_in) != len(g.layers):
                raise ValueError(f"kvshare: group {g.index}: {len(g.layers) - len(names_in)} "
                                 "of its layers have no KV cache tensor")
            for li, name in enumerate(names_in):
                self.layer_ns[self.layers[name][0]] = (g.index, li)
            g.cache = kvshare.PagedCache.for_tensor(self.layers[names_in[0]][1], kind,
                                                    g.layout.kv_heads, g.layout.head_dim)

    def _ns_of(self, group: Optional[int]) -> tuple[Any, Any, list]:
        """(clients, cache, [(index in the namespace, tensor)]) of a namespace:
        the connector's own (group None) or a group's."""
        if group is None:
            return self.clients, self.cache, list(self.layers.values())
        g = self._group(group)
        by_index = {i: t for i, t in self.layers.values()}
        layers = sorted((li, by_index[i]) for i, (gi, li) in self.layer_ns.items() if gi == group)
        return g.clients, g.cache if self.cache is not None else None, layers

    def _layer_in(self, idx: int, group: Optional[int]) -> Optional[tuple[int, Any, Any]]:
        """(index in the namespace, cache, layout) of layer @idx for a job of
        @group; None when the layer is not the group's."""
        if group is None:
            return idx, self.cache, self.layout
        gi, li = self.layer_ns.get(idx, (None, 0))
        if gi != group:
            return None
        g = self._group(group)
        return li, g.cache, g.layout

    def get_transfer_results(self, finished_req_ids: set[str]) -> Any:
        r = super().get_transfer_results(finished_req_ids)
        if self.groups:
            with self.lock:
                failed = self.failed_recv & r.finished_recving
                self.failed_recv -= failed
            r.failed_recving = set(failed)
        return r
