"""KvshareConnector: vLLM (>= 0.32) shares prefix KV through kvshared.

    python -m vllm.entrypoints.openai.api_server --model MODEL \\
        --kv-transfer-config '{"kv_connector": "KvshareConnector",
        "kv_connector_module_path": "kvshare.vllm_connector", "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"socket": "/run/kvshare/kvshared.sock"}}'

Scheduler side: a prompt's full blocks are hashed with kvshare's chain
(block_tokens = vLLM's block_size, a digest of the request's cache_salt as the
layout's salt, its LoRA's name and path as the adapter) and looked up; the
hits beyond what vLLM has computed locally are reported, always leaving at
least one token to compute. Blocks of multimodal inputs and prompt
embeddings are keyed by vLLM's own extra keys as well (the items'
identifiers and offsets, a digest of the embeddings: kvshare/_vllm_keys.py),
text-only blocks by their token ids alone, as always. With tensor
parallelism each rank publishes and loads its own KV heads in its own
namespace (the layout's tp_rank), and the scheduler counts a block as a hit
only when every rank's namespace has it. An MLA
model's cache is one latent row a token and layer (kv_lora_rank +
qk_rope_head_dim elements), the same on every rank: one namespace for all
of them (its model string ends in "|mla<width>", kv_heads 1, head_dim half
the width, tp 0 of 1), published by rank 0 only and loaded by every rank;
its blocks store the engine's dtype (int8 / fp8 / int4 are refused: measured
past the quality goals, docs/benchmarks.md). Pipeline and
context parallelism are refused at start. With vLLM's hybrid memory
allocator (SupportsHMA: sliding-window and hybrid models) each KV-cache
group has its own namespace and shares what vLLM's prefix cache keeps of
it, the hit being vLLM's rule over all groups (kvshare/_vllm_groups.py).

Worker side: the hit blocks are loaded into the paged cache layer by layer on
a copy thread started in start_load_kv (the library releases the GIL), each
layer awaited in wait_for_layer_load, so the model computes layer l while
layer l + 1 is copied. After each step's forward, wait_for_save publishes the
prompt blocks that became full (chunked prefill included) with reserve, store
and commit, on a publish thread (publish_async: vLLM holds a finished
request's blocks until get_finished reports its copies done, and a step waits
for the copies that read a block it is about to write, in
handle_preemptions); a block another worker is writing (BUSY) or that finds
no room (FULL) is skipped, never waited for. With load_async a hit request
waits in WAITING_FOR_REMOTE_KVS while its copy runs on a thread, reported
through get_finished (kvshare/_vllm_async.py).

Nothing here raises on the serving path: a block that cannot be loaded is
reported through get_block_ids_with_load_errors() and recomputed (set
"kv_load_failure_policy": "recompute"); a daemon that is away means misses,
and the connector reconnects at most once per `reconnect_interval` seconds.
An error that belongs to one request (a limit, no room, bad input) is a
miss for that request only. A prompt longer than the daemon takes in one
call (kvshare.MAX_HASHES blocks) is looked up, loaded and published a
window of MAX_HASHES blocks at a time.
Every call into the daemon has a deadline (`timeout_ms`): a daemon that is
stuck rather than dead (stopped, stalled) counts as away once the deadline
passes, so it costs the scheduler one deadline per reconnect interval.

Extra config: `socket` (default: kvshared's default path), `dtype` (what
blocks store: "auto" = the engine's KV dtype, or "int8" / "fp8_e4m3" / "int4"),
`model_id` (the namespace's model string, as given; default: the served
model and a digest of its revision, weights, dtype, quantization and
overrides; a model_id must change whenever one of those does),
`max_clients` (daemon connections at most, one per (cache_salt, LoRA) in use,
least recently used closed first; default 16; the scheduler has one per
tensor-parallel rank of each, so tp_size times as many), `max_salts`
((cache_salt, LoRA) pairs with a connection at once, within max_clients:
a new salt past it closes the least recently used idle salted one, or
misses; unsalted namespaces keep the rest; default max_clients / 2),
`overlap` (true: load layer by layer on a copy thread while the model
computes; false: load every layer in start_load_kv, on `load_threads` threads
at once, before the forward; default: true on a GPU, false on a CPU, where the
copies and the model share the same cores), `load_threads` (default 2),
`publish_async` (default true: publish on a thread, off the step),
`load_async` (default false: true parks hit requests in
WAITING_FOR_REMOTE_KVS while their load runs on a thread; docs/vllm.md
has the numbers behind the default),
`reconnect_interval` (seconds, default 5), `timeout_ms` (the deadline of
each call into the daemon, the connect included; default 500),
`log_interval` (seconds between counter lines in vLLM's log, at most one
an interval and only when the counts moved, default 30; 0: never; the
connector logs through the logger `vllm.kvshare`, a child of vLLM's, so its
lines are vLLM's: a start line, a warning at start when no daemon answers,
the counters, their totals at shutdown), `stats_file` (a path: each side
writes its counters as JSON to PATH.scheduler / PATH.worker after every step
that changed them, for scripts and tests; tensor-parallel ranks after the
first write PATH.worker.RANK), `describe` (default false: true hands the
daemon, before each commit, vLLM's own block hash, token ids and extra keys
of every block published, for its vLLM KV events: kvshare/_vllm_events.py),
`pool_events` (the daemon's --kv-events endpoint to subscribe to, e.g.
`tcp://127.0.0.1:5557`: the scheduler side hands the pool's blocks of this
model, as the daemon's stream tells them, to vLLM's own KV events through
take_events(); default none), `pool_events_replay` (the daemon's
--kv-events-replay endpoint: catching up at start and over gaps),
`pool_events_catchup` (batches replayed at most, at start or for a gap;
default 4096). docs/routers.md, "In each engine's own stream".
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import os
import re
import threading
import time
from typing import TYPE_CHECKING, Any, Optional

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)
from vllm.logger import init_logger

import kvshare
from kvshare import _vllm_keys as keys
from kvshare import _vllm_events as events
from kvshare import _vllm_names as names
from kvshare._vllm_async import LOGGER_NAME, Copies, Pending, WorkerCopies, copy_pool, windows
from kvshare._vllm_groups import GroupsMixin, hma_groups

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

logger = init_logger(LOGGER_NAME)


@dataclasses.dataclass
class _Load:
    req_id: str
    tokens: list[int]        # the prompt up to the end of the last block to load
    salt: Optional[str]
    adapter: Optional[str]
    block_ids: list[int]     # vLLM block of each chain block [0, end)
    start: int               # first chain block to load (vLLM computed the rest)
    extras: keys.Extras = None  # each block's extra keys (multimodal, prompt embeds)
    first: int = 0           # first chain block the namespace holds (HMA: a window)
    group: Optional[int] = None  # HMA: the KV-cache group (_vllm_groups)


@dataclasses.dataclass
class _Save:
    req_id: str
    tokens: list[int]        # the prompt up to the end of the last full block
    salt: Optional[str]
    adapter: Optional[str]
    block_ids: list[int]
    extras: keys.Extras = None
    side: Optional[list] = None  # "describe": vLLM's hash, extra keys a block
    lora: Optional[str] = None   # (kvshare._vllm_events)
    first: int = 0           # first chain block to publish (HMA: a window)
    group: Optional[int] = None  # HMA: the KV-cache group (_vllm_groups)


@dataclasses.dataclass
class KvshareMetadata(KVConnectorMetadata):
    loads: list[_Load] = dataclasses.field(default_factory=list)
    saves: list[_Save] = dataclasses.field(default_factory=list)
    # load_async: loads of requests waiting in WAITING_FOR_REMOTE_KVS, to
    # start without waiting and report through get_finished
    async_loads: list[_Load] = dataclasses.field(default_factory=list)
    # publish_async: finished requests whose blocks vLLM holds until
    # get_finished reports them (request_finished said delay_free_blocks)
    sending: set[str] = dataclasses.field(default_factory=set)
    # every vLLM block this step writes (its forward, its loads): copies
    # still reading or writing one are waited for first (_vllm_async)
    writes: set[int] = dataclasses.field(default_factory=set)


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


@dataclasses.dataclass
class Counters:
    """What the connector did, for the log (and tests)."""

    lookups: int = 0
    hit_tokens: int = 0          # scheduler: tokens reported as external hits
    loaded_blocks: int = 0
    loaded_bytes: int = 0
    load_seconds: float = 0.0
    load_errors: int = 0         # blocks that could not be loaded
    published_blocks: int = 0
    skipped_blocks: int = 0      # BUSY or FULL at reserve
    publish_seconds: float = 0.0
    publish_waits: int = 0       # publish copies a step waited for: they read a
                                 # block the step was about to write (preemption)
    async_loads: int = 0         # load_async: loads off the step (scheduler: planned,
                                 # worker: started)
    async_load_steps: int = 0    # worker: steps that ended with an async load
                                 # still copying (they did not wait for it)
    daemon_errors: int = 0
    no_client: int = 0           # a namespace's client could not be had (max_clients
                                 # or max_salts all in use, or the daemon refused it):
                                 # a miss
    request_errors: int = 0      # a call refused for its own request (LIMIT, FULL,
                                 # bad input...): that request misses, the client stays

    def line(self, who: str) -> str:
        bw = self.loaded_bytes / self.load_seconds / 1e9 if self.load_seconds else 0.0
        return ("kvshare connector %s: lookups=%d hit_tokens=%d loaded_blocks=%d loaded_bytes=%d "
                "load_s=%.3f load_GBps=%.2f load_errors=%d published_blocks=%d skipped=%d "
                "publish_s=%.3f publish_waits=%d async_loads=%d async_load_steps=%d "
                "daemon_errors=%d no_client=%d" % (
                    who, self.lookups, self.hit_tokens, self.loaded_blocks, self.loaded_bytes,
                    self.load_seconds, bw, self.load_errors, self.published_blocks,
                    self.skipped_blocks, self.publish_seconds, self.publish_waits,
                    self.async_loads, self.async_load_steps, self.daemon_errors,
                    self.no_client))


# What a call that fails says about the daemon: these are the connection's
# (the daemon gone, stuck past the deadline, or speaking another protocol);
# every other error is the request's own (KVS_E_TOOMANY, KVS_E_LIMIT, FULL,
# BUSY, bad input), a miss for that request with the client kept.
_CONNECTION_ERRORS = (kvshare.DisconnectedError, kvshare.NoDaemonError, kvshare.ProtocolError)


class _Clients:
    """One kvshare.Client per (salt, adapter) namespace, made on demand, at
    most `max_clients` of them: salts come from API users, so each distinct
    one must cost a bounded share of the daemon's connections. Past the cap
    the least recently used client that holds no lease or view is closed; when
    every one is in use the request is a miss (never a wait). Salted
    namespaces have a budget of their own, `max_salts` (salt, adapter) pairs
    open at once: a new salt past it closes the least recently used idle
    salted client (a miss when none is idle), never an unsalted one, so that
    one API user's salts cannot take the shared namespaces' clients. When
    the daemon is away (or stuck: a call past its deadline) every call
    misses, on every client, and a reconnect is tried at most once per
    interval."""

    def __init__(self, socket: Optional[str], base: kvshare.Layout, interval: float,
                 counters: Counters, max_clients: int,
                 timeout: Optional[float] = None, max_salts: Optional[int] = None) -> None:
        self.socket = socket
        self.base = base
        self.interval = interval
        self.counters = counters
        self.max_clients = max_clients
        # (salt, adapter) pairs with a client: by default half of them, so
        # that the unsalted namespaces keep the other half.
        if max_salts is None:
            max_salts = max(1, max_clients // 2)
        self.max_salts = max(1, min(max_salts, max_clients))
        self.timeout = timeout  # seconds, each call's deadline
        # least recently used first
        self.clients: collections.OrderedDict[tuple, kvshare.Client] = \
            collections.OrderedDict()
        self.down_until = 0.0  # after any failure: no new client before
        self.away_until = 0.0  # after a lost or stuck daemon: no call at all
        self.refused_logged = -interval

    def away(self) -> bool:
        """A call found the daemon gone or stuck (past its deadline) less
        than an interval ago: ask nothing, on any client. They all talk to
        that daemon, so a stuck one costs one deadline per interval, not one
        per client (or per request)."""
        return time.monotonic() < self.away_until

    def key(self, salt: Optional[str], adapter: Optional[str],
            rank: Optional[int] = None) -> tuple:
        """A namespace's key: (salt, adapter) for this side's own
        tensor-parallel rank, (salt, adapter, rank) for another rank's (the
        scheduler asks every rank's namespace)."""
        if rank is None or rank == self.base.tp_rank:
            return (salt, adapter)
        return (salt, adapter, rank)

    def get(self, salt: Optional[str], adapter: Optional[str],
            rank: Optional[int] = None) -> Optional[kvshare.Client]:
        key = self.key(salt, adapter, rank)
        if self.away():
            return None
        c = self.clients.get(key)
        if c is not None:
            self.clients.move_to_end(key)
            return c
        if time.monotonic() < self.down_until:
            return None
        if salt is not None and not self._salt_room(salt, adapter):
            self.counters.no_client += 1
            return None
        while len(self.clients) >= self.max_clients:
            idle = next((k for k, old in self.clients.items() if not old.in_use), None)
            if idle is None:
                self.counters.no_client += 1
                return None
            self.clients.pop(idle).close()
        try:
            layout = dataclasses.replace(self.base, salt=salt, adapter=adapter)
            if rank is not None:
                layout = dataclasses.replace(layout, tp_rank=rank)
            c = kvshare.Client(self.socket, layout, timeout=self.timeout)
        except (kvshare.LimitError, kvshare.LayoutError) as e:
            # This namespace was refused (the daemon's caps): the daemon is
            # up and serves the others.
            self.counters.no_client += 1
            now = time.monotonic()
            if now >= self.refused_logged + self.interval:
                self.refused_logged = now
                logger.warning("kvshare: %s; that request misses", e)
            return None
        except kvshare.Error as e:  # no connection: the daemon is away
            self._gone(key, e)
            return None
        self.clients[key] = c
        return c

    def _salt_room(self, salt: str, adapter: Optional[str]) -> bool:
        """Whether (salt, adapter) may have a client: it has one (another
        rank's), or fewer than max_salts pairs do, once the least recently
        used idle pair is closed if need be (all its ranks' clients)."""
        pairs: collections.OrderedDict[tuple, list] = collections.OrderedDict()
        for k, c in self.clients.items():  # least recently used first
            if k[0] is not None:
                pairs.setdefault(k[:2], []).append(c)
        if (salt, adapter) in pairs or len(pairs) < self.max_salts:
            return True
        for pair, cs in pairs.items():
            if not any(c.in_use for c in cs):
                for k in [k for k in self.clients if k[:2] == pair]:
                    self.clients.pop(k).close()
                return True
        return False

    def connect(self) -> Optional[kvshare.Error]:
        """At start: the unsalted namespace's client (the one most requests
        use), made now; the error that kept it away, else None. Nothing is
        counted and no interval waited for: the first request tries again."""
        try:
            self.clients[self.key(None, None)] = kvshare.Client(self.socket, self.base,
                                                                timeout=self.timeout)
        except kvshare.Error as e:
            return e
        return None

    def failed(self, key: tuple, e: Exception) -> None:
        """A call failed. A connection's error (see _CONNECTION_ERRORS):
        forget the client (a reconnect makes a new one) and, as the daemon
        is away, miss for an interval. Any other error belongs to the
        request: it misses, and the client and every other request go on."""
        if not isinstance(e, _CONNECTION_ERRORS):
            self.counters.request_errors += 1
            now = time.monotonic()
            if now >= self.refused_logged + self.interval:
                self.refused_logged = now
                logger.warning("kvshare: %s; that request misses", e)
            return
        self._gone(key, e)

    def _gone(self, key: tuple, e: Exception) -> None:
        self.counters.daemon_errors += 1
        c = self.clients.pop(key, None)
        if c is not None:
            c.close()
        if self.down_until <= time.monotonic():
            logger.warning("kvshare: %s; misses until the daemon answers (retry in %.0f s)",
                           e, self.interval)
        self.down_until = time.monotonic() + self.interval
        if isinstance(e, kvshare.DisconnectedError):  # a deadline passed, too
            self.away_until = self.down_until

    def close(self) -> None:
        for c in self.clients.values():
            c.close()
        self.clients.clear()


