"""kvshared --kv-events: the pool as vLLM KV events, decoded with vLLM's own
classes (vllm.distributed.kv_events, msgspec), from a real daemon."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

import kvshare

kv_events = pytest.importorskip("vllm.distributed.kv_events",
                                reason="vLLM is not installed in this interpreter")
zmq = pytest.importorskip("zmq")
msgspec = pytest.importorskip("msgspec")

# Beside the daemon the fixtures start (conftest.py's KVSHARED; not imported:
# tests/vllm/conftest.py may be the "conftest" of the run).
_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_BUILD = os.path.join(_ROOT, os.environ.get("BUILD_DIR", "build"))
KVSCTL = os.environ.get("KVSCTL", os.path.join(_BUILD, "kvsctl"))
L = kvshare.Layout(model="ev-model", layers=2, kv_heads=2, head_dim=64, block_tokens=16)
END_SEQ = (-1).to_bytes(8, "big", signed=True)


class Stream:
    """A SUB socket on the daemon's PUB endpoint, decoding every batch."""

    def __init__(self, ctx: zmq.Context, endpoint: str, topic: bytes = b"") -> None:
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        self.sub.connect(endpoint)
        self.dec = msgspec.msgpack.Decoder(type=kv_events.KVEventBatch)

    def recv(self, timeout_s: float = 10.0) -> tuple[bytes, int, kv_events.KVEventBatch]:
        assert self.sub.poll(int(timeout_s * 1000)), "no batch in time"
        topic, seq, payload = self.sub.recv_multipart()
        return topic, int.from_bytes(seq, "big"), self.dec.decode(payload)

    def events(self, n: int, seqs: list[int]) -> list:
        """At least @n events, in order, recording each batch's seq."""
        out: list = []
        while len(out) < n:
            _, seq, batch = self.recv()
            seqs.append(seq)
            out.extend(batch.events)
        return out


def connected(stream: Stream, daemon_socket: str) -> None:
    """ZMQ's subscription reaches the PUB socket asynchronously: publish
    probes until one arrives, so that no later event is missed."""
    with kvshare.Client(daemon_socket, kvshare.Layout(model="probe", layers=1, kv_heads=1,
                                                      head_dim=8, block_tokens=16)) as c:
        for i in range(200):
            with c.reserve(c.hash_tokens(list(range(i * 16, i * 16 + 16)))):
                pass
            if stream.sub.poll(50):
                break
        else:
            raise AssertionError("the subscription never took")
    while stream.sub.poll(200):  # the probes' batches
        stream.sub.recv_multipart()


