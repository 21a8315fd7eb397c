"""KvshareConnector with vLLM's hybrid memory allocator (HMA): one namespace
per KV-cache group, a sliding-window group sharing only the window a hit at
the prompt's end attends to, a state-space group the boundary states vLLM
hands over, and the hit every group serves, by vLLM's own rule (checked
against vLLM's SingleTypeKVCacheManager code). Fake vLLM objects for the
engine, a real kvshared.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
import types

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
import torch  # noqa: E402
from vllm.distributed import parallel_state  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # noqa: E402
    KVConnectorRole, supports_hma)
from vllm.v1.core.kv_cache_coordinator import replay_boundaries  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import (  # noqa: E402
    FullAttentionManager, MambaManager, SlidingWindowManager)
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec, MambaSpec, SlidingWindowSpec)

import kvshare  # noqa: E402
from kvshare import _vllm_groups  # noqa: E402
from kvshare._vllm_groups import Group, hit_blocks  # noqa: E402
from kvshare.vllm_connector import KvshareConnector  # noqa: E402
from test_vllm_connector import (  # noqa: E402
    BS, HEAD_DIM, KV_HEADS, prompt, request, vllm_config)

WINDOW = 2 * BS + 1          # a hit needs the 2 blocks before its end
SWA, FULL = "model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"
SSM = "model.layers.2.linear_attn"
PAGES = 256
KVSCTL = os.path.join(os.path.dirname(os.environ["KVSHARE_LIB"]), "kvsctl")


def spec(window: int | None = None, block_size: int = BS):
    kw = dict(block_size=block_size, num_kv_heads=KV_HEADS, head_size=HEAD_DIM,
              dtype=torch.float32)
    return SlidingWindowSpec(sliding_window=window, **kw) if window else FullAttentionSpec(**kw)


def state_spec(mode: str = "align", **kw: object) -> MambaSpec:
    """A state-space group's spec (a GDN layer's shape): a bf16 conv state
    and an fp32 recurrent state, 656 bytes in pages of 1024."""
    return MambaSpec(block_size=BS, shapes=((3, 24), (2, 8, 8)),
                     dtypes=(torch.bfloat16, torch.float32), page_size_padded=1024,
                     mamba_cache_mode=mode, **kw)


def kv_cache_config(*groups: tuple[list[str], object]) -> types.SimpleNamespace:
    """vLLM's KVCacheConfig as the connector reads it: its groups."""
    return types.SimpleNamespace(kv_cache_groups=[
        types.SimpleNamespace(layer_names=names, kv_cache_spec=s, is_eagle_group=False,
                              enable_kv_transfer=True) for names, s in groups])


def hma_config(socket: str, retention: int | None = 0, **kw: object) -> types.SimpleNamespace:
    cfg = vllm_config(socket, **kw)
    cfg.scheduler_config = types.SimpleNamespace(disable_hybrid_kv_cache_manager=False)
    cfg.cache_config.prefix_cache_retention_interval = retention
    return cfg


# ---- the rule, against vLLM's own code ----------------------------------------


class _Pool:
    """vLLM's BlockPool as find_longest_cache_hit reads it: block hash i is i,
    cached when in @have."""

    null_block = None
    hash_block_size = BS

    def __init__(self, have: set[int]) -> None:
        self.have = have

    def get_cached_block(self, h: int, group_ids: list[int]):
        return [("block", h)] * len(group_ids) if h in self.have else None


def vllm_hit(groups: list[tuple[object, set[int]]], max_blocks: int) -> int:
    """vLLM's hybrid hit (HybridKVCacheCoordinator.find_longest_cache_hit:
    full groups first, then each other group up to the hit so far, until no
    group cuts it) in blocks, from the managers' own code."""
    length, before = max_blocks * BS, None
    while length != before:
        before = length
        for s, have in sorted(groups, key=lambda g: not isinstance(g[0], FullAttentionSpec)):
            cls = (SlidingWindowManager if isinstance(s, SlidingWindowSpec) else
                   MambaManager if isinstance(s, MambaSpec) else FullAttentionManager)
            _, length = cls.find_longest_cache_hit(list(range(max_blocks)), length, [0],
                                                   _Pool(have), s, False, BS)
    return length // BS


