"""kvshare.sglang.KvshareHiCacheStorage through SGLang's own code on a CPU.

Each SGLang rank is a process of its own (sglang_peer.py: SGLang is never
imported in this process, whose other tests run vLLM), with the backend
built by SGLang's StorageBackendFactory from the "dynamic" config and given
SGLang's real host pool (MHATokenToKVPoolHost / MLATokenToKVPoolHost on CPU
tensors), against a real kvshared. Pages are SGLang's own chained keys
(get_hash_str); a page's bytes are a pattern of its key, written and checked
through the host pool's get_page_buffer_meta(), so "right" below means the
bytes one process stored are the bytes the other loaded, region by region.

Skipped, with the reason, when SGLang's modules cannot be imported (the
package could not be installed: scripts/python_env.sh,
tests/sglang/requirements.txt).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import kvshare

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "sglang_peer.py")
DAEMON_ARGS = ["--host-size", "16M", "--gpu", "off"]
START_S = 300  # importing SGLang takes 20 s on a busy 2-core machine
CALL_S = 60


class Peer:
    """A sglang_peer.py process: call(op, **args) sends a request and
    returns its answer (an error in the peer fails the test)."""

    def __init__(self, name: str, log_dir: str) -> None:
        env = dict(os.environ)
        pkg = os.path.dirname(os.path.dirname(os.path.abspath(kvshare.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg, env.get("PYTHONPATH")) if p)
        # SGLang's page keys come from a C++ extension torch builds at first
        # use with ninja: the venv's (tests/sglang/requirements.txt), which
        # is on PATH only where the venv was activated.
        env["PATH"] = os.pathsep.join(p for p in (os.path.dirname(sys.executable),
                                                  env.get("PATH")) if p)
        self.name = name
        self.err_path = os.path.join(log_dir, f"{name}.stderr")
        self.err = open(self.err_path, "w")
        self.p = subprocess.Popen([sys.executable, PEER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err, text=True, env=env)
        self.lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.p.stdout:  # type: ignore[union-attr]
            self.lines.put(line)
        self.lines.put("")

    def stderr(self) -> str:
        self.err.flush()
        with open(self.err_path, errors="replace") as f:
            return f.read()[-3000:]

    def ready(self) -> None:
        try:
            line = self.lines.get(timeout=START_S)
        except queue.Empty:
            line = ""
        if line and json.loads(line).get("ready"):
            return
        self.p.wait(timeout=30)
        err = self.stderr()
        if "ModuleNotFoundError" in err or "ImportError" in err:
            failed = os.path.join(os.path.dirname(os.path.dirname(sys.executable)),
                                  ".kvshare-sglang-failed")
            why = open(failed).read()[-500:] if os.path.exists(failed) else ""
            pytest.skip("SGLang's HiCache modules do not import here (install "
                        f"tests/sglang/requirements.txt): {err.strip().splitlines()[-1]} {why}")
        raise AssertionError(f"{self.name} did not start: {err}")

    def __call__(self, op: str, **args):
        self.p.stdin.write(json.dumps({"op": op, **args}) + "\n")  # type: ignore[union-attr]
        self.p.stdin.flush()  # type: ignore[union-attr]
        try:
            line = self.lines.get(timeout=CALL_S)
        except queue.Empty:
            raise AssertionError(f"{self.name}: no answer to {op} in {CALL_S} s")
        if not line:
            raise AssertionError(f"{self.name} died: {self.stderr()}")
        res = json.loads(line)
        if "error" in res:
            raise AssertionError(f"{self.name}: {op}: {res['error']}")
        return res["ok"]

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.stdin.close()  # type: ignore[union-attr]
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
        self.err.close()


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    """Two SGLang ranks in two processes, started together, for the module."""
    d = str(tmp_path_factory.mktemp("sglang-peers"))
    a, b = Peer("rank-a", d), Peer("rank-b", d)
    try:
        a.ready()
        b.ready()
        yield a, b
    finally:
        a.close()
        b.close()


def stats(d) -> dict:
    with kvshare.Client(d.socket) as c:
        return c.stats()


def keys_of(peer, pages: int, seed: int = 0) -> list:
    return peer("keys", tokens=list(range(seed, seed + pages * 4)))


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_chain_between_processes(peers, start_daemon, layout):
    """One rank batch_set_v1s a chain (two batches, the second after the
    first through prefix_keys), the other batch_exists and batch_get_v1s it:
    every byte equal; the counters reach the daemon's engines stats."""
    a, b = peers
    d = start_daemon(DAEMON_ARGS)
    info = a("backend", socket=d.socket, layout=layout)
    assert info["backend"] == "kvshare.sglang.KvshareHiCacheStorage"
    assert info["host_pool"].endswith("MHATokenToKVPoolHost")
    assert info["regions"] == (4 if layout == "layer_first" else 2)  # K, V (x layers)
    assert b("backend", socket=d.socket, layout=layout)["model"] == info["model"]
    keys = keys_of(a, 8)
    assert a("set", keys=keys[:4], prefix=[], slot=0) == [True] * 4
    assert a("set", keys=keys[4:], prefix=keys[:4], slot=4) == [True] * 4
    assert b("exists", keys=keys, prefix=[]) == 8
    r = b("get", keys=keys, slot=10)
    assert r["kind"] == "list[bool]"
    assert r["got"] == [True] * 8
    assert r["right"] == [True] * 8
    a("close")
    b("close")
    s = stats(d)
    assert s["blocks.committed"] == 8
    assert s["blocks.reserve_exists"] == 1  # the second batch's parent
    assert s["engines.published_blocks"] == 8
    assert s["engines.loaded_blocks"] == 8
    assert s["engines.hit_tokens"] == 8 * 4


