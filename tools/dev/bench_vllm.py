"""Time to first token through vLLM with a cached prefix: loaded from kvshared
by KvshareConnector, against recomputing it and against vLLM's own
in-process prefix cache, side by side in one run; and the connector's load
bandwidth against memcpy of the same bytes.

    py=$(scripts/python_env.sh)
    $py tools/dev/bench_vllm.py [--tokens 4096] [--reps 3] [--layers 8] [--hidden 1024]

Needs the built kvshared (BUILD_DIR, default build/). Builds a random Llama
(no download), starts its own kvshared, and runs two engines one after the
other, with VLLM_CPU_OMP_THREADS_BIND covering every core:

  writer   prefills --reps prompts of --tokens tokens and publishes them;
  reader   a fresh process: for each prompt in turn, interleaved, the TTFT of
           the published prompt (every full block loaded from kvshared), of
           the same prompt again (now in vLLM's own in-process prefix cache:
           the limit, no copy at all), of that in-process hit after a memcpy
           of the hit's bytes (what a hit that copies at memcpy speed would
           cost, the copy's effects on the forward included) and of a
           prompt of the same length that nothing has cached (recompute).
           Before each kvshare hit it waits --settle seconds: the last fresh
           prompt's publish, copied off the step, would share the cores.

All of them are measured in one engine, side by side, so that machine noise and
engine settings are the same for each (vLLM keeps a core free by default, but
not with a connector configured). TTFT here is the wall time of generate()
with max_tokens=1 for one request.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def engine_main(a: argparse.Namespace) -> None:
    """One engine, in its own process: the role's measurements as JSON."""
    from vllm import LLM, SamplingParams

    extra = {"socket": a.socket, "model_id": "bench", "log_interval": 0,
             "stats_file": os.path.join(a.dir, a.role),
             "overlap": True if a.overlap else None, **json.loads(a.extra)}
    kw = {"kv_transfer_config": {
        "kv_connector": "KvshareConnector",
        "kv_connector_module_path": "kvshare.vllm_connector",
        "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": extra}}
    if a.profile:  # the engine core and the model in this process, for cProfile
        kw["distributed_executor_backend"] = "uni"
    llm = LLM(model=os.path.join(a.dir, "model"), dtype="float32", block_size=32,
              max_model_len=a.tokens + 64, enforce_eager=True, seed=0, max_num_seqs=1,
              enable_prefix_caching=True, **kw)
    sp = SamplingParams(temperature=0, max_tokens=1)
    prompts = json.load(open(os.path.join(a.dir, "prompts.json")))

    out: dict[str, list[float]] = {}
    profiles: dict[str, object] = {}

    def ttft(p: list[int], what: str = "") -> float:
        prof = None
        if a.profile and what:
            import cProfile

            prof = profiles.setdefault(what, cProfile.Profile())
            prof.enable()
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        llm.generate([{"prompt_token_ids": p}], sp, use_tqdm=False)
        t = time.perf_counter() - t0
        if prof is not None:
            prof.disable()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
            out.setdefault(f"page_faults_{what}", []).append(faults)
        return t

    if a.role == "writer":
        out["publish_run"] = [ttft(p) for p in prompts["cached"]]
    else:
        ttft(prompts["warmup"])  # first-run costs out of the way
        out["kvshare_hit"], out["local_hit"], out["recompute"] = [], [], []
        out["copied_hit"] = []
        # The bytes a kvshare hit copies, for an in-process hit after a
        # memcpy of as many (both arrays touched: no page fault timed).
        import numpy as np

        nbytes = a.layers * 2 * a.tokens * a.kv_heads * a.head_dim * 4
        src, dst = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
        for r in range(a.reps):
            # The last fresh prompt's publish (its blocks copied off the
            # step, 64 MiB by default) ends first: without the wait this
            # hit shared the cores with it (96 against 69 ms measured).
            time.sleep(a.settle)
            out["kvshare_hit"].append(ttft(prompts["cached"][r], "kvshare_hit"))
            out["local_hit"].append(ttft(prompts["cached"][r], "local_hit"))
            t0 = time.perf_counter()
            np.copyto(dst, src)
            out["copied_hit"].append(time.perf_counter() - t0
                                     + ttft(prompts["cached"][r]))
            out["recompute"].append(ttft(prompts["fresh"][r]))
    with open(os.path.join(a.dir, a.role + ".json"), "w") as f:
        json.dump(out, f)
    for what, prof in profiles.items():
        path = os.path.join(a.profile, f"{what}.prof")
        prof.dump_stats(path)
        print(f"# cProfile of the reader's {what} runs: {path}", file=sys.stderr)


