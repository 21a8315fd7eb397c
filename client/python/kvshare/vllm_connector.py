"""KvshareConnector: vLLM (>= 0.32) shares prefix KV through kvshared.

    python -m vllm.entrypoints.openai.api_server --model MODEL \\
        --kv-transfer-config '{"kv_connector": "KvshareConnector",
        "kv_connector_module_path": "kvshare.vllm_connector", "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"socket": "/run/kvshare/kvshared.sock"}}'

Scheduler side (kvshare/_vllm_scheduler.py): a prompt's full blocks are hashed
with kvshare's chain (block_tokens = vLLM's block_size, a digest of the
request's cache_salt as the layout's salt, its LoRA's name and path as the
adapter) and looked up; the hits beyond what vLLM has computed locally are
reported, always leaving at least one token to compute. Blocks of multimodal
inputs and prompt embeddings are keyed by vLLM's own extra keys as well (the
items' identifiers and offsets, a digest of the embeddings:
kvshare/_vllm_keys.py), text-only blocks by their token ids alone, as always.
With tensor parallelism each rank publishes and loads its own KV heads in its
own namespace (the layout's tp_rank), and the scheduler counts a block as a
hit only when every rank's namespace has it. An MLA model's cache is one
latent row a token and layer (kv_lora_rank + qk_rope_head_dim elements), the
same on every rank: one namespace for all of them (its model string ends in
"|mla<width>", kv_heads 1, head_dim half the width, tp 0 of 1), published by
rank 0 only and loaded by every rank; its blocks store the engine's dtype
(int8 / fp8 / int4 are refused: measured past the quality goals,
docs/benchmarks.md). Pipeline and context parallelism are refused at start.
With vLLM's hybrid memory allocator (SupportsHMA: sliding-window and hybrid
models) each KV-cache group has its own namespace and shares what vLLM's
prefix cache keeps of it, the hit being vLLM's rule over all groups
(kvshare/_vllm_groups.py).

Worker side (kvshare/_vllm_worker.py): the hit blocks are loaded into the
paged cache layer by layer on a copy thread started in start_load_kv (the
library releases the GIL), each layer awaited in wait_for_layer_load, so the
model computes layer l while layer l + 1 is copied. After each step's forward,
wait_for_save publishes the prompt blocks that became full (chunked prefill
included; with publish_output the output's blocks as they fill; a state
group's boundary states always in the step) with reserve, store and commit, on a publish thread (publish_async:
vLLM holds a finished request's blocks until get_finished reports its copies
done, and a step waits for the copies that read a block it is about to write,
in handle_preemptions); a block another worker is writing (BUSY) or that finds
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
`publish_output` (default false: true publishes the full blocks a
request's output fills too, in the step that computes them, as vLLM's own
prefix cache keeps them, for a next turn that sends the answer back; with
HMA each group's part as vLLM keeps it: nothing at the default retention
interval 0 with a sliding or state group),
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

from typing import TYPE_CHECKING, Any, Optional

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)

from kvshare._vllm_common import KvshareMetadata, Side
from kvshare._vllm_scheduler import SchedulerSide
from kvshare._vllm_worker import WorkerSide

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

__all__ = ["KvshareConnector", "KvshareMetadata"]


class KvshareConnector(KVConnectorBase_V1, SupportsHMA):
    """vLLM's KV connector over kvshared: hands each of vLLM's calls to the
    side of its role, `connector_scheduler` (kvshare._vllm_scheduler) in the
    scheduler's process or `connector_worker` (kvshare._vllm_worker) in each
    worker's; the other is None. What both sides share (the layout, the
    clients, the counters, the settings) is kvshare._vllm_common.Side."""

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig" = None) -> None:  # type: ignore[assignment]
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        tc = self._kv_transfer_config
        self.connector_scheduler: Optional[SchedulerSide] = None
        self.connector_worker: Optional[WorkerSide] = None
        if role == KVConnectorRole.SCHEDULER:
            self.connector_scheduler = SchedulerSide(vllm_config, role, kv_cache_config, tc)
        else:
            self.connector_worker = WorkerSide(vllm_config, role, kv_cache_config, tc)

    @property
    def side(self) -> Side:
        """This role's side (what both have: layout, clients, counters)."""
        return self.connector_scheduler or self.connector_worker  # type: ignore[return-value]

    def _meta(self) -> Optional[KvshareMetadata]:
        """The step's metadata, None when the step has none."""
        return self._get_connector_metadata() if self.has_connector_metadata() else None

    # ---- scheduler side ----------------------------------------------------

    def on_new_request(self, request: "Request") -> None:
        self.connector_scheduler.on_new_request(request)

    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> tuple[int, bool]:
        return self.connector_scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int) -> None:
        self.connector_scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def update_connector_output(self, connector_output: "KVConnectorOutput") -> None:
        self.connector_scheduler.update_connector_output(connector_output)

    def take_events(self) -> Any:
        """The pool's blocks of this model, into vLLM's own KV events."""
        return self.connector_scheduler.take_events()

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        return self.connector_scheduler.build_connector_meta(scheduler_output)

    def request_finished(self, request: "Request",
                         block_ids: list[int]) -> tuple[bool, Optional[dict[str, Any]]]:
        return self.connector_scheduler.request_finished(request, block_ids)

    def request_finished_all_groups(self, request: "Request",
                                    block_ids: tuple[list[int], ...]
                                    ) -> tuple[bool, Optional[dict[str, Any]]]:
        return self.connector_scheduler.request_finished_all_groups(request, block_ids)

    # ---- worker side -------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self.connector_worker.register_kv_caches(kv_caches)

    def unregister_kv_caches(self) -> None:
        self.connector_worker.unregister_kv_caches()

    def restore_kv_caches(self) -> None:
        self.connector_worker.restore_kv_caches()

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        self.connector_worker.handle_preemptions(kv_connector_metadata)

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        self.connector_worker.start_load_kv(self._get_connector_metadata())

    def wait_for_layer_load(self, layer_name: str) -> None:
        self.connector_worker.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: Any, **kwargs: Any) -> None:
        return  # every layer is stored after the forward, in wait_for_save

    def wait_for_save(self) -> None:
        self.connector_worker.wait_for_save(self._meta())

    def get_finished(self, finished_req_ids: set[str]
                     ) -> tuple[Optional[set[str]], Optional[set[str]]]:
        return self.connector_worker.get_finished(finished_req_ids, self._meta())

    def get_transfer_results(self, finished_req_ids: set[str]) -> Any:
        return self.connector_worker.transfer_results(
            super().get_transfer_results(finished_req_ids))

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self.connector_worker.get_block_ids_with_load_errors()

    # ---- both --------------------------------------------------------------

    def shutdown(self) -> None:
        self.side.shutdown()
