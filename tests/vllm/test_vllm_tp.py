"""vLLM with tensor parallelism 2 (CPU backend, vLLM's mp executor, gloo)
end to end: a writer engine (TP=2) publishes a prompt through kvshared, each
rank its own KV heads in its own namespace (tp_rank 0 and 1); a reader engine
(TP=2, a fresh process) that shares the prompt's first three blocks loads
them on both ranks, and its greedy tokens are those of an engine (TP=2)
without the connector. With an MLA model (one latent namespace for every
rank): rank 0 alone publishes, both ranks of the reader load every block.

The ranks bind their OpenMP threads to halves of this process's CPUs
(VLLM_CPU_OMP_THREADS_BIND="A|B"; vLLM's "auto" binds rank N to NUMA node N,
which a one-node machine lacks); fewer than two CPUs is a skip. About three
minutes on 2 cores, nearly all of it engine start-up.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
# vllm_support first: it sets KVSHARE_LIB, which importing kvshare reads.
from vllm_support import (BT, HERE, MLA_LAYERS, MODEL, counters, daemon_stats,  # noqa: E402
                          engine_env, start_daemon, stop_daemon)

TP = 2
PREFIX = 3 * BT
ENGINE_TIMEOUT = 900


def omp_bind() -> str:
    """This process's CPUs split into TP contiguous lists: "0|1", "0-3|4-7"."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < TP:
        pytest.skip(f"TP={TP} needs {TP} CPUs (one per rank's OpenMP threads); "
                    f"this process may use {len(cpus)}")
    per = len(cpus) // TP
    return "|".join(",".join(str(c) for c in cpus[r * per:(r + 1) * per]) for r in range(TP))


def engine(work, model, name: str, prompt: list[int], *extra: str) -> subprocess.Popen:
    """run_engine.py with TP ranks on @prompt; its tokens go to NAME.out.json."""
    (work / f"{name}.prompts.json").write_text(json.dumps([prompt]))
    env = engine_env()
    env["VLLM_CPU_OMP_THREADS_BIND"] = omp_bind()
    cmd = [sys.executable, os.path.join(HERE, "run_engine.py"), "--model", str(model),
           "--prompts", str(work / f"{name}.prompts.json"),
           "--out", str(work / f"{name}.out.json"), "--tp", str(TP), "--max-tokens", "8",
           "--max-model-len", "512", *extra]
    return subprocess.Popen(cmd, stdout=open(work / f"{name}.log", "w"),
                            stderr=subprocess.STDOUT, env=env)


def worker_counters(work, name: str, rank: int) -> dict:
    """Engine @name's worker counters on tensor-parallel rank @rank (its
    stats_file: NAME.worker for rank 0, NAME.worker.RANK after)."""
    return counters(work / (f"{name}.worker" + (f".{rank}" if rank else "")))