def test_batch_mid_chain(peers, start_daemon):
    """Batches that start mid-chain: exists and get of pages after ones the
    reader already has; a set whose first pages are stored and the rest not."""
    a, b = peers
    d = start_daemon(DAEMON_ARGS)
    a("backend", socket=d.socket)
    b("backend", socket=d.socket)
    keys = keys_of(a, 10, seed=100)
    assert a("set", keys=keys[:3], prefix=[], slot=0) == [True] * 3
    assert a("set", keys=keys[3:8], prefix=keys[:3], slot=3) == [True] * 5
    assert b("exists", keys=keys[3:], prefix=keys[:3]) == 5
    r = b("get", keys=keys[5:8], prefix=keys[:5], slot=12)
    assert r["got"] == [True] * 3 and r["right"] == [True] * 3
    # keys[6:8] are stored, keys[8:10] not: two EXISTS, two NEW.
    assert b("set", keys=keys[6:10], prefix=keys[:6], slot=20) == [True] * 4
    c = b("counters")
    assert c["existing_blocks"] == 2 and c["published_blocks"] == 2
    assert a("exists", keys=keys, prefix=[]) == 10
    r = a("get", keys=keys[8:], prefix=keys[:8], slot=14)
    assert r["right"] == [True, True]


def test_missing_page_in_the_middle(peers, start_daemon):
    """Page 3 of 6 was never stored: exists stops at it, get loads the pages
    before it and says False from it on, and a batch after it is not stored
    (its parent is not cached: kvshare never holds a child without it)."""
    a, b = peers
    d = start_daemon(DAEMON_ARGS)
    a("backend", socket=d.socket)
    b("backend", socket=d.socket)
    keys = keys_of(a, 6, seed=200)
    assert a("set", keys=keys[:3], prefix=[], slot=0) == [True] * 3
    assert b("exists", keys=keys, prefix=[]) == 3
    r = b("get", keys=keys, slot=10)
    assert r["got"] == [True] * 3 + [False] * 3
    assert r["right"] == [True] * 3 + [False] * 3
    assert a("set", keys=keys[4:], prefix=keys[:4], slot=4) == [False, False]
    c = a("counters")
    assert c["noparent_blocks"] == 2 and c["skipped_blocks"] == 2
    assert stats(d)["blocks.reserve_noparent"] == 2
    assert b("exists", keys=keys[4:], prefix=keys[:4]) == 0
    # Without prefix_keys (SGLang's default) a batch is a chain of its own.
    assert a("set", keys=keys[4:], prefix=None, slot=4) == [True, True]
    assert b("exists", keys=keys[4:], prefix=keys[:4]) == 2
    assert b("exists", keys=keys, prefix=[]) == 3


