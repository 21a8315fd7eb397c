"""What the vLLM tests share: where the build is, the tiny model's shape, a
real kvshared on a socket, the connectors' stats files, and deadlines.

BUILD_DIR (default build/ of this checkout) holds kvshared, kvsctl and
libkvshare.so; KVSHARED, KVSCTL and KVSHARE_LIB name them one by one.
KVSHARE_LIB is set here before kvshare is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
os.environ.setdefault("KVSHARE_LIB", os.path.join(BUILD, "libkvshare.so"))
KVSHARED = os.environ.get("KVSHARED", os.path.join(BUILD, "kvshared"))
KVSCTL = os.environ.get("KVSCTL", os.path.join(BUILD, "kvsctl"))

import kvshare  # noqa: E402

BT = 32  # vLLM block_size = kvshare block_tokens
ENGINE_TIMEOUT = 900
MODEL = dict(layers=4, hidden=256, heads=4, kv_heads=2, head_dim=64)


def make_model(path) -> None:
    """The tiny random Llama (MODEL) and its word-level tokenizer, at @path."""
    args = [f"--{k.replace('_', '-')}={v}" for k, v in MODEL.items()]
    subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), str(path), *args],
                   check=True, capture_output=True, timeout=300)


def engine_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per engine
    return env


def daemon_stats(sock: str) -> dict[str, int]:
    with kvshare.Client(sock) as c:
        return c.stats()


def start_daemon(sock: str, log) -> subprocess.Popen:
    """kvshared on @sock, once it answers."""
    d = subprocess.Popen([KVSHARED, "--socket", sock, "--host-size", "256M"],
                         stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            daemon_stats(sock)
            return d
        except kvshare.NoDaemonError:
            assert time.monotonic() < deadline and d.poll() is None, "kvshared did not start"
            time.sleep(0.05)


def stop_daemon(d: subprocess.Popen) -> None:
    if d.poll() is None:
        d.terminate()
        try:
            d.wait(timeout=30)
        except subprocess.TimeoutExpired:
            d.kill()
            d.wait()


def counters(path) -> dict:
    """A connector side's stats_file (PATH.scheduler, PATH.worker); {} until written."""
    return json.loads(path.read_text()) if path.exists() else {}


def wait_until(what: str, fn, timeout: float = 10):
    """fn() once it is truthy, polled until @timeout seconds; else AssertionError
    naming @what and fn's last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            assert v, f"{what}: not within {timeout}s (last: {v!r})"
            return v
        time.sleep(0.05)


class Engine:
    """run_engine.py in a process of its own, its output and log in @work."""

    def __init__(self, work, model, name: str, prompts, *extra: str) -> None:
        self.out = work / f"{name}.out.json"
        self.log = work / f"{name}.log"
        pfile = work / f"{name}.prompts.json"
        pfile.write_text(json.dumps(prompts))
        cmd = [sys.executable, os.path.join(HERE, "run_engine.py"), "--model",
               str(model), "--prompts", str(pfile), "--out", str(self.out), *extra]
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     env=engine_env())

    def rounds(self, n: int) -> list:
        """Wait until the engine has written n rounds of outputs."""
        deadline = time.monotonic() + ENGINE_TIMEOUT
        while time.monotonic() < deadline:
            if self.out.exists():
                r = json.loads(self.out.read_text())
                if len(r) >= n:
                    return r
            if self.proc.poll() is not None and not (
                    self.out.exists() and len(json.loads(self.out.read_text())) >= n):
                break
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"engine gave no round {n}; log tail:\n{self.tail()}")

    def wait(self) -> None:
        assert self.proc.wait(timeout=ENGINE_TIMEOUT) == 0, self.tail()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]
