"""Fixtures: a real kvshared in a temp directory for each test that asks.

KVSHARED names the daemon binary (default: build/kvshared of this checkout);
KVSHARE_LIB the library (default: build/libkvshare.so), set before kvshare
is imported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
os.environ.setdefault("KVSHARE_LIB", os.path.join(BUILD, "libkvshare.so"))
KVSHARED = os.environ.get("KVSHARED", os.path.join(BUILD, "kvshared"))


class Daemon:
    """kvshared on a socket in a temp dir; started, killed, restarted."""

    def __init__(self, tmp: str, args: list[str]) -> None:
        self.socket = os.path.join(tmp, "kvshared.sock")
        self.log_path = os.path.join(tmp, "kvshared.log")
        self.args = args
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Daemon":
        import kvshare

        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([KVSHARED, "--socket", self.socket, *self.args],
                                     stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while True:
            try:
                kvshare.Client(self.socket).close()
                return self
            except kvshare.NoDaemonError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"kvshared did not start: {self.log()}")
                time.sleep(0.01)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(str(tmp_path), ["--host-size", "64M"]).start()
    yield d
    d.stop()


@pytest.fixture
def start_daemon(tmp_path):
    """A factory: start_daemon(args) is a started Daemon with those flags,
    stopped at the end of the test. (Tests take it as a fixture rather than
    importing Daemon from "conftest": with tests/vllm/conftest.py in the
    same run, that name may be the other file.)"""
    started: list[Daemon] = []

    def start(args: list[str]) -> Daemon:
        d = Daemon(str(tmp_path), args).start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


@pytest.fixture
def small_daemon(tmp_path):
    """A host tier of 4 MiB: room for few blocks."""
    d = Daemon(str(tmp_path), ["--host-size", "4M"]).start()
    yield d
    d.stop()
