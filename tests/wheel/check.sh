#!/usr/bin/env bash
# check.sh - install the kvshare wheel into a clean venv and run it as a
# user would: tests/wheel/check_wheel.py says what is checked.
#
#   tests/wheel/check.sh [WHEEL]
#
# WHEEL: a built wheel (default: build it with scripts/wheel.sh). The venv is
# new, in a temporary directory, made by this machine's python3 and holding
# the wheel and what pip installs for it (numpy); the checks run in it with
# an environment of their own: no KVSHARE_LIB, PYTHONPATH or
# LD_LIBRARY_PATH, PATH the venv's bin and the system's, a private
# XDG_RUNTIME_DIR (the daemon's default socket). Then, where the tests' vLLM
# venv exists (scripts/python_env.sh), kvshare.vllm_connector is imported
# there from the wheel's own copy of the package (installed beside, with
# --target: that venv is not touched).
# Exit status 77 (a skip, the reason on stderr) when the package index
# cannot be reached (for the build tools or numpy).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
say() { echo "check.sh: $*" >&2; }

if (($# > 0)); then
	whl=$(realpath "$1")
else
	rc=0
	whl=$(scripts/wheel.sh | tail -n 1) || rc=$?
	((rc == 0)) || exit "$rc"
	whl=$root/$whl
fi
[[ -f $whl ]] || { say "no wheel at $whl"; exit 1; }

tmp=$(mktemp -d -t kvshare-wheel-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -m 0700 "$tmp/run" "$tmp/home"

# The install: pip of the new venv, from the index for numpy.
if ! { python3 -m venv "$tmp/venv" &&
	"$tmp/venv/bin/python" -m pip install --quiet --retries 1 --timeout 60 "$whl"; } \
	>"$tmp/pip.log" 2>&1; then
	if ! timeout 60 "$tmp/venv/bin/python" -m pip download --no-deps --quiet \
		-d "$tmp/probe" pip >/dev/null 2>&1; then
		say "SKIP: the Python package index cannot be reached (pip install of $(basename "$whl") needs numpy)"
		exit 77
	fi
	tail -n 30 "$tmp/pip.log" >&2
	say "pip install $whl failed"
	exit 1
fi
say "installed $(basename "$whl") into a new venv"

cd "$tmp"
env -i HOME="$tmp/home" PATH="$tmp/venv/bin:/usr/bin:/bin" LANG=C.UTF-8 \
	XDG_RUNTIME_DIR="$tmp/run" "$tmp/venv/bin/python" \
	"$root/tests/wheel/check_wheel.py" "$root/README.md"

vpy=${KVS_PY_CACHE:-$HOME/.cache/kvshare}/vllm-venv/bin/python
if [[ -x $vpy ]]; then
	"$vpy" -m pip install --quiet --no-deps --no-index --target "$tmp/pkg" "$whl"
	env -u KVSHARE_LIB PYTHONPATH="$tmp/pkg" "$vpy" -c '
import sys, kvshare, kvshare.vllm_connector as m
assert kvshare.__file__.startswith(sys.argv[1]), kvshare.__file__
print("check_wheel: ok import kvshare.vllm_connector with vLLM, from the wheel:", m.__file__)
' "$tmp/pkg"
else
	say "no vLLM venv at ${vpy%/bin/python} (scripts/python_env.sh): the connector was imported without vLLM only"
fi
say "the wheel works: $(basename "$whl")"
