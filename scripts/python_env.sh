#!/usr/bin/env bash
# python_env.sh - make (or reuse) the tests' Python environment and print
# its interpreter.
#
#   py=$(scripts/python_env.sh)
#
# A venv outside the repository, ${KVS_PY_CACHE:-$HOME/.cache/kvshare}/vllm-venv
# (about 6 GB: vLLM for CPUs, torch, transformers, pytest; the list is
# tests/vllm/requirements.txt), installed with uv once and reused while that
# list is unchanged; then SGLang's HiCache modules (tests/sglang/
# requirements.txt, --no-deps, a stamp of their own; a failure only makes the
# SGLang tests skip); then the kvshare package from client/python, installed
# with the venv's own pip on every run (pure Python: nothing is compiled).
# Exit status 77 (a skip, with the reason on stderr) when the venv is not
# ready and the package index cannot be reached; 1 on any other failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache=${KVS_PY_CACHE:-$HOME/.cache/kvshare}
venv=$cache/vllm-venv
boot=$cache/uvboot
req=tests/vllm/requirements.txt
ovr=tests/vllm/overrides.txt
stamp=$venv/.kvshare-requirements
# The interpreter: Debian's own python3 (deps.sh installs it, with venv and
# its headers) before whatever python3 comes first on PATH. A python3 built
# by hand (pyenv's, without PGO) runs the vLLM tests' imports and engine
# start-ups about 1.4x slower. The venv is made anew when it changes.
interp=$(command -v python3)
[[ -x /usr/bin/python3 ]] && interp=/usr/bin/python3
want=$({ cat "$req" "$ovr"; echo "$interp"; } | sha256sum | cut -d' ' -f1)
log=$(mktemp -t kvshare-pyenv.XXXXXX)
trap 'rm -f "$log"' EXIT

say() { echo "python_env.sh: $*" >&2; }

# Why an install failed: the index out of reach is a skip, anything else a
# failure (with the log's tail).
install_failed() {
	local tmp

	tmp=$(mktemp -d)
	if ! timeout 60 python3 -m pip download --no-deps --quiet -d "$tmp" pip >/dev/null 2>&1 &&
		! { [[ -x $boot/bin/pip ]] && timeout 60 "$boot/bin/pip" download --no-deps --quiet -d "$tmp" pip >/dev/null 2>&1; }; then
		rm -rf "$tmp"
		say "SKIP: the Python package index cannot be reached, and $venv is not ready: $1"
		exit 77
	fi
	rm -rf "$tmp"
	tail -n 30 "$log" >&2
	say "$1 failed"
	exit 1
}

mkdir -p "$cache"
if [[ ! -f $stamp || "$(<"$stamp")" != "$want" ]]; then
	say "setting up $venv (once; about 6 GB)"
	if [[ ! -x $boot/bin/uv ]]; then
		{ python3 -m venv "$boot" && "$boot/bin/pip" install --quiet uv; } >"$log" 2>&1 ||
			install_failed "installing uv"
	fi
	# Another interpreter's venv is not reused: its python is a link to it.
	if [[ -f $venv/pyvenv.cfg ]] &&
		! grep -qx "home = $(dirname "$(readlink -f "$interp")")" "$venv/pyvenv.cfg"; then
		rm -rf "$venv"
	fi
	"$boot/bin/uv" venv --quiet --seed --allow-existing -p "$interp" "$venv" >"$log" 2>&1 ||
		install_failed "creating the venv"
	"$boot/bin/uv" pip install --quiet -p "$venv/bin/python" -r "$req" --override "$ovr" \
		>"$log" 2>&1 || install_failed "installing $req"
	printf '%s' "$want" >"$stamp"
fi
# SGLang's HiCache modules for the kvshare.sglang tests: a step of its own
# with its own stamp, so the list above is not installed again for it. With
# --no-deps, so that nothing vLLM needs is replaced (tests/sglang/
# requirements.txt says why that is enough). A failure is not this script's:
# it is said here and in $sfail, and the SGLang tests skip with it.
sreq=tests/sglang/requirements.txt
sstamp=$venv/.kvshare-sglang
sfail=$venv/.kvshare-sglang-failed
swant=$(sha256sum <"$sreq" | cut -d' ' -f1)
if [[ ! -f $sstamp || "$(<"$sstamp")" != "$swant" ]]; then
	if "$venv/bin/python" -m pip install --quiet --no-deps --retries 1 --timeout 30 \
		-r "$sreq" >"$log" 2>&1; then
		printf '%s' "$swant" >"$sstamp"
		rm -f "$sfail"
	else
		tail -n 20 "$log" >"$sfail"
		say "installing $sreq failed; the SGLang tests will skip (log: $sfail)"
	fi
fi
# The package as a user installs it: pip, from the source folder.
"$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation --force-reinstall \
	./client/python >"$log" 2>&1 || install_failed "pip install ./client/python"
echo "$venv/bin/python"
