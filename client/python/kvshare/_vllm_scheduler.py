"""The scheduler side of the vLLM connector (kvshare.vllm_connector): what
vLLM's scheduler asks of it, in the scheduler's process. It looks a
prompt's blocks up in the pool (every tensor-parallel rank's namespace,
every KV-cache group's with HMA), tells vLLM how many tokens hit, and plans
in each step's KvshareMetadata the loads and publishes that the worker side
carries out.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Optional

import kvshare
from kvshare import _vllm_events as events
from kvshare import _vllm_keys as keys
from kvshare import _vllm_names as names
from kvshare._vllm_async import LOGGER_NAME
from kvshare._vllm_common import KvshareMetadata, Side, _Load, _query, _Save
from kvshare._vllm_groups import (Group, hit_blocks, keeps_output, live_first,
                                  publish_ranges, state_block)
from vllm.logger import init_logger

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

logger = init_logger(LOGGER_NAME)


@dataclasses.dataclass
class _ReqState:
    """The scheduler's view of one request."""

    prompt: list[int]
    salt: Optional[str]
    adapter: Optional[str]
    skip: bool = False          # not shared: its multimodal inputs could not be keyed
    extras: keys.Extras = None  # each block's extra keys (_vllm_keys)
    block_ids: list[int] = dataclasses.field(default_factory=list)
    group_blocks: list[list[int]] = dataclasses.field(default_factory=list)  # HMA: per group
    saved_blocks: int = 0       # chain blocks [0, saved_blocks) published
    load_start: int = 0         # a load planned for the next step: blocks
    load_end: int = 0           # [load_start, load_end)
    load_async: bool = False    # the last lookup told vLLM load_kv_async=True
    loading: bool = False       # an async load runs (WAITING_FOR_REMOTE_KVS)
    request: Any = None         # "describe": the Request, for vLLM's hashes



