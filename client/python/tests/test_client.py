"""The kvshare Python package against a real kvshared."""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import kvshare

L = kvshare.Layout(model="py-test", layers=2, kv_heads=3, head_dim=32, block_tokens=32,
                   dtype="fp16")


def tokens(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 50000, n, dtype=np.uint32)


def stat(c: kvshare.Client, name: str) -> int:
    return c.stats()[name]


# ---- connecting, hashing, errors -------------------------------------------------


def test_connect_errors_carry_code_and_name(tmp_path):
    with pytest.raises(kvshare.NoDaemonError) as e:
        kvshare.Client(str(tmp_path / "nothing.sock"), L)
    assert e.value.code == -2015 and e.value.name == kvshare.strerror(-2015)
    assert isinstance(e.value, kvshare.Error)


def test_bad_layout(daemon):
    bad = kvshare.Layout(model="m", layers=0, kv_heads=1, head_dim=8, block_tokens=16)
    with pytest.raises(kvshare.LayoutError):
        kvshare.Client(daemon.socket, bad)
    with pytest.raises(ValueError):
        kvshare.Layout(model="m", layers=1, kv_heads=1, head_dim=8, block_tokens=16,
                       dtype="fp64")._c()


def test_hash_tokens_list_and_array_agree(daemon):
    with kvshare.Client(daemon.socket, L) as c:
        t = tokens(100, 1)
        a = c.hash_tokens(t)
        b = c.hash_tokens([int(x) for x in t])
        assert a.dtype == kvshare.HASH_DTYPE and len(a) == 3  # 100 // 32
        assert np.array_equal(a, b)
        assert np.array_equal(c.hash_tokens(t[:64]), a[:2])  # a chain: prefixes agree
        assert len(c.hash_tokens([])) == 0
        with pytest.raises(ValueError):
            c.hash_tokens([1, -2, 3])
        with pytest.raises(ValueError):
            c.hash_tokens([2**32])
        with pytest.raises(TypeError):
            c.lookup(np.zeros(3, dtype=np.uint64))


def test_control_only_client(daemon):
    with kvshare.Client(daemon.socket) as c:
        s = c.stats()
        assert s["clients.connected"] >= 1
        with pytest.raises(kvshare.Error) as e:
            c.hash_tokens(tokens(64, 1))
        assert e.value.code == -2008  # KVS_E_NOTATTACHED


def test_too_many_hashes(daemon):
    with kvshare.Client(daemon.socket, L) as c:
        h = np.zeros(kvshare.MAX_HASHES + 1, dtype=kvshare.HASH_DTYPE)
        with pytest.raises(kvshare.LimitError):
            c.lookup(h)


def test_closed_client_raises(daemon):
    c = kvshare.Client(daemon.socket, L)
    c.close()
    c.close()  # idempotent
    with pytest.raises(kvshare.DisconnectedError):
        c.hash_tokens(tokens(64, 1))