def our_hit(groups: list[tuple[object, set[int]]], max_blocks: int) -> int:
    gs, have = [], {}
    for i, (s, blocks) in enumerate(groups):
        w = getattr(s, "sliding_window", None)
        kind = "state" if isinstance(s, MambaSpec) else "sliding" if w else "full"
        gs.append(Group(i, kind, w, BS, (f"l{i}",)))
        have[i] = blocks

    def present(g: Group, start: int, stop: int) -> int:
        n = 0
        while start + n < stop and start + n in have[g.index]:
            n += 1
        return n

    return hit_blocks(gs, max_blocks, present)


@pytest.mark.parametrize("window", [2, BS, BS + 1, 2 * BS + 1, 3 * BS, 5 * BS + 7])
def test_hit_rule_is_vllms(window):
    """Random pools: the hit is vLLM's, for a sliding group alone and for a
    full and a sliding group together (the minimum the fixed point finds)."""
    rng = random.Random(window)
    for _ in range(300):
        n = rng.randrange(1, 14)
        full = set(range(rng.randrange(0, n + 1)))       # a chain: a prefix
        swa = {i for i in range(n) if rng.random() < 0.7}
        sw = spec(window)
        assert our_hit([(sw, swa)], n) == vllm_hit([(sw, swa)], n), (n, swa)
        both = [(spec(), full), (sw, swa)]
        assert our_hit(both, n) == vllm_hit(both, n), (n, full, swa)


def test_state_hit_rule_is_vllms():
    """Random pools: the hit with a state-space group is vLLM's (the last
    state at or before the hit, right to left), alone, beside a full group,
    and beside a full and a sliding group."""
    rng = random.Random(11)
    ssm = state_spec()
    for _ in range(400):
        n = rng.randrange(1, 14)
        full = set(range(rng.randrange(0, n + 1)))
        states = {i for i in range(n) if rng.random() < 0.3}
        swa = {i for i in range(n) if rng.random() < 0.7}
        for groups in ([(ssm, states)], [(spec(), full), (ssm, states)],
                       [(ssm, states), (spec(), full), (spec(WINDOW), swa)]):
            assert our_hit(groups, n) == vllm_hit(groups, n), (n, full, states, swa)


def vllm_kept(window: int, prompt_len: int, interval: int | None,
              seq_len: int | None = None) -> set[int]:
    """The blocks of a request vLLM's SlidingWindowManager caches (its own
    reachable_block_mask, with the coordinator's replay boundary: the
    prompt's) when @seq_len tokens (the prompt's and its output's; default
    the prompt's) are computed."""
    full = (prompt_len if seq_len is None else seq_len) // BS
    mask = SlidingWindowManager.reachable_block_mask(
        0, full, BS, spec(window), False, retention_interval=interval,
        reachable_boundaries=replay_boundaries(prompt_len, BS, use_eagle=False))
    return set(range(full)) if mask is None else {i for i in range(full) if mask[i]}


def published(window: int, prompt_len: int, interval: int | None,
              seq_len: int | None = None) -> set[int]:
    g = Group(0, "sliding", window, BS, ("l0",))
    return {i for a, b in _vllm_groups.publish_ranges(g, prompt_len, interval, seq_len)
            for i in range(a, b)}


@pytest.mark.parametrize("window", [2, BS, BS + 1, 2 * BS + 1, 3 * BS, 5 * BS + 7])
def test_publish_rule_is_what_vllm_keeps(window):
    """Every prompt length, output length and retention interval: a sliding
    group publishes exactly the blocks vLLM's prefix cache keeps of the
    request."""
    for interval in (None, 0, BS, 2 * BS, 3 * BS, 4 * BS, 7 * BS):
        for n in range(0, 24 * BS, 5):
            for out in (0, 1, BS, 5 * BS + 3):
                assert published(window, n, interval, n + out) == \
                    vllm_kept(window, n, interval, n + out), (interval, n, out)


