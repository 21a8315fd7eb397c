"""The wheel's console scripts: kvshared, kvsctl and kvsbench.

Each replaces the Python process with the program of that name that the
wheel bundles (kvshare/bin/), with the same arguments: so the exit status,
the signals (Ctrl-C, a supervisor's SIGTERM) and the process id are the
program's own, and nothing of Python stays running beside it.

A module of its own, outside the kvshare package: finding the programs does
not import kvshare (numpy, libkvshare), so a program starts even where
KVSHARE_LIB names a library the package would refuse.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _exec(name: str) -> None:
    spec = importlib.util.find_spec("kvshare")
    dirs = list(spec.submodule_search_locations or []) if spec else []
    for d in dirs:
        path = os.path.join(d, "bin", name)
        if os.access(path, os.X_OK):
            sys.stdout.flush()
            sys.stderr.flush()
            os.execv(path, [name, *sys.argv[1:]])
    sys.exit(f"{name}: no kvshare/bin/{name} in {dirs or 'no kvshare package'}: "
             "the programs come with the kvshare wheel (scripts/wheel.sh), "
             "not with the pure-Python package (pip install ./client/python)")


def kvshared() -> None:
    _exec("kvshared")


def kvsctl() -> None:
    _exec("kvsctl")


def kvsbench() -> None:
    _exec("kvsbench")