def test_library_found_through_env_and_version_checked(tmp_path):
    code = "import kvshare; print(kvshare.library_version())"
    env = dict(os.environ, KVSHARE_LIB=str(tmp_path / "missing.so"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "cannot load libkvshare" in r.stderr
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "(0, 4)", r.stderr


# ---- sharing, leases -------------------------------------------------------------


def _publish_child(socket: str, seed: int, q) -> None:
    with kvshare.Client(socket, L) as c:
        h = c.hash_tokens(tokens(32 * 5, seed))
        with c.reserve(h) as w:
            for i in w.new:
                w.view(i)[:] = np.random.default_rng(seed + i).integers(
                    0, 256, c.block_bytes, dtype=np.uint8)
        q.put(len(w.new))


def test_two_processes_share_a_prefix(daemon):
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_publish_child, args=(daemon.socket, 7, q))
    p.start()
    p.join(60)
    assert p.exitcode == 0 and q.get(timeout=5) == 5
    with kvshare.Client(daemon.socket, L) as c:
        h = c.hash_tokens(tokens(32 * 6, 7))  # one block more than published
        with c.lookup(h) as r:
            assert r.hits == 5 and len(r) == 5
            for i in range(5):
                want = np.random.default_rng(7 + i).integers(0, 256, c.block_bytes,
                                                            dtype=np.uint8)
                assert np.array_equal(r.view(i), want)
            assert all(b.status == kvshare.HIT and b.tier == kvshare.TIER_HOST
                       for b in r.blocks)
        with c.reserve(h) as w:  # only the sixth is missing
            assert w.new == [5] and w.statuses[:5] == [kvshare.EXISTS] * 5
            w.view(5)[:] = 1


def test_salt_isolates(daemon):
    a = kvshare.Client(daemon.socket, L)
    b = kvshare.Client(daemon.socket, kvshare.Layout(**{**L.__dict__, "salt": "tenant-b"}))
    t = tokens(64, 3)
    with a.reserve(a.hash_tokens(t)) as w:
        for i in w.new:
            w.view(i)[:] = 9
    assert a.namespace_id != b.namespace_id
    assert not np.array_equal(a.hash_tokens(t), b.hash_tokens(t))
    with b.lookup(b.hash_tokens(t)) as r:
        assert r.hits == 0
    with a.lookup(a.hash_tokens(t)) as r:
        assert r.hits == 2
    a.close()
    b.close()


def test_read_lease_releases_on_exit_and_refuses_after(daemon):
    with kvshare.Client(daemon.socket, L) as c:
        h = c.hash_tokens(tokens(96, 4))
        with c.reserve(h) as w:
            for i in w.new:
                w.view(i)[:] = i
        with c.lookup(h) as r:
            assert stat(c, "leases.active") == 1
        assert stat(c, "leases.active") == 0
        with pytest.raises(kvshare.LeaseReleased):
            r.view(0)
        with pytest.raises(kvshare.LeaseReleased):
            r.load(0, None, None, [])
        r.release()  # idempotent


def test_query_counts_and_pins_nothing(daemon):
    """Client.query: the cached prefix's length, with no lease, pin or hit
    counted; remote=True on a daemon without a remote tier is the same."""
    with kvshare.Client(daemon.socket, L) as c:
        h = c.hash_tokens(tokens(32 * 6, 11))
        assert c.query(h) == 0
        with c.reserve(h[:4]) as w:
            for i in w.new:
                w.view(i)[:] = i
        hits = stat(c, "blocks.lookup_hit")
        assert c.query(h) == 4
        assert c.query(h, remote=True) == 4
        assert c.query(h[:2]) == 2
        assert c.query(h[:0]) == 0
        assert stat(c, "leases.active") == 0
        assert stat(c, "blocks.lookup_hit") == hits
        assert stat(c, "blocks.query_asked") == 6 + 6 + 6 + 2
        with c.lookup(h) as r:
            assert r.hits == 4
            assert c.query(h) == 4  # the pins of a lease are no query's


def test_view_outliving_its_lease_keeps_the_pins(daemon):
    with kvshare.Client(daemon.socket, L) as c:
        h = c.hash_tokens(tokens(64, 5))
        with c.reserve(h) as w:
            for i in w.new:
                w.view(i)[:] = 40 + i
        with c.lookup(h) as r:
            v = r.view(1)[:16]  # a slice of a view holds it too
            with pytest.raises(ValueError):
                r.view(0)[0] = 1  # read-only
        assert stat(c, "leases.active") == 1  # v still pins the blocks
        assert stat(c, "leases.pinned_blocks") == 2
        assert (v == 41).all()
        del v
        gc.collect()
        assert stat(c, "leases.active") == 0


def test_view_outliving_its_client_keeps_the_mapping(daemon):
    c = kvshare.Client(daemon.socket, L)
    h = c.hash_tokens(tokens(32, 6))
    with c.reserve(h) as w:
        w.view(0)[:] = 77
    r = c.lookup(h)
    v = r.view(0)
    r.release()
    c.close()
    with pytest.raises(kvshare.DisconnectedError):
        c.stats()
    assert (v == 77).all()  # still mapped, still pinned: the handle closes with v
    del v, r
    gc.collect()
    with kvshare.Client(daemon.socket) as ctl:
        assert stat(ctl, "clients.attached") == 0


def test_write_lease_commits_on_exit_aborts_on_error(daemon):
    with kvshare.Client(daemon.socket, L) as c:
        h = c.hash_tokens(tokens(64, 8))
        with pytest.raises(RuntimeError):
            with c.reserve(h) as w:
                w.view(0)[:] = 1
                raise RuntimeError("prefill failed")
        assert w.ended
        with c.lookup(h) as r:
            assert r.hits == 0  # aborted: nothing published
        with c.reserve(h) as w:
            v = w.view(0)
            v[:] = 3
            w.view(1)[:] = 4
        assert not v.flags.writeable  # committed blocks are immutable
        with pytest.raises(kvshare.LeaseReleased):
            w.commit()
        with c.lookup(h) as r:
            assert r.hits == 2 and (r.view(0) == 3).all() and (r.view(1) == 4).all()
        with c.reserve(h) as w:
            assert w.new == [] and w.fresh == 0
            with pytest.raises(IndexError):
                w.view(0)  # EXISTS, not ours to write


def test_in_use_while_a_lease_or_view_holds_the_client(daemon):
    """in_use is what the vLLM connector closes idle clients by: a lease with
    nothing in it (no hit, nothing reserved) holds nothing."""
    with kvshare.Client(daemon.socket, L) as c:
        h = c.hash_tokens(tokens(64, 23))
        miss = c.lookup(h)
        assert miss.hits == 0 and not c.in_use
        w = c.reserve(h)
        assert c.in_use
        w.commit()
        assert not c.in_use
        nothing = c.reserve(h)  # every block EXISTS: lease 0
        assert nothing.new == [] and not c.in_use
        r = c.lookup(h)
        v = r.view(0)
        r.release()
        assert c.in_use  # the view keeps the pins
        del v
        gc.collect()
        assert not c.in_use
        del miss, nothing


def test_write_view_used_after_its_lease_ends_raises(daemon):
    """A write lease keeps no slot once it has ended: every view of it (and
    every array numpy derives from one that aliases the block) refuses to be
    used, and stays read-only even if its flag is set back."""
    with kvshare.Client(daemon.socket, L) as c:
        w = c.reserve(c.hash_tokens(tokens(64, 21)))
        v = w.view(0)
        part, halves, own = v[:16], v.view(np.float16), v + 1
        v[:] = 5
        assert (part == 5).all()
        w.commit()
        uses = [lambda: part[0], lambda: v.__setitem__(slice(None), 1), lambda: v + 1,
                lambda: np.copyto(part, 0), lambda: v.tobytes(), lambda: halves.sum(),
                lambda: v.copy(), lambda: list(part)]
        for use in uses:
            with pytest.raises(kvshare.LeaseReleased):
                use()
        v.flags.writeable = True  # numpy lets the flag be set back ...
        with pytest.raises(kvshare.LeaseReleased):
            v.fill(1)  # ... but the view still refuses
        own[0] = 1  # v + 1 is an array of its own, not the block's
        with c.lookup(c.hash_tokens(tokens(64, 21))) as r:
            assert r.hits == 2 and (r.view(0) == 5).all()
        w = c.reserve(c.hash_tokens(tokens(32, 22)))
        v = w.view(0)
        w.abort()
        with pytest.raises(kvshare.LeaseReleased):
            v[0] = 1


def test_full_cache(small_daemon):
    big = kvshare.Layout(model="big", layers=4, kv_heads=8, head_dim=128, block_tokens=64,
                         dtype="fp32")
    with kvshare.Client(small_daemon.socket, big) as c:
        h = c.hash_tokens(tokens(64 * 64, 9))  # 64 blocks of 1 MiB into 4 MiB
        w = c.reserve(h)
        try:
            assert 0 < len(w.new) < 64
            assert kvshare.FULL in w.statuses
        finally:
            w.abort()
        # Every slot pinned by a second write lease: nothing can be made.
        w1 = c.reserve(h)
        with pytest.raises(kvshare.FullError):
            c.reserve(c.hash_tokens(tokens(64 * 4, 10)))
        w1.abort()


def test_daemon_gone_then_back(daemon):
    c = kvshare.Client(daemon.socket, L)
    h = c.hash_tokens(tokens(64, 11))
    daemon.stop()
    with pytest.raises(kvshare.DisconnectedError):
        c.lookup(h)
    with pytest.raises(kvshare.NoDaemonError):
        c.reconnect()
    daemon.start()
    c.reconnect()
    with c.lookup(h) as r:
        assert r.hits == 0
    c.close()


def test_lookup_runs_without_the_gil(daemon):
    """Two threads, two clients: both make progress (ctypes releases the GIL
    around each library call)."""
    done = []

    def worker(seed: int) -> None:
        with kvshare.Client(daemon.socket, L) as c:
            h = c.hash_tokens(tokens(32 * 8, seed))
            for _ in range(200):
                with c.lookup(h):
                    pass
            done.append(seed)

    ts = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert sorted(done) == [1, 2]


# ---- moving KV between an engine's paged cache and blocks -----------------------


def page_rows(t: np.ndarray, kind: str, page: int, H: int, D: int) -> np.ndarray:
    """One page as [2][page_tokens][H][D], written out per kind (independent
    of the library's strides)."""
    if kind == "cpu":  # [pages][H][T][2D] read as [pages][H][2][T][D]
        T = t.shape[2]
        return t[page].reshape(H, 2, T, D).transpose(1, 2, 0, 3)
    if kind == "bhnc":  # [pages][H][T][2D], each token's K then V
        T = t.shape[2]
        return t[page].reshape(H, T, 2, D).transpose(2, 1, 0, 3)
    if kind == "nhd":
        return t[:, page]
    if kind == "hnd":
        return t[:, page].transpose(0, 2, 1, 3)
    return t[page]  # nhd_kv_inner


def make_engine(kind: str, pages: int, pt: int, H: int, D: int, dtype, rng) -> np.ndarray:
    shape = {"cpu": (pages, H, pt, 2 * D), "bhnc": (pages, H, pt, 2 * D),
             "nhd": (2, pages, pt, H, D), "hnd": (2, pages, H, pt, D),
             "nhd_kv_inner": (pages, 2, pt, H, D)}[kind]
    return rng.standard_normal(shape).astype(dtype)


def block_data(layers: list[np.ndarray], kind: str, ids: list[int], H: int, D: int):
    """The canonical block: [layers][2][block_tokens][H][D]."""
    return np.stack([np.concatenate([page_rows(t, kind, p, H, D) for p in ids], axis=1)
                     for t in layers])


KINDS = ["cpu", "bhnc", "nhd", "hnd", "nhd_kv_inner"]


@pytest.mark.parametrize("writer", KINDS)
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_store_load_round_trip_every_layout(daemon, writer, dtype):
    lay = kvshare.Layout(model=f"rt-{dtype}", layers=2, kv_heads=3, head_dim=32,
                         block_tokens=32, dtype=dtype)
    npd = np.float16 if dtype == "fp16" else np.float32
    rng = np.random.default_rng(abs(hash((writer, dtype))) % 2**32)
    H, D, nb = 3, 32, 3
    reader = KINDS[(KINDS.index(writer) + 1) % len(KINDS)]
    with kvshare.Client(daemon.socket, lay) as w, kvshare.Client(daemon.socket, lay) as r:
        wl = [make_engine(writer, 8, 16, H, D, npd, rng) for _ in range(2)]
        rl = [make_engine(reader, 5, 32, H, D, npd, rng) for _ in range(2)]
        wcache = w.paged_cache(wl[0], writer)
        rcache = r.paged_cache(rl[0], reader)
        wids = rng.permutation(8)[: nb * 2].reshape(nb, 2)  # 16-token pages, 2 per block
        rids = rng.permutation(5)[:nb].reshape(nb, 1)
        h = w.hash_tokens(tokens(32 * nb, 12))
        with w.reserve(h) as lease:
            for layer in range(2):
                assert lease.store(layer, wcache, wl[layer], wids) == nb
        with r.lookup(h) as lease:
            assert lease.hits == nb
            for i in range(nb):  # the bytes are the canonical layout
                want = block_data(wl, writer, list(wids[i]), H, D)
                assert lease.view(i).tobytes() == want.tobytes()
            before = [t.copy() for t in rl]
            for layer in (1, 0):
                lease.load(layer, rcache, rl[layer], rids)
        for i in range(nb):
            got = block_data(rl, reader, list(rids[i]), H, D)
            assert np.array_equal(got, block_data(wl, writer, list(wids[i]), H, D))
        untouched = sorted(set(range(5)) - set(rids.reshape(-1)))
        for layer in range(2):  # pages not loaded into are as they were
            for p in untouched:
                assert np.array_equal(page_rows(rl[layer], reader, p, H, D),
                                      page_rows(before[layer], reader, p, H, D))


# Scheme 2 (proto/kvs_kv_format.h): K per channel over the block's tokens
# (INT4: 32-token groups), V per token (INT4: 32-channel groups), each with a
# scale and zero point, and head_dim / 32 fp16 K channels. For INT8/INT4 the
# error is at most half a step, (group range) / qmax / 2 <= amax / qmax, with
# amax over the (layer, K|V, head) of the block.
@pytest.mark.parametrize("stored,bound,nbytes", [
    ("int8", 1 / 255, 12288 + 1536 + 1536 + 12 + 384),
    ("fp8_e4m3", 1 / 16, 12288 + 1536 + 1536 + 12 + 384),
    ("int4", 1 / 15, 6144 + 1536 + 1536 + 12 + 384)])
def test_quantized_namespace_round_trip(daemon, stored, bound, nbytes):
    lay = kvshare.Layout(model="q", layers=2, kv_heads=3, head_dim=32, block_tokens=32,
                         dtype=stored)
    rng = np.random.default_rng(13)
    H, D = 3, 32
    with kvshare.Client(daemon.socket, lay) as c:
        src = [make_engine("cpu", 4, 32, H, D, np.float32, rng) for _ in range(2)]
        dst = [np.zeros_like(t) for t in src]
        cache = c.paged_cache(src[0], "cpu")
        h = c.hash_tokens(tokens(64, 14))
        assert c.block_bytes == lay.block_bytes == nbytes
        with c.reserve(h) as w:
            for layer in range(2):
                w.store(layer, cache, src[layer], [[2], [0]])
        with c.lookup(h) as r:
            for layer in range(2):
                r.load(layer, cache, dst[layer], [[1], [3]])
        for i, (sp, dp) in enumerate([(2, 1), (0, 3)]):
            x = block_data(src, "cpu", [sp], H, D)
            y = block_data(dst, "cpu", [dp], H, D)
            amax = np.abs(x).max(axis=(2, 4), keepdims=True)
            err = np.abs(x - y)
            if stored != "fp8_e4m3":
                assert (err <= amax * bound * 1.001 + 1e-30).all()
            else:  # e4m3: 3 mantissa bits, relative to each value above the subnormals
                assert (err <= np.maximum(np.abs(x) * bound, amax / 448 * 2**-6) * 1.01).all()
            assert err.max() > 0  # it was quantized


def test_copy_errors(daemon):
    with kvshare.Client(daemon.socket, L) as c:
        rng = np.random.default_rng(15)
        t = make_engine("cpu", 4, 32, 3, 32, np.float16, rng)
        cache = c.paged_cache(t, "cpu")
        h = c.hash_tokens(tokens(64, 16))
        with c.reserve(h) as w:
            with pytest.raises(kvshare.InvalidArgument):
                w.store(2, cache, t, [[0], [1]])  # no layer 2
            with pytest.raises(kvshare.OutOfRange):
                w.store(0, cache, t, [[0], [4]])  # no page 4
            with pytest.raises(ValueError):
                w.store(0, cache, t, [[0]])  # ids for one block of two
            with pytest.raises(ValueError):
                w.store(0, cache, t.astype(np.float32), [[0], [1]])  # not this cache
            with pytest.raises(ValueError):
                c.paged_cache(np.zeros((4, 2, 32, 64), np.float16), "cpu")  # 2 heads, not 3
            with pytest.raises(TypeError):
                c.paged_cache(np.zeros((4, 3, 32, 64), np.float64), "cpu")
            with pytest.raises(ValueError):
                c.paged_cache(t, "nope")
            for layer in range(2):
                w.store(layer, cache, t, [[0], [1]])
        with c.lookup(h) as r:
            f32 = make_engine("cpu", 4, 32, 3, 32, np.float32, rng)
            with pytest.raises(kvshare.InvalidArgument):  # fp16 blocks, fp32 engine
                r.load(0, c.paged_cache(f32, "cpu"), f32, [[0], [1]])
            with pytest.raises(IndexError):
                r.load(0, cache, t, [[0], [1], [2]], count=3)


def test_torch_tensors(daemon):
    torch = pytest.importorskip("torch")
    lay = kvshare.Layout(model="torch", layers=1, kv_heads=2, head_dim=64, block_tokens=32,
                         dtype="bf16")
    with kvshare.Client(daemon.socket, lay) as c:
        src = torch.randn(6, 2, 32, 128, dtype=torch.bfloat16)
        dst = torch.zeros_like(src)
        cache = c.paged_cache(src, "bhnc")
        h = c.hash_tokens(tokens(64, 17))
        with c.reserve(h) as w:
            w.store(0, cache, src, [[4], [1]])
        with c.lookup(h) as r:
            r.load(0, cache, dst, [[0], [5]])
        assert torch.equal(dst[0], src[4]) and torch.equal(dst[5], src[1])
        assert not dst[1:5].any()


def test_load_a_range_of_hits(daemon):
    """load(first, count): the blocks vLLM has not computed itself."""
    rng = np.random.default_rng(18)
    with kvshare.Client(daemon.socket, L) as c:
        src = [make_engine("cpu", 4, 32, 3, 32, np.float16, rng) for _ in range(2)]
        dst = [np.zeros_like(t) for t in src]
        cache = c.paged_cache(src[0], "cpu")
        h = c.hash_tokens(tokens(32 * 4, 19))
        with c.reserve(h) as w:
            for layer in range(2):
                w.store(layer, cache, src[layer], [[0], [1], [2], [3]])
        with c.lookup(h) as r:
            for layer in range(2):
                r.load(layer, cache, dst[layer], [[3], [1]], first=1, count=2)
        for layer in range(2):
            assert np.array_equal(dst[layer][3], src[layer][1])  # hit 1 -> page 3
            assert np.array_equal(dst[layer][1], src[layer][2])  # hit 2 -> page 1
            assert not dst[layer][0].any() and not dst[layer][2].any()


def test_the_prompts_pages_serve_load_and_store(daemon):
    """One list, the pages of the whole prompt (its partial last block's
    page included), for a cold lookup (nothing loaded), the reserve (every
    block stored) and a lookup of fewer hits (the leading pages used)."""
    rng = np.random.default_rng(20)
    with kvshare.Client(daemon.socket, L) as c:
        src = make_engine("cpu", 5, 32, 3, 32, np.float16, rng)
        dst = np.zeros_like(src)
        cache = c.paged_cache(src, "cpu")
        prompt = tokens(32 * 4 + 7, 21)  # 4 full blocks and a partial one
        pages = [0, 1, 2, 3, 4]
        h = c.hash_tokens(prompt)
        with c.lookup(h) as r:
            assert r.hits == 0
            r.load(0, cache, dst, pages)  # nothing to load, nothing raised
        with c.reserve(h[:2]) as w:
            assert w.store(0, cache, src, pages) == 2
        with c.reserve(h) as w:
            assert w.store(0, cache, src, pages) == 2  # blocks 2 and 3; 0, 1 exist
        with c.lookup(h[:3]) as r:
            r.load(0, cache, dst, pages)
        assert np.array_equal(dst[:3], src[:3]) and not dst[3:].any()
        with pytest.raises(ValueError):
            with c.lookup(h) as r:
                r.load(0, cache, dst, pages[:3])  # 4 hits, 3 pages


def test_report_adds_to_the_daemon_stats(daemon):
    with kvshare.Client(daemon.socket, L) as c:
        c.report(hit_tokens=64, loaded_blocks=2, load_us=10)
        c.report(hit_tokens=32, published_blocks=1)
        s = c.stats()
        assert (s["engines.hit_tokens"], s["engines.loaded_blocks"], s["engines.load_us"],
                s["engines.published_blocks"]) == (96, 2, 10, 1)
        with pytest.raises(TypeError):
            c.report(nonsense=1)


def test_reserve_after_a_parent_this_client_did_not_send(daemon):
    """reserve_after: a chain that goes on from a block another client
    published (hashes[0], EXISTS, never reserved); after an absent parent
    nothing is reserved (every status NOPARENT, 5)."""
    with kvshare.Client(daemon.socket, L) as a, kvshare.Client(daemon.socket, L) as b:
        h = a.hash_tokens(tokens(32 * 5, 31))
        with a.reserve(h[:2]) as w:
            for i in w.new:
                w.view(i)[:] = 1
        with b.reserve_after(h[1:]) as w:
            assert w.statuses == [kvshare.EXISTS] + [kvshare.NEW] * 3
            for i in w.new:
                w.view(i)[:] = 2
        with a.lookup(h) as hit:
            assert len(hit) == 5
            assert hit.view(4)[0] == 2
        orphan = a.hash_tokens(tokens(32 * 3, 32))
        w = b.reserve_after(orphan)
        assert w.statuses == [5, 5, 5] and w.id == 0 and w.new == []
        with pytest.raises(kvshare.InvalidArgument):
            b.reserve_after(orphan[:0])


def test_read_and_write_regions(daemon):
    """A block from and into an engine's scattered page buffers in one call
    each; what the caller gets wrong is refused before a byte moves."""
    with kvshare.Client(daemon.socket, L) as c:
        bb = c.block_bytes
        h = c.hash_tokens(tokens(3 * 32, 41))
        cuts = [0, 100, bb // 2, bb]  # three regions a block, uneven
        sizes = np.array([cuts[i + 1] - cuts[i] for i in range(3)], dtype=np.uint64)
        src = [np.random.default_rng(i).integers(0, 256, bb, dtype=np.uint8) for i in range(3)]

        def regions(bufs, which):
            ptrs = [bufs[b].ctypes.data + cuts[r] for b in which for r in range(3)]
            return np.array(ptrs, dtype=np.uint64), np.tile(sizes, len(which))

        with c.reserve(h) as w:
            assert w.new == [0, 1, 2]
            with pytest.raises(ValueError):  # one region short
                w.write_regions([0], *(a[:2] for a in regions(src, [0])), 3)
            short = regions(src, [0])
            short[1][2] -= 1  # the block's regions total one byte less than block_bytes
            with pytest.raises(kvshare.InvalidArgument):
                w.write_regions([0], *short, 3)
            w.write_regions([2, 0, 1], *regions(src, [2, 0, 1]), 3)
        with pytest.raises(kvshare.LeaseReleased):
            w.write_regions([0], *regions(src, [0]), 3)
        with c.reserve(h) as w2:
            assert w2.new == []
            with pytest.raises(IndexError):  # committed: not this lease's to write
                w2.write_regions([0], *regions(src, [0]), 3)
        dst = [np.zeros(bb, dtype=np.uint8) for _ in range(3)]
        with c.lookup(h) as hit:
            assert len(hit) == 3
            for i in range(3):
                assert np.array_equal(hit.view(i), src[i])
            hit.read_regions(*regions(dst, [1, 2]), 3, first=1)
            assert not dst[0].any()
            assert all(np.array_equal(dst[i], src[i]) for i in (1, 2))
            with pytest.raises(IndexError):  # hits 1..3 of 3
                hit.read_regions(*regions(dst, [0, 1, 2]), 3, first=1, count=3)
            with pytest.raises(ValueError):  # 3 blocks' regions for hits 1..2
                hit.read_regions(*regions(dst, [0, 1, 2]), 3, first=1)
            over = regions(dst, [0])
            over[1][0] += 1  # a region past its share of the block
            with pytest.raises(kvshare.InvalidArgument):
                hit.read_regions(*over, 3, count=1)
            assert not dst[0].any()
            hit.read_regions(*regions(dst, [0]), 3, count=1)
            assert np.array_equal(dst[0], src[0])
        with pytest.raises(kvshare.LeaseReleased):
            hit.read_regions(*regions(dst, [0]), 3, count=1)
