"""kvshared --host-hugepages: the host arena on 2 MiB huge pages (a hugetlb
memfd), against a real daemon. A client maps it, writes and reads blocks
through it, its mapping is on 2 MiB pages and the memfd is sealed against
resizing as a 4K arena is; a daemon that asks for more
huge pages than are free does not start and says why. Needs free huge
pages: as root the test reserves them (vm.nr_hugepages, put back after),
otherwise it skips with the reason.
"""

from __future__ import annotations

import fcntl
import os
import re
import time

import numpy as np
import pytest

import kvshare

HUGE = 2 << 20
L = kvshare.Layout(model="huge-test", layers=4, kv_heads=4, head_dim=64, block_tokens=32,
                   dtype="fp32")  # 256 KiB blocks: 8 to a huge page


def meminfo(key: str) -> int:
    with open("/proc/meminfo") as f:
        return int(re.search(rf"^{key}:\s+(\d+)", f.read(), re.M).group(1))


def committed() -> int:
    """Huge pages in use or reserved for a mapping (a fault moves a page
    from the second to the first)."""
    return meminfo("HugePages_Total") - meminfo("HugePages_Free") + meminfo("HugePages_Rsvd")


def available() -> int:
    """Huge pages nobody has yet: free ones less those reserved by mappings."""
    return meminfo("HugePages_Free") - meminfo("HugePages_Rsvd")


@pytest.fixture
def huge_pages():
    """At least 40 available 2 MiB huge pages for the test (reserved for it when
    there are fewer and the sysctl is writable), the sysctl put back after."""
    want, path = 40, "/proc/sys/vm/nr_hugepages"
    if meminfo("Hugepagesize") != HUGE >> 10:
        pytest.skip("the default huge page is not 2 MiB")
    before = int(open(path).read())
    short = want - available()
    if short > 0:
        try:
            with open(path, "w") as f:
                f.write(str(before + short))
        except OSError as e:
            pytest.skip(f"fewer than {want} free huge pages and {path} not writable: {e}")
    try:
        if available() < want:
            pytest.skip(f"fewer than {want} free 2 MiB huge pages (memory too fragmented?)")
        yield available()
    finally:
        if short > 0:
            with open(path, "w") as f:
                f.write(str(before))


def arena_ranges() -> list[str]:
    """This process's mappings of the daemon's host arena (start-end)."""
    with open("/proc/self/maps") as f:
        return [line.split()[0] for line in f if "memfd:kvshare-host" in line]


def arena_page_kib() -> set[int]:
    """KernelPageSize of this process's mappings of the daemon's host arena."""
    with open("/proc/self/smaps") as f:
        text = f.read()
    return {int(m.group(1)) for m in re.finditer(
        r"^[0-9a-f]+-[0-9a-f]+ .*memfd:kvshare-host.*\n(?:(?!^[0-9a-f]+-).*\n)*?"
        r"KernelPageSize:\s+(\d+) kB", text, re.M)}


def test_host_arena_on_huge_pages(start_daemon, huge_pages):
    before = committed()
    d = start_daemon(["--host-size", "65M", "--host-hugepages"])  # rounded down to 64M
    assert committed() - before == 32  # all 64 MiB reserved at start
    toks = np.random.default_rng(3).integers(0, 50000, 40 * 32, dtype=np.uint32)
    with kvshare.Client(d.socket, L) as c:
        h = c.hash_tokens(toks)
        with c.reserve(h) as w:
            assert w.new == list(range(40))
            for i in w.new:
                w.view(i)[:] = np.random.default_rng(100 + i).integers(
                    0, 256, L.block_bytes, dtype=np.uint8)
        assert arena_page_kib() == {HUGE >> 10}  # every mapping of it: 2 MiB pages
        # Sealed as a 4K arena is: a client cannot resize it under the daemon.
        try:
            fd = os.open(f"/proc/self/map_files/{arena_ranges()[0]}", os.O_RDWR)
        except PermissionError:
            fd = None  # map_files needs CAP_SYS_ADMIN: the seals unchecked here
        if fd is not None:
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
                assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
                assert seals & fcntl.F_SEAL_SEAL
                for size in (0, 2 * (64 << 20)):
                    with pytest.raises(PermissionError):
                        os.ftruncate(fd, size)
            finally:
                os.close(fd)
        with kvshare.Client(d.socket, L) as c2, c2.lookup(h) as r:
            assert r.hits == 40
            for i in range(40):
                want = np.random.default_rng(100 + i).integers(0, 256, L.block_bytes,
                                                               dtype=np.uint8)
                assert np.array_equal(r.view(i), want)


def test_too_few_huge_pages_is_refused_with_the_reason(start_daemon, huge_pages):
    size = (huge_pages + 8) * 2  # MiB: more than are free
    with pytest.raises(RuntimeError) as e:
        start_daemon(["--host-size", f"{size}M", "--host-hugepages"])
    assert "huge pages" in str(e.value) and "nr_hugepages" in str(e.value), str(e.value)


def test_host_size_under_one_huge_page_is_refused(start_daemon):
    with pytest.raises(RuntimeError) as e:
        start_daemon(["--host-size", "1M", "--page-size", "64K", "--host-hugepages"])
    assert "2 MiB huge page" in str(e.value), str(e.value)


def test_take_over_keeps_the_huge_page_pool(start_daemon, huge_pages):
    """A successor started with --take-over adopts the hugetlb memfd: the
    blocks are served from it, bit for bit, and no second arena is reserved."""
    args = ["--host-size", "64M", "--host-hugepages"]
    before = committed()
    old = start_daemon(args)
    toks = np.random.default_rng(5).integers(0, 50000, 8 * 32, dtype=np.uint32)
    with kvshare.Client(old.socket, L) as c:
        h = c.hash_tokens(toks)
        with c.reserve(h) as w:
            for i in w.new:
                w.view(i)[:] = i + 1
    new = start_daemon([*args, "--take-over", old.socket])
    old.proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while True:  # the successor serves once it has rebuilt the table
        try:
            c = kvshare.Client(new.socket, L)
            break
        except kvshare.NoDaemonError:
            assert new.proc.poll() is None and time.monotonic() < deadline, new.log()
            time.sleep(0.02)
    with c, c.lookup(h) as r:
        assert r.hits == 8, new.log()
        for i in range(8):
            assert np.all(r.view(i) == i + 1)
    assert "starting cold" not in new.log(), new.log()
    assert committed() - before == 32  # one arena, adopted