def test_daemon_killed_and_back(peers, start_daemon):
    """Killed: every call misses at once (no exception, no wait for a
    deadline); back on the same socket: the backend connects again by
    itself and pages go through again."""
    a, b = peers
    d = start_daemon(DAEMON_ARGS)
    a("backend", socket=d.socket)
    keys = keys_of(a, 8, seed=300)
    assert a("set", keys=keys[:4], prefix=[], slot=0) == [True] * 4
    d.stop(signal.SIGKILL)
    t0 = time.monotonic()
    assert a("set", keys=keys[4:], prefix=keys[:4], slot=4) == [False] * 4
    assert a("exists", keys=keys, prefix=[]) == 0
    r = a("get", keys=keys[:4], slot=10)
    assert r["got"] == [False] * 4 and r["kind"] == "list[bool]"
    assert time.monotonic() - t0 < 10  # generous: each is a refused connect, not a deadline
    assert a("counters")["daemon_errors"] >= 1
    d.start()
    deadline = time.monotonic() + 30
    while a("set", keys=keys[:4], prefix=[], slot=0) != [True] * 4:
        assert time.monotonic() < deadline, "the backend did not reconnect"
    assert a("set", keys=keys[4:], prefix=keys[:4], slot=4) == [True] * 4
    b("backend", socket=d.socket)
    r = b("get", keys=keys, slot=12)
    assert r["right"] == [True] * 8


def test_busy_page_is_a_miss(peers, start_daemon):
    """A page another client is writing (BUSY) is not stored and not waited
    for: it and the pages after it answer False; once that writer is gone
    the same batch goes through."""
    from kvshare._lib import lib

    a, _ = peers
    d = start_daemon(DAEMON_ARGS)
    info = a("backend", socket=d.socket)
    keys = keys_of(a, 4, seed=900)
    layout = kvshare.Layout(**info["layout"])
    seed = lib.kvs_hash_layout_seed(layout._c())
    h = lib.kvs_hash_key(seed, keys[2].encode(), len(keys[2]))
    hashes = np.array([(h.lo, h.hi)], dtype=kvshare.HASH_DTYPE)
    with kvshare.Client(d.socket, layout) as other:
        w = other.reserve(hashes)  # the same page, being written elsewhere
        assert w.new == [0]
        t0 = time.monotonic()
        assert a("set", keys=keys, prefix=[], slot=0) == [True, True, False, False]
        assert time.monotonic() - t0 < 10  # a miss, not a wait
        c = a("counters")
        assert c["skipped_blocks"] == 2 and c["published_blocks"] == 2
        w.abort()
    assert a("set", keys=keys[2:], prefix=keys[:2], slot=2) == [True, True]
    assert a("exists", keys=keys, prefix=[]) == 4


def test_mla_rank0_writes_all_read(peers, start_daemon):
    """MLA: every rank holds the same pages, so rank 0 stores them and the
    others read rank 0's (one namespace); rank 1's sets store nothing."""
    a, b = peers
    d = start_daemon(DAEMON_ARGS)
    info = a("backend", socket=d.socket, mla=True, tp_rank=0, tp_size=2)
    assert info["host_pool"].endswith("MLATokenToKVPoolHost")
    assert b("backend", socket=d.socket, mla=True, tp_rank=1, tp_size=2)["model"] == info["model"]
    keys = keys_of(a, 4, seed=400)
    assert a("set", keys=keys, prefix=[], slot=0) == [True] * 4
    assert b("exists", keys=keys, prefix=[]) == 4
    r = b("get", keys=keys, slot=10)
    assert r["right"] == [True] * 4
    other = keys_of(a, 4, seed=500)
    assert b("set", keys=other, prefix=[], slot=4) == [True] * 4  # rank 0 stores them
    assert a("exists", keys=other, prefix=[]) == 0
    assert stats(d)["blocks.committed"] == 4