def _query(c: kvshare.Client, hashes: Any) -> int:
    """kvs_query of a chain of any length: window by window, going on while
    each window is all there."""
    hits = 0
    for start, end in windows(len(hashes)):
        hits = start + c.query(hashes[start:end], remote=True)
        if hits < end:
            break
    return hits


def _flag(v: Any) -> bool:
    """An extra config value as a bool: JSON's true/false, or a string."""
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


_LAYER_INDEX = re.compile(r"\.(\d+)\.")


class KvshareConnector(GroupsMixin, WorkerCopies, KVConnectorBase_V1, SupportsHMA):
    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig" = None) -> None:  # type: ignore[assignment]
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        tc = self._kv_transfer_config
        self.block_size = vllm_config.cache_config.block_size
        self.counters = Counters()
        mc, pc = vllm_config.model_config, vllm_config.parallel_config
        # A layout is one rank's KV heads of every layer for whole blocks of
        # tokens. Pipeline stages would each hold some of the layers (stages
        # with equal layer counts would share a namespace and load each
        # other's KV) and context parallelism some of the tokens: refused
        # rather than keyed, as the scheduler could not know what every
        # stage or rank holds.
        for what in ("pipeline_parallel_size", "prefill_context_parallel_size",
                     "decode_context_parallel_size"):
            if getattr(pc, what, 1) > 1:
                raise ValueError(f"KvshareConnector does not support {what} > 1 "
                                 f"(it is {getattr(pc, what)}): blocks hold every layer "
                                 "of whole blocks of tokens")
        dtype = tc.get_from_extra_config("dtype", "auto")
        if dtype == "auto":
            cache_dtype = vllm_config.cache_config.cache_dtype
            dtype = str(mc.dtype).replace("torch.", "") if cache_dtype == "auto" else cache_dtype
        self.tp_size = pc.tensor_parallel_size
        self.tp_rank = 0
        if role == KVConnectorRole.WORKER:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

            self.tp_rank = get_tensor_model_parallel_rank()
        dtype = kvshare.client._DTYPE_ALIASES.get(dtype, dtype)
        # MLA: one latent row a token and layer, the same on every rank.
        self.latent = mc.get_head_size() if getattr(mc, "use_mla", False) else None
        model_id = names.model_id(mc, tc.get_from_extra_config("model_id", None))
        model = names.latent(model_id, self.latent)
        if self.latent is None:
            kv_heads, head_dim, rank, size = (mc.get_num_kv_heads(pc), mc.get_head_size(),
                                              self.tp_rank, self.tp_size)
        else:
            kv_heads, head_dim, rank, size = self._latent_layout(self.latent, dtype)
        self.layout = kvshare.Layout(
            model=model,
            layers=mc.get_num_layers(pc),
            kv_heads=kv_heads,
            head_dim=head_dim,
            block_tokens=self.block_size,
            dtype=dtype,
            tp_rank=rank,
            tp_size=size,
        )
        # The namespaces a block must be in for a hit, and whether this
        # rank publishes: MLA's one namespace has one writer, rank 0.
        self.ns_ranks = 1 if self.latent is not None else self.tp_size
        self.writer = self.latent is None or self.tp_rank == 0
        # A lookup answers in microseconds (milliseconds when it promotes
        # from SSD); 500 ms is far past that on a loaded machine, and a
        # stuck daemon then costs the scheduler at most 500 ms per
        # reconnect interval (10% of 5 s) instead of every step.
        timeout_ms = int(tc.get_from_extra_config("timeout_ms", 500))
        if timeout_ms <= 0:
            raise ValueError(f"kvshare: timeout_ms {timeout_ms}: milliseconds > 0")
        self.clients = _Clients(tc.get_from_extra_config("socket", None), self.layout,
                                float(tc.get_from_extra_config("reconnect_interval", 5)),
                                self.counters,
                                max(1, int(tc.get_from_extra_config("max_clients", 16)))
                                * (self.tp_size if role == KVConnectorRole.SCHEDULER else 1),
                                timeout_ms / 1000,
                                self._max_salts(tc.get_from_extra_config("max_salts", None)))
        self.load_async = _flag(tc.get_from_extra_config("load_async", False))
        # HMA: one namespace per KV-cache group (_vllm_groups).
        self.groups, self.hma_off = hma_groups(vllm_config, kv_cache_config)
        if self.groups:
            interval = getattr(vllm_config.cache_config, "prefix_cache_retention_interval", 0)
            self._setup_groups(model_id, dtype, interval is None, interval)
        self.log_interval = float(tc.get_from_extra_config("log_interval", 30))
        self.overlap = tc.get_from_extra_config("overlap", None)
        self.load_threads = max(1, int(tc.get_from_extra_config("load_threads", 2)))
        self.publish_async = _flag(tc.get_from_extra_config("publish_async", True))
        self.describe = _flag(tc.get_from_extra_config("describe", False))
        stats_file = tc.get_from_extra_config("stats_file", None)
        # Each tensor-parallel rank has a worker side: ranks after the
        # first write PATH.worker.RANK.
        suffix = role.name.lower() + (f".{self.tp_rank}" if self.tp_rank else "")
        self.stats_file = f"{stats_file}.{suffix}" if stats_file else None
        self.stats_written: Optional[Counters] = None
        self.reported = Counters()
        self.last_log = time.monotonic()
        self.logged = Counters()  # the counts of the last counter line
        # scheduler
        self.reqs: dict[str, _ReqState] = {}
        self.sending: set[str] = set()       # for the next metadata's `sending`
        self.async_loads: list[_Load] = []   # for the next metadata's `async_loads`
        # worker
        self.layers: dict[str, tuple[int, torch.Tensor]] = {}
        self.cache: Optional[kvshare.PagedCache] = None
        self.slept_cache: Optional[kvshare.PagedCache] = None  # asleep (vLLM >= 0.33)
        self.pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self.layer_done: dict[int, concurrent.futures.Future] = {}
        self.leases: list[kvshare.ReadLease] = []
        self.load_started = self.load_done = 0.0
        self.load_errors: set[int] = set()
        self.lock = threading.Lock()  # load_errors and the counters, across threads
        # Calls into the daemon from the main thread and the copy threads (a
        # client is not thread-safe); the copies themselves run outside it.
        self.daemon = threading.RLock()
        self.publishes = Copies("kvshare-publish")
        self.aloads = Copies("kvshare-aload")
        self.to_send = Pending()  # finished requests vLLM holds for their publishes
        self.to_recv = Pending()  # requests in WAITING_FOR_REMOTE_KVS
        self.who = ("(scheduler)" if role == KVConnectorRole.SCHEDULER
                    else f"(worker, tp rank {self.tp_rank} of {self.tp_size})")
        self.pool_events = (events.pool_events(tc, self.layout, self.clients, self.daemon)
                            if role == KVConnectorRole.SCHEDULER else None)
        self._log_start()

    def _log_start(self) -> None:
        """The start line, and a warning now, not at the first request, when
        no daemon answers (a wrong `socket`, a daemon not started)."""
        lay = self.layout
        sock = self.clients.socket or kvshare.default_socket_path()
        logger.info("kvshare connector %s started: socket %s, namespace %s, %s blocks of %d "
                    "tokens (%d layers, %d KV heads, head_dim %d, tp size %d), load %s, "
                    "publish %s, counters every %g s", self.who, sock, lay.model, lay.dtype,
                    lay.block_tokens, lay.layers, lay.kv_heads, lay.head_dim, lay.tp_size,
                    "async" if self.load_async else "in the step",
                    "async" if self.publish_async else "in the step", self.log_interval)
        if self.hma_off:
            logger.warning("kvshare connector %s: %s", self.who, self.hma_off)
        for g in self.groups or ():
            logger.info("kvshare connector %s: KV-cache group %d (%s%s, %d layers, blocks of %d "
                        "tokens): namespace %s", self.who, g.index, g.kind,
                        f" window {g.window}" if g.window else "", len(g.layers),
                        g.block_size, g.layout.model)
        if self.latent is not None:
            logger.info("kvshare connector %s: MLA latent cache of %d elements a token, one "
                        "namespace for every tensor-parallel rank, published by rank 0",
                        self.who, self.latent)
        e = self.clients.connect()
        if e is not None:
            logger.warning("kvshare connector %s: no daemon at start (%s): every request "
                           "misses and computes its KV until kvshared answers (tried at "
                           "most every %g s; `kvshared --print-config` shows the daemon's "
                           "socket)", self.who, e, self.clients.interval)

    @staticmethod
    def _latent_layout(width: int, dtype: str) -> tuple[int, int, int, int]:
        """kv_heads, head_dim, tp_rank, tp_size of an MLA latent cache of
        @width elements a token: one "head" whose K is the row's first half
        and V its second (PagedCache kind "mla"), in one namespace for every
        tensor-parallel rank (each holds the same latent KV)."""
        if width % 2:
            raise ValueError(f"KvshareConnector: an MLA latent width of {width} elements; "
                             "an even width only")
        if dtype not in ("fp16", "bf16", "fp32"):
            # Measured (kvsbench quality --mla): the latent row split into a
            # per-channel "K" half and a per-token "V" half puts outlier
            # channels of c_kv and k_pe in per-token groups; every quantized
            # dtype misses kvshare's per-head quality goals.
            raise ValueError(f"KvshareConnector: dtype {dtype!r} for an MLA latent cache; "
                             "blocks of MLA models store the engine's fp16, bf16 or fp32 "
                             "(quantized latent rows measured 3.7% (int8), 3.3% (fp8), 21% "
                             "(int4) attention error against goals of 1%, 3%, 5%: "
                             "docs/benchmarks.md, \"MLA's latent cache\")")
        return 1, width // 2, 0, 1

    @staticmethod
    def _max_salts(v: Any) -> Optional[int]:
        if v is None:
            return None
        if int(v) < 1:
            raise ValueError(f"kvshare: max_salts {v}: a number >= 1")
        return int(v)

    # ---- scheduler side ----------------------------------------------------

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
            if self.describe and not skip:
                st.request = request
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

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        meta = KvshareMetadata()
        try:
            self._build(scheduler_output, meta)
        except Exception as e:
            logger.warning("kvshare: connector metadata failed: %s", e)
        self._maybe_log()
        return meta

    def _build(self, so: "SchedulerOutput", meta: KvshareMetadata) -> None:
        bs = self.block_size
        steps: list[tuple[str, int]] = []
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
            steps.append((nr.req_id, nr.num_computed_tokens + so.num_scheduled_tokens[nr.req_id]))
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
                    for g, ids in enumerate(new[1:] if self.groups else (), 1):
                        st.group_blocks[g].extend(ids)
                        meta.writes.update(ids)
            if req_id in cr.resumed_req_ids:
                written(st, cr.num_computed_tokens[i])
                plan_load(req_id, st)
            steps.append((req_id, cr.num_computed_tokens[i] + so.num_scheduled_tokens[req_id]))
        for req_id, computed in steps:
            st = self.reqs[req_id]
            end = min(computed, len(st.prompt)) // bs
            if not st.skip and not self.hma_off and st.saved_blocks < end <= len(st.block_ids):
                if self.groups:  # what each group keeps
                    meta.saves.extend(self._groups_saves(req_id, st, end))
                else:
                    meta.saves.append(_Save(req_id, st.prompt[: end * bs], st.salt,
                                            st.adapter, st.block_ids[:end], st.extras))
                    if st.request is not None:  # side records: one namespace only
                        meta.saves[-1].side = events.side_records(st.request, end, bs)
                        meta.saves[-1].lora = events.lora_name(st.request)
                st.saved_blocks = end

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

    def _report(self) -> None:
        """The counts since the last report, to the daemon's stats (kvsctl
        stats, "engines"), through any connected client."""
        now, last = self.counters, self.reported
        delta = {
            "hit_tokens": now.hit_tokens - last.hit_tokens,
            "loaded_blocks": now.loaded_blocks - last.loaded_blocks,
            "loaded_bytes": now.loaded_bytes - last.loaded_bytes,
            "load_us": round(now.load_seconds * 1e6) - round(last.load_seconds * 1e6),
            "load_errors": now.load_errors - last.load_errors,
            "published_blocks": now.published_blocks - last.published_blocks,
            "publish_us": round(now.publish_seconds * 1e6) - round(last.publish_seconds * 1e6),
            "skipped_blocks": now.skipped_blocks - last.skipped_blocks,
        }
        if not any(delta.values()) or self.clients.away():
            return
        for key, c in list(self.clients.clients.items()):
            try:
                c.report(**delta)
            except kvshare.Error as e:
                self.clients.failed(key, e)
                if self.clients.away():
                    return  # lost or stuck: no other client would fare better
                continue
            self.reported = dataclasses.replace(now)
            return

    def _maybe_log(self) -> None:
        self._report()
        if self.log_interval > 0 and time.monotonic() - self.last_log >= self.log_interval \
                and self.logged != self.counters:  # a line when the counts moved
            self.last_log = time.monotonic()
            self.logged = dataclasses.replace(self.counters)
            logger.info("%s", self.counters.line(self.who))
        if self.stats_file and self.stats_written != self.counters:
            self.stats_written = dataclasses.replace(self.counters)
            tmp = self.stats_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump(dataclasses.asdict(self.counters), f)
            os.replace(tmp, self.stats_file)

    # ---- worker side -------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        if self.hma_off:  # nothing is shared: nothing to copy
            return
        names = list(kv_caches)
        try:
            order = sorted(names, key=lambda n: int(_LAYER_INDEX.findall("." + n + ".")[0]))
        except (IndexError, ValueError):
            order = names
        from vllm.platforms import current_platform

        # vLLM 0.32 hands out [blocks, kv_heads, block_size, C] views: the CPU
        # backend reads each head's [block_size, C] as K rows then V rows, the
        # CUDA backends split C into K and V.
        kind = "cpu" if current_platform.is_cpu() else "bhnc"
        if self.latent is not None:  # MLA: [blocks, 1, block_size, latent width]
            kind = "mla"
        if self.overlap is None:
            self.overlap = not current_platform.is_cpu()
        # One copy thread in order when overlapping (layer l first); several
        # at once otherwise. The CUDA path registers the host arena on its
        # first use: one thread there.
        threads = 1 if self.overlap or not current_platform.is_cpu() else self.load_threads
        self.pool = copy_pool(threads, "kvshare-load")
        for i, name in enumerate(order):
            t = kv_caches[name]
            if kind == "mla":  # [blocks, block_size, latent width], the same memory
                t = t.squeeze()
            self.layers[name] = (i, t)
        first = self.layers[order[0]][1]
        self.cache = kvshare.PagedCache.for_tensor(first, kind, self.layout.kv_heads,
                                                   self.layout.head_dim)
        if self.groups:
            self._register_groups(kv_caches, kind)
        elif len(order) != self.layout.layers:
            logger.warning("kvshare: %d KV cache tensors for %d layers", len(order),
                           self.layout.layers)
        logger.info("kvshare connector %s: %d layers, %s layout, block %s bytes, overlap %s",
                    self.who, len(order), kind, self.layout.block_bytes, self.overlap)

    def unregister_kv_caches(self) -> None:
        """vLLM >= 0.33, before sleep mode frees the KV cache: nothing may
        copy into or out of it until restore_kv_caches. vLLM has drained
        the transfers; a copy thread's last layers are awaited all the same.
        Idempotent."""
        for f in self.layer_done.values():
            f.result()
        self.publishes.wait_all()  # publish_async and load_async copies
        self.aloads.wait_all()
        if self.cache is not None:
            self.slept_cache, self.cache = self.cache, None

    def restore_kv_caches(self) -> None:
        """vLLM >= 0.33, after wake-up: the KV cache is mapped again under
        the tensors register_kv_caches was given (sleep mode's allocator
        keeps their addresses), and each copy takes its address from them.
        Idempotent."""
        if self.slept_cache is not None:
            self.cache, self.slept_cache = self.slept_cache, None

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, KvshareMetadata)
        self.layer_done = {}
        self.handle_preemptions(meta)  # a vLLM that does not call it
        for ld in meta.async_loads:
            self._start_async_load(ld)
        if not meta.loads or self.cache is None:
            return
        jobs = []  # (lease, page ids of blocks [start, hits), start, group tag)
        for ld in meta.loads:
            self._lost(ld, self._pin(ld, jobs))
        self.leases.extend(job[0] for job in jobs)
        if not jobs:
            return
        assert self.pool is not None
        self.load_started = time.perf_counter()
        for idx, tensor in sorted(self.layers.values(), key=lambda x: x[0]):
            self.layer_done[idx] = self.pool.submit(self._load_layer, idx, tensor, jobs)
        if not self.overlap:  # every layer now, before the forward
            for f in self.layer_done.values():
                f.result()

    def wait_for_layer_load(self, layer_name: str) -> None:
        entry = self.layers.get(layer_name)
        f = self.layer_done.get(entry[0]) if entry else None
        if f is not None:
            f.result()  # _load_layer never raises

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: Any, **kwargs: Any) -> None:
        return  # every layer is stored after the forward, in wait_for_save

    def wait_for_save(self) -> None:
        for f in self.layer_done.values():
            f.result()
        if self.layer_done:  # the step's loads, first submitted to last done
            self.counters.load_seconds += self.load_done - self.load_started
        self.layer_done = {}
        self._release(self.leases)
        self.leases = []
        if not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        assert isinstance(meta, KvshareMetadata)
        ready = None
        if self.publish_async and meta.saves and self.cache is not None \
                and self.cache.on_device:
            # The forward's writes are queued on this thread's stream; the
            # copy thread's stream is another: it waits for them on the host.
            ready = torch.cuda.Event()
            ready.record()
        for sv in meta.saves if self.writer else ():
            if self.publish_async:
                # Off the step: the request's full blocks do not change while
                # it runs, vLLM holds them once it finishes (sending), and a
                # step that reuses one waits first (handle_preemptions).
                self.publishes.submit(sv.req_id, sv.block_ids, self._publish_logged, sv,
                                      ready)
            else:
                self._publish_logged(sv)
        with self.daemon:
            self._maybe_log()

    def get_block_ids_with_load_errors(self) -> set[int]:
        with self.lock:
            out, self.load_errors = self.load_errors, set()
        return out

    def shutdown(self) -> None:
        self.publishes.shutdown()
        self.aloads.shutdown()
        with self.daemon:  # the counts of the copies that ended after the last step
            self._maybe_log()
        logger.info("%s", self.counters.line(self.who + " at shutdown"))
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        self.clients.close()
        if self.pool_events is not None:
            self.pool_events.close()
        for g in self.groups or ():
            g.clients.close()