def library_load_gbps(sock: str, a: argparse.Namespace, tokens: list[int]) -> float:
    """kvs_kv_load alone (no model computing beside it): every layer of the
    published prompt's blocks into a vLLM CPU-layout cache, best of 5."""
    import numpy as np
    import torch

    import kvshare

    lay = kvshare.Layout(model="bench", layers=a.layers, kv_heads=a.kv_heads,
                         head_dim=a.head_dim, block_tokens=32, dtype="fp32")
    with kvshare.Client(sock, lay) as c:
        with c.lookup(c.hash_tokens(tokens[: a.tokens])) as r:
            n = r.hits
            layers = [torch.zeros(n, a.kv_heads, 32, 2 * a.head_dim) for _ in range(a.layers)]
            cache = c.paged_cache(layers[0], "cpu")
            ids = np.arange(n).reshape(n, 1)
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                for layer in range(a.layers):
                    r.load(layer, cache, layers[layer], ids)
                best = min(best, time.perf_counter() - t0)
            return n * c.block_bytes / best / 1e9


def memcpy_gbps(nbytes: int) -> float:
    import numpy as np

    src = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--overlap", action="store_true",
                    help="the connector loads layer by layer while the model computes "
                         "(its default on a GPU; on a CPU it loads first, on two threads)")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds the reader waits before each kvshare hit, for the last "
                         "fresh prompt's publish to end")
    ap.add_argument("--host-hugepages", action="store_true",
                    help="the daemon's arena on 2 MiB huge pages (reserve them first: "
                         "vm.nr_hugepages, (2 * reps + 2) * 32 of them at the defaults)")
    ap.add_argument("--extra", default="{}",
                    help="more of the connector's extra config, as JSON (load_threads: 1)")
    ap.add_argument("--profile", metavar="DIR",
                    help="cProfile the reader's hits into DIR/kvshare_hit.prof and "
                         "DIR/local_hit.prof (the engine core and model in one process: "
                         "timings are not comparable with a run without it)")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--socket", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role:
        return engine_main(a)

    build = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
    if not os.path.isabs(build):
        build = os.path.join(ROOT, build)
    env = dict(os.environ, KVSHARE_LIB=os.path.join(build, "libkvshare.so"),
               **({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if a.profile else {}),
               VLLM_CPU_OMP_THREADS_BIND=f"0-{os.cpu_count() - 1}",
               VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"))
    d = tempfile.mkdtemp(prefix="kvs-bench-vllm-")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests/vllm/make_model.py"),
                    os.path.join(d, "model"), f"--layers={a.layers}", f"--hidden={a.hidden}",
                    f"--heads={a.heads}", f"--kv-heads={a.kv_heads}",
                    f"--head-dim={a.head_dim}", f"--max-pos={a.tokens + 64}"],
                   check=True, capture_output=True, env=env)
    rng = random.Random(1)
    n = a.tokens + 1  # the last token is always computed

    def prompt() -> list[int]:
        return [rng.randrange(4, 512) for _ in range(n)]

    json.dump({"cached": [prompt() for _ in range(a.reps)], "warmup": prompt()[:256],
               "fresh": [prompt() for _ in range(a.reps)]},
              open(os.path.join(d, "prompts.json"), "w"))
    sock = os.path.join(d, "kvshared.sock")
    kv_bytes = a.layers * 2 * a.tokens * a.kv_heads * a.head_dim * 4
    daemon = subprocess.Popen([os.path.join(build, "kvshared"), "--socket", sock,
                               # the cached prompts, and the fresh ones the
                               # reader publishes too: nothing is evicted
                               "--host-size", str((2 * a.reps + 1) * kv_bytes + (64 << 20)),
                               *(["--host-hugepages"] if a.host_hugepages else [])],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for role in ("writer", "reader"):
            t0 = time.time()
            r = subprocess.run([sys.executable, __file__, "--role", role, "--dir", d,
                                "--socket", sock, f"--tokens={a.tokens}", f"--reps={a.reps}",
                                *(["--overlap"] if a.overlap else []), "--extra", a.extra,
                                f"--settle={a.settle}",
                                *(["--profile", os.path.abspath(a.profile)] if a.profile
                                  else [])],
                               env=env, capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"bench_vllm: the {role} engine failed:\n{r.stdout[-3000:]}"
                         f"{r.stderr[-3000:]}")
            print(f"# {role} engine: {time.time() - t0:.0f} s", file=sys.stderr)
        os.environ["KVSHARE_LIB"] = env["KVSHARE_LIB"]
        prompts = json.load(open(os.path.join(d, "prompts.json")))
        lib_gbps = library_load_gbps(sock, a, prompts["cached"][0])
    finally:
        daemon.terminate()
        daemon.wait()
    res = {role: json.load(open(os.path.join(d, role + ".json")))
           for role in ("writer", "reader")}
    worker = json.load(open(os.path.join(d, "reader.worker")))
    med = {k: statistics.median(v) for r in res.values() for k, v in r.items()}
    load_gbps = worker["loaded_bytes"] / worker["load_seconds"] / 1e9
    mc = memcpy_gbps(kv_bytes)
    print(f"model: {a.layers} layers, hidden {a.hidden}, {a.kv_heads} KV heads, head_dim "
          f"{a.head_dim}, fp32; prefix {a.tokens} tokens = {kv_bytes / 2**20:.0f} MiB of KV")
    print(f"TTFT recompute          {med['recompute']:8.3f} s  (runs "
          f"{', '.join(f'{x:.3f}' for x in res['reader']['recompute'])})")
    print(f"TTFT kvshare hit        {med['kvshare_hit']:8.3f} s  (runs "
          f"{', '.join(f'{x:.3f}' for x in res['reader']['kvshare_hit'])})")
    print(f"TTFT vLLM in-process    {med['local_hit']:8.3f} s  (runs "
          f"{', '.join(f'{x:.3f}' for x in res['reader']['local_hit'])})")
    print(f"TTFT in-process + memcpy {med['copied_hit']:8.3f} s  (runs "
          f"{', '.join(f'{x:.3f}' for x in res['reader']['copied_hit'])}: a memcpy of the "
          "hit's bytes on one thread, then the in-process hit)")
    print(f"speed-up over recompute  {med['recompute'] / med['kvshare_hit']:7.1f}x "
          f"(in-process hit: {med['recompute'] / med['local_hit']:.1f}x)")
    print(f"kvshare hit / in-process hit  {med['kvshare_hit'] / med['local_hit']:.2f}x "
          "(goal: at most 1.2x); over the in-process hit: kvshare "
          f"{(med['kvshare_hit'] - med['local_hit']) * 1e3:.1f} ms, memcpy + in-process "
          f"{(med['copied_hit'] - med['local_hit']) * 1e3:.1f} ms")
    want = a.reps * (a.tokens // 32)
    if worker["loaded_blocks"] != want or worker["load_errors"]:
        print(f"WARNING: {worker['loaded_blocks']} blocks loaded of {want}, "
              f"{worker['load_errors']} load errors: the hits were not all hits")
    print(f"connector load: {worker['loaded_bytes'] / 2**20:.0f} MiB in "
          f"{worker['loaded_blocks']} blocks, "
          f"{worker['load_seconds']:.3f} s = {load_gbps:.2f} GB/s; memcpy of "
          f"{kv_bytes / 2**20:.0f} MiB: {mc:.2f} GB/s ({load_gbps / mc:.2f}x; the copy thread "
          "shares the cores with the model's forward)")
    print(f"kvs_kv_load alone: {lib_gbps:.2f} GB/s ({lib_gbps / mc:.2f}x memcpy)")
    for k, v in res["reader"].items():
        if k.startswith("page_faults_"):
            print(f"{k.replace('_', ' ')}: {', '.join(map(str, v))} (minor faults a run)")


if __name__ == "__main__":
    main()
