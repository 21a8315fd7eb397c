"""The facts of vLLM's KV connector base class that KvshareConnector must
match, read from its source without importing it (a newer vLLM than the one
installed cannot be imported here), as a small JSON manifest: for every
method of KVConnectorBase_V1, whether it is abstract, a classmethod or a
staticmethod, and its parameters (name, kind, whether it has a default).
vLLM's source is not copied: only those facts are kept.

    python connector_manifest.py WHEEL_OR_BASE_PY VERSION > connector_api/vllm-VERSION.json

WHEEL_OR_BASE_PY is a vLLM wheel (pip download vllm==VERSION --no-deps -d
DIR) or the base.py itself. test_vllm_versions.py reads the manifests, and
checks this reader against the installed vLLM's base class (ast against
inspect).
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
import zipfile

BASE_PY = "vllm/distributed/kv_transfer/kv_connector/v1/base.py"
CLASS = "KVConnectorBase_V1"


def _params(fn: ast.FunctionDef) -> list[dict]:
    """inspect.Parameter's names and kinds, from the AST."""
    a = fn.args
    pos = a.posonlyargs + a.args
    first_default = len(pos) - len(a.defaults)
    out = [{"name": p.arg,
            "kind": "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD",
            "default": i >= first_default} for i, p in enumerate(pos)]
    if a.vararg:
        out.append({"name": a.vararg.arg, "kind": "VAR_POSITIONAL", "default": False})
    out += [{"name": p.arg, "kind": "KEYWORD_ONLY", "default": d is not None}
            for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append({"name": a.kwarg.arg, "kind": "VAR_KEYWORD", "default": False})
    return out


def _decorators(fn: ast.FunctionDef) -> set[str]:
    names = set()
    for d in fn.decorator_list:
        if isinstance(d, ast.Attribute):
            names.add(d.attr)
        elif isinstance(d, ast.Name):
            names.add(d.id)
    return names


def manifest(source: str) -> dict:
    """The methods of CLASS in @source (base.py's text)."""
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS)
    methods = {}
    for fn in cls.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        dec = _decorators(fn)
        methods[fn.name] = {
            "abstract": "abstractmethod" in dec,
            "classmethod": "classmethod" in dec,
            "staticmethod": "staticmethod" in dec,
            "property": "property" in dec,
            "params": _params(fn),
        }
    return {"class": CLASS, "methods": methods}


def read_base(path: str) -> tuple[str, str]:
    """base.py's text and where it came from, from a wheel or the file."""
    if path.endswith(".whl"):
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with zipfile.ZipFile(path) as z:
            text = z.read(BASE_PY).decode()
        return text, f"{path.rsplit('/', 1)[-1]} (sha256 {digest}): {BASE_PY}"
    with open(path) as f:
        return f.read(), BASE_PY


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    text, source = read_base(sys.argv[1])
    out = {"vllm": sys.argv[2], "source": source, **manifest(text)}
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