def test_mha_ranks_do_not_share(peers, start_daemon):
    """MHA: each tensor-parallel rank holds its own heads: its own namespace."""
    a, b = peers
    d = start_daemon(DAEMON_ARGS)
    a("backend", socket=d.socket, tp_rank=0, tp_size=2)
    b("backend", socket=d.socket, tp_rank=1, tp_size=2)
    keys = keys_of(a, 2, seed=600)
    assert a("set", keys=keys, prefix=[], slot=0) == [True, True]
    assert b("exists", keys=keys, prefix=[]) == 0
    assert a("exists", keys=keys, prefix=[]) == 2


def test_plain_interface(peers, start_daemon):
    """Without interface_v1 SGLang calls batch_set/batch_get/exists with its
    flat data pages: stored by one rank, loaded by the other, bytes equal."""
    a, b = peers
    d = start_daemon(DAEMON_ARGS)
    assert a("backend", socket=d.socket, interface_v1=0)["model"].endswith("|flat")
    b("backend", socket=d.socket, interface_v1=0)
    keys = keys_of(a, 3, seed=700)
    assert a("plain", do="set", keys=keys, slot=0) is True
    r = b("plain", do="get", keys=keys, slot=8)
    assert r["got"] == [True] * 3 and r["right"] == [True] * 3
    assert r["exists"] == [True] * 3


EXPECT = {
    "get_short_indices": "list[bool]", "set_short_indices": "list[bool]",
    "get_not_keys": "list[bool]", "set_not_keys": "list[bool]", "exists_not_keys": "int",
    "get_bad_indices": "list[bool]", "set_bad_prefix": "list[bool]",
    "plain_get_none": "list[None]", "plain_get_bad_target": "list[None]",
    "plain_set_bad_value": "bool", "plain_set_none": "bool", "get_one_none": "NoneType",
    "plain_set_small_values": "bool", "plain_get_few_targets": "list[None]",
    "plain_get_small_targets": "list[None]", "v2_exists": "int", "clear": "bool", "get_meta_fails": "list[bool]",
    "set_meta_fails": "list[bool]",
}


def test_error_paths_answer_misses(peers, start_daemon):
    """Every error path answers what SGLang's threads expect (a list of
    booleans, an int, None, False), a miss, and raises nothing: bad
    arguments (page buffers fewer than the keys, or smaller than a page:
    nothing copied), a failing host pool, no host pool yet, no daemon."""
    a, b = peers
    d = start_daemon(DAEMON_ARGS)
    a("backend", socket=d.socket)
    keys = keys_of(a, 3, seed=800)
    out = a("errors", keys=keys)
    # Targets that cannot hold the stored pages missed; whole ones load.
    assert out.pop("plain_get_whole_targets") == [True] * 3
    assert out.pop("small_values_stored") == 0
    assert out.pop("bad_buffers_daemon_errors") == 0
    assert {k: v[0] for k, v in out.items()} == EXPECT
    for name, (kind, value) in out.items():
        if kind == "list[bool]":
            assert value == [False] * 3, name
        elif kind == "list[None]":
            assert value == [None] * 3, name
        elif kind in ("int", "bool"):
            assert not value, name
    assert a("counters")["errors"] > 0
    # No host pool registered yet: misses.
    b("backend", socket=d.socket, unregistered=True)
    assert b("set", keys=keys, prefix=[], slot=0) == [False] * 3
    assert b("exists", keys=keys, prefix=[]) == 0
    assert b("get", keys=keys, slot=0)["got"] == [False] * 3
    # No daemon at all: misses.
    d.stop()
    b("backend", socket=d.socket)
    assert b("set", keys=keys, prefix=[], slot=0) == [False] * 3
    assert b("exists", keys=keys, prefix=[]) == 0
    assert b("get", keys=keys, slot=0) == {"got": [False] * 3, "right": [False] * 3,
                                            "kind": "list[bool]"}
    assert b("counters")["daemon_errors"] >= 1
