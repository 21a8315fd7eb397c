"""What the installed kvshare wheel must do, run by tests/wheel/check.sh with
the interpreter of a fresh venv that holds only the wheel (and numpy): no
KVSHARE_LIB, no build tree, no PYTHONPATH.

    python check_wheel.py README.md

The package's library and programs are its own (kvshare/, kvshare/bin/),
link nothing outside the wheel but the system's base libraries, and never
libcuda; the daemon runs through its console script (started, ready,
stopped by SIGTERM with status 0); kvsctl stats reads it; a client round
trip returns the bytes it wrote; the README's Python quick start runs as
written against it; kvshare.vllm_connector imports as far as it can
without vLLM. Prints one "ok ..." line per check; the first failure raises.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

README = sys.argv[1]


def ok(what: str) -> None:
    print(f"check_wheel: ok {what}", flush=True)


def check_environment() -> str:
    assert "KVSHARE_LIB" not in os.environ, "KVSHARE_LIB must not be set"
    import kvshare

    lib = sys.modules["kvshare._lib"].lib  # (kvshare._lib is the CDLL itself)
    pkg = os.path.dirname(kvshare.__file__)
    assert pkg.startswith(sys.prefix), f"kvshare from {pkg}, not the venv {sys.prefix}"
    # One version: the wheel's is the package's (and CMake's, checked when built).
    dist = importlib.metadata.version("kvshare")
    assert dist == kvshare.__version__, f"wheel {dist}, package {kvshare.__version__}"
    want = os.path.join(pkg, "libkvshare.so.0")
    assert lib._name == want, f"loaded {lib._name}, not {want}"
    ok(f"kvshare {kvshare.__version__} loads its own {want} "
       f"(library {'.'.join(map(str, kvshare.library_version()))})")
    return pkg


def check_linkage(pkg: str) -> None:
    """Every ELF the wheel carries resolves all it needs, none of it libcuda."""
    elves = [os.path.join(pkg, "libkvshare.so.0")]
    elves += [os.path.join(pkg, "bin", n) for n in ("kvshared", "kvsctl", "kvsbench")]
    libs = os.path.join(os.path.dirname(pkg), "kvshare.libs")
    elves += [os.path.join(libs, n) for n in sorted(os.listdir(libs))]
    for f in elves:
        out = subprocess.run(["ldd", f], capture_output=True, text=True, check=True).stdout
        assert "not found" not in out, f"{f}: {out}"
        assert "libcuda" not in out, f"{f} links the CUDA driver: {out}"
        for line in out.splitlines():
            m = re.match(r"\s*(\S+) => (\S+)", line)
            if m and not m.group(2).startswith(os.path.dirname(pkg)):
                # Outside the wheel only the base system's libraries: glibc's
                # own (libresolv too: Kerberos under libzmq asks for it) and
                # the compiler's runtime, as manylinux allows.
                assert re.match(r"lib(c|m|dl|rt|pthread|resolv|gcc_s|stdc\+\+)\.so",
                                m.group(1)), \
                    f"{f} needs {m.group(1)} from outside the wheel ({m.group(2)})"
    ok(f"{len(elves)} ELF files resolve within the wheel and the base system, no libcuda")


def start_daemon(pkg: str) -> subprocess.Popen:
    exe = shutil.which("kvshared")
    assert exe == os.path.join(sys.prefix, "bin", "kvshared"), f"kvshared is {exe}"
    r, w = os.pipe()
    log = tempfile.TemporaryFile()
    d = subprocess.Popen([exe, "--host-size", "64M", "--ready-fd", str(w)],
                         pass_fds=(w,), stdout=log, stderr=log)
    os.close(w)
    with os.fdopen(r) as ready:
        line = ready.readline()  # EOF (""), not READY, if the daemon died
    if line != "READY\n":
        d.wait()
        log.seek(0)
        raise AssertionError(f"kvshared exited {d.returncode}: {log.read().decode()[-2000:]}")
    # The console script exec()ed the bundled program: same process.
    real = os.readlink(f"/proc/{d.pid}/exe")
    assert real == os.path.join(pkg, "bin", "kvshared"), f"pid {d.pid} is {real}"
    ok(f"kvshared (console script) ready on the default socket, pid {d.pid} is {real}")
    return d


def check_kvsctl(pkg: str, pid: int) -> None:
    p = subprocess.run(["kvsctl", "stats"], capture_output=True, text=True)
    assert p.returncode == 0, f"kvsctl stats: {p.returncode} {p.stderr}"
    # The daemon it reads is the one started above.
    assert re.search(rf"^\s+pid\s+{pid}$", p.stdout, re.M), p.stdout[:500]
    # The console script's exit status is the program's.
    want = subprocess.run([os.path.join(pkg, "bin", "kvsctl"), "--no-such-option"],
                          capture_output=True).returncode
    got = subprocess.run(["kvsctl", "--no-such-option"], capture_output=True).returncode
    assert got == want != 0, f"kvsctl --no-such-option: {got}, the program's {want}"
    ok(f"kvsctl stats reads that daemon (pid {pid}); a usage error exits {got} as the program does")


def check_round_trip() -> None:
    import numpy as np

    import kvshare

    layout = kvshare.Layout(model="wheel-check", layers=2, kv_heads=2, head_dim=64,
                            block_tokens=16, dtype="fp16")
    tokens = list(range(1000, 1000 + 16 * 5))
    with kvshare.Client(layout=layout) as c:
        hashes = c.hash_tokens(tokens)
        size = c.block_bytes
        rng = np.random.default_rng(7)
        data = [rng.integers(0, 256, size, dtype=np.uint8) for _ in hashes]
        with c.reserve(hashes) as w:
            assert list(w.new) == list(range(len(hashes))), w.statuses
            for i in w.new:
                w.view(i)[:] = data[i]
        with c.lookup(hashes) as hit:
            assert hit.hits == len(hashes), f"{hit.hits} hits of {len(hashes)}"
            for i in range(hit.hits):
                assert hit.view(i).tobytes() == data[i].tobytes(), f"block {i} differs"
    ok(f"round trip: {len(hashes)} blocks of {size} bytes reserved, written, "
       "committed, looked up, read back equal")


def readme_quick_start() -> str:
    """The first python block of the README's "Python" quick start."""
    text = open(README).read()
    m = re.search(r"^### Python.*?^```python\n(.*?)^```", text, re.M | re.S)
    assert m, f"{README}: no ```python block under a '### Python' heading"
    return m.group(1)


def check_readme() -> None:
    code = readme_quick_start()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, f"README's Python quick start: {p.returncode}\n{p.stderr}"
    ok(f"README's Python quick start runs: {p.stdout.strip()}")


def check_connector() -> None:
    """kvshare.vllm_connector needs torch and vLLM: where they are missing the
    import must fail on them (the module is in the wheel and is fine up to
    there); where they are there it must import."""
    try:
        importlib.import_module("kvshare.vllm_connector")
        ok("import kvshare.vllm_connector")
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        assert top in ("torch", "vllm"), f"kvshare.vllm_connector: {e!r}"
        ok(f"import kvshare.vllm_connector stops only at {top}, not installed here")


def main() -> None:
    pkg = check_environment()
    check_linkage(pkg)
    d = start_daemon(pkg)
    try:
        check_kvsctl(pkg, d.pid)
        check_round_trip()
        check_readme()
    finally:
        d.send_signal(signal.SIGTERM)
        rc = d.wait()
    assert rc == 0, f"kvshared exited {rc} after SIGTERM"
    ok("kvshared stopped by SIGTERM, exit status 0")
    check_connector()


if __name__ == "__main__":
    main()
