"""What both sides of the vLLM connector share (kvshare.vllm_connector): the
metadata the scheduler side hands the worker side each step, the counters,
the daemon's clients, and Side, the state and the settings that both sides
are made of (each side is one object: _vllm_scheduler.SchedulerSide in the
scheduler's process, _vllm_worker.WorkerSide in each worker's).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Optional

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.logger import init_logger

import kvshare
from kvshare import _vllm_keys as keys
from kvshare import _vllm_names as names
from kvshare._vllm_async import LOGGER_NAME, windows
from kvshare._vllm_groups import Group, hma_groups

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig

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
    output_saves: int = 0        # scheduler: publishes of blocks past the prompt,
                                 # its output's (publish_output)

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


class Side:
    """The state and settings of one side of the connector, read from
    vLLM's config: the layout and its namespaces (one per KV-cache group
    with HMA), the daemon's clients, the counters and how they are
    reported and logged. SchedulerSide and WorkerSide add what only their
    side does; KvshareConnector hands each of vLLM's calls to one of them.
    """

    groups: Optional[list[Group]] = None

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: Optional["KVCacheConfig"], tc: Any) -> None:
        """@tc: vLLM's kv_transfer_config (its extra config: the module's
        docstring in vllm_connector.py)."""
        self.block_size = vllm_config.cache_config.block_size
        # vLLM's finest hit boundary (its hash block; None: its groups' block)
        self.match_unit = getattr(vllm_config.cache_config, "prefix_match_unit", None)
        self.counters = Counters()
        model_id, dtype = self._read_layout(vllm_config, role, tc)
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
            self._setup_groups(model_id, dtype, interval)
        self.log_interval = float(tc.get_from_extra_config("log_interval", 30))
        self.overlap = tc.get_from_extra_config("overlap", None)
        self.load_threads = max(1, int(tc.get_from_extra_config("load_threads", 2)))
        self.publish_async = _flag(tc.get_from_extra_config("publish_async", True))
        self.publish_output = _flag(tc.get_from_extra_config("publish_output", False))
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
        self.lock = threading.Lock()  # load_errors and the counters, across threads
        # Calls into the daemon from the main thread and the copy threads (a
        # client is not thread-safe); the copies themselves run outside it.
        self.daemon = threading.RLock()
        self.who = ("(scheduler)" if role == KVConnectorRole.SCHEDULER
                    else f"(worker, tp rank {self.tp_rank} of {self.tp_size})")

        self._log_start()

    def _read_layout(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                     tc: Any) -> tuple[str, str]:
        """The layout of this side's namespace (self.layout, tp_rank, tp_size,
        latent, ns_ranks, writer); returns the model id (the namespace's
        model string before any suffix) and the stored dtype."""
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
        dtype = kvshare.dtype_name(dtype)
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
        return model_id, dtype

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
                        f" window {g.window}" if g.window else
                        f" of {g.state_bytes} bytes a layer" if g.kind == "state" else "",
                        len(g.layers),
                        g.block_size, g.layout.model)
        if self.groups and self.match_unit and self.match_unit < self.block_size:
            logger.warning("kvshare connector %s: prefix_match_unit %d: vLLM's own prefix cache "
                           "also hits inside blocks of %d tokens; the connector shares whole "
                           "blocks, so a hit from the pool ends at a multiple of %d",
                           self.who, self.match_unit, self.block_size, self.block_size)
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

    def _setup_groups(self, model: str, dtype: str, interval: Optional[int] = 0) -> None:
        """A layout and clients for each group (model: the model string
        before any suffix; MLA groups end in |mla<width>)."""
        base = self.clients
        # sliding and state groups' prefix_cache_retention_interval (None: dense)
        self.interval = interval
        self.block_size = self.groups[0].block_size  # every group's (groups_of)
        self.failed_recv: set[str] = set()
        for g in self.groups:
            gdtype = dtype
            if g.latent is not None:
                kv_heads, head_dim, rank, size = self._latent_layout(g.latent, dtype)
            elif g.kind == "state":
                # A state's bytes, bit for bit: never quantized (the model
                # string names its real shapes and dtypes).
                kv_heads, head_dim, rank, size = (1, g.state_head_dim(), self.layout.tp_rank,
                                                  self.layout.tp_size)
                gdtype = "fp16"
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
                                           tp_size=size, dtype=gdtype)
            g.clients = _Clients(base.socket, g.layout, base.interval, self.counters,
                                 base.max_clients, base.timeout, base.max_salts)
        # Only asynchronous loads can fail per request (see the module).
        self.load_async = True
        # The connector's own clients are the first group's: its connection
        # at start, its counter reports to the daemon.
        self.clients = self.groups[0].clients

    def _group(self, idx: Optional[int]) -> Optional[Group]:
        return None if idx is None else next(g for g in self.groups if g.index == idx)

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

    def log_totals(self) -> None:
        """At shutdown: the last counts to the daemon, the log and the stats
        file, and the totals' line."""
        with self.daemon:  # the counts of the copies that ended after the last step
            self._maybe_log()
        logger.info("%s", self.counters.line(self.who + " at shutdown"))

    def close_clients(self) -> None:
        self.clients.close()
        for g in self.groups or ():
            g.clients.close()
