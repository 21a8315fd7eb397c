"""TTFT of requests that hit nothing while others load from kvshared, with
the connector's loads in the step (load_async false) and off it (true).

    py=$(scripts/python_env.sh)
    $py tools/dev/bench_async_load.py [--hits 4] [--misses 4] [--tokens 2048]
        [--miss-tokens 256] [--rounds 5] [--layers 8] [--hidden 1024]
        [--order sync,async]

Needs the built kvshared (BUILD_DIR, default build/). Builds a random Llama
(no download), starts its own kvshared, then one engine per mode, one after
the other (vLLM's own prefix cache off, so every round's hits come from
kvshared). Each engine first publishes --hits prompts of --tokens tokens;
then, --rounds times (after one round not counted), adds those --hits
prompts (every full block a hit) and --misses fresh prompts of --miss-tokens
tokens (nothing cached; each mode its own) at once, hits first, and steps
the engine until all are done: TTFT is the wall time from the add to the
step that gave the request its first token.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def engine_main(a: argparse.Namespace) -> None:
    from vllm import LLM, SamplingParams

    import kvshare

    extra = {"socket": a.socket, "model_id": "bench-async", "log_interval": 0,
             "stats_file": os.path.join(a.dir, a.mode), "load_async": a.mode == "async"}
    llm = LLM(model=os.path.join(a.dir, "model"), dtype="float32", block_size=32,
              max_model_len=a.tokens + 64, enforce_eager=True, seed=0,
              max_num_seqs=a.hits + a.misses, enable_prefix_caching=False,
              kv_transfer_config={
                  "kv_connector": "KvshareConnector",
                  "kv_connector_module_path": "kvshare.vllm_connector",
                  "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                  "kv_connector_extra_config": extra})
    prompts = json.load(open(os.path.join(a.dir, "prompts.json")))
    llm.generate([{"prompt_token_ids": p} for p in prompts["hits"]],
                 SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)
    want = a.hits * (a.tokens // 32)
    deadline = time.monotonic() + 120
    with kvshare.Client(a.socket) as c:  # the publishes run off the step
        while c.stats()["blocks.committed"] < want and time.monotonic() < deadline:
            time.sleep(0.05)
    eng = llm.llm_engine
    sp = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    out: dict[str, list[float]] = {"hit": [], "miss": []}
    misses = prompts["misses"][a.mode]
    for r in range(a.rounds + 1):  # round 0: the first mixed step's costs, not counted
        kinds = {}
        t0 = time.perf_counter()
        for i, p in enumerate(prompts["hits"]):
            kinds[f"h{r}.{i}"] = "hit"
            eng.add_request(f"h{r}.{i}", {"prompt_token_ids": p}, sp)
        for i, p in enumerate(misses[r]):
            kinds[f"m{r}.{i}"] = "miss"
            eng.add_request(f"m{r}.{i}", {"prompt_token_ids": p}, sp)
        first: dict[str, float] = {}
        while eng.has_unfinished_requests():
            for o in eng.step():
                if o.request_id not in first and o.outputs and o.outputs[0].token_ids:
                    first[o.request_id] = time.perf_counter() - t0
        for rid, t in first.items():
            if r > 0:
                out[kinds[rid]].append(t)
    with open(os.path.join(a.dir, a.mode + ".json"), "w") as f:
        json.dump(out, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hits", type=int, default=4)
    ap.add_argument("--misses", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--miss-tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--order", default="sync,async",
                    help="the modes, in the order their engines run")
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--socket", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.mode:
        return engine_main(a)

    build = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
    if not os.path.isabs(build):
        build = os.path.join(ROOT, build)
    env = dict(os.environ, KVSHARE_LIB=os.path.join(build, "libkvshare.so"),
               VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"))
    d = tempfile.mkdtemp(prefix="kvs-bench-async-")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests/vllm/make_model.py"),
                    os.path.join(d, "model"), f"--layers={a.layers}", f"--hidden={a.hidden}",
                    f"--heads={a.heads}", f"--kv-heads={a.kv_heads}",
                    f"--head-dim={a.head_dim}", f"--max-pos={a.tokens + 64}"],
                   check=True, capture_output=True, env=env)
    rng = random.Random(2)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(4, 512) for _ in range(n)]

    json.dump({"hits": [prompt(a.tokens + 1) for _ in range(a.hits)],
               # each mode its own: what one engine publishes would hit in the other
               "misses": {mode: [[prompt(a.miss_tokens) for _ in range(a.misses)]
                                 for _ in range(a.rounds + 1)] for mode in ("sync", "async")}},
              open(os.path.join(d, "prompts.json"), "w"))
    sock = os.path.join(d, "kvshared.sock")
    kv_bytes = a.layers * 2 * a.tokens * a.kv_heads * a.head_dim * 4
    daemon = subprocess.Popen([os.path.join(build, "kvshared"), "--socket", sock, "--host-size",
                               str(4 * a.hits * kv_bytes + (256 << 20))],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    res = {}
    try:
        args = [f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items()
                if k not in ("mode", "dir", "socket", "order")]
        for mode in a.order.split(","):
            t0 = time.time()
            r = subprocess.run([sys.executable, __file__, "--mode", mode, "--dir", d,
                                "--socket", sock, *args],
                               env=env, capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"bench_async_load: the {mode} engine failed:\n{r.stdout[-3000:]}"
                         f"{r.stderr[-3000:]}")
            res[mode] = json.load(open(os.path.join(d, mode + ".json")))
            res[mode]["worker"] = json.load(open(os.path.join(d, mode + ".worker")))
            print(f"# {mode} engine: {time.time() - t0:.0f} s", file=sys.stderr)
    finally:
        daemon.terminate()
        daemon.wait()
    print(f"model: {a.layers} layers, hidden {a.hidden}, {a.kv_heads} KV heads, head_dim "
          f"{a.head_dim}, fp32; {a.hits} hits of {a.tokens} tokens "
          f"({kv_bytes / 2**20:.0f} MiB of KV each) and {a.misses} misses of "
          f"{a.miss_tokens} tokens a round, {a.rounds} rounds")
    for mode, r in res.items():
        w = r["worker"]
        print(f"load_async {mode:5}: miss TTFT p50 {pct(r['miss'], .5) * 1e3:7.0f} ms "
              f"p99 {pct(r['miss'], .99) * 1e3:7.0f} ms; hit TTFT p50 "
              f"{pct(r['hit'], .5) * 1e3:7.0f} ms p99 {pct(r['hit'], .99) * 1e3:7.0f} ms; "
              f"loaded {w['loaded_blocks']} blocks, {w['load_errors']} errors, "
              f"{w['async_loads']} async, {w['async_load_steps']} steps past a load")


if __name__ == "__main__":
    main()