class SchedulerSide(Side):
    """The connector in vLLM's scheduler: lookups, and the plan of each
    step's loads and publishes (KvshareMetadata)."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any, tc: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config, tc)
        self.reqs: dict[str, _ReqState] = {}
        self.sending: set[str] = set()       # for the next metadata's `sending`
        self.async_loads: list[_Load] = []   # for the next metadata's `async_loads`
        self.pool_events = events.pool_events(tc, self.layout, self.clients, self.daemon)

    def _state(self, request: "Request") -> _ReqState:
        st = self.reqs.get(request.request_id)
        if st is None:
            # Multimodal placeholders and the ids of prompt embeddings stand
            # for content the token ids do not name: their blocks are keyed
            # by vLLM's extra keys too (_vllm_keys).
            prompt, extras, skip = keys.prompt_tokens(request), None, False
            try:
                extras = keys.block_extras(request, self.block_size, len(prompt))
            except Exception as e:  # never on the serving path: not shared
                logger.warning("kvshare: request %s not shared: %s", request.request_id, e)
                skip = True
            st = _ReqState(prompt, names.salt(getattr(request, "cache_salt", None)),
                           names.adapter(getattr(request, "lora_request", None)), skip=skip,
                           extras=extras)
            self.reqs[request.request_id] = st
            if (self.describe or self.publish_output) and not skip:
                st.request = request  # vLLM's hashes; its output's token ids
        return st

    def on_new_request(self, request: "Request") -> None:
        self._state(request)

    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> tuple[int, bool]:
        try:
            n = self._matched(request, num_computed_tokens)
        except Exception as e:  # never on the serving path
            logger.warning("kvshare: lookup failed: %s", e)
            return 0, False
        # load_async: the request waits in WAITING_FOR_REMOTE_KVS while the
        # others step; update_state_after_alloc plans its load.
        asynch = self.load_async and n > 0
        self._state(request).load_async = asynch
        return n, asynch

    def _matched(self, request: "Request", num_computed_tokens: int) -> int:
        st = self._state(request)
        st.load_start = st.load_end = 0
        bs = self.block_size
        # Full blocks, and at least one token left for the model to compute.
        max_blocks = (len(st.prompt) - 1) // bs
        if st.skip or self.hma_off or max_blocks * bs <= num_computed_tokens:
            return 0
        tokens = st.prompt[: max_blocks * bs]
        hits = self._groups_hits(st, tokens) if self.groups else self._hits(st, tokens)
        if hits is None:
            return 0
        self.counters.lookups += 1
        if hits * bs <= num_computed_tokens:
            return 0
        st.load_start, st.load_end = num_computed_tokens // bs, hits
        n = hits * bs - num_computed_tokens
        self.counters.hit_tokens += n
        return n

    def _hits(self, st: _ReqState, tokens: list[int]) -> Optional[int]:
        """The leading full blocks of @tokens that every tensor-parallel
        rank's namespace holds (None: a rank's client could not be had or
        its lookup failed). Each rank loads its own KV heads from its own
        namespace, so a block the scheduler reports must be there for all
        of them; each rank after the first is asked only up to the hits so
        far. MLA has one namespace for every rank (ns_ranks 1)."""
        bs = self.block_size
        hits = len(tokens) // bs
        for rank in range(self.ns_ranks):
            if hits == 0:
                break
            c = self.clients.get(st.salt, st.adapter, rank)
            if c is None:
                return None
            try:
                # A count, pinning and fetching nothing (the cluster's part
                # bounded by --remote-query-timeout): the worker's load looks
                # up and fetches, and reports what it no longer finds as load
                # errors.
                hits = _query(c, keys.chain(c, tokens[: hits * bs], st.extras))
            except kvshare.Error as e:
                self.clients.failed(self.clients.key(st.salt, st.adapter, rank), e)
                return None
        return hits

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int) -> None:
        st = self._state(request)
        if num_external_tokens == 0:
            st.load_start = st.load_end = 0
        elif st.load_async and st.load_end > st.load_start:
            # vLLM does not schedule it this step (no scheduled_new_reqs
            # entry): its load is planned now, into the blocks just given.
            ids = blocks.get_block_ids()
            st.block_ids = list(ids[0])
            if self.groups:  # a load for each group
                st.group_blocks = [list(x) for x in ids]
                self.async_loads.extend(self._groups_loads(request.request_id, st, ids))
            else:
                self.async_loads.append(_Load(request.request_id,
                                              st.prompt[: st.load_end * self.block_size],
                                              st.salt, st.adapter, st.block_ids[: st.load_end],
                                              st.load_start, st.extras))
            st.load_start = st.load_end = 0
            st.loading = True
            self.counters.async_loads += 1

    def update_connector_output(self, connector_output: "KVConnectorOutput") -> None:
        for req_id in connector_output.finished_recving or ():
            st = self.reqs.get(req_id)
            if st is not None:
                st.loading = False

    def take_events(self) -> Any:
        """The pool's blocks of this model, into vLLM's own KV events."""
        return self.pool_events.take() if self.pool_events is not None else ()

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KvshareMetadata:
        meta = KvshareMetadata()
        try:
            self._build(scheduler_output, meta)
        except Exception as e:
            logger.warning("kvshare: connector metadata failed: %s", e)
        self._maybe_log()
        return meta

    def _build(self, so: "SchedulerOutput", meta: KvshareMetadata) -> None:
        bs = self.block_size
        steps: list[tuple[str, int, int]] = []  # (request, computed before, after the step)
        meta.sending, self.sending = self.sending, set()
        meta.async_loads, self.async_loads = self.async_loads, []
        for ld in meta.async_loads:
            meta.writes.update(ld.block_ids[ld.start:])

        def written(st: _ReqState, computed: int) -> None:
            # A new or resumed request's blocks past its local hit: what
            # this step loads into or computes (vLLM may have taken them
            # from a preempted request whose publish still copies them).
            first = st.load_start if st.load_end > st.load_start else computed // bs
            meta.writes.update(st.block_ids[first:])
            for ids in st.group_blocks[1:]:  # HMA: every group's
                meta.writes.update(ids[first:])

        def plan_load(req_id: str, st: _ReqState) -> None:
            # A load the scheduler counted on (get_num_new_matched_tokens):
            # vLLM treats those tokens as computed, so it must happen or be
            # reported as failed, never be dropped.
            if st.load_end > st.load_start and self.groups:
                meta.loads.extend(self._groups_loads(req_id, st, st.group_blocks))
            elif st.load_end > st.load_start:
                meta.loads.append(_Load(req_id, st.prompt[: st.load_end * bs], st.salt,
                                        st.adapter, st.block_ids[: st.load_end],
                                        st.load_start, st.extras))
                st.load_start = st.load_end = 0

        for nr in so.scheduled_new_reqs:
            st = self.reqs.get(nr.req_id)
            if st is None:
                continue
            st.block_ids = list(nr.block_ids[0])
            if self.groups:
                st.group_blocks = [list(x) for x in nr.block_ids]
            written(st, nr.num_computed_tokens)
            steps.append((nr.req_id, nr.num_computed_tokens,
                          nr.num_computed_tokens + so.num_scheduled_tokens[nr.req_id]))
            plan_load(nr.req_id, st)
        cr = so.scheduled_cached_reqs
        for i, req_id in enumerate(cr.req_ids):
            st = self.reqs.get(req_id)
            if st is None:
                continue
            new = cr.new_block_ids[i]
            if new is not None:
                if req_id in cr.resumed_req_ids:  # after preemption: all its blocks
                    st.block_ids = list(new[0])
                    if self.groups:
                        st.group_blocks = [list(x) for x in new]
                else:
                    st.block_ids.extend(new[0])
                    meta.writes.update(new[0])
                    for g, ids in enumerate(new if self.groups else ()):
                        st.group_blocks[g].extend(ids)
                        meta.writes.update(ids)
            if req_id in cr.resumed_req_ids:
                written(st, cr.num_computed_tokens[i])
                plan_load(req_id, st)
            steps.append((req_id, cr.num_computed_tokens[i],
                          cr.num_computed_tokens[i] + so.num_scheduled_tokens[req_id]))
        for req_id, before, computed in steps:
            st = self.reqs[req_id]
            seq = self._published_tokens(st)
            end = min(computed, len(seq)) // bs
            if not st.skip and not self.hma_off and st.saved_blocks < end <= len(st.block_ids):
                if end * bs > len(st.prompt):
                    self.counters.output_saves += 1
                if self.groups:  # what each group keeps
                    meta.saves.extend(self._groups_saves(req_id, st, seq, end, before))
                else:
                    meta.saves.append(_Save(req_id, list(seq[: end * bs]), st.salt,
                                            st.adapter, st.block_ids[:end], st.extras))
                    if self.describe:  # side records: one namespace only
                        meta.saves[-1].side = events.side_records(st.request, end, bs)
                        meta.saves[-1].lora = events.lora_name(st.request)
                st.saved_blocks = end
        if self.groups:
            meta.saves.extend(self._state_saves(so))

    def _published_tokens(self, st: _ReqState) -> Any:
        """The tokens whose full blocks are published as their KV is
        computed (a sequence, sliced only when a block is): the prompt's;
        with publish_output the output's too, as vLLM's own prefix cache
        keeps them (the token a step runs was sampled before it: vLLM's
        all_token_ids holds it); with HMA, only where vLLM keeps every
        group's part of a hit past the prompt (keeps_output: a sliding or
        state group's retention interval is not 0)."""
        if not self.publish_output or st.request is None \
                or (self.groups and not keeps_output(self.groups, self.interval)):
            return st.prompt
        return getattr(st.request, "all_token_ids", None) or st.prompt

    def request_finished(self, request: "Request",
                         block_ids: list[int]) -> tuple[bool, Optional[dict[str, Any]]]:
        st = self.reqs.pop(request.request_id, None)
        if self.publish_async and st is not None and st.saved_blocks and not st.loading:
            # Its publishes may still copy from its blocks: vLLM holds them
            # until get_finished reports it (the metadata's `sending` tells
            # the worker). While an async load runs vLLM holds them anyway,
            # and reports the request once, through finished_recving.
            self.sending.add(request.request_id)
            return True, None
        return False, None

    def request_finished_all_groups(self, request: Any, block_ids: tuple[list[int], ...]
                                    ) -> tuple[bool, Optional[dict[str, Any]]]:
        return self.request_finished(request, list(block_ids[0]) if block_ids else [])

    # ---- HMA: every KV-cache group (_vllm_groups) --------------------------

    def _groups_hits(self, st: Any, tokens: list[int]) -> Optional[int]:
        """The hit in blocks of @tokens (full blocks) that every group's
        namespace serves, on every tensor-parallel rank; None: a client
        could not be had or a query failed."""
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
        end, bs = st.load_end, self.block_size
        return [_Load(req_id, st.prompt[: end * bs], st.salt, st.adapter,
                      list(block_ids[g.index][:end]), st.load_start, extras=st.extras,
                      first=g.first(end),
                      group=g.index) for g in self.groups]

    def _groups_saves(self, req_id: str, st: Any, seq: Any, end: int, before: int) -> list:
        """The publishes of the blocks of @seq (the published tokens) up to
        @end, what each group keeps, of the blocks vLLM still holds with
        @before tokens computed before the step (a sliding group's blocks
        its window has left are freed: never copied, even when the pool
        lost them since they were published)."""
        out = []
        for g in self.groups:
            live = live_first(g, before)
            for first, last in publish_ranges(g, len(st.prompt),
                                              self.interval, len(seq)):
                first, last = max(first, live), min(last, end)
                ids = st.group_blocks[g.index][:last] if g.index < len(st.group_blocks) else []
                if last > first and len(ids) == last and 0 not in ids[first:]:  # 0: null
                    out.append(_Save(req_id, list(seq[: last * self.block_size]), st.salt,
                                     st.adapter, ids, extras=st.extras, first=first,
                                     group=g.index))
        return out

    def _state_saves(self, so: "SchedulerOutput") -> list:
        """The publishes of the boundary states vLLM hands connectors this
        step (SchedulerOutput.kv_connector_block_state, vLLM >= 0.32: each
        (group, block id, boundary tokens) of a state group in "align"
        mode), each as the one chain block ending at its boundary. vLLM
        vouches for a block's bytes only until the step ends: the worker
        copies these in the step."""
        bstate = getattr(so, "kv_connector_block_state", None)
        offloads = getattr(bstate, "boundary_state_offloads", None) or {}
        by_index = {g.index: g for g in self.groups if g.kind == "state"}
        out = []
        for req_id, entries in offloads.items():
            st = self.reqs.get(req_id)
            if st is None or st.skip:
                continue
            seq = self._published_tokens(st)
            for gid, block_id, boundary in entries:
                g = by_index.get(gid)
                k = state_block(g, len(st.prompt), block_id, boundary,
                                len(seq)) if g else None
                if k is not None:
                    out.append(_Save(req_id, list(seq[: (k + 1) * self.block_size]), st.salt,
                                     st.adapter, [0] * k + [block_id], extras=st.extras,
                                     first=k, group=gid))
        return out

    def shutdown(self) -> None:
        self.log_totals()
        self.close_clients()
        if self.pool_events is not None:
            self.pool_events.close()