@pytest.mark.parametrize("window", [2, BS + 1, 2 * BS + 1, 3 * BS])
@pytest.mark.parametrize("interval", [BS, 3 * BS, 4 * BS, 6 * BS])
def test_hit_rule_is_vllms_with_periodic_windows(window, interval):
    """Pools as vLLM keeps them with a positive interval (prompts of one
    token chain, each its periodic windows and its last): the hit is vLLM's,
    and some hits end at a periodic boundary, not at a prompt's."""
    rng = random.Random(window * 1000 + interval)
    periodic = 0
    for _ in range(150):
        lens = [rng.randrange(1, 20 * BS) for _ in range(rng.randrange(1, 3))]
        swa = set().union(*(vllm_kept(window, n, interval) for n in lens))
        full = set(range(max(lens) // BS))
        q = rng.randrange(1, 22)
        sw = spec(window)
        both = [(spec(), full), (sw, swa)]
        hit = our_hit(both, q)
        assert hit == vllm_hit(both, q), (q, lens, swa)
        assert our_hit([(sw, swa)], q) == vllm_hit([(sw, swa)], q), (q, lens, swa)
        periodic += hit % (interval // BS) == 0 and hit > 0 and all(
            hit != max(0, n - 1) // BS for n in lens)
    if _vllm_groups._cdiv(window - 1, BS) < interval // BS:
        assert periodic > 0


def test_window_bound_and_minimum():
    sw = spec(WINDOW)  # need 2
    # the window before the end is there, nothing before it: a hit at the end
    assert our_hit([(spec(), set(range(6))), (sw, {4, 5})], 6) == 6
    # a sibling that shares 5 blocks: its window [3, 5) is not there, [0, 2) is not
    assert our_hit([(spec(), set(range(5))), (sw, {4, 5})], 5) == 0
    # the minimum: full holds 3, the window of 3 is there
    assert our_hit([(spec(), set(range(3))), (sw, {1, 2, 3, 4})], 5) == 3
    # a window that misses at block 2 moves to end there: [0, 2)
    assert our_hit([(spec(), set(range(6))), (sw, {0, 1, 3, 5})], 6) == 2


# ---- groups and identity -------------------------------------------------------


def test_groups_and_their_identity():
    kvc = kv_cache_config(([SWA], spec(WINDOW)), ([FULL], spec()))
    g = _vllm_groups.groups_of(kvc)
    assert [(x.kind, x.window, x.layers, x.need) for x in g] == [
        ("sliding", WINDOW, (SWA,), 2), ("full", None, (FULL,), 0)]
    suffixes = {x.suffix() for x in g}
    other = _vllm_groups.groups_of(kv_cache_config(([SWA], spec(WINDOW + BS)), ([FULL], spec())))
    moved = _vllm_groups.groups_of(kv_cache_config(([FULL], spec(WINDOW)), ([SWA], spec())))
    assert len(suffixes | {x.suffix() for x in other} | {x.suffix() for x in moved}) == 5
    assert g[0].suffix().startswith(f"|swa{WINDOW}.1L.") and g[1].suffix().startswith("|full.1L.")
    # publish ranges: a full group every full block, a sliding one its end window
    assert _vllm_groups.publish_range(g[1], 4 * BS + 1, False) == (0, 4)
    assert _vllm_groups.publish_range(g[0], 4 * BS + 1, False) == (2, 4)
    assert _vllm_groups.publish_range(g[0], 4 * BS, False) == (1, 3)   # hits end at 3
    assert _vllm_groups.publish_range(g[0], 4 * BS + 1, True) == (0, 4)  # dense retention


def test_state_groups_and_their_identity():
    """A state-space group in vLLM's "align" mode is shared: a one-block
    window whose namespace names the state's bytes, shapes and dtypes; the
    boundaries it publishes are whole blocks a hit of the prompt can end at."""
    g = _vllm_groups.groups_of(kv_cache_config(([FULL], spec()), ([SSM], state_spec())))
    st = g[1]
    assert (st.kind, st.need, st.first(5), st.state_bytes) == ("state", 1, 4, 656)
    assert st.state_head_dim() == 11  # ceil(656 / (4 * 16)): 704 bytes of the 1024-byte page
    assert st.suffix().startswith("|state656.1L.")
    other = MambaSpec(block_size=BS, shapes=((3, 24), (2, 8, 8)),
                      dtypes=(torch.float16, torch.float32), page_size_padded=1024,
                      mamba_cache_mode="align")
    assert _vllm_groups.groups_of(kv_cache_config(([SSM], other)))[0].suffix() != st.suffix()
    assert _vllm_groups.publish_ranges(st, 6 * BS + 1, 0) == []  # vLLM hands its states over
    p = 5 * BS + 1
    assert [_vllm_groups.state_block(st, p, 7, b) for b in (BS, 3 * BS, 5 * BS)] == [0, 2, 4]
    assert _vllm_groups.state_block(st, p, 7, 3 * BS + 5) is None  # inside a block
    assert _vllm_groups.state_block(st, 5 * BS, 7, 5 * BS) is None  # no token left to compute
    assert _vllm_groups.state_block(st, 5 * BS, 7, 5 * BS, 5 * BS) is None  # the prompt only
    assert _vllm_groups.state_block(st, 5 * BS, 7, 6 * BS, 6 * BS + 3) == 5  # an answer's
    assert _vllm_groups.state_block(st, 5 * BS, 7, 7 * BS, 6 * BS + 3) is None  # past it
    assert _vllm_groups.state_block(st, p, 0, 3 * BS) is None       # the null block


def test_sub_block_hits_are_told_at_start(daemon, monkeypatch, caplog):
    """vLLM's prefix_match_unit below the groups' block size (its own cache
    then hits inside blocks): the connector says at start that its hits end
    at whole blocks."""
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: 0)
    cfg = hma_config(daemon.socket)
    cfg.cache_config.prefix_match_unit = BS // 2
    kvc = kv_cache_config(([FULL], spec()), ([SSM], state_spec()))
    with caplog.at_level("WARNING", logger="vllm.kvshare"):
        c = KvshareConnector(cfg, KVConnectorRole.SCHEDULER, kvc)
    c.shutdown()
    assert f"prefix_match_unit {BS // 2}" in caplog.text
    assert f"a hit from the pool ends at a multiple of {BS}" in caplog.text


def test_unsupported_groups_refused_at_start():
    with pytest.raises(ValueError, match="mode 'none'.*disable-hybrid-kv-cache-manager"):
        _vllm_groups.groups_of(kv_cache_config(([FULL], spec()), (["m"], state_spec("none"))))
    with pytest.raises(ValueError, match="2 speculative state blocks"):
        _vllm_groups.groups_of(kv_cache_config(([FULL], spec()),
                                               (["m"], state_spec(num_speculative_blocks=2))))
    small = MambaSpec(block_size=BS, shapes=((700,),), dtypes=(torch.int8,),
                      page_size_padded=701, mamba_cache_mode="align")
    with pytest.raises(ValueError, match="a state of 700 bytes in pages of 701"):
        _vllm_groups.groups_of(kv_cache_config(([SSM], small)))
    with pytest.raises(ValueError, match="block_size 32, group 0 16"):
        _vllm_groups.groups_of(kv_cache_config(([FULL], spec()), ([SWA], spec(WINDOW, 32))))


def test_a_group_not_followed_shares_nothing(hma, daemon, caplog):
    """A state-space group whose states vLLM does not cache at block
    boundaries (mode "none": prefix caching off): the engine starts, the
    connector says at start that it shares nothing, every request misses,
    nothing is published."""
    mamba = state_spec("none")
    with caplog.at_level("WARNING", logger="vllm.kvshare"):
        e = hma(groups=(([FULL], spec()), (["model.layers.0.mixer"], mamba)))
    assert e.sched.side.hma_off and e.sched.side.groups is None
    assert "shares nothing for this model" in caplog.text and "MambaSpec" in caplog.text
    assert "mode 'none'" in caplog.text
    p = prompt(6, blocks=4)
    assert e.sched.get_num_new_matched_tokens(request("a", p), 0) == (0, False)
    e.step(sched_out([("a", ([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]), 0)], {"a": len(p)}))
    e.worker.clear_connector_metadata()
    assert sum(namespaces(daemon.socket).values()) == 0


def test_supports_hma_and_one_full_group_is_as_without(daemon, monkeypatch):
    """The connector says it supports HMA; a model with one full-attention
    group keeps the namespace it has without HMA."""
    assert supports_hma(KvshareConnector)
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: 0)
    plain = KvshareConnector(vllm_config(daemon.socket), KVConnectorRole.SCHEDULER)
    one = KvshareConnector(hma_config(daemon.socket), KVConnectorRole.SCHEDULER,
                           kv_cache_config(([SWA, FULL], spec())))
    try:
        assert one.side.groups is None and one.side.layout == plain.side.layout
    finally:
        plain.shutdown()
        one.shutdown()


# ---- the connector -------------------------------------------------------------


class Blocks:
    def __init__(self, ids: tuple[list[int], ...]) -> None:
        self.ids = ids

    def get_block_ids(self) -> tuple[list[int], ...]:
        return self.ids


def decode_out(req_id: str, new_ids: tuple[list[int], ...], computed: int, scheduled: int,
               offloads=None) -> types.SimpleNamespace:
    """A SchedulerOutput of one running request: @scheduled tokens after
    @computed, new_ids[g] appended to group g's blocks."""
    so = sched_out(tokens={req_id: scheduled}, offloads=offloads)
    so.scheduled_cached_reqs = types.SimpleNamespace(
        req_ids=[req_id], new_block_ids=[new_ids], resumed_req_ids=set(),
        num_computed_tokens=[computed])
    return so


def sched_out(new=(), tokens=None, offloads=None) -> types.SimpleNamespace:
    """A SchedulerOutput of new requests: (req_id, block ids per group,
    computed), and the boundary states handed over ({req_id: [(group,
    block id, boundary tokens)]}, KVConnectorBlockState's)."""
    return types.SimpleNamespace(
        kv_connector_block_state=types.SimpleNamespace(
            boundary_state_offloads=offloads or {}),
        scheduled_new_reqs=[types.SimpleNamespace(req_id=r, block_ids=ids, num_computed_tokens=n)
                            for r, ids, n in new],
        scheduled_cached_reqs=types.SimpleNamespace(req_ids=[], new_block_ids=[],
                                                    resumed_req_ids=set(),
                                                    num_computed_tokens=[]),
        num_scheduled_tokens=dict(tokens or {}))


def kv_cache(s: object) -> torch.Tensor:
    """A layer's CPU cache as vLLM hands it over: a state-space layer's
    [pages, 1, 1, state bytes] int8 view of its padded pages, an attention
    layer's [pages, heads, block, 2 * head_dim]."""
    if isinstance(s, MambaSpec):
        pages = torch.zeros(PAGES, s.page_size_bytes, dtype=torch.int8)
        return pages[:, : s.state_content_size_bytes].unsqueeze(1).unsqueeze(1)
    return torch.zeros(PAGES, KV_HEADS, BS, 2 * HEAD_DIM)


class HmaEngine:
    """The connector's two sides with a sliding group (layer 0) and a full
    group (layer 1), and CPU paged caches; block 0 is vLLM's null block."""

    def __init__(self, monkeypatch, socket: str, groups=None, **kw: object) -> None:
        monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_rank", lambda: 0)
        cfg = hma_config(socket, **kw)
        kvc = kv_cache_config(*(groups or (([SWA], spec(WINDOW)), ([FULL], spec()))))
        self.sched = KvshareConnector(cfg, KVConnectorRole.SCHEDULER, kvc)
        self.worker = KvshareConnector(cfg, KVConnectorRole.WORKER, kvc)
        self.kv = {n: kv_cache(s) for names, s in groups or (([SWA], None), ([FULL], None))
                   for n in names}
        self.worker.register_kv_caches(self.kv)
        self.next = 1

    def pages(self, n: int) -> list[int]:
        out = list(range(self.next, self.next + n))
        self.next += n
        return out

    def step(self, so) -> None:
        meta = self.sched.build_connector_meta(so)
        self.worker.handle_preemptions(meta)
        self.worker.bind_connector_metadata(meta)
        self.worker.start_load_kv(None)
        self.worker.wait_for_save()

    def finished(self, want: str) -> types.SimpleNamespace:
        """Empty steps until the worker reports @want's transfer done."""
        deadline = time.monotonic() + 10
        while True:
            self.step(sched_out())
            r = self.worker.get_transfer_results(set())
            self.worker.clear_connector_metadata()
            if want in r.finished_recving | r.finished_sending:
                return r
            assert time.monotonic() < deadline, "the transfer was never reported"
            time.sleep(0.001)

    def publish(self, req, value: float) -> None:
        assert self.sched.get_num_new_matched_tokens(req, 0) == (0, False)
        n = -(-len(req.prompt_token_ids) // BS)
        ids = (self.pages(n), self.pages(n))
        self.kv[SWA][ids[0]] = value
        self.kv[FULL][ids[1]] = value + 0.5
        self.step(sched_out([(req.request_id, ids, 0)],
                            {req.request_id: len(req.prompt_token_ids)}))
        self.worker.clear_connector_metadata()
        held, _ = self.sched.request_finished_all_groups(req, ids)
        if held:
            self.finished(req.request_id)

    def load(self, req) -> tuple[int, tuple[list[int], list[int]], types.SimpleNamespace]:
        """A hit's async load into fresh pages (the sliding group's blocks
        before its window are the null block, as vLLM allocates them)."""
        hit, asynch = self.sched.get_num_new_matched_tokens(req, 0)
        if hit == 0:
            return 0, ([], []), None
        assert asynch is True  # HMA loads asynchronously: failures are per request
        blocks = hit // BS
        n = -(-len(req.prompt_token_ids) // BS)
        need = self.sched.side.groups[0].need
        ids = ([0] * (blocks - need) + self.pages(n - blocks + need), self.pages(n))
        for name, g in ((SWA, 0), (FULL, 1)):
            self.kv[name][ids[g]] = -1.0
        self.kv[SWA][0] = 0.0
        self.sched.update_state_after_alloc(req, Blocks(ids), hit)
        r = self.finished(req.request_id)
        self.sched.update_connector_output(r)
        return hit, ids, r

    def close(self) -> None:
        self.sched.shutdown()
        self.worker.shutdown()


@pytest.fixture
def hma(monkeypatch, daemon):
    made: list[HmaEngine] = []

    def make(**kw: object) -> HmaEngine:
        made.append(HmaEngine(monkeypatch, daemon.socket, **kw))
        return made[-1]

    yield make
    for e in made:
        e.close()


def kvsctl(socket: str, *args: str) -> str:
    r = subprocess.run([KVSCTL, "--socket", socket, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def namespaces(socket: str, field: str = "blocks") -> dict[str, int]:
    """Each namespace's model string and its @field (kvsctl ls: blocks, id)."""
    return {n["model"]: n[field] for n in json.loads(kvsctl(socket, "ls", "--json"))[
        "namespaces"]}


def test_each_group_publishes_what_vllm_keeps_and_loads_it(hma, daemon):
    """A: every full block in the full group's namespace, the window before
    the last hit boundary in the sliding group's; B (another engine): the
    hit, each group's pages loaded with A's KV (the sliding group's window
    only), the null block untouched."""
    a = hma()
    p = prompt(3, blocks=5)  # 5 full blocks and a token
    a.publish(request("a", p), 1.0)
    g_swa, g_full = a.sched.side.groups
    assert namespaces(daemon.socket) == {g_swa.layout.model: 2, g_full.layout.model: 5}
    b = hma()
    hit, ids, r = b.load(request("b", p))
    assert hit == 5 * BS and not r.failed_recving
    assert torch.all(b.kv[FULL][ids[1][:5]] == 1.5) and torch.all(b.kv[FULL][ids[1][5]] == -1)
    assert torch.all(b.kv[SWA][ids[0][3:5]] == 1.0) and torch.all(b.kv[SWA][ids[0][5]] == -1)
    assert torch.all(b.kv[SWA][0] == 0.0)  # the null block
    assert not b.worker.get_block_ids_with_load_errors()
    # a prompt sharing 4 blocks: the window [2, 4) of a hit at 4 was not kept
    q = p[: 4 * BS] + [7] * (BS + 1)
    assert b.sched.get_num_new_matched_tokens(request("c", q), 0) == (0, False)


def test_hit_is_the_minimum_over_groups(hma, daemon):
    """Blocks put straight into each group's namespace: the hit is what both
    serve; a window that misses ends before the miss."""
    e = hma()
    p = prompt(4, blocks=6)
    g_swa, g_full = e.sched.side.groups

    def put(g: Group, first: int, last: int) -> None:
        with kvshare.Client(daemon.socket, g.layout) as c:
            with c.reserve(c.hash_tokens(p[: last * BS])[first:]):
                pass  # committed, contents as reserved

    put(g_full, 0, 3)
    put(g_swa, 1, 5)
    assert e.sched.get_num_new_matched_tokens(request("a", p), 0) == (3 * BS, True)
    put(g_full, 3, 6)  # full holds 6; the window of 6 is [4, 6): 5 is missing
    assert e.sched.get_num_new_matched_tokens(request("b", p), 0) == (5 * BS, True)
    # vLLM computed 4 blocks locally: the hit past them
    assert e.sched.get_num_new_matched_tokens(request("c", p), 4 * BS) == (BS, True)


def test_a_failed_load_fails_the_request(hma, daemon):
    """A load that finds less than the scheduler counted: the request is in
    failed_recving (vLLM recomputes it; block ids cannot name it with two
    groups), no block id is reported."""
    a = hma()
    p = prompt(5, blocks=4)
    a.publish(request("a", p), 1.0)
    b = hma()
    hit, _ = b.sched.get_num_new_matched_tokens(request("b", p), 0)
    assert hit == 4 * BS
    kvsctl(daemon.socket, "flush", "--all")
    n = 5
    ids = ([0, 0] + b.pages(n - 2), b.pages(n))
    b.sched.update_state_after_alloc(request("b", p), Blocks(ids), hit)
    r = b.finished("b")
    assert r.failed_recving == {"b"} and "b" in r.finished_recving
    assert not b.worker.get_block_ids_with_load_errors()


def test_state_group_publishes_the_boundary_states_and_loads_one(hma, daemon):
    """A full and a state-space group: A publishes every full block and the
    boundary states vLLM hands over at whole blocks (not one inside a
    block), the states in the step itself (vLLM's block is only vouched
    for until then) while the blocks wait on the publish thread; B hits at
    the last state its prompt reaches and loads that state's bytes, bit for
    bit, into the one real block vLLM gives the group there (nulls before
    it)."""
    groups = (([FULL], spec()), ([SSM], state_spec()))
    a = hma(groups=groups)
    g_full, g_ssm = a.sched.side.groups
    assert g_ssm.layout.dtype == "fp16" and g_ssm.layout.kv_heads == 1
    p = prompt(8, blocks=5)
    req = request("a", p)
    assert a.sched.get_num_new_matched_tokens(req, 0) == (0, False)
    ids = (a.pages(6), a.pages(6))
    a.kv[FULL][ids[0]] = 2.0
    states = a.kv[SSM]
    states[ids[1]] = torch.randint(-128, 128, states[ids[1]].shape, dtype=torch.int8)
    offloads = {"a": [(1, ids[1][2], 3 * BS), (1, ids[1][4], 5 * BS), (1, ids[1][3], 3 * BS + 5)]}
    gate = threading.Event()  # the publish thread held: what it copies waits
    a.worker.side.publishes.submit("gate", [], gate.wait)
    try:
        a.step(sched_out([("a", ids, 0)], {"a": len(p)}, offloads))
        a.worker.clear_connector_metadata()
        have = namespaces(daemon.socket)
        assert (have.get(g_full.layout.model, 0), have[g_ssm.layout.model]) == (0, 2)
    finally:
        gate.set()
    held, _ = a.sched.request_finished_all_groups(req, ids)
    assert held  # its full blocks' publish: vLLM holds them until it is done
    a.finished("a")
    assert namespaces(daemon.socket) == {g_full.layout.model: 5, g_ssm.layout.model: 2}

    b = hma(groups=groups)
    r = request("b", p)
    hit, asynch = b.sched.get_num_new_matched_tokens(r, 0)
    assert (hit, asynch) == (5 * BS, True)
    bids = (b.pages(6), [0] * 4 + b.pages(2))
    b.sched.update_state_after_alloc(r, Blocks(bids), hit)
    res = b.finished("b")
    assert not res.failed_recving
    assert torch.all(b.kv[FULL][bids[0][:5]] == 2.0) and torch.all(b.kv[FULL][bids[0][5]] == 0)
    assert torch.equal(b.kv[SSM][bids[1][4]], states[ids[1][4]])  # A's state, every byte
    assert torch.all(b.kv[SSM][bids[1][5]] == 0)
    # A prompt sharing 4 blocks: the last state it reaches is the one at 3.
    q = p[: 4 * BS] + [7] * (BS + 1)
    assert b.sched.get_num_new_matched_tokens(request("c", q), 0) == (3 * BS, True)
    # The full group's blocks alone make no hit: every state flushed.
    kvsctl(daemon.socket, "flush", "--namespace",
           str(namespaces(daemon.socket, "id")[g_ssm.layout.model]))
    assert namespaces(daemon.socket)[g_full.layout.model] == 5
    assert b.sched.get_num_new_matched_tokens(request("d", p), 0) == (0, False)


@pytest.mark.parametrize("interval,swa_blocks,hit", [(None, 5, 8), (0, 2, 5), (3 * BS, 6, 6)])
def test_output_published_where_vllm_keeps_it(hma, daemon, interval, swa_blocks, hit):
    """publish_output with a sliding group: A's answer is published as vLLM's
    own prefix cache keeps it for each retention interval (dense: every
    block; 0: nothing past the prompt's window, not even the full group's,
    which would serve no hit; 3 blocks: the periodic windows), never from a
    block the window has left (dense: the sliding namespace flushed after
    the prompt, the answer's step copies blocks [3, 8) only: vLLM freed 0-2);
    B's next turn hits what every group serves and loads the answer's KV."""
    a = hma(retention=interval, extra={"publish_output": True})
    g_swa, g_full = a.sched.side.groups
    p, out = prompt(9, blocks=5), [7] * (3 * BS)  # 81 tokens; 47 of the answer computed
    req = request("a", p)
    assert a.sched.get_num_new_matched_tokens(req, 0) == (0, False)
    ids = (a.pages(6), a.pages(6))
    a.kv[SWA][ids[0]], a.kv[FULL][ids[1]] = 1.0, 1.5
    a.step(sched_out([("a", ids, 0)], {"a": len(p)}))
    a.worker.clear_connector_metadata()
    if interval is None:
        a.worker.side.publishes.wait_all()
        kvsctl(daemon.socket, "flush", "--namespace",
               str(namespaces(daemon.socket, "id")[g_swa.layout.model]))
    req.all_token_ids = p + out  # vLLM appends each token it samples
    new = (a.pages(2), a.pages(2))  # the answer's KV from block 5 (its prompt's last token) on
    a.kv[SWA][[ids[0][5], *new[0]]], a.kv[FULL][[ids[1][5], *new[1]]] = 3.0, 3.5
    a.step(decode_out("a", new, len(p), len(out) - 1))
    a.worker.clear_connector_metadata()
    if a.sched.request_finished_all_groups(req, (ids[0] + new[0], ids[1] + new[1]))[0]:
        a.finished("a")
    kept = interval != 0
    assert a.sched.side.counters.output_saves == (1 if kept else 0)
    assert namespaces(daemon.socket) == {g_swa.layout.model: swa_blocks,
                                         g_full.layout.model: 8 if kept else 5}

    b = hma(retention=interval)
    nxt = p + out[:-1] + [9] * 3  # the next turn: the answer and more (8 blocks, 3 tokens)
    got, bids, r = b.load(request("b", nxt))
    assert got == hit * BS and not r.failed_recving
    for i in range(hit):  # the prompt's blocks 0-4, then the answer's
        assert torch.all(b.kv[FULL][bids[1][i]] == (1.5 if i < 5 else 3.5)), i
    for i in range(hit - 2, hit):  # the sliding group's window
        assert torch.all(b.kv[SWA][bids[0][i]] == (1.0 if i < 5 else 3.0)), i
    assert torch.all(b.kv[FULL][bids[1][hit]] == -1)


def test_output_states_published_with_dense_retention(hma, daemon):
    """A state group with publish_output: the states vLLM hands over at the
    answer's block boundaries are published with dense retention (vLLM then
    keeps them), and a next turn hits the answer's last state; with
    interval 0 vLLM keeps none there and the answer is not published."""
    groups = (([FULL], spec()), ([SSM], state_spec()))
    for interval, hit in ((None, 7), (0, 0)):
        kvsctl(daemon.socket, "flush", "--all")
        a = hma(groups=groups, retention=interval, extra={"publish_output": True})
        g_full, g_ssm = a.sched.side.groups
        p, out = prompt(10, blocks=3), [5] * (4 * BS)  # 49 tokens; 63 of the answer computed
        req = request("a", p)
        assert a.sched.get_num_new_matched_tokens(req, 0) == (0, False)
        ids = (a.pages(4), a.pages(4))
        states = a.kv[SSM]
        a.step(sched_out([("a", ids, 0)], {"a": len(p)}))
        a.worker.clear_connector_metadata()
        req.all_token_ids = p + out
        new = (a.pages(3), a.pages(3))
        states[new[1]] = torch.randint(-128, 128, states[new[1]].shape, dtype=torch.int8)
        a.step(decode_out("a", new, len(p), len(out) - 1,
                          {"a": [(1, new[1][1], 6 * BS), (1, new[1][2], 7 * BS)]}))
        a.worker.clear_connector_metadata()
        if a.sched.request_finished_all_groups(req, (ids[0] + new[0], ids[1] + new[1]))[0]:
            a.finished("a")
        b = hma(groups=groups, retention=interval)
        nxt = p + out[:-1] + [9] * 3  # 7 blocks and 2 tokens
        assert b.sched.get_num_new_matched_tokens(request("b", nxt), 0) == (
            hit * BS, hit > 0)
        if hit:
            assert namespaces(daemon.socket) == {g_full.layout.model: 7,
                                                 g_ssm.layout.model: 2}
            bids = (b.pages(8), [0] * 6 + b.pages(2))
            b.sched.update_state_after_alloc(request("b", nxt), Blocks(bids), hit * BS)
            assert not b.finished("b").failed_recving
            assert torch.equal(b.kv[SSM][bids[1][6]], states[new[1][2]])
