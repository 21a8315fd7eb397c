"""A real vLLM engine with KvshareConnector ("describe": true) publishes a
prompt; the daemon's vLLM KV events (kvshared --kv-events) name its blocks
as vLLM does: vLLM's own block hashes and token ids, decoded with vLLM's own
classes, and a router-style consumer that hashes those token ids with
vLLM's hash function gets the same keys."""

from __future__ import annotations

import json
import random
import subprocess
import time

import pytest

from vllm_support import KVSHARED, Engine, counters, daemon_stats

zmq = pytest.importorskip("zmq")
msgspec = pytest.importorskip("msgspec")
kv_events = pytest.importorskip("vllm.distributed.kv_events")

BLOCK = 32  # run_engine.py's --block-size


def replay_all(endpoint: str) -> list:
    """Every batch the daemon kept, through its replay socket."""
    ctx = zmq.Context()
    r = ctx.socket(zmq.DEALER)
    r.setsockopt(zmq.LINGER, 0)
    r.connect(endpoint)
    dec = msgspec.msgpack.Decoder(type=kv_events.KVEventBatch)
    r.send_multipart([b"", (0).to_bytes(8, "big")])
    events = []
    try:
        while True:
            assert r.poll(10000), "no replay answer"
            _, _, seq, payload = r.recv_multipart()
            if seq == b"\xff" * 8:
                return events
            events.extend(dec.decode(payload).events)
    finally:
        ctx.destroy(linger=0)


def test_the_pool_is_published_with_vllms_block_hashes(tmp_path, tiny_model):
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core import kv_cache_utils as kcu

    rng = random.Random(11)
    prompt = [rng.randrange(4, 512) for _ in range(9 * BLOCK + 7)]  # 9 full blocks
    sock, rep = str(tmp_path / "kvshared.sock"), f"ipc://{tmp_path}/rep"
    log = open(tmp_path / "kvshared.log", "w")
    daemon = subprocess.Popen([KVSHARED, "--socket", sock, "--host-size", "256M",
                               "--kv-events", f"ipc://{tmp_path}/ev",
                               "--kv-events-replay", rep], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                daemon_stats(sock)
                break
            except Exception:
                assert daemon.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        # The reader starts alongside, and runs the prompt once the writer
        # has published it.
        go = tmp_path / "go"
        reader = Engine(tmp_path, tiny_model, "reader", [prompt], "--socket", sock,
                        "--max-tokens", "2",
                        "--rounds", "2", "--go-file", str(go), "--wait-first",
                        "--kv-events", f"ipc://{tmp_path}/reader-ev",
                        "--kv-events-replay", f"ipc://{tmp_path}/reader-rep",
                        "--extra", json.dumps({"describe": True,
                                               "pool_events": f"ipc://{tmp_path}/ev",
                                               "pool_events_replay": rep}))
        try:
            writer = Engine(tmp_path, tiny_model, "writer", [prompt], "--socket", sock,
                            "--stats-file", str(tmp_path / "writer"),
                            "--extra", json.dumps({"describe": True}))
            writer.wait()
            assert counters(tmp_path / "writer.worker")["published_blocks"] == 9
            st = daemon_stats(sock)
            assert st["kv_events.side_records"] == 9 and st["kv_events.side_bad"] == 0
            stored = [e for e in replay_all(rep) if isinstance(e, kv_events.BlockStored)]
            (tmp_path / "go.0").touch()
            reader.rounds(1)
            own = replay_all(f"ipc://{tmp_path}/reader-rep")  # the reader's own stream
            (tmp_path / "go.1").touch()
            reader.wait()
        finally:
            reader.stop()
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    assert len(stored) == 9
    assert [e.token_ids for e in stored] == [prompt[i * BLOCK:(i + 1) * BLOCK]
                                             for i in range(9)]
    # What a router does with an engine's own events: hash the token ids
    # along the chain with the engine's hash function (sha256, vLLM's
    # default, whose first parent is fixed across processes).
    # The events carry them as vLLM's own do (maybe_convert_block_hash: an
    # int under VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, else the bytes).
    fn = get_hash_fn_by_name("sha256")
    kcu.init_none_hash(fn)
    parent = None
    for e in stored:
        want = kcu.hash_block_tokens(fn, parent, tuple(e.token_ids), None)
        assert e.block_hashes == [kcu.maybe_convert_block_hash(want)]
        assert e.parent_block_hash == (kcu.maybe_convert_block_hash(parent)
                                       if parent is not None else None)
        assert (e.block_size, e.medium, e.ownership) == (BLOCK, "CPU", "kvshare")
        parent = want

    # The reader's own stream: the pool's blocks of its model, the writer's,
    # as the daemon told them (medium CPU, ownership kvshare: not the
    # engine's GPU cache), and its own GPU blocks of the same prompt once it
    # loaded them, under the same keys: a router that follows only engines
    # credits the reader with the writer's prefix.
    pool = [e for e in own if isinstance(e, kv_events.BlockStored) and e.ownership == "kvshare"]
    assert [e.block_hashes for e in pool] == [e.block_hashes for e in stored]
    assert [e.token_ids for e in pool] == [e.token_ids for e in stored]
    assert all((e.medium, e.locality, e.block_size) == ("CPU", "LOCAL", BLOCK) for e in pool)
    gpu = {h for e in own if isinstance(e, kv_events.BlockStored) and e.medium == "GPU"
           for h in e.block_hashes}
    assert {e.block_hashes[0] for e in pool} <= gpu