def kvsctl(sock: str, *args: str) -> None:
    subprocess.run([KVSCTL, "--socket", sock, *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def block_key(h) -> bytes:
    """kvshare's hash as the events name a block without a side record."""
    return int(h["hi"]).to_bytes(8, "big") + int(h["lo"]).to_bytes(8, "big")


@pytest.fixture
def zctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def test_stores_removals_flush_in_order(start_daemon, tmp_path, zctx):
    pub, rep = f"ipc://{tmp_path}/ev", f"ipc://{tmp_path}/rep"
    d = start_daemon(["--host-size", "64M", "--kv-events", pub,
                      "--kv-events-replay", rep, "--kv-events-topic", "kv@node@ev-model"])
    s = Stream(zctx, pub, b"kv@")
    connected(s, d.socket)
    seqs: list[int] = []
    with kvshare.Client(d.socket, L) as c:
        hashes = c.hash_tokens(list(range(100, 100 + 4 * 16)))
        with c.reserve(hashes):
            pass
        topic, seq, batch = s.recv()
        seqs.append(seq)
        assert topic == b"kv@node@ev-model" and batch.data_parallel_rank == 0
        stored = batch.events
        assert [type(e) for e in stored] == [kv_events.BlockStored] * 4
        keys = [block_key(h) for h in hashes]
        assert [e.block_hashes for e in stored] == [[k] for k in keys]
        assert [e.parent_block_hash for e in stored] == [None] + keys[:3]
        for e in stored:
            assert (e.medium, e.locality, e.ownership) == ("CPU", "LOCAL", "kvshare")
            assert e.block_size == 16 and e.token_ids == [] and e.lora_name is None
        # An evicted prefix: its leaf first, each a removal from host RAM.
        kvsctl(d.socket, "evict", "--prefix", "%016x%016x" % (int(hashes[2]["hi"]),
                                                               int(hashes[2]["lo"])))
        removed = s.events(2, seqs)
        assert [type(e) for e in removed] == [kv_events.BlockRemoved] * 2
        assert [e.block_hashes for e in removed] == [[keys[3]], [keys[2]]]
        assert all(e.medium == "CPU" and e.ownership == "kvshare" for e in removed)
        kvsctl(d.socket, "flush", "--all")
        flushed = [e.block_hashes[0] for e in s.events(2, seqs)]  # the probes' too
        assert set(keys[:2]) <= set(flushed) and not set(keys[2:]) & set(flushed)
        st = c.stats()
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs  # no gap
    assert st["kv_events.batches"] == seqs[-1] + 1
    assert st["kv_events.published"] >= 8 and st["kv_events.dropped"] == 0


def test_replay_gives_a_late_subscriber_what_it_missed(start_daemon, tmp_path, zctx):
    pub, rep = f"ipc://{tmp_path}/ev", f"ipc://{tmp_path}/rep"
    d = start_daemon(["--host-size", "64M", "--kv-events", pub, "--kv-events-replay", rep])
    with kvshare.Client(d.socket, L) as c:  # no subscriber yet
        for i in range(3):
            with c.reserve(c.hash_tokens(list(range(i * 1000, i * 1000 + 32)))):
                pass
        assert c.stats()["kv_events.batches"] == 3
    r = zctx.socket(zmq.DEALER)  # as a REQ would, with the empty delimiter
    r.setsockopt(zmq.LINGER, 0)
    r.connect(rep)
    dec = msgspec.msgpack.Decoder(type=kv_events.KVEventBatch)

    def replay(start: int) -> list[tuple[int, kv_events.KVEventBatch]]:
        r.send_multipart([b"", start.to_bytes(8, "big")])
        got = []
        while True:
            assert r.poll(10000), "no replay answer"
            empty, topic, seq, payload = r.recv_multipart()
            assert empty == b"" and topic == b""
            if seq == END_SEQ:
                assert payload == b""
                return got
            got.append((int.from_bytes(seq, "big"), dec.decode(payload)))

    got = replay(0)
    assert [seq for seq, _ in got] == [0, 1, 2]
    assert all(len(b.events) == 2 and isinstance(b.events[0], kv_events.BlockStored)
               for _, b in got)
    assert [seq for seq, _ in replay(2)] == [2]
    assert replay(3) == []
    # A malformed request is counted and ignored; the socket keeps serving.
    r.send_multipart([b"", b"xyz"])
    assert [seq for seq, _ in replay(1)] == [1, 2]
    with kvshare.Client(d.socket) as c:
        st = c.stats()
    assert st["kv_events.replays"] == 4 and st["kv_events.replay_bad"] == 1


def test_tier_moves_are_removal_then_store(start_daemon, tmp_path, zctx):
    pub = f"ipc://{tmp_path}/ev"
    ssd = tmp_path / "ssd"
    ssd.mkdir()
    d = start_daemon(["--host-size", "4M", "--page-size", "64K", "--ssd-dir", str(ssd),
                      "--ssd-size", "16M", "--ssd-segment", "4M", "--kv-events", pub])
    s = Stream(zctx, pub)
    connected(s, d.socket)
    big = kvshare.Layout(model="ev-big", layers=2, kv_heads=8, head_dim=128, block_tokens=16)
    moved: dict[bytes, list[tuple[str, str]]] = {}
    with kvshare.Client(d.socket, big) as c:  # 64 KiB blocks: 4 MiB holds ~60
        for i in range(120):
            with c.reserve(c.hash_tokens(list(range(i * 16, i * 16 + 16)))):
                pass
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if not s.sub.poll(500):
                if any(("STORAGE", "stored") in v for v in moved.values()):
                    break
                continue
            for e in s.recv()[2].events:
                kind = "stored" if isinstance(e, kv_events.BlockStored) else "removed"
                moved.setdefault(e.block_hashes[0], []).append((e.medium, kind))
    down = [v for v in moved.values() if ("STORAGE", "stored") in v]
    if not down:
        pytest.skip("no block reached the SSD tier here (its writes refused: "
                    f"see the daemon's log) {d.log()[-300:]}")
    for v in down:  # each: stored in RAM, removed from it, then stored on SSD
        i = v.index(("STORAGE", "stored"))
        assert v[:i][-2:] == [("CPU", "stored"), ("CPU", "removed")], v


def test_side_records_name_blocks_as_the_engine_does(start_daemon, tmp_path, zctx):
    pub = f"ipc://{tmp_path}/ev"
    d = start_daemon(["--host-size", "64M", "--kv-events", pub])
    s = Stream(zctx, pub)
    connected(s, d.socket)
    toks = list(range(500, 500 + 3 * 16))
    engine = [bytes([i]) * 32 for i in (1, 2, 3)]  # sha256-sized, as vLLM's
    with kvshare.Client(d.socket, L) as c:
        hashes = c.hash_tokens(toks)
        recs = [kvshare.BlockDesc(hash=hashes[i], engine_hash=engine[i],
                                  parent_hash=engine[i - 1] if i else None,
                                  token_ids=toks[16 * i:16 * i + 16], block_size=16,
                                  lora_name="my-lora", extra_keys=("salt-1",))
                for i in range(3)]
        recs[2].engine_hash = 2**63 + 5  # an int hash (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES)
        with c.reserve(hashes):
            assert c.describe(recs) == 3
        stored = s.events(3, [])
        assert [e.block_hashes for e in stored] == [[engine[0]], [engine[1]], [2**63 + 5]]
        assert [e.parent_block_hash for e in stored] == [None, engine[0], engine[1]]
        assert [e.token_ids for e in stored] == [toks[:16], toks[16:32], toks[32:]]
        for e in stored:
            assert e.lora_name == "my-lora" and e.block_size == 16
            assert e.extra_keys == [("salt-1",)]
        assert c.stats()["kv_events.side_records"] == 3
        # Published already: the block keeps the record it was published with.
        assert c.describe(recs[:1]) == 0
        # A hash the namespace does not hold is skipped.
        other = c.hash_tokens(list(range(9000, 9016)))
        assert c.describe([kvshare.BlockDesc(other[0], b"x", None, [1], 16)]) == 0
        # Its removal names the engine's hash; the record goes with the block.
        kvsctl(d.socket, "flush", "--all")
        removed = [e.block_hashes[0] for e in s.events(3, [])]
        assert set(engine[:2]) | {2**63 + 5} <= set(removed)
        assert c.stats()["kv_events.side_records"] == 0


def test_hostile_side_records_are_refused(start_daemon, tmp_path):
    import ctypes

    from kvshare._lib import CBlockDesc, lib

    d = start_daemon(["--host-size", "64M", "--kv-events", f"ipc://{tmp_path}/ev"])
    with kvshare.Client(d.socket, L) as c:
        hashes = c.hash_tokens(list(range(32)))
        with pytest.raises(ValueError):  # caught before the wire
            c.describe([kvshare.BlockDesc(hashes[0], b"h" * 65, None, [], 16)])
        with pytest.raises(ValueError):
            c.describe([kvshare.BlockDesc(hashes[0], b"h", None, [0] * 4097, 16)])
        garbage = ctypes.create_string_buffer(b"\xc1\xff", 2)  # not msgpack
        h = ctypes.create_string_buffer(b"h" * 8, 8)
        r = CBlockDesc(hash_lo=int(hashes[0]["lo"]), hash_hi=int(hashes[0]["hi"]),
                       hash_kind=1, hash_len=8, engine_hash=ctypes.cast(h, ctypes.c_void_p),
                       block_size=16, extra_len=2,
                       extra=ctypes.cast(garbage, ctypes.c_void_p))
        with c.reserve(hashes):
            rc = lib.kvs_describe(c._handle(), ctypes.byref(r), 1, None)
            assert rc == kvshare.errors.E_PROTO
            r.hash_len = 65  # past the bound: the library refuses to send it
            assert lib.kvs_describe(c._handle(), ctypes.byref(r), 1, None) == -22
        st = c.stats()  # the daemon keeps serving this connection
        assert st["kv_events.side_bad"] == 1 and st["kv_events.side_records"] == 0
        assert c.query(hashes) == 2


def test_replay_answers_in_pages(start_daemon, tmp_path, zctx):
    pub, rep = f"ipc://{tmp_path}/ev", f"ipc://{tmp_path}/rep"
    d = start_daemon(["--host-size", "64M", "--kv-events", pub, "--kv-events-replay", rep])
    with kvshare.Client(d.socket, L) as c:
        for i in range(300):  # a batch each
            with c.reserve(c.hash_tokens(list(range(i * 16, i * 16 + 16)))):
                pass
        assert c.stats()["kv_events.batches"] == 300
    r = zctx.socket(zmq.DEALER)
    r.setsockopt(zmq.LINGER, 0)
    r.connect(rep)

    def replay(start: int) -> list[int]:
        r.send_multipart([b"", start.to_bytes(8, "big")])
        got = []
        while True:
            assert r.poll(10000), "no replay answer"
            _, _, seq, _ = r.recv_multipart()
            if seq == END_SEQ:
                return got
            got.append(int.from_bytes(seq, "big"))

    # At most 256 batches an answer, always ended; the rest asked for again.
    assert replay(0) == list(range(256))
    assert replay(256) == list(range(256, 300))


# ---- the pool in an engine's own stream (the connector's take_events) -----

def _publish(c: kvshare.Client, toks: list[int], tag: int, describe: bool = True) -> list[bytes]:
    """A chain of full blocks, each described with a made-up engine hash
    (32 bytes, as vLLM's sha256); returns those hashes."""
    hashes = c.hash_tokens(toks)
    eng = [bytes([tag, i]) * 16 for i in range(len(hashes))]
    with c.reserve(hashes):
        if describe:
            c.describe([kvshare.BlockDesc(hash=hashes[i], engine_hash=eng[i],
                                          parent_hash=eng[i - 1] if i else None,
                                          token_ids=toks[16 * i:16 * i + 16], block_size=16)
                        for i in range(len(hashes))])
    return eng


def _take_until(pe, want: int, timeout_s: float = 10.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < want and time.monotonic() < deadline:
        out.extend(pe.take())
        time.sleep(0.02)
    return out


def test_pool_events_keep_this_models_blocks(start_daemon, tmp_path):
    from kvshare import _vllm_events as ev

    pub, rep = f"ipc://{tmp_path}/ev", f"ipc://{tmp_path}/rep"
    d = start_daemon(["--host-size", "64M", "--kv-events", pub, "--kv-events-replay", rep])
    other = kvshare.Layout(model="ev-other", layers=2, kv_heads=2, head_dim=64, block_tokens=16)
    salted = kvshare.Layout(model="ev-model", layers=2, kv_heads=2, head_dim=64,
                            block_tokens=16, salt="tenant-1")
    assert ev.ns_name(salted) == ev.ns_name(L) != ev.ns_name(other)
    with kvshare.Client(d.socket, L) as c, kvshare.Client(d.socket, other) as o, \
            kvshare.Client(d.socket, salted) as s:
        p1 = _publish(c, list(range(0, 32)), 1)            # seq 0: past the catch-up
        p2 = _publish(c, list(range(100, 132)), 2)         # 1: stored, then removed
        _publish(o, list(range(200, 232)), 3)              # 2: another model
        _publish(c, list(range(300, 332)), 4, describe=False)  # 3: no side record
        h2 = c.hash_tokens(list(range(100, 132)))
        kvsctl(d.socket, "evict", "--prefix", "%016x%016x" % (int(h2[0]["hi"]),
                                                               int(h2[0]["lo"])))  # 4
        p4 = _publish(c, list(range(400, 432)), 5)         # 5
        assert c.stats()["kv_events.batches"] == 6
        pe = ev.PoolEvents(pub, rep, ev.ns_name(L), 5, lambda: c.stats()["kv_events.batches"])
        try:
            # Catching up: the net state of the newest 5 batches, vLLM's classes.
            got = pe.take()
            assert [type(e) for e in got] == [kv_events.BlockStored] * 2
            assert [e.block_hashes for e in got] == [[h] for h in p4]
            assert got[0].token_ids == list(range(400, 416)) and got[1].parent_block_hash == p4[0]
            assert all((e.medium, e.locality, e.ownership) == ("CPU", "LOCAL", "kvshare")
                       for e in got)
            # Live (a subscription that took late is a gap, replayed): this
            # model's blocks, a salted namespace's included; no other model's.
            p5 = _publish(c, list(range(500, 532)), 6)
            _publish(o, list(range(600, 632)), 7)
            p6 = _publish(s, list(range(700, 732)), 8)
            got = _take_until(pe, 4)
            assert [e.block_hashes[0] for e in got] == p5 + p6, got
            # Removals: of the blocks this stream reported, never of p1 (it
            # told no BlockStored of it).
            kvsctl(d.socket, "flush", "--all")
            got = _take_until(pe, 6)
            assert all(isinstance(e, kv_events.BlockRemoved) and e.medium == "CPU"
                       and e.ownership == "kvshare" for e in got)
            assert sorted(e.block_hashes[0] for e in got) == sorted(p4 + p5 + p6)
            assert not set(p1 + p2) & {e.block_hashes[0] for e in got}
            # A gap (the subscriber away) is filled from the replay socket.
            pe.sub.disconnect(pub)
            p7 = _publish(c, list(range(800, 832)), 9)
            pe.sub.connect(pub)
            got = []
            for i in range(200):  # until the subscription is back
                _publish(o, list(range(1000 + 16 * i, 1016 + 16 * i)), 10)
                got.extend(pe.take())
                if pe.next == c.stats()["kv_events.batches"]:
                    break
                time.sleep(0.02)
            assert [e.block_hashes[0] for e in got] == p7 and pe.lost == 0
        finally:
            pe.close()
