#!/usr/bin/env bash
# build.sh - install missing dependencies, then configure and build kvshare.
#
#   scripts/build.sh [extra cmake -D options]
#
# Builds into ${BUILD_DIR:-build} (relative to the repository root) with
# warnings as errors. Extra arguments go to the configure step, e.g.
#   BUILD_DIR=build-asan scripts/build.sh -DKVS_SANITIZE=ON
# Running it again only rebuilds what changed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${BUILD_DIR:-build}

scripts/deps.sh

# Configure every time (a second or less with a warm cache) so that the
# options above always hold, even in a build folder configured otherwise.
# Its chatter is shown only when it fails.
log=$(mktemp -t kvshare-cmake.XXXXXX)
trap 'rm -f "$log"' EXIT
if ! cmake -S . -B "$BUILD_DIR" -DKVS_WERROR=ON \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$log" 2>&1; then
	cat "$log" >&2
	echo "build.sh: cmake configure failed" >&2
	exit 1
fi
# Warnings from configure (a deprecated call, a missing optional package)
# are worth seeing even when it succeeds.
grep -A8 -E '^CMake (Warning|Deprecation Warning)' "$log" >&2 || true

cmake --build "$BUILD_DIR" -j"$(nproc)"
