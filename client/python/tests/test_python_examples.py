"""The Python examples of README.md ("Python and vLLM") and docs/python.md
("Use"), taken from the files as they are and run as written, twice, against
a real kvshared on the default socket ($XDG_RUNTIME_DIR/kvshare/kvshared.sock,
the one the examples connect to): the first run finds a cold cache and
publishes every full block, the second hits them all and publishes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import kvshare

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
KVSHARED = os.environ.get("KVSHARED", os.path.join(BUILD, "kvshared"))


def python_block(doc: str, heading: str) -> str:
    """The first ```python block after the line @heading of @doc."""
    with open(os.path.join(ROOT, doc)) as f:
        lines = f.read().splitlines()
    i = lines.index(heading)
    start = next(j for j in range(i, len(lines)) if lines[j] == "```python") + 1
    end = next(j for j in range(start, len(lines)) if lines[j] == "```")
    return "\n".join(lines[start:end]) + "\n"


@pytest.fixture
def default_daemon(tmp_path):
    """kvshared with no --socket, $XDG_RUNTIME_DIR pointed at @tmp_path: the
    environment (for the examples) and the daemon."""
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path))
    sock = os.path.join(tmp_path, "kvshare", "kvshared.sock")
    log = open(tmp_path / "kvshared.log", "wb")
    d = subprocess.Popen([KVSHARED, "--host-size", "64M"], env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while True:
        try:
            kvshare.Client(sock).close()
            break
        except kvshare.NoDaemonError:
            assert d.poll() is None and time.monotonic() < deadline, "kvshared did not start"
            time.sleep(0.02)
    yield env, sock
    d.terminate()
    d.wait(timeout=30)


@pytest.mark.parametrize("doc, heading, cold, warm", [
    ("README.md", "## Python and vLLM",
     "0 of 62 blocks hit\n62 blocks published\n", "62 of 62 blocks hit\n0 blocks published\n"),
    ("docs/python.md", "## Use",
     "0 of 62 blocks hit, 62 published\n0\n", "62 of 62 blocks hit, 0 published\n62\n"),
])
def test_example_publishes_then_hits(default_daemon, tmp_path, doc, heading, cold, warm):
    env, sock = default_daemon
    script = tmp_path / "example.py"
    script.write_text(python_block(doc, heading))
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, f"{doc}'s example failed:\n{r.stderr}"
        outs.append(r.stdout)
    assert outs == [cold, warm]
    with kvshare.Client(sock) as c:
        assert c.stats()["blocks.committed"] == 62