def tokens(work, name: str, proc: subprocess.Popen) -> list[int]:
    """@proc's greedy tokens, once it exited 0 (else its log's tail)."""
    try:
        rc = proc.wait(timeout=ENGINE_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = (work / f"{name}.log").read_text(errors="replace")[-6000:]
    assert rc == 0, f"{name} exited {rc}:\n{log}"
    return json.loads((work / f"{name}.out.json").read_text())[0][0]


def test_tp2_engines_share_a_prefix(tmp_path, tiny_model):
    assert MODEL["kv_heads"] % TP == 0  # each rank holds kv_heads / TP heads
    omp_bind()  # skip before anything starts
    rng = random.Random(11)
    prefix = [rng.randrange(4, 512) for _ in range(PREFIX)]
    a = prefix + [rng.randrange(4, 512) for _ in range(20)]  # 116 tokens: 3 full blocks
    b = prefix + [rng.randrange(4, 512) for _ in range(10)]
    sock = str(tmp_path / "kvshared.sock")
    daemon = start_daemon(sock, open(tmp_path / "kvshared.log", "w"))
    procs: list[subprocess.Popen] = []
    try:
        conn = ["--socket", sock]
        # The baseline (no connector) and the writer side by side.
        base = engine(tmp_path, tiny_model, "baseline", b)
        writer = engine(tmp_path, tiny_model, "writer", a, *conn,
                        "--stats-file", str(tmp_path / "writer"))
        procs += [base, writer]
        tokens(tmp_path, "writer", writer)
        blocks = PREFIX // BT
        for rank in range(TP):
            w = worker_counters(tmp_path, "writer", rank)
            assert w["published_blocks"] == blocks and w["daemon_errors"] == 0, (rank, w)
        st = daemon_stats(sock)
        assert st["blocks.committed"] == TP * blocks, st
        assert st["namespaces.count"] == TP, st

        reader = engine(tmp_path, tiny_model, "reader", b, *conn,
                        "--stats-file", str(tmp_path / "reader"))
        procs.append(reader)
        got, want = tokens(tmp_path, "reader", reader), tokens(tmp_path, "baseline", base)
        assert got == want, f"reader {got} != baseline {want}"
        rs = counters(tmp_path / "reader.scheduler")
        assert rs["hit_tokens"] == PREFIX and rs["no_client"] == 0, rs
        for rank in range(TP):
            rw = worker_counters(tmp_path, "reader", rank)
            assert rw["loaded_blocks"] == blocks and rw["load_errors"] == 0, (rank, rw)
            # one rank's share: 4 layers x K and V x BT tokens x kv_heads / TP x 64 x fp32
            assert rw["loaded_bytes"] == blocks * 4 * 2 * BT * (MODEL["kv_heads"] // TP) \
                * MODEL["head_dim"] * 4, rw
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        stop_daemon(daemon)


MLA_BS = 16  # the CPU MLA backend's only block size
MLA_WIDTH = 576


def test_tp2_mla_engines_share_one_latent_namespace(tmp_path, mla_model):
    """MLA with TP=2 (vLLM's CPU MLA backend): every rank holds the same
    latent rows, so the writer's rank 0 alone publishes, into one namespace
    (tp 0 of 1), and both of the reader's ranks load every block from it.

    The reader's tokens are not compared with the writer's: after a hit
    this backend computes the prompt's rest with other kernels than a
    whole prefill (its context-merge prefill, or its decode kernel for one
    token), and those disagree with its whole prefill by themselves
    (docs/vllm.md, "MLA"), so greedy tokens of a random model can differ
    with bit-exact rows loaded. The reader must finish its tokens."""
    omp_bind()
    rng = random.Random(13)
    full = 4
    p = [rng.randrange(4, 512) for _ in range(full * MLA_BS + 6)]
    sock = str(tmp_path / "kvshared.sock")
    daemon = start_daemon(sock, open(tmp_path / "kvshared.log", "w"))
    procs: list[subprocess.Popen] = []
    mla = ["--socket", sock, "--block-size", str(MLA_BS), "--attention-backend", "CPU_MLA"]
    try:
        writer = engine(tmp_path, mla_model, "writer", p, *mla,
                        "--stats-file", str(tmp_path / "writer"))
        procs.append(writer)
        want = tokens(tmp_path, "writer", writer)
        w0, w1 = (worker_counters(tmp_path, "writer", r) for r in range(TP))
        assert w0["published_blocks"] == full and w0["daemon_errors"] == 0, w0
        assert w1["published_blocks"] == 0 and w1["daemon_errors"] == 0, w1  # one writer
        st = daemon_stats(sock)
        assert st["namespaces.count"] == 1 and st["blocks.committed"] == full, st

        reader = engine(tmp_path, mla_model, "reader", p, *mla,
                        "--stats-file", str(tmp_path / "reader"))
        procs.append(reader)
        got = tokens(tmp_path, "reader", reader)
        assert len(got) == len(want) == 8
        rs = counters(tmp_path / "reader.scheduler")
        assert rs["hit_tokens"] == full * MLA_BS and rs["no_client"] == 0, rs
        for rank in range(TP):  # every rank loads the whole latent block
            rw = worker_counters(tmp_path, "reader", rank)
            assert rw["loaded_blocks"] == full and rw["load_errors"] == 0, (rank, rw)
            assert rw["loaded_bytes"] == full * MLA_LAYERS * MLA_BS * MLA_WIDTH * 4, \
                (rank, rw)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stop_daemon(daemon)
