"""The package's mirror of the C ABI against the compiler's: abi_dump
(tests/python_abi/abi_dump.c, built with the tree) prints every constant of
client/kvshare.h and kvs_types.h and the layout of every struct the package
passes to libkvshare; kvshare/_abi.py must be what scripts/python_abi.py
makes of it, the ctypes structs must lay out as C does, and every constant
must have its Python name."""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import re
import subprocess
import sys

import pytest

import kvshare
from kvshare import _abi, client, errors

# The module (kvshare._lib, as an attribute, is the loaded library).
_lib = importlib.import_module("kvshare._lib")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
DUMP = os.path.join(BUILD, "tests", "abi_dump")
HEADERS = [os.path.join(ROOT, "client", "kvshare.h"),
           os.path.join(ROOT, "proto", "kvs_types.h")]


def _generator():
    spec = importlib.util.spec_from_file_location(
        "python_abi", os.path.join(ROOT, "scripts", "python_abi.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.fixture(scope="module")
def dump() -> dict:
    assert os.path.exists(DUMP), f"{DUMP} is missing: build the tree (scripts/build.sh)"
    return _generator().dump(DUMP)


def test_generated_module_is_current(dump):
    """_abi.py is what the generator makes of today's headers: a constant or
    a struct changed in C without regenerating fails here."""
    with open(_abi.__file__) as f:
        have = f.read()
    want = _generator().render(dump)
    assert have == want, "kvshare/_abi.py is stale: run scripts/python_abi.py"


def test_check_mode(dump, tmp_path):
    """scripts/python_abi.py --check passes on the tree as it is and fails
    on a module one constant of which drifted from C."""
    script = os.path.join(ROOT, "scripts", "python_abi.py")
    stale = tmp_path / "_abi.py"
    with open(_abi.__file__) as f:
        text = f.read()
    stale.write_text(text.replace("KVS_TIER_REMOTE = 4", "KVS_TIER_REMOTE = 5"))
    assert stale.read_text() != text
    for module, rc in ((_abi.__file__, 0), (str(stale), 1)):
        r = subprocess.run([sys.executable, script, "--check", "--dump", DUMP,
                            "--module", module], capture_output=True, text=True)
        assert r.returncode == rc, (module, r.stderr)


def test_every_header_constant_is_dumped(dump):
    """abi_dump lists every constant the public headers declare (an enum
    value or a #define with a value), so a new one cannot be left out."""
    declared = []
    for path in HEADERS:
        with open(path) as f:
            text = f.read()
        declared += re.findall(r"^\s*(KVS\w*)\s*=", text, re.M)
        declared += re.findall(r"^\s*#define\s+(KVS\w*)[ \t]+\S", text, re.M)
    assert declared, "no constant found in the headers"
    missing = [c for c in declared if c not in dump["constants"]]
    assert missing == [], f"constants abi_dump does not print: {missing}"
    for name, value in dump["constants"].items():
        assert getattr(_abi, name) == value


def test_structs_lay_out_as_in_c(dump):
    """Every struct the package passes has the compiler's size and every
    field its offset and size."""
    mirrored = {"kvs_hash": _lib.Hash, "kvs_layout": _lib.CLayout, "kvs_block": _lib.CBlock,
                "kvs_paged_cache": _lib.CPagedCache, "kvs_engine_report": _lib.CEngineReport,
                "kvs_block_desc": _lib.CBlockDesc}
    assert set(mirrored) == set(dump["structs"])
    for name, cls in mirrored.items():
        s = dump["structs"][name]
        assert ctypes.sizeof(cls) == s["size"], name
        assert [f for f, _ in cls._fields_] == [f[0] for f in s["fields"]], name
        for field, off, size, _ in s["fields"]:
            assert (getattr(cls, field).offset, getattr(cls, field).size) == (off, size), \
                f"{name}.{field}"
    h = dump["structs"]["kvs_hash"]
    assert kvshare.HASH_DTYPE.itemsize == h["size"]
    assert [(f, kvshare.HASH_DTYPE.fields[f][1]) for f in kvshare.HASH_DTYPE.names] == \
        [(f[0], f[1]) for f in h["fields"]]
    assert dump["types"]["kvs_lease"] == ctypes.sizeof(ctypes.c_uint64)


def _named(dump, prefix, skip=()):
    return {k: v for k, v in dump["constants"].items() if k.startswith(prefix) and k not in skip}


def test_every_constant_has_its_python_name(dump):
    """Error codes, dtypes, tiers (the remote tier included), statuses,
    flags and limits: each C constant has its name in the package, with
    the C value."""
    for name, value in _named(dump, "KVS_E_", ("KVS_E_BASE", "KVS_E_LAST")).items():
        assert getattr(errors, name[len("KVS_"):]) == value, name
    assert {f"KVS_DTYPE_{k.upper()}": v for k, v in kvshare.DTYPES.items()} == \
        _named(dump, "KVS_DTYPE_")
    for name, value in _named(dump, "KVS_TIER_", ("KVS_TIER_NONE",)).items():
        assert getattr(kvshare, name[len("KVS_"):]) == value, name
        assert kvshare.TIER_NAMES[value] == name[len("KVS_TIER_"):].lower()
    for name, value in _named(dump, "KVS_BLOCK_").items():
        assert getattr(kvshare, name[len("KVS_BLOCK_"):]) == value, name
        assert client.STATUS_NAMES[value] == name[len("KVS_BLOCK_"):].lower()
    for name in ("KVS_CONNECT_GPU", "KVS_CONNECT_NO_FASTPATH", "KVS_QUERY_REMOTE",
                 "KVS_MAX_HASHES"):
        assert getattr(client, name[len("KVS_"):]) == dump["constants"][name], name
    assert (_lib.VERSION_MAJOR, _lib.VERSION_MINOR) == \
        (dump["constants"]["KVSHARE_VERSION_MAJOR"], dump["constants"]["KVSHARE_VERSION_MINOR"])
    assert kvshare.library_version() >= (_lib.VERSION_MAJOR, _lib.VERSION_MINOR)


def test_public_import_paths():
    """The names kvshare.client held before it was split are still there."""
    for name in ("Client", "Layout", "Block", "PagedCache", "ReadLease", "WriteLease",
                 "HASH_DTYPE", "DTYPES", "dtype_code", "default_socket_path", "_DTYPE_ALIASES",
                 "TIER_HOST", "TIER_REMOTE", "HIT", "NEW", "MAX_HASHES", "QUERY_REMOTE"):
        assert hasattr(client, name), name
    assert kvshare.Client is client.Client
    assert kvshare.PagedCache is client.PagedCache


def test_import_refuses_a_layout_ctypes_gets_wrong():
    """The check the package runs at import: a ctypes struct that does not
    lay out as the compiler's (here kvs_block with a 32-bit offset) raises
    ImportError rather than passing corrupt structs to the library."""

    class Wrong(ctypes.Structure):
        _fields_ = [("offset", ctypes.c_uint32), ("gen", ctypes.c_uint32),
                    ("tier", ctypes.c_uint8), ("status", ctypes.c_uint8)]

    with pytest.raises(ImportError, match="kvs_block"):
        _lib._check_layout(Wrong, "kvs_block")
    _lib._check_layout(_lib.CBlock, "kvs_block")
