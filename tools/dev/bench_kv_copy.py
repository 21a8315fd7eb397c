"""The connector's copies against memcpy: GB/s of a publish (reserve, store
every layer out of vLLM's CPU paged layout, commit) and of a load (every
layer back into the pages), each against a plain copy of the same bytes.

    python tools/dev/bench_kv_copy.py [--blocks 64] [--layers 32] [--kv-heads 8]
        [--head-dim 128] [--block-tokens 16] [--dtype bf16] [--reps 5]

Starts its own kvshared (BUILD_DIR/kvshared, default build/) on a socket in
a temp dir; KVSHARE_LIB defaults to BUILD_DIR/libkvshare.so. Prints the
best of --reps for each.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
os.environ.setdefault("KVSHARE_LIB", os.path.join(BUILD, "libkvshare.so"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kvshare  # noqa: E402

TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def best(reps: int, fn) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-tokens", type=int, default=16)
    ap.add_argument("--dtype", default="bf16", choices=sorted(TORCH))
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    n, L, H, D, T = a.blocks, a.layers, a.kv_heads, a.head_dim, a.block_tokens
    layout = kvshare.Layout(model="bench-kv-copy", layers=L, kv_heads=H, head_dim=D,
                            block_tokens=T, dtype=a.dtype)
    pages = 2 * n
    kv = [torch.randn(pages, H, T, 2 * D).to(TORCH[a.dtype]) for _ in range(L)]
    ids = list(range(n))
    nbytes = n * layout.block_bytes
    tmp = tempfile.mkdtemp(prefix="bench-kv-copy-")
    sock = os.path.join(tmp, "kvshared.sock")
    mib = max(64, 4 * nbytes >> 20)
    d = subprocess.Popen([os.path.join(BUILD, "kvshared"), "--socket", sock,
                          "--host-size", f"{mib}M"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                c = kvshare.Client(sock, layout)
                break
            except kvshare.NoDaemonError:
                assert time.monotonic() < deadline and d.poll() is None, "no kvshared"
                time.sleep(0.05)
        cache = kvshare.PagedCache.for_tensor(kv[0], "cpu", H, D)
        rep = [0]

        def publish() -> None:
            rep[0] += 1
            w = c.reserve(c.hash_tokens([rep[0]] * (n * T)))
            for layer in range(L):
                w.store(layer, cache, kv[layer], ids)
            w.commit()

        def load() -> None:
            with c.lookup(c.hash_tokens([rep[0]] * (n * T))) as lease:  # the last published
                for layer in range(L):
                    lease.load(layer, cache, kv[layer], [n + i for i in ids])

        src = np.empty(nbytes, np.uint8)
        src[:] = 1
        dst = np.empty_like(src)
        t_pub = best(a.reps, publish)
        t_load = best(a.reps, load)
        t_mem = best(a.reps, lambda: np.copyto(dst, src))
        gb = nbytes / 1e9
        print(f"{n} blocks of {layout.block_bytes} bytes ({L} layers, {H} kv heads, "
              f"head_dim {D}, {T} tokens, {a.dtype}): {nbytes / 2**20:.0f} MiB")
        print(f"memcpy   {t_mem * 1e3:8.2f} ms  {gb / t_mem:6.2f} GB/s")
        print(f"publish  {t_pub * 1e3:8.2f} ms  {gb / t_pub:6.2f} GB/s  "
              f"({t_mem / t_pub:.2f}x memcpy)")
        print(f"load     {t_load * 1e3:8.2f} ms  {gb / t_load:6.2f} GB/s  "
              f"({t_mem / t_load:.2f}x memcpy)")
        c.close()
    finally:
        d.terminate()
        d.wait()


if __name__ == "__main__":
    main()
