"""The vLLM versions KvshareConnector supports (docs/vllm.md, "Versions"):
it implements every abstract method of KVConnectorBase_V1, and every method
it overrides takes what the base class's callers pass, with the same names
and kinds, for

- the installed vLLM (the build the end-to-end tests run), read live with
  inspect;
- each version in connector_api/ (newer ones that cannot be installed
  here), read from the manifest connector_manifest.py made from its wheel.

The manifest reader itself is checked against the installed base class:
its facts from the source (ast) are inspect's.
"""

from __future__ import annotations

import glob
import inspect
import json
import os

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/python_env.sh installs it)")
import vllm_support  # noqa: E402, F401  (sets KVSHARE_LIB before kvshare is imported)
from connector_manifest import CLASS, manifest  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1 import base  # noqa: E402

from kvshare.vllm_connector import KvshareConnector  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFESTS = sorted(glob.glob(os.path.join(HERE, "connector_api", "vllm-*.json")))
POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")


def params_of(fn) -> list[dict]:
    """inspect's view of @fn's parameters, in the manifest's terms."""
    return [{"name": p.name, "kind": p.kind.name, "default": p.default is not p.empty}
            for p in inspect.signature(fn).parameters.values()]


def live_methods(cls) -> dict:
    """The manifest's facts of @cls's own methods, by inspect."""
    out = {}
    for name, raw in vars(cls).items():
        fn = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
        if isinstance(raw, property):
            fn = raw.fget
        if not inspect.isfunction(fn):
            continue
        out[name] = {"abstract": bool(getattr(fn, "__isabstractmethod__", False)),
                     "classmethod": isinstance(raw, classmethod),
                     "staticmethod": isinstance(raw, staticmethod),
                     "property": isinstance(raw, property),
                     "params": params_of(fn)}
    return out


def mismatches(name: str, want: list[dict], got: list[dict]) -> list[str]:
    """What a caller of the base method @want could pass that @got refuses
    or takes under another name."""
    out = []
    got_pos = [p for p in got if p["kind"] in POSITIONAL]
    got_by_name = {p["name"]: p for p in got}
    var_pos = any(p["kind"] == "VAR_POSITIONAL" for p in got)
    var_kw = any(p["kind"] == "VAR_KEYWORD" for p in got)
    for i, p in enumerate(q for q in want if q["kind"] in POSITIONAL):
        if i >= len(got_pos):
            if not var_pos:
                out.append(f"{name}: positional {p['name']!r} not taken")
            continue
        g = got_pos[i]
        if p["kind"] == "POSITIONAL_OR_KEYWORD" and g["name"] != p["name"] and i > 0:
            out.append(f"{name}: parameter {i} is {g['name']!r}, the base's {p['name']!r}")
        if p["default"] and not g["default"]:
            out.append(f"{name}: {p['name']!r} may be left out by callers; no default here")
    for p in want:
        if p["kind"] == "KEYWORD_ONLY":
            g = got_by_name.get(p["name"])
            if g is None and not var_kw:
                out.append(f"{name}: keyword {p['name']!r} not taken")
            elif g is not None and p["default"] and not g["default"]:
                out.append(f"{name}: keyword {p['name']!r} has no default here")
        if p["kind"] == "VAR_POSITIONAL" and not var_pos:
            out.append(f"{name}: *{p['name']} not taken")
        if p["kind"] == "VAR_KEYWORD" and not var_kw:
            out.append(f"{name}: **{p['name']} not taken")
    want_names = {p["name"] for p in want}
    for i, g in enumerate(got):
        extra = g["name"] not in want_names and g["kind"] not in ("VAR_POSITIONAL", "VAR_KEYWORD")
        if extra and not g["default"] and not (g["kind"] in POSITIONAL and i < len(
                [q for q in want if q["kind"] in POSITIONAL])):
            out.append(f"{name}: {g['name']!r} is required here, unknown to the base")
    return out


def problems(base_methods: dict) -> list[str]:
    """Why KvshareConnector does not fit a base class of @base_methods."""
    own = live_methods(KvshareConnector)
    out = []
    for name, m in sorted(base_methods.items()):
        if name not in own:
            if m["abstract"]:
                out.append(f"{name}: abstract in the base, not implemented")
            continue
        o = own[name]
        for what in ("classmethod", "staticmethod", "property"):
            if m[what] != o[what]:
                out.append(f"{name}: {what} {m[what]} in the base, {o[what]} here")
        out += mismatches(name, m["params"], o["params"])
    return out


def test_manifest_reader_agrees_with_inspect():
    with open(base.__file__) as f:
        from_source = manifest(f.read())
    assert from_source["class"] == CLASS
    live = live_methods(getattr(base, CLASS))
    assert from_source["methods"] == live


def test_installed_vllm():
    assert not KvshareConnector.__abstractmethods__
    assert problems(live_methods(getattr(base, CLASS))) == []


@pytest.mark.parametrize("path", MANIFESTS, ids=[os.path.basename(p) for p in MANIFESTS])
def test_newer_vllm(path):
    with open(path) as f:
        m = json.load(f)
    assert m["class"] == CLASS and m["methods"], path
    assert problems(m["methods"]) == [], m["vllm"]


def test_the_checker_sees_a_missing_method_and_a_renamed_argument():
    """problems() is not vacuous: a base with one more abstract method, and
    one whose wait_for_layer_load argument is named otherwise, are refused."""
    live = live_methods(getattr(base, CLASS))
    # A name the connector does not define: every method vLLM calls is its own
    # (the thin class in vllm_connector.py defines each, so each is checked).
    more = dict(live, prefetch_kv={"abstract": True, "classmethod": False,
                                   "staticmethod": False, "property": False,
                                   "params": [{"name": "self", "kind": "POSITIONAL_OR_KEYWORD",
                                               "default": False}]})
    assert problems(more) == ["prefetch_kv: abstract in the base, not implemented"]
    renamed = json.loads(json.dumps(live))
    renamed["wait_for_layer_load"]["params"][1]["name"] = "layer"
    assert problems(renamed) == [
        "wait_for_layer_load: parameter 1 is 'layer_name', the base's 'layer'"]
